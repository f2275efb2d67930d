//! The fault matrix: the example job killed at every protocol fault point,
//! resumed, and run to its END, must commit exactly the output the independent
//! reference computes from the input alone. One trial per fault point and
//! checkpoint, and one per protocol defect switched back on, which must make
//! the same comparison fail: each guard is shown to be load-bearing.
//!
//! Every run leaves its protocol trace under the test's target directory
//! (`fault-matrix-traces/<trial>/`), for the trace validation suite.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use clink_basics::multiset::{describe, multiset_diff};
use clink_engine::fault::FaultPoint;
use clink_reference::example::{compute, ReferenceOutput, ReferenceParams};
use clink_reference::output::read_output_lines;
use libtest_mimic::{Arguments, Failed, Trial};

const EVENTS: &str = "6000";
const EVERY: &str = "500";

fn clink() -> &'static str {
    env!("CARGO_BIN_EXE_clink")
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn job_file() -> PathBuf {
    workspace().join("fixtures/jobs/example/job.json")
}

fn scratch() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

/// The shared input and its reference output, made once per test process.
struct Shared {
    input: PathBuf,
    reference: ReferenceOutput,
    _dir: tempfile::TempDir,
}

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| {
        let dir = tempfile::tempdir_in(scratch()).expect("scratch directory");
        let input = dir.path().join("input");
        let out = Command::new(clink())
            .args(["gen-input", "--seed", "11", "--events", EVENTS, "--accounts", "30", "--segment-events", "700"])
            .arg("--out")
            .arg(&input)
            .output()
            .expect("clink gen-input runs");
        assert!(out.status.success(), "gen-input: {}", String::from_utf8_lossy(&out.stderr));
        let reference = compute(&input, ReferenceParams::default()).expect("reference");
        assert!(!reference.windows.is_empty() && !reference.idle.is_empty());
        Shared { input, reference, _dir: dir }
    })
}

/// One scenario's directories.
struct Scenario {
    dir: tempfile::TempDir,
    traces: PathBuf,
}

impl Scenario {
    fn new(name: &str) -> Scenario {
        let dir = tempfile::tempdir_in(scratch()).expect("scratch directory");
        let traces = scratch().join("fault-matrix-traces").join(name.replace("::", "-"));
        let _ = std::fs::remove_dir_all(&traces);
        Scenario { dir, traces }
    }

    fn output(&self) -> PathBuf {
        self.dir.path().join("out")
    }

    fn run(&self, env: &[(&str, &str)]) -> Output {
        let mut cmd = Command::new(clink());
        cmd.arg("run")
            .arg("--quiet")
            .arg("--job")
            .arg(job_file())
            .arg("--input-dir")
            .arg(&shared().input)
            .arg("--output-dir")
            .arg(self.output())
            .arg("--checkpoint-dir")
            .arg(self.dir.path().join("ck"))
            .args(["--checkpoint-every-records", EVERY])
            .env("CLINK_PROTOCOL_TRACE_DIR", &self.traces)
            .env_remove("CLINK_FAULT")
            .env_remove("CLINK_TEST_DEFECT");
        for (k, v) in env {
            cmd.env(k, v);
        }
        run_bounded(&mut cmd, self.dir.path())
    }

    /// The committed output compared with the reference; `Err` names the difference.
    fn check_output(&self) -> Result<(), String> {
        let reference = &shared().reference;
        let mut problems = Vec::new();
        for (uid, expected) in [("windows-out", &reference.windows), ("idle-out", &reference.idle)] {
            let actual = read_output_lines(&self.output().join(uid)).map_err(|e| format!("{uid}: {e}"))?;
            let diff = multiset_diff(expected.iter().cloned(), actual);
            if !diff.is_equal() {
                problems.push(format!("{uid}: {}", describe(&diff, 3)));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("\n"))
        }
    }

    /// Rows missing from and unexpected in the committed output, over both sinks.
    fn missing_and_unexpected(&self) -> Result<(usize, usize), String> {
        let reference = &shared().reference;
        let (mut missing, mut unexpected) = (0, 0);
        for (uid, expected) in [("windows-out", &reference.windows), ("idle-out", &reference.idle)] {
            let actual = read_output_lines(&self.output().join(uid)).map_err(|e| format!("{uid}: {e}"))?;
            let diff = multiset_diff(expected.iter().cloned(), actual);
            missing += diff.missing_copies();
            unexpected += diff.unexpected_copies();
        }
        Ok((missing, unexpected))
    }

    /// Every trace file the runs left: lines numbered from 1 without a gap,
    /// stamps strictly increasing, as `engine/src/trace.rs` documents.
    fn check_traces(&self) -> Result<(), String> {
        let entries = std::fs::read_dir(&self.traces).map_err(|e| format!("{}: {e}", self.traces.display()))?;
        let mut files = 0;
        for entry in entries {
            let path = entry.map_err(|e| e.to_string())?.path();
            let lines =
                clink_basics::ndjson::read_objects(&path, 1 << 30).map_err(|e| format!("{}: {e}", path.display()))?;
            let mut last_ts = 0;
            for (at, v) in lines {
                let (seq, ts) = (v["seq"].as_u64(), v["ts"].as_u64().unwrap_or(0));
                if seq != Some(at as u64) || ts <= last_ts {
                    return Err(format!("{}: line {at}: seq {seq:?}, ts {ts} after {last_ts}", path.display()));
                }
                last_ts = ts;
            }
            files += 1;
        }
        if files == 0 {
            return Err(format!("{} holds no trace file", self.traces.display()));
        }
        Ok(())
    }

    fn last_completed(&self) -> u64 {
        let dir = self.dir.path().join("ck/_jobs/1");
        std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok())
                    .filter_map(|e| e.file_name().to_str()?.strip_prefix("COMPLETED-")?.parse().ok())
                    .max()
                    .unwrap_or(0)
            })
            .unwrap_or(0)
    }
}

/// A run may not hang the suite: past the bound it is killed and reported.
const RUN_BOUND: std::time::Duration = std::time::Duration::from_secs(120);

fn run_bounded(cmd: &mut Command, scratch: &Path) -> Output {
    let (out_path, err_path) = (scratch.join("stdout.log"), scratch.join("stderr.log"));
    let mut child = cmd
        .stdout(std::fs::File::create(&out_path).expect("stdout log"))
        .stderr(std::fs::File::create(&err_path).expect("stderr log"))
        .spawn()
        .expect("clink run starts");
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for clink run") {
            break status;
        }
        if started.elapsed() > RUN_BOUND {
            let _ = child.kill();
            let _ = child.wait();
            panic!("clink run did not finish within {RUN_BOUND:?}: {cmd:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    Output {
        status,
        stdout: std::fs::read(&out_path).unwrap_or_default(),
        stderr: std::fs::read(&err_path).unwrap_or_default(),
    }
}

fn killed(out: &Output) -> bool {
    use std::os::unix::process::ExitStatusExt;
    out.status.signal() == Some(9)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs killed at each fault (in order), then a resume to the end.
fn kill_then_resume(s: &Scenario, faults: &[&str], defect: Option<&str>) -> Result<Output, Failed> {
    let defect_env: Vec<(&str, &str)> = defect.map(|d| ("CLINK_TEST_DEFECT", d)).into_iter().collect();
    for fault in faults {
        let mut env = defect_env.clone();
        env.push(("CLINK_FAULT", fault));
        let out = s.run(&env);
        if !killed(&out) {
            return Err(
                format!("the run armed with {fault} was not killed there: {:?}\n{}", out.status, stderr(&out)).into()
            );
        }
    }
    Ok(s.run(&defect_env))
}

/// The fault-free run, whose last checkpoint id the "last" trials aim at.
fn last_checkpoint_id() -> u64 {
    static LAST: OnceLock<u64> = OnceLock::new();
    *LAST.get_or_init(|| {
        let s = Scenario::new("probe");
        let out = s.run(&[]);
        assert!(out.status.success(), "{}", stderr(&out));
        s.last_completed()
    })
}

fn fault_trial(point: &'static str, at: Checkpoint) -> Trial {
    let name = format!("fault::{point}@{}", at.label());
    Trial::test(name.clone(), move || {
        let s = Scenario::new(&name);
        let c = at.id();
        let fault = format!("{point}@{c}");
        let resumed = if point == "checkpoint.snapshot_fails" {
            // Not a kill: the job rewinds in-process and runs on, and says so.
            let out = s.run(&[("CLINK_FAULT", &fault)]);
            let restarted = format!("restarting (checkpoint {c} failed:");
            if !stderr(&out).contains(&restarted) || !stderr(&out).contains("injected snapshot failure") {
                return Err(format!("the snapshot of checkpoint {c} did not fail as armed:\n{}", stderr(&out)).into());
            }
            out
        } else if point == "coordinator.before_restored_record" {
            // Needs a restore at c: first a kill right after c's marker.
            let first = format!("coordinator.after_completed_marker@{c}");
            kill_then_resume(&s, &[&first, &fault], None)?
        } else {
            kill_then_resume(&s, &[&fault], None)?
        };
        if !resumed.status.success() {
            return Err(format!("the resumed run failed: {:?}\n{}", resumed.status, stderr(&resumed)).into());
        }
        s.check_traces()?;
        s.check_output().map_err(Failed::from)
    })
}

#[derive(Clone, Copy)]
enum Checkpoint {
    /// Before anything completed: the resume is a recovery from nothing.
    First,
    Second,
    Last,
}

impl Checkpoint {
    fn label(self) -> &'static str {
        match self {
            Checkpoint::First => "1",
            Checkpoint::Second => "2",
            Checkpoint::Last => "last",
        }
    }

    fn id(self) -> u64 {
        match self {
            Checkpoint::First => 1,
            Checkpoint::Second => 2,
            Checkpoint::Last => last_checkpoint_id(),
        }
    }
}

/// What a defect must do under its fault: each symptom exact, never "any
/// failure".
#[derive(Clone, Copy, Debug)]
enum Symptom {
    /// The resume succeeds with rows published twice (and none lost).
    Duplicates,
    /// The resume succeeds with rows never published (and none twice).
    Loss,
    /// The resume fails (exit 1), its message naming this.
    FailedResume(&'static str),
}

/// A defect switched back on, under the fault that exposes it: the
/// comparison with the reference must fail, in the way the defect predicts.
fn defect_trial(defect: &'static str, fault: &'static str, symptom: Symptom) -> Trial {
    let name = format!("defect::{defect}");
    Trial::test(name.clone(), move || {
        let s = Scenario::new(&name);
        let resumed = if fault.starts_with("checkpoint.snapshot_fails") {
            // Not a kill: the one run is the whole story.
            s.run(&[("CLINK_TEST_DEFECT", defect), ("CLINK_FAULT", fault)])
        } else {
            kill_then_resume(&s, &[fault], Some(defect))?
        };
        let (missing, unexpected) = s.missing_and_unexpected()?;
        let caught = match symptom {
            Symptom::Duplicates => resumed.status.success() && unexpected > 0 && missing == 0,
            Symptom::Loss => resumed.status.success() && missing > 0 && unexpected == 0,
            Symptom::FailedResume(message) => resumed.status.code() == Some(1) && stderr(&resumed).contains(message),
        };
        s.check_traces()?;
        if caught {
            Ok(())
        } else {
            Err(format!(
                "with {defect} and {fault}: expected {symptom:?}, found exit {:?}, {missing} rows missing, {unexpected} unexpected",
                resumed.status.code()
            )
            .into())
        }
    })
}

fn main() {
    let args = Arguments::from_args();
    // Every fault point the engine has, from the engine's own list.
    let points: Vec<&'static str> = FaultPoint::ALL.iter().map(|p| p.name()).collect();
    let mut trials: Vec<Trial> = points.iter().map(|p| fault_trial(p, Checkpoint::Second)).collect();
    // Killed inside the first checkpoint: nothing has completed yet.
    for p in [
        "source.after_position_snapshot",
        "sink.after_prepare",
        "coordinator.before_completed_marker",
        "sink.before_commit",
    ] {
        trials.push(fault_trial(p, Checkpoint::First));
    }
    for p in [
        "coordinator.before_completed_marker",
        "coordinator.after_completed_marker",
        "coordinator.before_commit_broadcast",
    ] {
        trials.push(fault_trial(p, Checkpoint::Last));
    }
    trials.push(defect_trial("broadcast_before_marker", "coordinator.before_completed_marker@2", Symptom::Duplicates));
    trials.push(defect_trial("no_recommit_at_open", "coordinator.after_completed_marker@2", Symptom::Loss));
    trials.push(defect_trial(
        "ack_before_durable",
        "coordinator.after_completed_marker@2",
        Symptom::FailedResume("which is neither staged nor published"),
    ));
    trials.push(defect_trial("commit_at_barrier", "coordinator.before_completed_marker@2", Symptom::Duplicates));
    trials.push(defect_trial("no_rewind_on_failed_checkpoint", "checkpoint.snapshot_fails@2", Symptom::Loss));
    trials.push(coverage_trial(&trials));
    libtest_mimic::run(&args, trials).exit();
}

/// Fails when a fault point of the engine has no trial at checkpoint 2: a
/// point added to the engine is never left untested.
fn coverage_trial(trials: &[Trial]) -> Trial {
    let names: Vec<String> = trials.iter().map(|t| t.name().to_string()).collect();
    Trial::test("fault::every_point_has_a_trial", move || {
        let missing: Vec<&str> =
            FaultPoint::ALL.iter().map(|p| p.name()).filter(|p| !names.contains(&format!("fault::{p}@2"))).collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(format!("fault points with no trial: {}", missing.join(", ")).into())
        }
    })
}
