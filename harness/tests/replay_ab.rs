//! `clink replay ab` against real runs and real processes: the current build
//! against itself, against candidates that lack a capability, hang, or try
//! the network, and `replay diff`'s header rules. (Each defect build against
//! the current one is in gates/regression-sensitivity, which builds it.)
//!
//! A candidate that misbehaves is a shell script in the test's scratch
//! directory wrapping this build: it changes how the build is driven, never
//! the engine. Every `replay ab` runs under the command's own proven
//! `unshare -rn` isolation.

mod common;

use std::io::ErrorKind;
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

/// A candidate: a script in `dir` that runs `body` with $REAL the real build.
fn candidate(dir: &Path, name: &str, body: &str) -> PathBuf {
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
}

#[test]
fn a_candidate_lacking_a_capability_is_refused_for_those_epochs_and_never_run_on_them() {
    let scratch = tempfile::tempdir().unwrap();
    let log = scratch.path().join("calls");
    let cand = candidate(
        scratch.path(),
        "no-windows",
        &format!(
            r#"echo "$*" >> '{log}'
if [[ "$1" == capabilities ]]; then
    "$REAL" capabilities --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
d["operator_types"] = [t for t in d["operator_types"] if t["name"] != "tumbling_window"]
print(json.dumps(d))'
    exit 0
fi
exec "$REAL" "$@""#,
            log = p(&log)
        ),
    );
    let (code, doc, stderr) = ab(&cand, &[]);
    assert_eq!(code, Some(3), "a refused epoch leaves the run not established: {doc}\n{stderr}");
    let refused = epochs_with(&doc, "missing-capability");
    assert!(!refused.is_empty());
    for e in &refused {
        assert_eq!(e["operator_type"], "tumbling_window");
        assert_eq!(e["missing"], serde_json::json!(["operator type tumbling_window"]), "{e}");
    }
    assert!(!epochs_with(&doc, "identical").is_empty(), "the other operator's epochs still ran");
    let calls = std::fs::read_to_string(&log).unwrap();
    for e in &refused {
        let asked =
            format!("--op {} --subtask {} --epoch {} ", e["operator"].as_str().unwrap(), e["subtask"], e["epoch"]);
        assert!(!calls.contains(&asked), "the candidate was run on a refused epoch: {asked}");
    }
}

#[test]
fn a_candidate_that_declares_nothing_is_never_run() {
    let scratch = tempfile::tempdir().unwrap();
    let log = scratch.path().join("calls");
    let cand = candidate(
        scratch.path(),
        "old",
        &format!(
            r#"echo "$*" >> '{log}'
if [[ "$1" == capabilities ]]; then echo '{{"format":"clink-capabilities","version":1,"capabilities":[]}}'; exit 0; fi
exec "$REAL" "$@""#,
            log = p(&log)
        ),
    );
    let (code, doc, _) = ab(&cand, &[]);
    assert_eq!(code, Some(3));
    assert_eq!(doc["totals"]["identical"], 0);
    let refused = epochs_with(&doc, "missing-capability");
    assert!(refused.iter().all(|e| e["missing"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m.as_str().unwrap().starts_with("capability replay.epoch_out"))));
    let calls = std::fs::read_to_string(&log).unwrap();
    assert!(!calls.contains("replay epoch"), "{calls}");
}

#[test]
fn a_candidate_that_hangs_is_killed_at_its_limit_with_its_children() {
    let scratch = tempfile::tempdir().unwrap();
    let pid_file = scratch.path().join("child.pid");
    let cand = candidate(
        scratch.path(),
        "hangs",
        &format!(
            r#"if [[ "$1" == replay ]]; then sleep 600 & echo $! > '{pid}'; wait; exit 0; fi
exec "$REAL" "$@""#,
            pid = p(&pid_file)
        ),
    );
    let started = Instant::now();
    let (code, doc, stderr) = ab(&cand, &["--op", "3", "--subtask", "0", "--epoch", "2", "--run-timeout-s", "2"]);
    assert!(started.elapsed() < Duration::from_secs(60), "the limit held");
    assert_eq!(code, Some(3), "{doc}\n{stderr}");
    let failed = epochs_with(&doc, "candidate-failed");
    assert_eq!(failed.len(), 1, "{doc}");
    assert!(failed[0]["reason"].as_str().unwrap().contains("killed: no exit within --run-timeout-s 2"), "{doc}");
    let pid: u32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
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
    let report = scratch.path().join("reach");
    let cand = candidate(
        scratch.path(),
        "reaches-out",
        &format!(
            r#"if [[ "$1" == replay ]]; then
    if (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null; then echo connected >> '{r}'; else echo refused >> '{r}'; fi
fi
exec "$REAL" "$@""#,
            r = p(&report)
        ),
    );
    // The control: the same candidate run without isolation reaches the listener.
    let direct = Command::new(&cand).args(["replay", "--help"]).output().unwrap();
    assert!(direct.status.success());
    assert_eq!(std::fs::read_to_string(&report).unwrap().trim(), "connected", "the probe can connect at all");
    let accepted = listener.accept().map(|_| ()).map_err(|e| e.kind());
    assert_eq!(accepted, Ok(()), "the control connection arrived");
    std::fs::remove_file(&report).unwrap();

    let (code, doc, stderr) = ab(&cand, &["--op", "3", "--subtask", "0", "--epoch", "2"]);
    assert_eq!(code, Some(0), "{doc}\n{stderr}");
    assert_eq!(std::fs::read_to_string(&report).unwrap().trim(), "refused", "the candidate tried and was refused");
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
    let cap = copy.join("capture/op-3/subtask-0/epoch-10.cap");
    let mut bytes = std::fs::read(&cap).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x40;
    std::fs::write(&cap, bytes).unwrap();
    let log = scratch.path().join("calls");
    let cand = candidate(scratch.path(), "logs", &format!("echo \"$*\" >> '{}'\nexec \"$REAL\" \"$@\"", p(&log)));
    let (code, stdout, stderr) = run(&copy, &cand);
    assert_eq!(code, Some(2), "{stdout}\n{stderr}");
    let refusal: Json = serde_json::from_str(&stdout).unwrap();
    assert!(refusal["reason"].as_str().unwrap().contains("bundle.artifacts failed"), "{refusal}");
    assert!(!log.exists(), "the candidate was started for a bundle that does not verify");
}

#[test]
fn a_candidate_that_writes_past_the_output_bound_is_stopped() {
    let scratch = tempfile::tempdir().unwrap();
    let cand = candidate(
        scratch.path(),
        "floods",
        r#"if [[ "$1" == replay ]]; then head -c 3000000 /dev/zero > "${@: -1}"; sleep 60; exit 0; fi
exec "$REAL" "$@""#,
    );
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
    let cand = candidate(
        scratch.path(),
        "floods-and-exits",
        r#"if [[ "$1" == replay ]]; then "$REAL" "$@" || exit $?; head -c 3000000 /dev/zero > "${@: -1}.extra"; exit 0; fi
exec "$REAL" "$@""#,
    );
    let (code, doc, stderr) = ab(&cand, &["--op", "3", "--subtask", "0", "--epoch", "2", "--max-output-mib", "1"]);
    assert_eq!(code, Some(3), "{doc}\n{stderr}");
    let failed = epochs_with(&doc, "candidate-failed");
    assert_eq!(failed.len(), 1, "{doc}");
    assert!(failed[0]["reason"].as_str().unwrap().contains("past --max-output-mib 1"), "{doc}");
}

#[test]
fn a_bundle_that_changes_while_the_candidate_reads_it_is_refused() {
    let good = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/bundles/good");
    let scratch = tempfile::tempdir().unwrap();
    let copy = scratch.path().join("bundle");
    common::copy_dir(&good, &copy);
    let victim = copy.join("capture/op-4/subtask-1/epoch-10.cap");
    // The candidate alters a file of the bundle it was handed, then replays.
    let cand = candidate(
        scratch.path(),
        "alters",
        &format!(
            r#"if [[ "$1" == replay ]]; then printf 'x' >> '{}'; fi
exec "$REAL" "$@""#,
            p(&victim)
        ),
    );
    let out = clink(&["replay", "ab", "--json", "--bundle", p(&copy), "--candidate-clink", p(&cand)]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stdout));
    let doc: Json = serde_json::from_slice(&out.stdout).unwrap();
    assert!(doc["reason"].as_str().unwrap().contains("changed while the candidate read it"), "{doc}");
}

/// The candidate judged is the candidate that ran: one that replaces its own
/// file with a build that diverges, the moment it is asked for its
/// capabilities, changes nothing, since a copy taken before that runs every
/// epoch; the report gives the copy's SHA-256.
#[test]
fn a_candidate_replaced_after_its_capabilities_call_changes_nothing() {
    let scratch = tempfile::tempdir().unwrap();
    let path = scratch.path().join("swaps");
    let diverging = "#!/usr/bin/env bash\necho 'not a clink build' >&2\nexit 7\n";
    let body = format!(
        r#"if [[ "$1" == capabilities ]]; then
    printf '%s' {diverging:?} > '{me}.next' && chmod +x '{me}.next' && mv -f '{me}.next' '{me}'
fi
exec "$REAL" "$@""#,
        me = p(&path)
    );
    let cand = candidate(scratch.path(), "swaps", &body);
    assert_eq!(cand, path);
    let before = clink_basics::digest::sha256_file(&cand, 1 << 20).unwrap().sha256;
    let (code, doc, stderr) = ab(&cand, &["--op", "3", "--allow-unsupported"]);
    assert_eq!(code, Some(0), "{doc}\n{stderr}");
    assert_eq!(doc["candidate"]["sha256"], before.as_str(), "the report names what ran");
    let after = clink_basics::digest::sha256_file(&cand, 1 << 20).unwrap().sha256;
    assert_ne!(before, after, "the candidate did replace its file");
}
