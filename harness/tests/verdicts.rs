//! Verdicts decided only on vouched, plain evidence.
//!
//! `vouched::`: a bundle whose files are replaced after `bundle.artifacts`
//! hashed them (at the moment a later check starts, through the verifier's
//! progress observer) must never be decided on the replacement: the check
//! judges what the model read (its result the same as with nothing
//! replaced), or refuses a file it reads again as changed. Each replacement
//! is itself valid evidence (a consistent snapshot and sidecar, a whole
//! capture, a well-formed trace), so a check that read it would pass on it.
//!
//! `trace_validate::`: `clink trace-validate` over a directory holding a link
//! or a FIFO is refused (exit 2) naming it, a TLC that hangs or crashes is not
//! established (exit 3), and a relative `--formal-dir` is taken against the
//! working directory. Trials that need TLC are ignored as `tlc` without it.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use clink_basics::status::Status;
use clink_engine::capture::format::{encode_capture, read_capture};
use clink_engine::checkpoint::{CheckpointLayout, FileStateBackend};
use clink_verify::{verify_observed, CheckResult, Profile, Selection, VerifyOptions, VerifyProgress};
use libtest_mimic::{Arguments, Failed, Trial};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn clink() -> Command {
    Command::new(env!("CARGO_BIN_EXE_clink"))
}

/// Runs one action when a named check starts.
struct TamperAt<F: FnMut()> {
    check: &'static str,
    action: Option<F>,
}

impl<F: FnMut()> VerifyProgress for TamperAt<F> {
    fn started(&mut self, check: &str) {
        if check == self.check {
            if let Some(mut action) = self.action.take() {
                action();
            }
        }
    }
}

/// Verifies a copy of the good bundle, replacing evidence with `tamper` when
/// `check` starts, and returns the check's result.
fn verify_tampered(profile: Profile, check: &'static str, tamper: impl FnMut(&Path)) -> Result<CheckResult, Failed> {
    let scratch = tempfile::tempdir().map_err(|e| e.to_string())?;
    let dir = scratch.path().join("good");
    common::copy_dir(&repo().join("fixtures/bundles/good"), &dir);
    let bundle = clink_bundle::read_bundle(&dir).map_err(|e| e.to_string())?;
    let mut tamper = tamper;
    let root = dir.clone();
    let mut progress = TamperAt { check, action: Some(move || tamper(&root)) };
    let options = VerifyOptions { profile, selection: Selection::default(), expected: None, formal: None };
    let report = verify_observed(&bundle, &options, &mut progress).map_err(|e| e.to_string())?;
    if report.checks.iter().find(|c| c.name == "bundle.artifacts").map(|c| c.status) != Some(Status::Passed) {
        return Err("bundle.artifacts did not pass before the tamper: the trial proves nothing".into());
    }
    report.checks.into_iter().find(|c| c.name == check).ok_or_else(|| format!("no {check} in the report").into())
}

/// The check was never decided on the replacement: it judged the bytes the
/// model read before (its result the same as with nothing replaced), or it
/// read the file again and refused it as changed since it was vouched for.
fn never_decided_on_replacement(
    profile: Profile,
    check: &'static str,
    tamper: impl FnMut(&Path),
) -> Result<(), Failed> {
    let tampered = verify_tampered(profile, check, tamper)?;
    let untouched = verify_tampered(profile, check, |_| {})?;
    let said = format!("{} {}", tampered.reason, tampered.details.join(" "));
    let same = (tampered.status, &tampered.reason, &tampered.evidence, &tampered.details)
        == (untouched.status, &untouched.reason, &untouched.evidence, &untouched.details);
    if same || (tampered.status == Status::Failed && said.contains("changed since the manifest vouched for it")) {
        return Ok(());
    }
    Err(format!(
        "{}: {:?}: {said}; with nothing replaced: {:?} {}",
        tampered.name, tampered.status, untouched.status, untouched.reason
    )
    .into())
}

fn snapshot_replaced_after_integrity() -> Result<(), Failed> {
    // op-4-0's snapshot of checkpoint 6 replaced by its checkpoint 2 state,
    // written as checkpoint 6 with a sidecar that agrees: a snapshot the
    // engine's own restore would take, that nobody vouched for.
    never_decided_on_replacement(Profile::Consistency, "state.decode", |root| {
        let backend = FileStateBackend::new(CheckpointLayout::new(root.join("checkpoint"), 1));
        let mut older = backend.read(1, "op-4-0", 2).expect("checkpoint 2's state");
        older.header.checkpoint = 6;
        backend.write("op-4-0", &older.header, &older.slots).expect("written");
    })
}

fn capture_replaced_after_integrity() -> Result<(), Failed> {
    // A whole capture of the same operator, subtask and epoch, one record shorter.
    never_decided_on_replacement(Profile::Replay, "replay.determinism", |root| {
        let path = root.join("capture/op-3/subtask-0/epoch-6.cap");
        let capture = read_capture(&std::fs::read(&path).expect("read")).expect("a capture");
        let mut events = capture.events.clone();
        let at = events.iter().rposition(|e| matches!(e, clink_engine::event::Event::Record(_))).expect("a record");
        events.remove(at);
        let mut header = capture.header.clone();
        header.stored_events -= 1;
        header.true_events -= 1;
        header.true_records -= 1;
        std::fs::write(&path, encode_capture(&header, &events)).expect("written");
    })
}

fn trace_replaced_after_integrity() -> Result<(), Failed> {
    // A worker trace one line shorter: still well formed.
    never_decided_on_replacement(Profile::Full, "protocol.trace_structure", |root| {
        let dir = root.join("traces");
        let worker = std::fs::read_dir(&dir)
            .expect("traces")
            .flatten()
            .map(|e| e.path())
            .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("worker-")))
            .expect("a worker trace");
        let text = std::fs::read_to_string(&worker).expect("read");
        let kept: Vec<&str> = text.lines().collect();
        let shorter = kept[..kept.len() - 1].join("\n") + "\n";
        std::fs::write(&worker, shorter).expect("written");
    })
}

fn marker_replaced_after_integrity() -> Result<(), Failed> {
    // The RESTORED record rewritten to name another restoring run: the
    // restore rule recomputed over it would be decided on bytes nobody vouched for.
    never_decided_on_replacement(Profile::Consistency, "checkpoint.restore_rule", |root| {
        let path = root.join("checkpoint/_jobs/1/RESTORED");
        let mut record: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).expect("read")).expect("json");
        record["epoch"] = (record["epoch"].as_u64().unwrap_or(1) + 7).into();
        std::fs::write(&path, serde_json::to_vec_pretty(&record).expect("json")).expect("written");
    })
}

// ---------------------------------------------------------------------------
// trace-validate

/// A copy of a recorded trace directory.
fn trace_copy(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("scratch");
    common::copy_dir(&repo().join("traces").join(name), dir.path());
    dir
}

fn trace_validate(dir: &Path, extra: &[&str]) -> Result<(i32, serde_json::Value), Failed> {
    let out = clink()
        .args(["trace-validate", "--json", "--trace"])
        .arg(dir)
        .args(extra)
        .output()
        .map_err(|e| e.to_string())?;
    let doc = serde_json::from_slice(&out.stdout).map_err(|e| {
        format!("{e}: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    })?;
    Ok((out.status.code().unwrap_or(-1), doc))
}

fn expect_refused(dir: &Path, named: &str) -> Result<(), Failed> {
    let (code, doc) = trace_validate(dir, &[])?;
    let reason = doc["reason"].as_str().unwrap_or_default();
    if code != 2 || !reason.contains(named) {
        return Err(format!("exit {code}, expected 2 naming {named:?}: {doc}").into());
    }
    Ok(())
}

fn a_link_in_the_trace_directory_is_refused() -> Result<(), Failed> {
    let dir = trace_copy("happy-path");
    let elsewhere = tempfile::tempdir().map_err(|e| e.to_string())?;
    std::fs::write(elsewhere.path().join("x"), b"").map_err(|e| e.to_string())?;
    std::os::unix::fs::symlink(elsewhere.path().join("x"), dir.path().join("worker-1-1.ndjson"))
        .map_err(|e| e.to_string())?;
    expect_refused(dir.path(), "worker-1-1.ndjson: a symbolic link")
}

fn a_fifo_in_the_trace_directory_is_refused() -> Result<(), Failed> {
    let dir = trace_copy("happy-path");
    let made = Command::new("mkfifo").arg(dir.path().join("notes")).status().map_err(|e| e.to_string())?;
    if !made.success() {
        return Err("mkfifo failed".into());
    }
    expect_refused(dir.path(), "notes: not a regular file")
}

/// A directory holding a `java` that answers `-version` as the real one does
/// and otherwise runs `body`.
fn fake_java(body: &str) -> Result<tempfile::TempDir, Failed> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let script = format!(
        "#!/bin/sh\nif [ \"$1\" = -version ]; then exec {} -version; fi\n{body}\n",
        which::which("java").map_err(|e| e.to_string())?.display()
    );
    let path = dir.path().join("java");
    std::fs::write(&path, script).map_err(|e| e.to_string())?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())?;
    Ok(dir)
}

fn with_path_first(dir: &Path) -> std::ffi::OsString {
    let mut paths = vec![dir.to_path_buf()];
    paths.extend(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()));
    std::env::join_paths(paths).unwrap_or_default()
}

fn not_established_with(java_body: &str, timeout: &str) -> Result<(), Failed> {
    let java = fake_java(java_body)?;
    let trace = repo().join("traces/happy-path");
    let out = clink()
        .args(["trace-validate", "--json", "--trace"])
        .arg(&trace)
        .env("PATH", with_path_first(java.path()))
        .env("CLINK_TLC_TIMEOUT_SECS", timeout)
        .output()
        .map_err(|e| e.to_string())?;
    let code = out.status.code().unwrap_or(-1);
    if code != 3 {
        return Err(format!("exit {code}, expected 3: {}", String::from_utf8_lossy(&out.stdout)).into());
    }
    Ok(())
}

fn a_tlc_that_hangs_is_not_established() -> Result<(), Failed> {
    not_established_with("sleep 60", "1")
}

fn a_tlc_that_crashes_is_not_established() -> Result<(), Failed> {
    not_established_with("echo 'Error: the JVM crashed' >&2; exit 1", "60")
}

fn a_relative_formal_dir_is_taken_against_the_working_directory() -> Result<(), Failed> {
    let out = clink()
        .current_dir(repo())
        .args(["trace-validate", "--json", "--formal-dir", "formal", "--trace", "traces/happy-path"])
        .output()
        .map_err(|e| e.to_string())?;
    let code = out.status.code().unwrap_or(-1);
    if code != 0 {
        return Err(format!("exit {code}, expected 0: {}", String::from_utf8_lossy(&out.stdout)).into());
    }
    Ok(())
}

/// A rejection removes the generated modules unless --keep-modules is
/// given; then the directory the result names holds them and TLC's output.
fn a_rejection_leaves_no_scratch_directory_unless_asked() -> Result<(), Failed> {
    let trace = repo().join("traces/defect-ack_before_durable");
    for keep in [false, true] {
        let scratch = tempfile::tempdir().map_err(|e| e.to_string())?;
        let mut cmd = clink();
        cmd.args(["trace-validate", "--json", "--trace"]).arg(&trace).env("TMPDIR", scratch.path());
        if keep {
            cmd.arg("--keep-modules");
        }
        let out = cmd.output().map_err(|e| e.to_string())?;
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
        if out.status.code() != Some(1) || doc["verdict"] != "rejected" {
            return Err(format!("keep {keep}: expected a rejection (exit 1): {doc}").into());
        }
        let left: Vec<_> =
            std::fs::read_dir(scratch.path()).map_err(|e| e.to_string())?.flatten().map(|e| e.path()).collect();
        match (keep, left.as_slice(), doc["modules_dir"].as_str()) {
            (false, [], None) => {}
            (true, [dir], Some(named)) if Path::new(named) == dir && dir.join("tlc.out").is_file() => {}
            _ => return Err(format!("keep {keep}: left {left:?}, the result names {}", doc["modules_dir"]).into()),
        }
    }
    Ok(())
}

fn main() {
    let args = Arguments::from_args();
    let tools = clink_formal::locate(None, None);
    if let Err(why) = &tools {
        eprintln!("verdicts: trials needing TLC are ignored as `tlc`: {why}");
    }
    let tlc = |name: &str, f: fn() -> Result<(), Failed>| match &tools {
        Ok(_) => Trial::test(name, f),
        Err(_) => Trial::test(name, f).with_ignored_flag(true).with_kind("tlc"),
    };
    let trials = vec![
        Trial::test("vouched::a_snapshot_replaced_after_integrity", snapshot_replaced_after_integrity),
        Trial::test("vouched::a_capture_replaced_after_integrity", capture_replaced_after_integrity),
        Trial::test("vouched::a_trace_replaced_after_integrity", trace_replaced_after_integrity),
        Trial::test("vouched::a_marker_replaced_after_integrity", marker_replaced_after_integrity),
        Trial::test("trace_validate::a_link_in_the_directory", a_link_in_the_trace_directory_is_refused),
        Trial::test("trace_validate::a_fifo_in_the_directory", a_fifo_in_the_trace_directory_is_refused),
        tlc("trace_validate::a_tlc_that_hangs", a_tlc_that_hangs_is_not_established),
        tlc("trace_validate::a_tlc_that_crashes", a_tlc_that_crashes_is_not_established),
        tlc("trace_validate::a_relative_formal_dir", a_relative_formal_dir_is_taken_against_the_working_directory),
        tlc("trace_validate::a_rejection_leaves_no_scratch", a_rejection_leaves_no_scratch_directory_unless_asked),
    ];
    libtest_mimic::run(&args, trials).exit();
}
