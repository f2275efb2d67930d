//! Replay against real runs: live-replay equivalence for the example job's
//! window and idle epochs, replay-replay byte identity (a processing-time
//! operator included), replay-diff, regression bundles, and the readers'
//! behaviour on cut, truncated, old and multi-input captures.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use clink_basics::ids::OperatorId;
use clink_engine::capture::{read_capture, subtask_dir, OpSpecFile};
use clink_engine::event::Event;
use clink_replay::compare::keyed_order_diff;
use clink_replay::{list_captured, load_epoch, replay, verify, EpochRef, StartState};

fn clink(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_clink")).args(args).output().expect("clink starts")
}

fn p(path: &Path) -> &str {
    path.to_str().expect("UTF-8 temp paths")
}

fn job(name: &str) -> String {
    format!("{}/../fixtures/jobs/{name}/job.json", env!("CARGO_MANIFEST_DIR"))
}

/// A run with capture on, kept for the whole test process.
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

fn gen_input(dir: &Path, events: &str) -> PathBuf {
    let input = dir.join("input");
    let out = clink(&["gen-input", "--seed", "5", "--events", events, "--accounts", "25", "--out", p(&input)]);
    assert!(out.status.success());
    input
}

fn run_job(run: &tempfile::TempDir, job_name: &str, input: &Path, fault: Option<&str>) -> Output {
    let d = run.path();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_clink"));
    cmd.args(["run", "--quiet", "--checkpoint-every-records", "500", "--retain-checkpoints", "1000"])
        .args(["--job", &job(job_name)])
        .args(["--input-dir", p(input)])
        .args(["--output-dir", p(&d.join("out"))])
        .args(["--checkpoint-dir", p(&d.join("ck"))])
        .args(["--capture-dir", p(&d.join("capture"))]);
    if let Some(f) = fault {
        cmd.env("CLINK_FAULT", f);
    }
    cmd.output().expect("clink run starts")
}

/// The example job, killed right after checkpoint 2's marker and resumed, so
/// its captures hold a restored run's first epoch too.
fn example() -> &'static Run {
    static RUN: OnceLock<Run> = OnceLock::new();
    RUN.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let input = gen_input(dir.path(), "4000");
        let killed = run_job(&dir, "example", &input, Some("coordinator.after_completed_marker@2"));
        assert!(!killed.status.success());
        let resumed = run_job(&dir, "example", &input, None);
        assert!(resumed.status.success(), "{}", String::from_utf8_lossy(&resumed.stderr));
        Run { dir }
    })
}

fn restored_first_epoch(run: &Run) -> u64 {
    let layout = clink_engine::checkpoint::CheckpointLayout::new(run.checkpoints(), 1);
    clink_engine::checkpoint::markers::read_restored(&layout).unwrap().expect("a RESTORED record").next
}

/// The rows a sink subtask received in an epoch: the production output of
/// the operator feeding it by a forward edge.
fn sink_input(run: &Run, sink: u64, subtask: u32, epoch: u64) -> Option<Vec<Vec<clink_engine::value::Value>>> {
    let path = subtask_dir(&run.capture(), OperatorId(sink), subtask).join(format!("epoch-{epoch}.cap"));
    let capture = read_capture(&std::fs::read(&path).ok()?).unwrap();
    assert!(capture.is_whole());
    let rows = capture
        .events
        .into_iter()
        .filter_map(|e| match e {
            Event::Record(row) => Some(row),
            _ => None,
        })
        .collect();
    Some(rows)
}

#[test]
fn replayed_window_and_idle_epochs_equal_what_production_emitted() {
    let run = example();
    let layout = clink_engine::checkpoint::CheckpointLayout::new(run.checkpoints(), 1);
    let restored = clink_engine::checkpoint::markers::read_restored(&layout).unwrap().unwrap();
    let (mut compared, mut rows, mut passed_over) = (0, 0, 0);
    for (at, _) in list_captured(&run.capture()).unwrap() {
        let sink = match at.operator.0 {
            3 => 5,
            4 => 6,
            _ => continue,
        };
        let evidence = match load_epoch(&run.capture(), &run.checkpoints(), 1, &at) {
            Ok(e) => e,
            // An epoch of the run the restore discarded may start from a
            // checkpoint that never completed; nothing else may be unavailable.
            Err(e) if restored.passes_over(at.epoch) && restored.passes_over(at.epoch - 1) => {
                passed_over += 1;
                eprintln!("{at}: {e}");
                continue;
            }
            Err(e) => panic!("{at}: {e}"),
        };
        let replayed = replay(&evidence).unwrap();
        assert!(!replayed.partial);
        let production = match sink_input(run, sink, at.subtask, at.epoch) {
            Some(rows) => rows,
            // The kill can land after an operator's barrier and before its sink's.
            None if restored.passes_over(at.epoch) => {
                passed_over += 1;
                continue;
            }
            None => panic!("{at}: the sink's capture of the epoch is missing"),
        };
        let keys = evidence.spec.plan().unwrap().output_key_columns();
        assert_eq!(keys, vec![0]);
        if let Some(d) = keyed_order_diff(&replayed.emissions, &production, &keys) {
            panic!("{at}: the replay differs from production: {d}");
        }
        compared += 1;
        rows += production.len();
    }
    assert!(compared >= 20, "only {compared} epochs compared ({passed_over} passed over)");
    assert!(rows > 100, "the compared epochs emitted only {rows} rows");
}

#[test]
fn a_restored_runs_first_epoch_starts_from_the_restore_point() {
    let run = example();
    let first = restored_first_epoch(run);
    let at = EpochRef { operator: OperatorId(3), subtask: 0, epoch: first };
    let evidence = load_epoch(&run.capture(), &run.checkpoints(), 1, &at).unwrap();
    assert!(matches!(evidence.start, StartState::Snapshot { checkpoint: 2, .. }), "{:?}", evidence.start);
    let replayed = replay(&evidence).unwrap();
    let production = sink_input(run, 5, 0, first).expect("the sink's capture");
    assert_eq!(keyed_order_diff(&replayed.emissions, &production, &[0]), None);
}

#[test]
fn two_replays_are_byte_identical_including_processing_time_timers() {
    let dir = tempfile::tempdir().unwrap();
    let input = gen_input(dir.path(), "6000");
    let out = run_job(&dir, "proc-time", &input, None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let run = Run { dir };
    let (mut verified, mut ticks, mut emitted) = (0, 0, 0);
    for (at, _) in list_captured(&run.capture()).unwrap() {
        if at.operator.0 != 3 {
            continue;
        }
        let evidence = load_epoch(&run.capture(), &run.checkpoints(), 1, &at).unwrap();
        ticks += evidence.capture.events.iter().filter(|e| matches!(e, Event::ProcessingTime(_))).count();
        let v = verify(&evidence).unwrap();
        assert!(v.identical, "{at}: {:?}", v.first_difference);
        emitted += v.outcome.emissions.len();
        verified += 1;
    }
    assert!(verified > 5);
    assert!(ticks > 0, "no processing-time timer fired in any captured epoch");
    assert!(emitted > 0);
    let sweep =
        clink(&["replay", "sweep", "--capture-dir", p(&run.capture()), "--checkpoint-dir", p(&run.checkpoints())]);
    assert_eq!(sweep.status.code(), Some(0), "{}", String::from_utf8_lossy(&sweep.stdout));
}

/// An epoch of the resumed run, `k` after its first.
fn live_epoch(run: &Run, k: u64) -> String {
    (restored_first_epoch(run) + k).to_string()
}

fn replay_args<'a>(run: &'a Run, command: &'a str, op: &'a str, epoch: &'a str) -> Vec<String> {
    [
        "replay",
        command,
        "--capture-dir",
        p(&run.capture()),
        "--checkpoint-dir",
        p(&run.checkpoints()),
        "--op",
        op,
        "--subtask",
        "0",
        "--epoch",
        epoch,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn clink_owned(args: &[String]) -> Output {
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    clink(&refs)
}

#[test]
fn replay_diff_finds_identical_dumps_and_locates_a_doctored_emission() {
    let run = example();
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.emit"), dir.path().join("b.emit"));
    for out in [&a, &b] {
        let epoch = live_epoch(run, 1);
        let mut args = replay_args(run, "epoch", "3", &epoch);
        args.extend(["--out".into(), p(out).into()]);
        assert!(clink_owned(&args).status.success());
    }
    let same = clink(&["replay-diff", p(&a), p(&b)]);
    assert_eq!(same.status.code(), Some(0));
    let mut dump = clink_replay::emissions::read_dump(&b).unwrap();
    assert!(dump.rows.len() > 3);
    dump.rows[2][1] = clink_engine::value::Value::Timestamp(-1);
    let at = EpochRef { operator: OperatorId(dump.operator), subtask: dump.subtask, epoch: dump.epoch };
    std::fs::write(&b, clink_replay::emissions::encode_dump(dump.job.unwrap_or(1), &at, &dump.rows)).unwrap();
    let differ = clink(&["replay-diff", p(&a), p(&b)]);
    assert_eq!(differ.status.code(), Some(1));
    let text = String::from_utf8_lossy(&differ.stdout);
    assert!(text.contains("emission 2:") && text.contains("Timestamp(-1)"), "{text}");
}

#[test]
fn a_regression_bundle_passes_and_fails_once_its_golden_is_doctored() {
    let run = example();
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("bundle");
    let epoch = live_epoch(run, 2);
    let mut args = replay_args(run, "emit-test", "4", &epoch);
    args.extend(["--out".into(), p(&bundle).into()]);
    let emitted = clink_owned(&args);
    assert!(emitted.status.success(), "{}", String::from_utf8_lossy(&emitted.stderr));
    assert_eq!(clink(&["replay", "run-test", p(&bundle)]).status.code(), Some(0));
    assert_eq!(clink_owned(&args).status.code(), Some(2), "an existing bundle is never written over");

    // A doctored golden whose manifest still vouches for the old bytes: refused.
    let golden = bundle.join("golden.emit");
    let mut dump = clink_replay::emissions::read_dump(&golden).unwrap();
    dump.rows.push(vec![clink_engine::value::Value::Str("ghost".into())]);
    let at = EpochRef { operator: OperatorId(dump.operator), subtask: dump.subtask, epoch: dump.epoch };
    let doctored = clink_replay::emissions::encode_dump(dump.job.unwrap_or(1), &at, &dump.rows);
    std::fs::write(&golden, &doctored).unwrap();
    let refused = clink(&["replay", "run-test", p(&bundle)]);
    assert_eq!(refused.status.code(), Some(2), "{}", String::from_utf8_lossy(&refused.stderr));

    // The same golden re-vouched for in the manifest: the replay diverges, located.
    let manifest_path = bundle.join("manifest.json");
    let mut manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(&manifest_path).unwrap()).unwrap();
    for f in manifest["files"].as_array_mut().unwrap() {
        if f["path"] == "golden.emit" {
            f["sha256"] = clink_basics::digest::sha256_hex(&doctored).into();
            f["size"] = doctored.len().into();
        }
    }
    std::fs::write(&manifest_path, serde_json::to_vec(&manifest).unwrap()).unwrap();
    let failed = clink(&["replay", "run-test", p(&bundle)]);
    assert_eq!(failed.status.code(), Some(1));
    let text = String::from_utf8_lossy(&failed.stdout);
    assert!(text.contains(&format!("emission {}", dump.rows.len() - 1)) && text.contains("(no emission)"), "{text}");
}

/// Replays operator 3 subtask 0 of `epoch` from a doctored copy of the capture.
fn replay_copy(run: &Run, capture: &Path, epoch: &str, extra: &[&str]) -> Output {
    let mut args = vec!["replay", "epoch", "--capture-dir", p(capture), "--checkpoint-dir"];
    let checkpoints = run.checkpoints();
    args.push(p(&checkpoints));
    args.extend(["--op", "3", "--subtask", "0", "--epoch", epoch]);
    args.extend(extra);
    clink(&args)
}

/// A copy of the example's capture of one epoch, for doctoring.
fn copy_epoch(run: &Run, op: u64, epoch: &str, into: &Path) -> PathBuf {
    let from = subtask_dir(&run.capture(), OperatorId(op), 0);
    let to = subtask_dir(into, OperatorId(op), 0);
    std::fs::create_dir_all(&to).unwrap();
    std::fs::copy(from.join("op.json"), to.join("op.json")).unwrap();
    let name = format!("epoch-{epoch}.cap");
    std::fs::copy(from.join(&name), to.join(&name)).unwrap();
    to.join(name)
}

#[test]
fn a_byte_truncated_capture_replays_its_prefix_deterministically_and_says_so() {
    let run = example();
    let scratch = tempfile::tempdir().unwrap();
    let epoch = live_epoch(run, 1);
    let file = copy_epoch(run, 3, &epoch, scratch.path());
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let out = replay_copy(run, scratch.path(), &epoch, &["--verify"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("partial") && text.contains("deterministic"), "{text}");
}

#[test]
fn an_epoch_past_the_capture_bound_is_marked_truncated_and_replayed_as_partial() {
    let dir = tempfile::tempdir().unwrap();
    let input = gen_input(dir.path(), "2000");
    let d = dir.path();
    let out = clink(&[
        "run",
        "--quiet",
        "--checkpoint-every-records",
        "500",
        "--job",
        &job("example"),
        "--input-dir",
        p(&input),
        "--output-dir",
        p(&d.join("out")),
        "--checkpoint-dir",
        p(&d.join("ck")),
        "--capture-dir",
        p(&d.join("capture")),
        "--capture-records",
        "10",
        "--retain-checkpoints",
        "100",
    ]);
    assert!(out.status.success());
    let at = EpochRef { operator: OperatorId(2), subtask: 0, epoch: 2 };
    let evidence = load_epoch(&d.join("capture"), &d.join("ck"), 1, &at).unwrap();
    let h = &evidence.capture.header;
    assert!(h.truncated && h.true_records == 500, "{h:?}");
    let records = evidence.capture.events.iter().filter(|e| matches!(e, Event::Record(_))).count();
    assert_eq!(records, 10);
    let v = verify(&evidence).unwrap();
    assert!(v.identical && v.outcome.partial);
    assert!(v.outcome.notes.iter().any(|n| n.contains("truncated")));
}

#[test]
fn a_multi_input_operator_is_rejected_by_name() {
    let run = example();
    let scratch = tempfile::tempdir().unwrap();
    let epoch = live_epoch(run, 1);
    copy_epoch(run, 3, &epoch, scratch.path());
    let spec_path = subtask_dir(scratch.path(), OperatorId(3), 0).join("op.json");
    let mut spec = OpSpecFile::read(&spec_path).unwrap();
    spec.inputs.push(spec.inputs[0].clone());
    std::fs::write(&spec_path, serde_json::to_vec(&spec).unwrap()).unwrap();
    let out = replay_copy(run, scratch.path(), &epoch, &["--verify"]);
    assert_eq!(out.status.code(), Some(3));
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("operator 3 (tumbling_window) has 2 inputs") && text.contains("single-input"), "{text}");
}

#[test]
fn a_version_1_capture_replays_its_records_only_with_a_note() {
    let run = example();
    let scratch = tempfile::tempdir().unwrap();
    let epoch = live_epoch(run, 1);
    let file = copy_epoch(run, 3, &epoch, scratch.path());
    let capture = read_capture(&std::fs::read(&file).unwrap()).unwrap();
    let mut header = capture.header.clone();
    header.version = 1;
    let records: Vec<_> =
        capture.events.iter().filter_map(|e| if let Event::Record(r) = e { Some(r) } else { None }).collect();
    header.stored_events = records.len() as u64;
    let mut bytes = clink_engine::capture::format::encode_header(&header);
    let mut w = clink_engine::codec::Writer::new();
    for r in &records {
        clink_engine::value::encode_row(&mut w, r);
    }
    bytes.extend(w.into_bytes());
    std::fs::write(&file, bytes).unwrap();
    let out = replay_copy(run, scratch.path(), &epoch, &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("records only"), "{text}");
    // Without its watermarks, no window of the epoch fires.
    assert!(text.contains(": 0 emissions"), "{text}");
}

#[test]
fn a_regression_bundle_whose_golden_names_another_epoch_is_refused() {
    let run = example();
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("bundle");
    let epoch = live_epoch(run, 2);
    let mut args = replay_args(run, "emit-test", "4", &epoch);
    args.extend(["--out".into(), p(&bundle).into()]);
    assert!(clink_owned(&args).status.success());
    // The same rows, under a header naming the next epoch; the manifest
    // resealed, so only the golden's own header can tell.
    let golden = bundle.join("golden.emit");
    let dump = clink_replay::emissions::read_dump(&golden).unwrap();
    let at = EpochRef { operator: OperatorId(dump.operator), subtask: dump.subtask, epoch: dump.epoch + 1 };
    let relabelled = clink_replay::emissions::encode_dump(dump.job.unwrap_or(1), &at, &dump.rows);
    std::fs::write(&golden, &relabelled).unwrap();
    let manifest_path = bundle.join("manifest.json");
    let mut manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(&manifest_path).unwrap()).unwrap();
    let entry = manifest["files"].as_array_mut().unwrap().iter_mut().find(|f| f["path"] == "golden.emit").unwrap();
    entry["sha256"] = clink_basics::digest::sha256_hex(&relabelled).into();
    entry["size"] = (relabelled.len() as u64).into();
    std::fs::write(&manifest_path, serde_json::to_vec_pretty(&manifest).unwrap()).unwrap();
    let refused = clink(&["replay", "run-test", p(&bundle)]);
    assert_eq!(refused.status.code(), Some(2), "{}", String::from_utf8_lossy(&refused.stdout));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("golden.emit names"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}

/// With the defaults, every epoch the recorder keeps replays: its starting
/// checkpoint is kept with it. A start pruned anyway is named as pruned.
#[test]
fn a_default_runs_captured_epochs_all_replay_and_a_pruned_start_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let input = gen_input(dir.path(), "6000");
    let d = dir.path();
    let ran = Command::new(env!("CARGO_BIN_EXE_clink"))
        .args(["run", "--quiet", "--checkpoint-every-records", "300", "--job", &job("example")])
        .args(["--input-dir", p(&input), "--output-dir", p(&d.join("out")), "--checkpoint-dir", p(&d.join("ck"))])
        .args(["--capture-dir", p(&d.join("capture"))])
        .output()
        .unwrap();
    assert!(ran.status.success(), "{}", String::from_utf8_lossy(&ran.stderr));
    let sweep = |what: &str| {
        let out = clink(&[
            "replay",
            "sweep",
            "--json",
            "--capture-dir",
            p(&d.join("capture")),
            "--checkpoint-dir",
            p(&d.join("ck")),
        ]);
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{what}: {e}"));
        (out.status.code(), doc)
    };
    let (code, doc) = sweep("default");
    assert_eq!(doc["unavailable"], 0, "{doc}");
    assert_eq!(code, Some(0), "{doc}");
    assert!(doc["deterministic"].as_u64().unwrap() > 0, "{doc}");
    // The default window is the retained checkpoints' (3) per subtask.
    let epochs = std::fs::read_dir(subtask_dir(&d.join("capture"), OperatorId(3), 0))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with("epoch-"))
        .count();
    assert_eq!(epochs, 3);
    // Prune one starting state by hand, as a shorter retention would have.
    let state = d.join("ck/_state/1");
    let oldest = std::fs::read_dir(&state)
        .unwrap()
        .flat_map(|g| std::fs::read_dir(g.unwrap().path().join("op-3-0")).unwrap())
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "snap"))
        .min_by_key(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            name.trim_start_matches("checkpoint-").trim_end_matches(".snap").parse::<u64>().unwrap()
        })
        .unwrap();
    std::fs::remove_file(&oldest).unwrap();
    std::fs::remove_file(oldest.with_extension("snap.meta")).unwrap();
    let (code, doc) = sweep("pruned");
    assert_eq!((code, doc["unavailable"].clone()), (Some(3), 1.into()), "{doc}");
    assert!(doc["problems"].to_string().contains("was pruned by retention"), "{doc}");
}
