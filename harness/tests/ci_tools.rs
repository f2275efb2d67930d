//! The scripts CI's time depends on, on probe workspaces small enough to
//! build in seconds: `gates/test` (the README's test command, which runs the
//! test binaries several at a time) and `gates/seed-target` (a new target
//! directory started from a built one's libraries).
//!
//! What they must never do is what these trials try: `gates/test` must fail
//! when any binary fails and keep every binary's output whole (CI's check for
//! ignored trials reads it); `gates/seed-target` must never write into a
//! directory that exists, and what it seeds must leave cargo nothing to build
//! again.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_default()
}

fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap_or(Path::new("."))).unwrap();
    fs::write(path, text).unwrap();
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// A workspace of one crate, `probe`, with the given test files, and a copy
/// of gates/test at its gates/test (the script runs the workspace it sits in).
fn probe_workspace(dir: &Path, tests: &[(&str, &str)]) {
    write(&dir.join("Cargo.toml"), "[workspace]\nmembers = [\"probe\"]\nresolver = \"2\"\n");
    write(&dir.join("probe/Cargo.toml"), "[package]\nname = \"probe\"\nversion = \"0.1.0\"\nedition = \"2021\"\n");
    write(&dir.join("probe/src/lib.rs"), "pub fn two() -> u32 { 2 }\n");
    for (name, body) in tests {
        write(&dir.join("probe/tests").join(format!("{name}.rs")), body);
    }
    fs::create_dir_all(dir.join("gates")).unwrap();
    fs::copy(workspace().join("gates/test"), dir.join("gates/test")).unwrap();
}

fn gates_test(dir: &Path, target: &Path) -> Output {
    Command::new(dir.join("gates/test"))
        .env("CARGO_TARGET_DIR", target)
        .env_remove("CLINK_TEST_LANES")
        .output()
        .expect("gates/test runs")
}

const PASSING: &str = "#[test]\nfn two_is_two() { assert_eq!(probe::two(), 2); }\n\
                       #[test]\n#[ignore = \"probe\"]\nfn left_out() {}\n";
const FAILING: &str = "#[test]\nfn two_is_three() { assert_eq!(probe::two(), 3, \"the probe's failure\"); }\n";

#[test]
fn gates_test_fails_when_one_binary_fails_and_prints_every_output_whole() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("ws");
    probe_workspace(&dir, &[("passing", PASSING), ("failing", FAILING)]);
    let out = gates_test(&dir, &scratch.path().join("target"));
    let all = text(&out);
    assert_eq!(out.status.code(), Some(1), "a failing binary must fail the run:\n{all}");
    assert!(all.contains("     Running tests/failing.rs ("), "cargo's Running line for the failing binary:\n{all}");
    assert!(all.contains("the probe's failure"), "the failing binary's own output:\n{all}");
    assert!(all.contains("     Running tests/passing.rs ("), "the passing binary ran too:\n{all}");
    assert!(all.contains("test left_out ... ignored"), "an ignored trial stays visible to CI:\n{all}");
    let named: Vec<&str> = all.lines().skip_while(|l| !l.contains("failed after")).skip(1).collect();
    assert_eq!(named.len(), 1, "exactly the failing binary is named at the end:\n{all}");
    assert!(named[0].contains("tests/failing.rs"), "{all}");
}

#[test]
fn gates_test_passes_only_when_every_binary_passes() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("ws");
    probe_workspace(&dir, &[("passing", PASSING)]);
    let out = gates_test(&dir, &scratch.path().join("target"));
    let all = text(&out);
    assert_eq!(out.status.code(), Some(0), "{all}");
    assert!(all.contains("every test binary passed"), "{all}");
    // The unit tests of the library are a binary of their own, run as cargo runs them.
    assert!(all.contains("     Running unittests src/lib.rs ("), "{all}");
}

#[test]
fn gates_test_refuses_what_it_does_not_understand() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("ws");
    probe_workspace(&dir, &[("passing", PASSING)]);
    let out = Command::new(dir.join("gates/test")).arg("passing").output().unwrap();
    assert_eq!(out.status.code(), Some(2), "arguments go after --: {}", text(&out));
    let out = Command::new(dir.join("gates/test")).env("CLINK_TEST_LANES", "many").output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("CLINK_TEST_LANES=many"), "{}", text(&out));
}

fn seed(from: &Path, to: &Path) -> Output {
    Command::new(workspace().join("gates/seed-target")).arg(from).arg(to).output().unwrap()
}

fn cargo_build(dir: &Path, target: &Path) -> Output {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "--offline", "-v"])
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", target)
        .output()
        .unwrap()
}

#[test]
fn a_seeded_target_leaves_cargo_nothing_to_build_again() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("ws");
    probe_workspace(&dir, &[]);
    // A dependency with a build script, so that build/ and its output count too.
    write(&dir.join("dep/Cargo.toml"), "[package]\nname = \"dep\"\nversion = \"0.1.0\"\nedition = \"2021\"\n");
    write(&dir.join("dep/build.rs"), "fn main() { println!(\"cargo:rustc-env=DEP_SAYS=seeded\"); }\n");
    write(&dir.join("dep/src/lib.rs"), "pub const SAYS: &str = env!(\"DEP_SAYS\");\n");
    write(
        &dir.join("probe/Cargo.toml"),
        "[package]\nname = \"probe\"\nversion = \"0.1.0\"\nedition = \"2021\"\n[dependencies]\ndep = { path = \"../dep\" }\n",
    );
    let first = scratch.path().join("first");
    let built = cargo_build(&dir, &first);
    assert!(built.status.success(), "{}", text(&built));

    let second = scratch.path().join("second");
    let seeded = seed(&first.join("debug"), &second.join("debug"));
    assert_eq!(seeded.status.code(), Some(0), "{}", text(&seeded));
    let again = cargo_build(&dir, &second);
    let all = text(&again);
    assert!(again.status.success(), "{all}");
    assert!(all.contains("Fresh dep"), "the dependency is taken from the seed:\n{all}");
    assert!(
        !all.contains("Compiling dep") && !all.contains("Running `"),
        "nothing of dep is built or run again:\n{all}"
    );

    // Without the seed the same build compiles the dependency: the trial above could fail.
    let cold = cargo_build(&dir, &scratch.path().join("cold"));
    assert!(text(&cold).contains("Compiling dep"), "{}", text(&cold));
}

#[test]
fn seeding_never_writes_into_a_directory_that_exists() {
    let scratch = tempfile::tempdir().unwrap();
    let from = scratch.path().join("from/debug");
    for part in ["deps", "build", ".fingerprint"] {
        fs::create_dir_all(from.join(part)).unwrap();
    }
    write(&from.join("deps/libx.rlib"), "x");
    let to = scratch.path().join("to/debug");
    write(&to.join("keep"), "mine");
    let out = seed(&from, &to);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("exists"), "{}", text(&out));
    let left: Vec<_> = fs::read_dir(&to).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, vec![std::ffi::OsString::from("keep")], "the existing directory is untouched");

    // Nothing to seed from: exit 3, and nothing made.
    let nowhere = scratch.path().join("nowhere/debug");
    let out = seed(&scratch.path().join("absent"), &nowhere);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(!nowhere.exists());

    // What it copies: the libraries, not the executables beside them.
    write(&from.join("deps/probe-0123abcd"), "an executable");
    let fresh = scratch.path().join("fresh/debug");
    let out = seed(&from, &fresh);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(fresh.join("deps/libx.rlib").is_file());
    assert!(!fresh.join("deps/probe-0123abcd").exists(), "test executables are never copied");
}
