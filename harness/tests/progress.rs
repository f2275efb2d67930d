//! Progress on long commands: drawn on a terminal, never otherwise.
//! incident-collect, incident-verify and replay sweep run under a
//! pseudo-terminal (util-linux `script`, part of every Debian system) and must
//! draw their bar; with `--json`, or with standard error not a terminal, they
//! must write nothing but their result.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value as Json;

fn clink_path() -> &'static str {
    env!("CARGO_BIN_EXE_clink")
}

fn job() -> String {
    format!("{}/../fixtures/jobs/example/job.json", env!("CARGO_MANIFEST_DIR"))
}

fn quote(arg: &str) -> String {
    format!("'{}'", arg.replace('\'', r"'\''"))
}

/// Runs clink with `args` on a pseudo-terminal: standard output and error
/// both go to it, and come back as one text.
fn on_terminal(args: &[String]) -> (Option<i32>, String) {
    let line =
        std::iter::once(clink_path().to_string()).chain(args.iter().cloned()).map(|a| quote(&a)).collect::<Vec<_>>();
    let out = Command::new("script")
        .args(["-q", "-e", "-c", &line.join(" "), "/dev/null"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("util-linux script runs");
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
}

struct Run {
    dir: tempfile::TempDir,
}

impl Run {
    /// The example job run to its end with the recorder and traces on.
    fn new() -> Run {
        let dir = tempfile::tempdir().unwrap();
        let p = |n: &str| dir.path().join(n);
        let gen = Command::new(clink_path())
            .args(["gen-input", "--events", "2000", "--accounts", "20", "--out"])
            .arg(p("input"))
            .output()
            .unwrap();
        assert!(gen.status.success());
        let run = Command::new(clink_path())
            .args(["run", "--quiet", "--job", &job(), "--checkpoint-every-records", "500"])
            .args(["--input-dir", &s(&p("input")), "--output-dir", &s(&p("out")), "--checkpoint-dir", &s(&p("ck"))])
            .args(["--capture-dir", &s(&p("capture")), "--ha-dir", &s(&p("ha"))])
            .env("CLINK_PROTOCOL_TRACE_DIR", p("traces"))
            .output()
            .unwrap();
        assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
        Run { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn collect_args(&self, out: &str, json: bool) -> Vec<String> {
        let mut args = vec!["incident-collect".to_string()];
        for (flag, dir) in [("--checkpoint-dir", "ck"), ("--capture-dir", "capture"), ("--trace-dir", "traces")] {
            args.push(flag.into());
            args.push(s(&self.path(dir)));
        }
        args.extend(["--include-state", "--include-captures", "--out"].map(String::from));
        args.push(s(&self.path(out)));
        if json {
            args.push("--json".into());
        }
        args
    }

    fn sweep_args(&self, json: bool) -> Vec<String> {
        let mut args = vec!["replay".to_string(), "sweep".into(), "--capture-dir".into(), s(&self.path("capture"))];
        args.extend(["--checkpoint-dir".to_string(), s(&self.path("ck"))]);
        if json {
            args.push("--json".into());
        }
        args
    }
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

fn verify_args(bundle: &Path, json: bool) -> Vec<String> {
    let mut args = vec!["incident-verify".to_string(), "--profile".into(), "replay".into(), s(bundle)];
    if json {
        args.push("--json".into());
    }
    args
}

/// The text is one JSON document and nothing else (no bar, no escape sequence).
fn only_json(text: &str) {
    let doc: Result<Json, _> = serde_json::from_str(text.trim());
    assert!(doc.is_ok(), "not one JSON document: {text:?}");
    assert!(!text.contains('\u{1b}'), "an escape sequence beside the JSON: {text:?}");
}

fn quiet_when_piped(args: &[String]) -> Output {
    let out = Command::new(clink_path()).args(args).output().unwrap();
    assert!(out.stderr.is_empty(), "stderr is not a terminal, yet: {}", String::from_utf8_lossy(&out.stderr));
    out
}

#[test]
fn long_commands_draw_progress_on_a_terminal_and_nothing_elsewhere() {
    let run = Run::new();

    // incident-collect
    let (code, text) = on_terminal(&run.collect_args("b1", false));
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("collecting") && text.contains("files") && text.contains("published"), "{text:?}");
    let (code, text) = on_terminal(&run.collect_args("b2", true));
    assert_eq!(code, Some(0), "{text}");
    only_json(&text);
    assert!(quiet_when_piped(&run.collect_args("b3", false)).status.success());

    // incident-verify
    let bundle = run.path("b1");
    let (code, text) = on_terminal(&verify_args(&bundle, false));
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("verifying [") && text.contains("/9 checks"), "{text:?}");
    assert!(text.contains("replay.determinism"), "{text:?}");
    let (code, text) = on_terminal(&verify_args(&bundle, true));
    assert_eq!(code, Some(0), "{text}");
    only_json(&text);
    assert_eq!(quiet_when_piped(&verify_args(&bundle, false)).status.code(), Some(0));

    // replay sweep (epochs whose starting checkpoint was pruned are
    // unavailable, so its exit code is not the point here)
    let (_, text) = on_terminal(&run.sweep_args(false));
    assert!(text.contains("replaying [") && text.contains("epochs"), "{text:?}");
    let (_, text) = on_terminal(&run.sweep_args(true));
    only_json(&text);
    quiet_when_piped(&run.sweep_args(false));
}
