//! The audit account (issue 46): the rules `clink-audit` keeps about its own
//! record, each shown with the real `clink-audit` binary, real files and real
//! processes, and no service.
//!
//! The children are scripts standing in for `clink` and the reference: each
//! writes what the real one's contract says it writes (a scope, an artifact,
//! a verification or reconciliation report) and does what a control file
//! tells it (refuse as `missing`, end `unsupported`, fail, find a
//! discrepancy), so a trial can give the runner exactly the history a rule is
//! about. What is under test is the account the runner keeps of those
//! results: acknowledgements, staleness, the windowed chain, coverage,
//! checkpoint identities, and a ledger and reports that survive a SIGKILL
//! between any two writes (`CLINK_TEST_AUDIT_PAUSE_AT`, a debug build's
//! test switch). `tests/audit.rs` runs the same rules against the real
//! children and services.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{json, Value as Json};

fn clink_audit() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_clink-audit"))
}

/// The stand-in for `clink`: the subcommand's contract, steered by `$CTL/<subcommand>[.<checkpoint>]`.
const FAKE_CLINK: &str = r#"#!/bin/sh
CTL=@CTL@
sub="$1"; shift
ck=""; out=""; since=""; prev=""; job=""; ckdir=""
for a in "$@"; do
  case "$prev" in --checkpoint) ck="$a";; --out) out="$a";; --since) since="$a";; --job) job="$a";; --checkpoint-dir) ckdir="$a";; esac
  prev="$a"
done
# incident-verify names no checkpoint: the audit directory's name does (ck<n>-...).
[ -z "$ck" ] && ck=$(echo "$1" | sed -n 's|.*/ck\([0-9]*\)-[^/]*/bundle$|\1|p')
m=ok
[ -f "$CTL/$sub" ] && m=$(cat "$CTL/$sub")
[ -f "$CTL/$sub.$ck" ] && m=$(cat "$CTL/$sub.$ck")
echo "$sub $ck since=$since $m" >> "$CTL/calls"
case "$sub" in
  incident-collect)
    if [ "$m" = moving ]; then
      # The job completes another checkpoint during every collection; only
      # checkpoint 1's is copied before it moves on.
      n=$(ls "$ckdir/_jobs/$job" | sed -n 's/^COMPLETED-//p' | sort -n | tail -1); n=$((n + 1))
      echo "{\"job\":\"$job\",\"checkpoint\":$n}" > "$ckdir/_jobs/$job/COMPLETED-$n"
      if [ "$ck" != 1 ]; then
        echo '{"format":"clink-command-result","result":"refused","kind":"changed","reason":"the markers changed"}'
        exit 2
      fi
    fi
    if [ "$m" = missing ]; then
      echo '{"format":"clink-command-result","result":"refused","kind":"missing","reason":"the state is gone"}'
      exit 2
    fi
    # The manifest vouches for the marker it copied (another one's hash: a
    # job directory reset between the runner's look and the copy).
    sha=$(sha256sum "$ckdir/_jobs/$job/COMPLETED-$ck" | cut -d' ' -f1)
    [ "$m" = other-marker ] && sha=$(printf 'another run' | sha256sum | cut -d' ' -f1)
    mkdir -p "$out"
    printf '{"artifacts":[{"path":"checkpoint/_jobs/%s/COMPLETED-%s","role":"completed_marker","sha256":"%s"}]}' "$job" "$ck" "$sha" > "$out/manifest.json"
    echo '{"format":"clink-command-result","result":"published","files":1,"bytes":7}';;
  incident-scope)
    if [ "$m" = unsupported ]; then echo "scope: not a job the audit supports" >&2; exit 3; fi
    if [ "$m" = not-whole ]; then
      echo '{"format":"clink-scope","version":1,"sources":[]}' > "$out"
      echo "{\"incomplete\":[\"interval $ck: its evidence is not in the bundle\"]}"
      exit 3
    fi
    v=1; from=$(( (ck - 1) * 10 ))
    if [ -f "$CTL/windowed" ]; then v=2; from=0; fi
    if [ -n "$since" ]; then v=3; from=$(( since * 10 )); fi
    part="{\"partition\":0,\"from\":$from,\"to\":$(( ck * 10 ))}"
    [ "$m" = run-start ] && part="{\"partition\":0,\"to\":$(( ck * 10 ))}"
    echo "{\"format\":\"clink-scope\",\"version\":$v,\"sources\":[{\"topic\":\"t\",\"partitions\":[$part]}]}" > "$out";;
  incident-verify)
    if [ "$m" = error ]; then echo "verify: broke" >&2; exit 9; fi
    echo '{"format":"clink-verify-report","isolation":{"enforced":true},"checks":[{"name":"bundle.manifest","status":"passed"}]}';;
  incident-reconcile)
    if [ "$m" = discrepancy ]; then
      echo '{"format":"clink-reconcile-report","checks":[{"name":"reference.destination","status":"failed"}],"findings":[{"relationship":"reference-destination","summary":"a row twice","first":["id=7 duplicated"]}]}'
      exit 1
    fi
    echo '{"format":"clink-reconcile-report","checks":[{"name":"reference.destination","status":"passed"}]}';;
esac
exit 0
"#;

/// The stand-in for the reference: an artifact naming the state it started
/// from by its SHA-256, and a new state.
const FAKE_REFERENCE: &str = r#"#!/bin/sh
CTL=@CTL@
out=""; so=""; si=""
for a in "$@"; do
  case "$a" in --out=*) out="${a#--out=}";; --state-out=*) so="${a#--state-out=}";; --state-in=*) si="${a#--state-in=}";; esac
done
echo "reference state_in=$si" >> "$CTL/calls"
sha=null
[ -n "$si" ] && sha="\"$(sha256sum "$si" | cut -d' ' -f1)\""
printf '{"type":"header","state_in":{"sha256":%s}}\n{"type":"end","rows":3}\n' "$sha" > "$out"
[ -n "$so" ] && echo "{\"windows\":\"$(date +%s%N)\"}" > "$so"
exit 0
"#;

fn unique(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("{prefix}-{}-{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst))
}

fn script(path: &Path, text: &str, ctl: &Path) {
    std::fs::write(path, text.replace("@CTL@", &ctl.display().to_string())).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// One job directory, its scripted children and one runner's configuration.
struct Setup {
    dir: PathBuf,
    ctl: PathBuf,
    clink: PathBuf,
    config: PathBuf,
    state: PathBuf,
}

impl Setup {
    fn new(name: &str, selection: &str, windowed: bool) -> Setup {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(unique(name));
        let ctl = dir.join("ctl");
        std::fs::create_dir_all(&ctl).unwrap();
        std::fs::create_dir_all(dir.join("ck/_jobs/9")).unwrap();
        let clink = dir.join("clink");
        script(&clink, FAKE_CLINK, &ctl);
        let reference = dir.join("reference");
        script(&reference, FAKE_REFERENCE, &ctl);
        if windowed {
            std::fs::write(ctl.join("windowed"), b"").unwrap();
        }
        let mut argv = vec![reference.display().to_string(), "--scope={scope}".into(), "--out={out}".into()];
        let mut with_state_in: Vec<String> = Vec::new();
        if windowed {
            argv.push("--state-out={state_out}".into());
            with_state_in.push("--state-in={state_in}".into());
        }
        let state = dir.join("state");
        let config = json!({
            "format": "clink-audit-config",
            "version": 1,
            "job": {"id": "9", "checkpoint_dir": dir.join("ck"), "ha_dir": dir.join("ha"),
                    "capture_dir": dir.join("capture"), "trace_dir": dir.join("trace")},
            "destination": {"endpoint_env": "CLINK_FAKE_DEST", "table": "default.t", "key": ["id"],
                            "credential_env": [], "user_env": null, "password_env": null},
            "reference": {"argv": argv, "with_state_in": with_state_in, "from_run_start": [], "credential_env": []},
            "selection": selection,
            "start_at": "earliest",
            "bounds": {"child_timeout_s": 60, "bundle_bytes": 1 << 20, "bundle_files": 1000, "rows": 1000,
                       "query_timeout_s": 10},
            "backoff": {"initial_s": 1, "max_s": 1},
            "max_attempts": 5,
            "retain_passed": 50,
            "retain_states": 3,
            "disk_budget_bytes": 1u64 << 34,
            "state_dir": state,
        });
        let path = dir.join("audit.json");
        std::fs::write(&path, serde_json::to_vec_pretty(&config).unwrap()).unwrap();
        Setup { dir, ctl, clink, config: path, state }
    }

    /// The job completes checkpoint `ck`: its marker, written now.
    fn complete(&self, ck: u64) {
        let path = self.dir.join(format!("ck/_jobs/9/COMPLETED-{ck}"));
        std::fs::write(path, format!("{{\"job\":\"9\",\"checkpoint\":{ck}}}")).unwrap();
    }

    /// Sets the marker's write time `seconds_ago` in the past (a real `touch`).
    fn age(&self, ck: u64, seconds_ago: u64) {
        let path = self.dir.join(format!("ck/_jobs/9/COMPLETED-{ck}"));
        let at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() - seconds_ago;
        let out = Command::new("touch").arg("-d").arg(format!("@{at}")).arg(path).output().unwrap();
        assert!(out.status.success(), "touch: {out:?}");
    }

    /// What the stand-in for `what` does next (for checkpoint `ck` only when given).
    fn steer(&self, what: &str, ck: Option<u64>, mode: &str) {
        let name = ck.map_or(what.to_string(), |ck| format!("{what}.{ck}"));
        std::fs::write(self.ctl.join(name), mode).unwrap();
    }

    fn unsteer(&self, what: &str, ck: Option<u64>) {
        let name = ck.map_or(what.to_string(), |ck| format!("{what}.{ck}"));
        let _ = std::fs::remove_file(self.ctl.join(name));
    }

    fn command(&self, sub: &str) -> Command {
        let mut c = Command::new(clink_audit());
        c.arg(sub).arg("--config").arg(&self.config).env("CLINK_FAKE_DEST", "127.0.0.1:1");
        if matches!(sub, "run" | "poll") {
            c.arg("--clink").arg(&self.clink);
        }
        c
    }

    fn run(&self) -> Output {
        let out = self.command("run").output().unwrap();
        assert!(matches!(out.status.code(), Some(0 | 1)), "run: {}", said(&out));
        out
    }

    fn status(&self, stale_after_s: u64) -> (i32, Json) {
        let out = self
            .command("status")
            .args(["--json", "--cycle-within-s", "3600", "--stale-after-s", &stale_after_s.to_string()])
            .output()
            .unwrap();
        let doc = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("status: {e}: {}", said(&out)));
        (out.status.code().unwrap_or(-1), doc)
    }

    fn ledger(&self) -> Json {
        serde_json::from_slice(&std::fs::read(self.state.join("ledger.json")).unwrap()).unwrap()
    }

    fn audit(&self, ck: u64) -> Json {
        self.ledger()["audits"][ck.to_string()].clone()
    }

    fn calls(&self) -> String {
        std::fs::read_to_string(self.ctl.join("calls")).unwrap_or_default()
    }

    fn acknowledge(&self, id: &str) -> Output {
        self.command("acknowledge").args(["--audit", id, "--note", "known: a test made it"]).output().unwrap()
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn said(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn outcome(audit: &Json) -> &str {
    audit["outcome"].as_str().unwrap_or("unfinished")
}

fn attempt_outcomes(audit: &Json) -> Vec<String> {
    audit["attempts"].as_array().unwrap().iter().map(|a| a["outcome"].as_str().unwrap_or("open").to_string()).collect()
}

/// Waits out the backoff (1 s) of a failed attempt.
fn after_backoff() {
    std::thread::sleep(Duration::from_millis(2100));
}

// ---- 1. An acknowledgement silences only the discrepancy it was made for.

#[test]
fn acknowledge_refuses_an_audit_that_is_no_discrepancy() {
    let s = Setup::new("ack-refused", "sequential", false);
    s.complete(1);
    s.complete(2);
    s.steer("incident-verify", Some(2), "error");
    s.run();
    for (ck, expected) in [(1, "passed"), (2, "error")] {
        let audit = s.audit(ck);
        assert_eq!(outcome(&audit), expected);
        let id = audit["id"].as_str().unwrap();
        let out = s.acknowledge(id);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "acknowledging a {expected} audit: {}", said(&out));
        assert!(stderr.contains(id) && stderr.contains(&format!("its outcome is {expected}")), "{stderr}");
    }
    assert!(!s.state.join("acks").exists() || std::fs::read_dir(s.state.join("acks")).unwrap().count() == 0);
}

#[test]
fn a_discrepancy_found_after_an_acknowledgement_is_unacknowledged() {
    let s = Setup::new("ack-later", "sequential", false);
    s.complete(1);
    s.steer("incident-verify", None, "error");
    s.run();
    let id = s.audit(1)["id"].as_str().unwrap().to_string();
    // Acknowledgements as an older clink-audit wrote them: of the audit's
    // error (attempt 1), and one naming no attempt at all.
    let acks = s.state.join("acks");
    std::fs::create_dir_all(&acks).unwrap();
    let ack = |attempt: Json, file: &str| {
        let doc = json!({"audit": id, "attempt": attempt, "note": "the verifier was down", "at_ms": 1, "by": "op"});
        std::fs::write(acks.join(file), serde_json::to_vec(&doc).unwrap()).unwrap();
    };
    ack(json!(1), "old-1.json");
    let legacy = json!({"audit": id, "note": "named no attempt", "at_ms": 2, "by": "op"});
    std::fs::write(acks.join("old-2.json"), serde_json::to_vec(&legacy).unwrap()).unwrap();
    // The retry finds a discrepancy.
    s.unsteer("incident-verify", None);
    s.steer("incident-reconcile", None, "discrepancy");
    after_backoff();
    s.run();
    assert_eq!(attempt_outcomes(&s.audit(1)), ["error", "discrepancy"]);
    let (code, status) = s.status(3600);
    assert_eq!((code, status["state"].as_str()), (1, Some("discrepancy")), "{status}");
    // Acknowledged now, for the attempt that found it: listed, not a discrepancy state.
    let out = s.acknowledge(&id);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("attempt 2"), "{}", said(&out));
    let (code, status) = s.status(3600);
    assert_ne!(code, 1, "{status}");
    assert_eq!(status["discrepancies"][0]["acknowledged"], true, "{status}");
}

// ---- 2. A runner that has never verified anything is never healthy.

fn never_verified(selection: &str, steer: (&str, &str)) {
    let s = Setup::new(&format!("stale-{selection}"), selection, false);
    s.steer(steer.0, None, steer.1);
    s.complete(1);
    s.age(1, 600);
    s.run();
    // The job keeps completing checkpoints, and its retention keeps the newest.
    for ck in 2..=4 {
        s.complete(ck);
        let _ = std::fs::remove_file(s.dir.join(format!("ck/_jobs/9/COMPLETED-{}", ck - 1)));
        s.run();
    }
    let ledger = s.ledger();
    let outcomes: Vec<&str> = ledger["audits"].as_object().unwrap().values().map(outcome).collect();
    assert!(outcomes.iter().all(|o| ["unsupported", "expired", "skipped"].contains(o)), "{outcomes:?}");
    let (code, status) = s.status(60);
    assert_eq!((code, status["state"].as_str()), (3, Some("stale")), "{selection}: {status}");
}

#[test]
fn latest_only_that_verifies_nothing_becomes_stale() {
    never_verified("latest-only", ("incident-scope", "unsupported"));
}

#[test]
fn sequential_that_verifies_nothing_becomes_stale() {
    never_verified("sequential", ("incident-collect", "missing"));
}

// ---- 3. The windowed chain continues only from verified states, as held.

#[test]
fn a_windowed_chain_never_continues_from_a_discrepancy() {
    let s = Setup::new("chain-discrepancy", "sequential", true);
    s.complete(1);
    s.run();
    s.complete(2);
    s.steer("incident-reconcile", Some(2), "discrepancy");
    s.run();
    assert_eq!(outcome(&s.audit(2)), "discrepancy");
    assert_eq!(s.ledger()["chain"]["held"], json!([1]), "the state of a discrepancy is held");
    s.complete(3);
    s.run();
    let third = s.audit(3);
    assert_eq!(third["attempts"][0]["since"], 1, "checkpoint 3 started from {}", third["attempts"][0]["since"]);
    assert_eq!(outcome(&third), "passed");
}

#[test]
fn a_tampered_held_state_is_not_handed_to_the_reference() {
    let s = Setup::new("chain-tampered", "sequential", true);
    s.complete(1);
    s.run();
    s.complete(2);
    s.run();
    assert_eq!(s.ledger()["chain"]["held"], json!([1, 2]));
    // One more byte in the newest held state, behind the runner's back.
    let held = s.state.join("states/2.json");
    let mut bytes = std::fs::read(&held).unwrap();
    bytes.extend_from_slice(b"\n");
    std::fs::write(&held, bytes).unwrap();
    s.complete(3);
    let before = s.calls();
    s.run();
    let third = s.audit(3);
    let reason = third["attempts"][0]["reason"].as_str().unwrap_or("").to_string();
    assert_eq!(outcome(&third), "error", "{reason}");
    assert!(reason.contains("held state of checkpoint 2 does not hash"), "{reason}");
    let after = s.calls()[before.len()..].to_string();
    assert!(!after.contains(&format!("state_in={}", held.display())), "the reference was given it:\n{after}");
    assert_eq!(s.ledger()["chain"]["held"], json!([1]));
    assert!(!held.exists(), "a state the chain let go is still there");
    // The retry goes on from the state still held as it was.
    after_backoff();
    s.run();
    let third = s.audit(3);
    assert_eq!(attempt_outcomes(&third), ["error", "passed"]);
    assert_eq!(third["attempts"][1]["since"], 1);
}

// ---- 4. Coverage comes from the passing attempt alone.

#[test]
fn coverage_is_the_passing_attempts_alone() {
    let s = Setup::new("coverage", "sequential", false);
    s.complete(1);
    // Attempt 1 spans [0, 10), then fails.
    s.steer("incident-verify", None, "error");
    s.run();
    assert_eq!(s.audit(1)["ranges"].as_array().map(Vec::len), Some(1), "{}", s.audit(1));
    // Attempt 2 passes, and what it spans cannot be told.
    s.unsteer("incident-verify", None);
    s.steer("incident-scope", None, "run-start");
    after_backoff();
    s.run();
    let audit = s.audit(1);
    assert_eq!(attempt_outcomes(&audit), ["error", "passed"]);
    assert_eq!(audit["ranges"], json!([]), "the failed attempt's ranges count: {}", audit["ranges"]);
    let (code, status) = s.status(3600);
    assert_eq!((code, status["state"].as_str()), (3, Some("incomplete")), "{status}");
    assert_eq!(status["coverage_unknown"][0]["checkpoint"], 1, "{status}");
    assert_eq!(status["coverage"], json!([]), "{status}");
}

// ---- 5. Checkpoint ids are not identities.

#[test]
fn a_reset_job_directory_is_audited_again() {
    let s = Setup::new("reset", "sequential", false);
    for ck in 1..=3 {
        s.complete(ck);
    }
    s.steer("incident-reconcile", Some(2), "discrepancy");
    s.run();
    let old: Vec<String> = (1..=3).map(|ck| s.audit(ck)["id"].as_str().unwrap().to_string()).collect();
    // The job directory is reset: ids start again at 1, the markers hold the same bytes.
    std::fs::remove_dir_all(s.dir.join("ck")).unwrap();
    std::fs::create_dir_all(s.dir.join("ck/_jobs/9")).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    s.unsteer("incident-reconcile", Some(2));
    s.complete(1);
    s.complete(2);
    let before = s.calls();
    s.run();
    let after = s.calls()[before.len()..].to_string();
    assert!(after.contains("incident-collect 1 ") && after.contains("incident-collect 2 "), "not audited:\n{after}");
    let ledger = s.ledger();
    for ck in [1u64, 2] {
        let audit = &ledger["audits"][ck.to_string()];
        assert_eq!(outcome(audit), "passed", "{audit}");
        assert!(!old.contains(&audit["id"].as_str().unwrap().to_string()), "checkpoint {ck} kept its old audit id");
    }
    let retired: Vec<&str> = ledger["retired"].as_array().unwrap().iter().filter_map(|r| r["id"].as_str()).collect();
    assert_eq!(retired, old.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(std::fs::read_dir(s.state.join("reports")).unwrap().count(), 5);
    // The old run's discrepancy stays listed, unacknowledged.
    let (code, status) = s.status(3600);
    assert_eq!(code, 1, "{status}");
    assert_eq!(status["discrepancies"][0]["audit"], old[1].as_str());
}

#[test]
fn a_bundle_of_another_checkpoint_is_not_audited_as_the_selected_one() {
    let s = Setup::new("other-marker", "sequential", false);
    s.complete(1);
    s.complete(2);
    s.steer("incident-collect", Some(1), "other-marker");
    s.run();
    let audit = s.audit(1);
    assert_eq!(outcome(&audit), "error", "{audit}");
    assert!(audit.to_string().contains("the bundle holds another checkpoint 1 than the audit's"), "{audit}");
    assert!(!s.calls().contains("incident-verify 1 "), "the bundle of another checkpoint was verified:\n{}", s.calls());
    assert_eq!(outcome(&s.audit(2)), "passed", "{}", s.audit(2));
}

#[test]
fn a_version_1_ledger_is_read_and_its_audits_kept() {
    let s = Setup::new("ledger-v1", "sequential", false);
    s.complete(1);
    s.complete(2);
    s.run();
    // As a version 1 runner wrote it: no marker hashes, no first checkpoint.
    let mut ledger = s.ledger();
    ledger["version"] = json!(1);
    ledger.as_object_mut().unwrap().remove("first_seen");
    ledger.as_object_mut().unwrap().remove("retired");
    for audit in ledger["audits"].as_object_mut().unwrap().values_mut() {
        audit.as_object_mut().unwrap().remove("marker_sha256");
    }
    std::fs::write(s.state.join("ledger.json"), serde_json::to_vec(&ledger).unwrap()).unwrap();
    let (code, _) = s.status(3600);
    assert_eq!(code, 0);
    let before = s.calls();
    s.run();
    assert_eq!(s.calls(), before, "the same checkpoints were audited again");
    let ledger = s.ledger();
    assert_eq!(ledger["version"], 3);
    assert!(ledger["audits"]["1"]["marker_sha256"].is_string(), "{}", ledger["audits"]["1"]);
    // A newer ledger than this runner knows is refused, not misread.
    let mut newer = ledger.clone();
    newer["version"] = json!(4);
    std::fs::write(s.state.join("ledger.json"), serde_json::to_vec(&newer).unwrap()).unwrap();
    let out = s.command("run").output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("version"), "{}", said(&out));
}

// ---- 6. The ledger and reports survive a SIGKILL between any two writes.

/// Checkpoint 1 passes, 2 is a discrepancy, 3 an error (not retried within the trial).
fn crash_setup(name: &str) -> Setup {
    let s = Setup::new(name, "sequential", false);
    let config = std::fs::read_to_string(&s.config).unwrap().replace("\"initial_s\": 1", "\"initial_s\": 3600");
    let config = config.replace("\"max_s\": 1", "\"max_s\": 3600");
    std::fs::write(&s.config, config).unwrap();
    for ck in 1..=3 {
        s.complete(ck);
    }
    s.steer("incident-reconcile", Some(2), "discrepancy");
    s.steer("incident-verify", Some(3), "error");
    s
}

/// What must hold of a state directory at any instant: the ledger reads
/// whole, and `reports/` holds whole reports only, each the ledger's account.
fn whole(s: &Setup, when: &str) -> Result<(), String> {
    let path = s.state.join("ledger.json");
    let ledger: Option<Json> = match std::fs::read(&path) {
        Ok(bytes) => Some(serde_json::from_slice(&bytes).map_err(|e| format!("{when}: ledger.json is torn: {e}"))?),
        Err(_) => None,
    };
    if let Some(l) = &ledger {
        if l["format"] != "clink-audit-ledger" {
            return Err(format!("{when}: ledger.json is not a ledger"));
        }
    }
    let Ok(entries) = std::fs::read_dir(s.state.join("reports")) else { return Ok(()) };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        let report: Json = serde_json::from_slice(&std::fs::read(entry.path()).unwrap_or_default())
            .map_err(|e| format!("{when}: reports/{name} is not a whole report: {e}"))?;
        if report["format"] != "clink-audit-report" || !name.ends_with(".json") {
            return Err(format!("{when}: reports/{name} is not a report"));
        }
        let audit =
            ledger.as_ref().and_then(|l| l["audits"].as_object()?.values().find(|a| a["id"] == report["id"]).cloned());
        if audit.as_ref().map(|a| &a["outcome"]) != Some(&report["outcome"]) {
            return Err(format!("{when}: reports/{name} says {} and the ledger {:?}", report["outcome"], audit));
        }
    }
    Ok(())
}

/// Each audit's (outcome, attempts, published) and the reports published.
fn account(s: &Setup) -> (Vec<(String, Vec<String>, bool)>, usize) {
    let ledger = s.ledger();
    let audits = ledger["audits"]
        .as_object()
        .unwrap()
        .values()
        .map(|a| (outcome(a).to_string(), attempt_outcomes(a), a["published"] == true))
        .collect();
    (audits, std::fs::read_dir(s.state.join("reports")).unwrap().count())
}

/// Runs one cycle paused for good at write point `k`, SIGKILLs it there;
/// false when the cycle ended before reaching it.
fn killed_at(s: &Setup, k: u64) -> bool {
    let said = s.dir.join(format!("paused-{k}"));
    let mut child = s
        .command("run")
        .env("CLINK_TEST_AUDIT_PAUSE_AT", k.to_string())
        .env("CLINK_TEST_AUDIT_PAUSE_FILE", &said)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if std::fs::read_to_string(&said).is_ok_and(|t| t.ends_with('\n')) {
            child.kill().unwrap();
            child.wait().unwrap();
            return true;
        }
        if let Some(status) = child.try_wait().unwrap() {
            assert!(matches!(status.code(), Some(0 | 1)), "write point {k}: the run ended {status:?}");
            return false;
        }
        assert!(Instant::now() < deadline, "write point {k}: neither paused nor ended");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn the_ledger_and_reports_survive_a_kill_between_any_two_writes() {
    let control = crash_setup("crash-control");
    control.run();
    let expected = account(&control);
    assert_eq!(expected.1, 3);
    let mut k = 1;
    let mut failures = Vec::new();
    loop {
        let s = crash_setup(&format!("crash-{k}"));
        let paused = killed_at(&s, k);
        let point = std::fs::read_to_string(s.dir.join(format!("paused-{k}"))).unwrap_or_default();
        let when = format!("killed at write point {}", point.trim());
        if let Err(why) = whole(&s, &when) {
            failures.push(why);
        }
        if !paused {
            break;
        }
        s.run();
        if let Err(why) = whole(&s, &format!("{when}, then resumed")) {
            failures.push(why);
        }
        let got = account(&s);
        if got != expected {
            failures.push(format!("{when}, then resumed: {got:?}, uninterrupted {expected:?}"));
        }
        k += 1;
    }
    assert!(k > 30, "only {k} write points in a cycle of three audits");
    assert!(failures.is_empty(), "{} of {k} kills:\n{}", failures.len(), failures.join("\n"));
}

// ---- 7. Never healthy before the current lineage has a passed audit.

#[test]
fn a_runner_that_has_verified_nothing_is_never_healthy() {
    let s = Setup::new("nothing-verified", "sequential", false);
    s.steer("incident-scope", None, "unsupported");
    s.complete(1);
    s.run();
    assert_eq!(outcome(&s.audit(1)), "unsupported");
    // The job's checkpoint is seconds old, the limit an hour: still not healthy.
    let (code, status) = s.status(3600);
    assert_eq!((code, status["state"].as_str()), (3, Some("stale")), "{status}");
    assert!(status["stale"].as_str().unwrap_or_default().contains("current lineage"), "{status}");
    // The control: one audit passes, and the same runner reads healthy.
    s.unsteer("incident-scope", None);
    s.complete(2);
    s.run();
    let (code, status) = s.status(3600);
    assert_eq!((code, status["state"].as_str()), (0, Some("healthy")), "{status}");
}

// ---- 8. An acknowledgement is bound to the report it was made for.

#[test]
fn an_acknowledgement_made_before_its_discrepancy_silences_nothing() {
    let s = Setup::new("ack-early", "sequential", false);
    s.complete(1);
    s.steer("incident-verify", None, "error");
    s.run();
    let id = s.audit(1)["id"].as_str().unwrap().to_string();
    // Written ahead, for the attempt that has not run yet.
    let acks = s.state.join("acks");
    std::fs::create_dir_all(&acks).unwrap();
    let early = json!({"audit": id, "attempt": 2, "note": "whatever it finds", "at_ms": 1, "by": "op"});
    std::fs::write(acks.join("early.json"), serde_json::to_vec(&early).unwrap()).unwrap();
    s.unsteer("incident-verify", None);
    s.steer("incident-reconcile", None, "discrepancy");
    after_backoff();
    s.run();
    assert_eq!(attempt_outcomes(&s.audit(1)), ["error", "discrepancy"]);
    let (code, status) = s.status(3600);
    assert_eq!((code, status["state"].as_str()), (1, Some("discrepancy")), "{status}");
    assert_eq!(status["discrepancies"][0]["acknowledged"], false, "{status}");
}

#[test]
fn an_acknowledgement_silences_the_report_it_read_and_no_other() {
    let s = Setup::new("ack-report", "sequential", false);
    s.complete(1);
    s.steer("incident-reconcile", None, "discrepancy");
    s.run();
    let id = s.audit(1)["id"].as_str().unwrap().to_string();
    let report = s.state.join("reports").join(format!("{id}.json"));
    let read = clink_basics::digest::sha256_hex(&std::fs::read(&report).unwrap());
    let (_, status) = s.status(3600);
    assert_eq!(status["discrepancies"][0]["report_sha256"], read.as_str(), "{status}");
    // Naming a report that is not the published one is refused.
    let other = "0".repeat(64);
    let out =
        s.command("acknowledge").args(["--audit", &id, "--note", "n", "--report-sha256", &other]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&read), "{}", said(&out));
    let out =
        s.command("acknowledge").args(["--audit", &id, "--note", "known", "--report-sha256", &read]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let (code, _) = s.status(3600);
    assert_ne!(code, 1);
    // Another report in its place (another finding): the acknowledgement
    // was of the one before, and the discrepancy stands again.
    let mut doc: Json = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    doc["findings"][0]["summary"] = json!("a row missing");
    std::fs::write(&report, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
    let (code, status) = s.status(3600);
    assert_eq!((code, status["state"].as_str()), (1, Some("discrepancy")), "{status}");
}

// ---- 9. A retired lineage's passes verify nothing of the new one.

const LINEAGE_A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const LINEAGE_B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

impl Setup {
    /// The job directory records `lineage` (as the engine writes it).
    fn lineage(&self, lineage: &str) {
        std::fs::write(self.dir.join("ck/_jobs/9/LINEAGE"), lineage).unwrap();
    }
}

#[test]
fn a_new_lineage_is_not_verified_by_the_old_ones_passes() {
    let s = Setup::new("lineage", "sequential", false);
    s.lineage(&format!("{LINEAGE_A}\n"));
    s.complete(1);
    s.run();
    assert_eq!(outcome(&s.audit(1)), "passed");
    assert_eq!(s.audit(1)["lineage"], LINEAGE_A);
    let old = s.audit(1)["id"].as_str().unwrap().to_string();
    let report: Json =
        serde_json::from_slice(&std::fs::read(s.state.join(format!("reports/{old}.json"))).unwrap()).unwrap();
    assert_eq!(report["lineage"], LINEAGE_A, "the report says which run it is of");
    let (code, _) = s.status(3600);
    assert_eq!(code, 0);
    // A fresh checkpoint directory: a new lineage, nothing completed yet.
    std::fs::remove_dir_all(s.dir.join("ck")).unwrap();
    std::fs::create_dir_all(s.dir.join("ck/_jobs/9")).unwrap();
    s.lineage(&format!("{LINEAGE_B}\n"));
    s.run();
    let ledger = s.ledger();
    assert_eq!(ledger["lineage"], LINEAGE_B);
    assert_eq!(ledger["retired"][0]["id"], old.as_str(), "{ledger}");
    let (code, status) = s.status(3600);
    assert_ne!(code, 0, "healthy on the old lineage's pass: {status}");
    assert_eq!(status["last_verified"], Json::Null, "{status}");
    // Its first checkpoint cannot be verified: stale, whatever the old one passed.
    s.steer("incident-scope", None, "unsupported");
    s.complete(1);
    s.run();
    assert_eq!(s.audit(1)["lineage"], LINEAGE_B);
    let (code, status) = s.status(3600);
    assert_eq!((code, status["state"].as_str()), (3, Some("stale")), "{status}");
    assert_eq!(status["last_verified"], Json::Null, "{status}");
}

#[test]
fn a_lineage_record_that_does_not_read_is_refused() {
    let s = Setup::new("lineage-bad", "sequential", false);
    s.complete(1);
    for bad in ["", "not a lineage\n", &LINEAGE_A.to_uppercase(), &format!("{LINEAGE_A}\n\n")] {
        s.lineage(bad);
        let out = s.command("run").output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {}", said(&out));
        assert!(String::from_utf8_lossy(&out.stderr).contains("LINEAGE"), "{bad:?}: {}", said(&out));
    }
    assert!(s.calls().is_empty(), "a child ran: {}", s.calls());
    s.lineage(LINEAGE_A);
    s.run();
    assert_eq!(outcome(&s.audit(1)), "passed");
}

// ---- 10. acknowledge checks the configuration as run does.

#[test]
fn acknowledge_refuses_a_configuration_run_refuses() {
    let s = Setup::new("ack-config", "sequential", false);
    s.complete(1);
    s.steer("incident-reconcile", None, "discrepancy");
    s.run();
    let id = s.audit(1)["id"].as_str().unwrap().to_string();
    // The same state directory under another configuration.
    let text = std::fs::read_to_string(&s.config).unwrap().replace("\"retain_passed\": 50", "\"retain_passed\": 51");
    std::fs::write(&s.config, text).unwrap();
    let run = s.command("run").output().unwrap();
    assert_eq!(run.status.code(), Some(2), "{}", said(&run));
    let ack = s.acknowledge(&id);
    assert_eq!(ack.status.code(), Some(2), "{}", said(&ack));
    for out in [&run, &ack] {
        assert!(String::from_utf8_lossy(&out.stderr).contains("another configuration"), "{}", said(out));
    }
    assert!(!s.state.join("acks").exists(), "an acknowledgement was written");
}

// ---- 11. What the runner prints says why, and what to change when nothing will.

#[test]
fn the_runner_prints_each_outcomes_reason() {
    let s = Setup::new("printed", "sequential", false);
    s.complete(1);
    s.complete(2);
    s.steer("incident-verify", Some(2), "error");
    let out = s.command("run").output().unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(printed.contains("cycle 1: checkpoint 1: passed\n"), "{printed}");
    assert!(printed.contains("cycle 1: checkpoint 2: error: verify: "), "the reason, not only `error`: {printed}");
}

#[test]
fn an_audit_whose_captures_retention_removed_says_so_and_what_to_change() {
    let s = Setup::new("retention", "sequential", false);
    s.complete(1);
    s.complete(2);
    s.steer("incident-scope", None, "not-whole");
    // The recorder keeps epochs from 2 on: interval 1's captures are gone.
    let kept = s.dir.join("capture/op-4/subtask-0");
    std::fs::create_dir_all(&kept).unwrap();
    for name in ["epoch-2.cap", "epoch-2.sink.json"] {
        std::fs::write(kept.join(name), b"").unwrap();
    }
    let out = s.command("run").output().unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert_eq!(outcome(&s.audit(1)), "expired", "{printed}");
    assert!(printed.contains("checkpoint 1: expired: scope: the job's capture retention"), "{printed}");
    assert!(printed.contains("--capture-retain-epochs"), "what to change: {printed}");
    // Its own captures kept, interval 2's evidence is only not whole yet: tried again.
    assert_eq!(outcome(&s.audit(2)), "partial", "{printed}");
    after_backoff();
    s.run();
    assert_eq!(attempt_outcomes(&s.audit(1)), ["expired"], "an audit that can never be complete is not retried");
    assert_eq!(attempt_outcomes(&s.audit(2)), ["partial", "partial"]);
}

// ---- 12. A cycle ends while the job outruns every collection.

#[test]
fn a_cycle_ends_when_the_job_moves_during_every_collection() {
    let s = Setup::new("moving", "sequential", false);
    s.complete(1);
    s.steer("incident-collect", None, "moving");
    let mut child = s.command("run").stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("the cycle did not end in 60 s; collections: {}", s.calls().lines().count());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let collected_early: std::collections::BTreeSet<String> = s
        .calls()
        .lines()
        .filter_map(|l| l.strip_prefix("incident-collect "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|ck| ck != "1")
        .collect();
    assert!(
        !collected_early.is_empty() && collected_early.len() <= 4,
        "checkpoints collected early in one cycle: {collected_early:?}"
    );
    assert_eq!(outcome(&s.audit(1)), "passed");
}
