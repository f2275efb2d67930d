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
