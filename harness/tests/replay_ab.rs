//! `clink replay ab` against real runs and real processes: the current build
//! against itself, against candidates that lack a capability, hang, try the
//! network, or try to run code nobody pinned, and `replay diff`'s header
//! rules. (Each defect build against the current one is in
//! gates/regression-sensitivity, which builds it.)
//!
//! A candidate that misbehaves is `clink-test-candidate`, an ELF build that
//! replays with the same library this build does, with a plan appended to
//! its own bytes saying what it attempts (so each plan is its own build,
//! with its own hash). A script candidate is refused before it runs. Every
//! `replay ab` runs under the command's own proven `unshare -rn` isolation,
//! and every candidate under its Landlock confinement.

mod common;

use std::io::{ErrorKind, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use clink_basics::ids::OperatorId;
use clink_replay::emissions::{encode_dump, read_dump};
use clink_replay::EpochRef;
use serde_json::Value as Json;

fn clink_path() -> &'static str {
    env!("CARGO_BIN_EXE_clink")
}

fn clink(args: &[&str]) -> Output {
    Command::new(clink_path()).args(args).output().expect("clink starts")
}

fn p(path: &Path) -> &str {
    path.to_str().expect("UTF-8 temp paths")
}

/// The example job run once with captures on (every checkpoint kept).
struct Run {
    dir: tempfile::TempDir,
}

impl Run {
    fn capture(&self) -> PathBuf {
        self.dir.path().join("capture")
    }
    fn checkpoints(&self) -> PathBuf {
        self.dir.path().join("ck")
    }
}

fn example() -> &'static Run {
    static RUN: OnceLock<Run> = OnceLock::new();
    RUN.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let input = d.join("input");
        let gen = clink(&["gen-input", "--seed", "5", "--events", "4000", "--accounts", "25", "--out", p(&input)]);
        assert!(gen.status.success());
        let job = format!("{}/../fixtures/jobs/example/job.json", env!("CARGO_MANIFEST_DIR"));
        let out = Command::new(clink_path())
            .args(["run", "--quiet", "--checkpoint-every-records", "1000", "--retain-checkpoints", "1000"])
            .args(["--job", &job, "--input-dir", p(&input), "--output-dir", p(&d.join("out"))])
            .args(["--checkpoint-dir", p(&d.join("ck")), "--capture-dir", p(&d.join("capture"))])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        Run { dir }
    })
}

/// `replay ab --json` over the example run with `candidate`, and its report.
fn ab(candidate: &Path, extra: &[&str]) -> (Option<i32>, Json, String) {
    let run = example();
    let (capture, checkpoints) = (run.capture(), run.checkpoints());
    let mut args = vec!["replay", "ab", "--json", "--capture-dir", p(&capture)];
    args.extend(["--checkpoint-dir", p(&checkpoints), "--candidate-clink", p(candidate)]);
    args.extend(extra);
    let out = clink(&args);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let doc: Json = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not a JSON report ({e}): {}\n{stderr}", String::from_utf8_lossy(&out.stdout)));
    (out.status.code(), doc, stderr)
}

fn epochs_with(doc: &Json, status: &str) -> Vec<Json> {
    doc["epochs"].as_array().unwrap().iter().filter(|e| e["status"] == status).cloned().collect()
}

/// A candidate: `clink-test-candidate` copied into `dir` with `plan`
/// appended to its bytes. The plan's capabilities default to this build's.
fn double(dir: &Path, name: &str, mut plan: Json) -> PathBuf {
    if plan.get("capabilities").is_none() {
        plan["capabilities"] = capabilities();
    }
    let path = dir.join(name);
    let mut bytes = std::fs::read(env!("CARGO_BIN_EXE_clink-test-candidate")).unwrap();
    let text = plan.to_string().into_bytes();
    let len = text.len() as u64;
    bytes.extend(text);
    bytes.extend(b"CLINKDBL");
    bytes.extend(len.to_le_bytes());
    std::fs::write(&path, bytes).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// This build's `capabilities --json`.
fn capabilities() -> Json {
    let out = clink(&["capabilities", "--json"]);
    assert!(out.status.success());
    serde_json::from_slice(&out.stdout).unwrap()
}

/// What a kept run's processes wrote to standard error (`run/logs`), by log
/// name (`NNN-<name>`), in the order they were started.
fn candidate_logs(keep: &Path) -> Vec<(String, String)> {
    let mut logs: Vec<(String, String)> = std::fs::read_dir(keep.join("run/logs"))
        .map(|d| d.flatten().collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            let stem = name.strip_suffix(".err")?.to_string();
            Some((stem, std::fs::read_to_string(e.path()).unwrap()))
        })
        .collect();
    logs.sort();
    logs
}

fn all_logs(keep: &Path) -> String {
    candidate_logs(keep).into_iter().map(|(name, text)| format!("== {name}\n{text}")).collect()
}

/// A script candidate: `body` runs with $REAL the real build.
fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/usr/bin/env bash\nREAL='{}'\n{body}\n", clink_path())).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[test]
fn the_same_build_is_identical_on_every_replayable_epoch() {
    // The sinks' epochs cannot be replayed here: left uncompared, they leave
    // the run not established, unless they are allowed to stand aside.
    let (code, doc, stderr) = ab(Path::new(clink_path()), &[]);
    assert_eq!(code, Some(3), "{doc}\n{stderr}");
    assert!(doc["exit_reason"].as_str().unwrap_or_default().contains("--allow-unsupported"), "{doc}");
    let (code, doc, stderr) = ab(Path::new(clink_path()), &["--allow-unsupported"]);
    assert_eq!(code, Some(0), "{doc}\n{stderr}");
    assert_eq!(doc["format"], "clink-replay-ab");
    assert_eq!(doc["isolation"]["result"], "enforced", "the candidate ran isolated");
    let identical = epochs_with(&doc, "identical");
    // The example job's two transforms (window, idle), two subtasks each, every epoch.
    assert!(identical.len() >= 4 * 3, "{doc}");
    assert!(identical.iter().any(|e| e["operator_type"] == "tumbling_window"));
    assert!(identical.iter().all(|e| e["emissions"]["this"] == e["emissions"]["candidate"]));
    assert_eq!(doc["totals"]["diverged"], 0);
    assert_eq!(doc["totals"]["identical"].as_u64().unwrap() as usize, identical.len());
    let sinks = epochs_with(&doc, "unsupported");
    assert!(!sinks.is_empty(), "the sinks are listed, not silently dropped");
    // What ran is named whole: the binary, and when it is linked
    // dynamically its loader and every library, each by its hash; and it
    // was hashed again after its capabilities and after every epoch it ran.
    let candidate = &doc["candidate"];
    let code = candidate["code"].as_array().unwrap();
    let own = clink_basics::digest::sha256_file(Path::new(clink_path()), 1 << 33).unwrap().sha256;
    assert_eq!(code[0]["role"], "binary");
    assert_eq!(code[0]["sha256"], own.as_str());
    assert_eq!(candidate["sha256"], own.as_str());
    if code.len() > 1 {
        assert_eq!(code[1]["role"], "loader");
        assert!(
            code.iter().any(|f| f["role"] == "library" && f["path"].as_str().unwrap().contains("libc")),
            "{code:?}"
        );
    }
    for f in code.iter().filter(|f| f["role"] != "binary") {
        let path = Path::new(f["path"].as_str().unwrap());
        assert_eq!(f["sha256"], clink_basics::digest::sha256_file(path, 1 << 33).unwrap().sha256.as_str(), "{f}");
    }
    assert_eq!(candidate["confinement"]["mechanism"], "landlock");
    assert_eq!(candidate["runs_checked_unchanged"].as_u64().unwrap() as usize, identical.len() + 1, "{candidate}");
}

#[test]
fn a_candidate_lacking_a_capability_is_refused_for_those_epochs_and_never_run_on_them() {
    let scratch = tempfile::tempdir().unwrap();
    let mut declared = capabilities();
    let types = declared["operator_types"].as_array().unwrap().clone();
    declared["operator_types"] = types.into_iter().filter(|t| t["name"] != "tumbling_window").collect();
    let cand = double(scratch.path(), "no-windows", serde_json::json!({"capabilities": declared}));
    let keep = scratch.path().join("keep");
    let (code, doc, stderr) = ab(&cand, &["--keep", p(&keep)]);
    assert_eq!(code, Some(3), "a refused epoch leaves the run not established: {doc}\n{stderr}");
    let refused = epochs_with(&doc, "missing-capability");
    assert!(!refused.is_empty());
    for e in &refused {
        assert_eq!(e["operator_type"], "tumbling_window");
        assert_eq!(e["missing"], serde_json::json!(["operator type tumbling_window"]), "{e}");
    }
    assert!(!epochs_with(&doc, "identical").is_empty(), "the other operator's epochs still ran");
    let replayed = all_logs(&keep);
    assert!(replayed.contains("double: replay: ok"), "{replayed}");
    for e in &refused {
        let asked =
            format!("operator {} subtask {} epoch {}:", e["operator"].as_str().unwrap(), e["subtask"], e["epoch"]);
        assert!(!replayed.contains(&asked), "the candidate was run on a refused epoch: {asked}");
    }
}

#[test]
fn a_candidate_that_declares_nothing_is_never_run() {
    let scratch = tempfile::tempdir().unwrap();
    let nothing = serde_json::json!({"format": "clink-capabilities", "version": 1, "capabilities": []});
    let cand = double(scratch.path(), "old", serde_json::json!({"capabilities": nothing}));
    let keep = scratch.path().join("keep");
    let (code, doc, _) = ab(&cand, &["--keep", p(&keep)]);
    assert_eq!(code, Some(3));
    assert_eq!(doc["totals"]["identical"], 0);
    let refused = epochs_with(&doc, "missing-capability");
    assert!(refused.iter().all(|e| e["missing"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m.as_str().unwrap().starts_with("capability replay.epoch_out"))));
    let logs = candidate_logs(&keep);
    assert!(logs.iter().all(|(name, _)| !name.contains("-candidate-")), "{logs:?}");
}

#[test]
fn a_candidate_that_hangs_is_killed_at_its_limit_with_its_children() {
    let scratch = tempfile::tempdir().unwrap();
    let plan = serde_json::json!({"on_replay": [{"do": "spawn_sleeper", "seconds": 600}]});
    let cand = double(scratch.path(), "hangs", plan);
    let keep = scratch.path().join("keep");
    let started = Instant::now();
    let (code, doc, stderr) =
        ab(&cand, &["--op", "3", "--subtask", "0", "--epoch", "2", "--run-timeout-s", "2", "--keep", p(&keep)]);
    assert!(started.elapsed() < Duration::from_secs(60), "the limit held");
    assert_eq!(code, Some(3), "{doc}\n{stderr}");
    let failed = epochs_with(&doc, "candidate-failed");
    assert_eq!(failed.len(), 1, "{doc}");
    assert!(failed[0]["reason"].as_str().unwrap().contains("killed: no exit within --run-timeout-s 2"), "{doc}");
    let logs = all_logs(&keep);
    let pid: u32 = logs
        .lines()
        .find_map(|l| l.strip_prefix("double: spawn a sleeper: ok: pid "))
        .unwrap_or_else(|| panic!("no sleeper started: {logs}"))
        .parse()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while running(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!running(pid), "the candidate's child {pid} outlived the kill of its process group");
}

/// Whether a process exists and has not ended (a zombie waits only to be reaped).
fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => stat.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X')),
    }
}

#[test]
fn a_candidate_gets_no_network_outside_loopback_of_its_namespace() {
    // A listener on this machine's loopback, outside the candidate's namespace.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let scratch = tempfile::tempdir().unwrap();
    let cand =
        double(scratch.path(), "reaches-out", serde_json::json!({"on_replay": [{"do": "connect", "port": port}]}));
    // The control: the same candidate run without isolation reaches the listener.
    let direct = Command::new(&cand).args(["replay", "epoch"]).output().unwrap();
    let said = String::from_utf8_lossy(&direct.stderr);
    assert!(said.contains(&format!("double: connect 127.0.0.1:{port}: ok")), "the probe can connect at all: {said}");
    let accepted = listener.accept().map(|_| ()).map_err(|e| e.kind());
    assert_eq!(accepted, Ok(()), "the control connection arrived");

    let keep = scratch.path().join("keep");
    let (code, doc, stderr) = ab(&cand, &["--op", "3", "--subtask", "0", "--epoch", "2", "--keep", p(&keep)]);
    assert_eq!(code, Some(0), "{doc}\n{stderr}");
    let logs = all_logs(&keep);
    assert!(logs.contains(&format!("double: connect 127.0.0.1:{port}: failed")), "tried and was refused: {logs}");
    assert_eq!(listener.accept().map(|_| ()).map_err(|e| e.kind()), Err(ErrorKind::WouldBlock), "nothing arrived");
}

#[test]
fn replay_diff_refuses_dumps_of_different_epochs_and_malformed_headers() {
    let scratch = tempfile::tempdir().unwrap();
    let at = |epoch| EpochRef { operator: OperatorId(3), subtask: 0, epoch };
    let rows = vec![vec![clink_engine::value::Value::Int(1)]];
    let write = |name: &str, bytes: Vec<u8>| {
        let path = scratch.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    };
    let a = write("a", encode_dump(1, &at(2), &rows));
    let same = write("same", encode_dump(1, &at(2), &rows));
    let other_epoch = write("other-epoch", encode_dump(1, &at(3), &rows));
    let other_job = write("other-job", encode_dump(2, &at(2), &rows));
    assert_eq!(clink(&["replay", "diff", p(&a), p(&same)]).status.code(), Some(0));
    for other in [&other_epoch, &other_job] {
        let out = clink(&["replay", "diff", p(&a), p(other)]);
        assert_eq!(out.status.code(), Some(2), "{}", other.display());
        assert!(String::from_utf8_lossy(&out.stderr).contains("not dumps of the same epoch"));
        let allowed = clink(&["replay", "diff", "--allow-different-epochs", p(&a), p(other)]);
        assert_eq!(allowed.status.code(), Some(0), "the flag compares the rows anyway");
    }
    let mut truncated = std::fs::read(&a).unwrap();
    truncated.truncate(14);
    let truncated = write("truncated", truncated);
    let no_header = write("no-header", b"just rows".to_vec());
    for bad in [&truncated, &no_header] {
        let out = clink(&["replay", "diff", p(&a), p(bad)]);
        assert_eq!(out.status.code(), Some(2), "{}", bad.display());
        assert!(String::from_utf8_lossy(&out.stderr).contains(p(bad)), "the dump is named");
    }
    assert_eq!(read_dump(&a).unwrap().job, Some(1));
}

#[test]
fn a_bundle_is_replayed_from_its_vouched_bytes_and_a_tampered_one_is_refused_before_anything_runs() {
    let good = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/bundles/good");
    let run = |bundle: &Path, candidate: &Path| {
        let out = clink(&["replay", "ab", "--json", "--bundle", p(bundle), "--candidate-clink", p(candidate)]);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, stdout, stderr) = run(&good, Path::new(clink_path()));
    assert_eq!(code, Some(3), "the bundle's sink epochs stand aside uncompared: {stdout}\n{stderr}");
    let out = clink(&[
        "replay",
        "ab",
        "--json",
        "--allow-unsupported",
        "--bundle",
        p(&good),
        "--candidate-clink",
        clink_path(),
    ]);
    let (code, stdout, stderr) = (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    );
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let doc: Json = serde_json::from_str(&stdout).unwrap();
    assert!(doc["totals"]["identical"].as_u64().unwrap() >= 4, "{doc}");
    assert!(doc["evidence"].as_str().unwrap().starts_with("bundle "));

    let scratch = tempfile::tempdir().unwrap();
    let copy = scratch.path().join("bundle");
    common::copy_dir(&good, &copy);
    let (cap, _) = latest_capture(&copy, 3, 0);
    let mut bytes = std::fs::read(&cap).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x40;
    std::fs::write(&cap, bytes).unwrap();
    let keep = scratch.path().join("keep");
    let out =
        clink(&["replay", "ab", "--json", "--bundle", p(&copy), "--candidate-clink", clink_path(), "--keep", p(&keep)]);
    let (code, stdout) = (out.status.code(), String::from_utf8_lossy(&out.stdout).to_string());
    assert_eq!(code, Some(2), "{stdout}");
    let refusal: Json = serde_json::from_str(&stdout).unwrap();
    assert!(refusal["reason"].as_str().unwrap().contains("bundle.artifacts failed"), "{refusal}");
    assert!(candidate_logs(&keep).is_empty(), "the candidate was started for a bundle that does not verify");
}

#[test]
fn a_candidate_that_writes_past_the_output_bound_is_stopped() {
    let scratch = tempfile::tempdir().unwrap();
    let plan =
        serde_json::json!({"on_replay": [{"do": "flood", "bytes": 3_000_000}, {"do": "sleep_ms", "ms": 60_000}]});
    let cand = double(scratch.path(), "floods", plan);
    let started = Instant::now();
    let (code, doc, stderr) = ab(&cand, &["--op", "3", "--subtask", "0", "--epoch", "2", "--max-output-mib", "1"]);
    assert!(started.elapsed() < Duration::from_secs(30), "stopped at the bound, not at the time limit");
    assert_eq!(code, Some(3), "{doc}\n{stderr}");
    let failed = epochs_with(&doc, "candidate-failed");
    assert_eq!(failed.len(), 1, "{doc}");
    assert!(failed[0]["reason"].as_str().unwrap().contains("past --max-output-mib 1"), "{doc}");
}

#[test]
fn a_candidate_that_writes_past_the_output_bound_and_exits_at_once_is_stopped_all_the_same() {
    let scratch = tempfile::tempdir().unwrap();
    // It writes the real dump, then 3 MB beside it, and exits 0 before any look.
    let plan = serde_json::json!({"after_replay": [{"do": "flood", "bytes": 3_000_000, "suffix": ".extra"}]});
    let cand = double(scratch.path(), "floods-and-exits", plan);
    let (code, doc, stderr) = ab(&cand, &["--op", "3", "--subtask", "0", "--epoch", "2", "--max-output-mib", "1"]);
    assert_eq!(code, Some(3), "{doc}\n{stderr}");
    let failed = epochs_with(&doc, "candidate-failed");
    assert_eq!(failed.len(), 1, "{doc}");
    assert!(failed[0]["reason"].as_str().unwrap().contains("past --max-output-mib 1"), "{doc}");
}

/// A copy of the committed good bundle in a scratch directory.
fn bundle_copy(scratch: &Path) -> PathBuf {
    let good = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/bundles/good");
    let copy = scratch.join("bundle");
    common::copy_dir(&good, &copy);
    copy
}

/// The newest capture of one subtask in a bundle and its epoch: found, not
/// named, so the trials keep meaning the same thing when the fixture is re-made.
fn latest_capture(bundle: &Path, op: u32, subtask: u32) -> (PathBuf, u64) {
    let dir = bundle.join(format!("capture/op-{op}/subtask-{subtask}"));
    std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|entry| {
            let name = entry.unwrap().file_name().into_string().unwrap();
            let epoch = name.strip_prefix("epoch-")?.strip_suffix(".cap")?.parse::<u64>().ok()?;
            Some((dir.join(name), epoch))
        })
        .max_by_key(|(_, epoch)| *epoch)
        .unwrap_or_else(|| panic!("no capture in {}", dir.display()))
}

/// `replay ab --json` over a bundle, started; the test acts while it runs.
fn ab_bundle(bundle: &Path, candidate: &Path, extra: &[&str]) -> std::process::Child {
    Command::new(clink_path())
        .args(["replay", "ab", "--json", "--bundle", p(bundle), "--candidate-clink", p(candidate)])
        .args(extra)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits until a kept run has started a candidate on an epoch.
fn await_candidate_started(keep: &Path) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !candidate_logs(keep).iter().any(|(name, _)| name.contains("-candidate-")) {
        assert!(Instant::now() < deadline, "no candidate started");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn report_of(child: std::process::Child) -> (Option<i32>, Json) {
    let out = child.wait_with_output().unwrap();
    let doc = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("not JSON ({e}): {}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    });
    (out.status.code(), doc)
}

#[test]
fn a_candidate_cannot_alter_the_bundle_it_reads() {
    let scratch = tempfile::tempdir().unwrap();
    let copy = bundle_copy(scratch.path());
    let (victim, _) = latest_capture(&copy, 4, 1);
    let before = std::fs::read(&victim).unwrap();
    let cand =
        double(scratch.path(), "alters", serde_json::json!({"on_replay": [{"do": "append", "path": p(&victim)}]}));
    let keep = scratch.path().join("keep");
    let (code, doc) = report_of(ab_bundle(&copy, &cand, &["--allow-unsupported", "--keep", p(&keep)]));
    assert_eq!(code, Some(0), "{doc}");
    assert_eq!(std::fs::read(&victim).unwrap(), before, "the bundle is as it was vouched");
    let logs = all_logs(&keep);
    assert!(logs.contains(&format!("double: append to {}: failed", p(&victim))), "{logs}");
}

#[test]
fn a_bundle_that_changes_while_the_candidate_reads_it_is_refused() {
    let scratch = tempfile::tempdir().unwrap();
    let copy = bundle_copy(scratch.path());
    let (victim, _) = latest_capture(&copy, 4, 1);
    let (_, epoch) = latest_capture(&copy, 3, 0);
    let epoch = epoch.to_string();
    // Another process alters a file of the bundle while the candidate runs.
    let cand = double(scratch.path(), "slow", serde_json::json!({"on_replay": [{"do": "sleep_ms", "ms": 2000}]}));
    let keep = scratch.path().join("keep");
    let child = ab_bundle(&copy, &cand, &["--op", "3", "--subtask", "0", "--epoch", &epoch, "--keep", p(&keep)]);
    await_candidate_started(&keep);
    std::fs::OpenOptions::new().append(true).open(&victim).unwrap().write_all(b"x").unwrap();
    let (code, doc) = report_of(child);
    assert_eq!(code, Some(2), "{doc}");
    assert!(doc["reason"].as_str().unwrap().contains("changed while the candidate read it"), "{doc}");
}

/// A script cannot be pinned: what runs is its interpreter and whatever it
/// reads. This one would replace itself with a build that diverges the
/// moment it is asked for its capabilities; it is refused before it runs.
#[test]
fn a_script_candidate_is_refused_before_it_runs() {
    let scratch = tempfile::tempdir().unwrap();
    let path = scratch.path().join("swaps");
    let marker = scratch.path().join("ran");
    let diverging = "#!/usr/bin/env bash\necho 'not a clink build' >&2\nexit 7\n";
    let body = format!(
        r#"touch '{ran}'
if [[ "$1" == capabilities ]]; then
    printf '%s' {diverging:?} > '{me}.next' && chmod +x '{me}.next' && mv -f '{me}.next' '{me}'
fi
exec "$REAL" "$@""#,
        me = p(&path),
        ran = p(&marker)
    );
    let cand = script(scratch.path(), "swaps", &body);
    let (code, doc, stderr) = ab(&cand, &["--op", "3", "--allow-unsupported"]);
    assert_eq!(code, Some(2), "{doc}\n{stderr}");
    assert!(doc["reason"].as_str().unwrap().contains("interpreter script"), "{doc}");
    assert!(!marker.exists(), "no copy of the script was started");
}

/// An ELF candidate that tries to replace its own file when asked for its
/// capabilities cannot: its copy lies where it may not write, and the
/// report names the bytes that ran, which are the bytes it was given.
#[test]
fn a_candidate_cannot_replace_its_own_file() {
    let scratch = tempfile::tempdir().unwrap();
    let cand = double(scratch.path(), "swaps", serde_json::json!({"on_capabilities": [{"do": "write_self"}]}));
    let given = clink_basics::digest::sha256_file(&cand, 1 << 33).unwrap().sha256;
    let keep = scratch.path().join("keep");
    let (code, doc, stderr) = ab(&cand, &["--op", "3", "--subtask", "0", "--keep", p(&keep)]);
    assert_eq!(code, Some(0), "{doc}\n{stderr}");
    let logs = all_logs(&keep);
    assert!(logs.contains("double: write its own file: failed"), "{logs}");
    assert!(logs.contains("double: replace its own file: failed"), "{logs}");
    assert_eq!(doc["candidate"]["sha256"], given.as_str(), "the report names what ran");
    let ran = Path::new(doc["candidate"]["ran"].as_str().unwrap());
    assert_eq!(clink_basics::digest::sha256_file(ran, 1 << 33).unwrap().sha256, given, "the copy is untouched");
}

/// A candidate that writes into its own folder (to leave itself a build to
/// run later, say) is denied; nothing appears there.
#[test]
fn a_candidate_cannot_write_into_its_own_folder() {
    let scratch = tempfile::tempdir().unwrap();
    let plan = serde_json::json!({
        "on_capabilities": [{"do": "write_beside", "name": "planted"}],
        "on_replay": [{"do": "write_beside", "name": "planted-later"}],
    });
    let cand = double(scratch.path(), "plants", plan);
    let keep = scratch.path().join("keep");
    let (code, doc, stderr) = ab(&cand, &["--op", "3", "--subtask", "0", "--epoch", "2", "--keep", p(&keep)]);
    assert_eq!(code, Some(0), "{doc}\n{stderr}");
    let logs = all_logs(&keep);
    assert_eq!(logs.matches("double: write ").count(), 2, "{logs}");
    assert_eq!(logs.matches("planted: failed").count() + logs.matches("planted-later: failed").count(), 2, "{logs}");
    let ran = Path::new(doc["candidate"]["ran"].as_str().unwrap());
    let folder = ran.parent().unwrap();
    for name in ["planted", "planted-later"] {
        assert!(!folder.join(name).exists(), "{name} was written beside the candidate");
        assert!(!keep.join(name).exists());
    }
}

/// A candidate that execs another build between epochs (here the real one,
/// a wrapper's trick) is denied: only its own copy and loader may be
/// executed, so every dump came from the code the report names.
#[test]
fn a_candidate_cannot_exec_another_build_between_epochs() {
    let scratch = tempfile::tempdir().unwrap();
    let plan = serde_json::json!({"on_replay": [{"do": "exec", "path": clink_path()}]});
    let cand = double(scratch.path(), "wraps", plan);
    let keep = scratch.path().join("keep");
    let (code, doc, stderr) = ab(&cand, &["--op", "3", "--subtask", "0", "--keep", p(&keep)]);
    assert_eq!(code, Some(0), "{doc}\n{stderr}");
    let epochs = doc["selected"].as_u64().unwrap() as usize;
    let logs = all_logs(&keep);
    let denied = format!("double: exec {}: failed: Permission denied", clink_path());
    assert_eq!(logs.matches(&denied).count(), epochs, "{logs}");
    assert_eq!(logs.matches("double: replay: ok").count(), epochs, "every dump is the double's own: {logs}");

    // One that gives up when its exec is denied leaves the epochs uncompared.
    let plan = serde_json::json!({"on_replay": [{"do": "exec", "path": clink_path()}, {"do": "exit", "code": 1}]});
    let cand = double(scratch.path(), "wraps-or-fails", plan);
    let (code, doc, stderr) = ab(&cand, &["--op", "3", "--subtask", "0", "--epoch", "2"]);
    assert_eq!(code, Some(3), "{doc}\n{stderr}");
    assert_eq!(epochs_with(&doc, "candidate-failed").len(), 1, "{doc}");
}

/// A library nobody pinned cannot be read (so not loaded): the candidate
/// reads only its copy, its pinned libraries and the evidence.
#[test]
fn a_candidate_cannot_read_code_nobody_pinned() {
    let scratch = tempfile::tempdir().unwrap();
    let plugin = scratch.path().join("plugin.so");
    std::fs::write(&plugin, b"\x7fELF not really").unwrap();
    let cand = double(scratch.path(), "loads", serde_json::json!({"on_replay": [{"do": "read", "path": p(&plugin)}]}));
    let keep = scratch.path().join("keep");
    let (code, doc, stderr) = ab(&cand, &["--op", "3", "--subtask", "0", "--epoch", "2", "--keep", p(&keep)]);
    assert_eq!(code, Some(0), "{doc}\n{stderr}");
    let logs = all_logs(&keep);
    assert!(logs.contains(&format!("double: read {}: failed: Permission denied", p(&plugin))), "{logs}");
    let readable = doc["candidate"]["confinement"]["may_read"].as_array().unwrap();
    assert!(!readable.iter().any(|r| plugin.starts_with(r.as_str().unwrap())), "{readable:?}");
}

/// The copy is checked again after every run: changed by anyone while the
/// candidate ran, the whole A/B is refused, whatever the comparisons said.
#[test]
fn a_copy_that_changes_during_a_run_refuses_the_whole_ab() {
    use std::os::unix::fs::PermissionsExt as _;
    let scratch = tempfile::tempdir().unwrap();
    let cand = double(scratch.path(), "slow", serde_json::json!({"on_replay": [{"do": "sleep_ms", "ms": 2000}]}));
    let keep = scratch.path().join("keep");
    let run = example();
    let child = Command::new(clink_path())
        .args(["replay", "ab", "--json", "--capture-dir", p(&run.capture()), "--checkpoint-dir", p(&run.checkpoints())])
        .args(["--candidate-clink", p(&cand), "--op", "3", "--subtask", "0", "--epoch", "2", "--keep", p(&keep)])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    await_candidate_started(&keep);
    // A running executable cannot be written (ETXTBSY); another file is
    // renamed over its name instead, as a swap from outside would be.
    let copy = keep.join("candidate/clink");
    let swap = keep.join("candidate/swap");
    let mut bytes = std::fs::read(&copy).unwrap();
    bytes.push(0);
    std::fs::write(&swap, bytes).unwrap();
    std::fs::set_permissions(&swap, std::fs::Permissions::from_mode(0o500)).unwrap();
    std::fs::rename(&swap, &copy).unwrap();
    let (code, doc) = report_of(child);
    assert_eq!(code, Some(2), "{doc}");
    let reason = doc["reason"].as_str().unwrap();
    assert!(reason.contains("the candidate's code changed during its run"), "{doc}");
    assert!(reason.contains(p(&copy)) || reason.contains("candidate/clink"), "{doc}");
}
