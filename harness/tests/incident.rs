//! incident-collect against live jobs, and incident-verify's conclusion rules
//! on real bundles: a collection racing a checkpoint refuses and leaves
//! nothing; an existing --out is never touched; a replay divergence in one
//! epoch fails replay.determinism even when other epochs are unavailable;
//! incident-regress freezes an epoch that then runs as a test.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};

use serde_json::Value as Json;

fn clink() -> Command {
    Command::new(env!("CARGO_BIN_EXE_clink"))
}

fn job(name: &str) -> String {
    format!("{}/../fixtures/jobs/{name}/job.json", env!("CARGO_MANIFEST_DIR"))
}

struct Live {
    dir: tempfile::TempDir,
}

impl Live {
    fn new(events: &str) -> Live {
        let dir = tempfile::tempdir().unwrap();
        let out = clink()
            .args(["gen-input", "--events", events, "--accounts", "20", "--out"])
            .arg(dir.path().join("input"))
            .output()
            .unwrap();
        assert!(out.status.success());
        Live { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn run(&self, job_name: &str, extra: &[&str]) -> Command {
        let mut cmd = clink();
        cmd.args(["run", "--quiet", "--job", &job(job_name)])
            .arg("--input-dir")
            .arg(self.path("input"))
            .arg("--output-dir")
            .arg(self.path("out"))
            .arg("--checkpoint-dir")
            .arg(self.path("ck"))
            .arg("--capture-dir")
            .arg(self.path("capture"))
            .arg("--ha-dir")
            .arg(self.path("ha"))
            .args(extra)
            .env("CLINK_PROTOCOL_TRACE_DIR", self.path("traces"));
        cmd
    }

    fn collect(&self, out: &Path, extra: &[&str]) -> Command {
        let mut cmd = clink();
        cmd.arg("incident-collect")
            .arg("--checkpoint-dir")
            .arg(self.path("ck"))
            .arg("--ha-dir")
            .arg(self.path("ha"))
            .arg("--capture-dir")
            .arg(self.path("capture"))
            .arg("--trace-dir")
            .arg(self.path("traces"))
            .args(["--include-state", "--include-captures", "--json", "--out"])
            .arg(out)
            .args(extra);
        cmd
    }
}

fn wait_for_marker(live: &Live, child: &mut Child) {
    for _ in 0..200 {
        let completed =
            |d: std::fs::ReadDir| d.flatten().any(|e| e.file_name().to_string_lossy().starts_with("COMPLETED-"));
        if std::fs::read_dir(live.path("ck/_jobs/1")).map(completed).unwrap_or(false) {
            return;
        }
        if child.try_wait().unwrap().is_some() {
            panic!("the job ended before its first checkpoint completed");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!("no checkpoint completed");
}

fn json(out: &Output) -> Json {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

#[test]
fn a_collection_racing_a_completing_checkpoint_refuses_as_changed_and_leaves_nothing() {
    let live = Live::new("20000");
    let mut job = live.run("example", &["--checkpoint-every-records", "100", "--source-rate", "4000"]).spawn().unwrap();
    wait_for_marker(&live, &mut job);
    let out = live.path("bundles/incident");
    // Pause after the first copied file: checkpoints complete meanwhile.
    let result = live.collect(&out, &[]).env("CLINK_TEST_COLLECT_PAUSE_MS", "400").output().unwrap();
    let _ = job.kill();
    let _ = job.wait();
    assert_eq!(result.status.code(), Some(1), "{}", String::from_utf8_lossy(&result.stderr));
    let report = json(&result);
    assert_eq!(report["result"], "refused");
    assert_eq!(report["kind"], "changed", "{report}");
    assert!(!out.exists(), "a refused collection left {}", out.display());
    let leftovers: Vec<_> = std::fs::read_dir(live.path("bundles")).unwrap().collect();
    assert!(leftovers.is_empty(), "the temporary directory was left behind: {leftovers:?}");
    assert_eq!(report["next_action"], "collect again, or stop the job first");
}

#[test]
fn an_existing_out_is_never_touched() {
    let live = Live::new("2000");
    assert!(live.run("example", &["--checkpoint-every-records", "500"]).output().unwrap().status.success());
    let out = live.path("taken");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("keep.txt"), b"mine").unwrap();
    let result = live.collect(&out, &["--commit-confirmation", "no"]).output().unwrap();
    assert_eq!(result.status.code(), Some(2));
    assert_eq!(std::fs::read(out.join("keep.txt")).unwrap(), b"mine");
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 1);
}

#[test]
fn a_bundle_collected_after_the_job_ended_knows_the_job_from_its_markers_and_verifies() {
    let live = Live::new("2000");
    assert!(live.run("example", &["--checkpoint-every-records", "500"]).output().unwrap().status.success());
    let out = live.path("b");
    // No job manifest (the job ended) and no option: the markers name the graph.
    let collected = live.collect(&out, &[]).output().unwrap();
    assert!(collected.status.success(), "{}", String::from_utf8_lossy(&collected.stdout));
    let manifest: Json = serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
    assert!(manifest["absent"].to_string().contains("the job ended (finished)"), "{}", manifest["absent"]);
    assert_eq!(manifest["contents"]["job_graph"], true);
    assert_eq!(manifest["job"]["requires_commit_confirmation"], false);
    for profile in ["integrity", "consistency", "replay"] {
        let verified = clink().args(["incident-verify", "--json", "--profile", profile]).arg(&out).output().unwrap();
        assert_eq!(verified.status.code(), Some(0), "{profile}: {}", String::from_utf8_lossy(&verified.stdout));
    }
}

#[test]
fn a_rule_the_evidence_contradicts_or_cannot_say_is_refused_rather_than_guessed() {
    let live = Live::new("2000");
    assert!(live.run("example", &["--checkpoint-every-records", "500"]).output().unwrap().status.success());
    let out = live.path("b");
    let contradicted = live.collect(&out, &["--commit-confirmation", "yes"]).output().unwrap();
    assert_eq!(contradicted.status.code(), Some(1));
    let report = json(&contradicted);
    assert_eq!(report["kind"], "other", "{report}");
    assert!(report["reason"].as_str().unwrap().contains("the job graph says commit confirmation is false"), "{report}");
    assert!(!out.exists());
    // Markers of an older build (version 1) name no graph: without a manifest
    // or the option nothing says which rule applies.
    for entry in std::fs::read_dir(live.path("ck/_jobs/1")).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap().to_str().unwrap().starts_with("COMPLETED-") {
            let mut marker: Json = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            marker["version"] = 1.into();
            marker.as_object_mut().unwrap().remove("graph");
            marker.as_object_mut().unwrap().remove("run");
            std::fs::write(&path, serde_json::to_vec(&marker).unwrap()).unwrap();
        }
    }
    let unknown = live.collect(&out, &[]).output().unwrap();
    assert_eq!(unknown.status.code(), Some(1));
    assert_eq!(json(&unknown)["kind"], "other");
    assert!(json(&unknown)["reason"]
        .as_str()
        .unwrap()
        .contains("nothing says whether the sinks need commit confirmation"));
    let named = live.collect(&out, &["--commit-confirmation", "no"]).output().unwrap();
    assert!(named.status.success(), "{}", String::from_utf8_lossy(&named.stdout));
}

#[test]
fn a_divergence_in_one_epoch_fails_determinism_while_another_is_unavailable() {
    let live = Live::new("6000");
    let args = ["--checkpoint-every-records", "500", "--source-rate", "20000", "--capture-retain-epochs", "1000"];
    let done = live.run("proc-time", &args).output().unwrap();
    assert!(done.status.success());
    // The run keeps every checkpoint its captured epochs start from; prune
    // checkpoint 2 by hand, as a run with a shorter window would have.
    for generation in std::fs::read_dir(live.path("ck/_state/1")).unwrap() {
        for participant in std::fs::read_dir(generation.unwrap().path()).unwrap() {
            let dir = participant.unwrap().path();
            for name in ["checkpoint-2.snap", "checkpoint-2.snap.meta"] {
                std::fs::remove_file(dir.join(name)).unwrap();
            }
        }
    }
    let last = std::fs::read_dir(live.path("ck/_jobs/1"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_prefix("COMPLETED-")?.parse::<u64>().ok())
        .max()
        .unwrap();
    // Epoch 3 starts from checkpoint 2, whose snapshots were pruned long ago.
    // The other is a late epoch whose replay emits rows (fired processing-time
    // timers): which one depends on how fast this run went, so ask replay.
    let fires = |epoch: u64| {
        let out = clink()
            .args(["replay", "epoch", "--json", "--op", "3", "--epoch", &epoch.to_string(), "--capture-dir"])
            .arg(live.path("capture"))
            .arg("--checkpoint-dir")
            .arg(live.path("ck"))
            .output()
            .unwrap();
        json(&out)["emissions"].as_u64().unwrap_or(0)
    };
    let late = (last.saturating_sub(3)..last).rev().find(|&e| fires(e) > 0).expect("a late epoch that fires timers");
    let out = live.path("bundle");
    let epochs = format!("3,{late}");
    let collected =
        live.collect(&out, &["--commit-confirmation", "no", "--epochs", &epochs, "--op", "3"]).output().unwrap();
    assert!(collected.status.success(), "{}", String::from_utf8_lossy(&collected.stderr));

    let verify = |defect: Option<&str>| {
        let mut cmd = clink();
        cmd.args(["incident-verify", "--json", "--profile", "replay"]).arg(&out);
        if let Some(d) = defect {
            cmd.env("CLINK_TEST_DEFECT", d);
        }
        let result = cmd.output().unwrap();
        (result.status.code(), json(&result))
    };
    let check = |report: &Json, name: &str| {
        report["checks"]
            .as_array()
            .unwrap_or_else(|| panic!("no checks: {report}"))
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("{report}"))
            .clone()
    };

    // The correct build: the one replayable epoch passes, the other is unavailable.
    let (code, report) = verify(None);
    let determinism = check(&report, "replay.determinism");
    assert_eq!(code, Some(3), "{report}");
    assert_eq!(determinism["status"], "unavailable");
    assert_eq!(determinism["counts"]["passed"], 1);
    assert_eq!(determinism["counts"]["unavailable"], 1);

    // An operator that keeps state outside its snapshot: its epoch's two replays differ.
    let (code, report) = verify(Some("state_outside_snapshot"));
    let determinism = check(&report, "replay.determinism");
    assert_eq!(code, Some(1), "{report}");
    assert_eq!(determinism["status"], "failed", "{determinism}");
    assert_eq!(determinism["counts"]["failed"], 1);
    assert_eq!(determinism["counts"]["unavailable"], 1);
}

#[test]
fn incident_regress_freezes_an_epoch_that_then_passes_as_a_test() {
    let bundle = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/bundles/good");
    let manifest: Json = serde_json::from_slice(&std::fs::read(bundle.join("manifest.json")).unwrap()).unwrap();
    let epoch = manifest["epochs"].as_array().unwrap().iter().find(|e| e["operator"] == "3").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("frozen");
    let result = clink()
        .arg("incident-regress")
        .arg(&bundle)
        .args(["--op", "3", "--subtask"])
        .arg(epoch["subtask"].to_string())
        .arg("--epoch")
        .arg(epoch["epoch"].to_string())
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(result.status.success(), "{}", String::from_utf8_lossy(&result.stderr));
    let run = clink().args(["replay", "run-test"]).arg(&out).output().unwrap();
    assert!(run.status.success());
    // A sink's recorded input is not an operator epoch to freeze.
    let sink = manifest["epochs"].as_array().unwrap().iter().find(|e| e["role"] == "sink").unwrap();
    let refused = clink()
        .arg("incident-regress")
        .arg(&bundle)
        .arg("--op")
        .arg(sink["operator"].as_str().unwrap())
        .arg("--epoch")
        .arg(sink["epoch"].to_string())
        .arg("--out")
        .arg(dir.path().join("sink"))
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(1));
    assert!(!dir.path().join("sink").exists());
}

#[test]
fn bounds_and_the_timeout_refuse_with_their_kind_and_leave_nothing() {
    let live = Live::new("2000");
    assert!(live.run("example", &["--checkpoint-every-records", "500"]).output().unwrap().status.success());
    for (extra, kind) in
        [(["--max-files", "3"], "bound"), (["--max-bytes", "100"], "bound"), (["--timeout-s", "1"], "timeout")]
    {
        let out = live.path(&format!("b-{kind}-{}", extra[1]));
        let mut args = vec!["--commit-confirmation", "no"];
        args.extend(extra);
        // A pause after the first file outlasts a one-second timeout.
        let result = live.collect(&out, &args).env("CLINK_TEST_COLLECT_PAUSE_MS", "1500").output().unwrap();
        assert_eq!(result.status.code(), Some(1), "{extra:?}");
        assert_eq!(json(&result)["kind"], kind, "{extra:?}");
        assert!(!out.exists());
    }
    let leftovers: Vec<_> = std::fs::read_dir(live.dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".incident-collect-"))
        .collect();
    assert!(leftovers.is_empty(), "temporary directories left: {leftovers:?}");
}

fn fixture_bundle() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/bundles/good")
}

fn verify_report(args: &[&str]) -> (Option<i32>, Json) {
    let result = clink()
        .arg("incident-verify")
        .arg(fixture_bundle())
        .args(["--json", "--profile", "replay"])
        .args(args)
        .output()
        .unwrap();
    (result.status.code(), json(&result))
}

fn find_check(report: &Json, name: &str) -> Json {
    report["checks"].as_array().unwrap().iter().find(|c| c["name"] == name).cloned().unwrap_or(Json::Null)
}

#[test]
fn epochs_past_max_replays_are_omitted_never_dropped_and_a_narrow_selection_can_pass() {
    let (code, report) = verify_report(&["--max-replays", "2"]);
    assert_eq!(code, Some(3), "{report}");
    let determinism = find_check(&report, "replay.determinism");
    assert_eq!(determinism["status"], "unavailable");
    assert_eq!(determinism["counts"]["checked"], 2);
    assert!(determinism["counts"]["omitted"].as_u64().unwrap() > 0);
    assert_eq!(
        determinism["counts"]["selected"].as_u64().unwrap(),
        2 + determinism["counts"]["omitted"].as_u64().unwrap()
    );
    let (code, report) = verify_report(&["--max-replays", "2", "--op", "3", "--subtask", "0"]);
    assert_eq!(code, Some(0), "{report}");
    let (code, report) = verify_report(&["--op", "999"]);
    assert_eq!(code, Some(3), "an empty selection never passes: {report}");
    assert_eq!(find_check(&report, "replay.determinism")["counts"]["selected"], 0);
}

/// The window operator's rows for the bundle's epochs, as an expectation file
/// (taken from its sinks' recorded input), optionally doctored.
fn write_expectation(path: &Path, doctor: impl Fn(&mut Vec<Json>)) {
    use clink_engine::event::Event;
    use clink_engine::value::Value;
    let manifest: Json =
        serde_json::from_slice(&std::fs::read(fixture_bundle().join("manifest.json")).unwrap()).unwrap();
    // The epochs of operator 3 a replay checks (their checkpoints completed):
    // its consumer, the windows sink, recorded its rows of those epochs.
    let completed = |epoch: &Json| {
        fixture_bundle().join(format!("checkpoint/_jobs/1/COMPLETED-{}", epoch.as_u64().unwrap())).is_file()
    };
    let replayed: Vec<Json> = manifest["epochs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["operator"] == "3" && completed(&e["epoch"]))
        .map(|e| e["epoch"].clone())
        .collect();
    let mut rows = Vec::new();
    for e in
        manifest["epochs"].as_array().unwrap().iter().filter(|e| e["operator"] == "5" && replayed.contains(&e["epoch"]))
    {
        let bytes = std::fs::read(fixture_bundle().join(e["path"].as_str().unwrap())).unwrap();
        for event in clink_engine::capture::read_capture(&bytes).unwrap().events {
            if let Event::Record(row) = event {
                rows.push(Json::Array(
                    row.iter()
                        .map(|v| match v {
                            Value::Str(s) => Json::from(s.clone()),
                            Value::Timestamp(t) | Value::Int(t) => Json::from(*t),
                            Value::Decimal(d) => Json::from(d.to_string()),
                            other => panic!("{other:?}"),
                        })
                        .collect(),
                ));
            }
        }
    }
    assert!(!rows.is_empty());
    doctor(&mut rows);
    let text: String = rows.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(path, text).unwrap();
}

#[test]
fn expected_output_compares_one_operators_epochs_as_multisets() {
    let dir = tempfile::tempdir().unwrap();
    let expected = dir.path().join("expected.ndjson");
    let path = expected.to_str().unwrap();

    write_expectation(&expected, |rows| rows.reverse());
    let (code, report) = verify_report(&["--op", "3", "--expected", path]);
    assert_eq!(find_check(&report, "replay.expected_output")["status"], "passed", "{report}");
    assert_eq!(code, Some(0));

    // A row the replay emits that the expectation lacks fails at once.
    write_expectation(&expected, |rows| {
        rows.pop();
    });
    let (code, report) = verify_report(&["--op", "3", "--expected", path]);
    let check = find_check(&report, "replay.expected_output");
    assert_eq!(check["status"], "failed", "{check}");
    assert!(check["details"].to_string().contains("emitted but not expected"), "{check}");
    assert_eq!(code, Some(1));

    // An expected row not emitted fails only when every epoch was replayed whole.
    write_expectation(&expected, |rows| rows.push(rows[0].clone()));
    let (_, report) = verify_report(&["--op", "3", "--expected", path]);
    assert_eq!(find_check(&report, "replay.expected_output")["status"], "failed");
    let (code, report) = verify_report(&["--op", "3", "--expected", path, "--max-replays", "1"]);
    assert_eq!(find_check(&report, "replay.expected_output")["status"], "unavailable", "{report}");
    assert_eq!(code, Some(3));

    // One operator at a time; a malformed expectation is bad usage.
    let refused = clink()
        .arg("incident-verify")
        .arg(fixture_bundle())
        .args(["--profile", "replay", "--expected", path])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    std::fs::write(&expected, "[\"acct\", 1]\n").unwrap();
    let refused = clink()
        .arg("incident-verify")
        .arg(fixture_bundle())
        .args(["--profile", "replay", "--op", "3", "--expected", path])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("line 1"));
}

#[test]
fn a_bundle_collected_right_after_a_crash_verifies_under_every_profile() {
    let live = Live::new("12000");
    // Killed before checkpoint 3's marker: every subtask closed epoch 3, but
    // its checkpoint never completed (checkpoint 2 did: acks arrive in order).
    let crashed = live
        .run("example", &["--checkpoint-every-records", "3000"])
        .env("CLINK_FAULT", "coordinator.before_completed_marker@3")
        .output()
        .unwrap();
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&crashed.status), Some(9));
    let out = live.path("bundle");
    let collected = live.collect(&out, &[]).output().unwrap();
    assert!(collected.status.success(), "{}", String::from_utf8_lossy(&collected.stdout));
    let manifest: Json = serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["selection"]["checkpoint"], 2, "{}", manifest["selection"]);
    assert!(manifest["epochs"].as_array().unwrap().iter().any(|e| e["epoch"] == 3), "epoch 3 was captured");
    for profile in ["integrity", "consistency", "replay", "full"] {
        let verified = clink().args(["incident-verify", "--json", "--profile", profile]).arg(&out).output().unwrap();
        assert_eq!(verified.status.code(), Some(0), "{profile}: {}", String::from_utf8_lossy(&verified.stdout));
    }
    // Asked for explicitly, the cut epoch is unavailable, saying why and what can be checked.
    let asked =
        clink().args(["incident-verify", "--json", "--profile", "replay", "--epoch", "3"]).arg(&out).output().unwrap();
    assert_eq!(asked.status.code(), Some(3));
    let report = json(&asked);
    let details = report["checks"].as_array().unwrap().iter().find(|c| c["name"] == "replay.determinism").unwrap()
        ["details"]
        .to_string();
    assert!(details.contains("checkpoint 3 did not complete") && details.contains("can be checked: {2}"), "{details}");
}

#[test]
fn a_huge_sparse_artifact_is_reported_as_what_it_is_without_allocating_it() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("bundle");
    common::copy_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/bundles/good"), &bundle);
    let manifest_path = bundle.join("manifest.json");
    let mut manifest: Json = serde_json::from_slice(&std::fs::read(&manifest_path).unwrap()).unwrap();
    const HUGE: u64 = 2 << 30;
    let artifact = manifest["artifacts"].as_array_mut().unwrap().iter_mut().find(|a| a["role"] == "snapshot").unwrap();
    // A sparse file of 2 GiB, and a manifest that vouches for its size (not its hash).
    std::fs::OpenOptions::new()
        .write(true)
        .open(bundle.join(artifact["path"].as_str().unwrap()))
        .unwrap()
        .set_len(HUGE)
        .unwrap();
    artifact["size"] = HUGE.into();
    std::fs::write(&manifest_path, serde_json::to_vec(&manifest).unwrap()).unwrap();
    let mut cmd = clink();
    cmd.args(["incident-verify", "--json", "--profile", "integrity"]).arg(&bundle);
    // At most 1 GiB of address space: reading the artifact whole could not fit.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            let limit = libc::rlimit { rlim_cur: 1 << 30, rlim_max: 1 << 30 };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let out = cmd.output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let report = json(&out);
    let artifacts = report["checks"].as_array().unwrap().iter().find(|c| c["name"] == "bundle.artifacts").unwrap();
    assert!(artifacts["details"].to_string().contains("SHA-256"), "{artifacts}");
}

#[test]
fn the_collectors_refusal_kinds_are_exact() {
    let live = Live::new("2000");
    assert!(live.run("example", &["--checkpoint-every-records", "500"]).output().unwrap().status.success());
    let jobs = live.path("ck/_jobs/1");
    // A COMPLETED-* entry that is not a regular file: no retry helps, so `other`, never `changed`.
    std::fs::create_dir(jobs.join("COMPLETED-99")).unwrap();
    let out = live.path("b1");
    let refused = live.collect(&out, &[]).output().unwrap();
    assert_eq!((refused.status.code(), json(&refused)["kind"].clone()), (Some(1), Json::from("other")));
    std::fs::remove_dir(jobs.join("COMPLETED-99")).unwrap();
    // A selected marker that does not parse: `other`.
    let newest = std::fs::read_dir(&jobs)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_prefix("COMPLETED-")?.parse::<u64>().ok())
        .max()
        .unwrap();
    let marker = jobs.join(format!("COMPLETED-{newest}"));
    let good = std::fs::read(&marker).unwrap();
    std::fs::write(&marker, b"{ not json").unwrap();
    let refused = live.collect(&out, &[]).output().unwrap();
    assert_eq!(
        (refused.status.code(), json(&refused)["kind"].clone()),
        (Some(1), Json::from("other")),
        "{}",
        json(&refused)
    );
    std::fs::write(&marker, good).unwrap();
    // A trace file whose name is not UTF-8 is recorded as absent, not skipped.
    let odd: &std::ffi::OsStr = std::os::unix::ffi::OsStrExt::from_bytes(b"worker-\xff.ndjson");
    std::fs::write(live.path("traces").join(odd), b"").unwrap();
    // --op keeps the captures of the operator's consumers.
    let collected = live.collect(&out, &["--op", "3"]).output().unwrap();
    assert!(collected.status.success(), "{}", String::from_utf8_lossy(&collected.stdout));
    let manifest: Json = serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
    assert!(manifest["absent"].to_string().contains("its name is not UTF-8"), "{}", manifest["absent"]);
    let ops: std::collections::BTreeSet<String> =
        manifest["epochs"].as_array().unwrap().iter().map(|e| e["operator"].as_str().unwrap().to_string()).collect();
    assert_eq!(ops, ["3", "5"].map(String::from).into(), "operator 3 and its consumer, the windows sink");
}

#[test]
fn a_checkpoint_named_without_a_known_rule_records_no_engine_choice() {
    let live = Live::new("2000");
    assert!(live.run("example", &["--checkpoint-every-records", "500"]).output().unwrap().status.success());
    // Markers of a build that named no graph, and no job manifest: no rule is known.
    for entry in std::fs::read_dir(live.path("ck/_jobs/1")).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap().to_str().unwrap().starts_with("COMPLETED-") {
            let mut marker: Json = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            marker["version"] = 1.into();
            marker.as_object_mut().unwrap().remove("graph");
            marker.as_object_mut().unwrap().remove("run");
            std::fs::write(&path, serde_json::to_vec(&marker).unwrap()).unwrap();
        }
    }
    let newest = std::fs::read_dir(live.path("ck/_jobs/1"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_prefix("COMPLETED-")?.parse::<u64>().ok())
        .max()
        .unwrap()
        .to_string();
    let out = live.path("b");
    let collected = live.collect(&out, &["--checkpoint", &newest]).output().unwrap();
    assert!(collected.status.success(), "{}", String::from_utf8_lossy(&collected.stdout));
    let manifest: Json = serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["selection"]["engine_choice"], Json::Null);
    let verified = clink().args(["incident-verify", "--json"]).arg(&out).output().unwrap();
    let report = json(&verified);
    let rule = report["checks"].as_array().unwrap().iter().find(|c| c["name"] == "checkpoint.restore_rule").unwrap();
    assert_eq!(rule["status"], "unsupported", "{rule}");
    // The markers rewritten as an older build's name no run, where the rest
    // of the evidence does: which run wrote them is not vouched for.
    let completeness = find_check(&report, "bundle.completeness");
    assert!(completeness["details"].to_string().contains("names no run"), "{completeness}");
    assert_eq!(verified.status.code(), Some(1));
}

#[test]
fn options_the_command_cannot_honour_are_refused_not_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let expectation = dir.path().join("expected.ndjson");
    std::fs::write(&expectation, b"").unwrap();
    for profile in ["integrity", "consistency"] {
        let out = clink()
            .arg("incident-verify")
            .arg(fixture_bundle())
            .args(["--json", "--profile", profile, "--expected"])
            .arg(&expectation)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "--expected under {profile}: {}", String::from_utf8_lossy(&out.stdout));
        assert!(String::from_utf8_lossy(&out.stdout).contains("--expected"), "the refusal names the option");
    }
    for bad in [["--max-replays", "0"], ["--max-replays", "-1"], ["--profile", "everything"]] {
        let out = clink().arg("incident-verify").arg(fixture_bundle()).args(bad).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?} must be refused: {}", String::from_utf8_lossy(&out.stderr));
        assert!(!String::from_utf8_lossy(&out.stderr).is_empty(), "{bad:?}: the refusal gives a reason");
    }
}

#[test]
fn a_build_with_the_defect_switches_says_so_in_its_version_and_reports() {
    // The suites run a build with the `defects` feature (the fault matrix
    // needs its switches); the default build's gate refuses such a binary.
    let out = clink().arg("--version").output().unwrap();
    let version = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(version.contains("test build"), "a build with the defect switches must say so: {version}");
    let (_, report) = verify_report(&["--op", "999"]);
    assert!(report.to_string().contains("test build"), "the report names the test build: {report}");
}

#[test]
fn incident_regress_refuses_an_epoch_whose_op_spec_contradicts_the_job_graph() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("bundle");
    common::copy_dir(&fixture_bundle(), &bundle);
    // The window subtask's op.json names another uid than the graph does,
    // re-vouched for in the manifest: every hash holds, the names do not.
    let rel = "capture/op-3/subtask-0/op.json";
    let mut spec: Json = serde_json::from_slice(&std::fs::read(bundle.join(rel)).unwrap()).unwrap();
    spec["uid"] = "windows-v2".into();
    let bytes = serde_json::to_vec_pretty(&spec).unwrap();
    std::fs::write(bundle.join(rel), &bytes).unwrap();
    let mut manifest: Json = serde_json::from_slice(&std::fs::read(bundle.join("manifest.json")).unwrap()).unwrap();
    for a in manifest["artifacts"].as_array_mut().unwrap() {
        if a["path"] == rel {
            a["size"] = bytes.len().into();
            a["sha256"] = clink_basics::digest::sha256_hex(&bytes).into();
        }
    }
    std::fs::write(bundle.join("manifest.json"), serde_json::to_vec_pretty(&manifest).unwrap()).unwrap();
    let epoch = manifest["epochs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["operator"] == "3" && e["subtask"] == 0 && e["role"] != "sink")
        .unwrap()
        .clone();
    let regress = |out: &Path| {
        clink()
            .arg("incident-regress")
            .arg(&bundle)
            .args(["--op", "3", "--subtask", "0", "--epoch"])
            .arg(epoch["epoch"].to_string())
            .arg("--out")
            .arg(out)
            .output()
            .unwrap()
    };
    let refused = regress(&dir.path().join("frozen"));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "a contradicted op.json must not be frozen: {stderr}");
    assert!(stderr.contains("uid") || stderr.contains("windows-v2"), "the refusal names what differs: {stderr}");
    assert!(!dir.path().join("frozen").exists(), "nothing is left behind");
    // The same epoch of the untouched bundle freezes: the refusal came from the edit.
    common::copy_dir(&fixture_bundle(), &dir.path().join("clean"));
    let clean = clink()
        .arg("incident-regress")
        .arg(dir.path().join("clean"))
        .args(["--op", "3", "--subtask", "0", "--epoch"])
        .arg(epoch["epoch"].to_string())
        .arg("--out")
        .arg(dir.path().join("frozen-clean"))
        .output()
        .unwrap();
    assert!(clean.status.success(), "{}", String::from_utf8_lossy(&clean.stderr));
}

/// Two jobs writing into one capture directory leave each other's files at
/// the same paths (a capture's path names no job). Collecting job 1 must
/// take none of job 2's: each capture's header, op.json and sink evidence
/// must name the job, operator, subtask and epoch its path says, or it is
/// left out and said to be absent, so a bundle never mixes two jobs.
#[test]
fn a_capture_directory_two_jobs_share_gives_a_bundle_only_its_own_jobs_captures() {
    let live = Live::new("2000");
    assert!(live.run("example", &["--checkpoint-every-records", "500"]).output().unwrap().status.success());
    // Job 2: the same graph under another id, its own checkpoints, the same captures.
    let text = std::fs::read_to_string(job("example")).unwrap().replace("\"job_id\": \"1\"", "\"job_id\": \"2\"");
    let job2 = live.path("job2.json");
    std::fs::write(&job2, text).unwrap();
    let ran = clink()
        .args(["run", "--quiet", "--checkpoint-every-records", "500", "--job"])
        .arg(&job2)
        .arg("--input-dir")
        .arg(live.path("input"))
        .arg("--output-dir")
        .arg(live.path("out2"))
        .arg("--checkpoint-dir")
        .arg(live.path("ck2"))
        .arg("--capture-dir")
        .arg(live.path("capture"))
        .output()
        .unwrap();
    assert!(ran.status.success(), "{}", String::from_utf8_lossy(&ran.stderr));
    let out = live.path("b");
    let collected = live.collect(&out, &["--epochs", "1,2,3,4"]).output().unwrap();
    assert!(collected.status.success(), "{}", String::from_utf8_lossy(&collected.stdout));
    let manifest: Json = serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
    // Every capture the bundle holds is job 1's, by its own header.
    for e in manifest["epochs"].as_array().unwrap() {
        let bytes = std::fs::read(out.join(e["path"].as_str().unwrap())).unwrap();
        let header = clink_engine::capture::format::read_capture_header(&bytes).unwrap();
        assert_eq!(header.job, 1, "{} is job {}'s capture", e["path"], header.job);
    }
    // Job 2 wrote every operator's files last: none is collected, each is named absent.
    assert!(manifest["epochs"].as_array().unwrap().is_empty(), "{}", manifest["epochs"]);
    let absent = manifest["absent"].to_string();
    assert!(absent.contains("another job's files"), "{absent}");
    // And the bundle's replay checks do not pass on nothing.
    let verified = clink().args(["incident-verify", "--json", "--profile", "replay"]).arg(&out).output().unwrap();
    assert_ne!(verified.status.code(), Some(0), "{}", String::from_utf8_lossy(&verified.stdout));
}

#[test]
fn a_directory_named_to_collect_from_must_exist_and_an_empty_part_is_said_absent() {
    let live = Live::new("2000");
    assert!(live.run("example", &["--checkpoint-every-records", "500"]).output().unwrap().status.success());
    let out = live.path("b");
    let swap = |from: &str, to: &Path| {
        let cmd = live.collect(&out, &[]);
        let args: Vec<std::ffi::OsString> =
            cmd.get_args().map(|a| if a == live.path(from).as_os_str() { to.into() } else { a.into() }).collect();
        let mut swapped = clink();
        swapped.args(args);
        swapped.output().unwrap()
    };
    // A mistyped directory is bad usage, named, with nothing published.
    // It says what makes the directory, and that a job run without one is
    // collected without the flag.
    for (flag, dir, what_to_do) in [
        ("--capture-dir", "capture", "leave --capture-dir out for a job run without it"),
        ("--trace-dir", "traces", "only where CLINK_PROTOCOL_TRACE_DIR pointed"),
        ("--ha-dir", "ha", "leave --ha-dir out for a job run without it"),
        ("--checkpoint-dir", "ck", "the job's clink run was given as --checkpoint-dir"),
    ] {
        let refused = swap(dir, &live.path("no-such"));
        assert_eq!(refused.status.code(), Some(2), "{flag}: {}", String::from_utf8_lossy(&refused.stdout));
        let said = format!("{}{}", String::from_utf8_lossy(&refused.stdout), String::from_utf8_lossy(&refused.stderr));
        assert!(said.contains(flag) && said.contains("no such directory"), "{flag}: {said}");
        assert!(said.contains(what_to_do), "{flag}: {said}");
        assert!(!out.exists(), "{flag}: a refused collection published {}", out.display());
    }
    // An existing, empty capture directory: the bundle says captures are absent, and why.
    std::fs::create_dir(live.path("empty")).unwrap();
    let collected = swap("capture", &live.path("empty"));
    assert!(collected.status.success(), "{}", String::from_utf8_lossy(&collected.stdout));
    let absent = json(&collected)["absent"].to_string();
    assert!(absent.contains("asked for, and no captured epoch was collected"), "{absent}");
    // A checkpoint directory of another job: missing evidence, with advice that fits it.
    std::fs::remove_dir_all(&out).unwrap();
    let refused = live.collect(&out, &["--job", "7"]).output().unwrap();
    let report = json(&refused);
    assert_eq!((refused.status.code(), report["kind"].clone()), (Some(1), Json::from("missing")), "{report}");
    let advice = report["next_action"].as_str().unwrap();
    assert!(advice.contains("--checkpoint-dir") && !advice.contains("stop the job"), "{advice}");
}

/// The bundle is refused (exit 2), the refusal naming `said`.
fn refused_naming(out: &Output, said: &str) {
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains(said), "the refusal does not say {said:?}: {text}");
}

/// Lists `rel` (as `role`) in the bundle's manifest with its size and
/// SHA-256 as they are on disk, adding the entry when it is missing.
fn vouch(bundle: &Path, rel: &str, role: &str) {
    let bytes = std::fs::read(bundle.join(rel)).unwrap();
    let mut m: Json = serde_json::from_slice(&std::fs::read(bundle.join("manifest.json")).unwrap()).unwrap();
    let artifacts = m["artifacts"].as_array_mut().unwrap();
    artifacts.retain(|a| a["path"] != rel);
    artifacts.push(serde_json::json!({
        "path": rel, "role": role, "size": bytes.len(), "sha256": clink_basics::digest::sha256_hex(&bytes)
    }));
    std::fs::write(bundle.join("manifest.json"), serde_json::to_vec_pretty(&m).unwrap()).unwrap();
}

/// Two runs of job 1 over different checkpoint directories (two lineages)
/// and different input, each killed before checkpoint 3's marker and then
/// resumed to its end: `(a, b)`.
fn two_lineages() -> (Live, Live) {
    let run = |live: &Live| {
        let crashed = live
            .run("example", &["--checkpoint-every-records", "3000"])
            .env("CLINK_FAULT", "coordinator.before_completed_marker@3")
            .output()
            .unwrap();
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&crashed.status), Some(9));
    };
    let a = Live::new("12000");
    let b = Live::new("12000");
    let other = clink()
        .args(["gen-input", "--seed", "77", "--events", "12000", "--accounts", "20", "--out"])
        .arg(b.path("input2"))
        .output()
        .unwrap();
    assert!(other.status.success());
    std::fs::remove_dir_all(b.path("input")).unwrap();
    std::fs::rename(b.path("input2"), b.path("input")).unwrap();
    run(&a);
    run(&b);
    (a, b)
}

#[test]
fn a_capture_of_the_interrupted_epoch_from_another_lineage_is_refused() {
    let (a, b) = two_lineages();
    let out = a.path("bundle");
    assert!(a.collect(&out, &[]).output().unwrap().status.success());
    let manifest: Json = serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
    let interrupted: Vec<String> = manifest["epochs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["epoch"] == 3)
        .map(|e| e["path"].as_str().unwrap().to_string())
        .collect();
    assert!(!interrupted.is_empty(), "epoch 3 was captured");
    // Each capture of the epoch, and its sink's interval evidence with it.
    for rel in &interrupted {
        let evidence = rel.replace(".cap", ".sink.json");
        for (rel, role) in [(rel.clone(), "capture"), (evidence, "sink_evidence")] {
            let theirs = b.path("capture").join(rel.strip_prefix("capture/").unwrap());
            if out.join(&rel).exists() {
                std::fs::copy(theirs, out.join(&rel)).unwrap();
                vouch(&out, &rel, role);
            }
        }
    }
    let verified = clink().args(["incident-verify", "--json", "--profile", "full"]).arg(&out).output().unwrap();
    // Before run identities this passed (exit 0): nothing said which run wrote a capture.
    refused_naming(&verified, "mixes evidence of two lineages");
}

#[test]
fn traces_of_another_lineage_are_refused() {
    let (a, b) = two_lineages();
    for live in [&a, &b] {
        let resumed = live.run("example", &["--checkpoint-every-records", "3000"]).output().unwrap();
        assert!(resumed.status.success(), "{}", String::from_utf8_lossy(&resumed.stderr));
    }
    let out = a.path("bundle");
    assert!(a.collect(&out, &[]).output().unwrap().status.success());
    // a's trace files out, b's in: well formed, and a behaviour of the
    // specification, but another lineage's history.
    let mut m: Json = serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
    for t in m["artifacts"].as_array().unwrap().iter().filter(|x| x["role"] == "trace") {
        std::fs::remove_file(out.join(t["path"].as_str().unwrap())).unwrap();
    }
    m["artifacts"].as_array_mut().unwrap().retain(|x| x["role"] != "trace");
    std::fs::write(out.join("manifest.json"), serde_json::to_vec_pretty(&m).unwrap()).unwrap();
    for entry in std::fs::read_dir(b.path("traces")).unwrap().flatten() {
        let rel = format!("traces/{}", entry.file_name().to_string_lossy());
        std::fs::copy(entry.path(), out.join(&rel)).unwrap();
        vouch(&out, &rel, "trace");
    }
    let formal = format!("{}/../formal", env!("CARGO_MANIFEST_DIR"));
    let verified = clink()
        .args(["incident-verify", "--json", "--profile", "full", "--formal-dir", &formal])
        .arg(&out)
        .output()
        .unwrap();
    // Before run identities this passed (exit 0): TLC accepts another run's history.
    refused_naming(&verified, "which no run record of the bundle's lineage names");
}

#[test]
fn epochs_all_collects_every_captured_epoch_and_a_malformed_selection_is_refused() {
    let live = Live::new("3000");
    let args = ["--checkpoint-every-records", "500", "--capture-retain-epochs", "100"];
    assert!(live.run("example", &args).output().unwrap().status.success());
    let mut on_disk = std::collections::BTreeSet::new();
    for op in std::fs::read_dir(live.path("capture")).unwrap() {
        for subtask in std::fs::read_dir(op.unwrap().path()).unwrap() {
            for file in std::fs::read_dir(subtask.unwrap().path()).unwrap() {
                let name = file.unwrap().file_name().into_string().unwrap();
                if let Some(epoch) = name.strip_prefix("epoch-").and_then(|n| n.strip_suffix(".cap")) {
                    on_disk.insert(epoch.parse::<u64>().unwrap());
                }
            }
        }
    }
    let all = live.collect(&live.path("all"), &["--epochs", "all"]).output().unwrap();
    assert!(all.status.success(), "{}", String::from_utf8_lossy(&all.stdout));
    let manifest: Json =
        serde_json::from_slice(&std::fs::read(live.path("all").join("manifest.json")).unwrap()).unwrap();
    let got: std::collections::BTreeSet<u64> =
        manifest["epochs"].as_array().unwrap().iter().map(|e| e["epoch"].as_u64().unwrap()).collect();
    assert!(on_disk.len() > 3, "the run kept more epochs than a default collection takes: {on_disk:?}");
    assert_eq!(got, on_disk, "--epochs all collects every epoch the capture directory holds");
    let default = live.collect(&live.path("default"), &[]).output().unwrap();
    assert!(default.status.success());
    let manifest: Json =
        serde_json::from_slice(&std::fs::read(live.path("default").join("manifest.json")).unwrap()).unwrap();
    let narrower: std::collections::BTreeSet<u64> =
        manifest["epochs"].as_array().unwrap().iter().map(|e| e["epoch"].as_u64().unwrap()).collect();
    assert!(narrower.len() < on_disk.len(), "the default selection is narrower: {narrower:?}");
    for bad in ["al", "1,,2", "all,1", ""] {
        let refused = live.collect(&live.path("bad"), &["--epochs", bad]).output().unwrap();
        assert_eq!(refused.status.code(), Some(2), "--epochs {bad:?}");
        assert!(!live.path("bad").exists());
    }
}
