//! The isolation proof, through the real `clink isolation prove|run` and
//! gates/network-isolation: enforced here only with positive evidence on
//! both sides, and never on the absence of an answer. Each way a wrapper can
//! lie is tried with a fake `unshare` first on PATH: one that runs nothing,
//! one that fails, one that runs the command without isolation, one that
//! crashes, one that prints a refusal of its own, one that writes a report
//! that is not the probe's. A command run under the proof exits with its own
//! status, runs in the namespace that was proven, and is never run when the
//! proof fails. Trials that need a working `unshare -rn` are ignored with
//! the reason `[unshare]` where it cannot run.

use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::Value as Json;

fn clink() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_clink"))
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn unshare_works() -> bool {
    Command::new("unshare").args(["-rn", "true"]).status().is_ok_and(|s| s.success())
}

fn other_interfaces_here() -> bool {
    std::fs::read_to_string("/proc/net/dev")
        .map(|t| t.lines().skip(2).filter_map(|l| l.split(':').next()).any(|n| n.trim() != "lo"))
        .unwrap_or(false)
}

/// A directory holding a fake `unshare` with this body, and a PATH that
/// finds it first.
struct Fake {
    dir: tempfile::TempDir,
}

impl Fake {
    fn new(body: &str) -> Fake {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("unshare");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        Fake { dir }
    }

    fn path(&self) -> String {
        format!("{}:{}", self.dir.path().display(), std::env::var("PATH").unwrap_or_default())
    }
}

const RUNS_NOTHING: &str = "exit 0";
const FAILS: &str = "exit 1";
/// Drops `-rn` and runs the rest: no isolation at all.
const WITHOUT_ISOLATION: &str = "shift\nexec \"$@\"";
/// Lets `unshare -rn true` pass, then crashes instead of running the probe.
const CRASHES: &str = "[ \"$2\" = true ] && exit 0\nkill -SEGV $$";
/// Prints a refusal of its own and runs nothing (what the old gate believed).
const PRINTS_REFUSED: &str = "echo refused\necho '{\"reach\": \"refused\"}'\nexit 0";
/// Writes a report of its own where the probe's goes, with a refusal in it.
const FORGES_A_REPORT: &str = r#"[ "$2" = true ] && exit 0
while [ $# -gt 0 ]; do [ "$1" = --report ] && report="$2"; shift; done
printf '%s' '{"format":"clink-isolation-probe","version":1,"nonce":"0000","interfaces":["lo"],"interfaces_error":null,"control":{"reach":"refused","detail":"forged"},"loopback":{"ok":true,"detail":"forged"},"command":"none"}' > "$report"
exit 0"#;

fn isolation(args: &[&str], path: Option<&str>) -> Output {
    let mut cmd = Command::new(clink());
    cmd.arg("isolation").args(args).stdin(Stdio::null());
    if let Some(p) = path {
        cmd.env("PATH", p);
    }
    cmd.env_remove("CLINK_ISOLATION_CLAIM");
    cmd.output().unwrap()
}

/// `clink isolation prove --json`: its exit code and proof.
fn prove(path: Option<&str>) -> Result<(Option<i32>, Json), Failed> {
    let out = isolation(&["prove", "--json"], path);
    let doc: Json = serde_json::from_slice(&out.stdout).map_err(|e| format!("no proof ({e}): {}", text(&out)))?;
    Ok((out.status.code(), doc))
}

fn expect(cond: bool, what: impl FnOnce() -> String) -> Result<(), Failed> {
    if cond {
        Ok(())
    } else {
        Err(what().into())
    }
}

fn expect_result(path: Option<&str>, exit: i32, result: &str) -> Result<Json, Failed> {
    let (code, doc) = prove(path)?;
    expect(code == Some(exit) && doc["result"] == result, || {
        format!("expected {result} (exit {exit}), got {code:?}: {doc:#}")
    })?;
    expect(doc["format"] == "clink-isolation-proof" && doc["exit_code"] == exit, || format!("{doc:#}"))?;
    Ok(doc)
}

fn enforced_here() -> Result<(), Failed> {
    let doc = expect_result(None, 0, "enforced")?;
    let (inside, outside) = (&doc["inside"], &doc["outside"]);
    expect(inside["interfaces"] == serde_json::json!(["lo"]), || format!("inside: {inside}"))?;
    expect(inside["control"]["reach"] == "refused" && inside["loopback"]["ok"] == true, || {
        format!("inside: {inside}")
    })?;
    expect(outside["control"]["reach"] == "answered", || format!("outside: {outside}"))?;
    expect(inside["nonce"] == outside["nonce"] && inside["nonce"].as_str().is_some_and(|n| n.len() == 32), || {
        format!("one nonce for both sides: {doc:#}")
    })?;
    let control = doc["control"].as_str().unwrap_or("");
    expect(control.starts_with("127.0.0.1:"), || format!("the control endpoint is on loopback: {control}"))
}

fn inconclusive_with(body: &'static str, needle: &'static str) -> impl FnOnce() -> Result<(), Failed> {
    move || {
        let fake = Fake::new(body);
        let doc = expect_result(Some(&fake.path()), 3, "inconclusive")?;
        expect(doc["inside"].is_null(), || format!("no probe report was taken: {doc:#}"))?;
        let reason = doc["reason"].as_str().unwrap_or("");
        expect(reason.contains(needle), || format!("the reason does not mention {needle:?}: {reason}"))
    }
}

fn a_wrapper_that_fails_is_unavailable() -> Result<(), Failed> {
    let fake = Fake::new(FAILS);
    let doc = expect_result(Some(&fake.path()), 3, "unavailable")?;
    let reason = doc["reason"].as_str().unwrap_or("");
    expect(reason.contains("unshare -rn true ended with exit 1"), || reason.to_string())
}

fn no_unshare_is_unavailable() -> Result<(), Failed> {
    let empty = tempfile::tempdir().unwrap();
    let doc = expect_result(Some(&empty.path().display().to_string()), 3, "unavailable")?;
    let reason = doc["reason"].as_str().unwrap_or("");
    expect(reason.contains("no unshare on PATH"), || reason.to_string())
}

fn a_wrapper_without_isolation_is_not_enforced() -> Result<(), Failed> {
    let fake = Fake::new(WITHOUT_ISOLATION);
    let doc = expect_result(Some(&fake.path()), 1, "not-enforced")?;
    let reason = doc["reason"].as_str().unwrap_or("");
    expect(reason.contains("interfaces besides lo"), || reason.to_string())
}

/// `clink isolation run -- CMD`: its output.
fn run(command: &[&str], path: Option<&str>) -> Output {
    let mut args = vec!["run", "--"];
    args.extend(command);
    isolation(&args, path)
}

fn own_exit_status() -> Result<(), Failed> {
    for (cmd, want) in [
        (&["false"][..], 1),
        (&["true"][..], 0),
        (&["sh", "-c", "exit 7"][..], 7),
        (&["sh", "-c", "kill -TERM $$"][..], 128 + 15),
    ] {
        let out = run(cmd, None);
        expect(out.status.code() == Some(want), || {
            format!("{cmd:?}: expected exit {want}: {:?} {}", out.status, text(&out))
        })?;
    }
    let out = run(&["no-such-command-here"], None);
    expect(out.status.code() == Some(2), || format!("a command that cannot start is exit 2: {}", text(&out)))
}

fn the_command_runs_in_the_proven_namespace() -> Result<(), Failed> {
    let out = run(&["sh", "-c", "cat /proc/net/dev; echo \"claim=$CLINK_ISOLATION_CLAIM\""], None);
    let shown = String::from_utf8_lossy(&out.stdout).to_string();
    let names: Vec<&str> = shown
        .lines()
        .skip(2)
        .filter(|l| l.contains(':') && !l.starts_with("claim="))
        .filter_map(|l| l.split(':').next())
        .map(str::trim)
        .collect();
    expect(out.status.success() && names == ["lo"], || {
        format!("only lo where the command ran: {names:?}: {}", text(&out))
    })?;
    expect(shown.contains("claim={\"format\":\"clink-isolation-claim\""), || {
        format!("the command is handed the claim: {shown}")
    })?;
    // A listener outside answers a connection from outside, never from the command.
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let connect = format!("exec 3<>/dev/tcp/127.0.0.1/{port}");
    let outside = Command::new("bash").args(["-c", &connect]).status().unwrap();
    expect(outside.success(), || "the listener answers outside".into())?;
    let inside = run(&["bash", "-c", &connect], None);
    expect(!inside.status.success(), || format!("the command reached 127.0.0.1:{port} outside: {}", text(&inside)))?;
    // Loopback works inside: a listener of the command's own answers it.
    let own = "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); socket.create_connection(s.getsockname()); print('loopback')";
    if Command::new("python3").arg("--version").output().is_ok_and(|o| o.status.success()) {
        let out = run(&["python3", "-c", own], None);
        expect(String::from_utf8_lossy(&out.stdout).contains("loopback"), || {
            format!("loopback inside: {}", text(&out))
        })?;
    }
    Ok(())
}

fn nothing_runs_unless_enforced() -> Result<(), Failed> {
    for (body, exit) in [(RUNS_NOTHING, 3), (FAILS, 3), (WITHOUT_ISOLATION, 1), (CRASHES, 3), (FORGES_A_REPORT, 3)] {
        let fake = Fake::new(body);
        let marker = fake.dir.path().join("ran");
        let out = run(&["touch", &marker.display().to_string()], Some(&fake.path()));
        expect(out.status.code() == Some(exit), || format!("{body:?}: expected exit {exit}: {}", text(&out)))?;
        expect(!marker.exists(), || format!("{body:?}: the command ran without enforced isolation"))?;
        expect(text(&out).contains("the command was not run"), || format!("{body:?}: {}", text(&out)))?;
    }
    Ok(())
}

fn signals_are_passed_on() -> Result<(), Failed> {
    let mut child = Command::new(clink()).args(["isolation", "run", "--", "sleep", "30"]).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let started = Instant::now();
    // SAFETY: a plain kill(2) of our own child.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let status = child.wait().unwrap();
    expect(status.code() == Some(128 + 15) && started.elapsed() < Duration::from_secs(10), || {
        format!("SIGTERM reaches the command, which ends with it: {status:?} after {:?}", started.elapsed())
    })
}

fn a_claim_set_by_hand_is_not_trusted() -> Result<(), Failed> {
    let dir = tempfile::tempdir().unwrap();
    let claim = r#"{"format":"clink-isolation-claim","version":1,"mechanism":"unshare-rn","reason":"trust me","control":"127.0.0.1:9","nonce":"x"}"#;
    let fixtures = root().join("fixtures/upgrade");
    let out = Command::new(clink())
        .args(["upgrade", "record", "--json", "--test"])
        .arg(fixtures.join("test.json"))
        .arg("--out")
        .arg(dir.path().join("record"))
        .args(["--tools-clink", &clink().display().to_string(), "--baseline-clink", &clink().display().to_string()])
        .arg("--baseline-job")
        .arg(fixtures.join("jobs/example.json"))
        .env("CLINK_ISOLATION_CLAIM", claim)
        .output()
        .unwrap();
    let report: Json = serde_json::from_slice(&out.stdout).map_err(|e| format!("no report ({e}): {}", text(&out)))?;
    let iso = report["checks"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["name"] == "isolation")
        .cloned()
        .unwrap_or_default();
    expect(out.status.code() == Some(1) && iso["status"] == "failed", || format!("{report:#}"))?;
    expect(iso["reason"].as_str().is_some_and(|r| r.contains("interfaces besides lo")), || format!("{iso}"))?;
    expect(report["commands"].as_array().is_some_and(|c| c.is_empty()), || {
        format!("a build ran: {:#}", report["commands"])
    })
}

/// A program that stands in for a release clink (the gates run only a binary
/// whose --version says exactly `clink <version>`, which a test build does
/// not): it says so, and hands every other call to this test build of clink.
struct Release {
    dir: tempfile::TempDir,
}

impl Release {
    fn new() -> Release {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("clink");
        let body = format!(
            "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'clink {}'; exit 0; fi\nexec '{}' \"$@\"\n",
            env!("CARGO_PKG_VERSION"),
            clink().display()
        );
        std::fs::write(&path, body).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        Release { dir }
    }

    fn path(&self) -> PathBuf {
        self.dir.path().join("clink")
    }
}

fn gate(args: &[&str], path: Option<&str>) -> Output {
    let release = Release::new();
    let mut cmd = Command::new(root().join("gates/network-isolation"));
    cmd.args(args).current_dir(root()).env("CLINK_BIN", release.path()).env_remove("CLINK_ISOLATION_CLAIM");
    if let Some(p) = path {
        cmd.env("PATH", p);
    }
    cmd.output().unwrap()
}

fn the_gate_is_the_command() -> Result<(), Failed> {
    let out = gate(&[], None);
    expect(out.status.code() == Some(0) && text(&out).contains("clink isolation: enforced"), || text(&out))?;
    let out = gate(&["--", "false"], None);
    expect(out.status.code() == Some(1), || format!("`-- false` exits 1: {}", text(&out)))?;
    let out = gate(&["--", "sh", "-c", "exit 5"], None);
    expect(out.status.code() == Some(5), || format!("the command's own status: {}", text(&out)))
}

fn the_gate_never_takes_silence_for_a_refusal() -> Result<(), Failed> {
    let fake = Fake::new(RUNS_NOTHING);
    let out = gate(&[], Some(&fake.path()));
    expect(out.status.code() == Some(3) && text(&out).contains("inconclusive"), || text(&out))?;
    let marker = fake.dir.path().join("ran");
    let out = gate(&["--", "touch", &marker.display().to_string()], Some(&fake.path()));
    expect(out.status.code() == Some(3) && !marker.exists(), || format!("ran, or exit 0: {}", text(&out)))
}

fn the_gate_refuses_a_test_build_as_its_prover() -> Result<(), Failed> {
    let mut cmd = Command::new(root().join("gates/network-isolation"));
    let out = cmd.current_dir(root()).env("CLINK_BIN", clink()).output().unwrap();
    expect(out.status.code() == Some(1) && text(&out).contains("not a release build"), || text(&out))
}

fn the_incident_gate_stops_when_the_wrapper_runs_nothing() -> Result<(), Failed> {
    let fake = Fake::new(RUNS_NOTHING);
    let release = Release::new();
    let mut cmd = Command::new(root().join("gates/incident-gate"));
    cmd.current_dir(root()).env("PATH", fake.path()).env("CLINK_BIN", release.path());
    for (key, _) in std::env::vars() {
        if key.starts_with("CLINK_TEST_") || key == "ALLOW_UNISOLATED" || key == "CLINK_ISOLATION_CLAIM" {
            cmd.env_remove(key);
        }
    }
    let out = cmd.output().unwrap();
    let shown = text(&out);
    expect(out.status.code() == Some(3), || format!("not established, never a pass: {shown}"))?;
    expect(shown.contains("prove network isolation (before anything runs)") && shown.contains("UNAVAILABLE"), || {
        shown.clone()
    })?;
    expect(shown.contains("inconclusive") && shown.contains("incident-gate: NOT ESTABLISHED"), || shown.clone())?;
    expect(!shown.contains("verify the copy") && !shown.contains("generate 24,000"), || {
        format!("steps ran after the proof failed: {shown}")
    })
}

fn main() {
    let args = Arguments::from_args();
    let unshare = unshare_works();
    let outside = other_interfaces_here();
    let needs = |trial: Trial, unshare_needed: bool, other_needed: bool| {
        if unshare_needed && !unshare {
            trial.with_ignored_flag(true).with_kind("unshare")
        } else if other_needed && !outside {
            trial.with_ignored_flag(true).with_kind("only-lo")
        } else {
            trial
        }
    };
    let trials = vec![
        needs(Trial::test("prove::enforced_here", enforced_here), true, false),
        needs(
            Trial::test(
                "prove::a_wrapper_that_runs_nothing_is_inconclusive",
                inconclusive_with(RUNS_NOTHING, "left no report"),
            ),
            false,
            false,
        ),
        needs(
            Trial::test("prove::a_wrapper_that_crashes_is_inconclusive", inconclusive_with(CRASHES, "signal 11")),
            false,
            false,
        ),
        needs(
            Trial::test(
                "prove::a_wrapper_that_prints_refused_is_inconclusive",
                inconclusive_with(PRINTS_REFUSED, "left no report"),
            ),
            false,
            false,
        ),
        needs(
            Trial::test(
                "prove::a_report_not_the_probes_is_inconclusive",
                inconclusive_with(FORGES_A_REPORT, "not this proof's"),
            ),
            false,
            false,
        ),
        needs(
            Trial::test("prove::a_wrapper_that_fails_is_unavailable", a_wrapper_that_fails_is_unavailable),
            false,
            true,
        ),
        needs(Trial::test("prove::no_unshare_is_unavailable", no_unshare_is_unavailable), false, true),
        needs(
            Trial::test(
                "prove::a_wrapper_without_isolation_is_not_enforced",
                a_wrapper_without_isolation_is_not_enforced,
            ),
            false,
            true,
        ),
        needs(Trial::test("run::the_command_s_own_exit_status", own_exit_status), true, false),
        needs(
            Trial::test("run::the_command_runs_in_the_proven_namespace", the_command_runs_in_the_proven_namespace),
            true,
            false,
        ),
        needs(Trial::test("run::nothing_runs_unless_enforced", nothing_runs_unless_enforced), false, true),
        needs(Trial::test("run::signals_are_passed_on", signals_are_passed_on), true, false),
        needs(
            Trial::test("claim::a_claim_set_by_hand_is_not_trusted", a_claim_set_by_hand_is_not_trusted),
            false,
            true,
        ),
        needs(Trial::test("gate::network_isolation_is_the_command", the_gate_is_the_command), true, false),
        needs(
            Trial::test(
                "gate::network_isolation_never_takes_silence_for_a_refusal",
                the_gate_never_takes_silence_for_a_refusal,
            ),
            false,
            false,
        ),
        needs(
            Trial::test(
                "gate::network_isolation_refuses_a_test_build_as_its_prover",
                the_gate_refuses_a_test_build_as_its_prover,
            ),
            false,
            false,
        ),
        needs(
            Trial::test(
                "gate::the_incident_gate_stops_when_the_wrapper_runs_nothing",
                the_incident_gate_stops_when_the_wrapper_runs_nothing,
            ),
            false,
            false,
        ),
    ];
    libtest_mimic::run(&args, trials).exit();
}
