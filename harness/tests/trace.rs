//! The protocol trace of real runs: file naming, one process per file,
//! sequence numbers from 1 without gaps, every line an event of the
//! vocabulary with exactly its fields, and the coordinator's steps of each
//! completed checkpoint in protocol order.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use clink_engine::trace::TraceEvent;
use serde_json::Value as Json;

fn run(dir: &Path, input: &Path, traces: &Path, fault: Option<&str>) -> std::process::Output {
    let job = format!("{}/../fixtures/jobs/example/job.json", env!("CARGO_MANIFEST_DIR"));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_clink"));
    cmd.args(["run", "--quiet", "--checkpoint-every-records", "400", "--job", &job])
        .arg("--input-dir")
        .arg(input)
        .arg("--output-dir")
        .arg(dir.join("out"))
        .arg("--checkpoint-dir")
        .arg(dir.join("ck"))
        .env("CLINK_PROTOCOL_TRACE_DIR", traces);
    if let Some(f) = fault {
        cmd.env("CLINK_FAULT", f);
    }
    cmd.output().expect("clink run starts")
}

#[test]
fn traces_of_a_killed_and_resumed_run_are_well_formed_and_in_protocol_order() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("input");
    let gen = Command::new(env!("CARGO_BIN_EXE_clink"))
        .args(["gen-input", "--events", "3000", "--out"])
        .arg(&input)
        .output()
        .unwrap();
    assert!(gen.status.success());
    let traces = dir.path().join("traces");
    assert!(!run(dir.path(), &input, &traces, Some("sink.before_commit@3")).status.success());
    assert!(run(dir.path(), &input, &traces, None).status.success());

    let vocabulary: BTreeMap<&str, TraceEvent> = TraceEvent::ALL.iter().map(|e| (e.name(), *e)).collect();
    let mut files: Vec<_> = std::fs::read_dir(&traces).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert_eq!(files.len(), 4, "a coordinator and a worker file per process: {files:?}");
    let mut seen_events = std::collections::BTreeSet::new();
    for file in &files {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let parts: Vec<&str> = name.trim_end_matches(".ndjson").split('-').collect();
        assert!(name.ends_with(".ndjson") && parts.len() == 3, "{name}");
        assert!(["coordinator", "worker"].contains(&parts[0]), "{name}");
        let expected_proc = format!("{}:{}", parts[0], parts[1]);
        let text = std::fs::read_to_string(file).unwrap();
        let mut steps: BTreeMap<(u64, &'static str), u64> = BTreeMap::new();
        let mut last_ts = 0;
        for (i, line) in text.lines().enumerate() {
            let v: Json = serde_json::from_str(line).unwrap_or_else(|e| panic!("{name}:{}: {e}", i + 1));
            assert_eq!(v["seq"], Json::from(i as u64 + 1), "{name}: seq must run from 1 without gaps");
            assert_eq!(v["proc"], Json::from(expected_proc.clone()), "{name}: one process per file");
            let ts = v["ts"].as_u64().unwrap();
            assert!(ts >= last_ts, "{name}:{}: ts went back", i + 1);
            last_ts = ts;
            let event = vocabulary[v["event"].as_str().unwrap()];
            seen_events.insert(event.name());
            let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
            let mut want: Vec<&str> =
                ["seq", "ts", "proc", "event"].into_iter().chain(event.fields().iter().copied()).collect();
            keys.sort();
            want.sort();
            assert_eq!(keys, want, "{name}:{}: fields of {}", i + 1, event.name());
            if let Some(c) = v["ckpt"].as_u64() {
                steps.entry((c, event.name())).or_insert(i as u64);
            }
        }
        // In each coordinator file: trigger, decision, durable marker, broadcast.
        if parts[0] == "coordinator" {
            for (&(c, event), &at) in &steps {
                if event == "Broadcast" {
                    let before = |e: &str| steps.get(&(c, e)).copied();
                    assert!(
                        before("WriteCompleted").is_some_and(|w| w < at),
                        "{name}: checkpoint {c} broadcast before its marker"
                    );
                    assert!(before("CoordComplete").is_some_and(|d| d < at));
                    assert!(before("Trigger").is_some_and(|t| t < at));
                }
            }
        }
    }
    for must in [
        "Trigger",
        "DeliverBarrier",
        "SinkPrepare",
        "SubtaskAck",
        "CoordComplete",
        "WriteCompleted",
        "Broadcast",
        "DeliverCommit",
        "SinkCommit",
        "SinkOpens",
        "CoordRecovers",
        "Redeploy",
        "Placement",
        "JobEnds",
    ] {
        assert!(seen_events.contains(must), "no {must} in the traces");
    }
}

/// Every line of every trace file in `dir`, in file order, files by name.
fn all_lines(dir: &Path) -> Vec<Json> {
    let mut files: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    files
        .iter()
        .flat_map(|f| {
            std::fs::read_to_string(f).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect::<Vec<Json>>()
        })
        .collect()
}

#[test]
fn a_failed_position_snapshot_delivers_no_barrier_and_fails_the_source() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("input");
    let gen = Command::new(env!("CARGO_BIN_EXE_clink"))
        .args(["gen-input", "--events", "3000", "--out"])
        .arg(&input)
        .output()
        .unwrap();
    assert!(gen.status.success());
    let traces = dir.path().join("traces");
    let out = run(dir.path(), &input, &traces, Some("source.snapshot_fails@2"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("restarting (op-1-0 failed: the position snapshot of checkpoint 2: injected"), "{stderr}");
    let lines = all_lines(&traces);
    let event = |l: &Json, name: &str, ckpt: u64| l["event"] == name && l["ckpt"] == ckpt;
    // Checkpoint 2 was triggered, its position snapshot failed: no
    // DeliverBarrier and no ack of 2, ever; the source failed (a restart
    // with ckpt 0), and 2 was discarded.
    assert!(lines.iter().any(|l| event(l, "Trigger", 2)));
    assert!(!lines.iter().any(|l| event(l, "DeliverBarrier", 2)), "a barrier line for a snapshot that failed");
    assert!(!lines.iter().any(|l| event(l, "SubtaskAck", 2)), "an ack of a checkpoint whose barrier never went out");
    assert!(lines.iter().any(|l| event(l, "RestartOnError", 0)));
    assert!(lines.iter().any(|l| event(l, "CoordComplete", 2) && l["outcome"] == "discarded"));
    let ends: Vec<&Json> = lines.iter().filter(|l| l["event"] == "JobEnds").collect();
    assert_eq!(ends.len(), 1);
    assert_eq!(ends[0]["outcome"], "finished");
}
