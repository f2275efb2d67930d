//! Checkpoint datasets and requests to a running job, from the command line,
//! with real processes: a following job takes a savepoint on request, the
//! savepoint is exported, verified, listed logically, checked against the
//! job and compared raw; the job stops on request; a new run restores from
//! the dataset and finishes the input, and a job whose uid changed is
//! refused naming the operator.

use std::path::Path;
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

const JOB: &str = include_str!("../../fixtures/jobs/example/job.json");

fn clink() -> Command {
    Command::new(env!("CARGO_BIN_EXE_clink"))
}

fn run_in(dir: &Path, args: &[&str]) -> Output {
    clink().current_dir(dir).args(args).output().unwrap()
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// Kills the job if the test fails before it stopped.
struct Job(Child);

impl Drop for Job {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(dir: &Path) -> Job {
    start_with(dir, &[])
}

fn start_with(dir: &Path, more: &[&str]) -> Job {
    let child = clink()
        .current_dir(dir)
        .args(["run", "--quiet", "--follow-input", "--job", "job.json", "--input-dir", "in"])
        .args(["--output-dir", "out", "--checkpoint-dir", "ck", "--ha-dir", "ha"])
        .args(more)
        .spawn()
        .unwrap();
    Job(child)
}

/// A job that has read all its input and waits for more is idle, not
/// stalled: with a stall bound of 1 s it is still running after 4 s of
/// waiting (and a savepoint it is asked for still completes), and it stops
/// cleanly on request.
#[test]
fn a_job_waiting_for_input_is_never_stalled() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("job.json"), JOB).unwrap();
    std::fs::create_dir(dir.join("in")).unwrap();
    std::fs::write(dir.join("in/segment-0000.txt"), "E,1000,a,1.50\nE,2000,b,2\nW,3000\n").unwrap();
    let mut job = start_with(dir, &["--stall-after-s", "1"]);
    savepoint_when_running(dir);
    std::thread::sleep(Duration::from_secs(4));
    assert!(job.0.try_wait().unwrap().is_none(), "the idle job ended: {:?}", job.0.try_wait());
    savepoint_when_running(dir);
    let stop = run_in(dir, &["stop", "--checkpoint-dir", "ck", "--job-id", "1", "--json"]);
    assert_eq!(code(&stop), 0, "{}", String::from_utf8_lossy(&stop.stderr));
    assert_eq!(job.0.wait().unwrap().code(), Some(0));
}

fn savepoint_when_running(dir: &Path) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = run_in(dir, &["savepoint", "--checkpoint-dir", "ck", "--job-id", "1", "--json", "--timeout-s", "30"]);
        if code(&out) == 0 {
            let answer = json(&out);
            assert_eq!(answer["outcome"], "completed", "{answer}");
            return answer["checkpoint"].as_u64().unwrap();
        }
        // 2: no live run owns the directory yet.
        assert_eq!(code(&out), 2, "{}", String::from_utf8_lossy(&out.stderr));
        assert!(Instant::now() < deadline, "the job never took requests");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_savepoint_of_a_running_job_exports_lists_and_restores() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("job.json"), JOB).unwrap();
    std::fs::create_dir(dir.join("in")).unwrap();
    std::fs::write(dir.join("in/segment-0000.txt"), "E,1000,a,1.50\nE,2000,b,2\nE,3000,c,3\nW,3000\n").unwrap();

    let mut job = start(dir);
    let checkpoint = savepoint_when_running(dir);
    let checkpoint = checkpoint.to_string();

    let export = run_in(
        dir,
        &[
            "checkpoint",
            "export",
            "--checkpoint-dir",
            "ck",
            "--job-id",
            "1",
            "--checkpoint",
            &checkpoint,
            "--out",
            "ds",
            "--json",
        ],
    );
    assert_eq!(code(&export), 0, "{}", String::from_utf8_lossy(&export.stderr));
    let digest = json(&export)["digest"].as_str().unwrap().to_string();

    // An existing --out is refused.
    let again = run_in(
        dir,
        &["checkpoint", "export", "--checkpoint-dir", "ck", "--job-id", "1", "--checkpoint", "latest", "--out", "ds"],
    );
    assert_eq!(code(&again), 2);

    assert_eq!(code(&run_in(dir, &["checkpoint", "verify", "--dataset", "ds", "--digest", &digest])), 0);
    let wrong = "0".repeat(64);
    assert_eq!(code(&run_in(dir, &["checkpoint", "verify", "--dataset", "ds", "--digest", &wrong])), 1);
    assert_eq!(code(&run_in(dir, &["checkpoint", "verify", "--dataset", "ds", "--digest", "nonsense"])), 2);

    let cat = run_in(dir, &["state-cat", "--dataset", "ds", "--digest", &digest, "--json"]);
    assert_eq!(code(&cat), 0, "{}", String::from_utf8_lossy(&cat.stderr));
    let listing = json(&cat);
    assert_eq!(listing["format"], "clink-state-listing");
    let rows = listing["rows"].as_array().unwrap();
    let count = |uid: &str, kind: &str| rows.iter().filter(|r| r["uid"] == uid && r["kind"] == kind).count();
    assert_eq!(count("windows", "window"), 3, "{listing}");
    assert_eq!(count("idle", "last_seen"), 3);
    assert_eq!(count("idle", "timer"), 3);
    assert!(listing["undocumented"].as_array().unwrap().is_empty());

    assert_eq!(code(&run_in(dir, &["check-savepoint", "--dataset", "ds", "--expected", "job.json"])), 0);
    assert_eq!(code(&run_in(dir, &["state-diff", "ds", "ds"])), 0);

    let stop = run_in(dir, &["stop", "--checkpoint-dir", "ck", "--job-id", "1", "--json"]);
    assert_eq!(code(&stop), 0, "{}", String::from_utf8_lossy(&stop.stderr));
    assert_eq!(json(&stop)["outcome"], "stopped");
    let status = job.0.wait().unwrap();
    assert_eq!(status.code(), Some(0));

    // A new run restores from the dataset; its input holds only the continuation.
    std::fs::create_dir(dir.join("in2")).unwrap();
    std::fs::write(dir.join("in2/segment-0001.txt"), "E,12000,a,1\nW,40000\nEND\n").unwrap();
    let restored = run_in(dir, &["run", "--quiet", "--job", "job.json", "--input-dir", "in2", "--output-dir", "out2"]);
    // Without --checkpoint-dir and a restore it is a usage error, not a crash.
    assert_ne!(code(&restored), 0);
    let restored = run_in(
        dir,
        &[
            "run",
            "--quiet",
            "--job",
            "job.json",
            "--input-dir",
            "in2",
            "--output-dir",
            "out2",
            "--checkpoint-dir",
            "ck2",
            "--ha-dir",
            "ha2",
            "--restore-from-dir",
            "ds",
            "--restore-from-checkpoint-id",
            &checkpoint,
        ],
    );
    assert_eq!(code(&restored), 0, "{}", String::from_utf8_lossy(&restored.stderr));
    let windows = clink_reference::output::read_output_lines(&dir.join("out2/windows-out")).unwrap();
    let mut windows = windows;
    windows.sort();
    // The restored windows hold the events read before the savepoint.
    assert_eq!(
        windows,
        ["a,0,10000,1,1.50", "a,10000,20000,1,1.00", "b,0,10000,1,2.00", "c,0,10000,1,3.00"],
        "{windows:?}"
    );

    // A job whose window operator changed its uid is refused, naming it.
    std::fs::write(dir.join("job2.json"), JOB.replace("\"uid\": \"windows\"", "\"uid\": \"windows-2\"")).unwrap();
    let refused = run_in(
        dir,
        &[
            "run",
            "--quiet",
            "--job",
            "job2.json",
            "--input-dir",
            "in2",
            "--output-dir",
            "out3",
            "--checkpoint-dir",
            "ck3",
            "--ha-dir",
            "ha3",
            "--restore-from-dir",
            "ds",
            "--restore-from-checkpoint-id",
            &checkpoint,
        ],
    );
    assert_eq!(code(&refused), 2);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("operator 3 (uid \"windows\""), "{stderr}");
    assert!(!dir.join("out3").exists());
}

#[test]
fn capabilities_are_reported_as_json() {
    let out = clink().args(["capabilities", "--json"]).output().unwrap();
    assert_eq!(code(&out), 0);
    let doc = json(&out);
    assert_eq!(doc["format"], "clink-capabilities");
    let names: Vec<&str> = doc["capabilities"].as_array().unwrap().iter().filter_map(|c| c["name"].as_str()).collect();
    for wanted in ["savepoint.request", "stop.request", "restore.dataset", "dataset.export", "state.cat", "state.diff"]
    {
        assert!(names.contains(&wanted), "{wanted} missing from {names:?}");
    }
}

#[test]
fn requests_to_a_job_that_is_not_running_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run_in(tmp.path(), &["savepoint", "--checkpoint-dir", "ck", "--job-id", "1", "--timeout-s", "1"]);
    assert_eq!(code(&out), 2, "{}", String::from_utf8_lossy(&out.stderr));
    let out = run_in(tmp.path(), &["state-cat", "--dataset", "nowhere"]);
    assert_ne!(code(&out), 0);
}

#[test]
fn upgrade_commands_refuse_bad_usage_with_exit_2_and_write_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/upgrade");
    let test = fixtures.join("test.json");
    let job = fixtures.join("jobs/example.json");
    let bin = env!("CARGO_BIN_EXE_clink");
    std::fs::create_dir(dir.join("taken")).unwrap();
    let check = |out: &str, digest: &str, test: &Path| {
        clink()
            .current_dir(dir)
            .args(["upgrade", "check", "--evidence", ".", "--evidence-digest", digest, "--out", out])
            .arg("--test")
            .arg(test)
            .args(["--tools-clink", bin, "--baseline-clink", bin, "--candidate-clink", bin])
            .arg("--baseline-job")
            .arg(&job)
            .arg("--candidate-job")
            .arg(&job)
            .output()
            .unwrap()
    };
    let digest = "0".repeat(64);
    // An existing --out.
    let out = check("taken", &digest, &test);
    assert_eq!(code(&out), 2, "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("exists"));
    // A digest that is not a SHA-256.
    assert_eq!(code(&check("fresh1", "xyz", &test)), 2);
    // A definition of another kind.
    assert_eq!(code(&check("fresh2", &digest, &job)), 2);
    for name in ["fresh1", "fresh2"] {
        assert!(!dir.join(name).exists(), "a refused command wrote {name}");
    }
    // record: an existing --out.
    let rec = clink()
        .current_dir(dir)
        .args(["upgrade", "record", "--out", "taken", "--tools-clink", bin, "--baseline-clink", bin])
        .arg("--test")
        .arg(&test)
        .arg("--baseline-job")
        .arg(&job)
        .output()
        .unwrap();
    assert_eq!(code(&rec), 2);
}
