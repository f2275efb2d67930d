//! The gates' own rules: `--help` runs nothing; the incident gate refuses
//! test-only settings, proves isolation before it builds or runs anything,
//! ends NOT ESTABLISHED (exit 3, never 1 and never 0) when isolation is
//! unavailable, and never passes with ALLOW_UNISOLATED=1. `gates/services`
//! hands its variables to a shell as exports, and over services it already
//! started either reuses them or says what is wrong, never leaving the user
//! with nothing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn gate(name: &str) -> Command {
    let mut cmd = Command::new(root().join("gates").join(name));
    cmd.current_dir(root());
    for (key, _) in std::env::vars() {
        if key.starts_with("CLINK_TEST_") || key == "ALLOW_UNISOLATED" {
            cmd.env_remove(key);
        }
    }
    cmd
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// A PATH whose `unshare` always fails: isolation is unavailable.
fn without_isolation(dir: &Path) -> String {
    use std::os::unix::fs::PermissionsExt;
    let fake = dir.join("unshare");
    std::fs::write(&fake, "#!/bin/sh\nexit 1\n").unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    format!("{}:{}", dir.display(), std::env::var("PATH").unwrap_or_default())
}

#[test]
fn every_gate_explains_itself_and_runs_nothing_for_help() {
    for entry in std::fs::read_dir(root().join("gates")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        if name.ends_with(".sh") || path.is_dir() || name.ends_with(".xml") {
            continue;
        }
        let started = std::time::Instant::now();
        let out = gate(&name).arg("--help").env("CARGO", "/nonexistent-cargo").output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{name} --help: {}", text(&out));
        assert!(out.stdout.len() > 80, "{name} --help says too little: {}", text(&out));
        assert!(started.elapsed().as_secs() < 10, "{name} --help did work");
    }
}

#[test]
fn the_incident_gate_refuses_test_only_settings() {
    let out = gate("incident-gate").env("CLINK_TEST_DEFECT", "broadcast_before_marker").output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("test-only settings are set (CLINK_TEST_DEFECT)"), "{}", text(&out));
}

#[test]
fn without_isolation_the_incident_gate_stops_first_and_is_not_established() {
    let dir = tempfile::tempdir().unwrap();
    let out = gate("incident-gate").env("PATH", without_isolation(dir.path())).output().unwrap();
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(3), "unavailable isolation is exit 3, never 1 or 0: {shown}");
    assert!(
        shown.contains("prove network isolation (before anything runs)") && shown.contains("UNAVAILABLE"),
        "{shown}"
    );
    assert!(!shown.contains("build "), "nothing is built before isolation is proven: {shown}");
    assert!(shown.contains("incident-gate: NOT ESTABLISHED"), "{shown}");
}

#[test]
fn with_allow_unisolated_the_incident_gate_runs_but_never_passes() {
    let dir = tempfile::tempdir().unwrap();
    let out = gate("incident-gate")
        .args(["--profile", "replay"])
        .env("PATH", without_isolation(dir.path()))
        .env("ALLOW_UNISOLATED", "1")
        .output()
        .unwrap();
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(3), "{shown}");
    assert!(
        shown.contains("verify the copy (profile replay)")
            && shown.contains("committed output = independent reference"),
        "{shown}"
    );
    assert!(!shown.contains("incident-gate: PASSED"), "{shown}");
    assert!(shown.contains("incident-gate: NOT ESTABLISHED"), "{shown}");
}

/// A stand-in for a started service: a process whose working directory is
/// under the services directory (what `gates/services` takes as its own),
/// killed when dropped. It answers nothing.
struct FakeService(std::process::Child);

impl FakeService {
    fn start(services_dir: &Path) -> FakeService {
        FakeService(Command::new("sleep").arg("600").current_dir(services_dir).spawn().unwrap())
    }
    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for FakeService {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An env file as `gates/services start --only kafka` writes it, in `dir`,
/// recording `pid` as the broker on a port nothing listens on.
fn kafka_env_file(dir: &Path, pid: u32) -> PathBuf {
    let services_dir = dir.join("services");
    let file = dir.join("services.env");
    std::fs::write(
        &file,
        format!(
            "# written by gates/services start\nCLINK_SERVICES_DIR={}\nCLINK_KAFKA_BOOTSTRAP=127.0.0.1:9\n\
             CLINK_KAFKA_PID={pid}\nCLINK_KAFKA_IMPL=apache-kafka\nCLINK_SERVICES_STARTED=kafka\n",
            services_dir.display()
        ),
    )
    .unwrap();
    file
}

fn services(args: &[&str], env_file: &Path) -> Output {
    Command::new(root().join("gates/services"))
        .args(args)
        .arg("--env")
        .arg(env_file)
        .env_remove("CLINK_SERVICES_ENV")
        .output()
        .unwrap()
}

#[test]
fn services_env_exports_what_a_child_process_sees_and_prints_nothing_for_a_dead_service() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("services")).unwrap();
    let broker = FakeService::start(&dir.path().join("services"));
    let file = kafka_env_file(dir.path(), broker.pid());
    let in_a_shell = |setup: &str| {
        let script = format!("{setup}; sh -c 'echo \"bootstrap=$CLINK_KAFKA_BOOTSTRAP\"'");
        let out = Command::new("bash").args(["--noprofile", "--norc", "-c", &script]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let script = root().join("gates/services");
    let eval = format!("eval \"$({} env --env {})\"", script.display(), file.display());
    assert_eq!(in_a_shell(&eval), "bootstrap=127.0.0.1:9\n", "the exports reach a child process");
    // The variant the README used to show: sourcing the file sets shell
    // variables that no tool it runs ever sees.
    assert_eq!(in_a_shell(&format!(". {}", file.display())), "bootstrap=\n");

    drop(broker);
    let out = services(&["env"], &file);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(out.stdout.is_empty(), "nothing to eval for a service that is gone: {}", text(&out));
    assert!(text(&out).contains("kafka is not running"), "{}", text(&out));
    let out = services(&["env"], &dir.path().join("none.env"));
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("run gates/services start first"), "{}", text(&out));
}

#[test]
fn services_start_over_started_services_that_do_not_all_work_says_what_to_do_and_starts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("services")).unwrap();
    let broker = FakeService::start(&dir.path().join("services"));
    let file = kafka_env_file(dir.path(), broker.pid());
    let before = std::fs::read(&file).unwrap();

    let out = services(&["start", "--only", "kafka"], &file);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("kafka: running pid") && text(&out).contains("NOT answering"), "{}", text(&out));
    assert!(text(&out).contains("restart-kafka") && text(&out).contains("gates/services stop --env"), "{}", text(&out));

    let out = services(&["start"], &file);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("without clickhouse"), "a service asked for and never started: {}", text(&out));

    assert_eq!(std::fs::read(&file).unwrap(), before, "the env file is left as it was");
    let made: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(made.len(), 2, "nothing was started beside them");
}
