//! `clink run` from the command line: bad jobs and inputs are refused with
//! exit 2, a message naming what is wrong, and nothing written; savepoints
//! stop with state kept and the next run finishes the job; interval
//! checkpoints commit exactly the reference's output.

use std::path::Path;
use std::process::Command;

fn clink() -> Command {
    Command::new(env!("CARGO_BIN_EXE_clink"))
}

const GOOD_JOB: &str = include_str!("../../fixtures/jobs/example/job.json");

struct Case {
    dir: tempfile::TempDir,
}

impl Case {
    fn new(job: &str, input: &str) -> Case {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("job.json"), job).unwrap();
        std::fs::create_dir(dir.path().join("in")).unwrap();
        std::fs::write(dir.path().join("in/segment-0000.txt"), input).unwrap();
        Case { dir }
    }

    /// Runs the job; returns (exit code, stderr).
    fn run(&self) -> (i32, String) {
        self.run_adding(&[])
    }

    fn run_adding(&self, extra: &[&str]) -> (i32, String) {
        let p = self.dir.path();
        let out = clink()
            .args(["run", "--quiet", "--checkpoint-every-records", "2"])
            .args(extra)
            .arg("--job")
            .arg(p.join("job.json"))
            .arg("--input-dir")
            .arg(p.join("in"))
            .arg("--output-dir")
            .arg(p.join("out"))
            .arg("--checkpoint-dir")
            .arg(p.join("ck"))
            .arg("--ha-dir")
            .arg(p.join("ha"))
            .env("CLINK_PROTOCOL_TRACE_DIR", p.join("traces"))
            .output()
            .unwrap();
        (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
    }

    fn assert_refused(&self, expected_in_message: &[&str]) {
        let (code, stderr) = self.run();
        assert_eq!(code, 2, "{stderr}");
        for part in expected_in_message {
            assert!(stderr.contains(part), "expected {part:?} in: {stderr}");
        }
        // A refused run writes nothing: not even an empty directory.
        for dir in ["out", "ck", "ha", "traces"] {
            assert!(!self.dir.path().join(dir).exists(), "a refused run created {dir}/");
        }
    }
}

const INPUT: &str = "E,1000,a,1.50\nW,1000\nE,12000,b,2\nEND\n";

#[test]
fn the_good_job_runs() {
    let case = Case::new(GOOD_JOB, INPUT);
    let (code, stderr) = case.run();
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn a_cycle_is_refused() {
    let job = r#"{"format": "clink-job", "version": 1,
      "operators": [
        {"id": "1", "uid": "source", "type": "segment_source", "parallelism": 1},
        {"id": "2", "uid": "a", "type": "key_by", "params": {"columns": ["account"]}, "parallelism": 1},
        {"id": "3", "uid": "b", "type": "key_by", "params": {"columns": ["account"]}, "parallelism": 1},
        {"id": "4", "uid": "out", "type": "staged_file_sink", "parallelism": 1}],
      "edges": [
        {"from": "1", "to": "4", "partition": "forward"},
        {"from": "2", "to": "3", "partition": "forward"},
        {"from": "3", "to": "2", "partition": "forward"}]}"#;
    Case::new(job, INPUT).assert_refused(&["edges", "operators 2, 3 are on a cycle"]);
}

#[test]
fn an_operator_with_two_inputs_is_refused() {
    let job = GOOD_JOB.replace(
        r#"{"from": "4", "to": "6", "partition": "forward"}"#,
        r#"{"from": "4", "to": "6", "partition": "forward"}, {"from": "1", "to": "6", "partition": {"hash": ["account"]}}"#,
    );
    Case::new(&job, INPUT).assert_refused(&["operators[5]", "2 input edges"]);
}

#[test]
fn an_unknown_operator_type_is_refused() {
    let job = GOOD_JOB.replace("\"idle_detector\"", "\"idle_detectr\"");
    Case::new(&job, INPUT).assert_refused(&["operators[3].type", "unknown operator type \"idle_detectr\""]);
}

#[test]
fn a_duplicate_uid_is_refused() {
    let job = GOOD_JOB.replace("\"uid\": \"idle-out\"", "\"uid\": \"windows-out\"");
    Case::new(&job, INPUT).assert_refused(&["operators[5].uid", "duplicate uid"]);
}

#[test]
fn a_non_decimal_id_is_refused() {
    for bad in [r#""id": "0x2""#, r#""id": 2"#, r#""id": "02""#, r#""id": "-2""#, r#""id": "18446744073709551616""#] {
        let job = GOOD_JOB.replacen(r#""id": "2""#, bad, 1);
        Case::new(&job, INPUT).assert_refused(&["operators[1].id", "decimal"]);
    }
}

#[test]
fn a_path_like_uid_is_refused() {
    let job = GOOD_JOB.replace("\"uid\": \"idle-out\"", "\"uid\": \"../escape\"");
    Case::new(&job, INPUT).assert_refused(&["operators[5].uid"]);
}

#[test]
fn an_input_line_that_does_not_parse_is_refused_before_anything_runs() {
    let input = "E,1000,a,1.50\nW,1000\nE,12000,b,2.345\nEND\n";
    Case::new(GOOD_JOB, input).assert_refused(&["segment-0000.txt:3", "fraction digits"]);
    Case::new(GOOD_JOB, "E,1000,a\n").assert_refused(&["segment-0000.txt:1"]);
}

#[test]
fn an_input_directory_with_no_segment_is_refused_unless_allowed() {
    let case = Case::new(GOOD_JOB, INPUT);
    std::fs::remove_file(case.dir.path().join("in/segment-0000.txt")).unwrap();
    // A file of another name is not input.
    std::fs::write(case.dir.path().join("in/notes.txt"), "E,1000,a,1\n").unwrap();
    case.assert_refused(&["--input-dir", "holds no segment file", "--allow-empty-input"]);
    let (code, stderr) = case.run_adding(&["--allow-empty-input"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(case.dir.path().join("ck").is_dir(), "the allowed run ran");
}

#[test]
fn a_missing_input_directory_is_named_as_missing() {
    let case = Case::new(GOOD_JOB, INPUT);
    std::fs::remove_dir_all(case.dir.path().join("in")).unwrap();
    case.assert_refused(&["--input-dir", "no such directory"]);
    std::fs::write(case.dir.path().join("in"), "a file").unwrap();
    case.assert_refused(&["--input-dir", "not a directory"]);
}

#[test]
fn a_malformed_document_is_refused_with_its_field() {
    Case::new("{", INPUT).assert_refused(&["not JSON"]);
    Case::new(&GOOD_JOB.replace("\"version\": 1", "\"version\": 2"), INPUT).assert_refused(&["version"]);
    Case::new(&GOOD_JOB.replace("\"parallelism\": 2", "\"parallelism\": 0"), INPUT).assert_refused(&["parallelism"]);
    Case::new(&GOOD_JOB.replace("\"size_ms\": 10000", "\"size_ms\": \"10s\""), INPUT)
        .assert_refused(&["operators[2].params.size_ms"]);
    Case::new(
        &GOOD_JOB.replace(
            "\"key\": [\"account\"], \"time\": \"time\", \"timeout_ms\"",
            "\"key\": [\"acct\"], \"time\": \"time\", \"timeout_ms\"",
        ),
        INPUT,
    )
    .assert_refused(&["operators[3].params.key", "acct"]);
}

/// A run over `input` with extra arguments; returns (exit code, stdout, stderr).
fn run_with(dir: &Path, input: &str, extra: &[&str]) -> (i32, String, String) {
    std::fs::create_dir_all(dir.join("in")).unwrap();
    std::fs::write(dir.join("in/segment-0000.txt"), input).unwrap();
    let job = format!("{}/../fixtures/jobs/example/job.json", env!("CARGO_MANIFEST_DIR"));
    let out = clink()
        .args(["run", "--quiet", "--job", &job])
        .arg("--input-dir")
        .arg(dir.join("in"))
        .arg("--output-dir")
        .arg(dir.join("out"))
        .arg("--checkpoint-dir")
        .arg(dir.join("ck"))
        .args(extra)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn lines_of(dir: &Path) -> Vec<String> {
    let mut lines = clink_reference::output::read_output_lines(dir).unwrap_or_default();
    lines.sort();
    lines
}

#[test]
fn a_savepoint_stops_with_state_kept_and_the_next_run_finishes_the_job() {
    let dir = tempfile::tempdir().unwrap();
    let input = "E,1000,a,1.50\nW,1000\nE,12000,b,2\nW,12000\nE,15000,a,1\nW,25000\nE,26000,b,3\nW,40000\nEND\n";
    let (code, stdout, stderr) =
        run_with(dir.path(), input, &["--checkpoint-every-records", "1", "--stop-with-savepoint-at", "20000"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("stopped at a savepoint"), "{stdout}");
    // Windows ending by 20000 fired; the window of 26000 and END's are still state.
    assert_eq!(
        lines_of(&dir.path().join("out/windows-out")),
        vec!["a,0,10000,1,1.50", "a,10000,20000,1,1.00", "b,10000,20000,1,2.00"]
    );
    let (code, stdout, stderr) = run_with(dir.path(), input, &["--checkpoint-every-records", "1"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("finished"), "{stdout}");
    let reference = clink_reference::example::compute(&dir.path().join("in"), Default::default()).unwrap();
    let mut expected = reference.windows.clone();
    expected.sort();
    assert_eq!(lines_of(&dir.path().join("out/windows-out")), expected);
    let mut idle = reference.idle.clone();
    idle.sort();
    assert_eq!(lines_of(&dir.path().join("out/idle-out")), idle);
}

#[test]
fn interval_checkpoints_complete_and_the_output_is_exact() {
    let dir = tempfile::tempdir().unwrap();
    let gen = clink().args(["gen-input", "--events", "3000", "--out"]).arg(dir.path().join("gen")).output().unwrap();
    assert!(gen.status.success());
    let input: String = std::fs::read_dir(dir.path().join("gen"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect::<std::collections::BTreeSet<_>>()
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    let (code, stdout, stderr) =
        run_with(dir.path(), &input, &["--checkpoint-interval-ms", "5", "--source-rate", "20000", "--json"]);
    assert_eq!(code, 0, "{stderr}");
    let summary: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert!(summary["completed"].as_u64().unwrap() > 3, "{summary}");
    let reference = clink_reference::example::compute(&dir.path().join("in"), Default::default()).unwrap();
    let mut expected = reference.windows;
    expected.sort();
    assert_eq!(lines_of(&dir.path().join("out/windows-out")), expected);
}

#[test]
fn checkpoint_triggers_conflict_and_must_be_positive() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, stderr) =
        run_with(dir.path(), INPUT, &["--checkpoint-every-records", "2", "--checkpoint-interval-ms", "5"]);
    assert_eq!(code, 2, "{stderr}");
    let (code, _, stderr) = run_with(dir.path(), INPUT, &["--checkpoint-every-records", "0"]);
    assert_eq!(code, 2, "{stderr}");
}

#[test]
fn a_damaged_snapshot_of_the_restore_point_is_refused_not_restored() {
    let dir = tempfile::tempdir().unwrap();
    let input: String =
        (0..40).map(|i| format!("E,{},a{},1\nW,{}\n", 1000 * i, i % 3, 1000 * i)).collect::<String>() + "END\n";
    let killed = {
        std::fs::create_dir_all(dir.path().join("in")).unwrap();
        std::fs::write(dir.path().join("in/segment-0000.txt"), &input).unwrap();
        let job = format!("{}/../fixtures/jobs/example/job.json", env!("CARGO_MANIFEST_DIR"));
        clink()
            .args(["run", "--quiet", "--checkpoint-every-records", "10", "--job", &job])
            .arg("--input-dir")
            .arg(dir.path().join("in"))
            .arg("--output-dir")
            .arg(dir.path().join("out"))
            .arg("--checkpoint-dir")
            .arg(dir.path().join("ck"))
            .env("CLINK_FAULT", "coordinator.after_completed_marker@2")
            .output()
            .unwrap()
    };
    assert!(!killed.status.success());
    let snap = dir.path().join("ck/_state/1/v1/op-3-0/checkpoint-2.snap");
    let mut bytes = std::fs::read(&snap).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&snap, bytes).unwrap();
    let (code, _, stderr) = run_with(dir.path(), &input, &["--checkpoint-every-records", "10"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("restoring checkpoint 2") && stderr.contains("SHA-256"), "{stderr}");
}

#[test]
fn the_recorder_keeps_only_the_newest_epochs() {
    let dir = tempfile::tempdir().unwrap();
    let input: String =
        (0..60).map(|i| format!("E,{},a{},1\nW,{}\n", 1000 * i, i % 4, 1000 * i)).collect::<String>() + "END\n";
    let capture = dir.path().join("capture");
    let capture_arg = capture.to_str().unwrap();
    let (code, _, stderr) = run_with(
        dir.path(),
        &input,
        &["--checkpoint-every-records", "5", "--capture-dir", capture_arg, "--capture-retain-epochs", "3"],
    );
    assert_eq!(code, 0, "{stderr}");
    for sub in ["op-3/subtask-0", "op-5/subtask-1"] {
        let mut epochs: Vec<String> = std::fs::read_dir(capture.join(sub))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".cap"))
            .collect();
        epochs.sort();
        assert_eq!(epochs.len(), 3, "{sub}: {epochs:?}");
        assert!(epochs.contains(&"epoch-13.cap".to_string()), "{sub}: the newest stays: {epochs:?}");
    }
    let evidence = std::fs::read_dir(capture.join("op-5/subtask-1"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".sink.json"))
        .count();
    assert_eq!(evidence, 3);
}

#[test]
fn a_bad_line_at_the_end_of_the_input_is_refused_before_anything_is_written() {
    let input = format!("{}E,9000,c,not-a-number\n", INPUT.trim_end_matches("END\n"));
    Case::new(GOOD_JOB, &input).assert_refused(&["segment-0000.txt:4", "not a decimal number"]);
}

#[test]
fn a_panicking_operator_is_caught_restarted_within_the_budget_and_reported() {
    let case = Case::new(GOOD_JOB, INPUT);
    let p = case.dir.path();
    let out = clink()
        .args(["run", "--quiet", "--restart-budget", "2", "--job"])
        .arg(p.join("job.json"))
        .arg("--input-dir")
        .arg(p.join("in"))
        .arg("--output-dir")
        .arg(p.join("out"))
        .arg("--checkpoint-dir")
        .arg(p.join("ck"))
        .env("CLINK_TEST_DEFECT", "panic_in_operator")
        .env("CLINK_PROTOCOL_TRACE_DIR", p.join("traces"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "a panic fails the job, it does not kill the process: {stderr}");
    assert!(stderr.contains("panicked: test defect panic_in_operator"), "{stderr}");
    assert!(stderr.contains("the restart budget (2) is spent"), "{stderr}");
    let restarts = std::fs::read_dir(p.join("traces"))
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.unwrap().path()).ok())
        .map(|t| t.lines().filter(|l| l.contains("\"RestartOnError\"")).count())
        .sum::<usize>();
    assert_eq!(restarts, 2, "each panic went through the restart budget");
}

/// An operator added as one file and one registry line (`rename`) runs in a
/// real job: the example job with the amount renamed before the window
/// writes the same rows as the example job.
#[test]
fn a_job_with_renamed_columns_writes_what_the_example_job_writes() {
    let mut job: serde_json::Value = serde_json::from_str(GOOD_JOB).unwrap();
    job["operators"].as_array_mut().unwrap().push(serde_json::json!({
        "id": "7", "uid": "rename", "type": "rename", "parallelism": 1,
        "params": {"columns": {"amount": "cents", "account": "who"}}
    }));
    for op in job["operators"].as_array_mut().unwrap() {
        let params = &mut op["params"];
        if params.get("key").is_some() {
            params["key"] = serde_json::json!(["who"]);
        }
        if params.get("columns").and_then(|c| c.as_array()).is_some() {
            params["columns"] = serde_json::json!(["who"]);
        }
        if params.get("value").is_some() {
            params["value"] = "cents".into();
        }
    }
    let edges = job["edges"].as_array_mut().unwrap();
    edges.retain(|e| e["from"] != "1");
    edges.push(serde_json::json!({"from": "1", "to": "7", "partition": "forward"}));
    edges.push(serde_json::json!({"from": "7", "to": "2", "partition": "forward"}));
    for e in edges.iter_mut().filter(|e| e["partition"].get("hash").is_some()) {
        e["partition"] = serde_json::json!({"hash": ["who"]});
    }
    let renamed = Case::new(&job.to_string(), INPUT);
    let (code, stderr) = renamed.run();
    assert_eq!(code, 0, "{stderr}");
    let example = Case::new(GOOD_JOB, INPUT);
    assert_eq!(example.run().0, 0);
    for sink in ["out/windows-out", "out/idle-out"] {
        let (a, b) = (lines_of(&renamed.dir.path().join(sink)), lines_of(&example.dir.path().join(sink)));
        assert!(!a.is_empty(), "the renamed job wrote nothing to {sink}");
        assert_eq!(a, b, "{sink}");
    }
}
