//! The gates' own rules: `--help` runs nothing; the incident gate refuses
//! test-only settings, proves isolation before it builds or runs anything,
//! ends NOT ESTABLISHED (exit 3, never 1 and never 0) when isolation is
//! unavailable, and never passes with ALLOW_UNISOLATED=1.

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
