//! What the suites that run against the real services share: the services'
//! env file as `gates/services start` wrote it, and one bounded `clink` run.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The services' env file, with every key of `required` in it.
pub fn services(required: &[&str]) -> Result<BTreeMap<String, String>, String> {
    let path = std::env::var("CLINK_SERVICES_ENV").unwrap_or_else(|_| {
        format!("{}/clink-services.env", std::env::var("TMPDIR").unwrap_or_else(|_| "/tmp".into()))
    });
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e} (run gates/services start)"))?;
    let env: BTreeMap<String, String> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    match required.iter().find(|key| !env.contains_key(**key)) {
        Some(key) => Err(format!("{path} names no {key}")),
        None => Ok(env),
    }
}

/// A run may not hang the suite.
const RUN_BOUND: Duration = Duration::from_secs(180);

/// Runs `cmd` with its output in `dir`'s stdout.log and stderr.log; a run
/// past the bound is killed and fails the trial.
pub fn run_bounded(cmd: &mut Command, dir: &Path) -> Output {
    let (out_path, err_path) = (dir.join("stdout.log"), dir.join("stderr.log"));
    let mut child = cmd
        .stdout(std::fs::File::create(&out_path).expect("stdout log"))
        .stderr(std::fs::File::create(&err_path).expect("stderr log"))
        .spawn()
        .expect("clink run starts");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for clink run") {
            break status;
        }
        if started.elapsed() > RUN_BOUND {
            let _ = child.kill();
            let _ = child.wait();
            panic!("clink run did not finish within {RUN_BOUND:?}: {cmd:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: std::fs::read(&out_path).unwrap_or_default(),
        stderr: std::fs::read(&err_path).unwrap_or_default(),
    }
}

/// Whether the run ended by SIGKILL (a fault point's kill).
pub fn killed(out: &Output) -> bool {
    use std::os::unix::process::ExitStatusExt;
    out.status.signal() == Some(9)
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// An Apache Kafka broker of a trial's own, started by `gates/services start
/// --only kafka` with an env file in the trial's directory, so that it can be
/// SIGKILLed and started again on the same data (`gates/services
/// restart-kafka`) without touching the broker other trials share. Stopped
/// (and its directory removed) when dropped.
pub struct PrivateKafka {
    env_file: std::path::PathBuf,
    pub bootstrap: String,
}

impl PrivateKafka {
    pub fn start(dir: &Path) -> Result<PrivateKafka, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let env_file = dir.join("kafka.env");
        let out = gates_services(&["start", "--only", "kafka"], &env_file)?;
        if !out.status.success() {
            return Err(format!("gates/services start --only kafka: {:?}\n{}", out.status, stderr(&out)));
        }
        let mut broker = PrivateKafka { env_file, bootstrap: String::new() };
        broker.bootstrap = broker.value("CLINK_KAFKA_BOOTSTRAP")?;
        Ok(broker)
    }

    fn value(&self, key: &str) -> Result<String, String> {
        let text = std::fs::read_to_string(&self.env_file).map_err(|e| format!("{}: {e}", self.env_file.display()))?;
        text.lines()
            .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
            .map(str::to_string)
            .ok_or_else(|| format!("{} names no {key}", self.env_file.display()))
    }

    /// SIGKILLs the broker and waits until it is gone.
    pub fn kill(&self) -> Result<(), String> {
        let pid: i32 = self.value("CLINK_KAFKA_PID")?.parse().map_err(|e| format!("CLINK_KAFKA_PID: {e}"))?;
        let status = Command::new("kill").args(["-KILL", &pid.to_string()]).status().map_err(|e| e.to_string())?;
        if !status.success() {
            return Err(format!("kill -KILL {pid}: {status}"));
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Path::new(&format!("/proc/{pid}")).exists() {
            if Instant::now() > deadline {
                return Err(format!("the broker (pid {pid}) outlived SIGKILL by 10 s"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Starts the killed broker again on its data; returns once it answers.
    pub fn restart(&self) -> Result<(), String> {
        let out = gates_services(&["restart-kafka"], &self.env_file)?;
        if !out.status.success() {
            return Err(format!("gates/services restart-kafka: {:?}\n{}", out.status, stderr(&out)));
        }
        Ok(())
    }
}

impl Drop for PrivateKafka {
    fn drop(&mut self) {
        let _ = gates_services(&["stop"], &self.env_file);
    }
}

fn gates_services(args: &[&str], env_file: &Path) -> Result<Output, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../gates/services");
    Command::new(&script)
        .args(args)
        .arg("--env")
        .arg(env_file)
        .output()
        .map_err(|e| format!("{}: {e}", script.display()))
}
