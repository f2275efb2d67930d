//! Bad input to `clink run` is refused with exit 2, a message naming what is
//! wrong, and nothing written to the output.

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
        let p = self.dir.path();
        let out = clink()
            .args(["run", "--quiet", "--checkpoint-every-records", "2"])
            .arg("--job")
            .arg(p.join("job.json"))
            .arg("--input-dir")
            .arg(p.join("in"))
            .arg("--output-dir")
            .arg(p.join("out"))
            .arg("--checkpoint-dir")
            .arg(p.join("ck"))
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
        assert!(nothing_under(&self.dir.path().join("out")), "output was written");
        assert!(!self.dir.path().join("ck").exists(), "checkpoints were written");
    }
}

fn nothing_under(dir: &Path) -> bool {
    match std::fs::read_dir(dir) {
        Err(_) => true,
        Ok(entries) => entries.count() == 0,
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
