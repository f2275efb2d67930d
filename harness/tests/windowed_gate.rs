//! The replay document's windowed gate, end to end in one trial over one
//! real run of the example job (a tumbling window) with captures armed:
//!
//! 1. every replayed window epoch equals what the live sink received;
//! 2. `replay epoch --verify` passes for one operator, `replay sweep` for
//!    the whole job;
//! 3. two `--out` dumps of one epoch diff as identical, and a doctored dump
//!    diffs as different with the emission located;
//! 4. a regression bundle emitted from the epoch passes, and fails with the
//!    divergence located once its golden is doctored (and its manifest
//!    resealed, so only the replay can catch it);
//! 5. the capture and its checkpoints round-trip through `capture push` and
//!    `capture fetch` (a `file://` store) into another directory, byte for
//!    byte, and the fetched copy still verifies.

use std::path::Path;
use std::process::{Command, Output};

use clink_basics::ids::OperatorId;
use clink_engine::capture::{read_capture, subtask_dir};
use clink_engine::event::Event;
use clink_replay::compare::keyed_order_diff;
use clink_replay::emissions::{encode_dump, read_dump};
use clink_replay::{list_captured, load_epoch, replay, EpochRef};

fn clink(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_clink")).args(args).output().expect("clink starts")
}

fn p(path: &Path) -> &str {
    path.to_str().expect("UTF-8 temp paths")
}

fn ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: exit {:?}\n{}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

const WINDOWS: u64 = 3;
const WINDOWS_SINK: u64 = 5;

/// The rows the window's sink subtask received in an epoch, as captured.
fn sink_rows(capture: &Path, subtask: u32, epoch: u64) -> Vec<Vec<clink_engine::value::Value>> {
    let path = subtask_dir(capture, OperatorId(WINDOWS_SINK), subtask).join(format!("epoch-{epoch}.cap"));
    let capture = read_capture(&std::fs::read(&path).unwrap()).unwrap();
    assert!(capture.is_whole(), "{}", path.display());
    capture
        .events
        .into_iter()
        .filter_map(|e| match e {
            Event::Record(row) => Some(row),
            _ => None,
        })
        .collect()
}

fn replayed_windows_equal_the_live_sink_output(capture: &Path, checkpoints: &Path) {
    let mut compared = 0;
    for (at, _) in list_captured(capture).unwrap() {
        if at.operator.0 != WINDOWS {
            continue;
        }
        let evidence = load_epoch(capture, checkpoints, 1, &at).unwrap();
        let replayed = replay(&evidence).unwrap();
        let live = sink_rows(capture, at.subtask, at.epoch);
        assert_eq!(keyed_order_diff(&replayed.emissions, &live, &[0]), None, "{at}");
        compared += 1;
    }
    assert!(compared >= 6, "only {compared} window epochs compared");
}

fn dumps_diff_identical_and_a_doctored_one_is_located(dirs: &[&str], scratch: &Path) {
    let (a, b) = (scratch.join("a.emit"), scratch.join("b.emit"));
    for out in [&a, &b] {
        let mut args = vec!["replay", "epoch"];
        args.extend(dirs);
        args.extend(["--op", "3", "--subtask", "0", "--epoch", "2", "--out", p(out)]);
        ok(&clink(&args), "replay epoch --out");
    }
    let same = clink(&["replay", "diff", p(&a), p(&b)]);
    ok(&same, "replay diff of two dumps of one epoch");
    let mut dump = read_dump(&b).unwrap();
    assert!(dump.rows.len() > 3);
    dump.rows[3][3] = clink_engine::value::Value::Int(-7);
    let at = EpochRef { operator: OperatorId(dump.operator), subtask: dump.subtask, epoch: dump.epoch };
    std::fs::write(&b, encode_dump(dump.job.unwrap(), &at, &dump.rows)).unwrap();
    let differ = clink(&["replay", "diff", p(&a), p(&b)]);
    assert_eq!(differ.status.code(), Some(1));
    let text = String::from_utf8_lossy(&differ.stdout);
    assert!(text.contains("emission 3:") && text.contains("Int(-7)"), "{text}");
}

fn a_regression_bundle_passes_then_fails_once_its_golden_is_doctored(dirs: &[&str], scratch: &Path) {
    let bundle = scratch.join("regression");
    let mut args = vec!["replay", "emit-test"];
    args.extend(dirs);
    args.extend(["--op", "3", "--subtask", "1", "--epoch", "3", "--out", p(&bundle)]);
    ok(&clink(&args), "replay emit-test");
    ok(&clink(&["replay", "run-test", p(&bundle)]), "the fresh bundle passes");
    let golden = bundle.join("golden.emit");
    let mut dump = read_dump(&golden).unwrap();
    dump.rows.swap(0, 1);
    let at = EpochRef { operator: OperatorId(dump.operator), subtask: dump.subtask, epoch: dump.epoch };
    let doctored = encode_dump(dump.job.unwrap(), &at, &dump.rows);
    std::fs::write(&golden, &doctored).unwrap();
    // Reseal, as whoever doctored it would: every hash holds, only the replay can tell.
    let manifest_path = bundle.join("manifest.json");
    let mut manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(&manifest_path).unwrap()).unwrap();
    let files = manifest["files"].as_array_mut().expect("the manifest lists its files");
    let entry = files.iter_mut().find(|f| f["path"] == "golden.emit").expect("the golden is listed");
    entry["sha256"] = clink_basics::digest::sha256_hex(&doctored).into();
    entry["size"] = (doctored.len() as u64).into();
    std::fs::write(&manifest_path, serde_json::to_vec_pretty(&manifest).unwrap()).unwrap();
    let failed = clink(&["replay", "run-test", p(&bundle)]);
    assert_eq!(failed.status.code(), Some(1), "{}", String::from_utf8_lossy(&failed.stderr));
    assert!(String::from_utf8_lossy(&failed.stdout).contains("emission 0:"), "the divergence is located");
}

#[test]
fn the_windowed_gate() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (input, capture, checkpoints) = (d.join("input"), d.join("capture"), d.join("ck"));
    ok(&clink(&["gen-input", "--seed", "11", "--events", "6000", "--accounts", "40", "--out", p(&input)]), "gen-input");
    let job = format!("{}/../fixtures/jobs/example/job.json", env!("CARGO_MANIFEST_DIR"));
    let run = clink(&[
        "run",
        "--quiet",
        "--job",
        &job,
        "--input-dir",
        p(&input),
        "--output-dir",
        p(&d.join("out")),
        "--checkpoint-dir",
        p(&checkpoints),
        "--checkpoint-every-records",
        "750",
        "--retain-checkpoints",
        "1000",
        "--capture-dir",
        p(&capture),
    ]);
    ok(&run, "the example job with captures armed");
    let dirs = ["--capture-dir", p(&capture), "--checkpoint-dir", p(&checkpoints)];

    replayed_windows_equal_the_live_sink_output(&capture, &checkpoints);

    let mut single = vec!["replay", "epoch", "--verify"];
    single.extend(dirs);
    single.extend(["--op", "3", "--subtask", "0", "--epoch", "4"]);
    ok(&clink(&single), "replay epoch --verify, one operator");
    let mut whole = vec!["replay", "sweep"];
    whole.extend(dirs);
    ok(&clink(&whole), "replay sweep, the whole job");

    dumps_diff_identical_and_a_doctored_one_is_located(&dirs, d);
    a_regression_bundle_passes_then_fails_once_its_golden_is_doctored(&dirs, d);
    the_capture_round_trips_through_the_store(&capture, &checkpoints, d);
}

/// Every file under `dir`, by its path relative to `dir`, with its bytes.
fn tree(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut found = std::collections::BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let rel = path.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
                found.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    found
}

fn the_capture_round_trips_through_the_store(capture: &Path, checkpoints: &Path, scratch: &Path) {
    let store = format!("file://{}", p(&scratch.join("store")));
    let pushed = clink(&["capture", "push", "--capture-dir", p(capture), "--checkpoint-dir", p(checkpoints), &store]);
    ok(&pushed, "capture push");
    let text = String::from_utf8_lossy(&pushed.stdout);
    let reference = text.lines().last().expect("push prints its REF").trim().to_string();
    let fetched = scratch.join("fetched");
    ok(&clink(&["capture", "fetch", &store, &reference, p(&fetched)]), "capture fetch");
    assert_eq!(tree(&fetched.join("capture")), tree(capture), "the capture came back byte for byte");
    let sweep = |c: &Path, k: &Path| {
        let out = clink(&["replay", "sweep", "--json", "--capture-dir", p(c), "--checkpoint-dir", p(k)]);
        ok(&out, "replay sweep");
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (doc["captured"].clone(), doc["deterministic"].clone())
    };
    let (here, there) = (sweep(capture, checkpoints), sweep(&fetched.join("capture"), &fetched.join("checkpoint")));
    assert_eq!(here, there, "the fetched copy verifies as the original does");
    assert!(there.1.as_u64().unwrap() >= 6);
}
