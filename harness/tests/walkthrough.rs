//! README.md's "From clone to first incident", run as written: every
//! fenced `sh` block of that section, in order, in one shell started at the
//! checkout's root with `TMPDIR` pointing into a temporary directory (so
//! the walkthrough's `mktemp -d` scratch directory is the test's), and the
//! built binaries first on `PATH`: this test's own, or the installed ones
//! `CLINK_WALKTHROUGH_BIN` names (CI installs them with
//! `gates/install-clink`, as the README says). Every command must exit 0,
//! or the status its own `# exits N` comment names; and the walkthrough
//! must leave the checkout's `git status` as it found it.

use std::path::{Path, PathBuf};
use std::process::Command;

const SECTION: &str = "## From clone to first incident";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// One command of the walkthrough: its text (continuation lines joined as
/// the shell joins them) and the exit status it is written to end with.
#[derive(Debug, PartialEq)]
struct Step {
    text: String,
    exits: i32,
}

/// The `sh` blocks of `section` in `readme`, as steps, in order.
fn steps(readme: &str, section: &str) -> Result<Vec<Step>, String> {
    let start = readme.find(section).ok_or_else(|| format!("README.md has no section {section:?}"))?;
    let body = &readme[start + section.len()..];
    let body = &body[..body.find("\n## ").unwrap_or(body.len())];
    let mut steps = Vec::new();
    let mut in_block = false;
    let mut pending = String::new();
    for line in body.lines() {
        if !in_block {
            in_block = line.trim_end() == "```sh";
            continue;
        }
        if line.trim_end() == "```" {
            in_block = false;
            if !pending.is_empty() {
                return Err(format!("a block ends inside a continued command: {pending}"));
            }
            continue;
        }
        pending.push_str(line);
        pending.push('\n');
        if !line.trim_end().ends_with('\\') {
            let text = std::mem::take(&mut pending);
            if !text.trim().is_empty() {
                steps.push(Step { exits: expected_exit(&text)?, text });
            }
        }
    }
    if in_block {
        return Err("the last sh block is not closed".into());
    }
    Ok(steps)
}

/// The status a step's `# exits N` comment names, 0 without one.
fn expected_exit(text: &str) -> Result<i32, String> {
    match text.split_once("# exits ") {
        None => Ok(0),
        Some((_, rest)) => {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().map_err(|_| format!("`# exits` names no status: {text}"))
        }
    }
}

/// The steps as one bash script that stops at the first step whose status
/// is not the one expected, naming it.
fn script(steps: &[Step]) -> String {
    let mut script = String::new();
    for (i, step) in steps.iter().enumerate() {
        let first = step.text.lines().next().unwrap_or_default().replace('\'', "'\\''");
        script.push_str(&step.text);
        script.push_str(&format!(
            "rc=$?; if [ \"$rc\" != {} ]; then echo 'walkthrough: step {} exited '\"$rc\"' (written to exit {}): {}' >&2; exit 1; fi\n",
            step.exits,
            i + 1,
            step.exits,
            first
        ));
    }
    script
}

fn git_status() -> Option<String> {
    let out = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=all"])
        .current_dir(workspace())
        .output()
        .ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn bin_dir() -> PathBuf {
    match std::env::var_os("CLINK_WALKTHROUGH_BIN") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_BIN_EXE_clink")).parent().expect("the binary is in a directory").to_path_buf(),
    }
}

#[test]
fn the_readme_walkthrough_runs_as_written_from_clone_to_a_passing_regression() {
    let readme = std::fs::read_to_string(workspace().join("README.md")).unwrap();
    let steps = steps(&readme, SECTION).unwrap();
    assert!(
        steps.iter().any(|s| s.text.contains("clink replay run-test")),
        "the walkthrough ends at a regression test"
    );
    let bin = bin_dir();
    assert!(bin.join("clink").is_file(), "no clink in {}", bin.display());
    let scratch = tempfile::tempdir().unwrap();
    let before = git_status();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let out = Command::new("bash")
        .args(["--noprofile", "--norc", "-c", &script(&steps)])
        .current_dir(workspace())
        .env("PATH", path)
        .env("TMPDIR", scratch.path())
        .env_remove("CLINK_FAULT")
        .env_remove("CLINK_PROTOCOL_TRACE_DIR")
        .output()
        .unwrap();
    let said = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the walkthrough failed:\n{said}");
    assert!(said.contains("passed"), "the frozen regression did not say it passed:\n{said}");
    let made: Vec<_> = std::fs::read_dir(scratch.path()).unwrap().collect();
    assert_eq!(made.len(), 1, "the walkthrough works in one scratch directory");
    assert_eq!(git_status(), before, "the walkthrough wrote into the checkout");
}

#[test]
fn the_reader_joins_continuations_reads_expected_exits_and_refuses_broken_blocks() {
    let readme =
        "# x\n## Walk\ntext\n```sh\na \\\n  b  # exits 137\nc\n```\n```text\nnot run\n```\n## Next\n```sh\nd\n```\n";
    let got = steps(readme, "## Walk").unwrap();
    assert_eq!(
        got,
        vec![Step { text: "a \\\n  b  # exits 137\n".into(), exits: 137 }, Step { text: "c\n".into(), exits: 0 }]
    );
    assert!(steps("## Walk\n```sh\na \\\n```\n", "## Walk").is_err(), "a block ending mid-command");
    assert!(steps("## Walk\n```sh\na\n", "## Walk").is_err(), "an unclosed block");
    assert!(steps("## Walk\n```sh\na # exits x\n```\n", "## Walk").is_err(), "an exit that is no number");
    assert!(steps("## Other\n", "## Walk").is_err(), "a missing section");
}

#[test]
fn a_step_that_exits_otherwise_than_written_stops_the_script_naming_it() {
    let step = |text: &str, exits| Step { text: format!("{text}\n"), exits };
    let run = |steps: &[Step]| Command::new("bash").args(["-c", &script(steps)]).output().unwrap();
    let passes = run(&[step("true", 0), step("(exit 137) # exits 137", 137), step("echo reached", 0)]);
    assert!(passes.status.success() && String::from_utf8_lossy(&passes.stdout).contains("reached"));
    for (wrong, named) in [
        (step("false", 0), "step 2 exited 1 (written to exit 0): false"),
        (step("true # exits 137", 137), "step 2 exited 0 (written to exit 137): true # exits 137"),
    ] {
        let out = run(&[step("true", 0), wrong, step("echo never", 0)]);
        assert_eq!(out.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&out.stderr).contains(named), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(!String::from_utf8_lossy(&out.stdout).contains("never"));
    }
}
