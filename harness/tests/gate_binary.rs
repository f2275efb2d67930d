//! Which clink a gate runs (gates/lib.sh): with CLINK_BIN set, that binary,
//! checked first (an absolute path to a program whose --version says exactly
//! `clink <this version>`), and cargo is never called for it; without it,
//! the release build cargo makes, checked the same way. A defect or test
//! build (a target subdirectory or features) is always cargo's, whatever
//! CLINK_BIN says.
//!
//! The refusals run the real test build of clink (it says so in --version).
//! Where the property is which program the gate runs, a recording program
//! stands in for a release clink (a release build is not something a test
//! build can make), and a recording `cargo` first on PATH shows whether the
//! gate built anything; the gates themselves are the real scripts.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn write_program(path: &Path, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A scratch directory with a recording `cargo` (it fails) on a PATH of its own.
struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Scratch {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        write_program(&bin.join("cargo"), &format!("echo \"$*\" >> {}/cargo.log\nexit 1\n", dir.path().display()));
        Scratch { dir }
    }
    fn path(&self) -> String {
        format!("{}:{}", self.dir.path().join("bin").display(), std::env::var("PATH").unwrap_or_default())
    }
    fn cargo_calls(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("cargo.log")).unwrap_or_default()
    }
    /// A program that says `says` for --version and records every other call.
    fn clink(&self, says: &str) -> PathBuf {
        let path = self.dir.path().join("clink");
        let log = self.dir.path().join("clink.log");
        let body = format!(
            "if [ \"$1\" = --version ]; then echo '{says}'; exit 0; fi\necho \"$*\" >> {}\nexit 0\n",
            log.display()
        );
        write_program(&path, &body);
        path
    }
    fn clink_calls(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("clink.log")).unwrap_or_default()
    }
    /// gates/example-job from this scratch directory (never the root), with `clink_bin`.
    fn example_job(&self, clink_bin: Option<&Path>) -> Output {
        let mut cmd = Command::new(root().join("gates/example-job"));
        cmd.args(["--events", "2000"]).current_dir(self.dir.path()).env("PATH", self.path());
        cmd.env_remove("CLINK_BIN");
        for (key, _) in std::env::vars() {
            if key.starts_with("CLINK_TEST_") {
                cmd.env_remove(key);
            }
        }
        if let Some(bin) = clink_bin {
            cmd.env("CLINK_BIN", bin);
        }
        cmd.output().unwrap()
    }
}

#[test]
fn with_clink_bin_the_gate_runs_that_binary_and_builds_nothing() {
    let s = Scratch::new();
    let fake = s.clink(&format!("clink {}", version()));
    let out = s.example_job(Some(&fake));
    let shown = text(&out);
    assert!(
        shown.contains(&format!("{:<52} passed", "check CLINK_BIN (runs, this version, no test build)")),
        "{shown}"
    );
    assert!(s.clink_calls().contains("gen-input --seed 1 --events 2000"), "CLINK_BIN was not run: {shown}");
    assert_eq!(s.cargo_calls(), "", "cargo was called although CLINK_BIN was set");
    // The stand-in is killed at no fault point, so the gate fails there, after the binary ran.
    assert_eq!(out.status.code(), Some(1), "{shown}");
}

#[test]
fn a_test_build_as_clink_bin_fails_its_step_and_nothing_runs() {
    let s = Scratch::new();
    let test_build = PathBuf::from(env!("CARGO_BIN_EXE_clink"));
    let out = s.example_job(Some(&test_build));
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert!(
        shown.contains(&format!("{:<52} FAILED", "check CLINK_BIN (runs, this version, no test build)")),
        "{shown}"
    );
    assert!(shown.contains("(test build: defect switches compiled in)', not 'clink "), "{shown}");
    assert!(shown.contains(&format!("{:<52} skipped", "generate 2000 events")), "{shown}");
    assert_eq!(s.cargo_calls(), "");
}

#[test]
fn a_relative_missing_or_other_version_clink_bin_is_refused() {
    let s = Scratch::new();
    let other = s.clink("clink 0.0.0-other");
    for (bin, says) in [
        (PathBuf::from("target/release/clink"), "target/release/clink: not an absolute path".to_string()),
        (PathBuf::from("/nonexistent/clink"), "/nonexistent/clink: no such program".into()),
        (other.clone(), format!("says 'clink 0.0.0-other', not 'clink {}'", version())),
    ] {
        let out = s.example_job(Some(&bin));
        let shown = text(&out);
        assert_eq!(out.status.code(), Some(1), "{shown}");
        assert!(shown.contains(&says) && shown.contains("FAILED"), "wanted {says:?}: {shown}");
    }
    assert_eq!(s.clink_calls(), "", "a refused binary was run");
}

#[test]
fn without_clink_bin_the_gate_builds_the_release_clink_with_cargo() {
    let s = Scratch::new();
    let out = s.example_job(None);
    let shown = text(&out);
    assert!(shown.contains(&format!("{:<52} FAILED", "build clink (release)")), "{shown}");
    assert_eq!(s.cargo_calls().trim(), "build --release --quiet -p clink-harness --bin clink", "{shown}");
}

#[test]
fn variant_builds_are_cargos_whatever_clink_bin_says() {
    let s = Scratch::new();
    let fake = s.clink(&format!("clink {}", version()));
    let script = format!(
        "source {}/gates/lib.sh; clink_path record-traces; build_clink record-traces defects; echo rc=$?",
        root().display()
    );
    let out = Command::new("bash")
        .args(["-c", &script])
        .env("PATH", s.path())
        .env("CLINK_BIN", &fake)
        .env("CARGO_TARGET_DIR", s.dir.path().join("target"))
        .output()
        .unwrap();
    let shown = text(&out);
    let target = s.dir.path().join("target/record-traces/release/clink");
    assert!(shown.contains(&target.display().to_string()) && shown.contains("rc=1"), "{shown}");
    assert_eq!(s.cargo_calls().trim(), "build --release --quiet -p clink-harness --bin clink --features defects");
    assert_eq!(s.clink_calls(), "");
}
