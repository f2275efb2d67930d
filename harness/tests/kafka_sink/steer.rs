//! Runs of a scenario's job that a trial steers while they run: started as
//! children, paused at held fault points (`<point>@<id>=hold`, reported in
//! a directory of the run's own), released in the order a trial chooses,
//! and waited for with a bound.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use libtest_mimic::Failed;

/// A bound no steered run may outlive.
const RUN_BOUND: Duration = Duration::from_secs(240);

/// One run in progress: the child, where its held points report, and its logs.
pub struct Steered {
    child: Option<Child>,
    pub holds: PathBuf,
    logs: PathBuf,
    what: String,
}

impl Steered {
    /// Starts `cmd` with its held points reporting under `dir/<name>-holds`
    /// and its output in `dir/<name>.stdout|stderr`.
    pub fn start(mut cmd: Command, dir: &Path, name: &str) -> Result<Steered, Failed> {
        let holds = dir.join(format!("{name}-holds"));
        std::fs::create_dir_all(&holds)?;
        let logs = dir.join(name);
        let child = cmd
            .env("CLINK_FAULT_HOLD_DIR", &holds)
            .stdout(std::fs::File::create(logs.with_extension("stdout"))?)
            .stderr(std::fs::File::create(logs.with_extension("stderr"))?)
            .spawn()?;
        Ok(Steered { child: Some(child), holds, logs, what: name.to_string() })
    }

    /// Waits until the run reports that it is held at `at` (`point@id`).
    pub fn wait_held(&mut self, at: &str, within: Duration) -> Result<(), Failed> {
        let held = self.holds.join(format!("{at}.held"));
        let deadline = Instant::now() + within;
        while !held.exists() {
            if let Some(status) = self.child.as_mut().ok_or("no child")?.try_wait()? {
                return Err(
                    format!("{}: ended ({status}) before it was held at {at}:\n{}", self.what, self.stderr()).into()
                );
            }
            if Instant::now() > deadline {
                return Err(format!("{}: not held at {at} within {within:?}:\n{}", self.what, self.stderr()).into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Lets the thread held at `at` go on.
    pub fn release(&self, at: &str) -> Result<(), Failed> {
        std::fs::write(self.holds.join(format!("{at}.release")), b"")?;
        Ok(())
    }

    /// Waits for the run to end (killed past the bound, which fails the trial).
    pub fn finish(mut self) -> Result<Output, Failed> {
        let mut child = self.child.take().ok_or("no child")?;
        let deadline = Instant::now() + RUN_BOUND;
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{}: still running after {RUN_BOUND:?}:\n{}", self.what, self.stderr()).into());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        Ok(Output {
            status,
            stdout: std::fs::read(self.logs.with_extension("stdout")).unwrap_or_default(),
            stderr: std::fs::read(self.logs.with_extension("stderr")).unwrap_or_default(),
        })
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.logs.with_extension("stderr")).unwrap_or_default()
    }
}

impl Drop for Steered {
    /// A run a failed trial leaves behind is killed, not left holding.
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
