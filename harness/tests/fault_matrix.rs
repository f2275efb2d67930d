//! The fault matrix: the example job killed at every protocol fault point,
//! resumed, and run to its END, must commit exactly the output the independent
//! reference computes from the input alone, and leave nothing staged. One
//! trial per fault point and checkpoint, and one per protocol defect switched
//! back on whose harm shows in the output, which must make the same check fail
//! in the way the defect predicts: each guard is shown to be load-bearing.
//! (The defects whose harm does not show here are caught by trace validation
//! of their recorded traces, `traces/defect-<name>/`, or by a unit test that
//! their `expected.txt` names.)
//!
//! Every run leaves its protocol trace under the test's target directory
//! (`fault-matrix-traces/<trial>/`), for the trace validation suite.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use clink_basics::multiset::{describe, multiset_diff};
use clink_engine::fault::FaultPoint;
use clink_reference::example::{compute, ReferenceOutput, ReferenceParams};
use clink_reference::output::read_output_lines;
use libtest_mimic::{Arguments, Failed, Trial};

#[path = "support/in_flight.rs"]
mod in_flight;

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
        self.run_with(env, &[])
    }

    /// A run with more arguments (a paced source, a restart budget).
    fn run_with(&self, env: &[(&str, &str)], args: &[&str]) -> Output {
        self.run_every(EVERY, env, args)
    }

    /// A run with a checkpoint every `every` records.
    fn run_every(&self, every: &str, env: &[(&str, &str)], args: &[&str]) -> Output {
        run_bounded(&mut self.command(every, env, args), self.dir.path())
    }

    fn command(&self, every: &str, env: &[(&str, &str)], args: &[&str]) -> Command {
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
            .args(["--checkpoint-every-records", every])
            .args(["--stall-after-s", STALL_AFTER_S])
            .args(args)
            .env("CLINK_PROTOCOL_TRACE_DIR", &self.traces)
            .env_remove("CLINK_FAULT")
            .env_remove("CLINK_TEST_DEFECT");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd
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
        if let Err(left) = self.nothing_staged() {
            problems.push(left);
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("\n"))
        }
    }

    /// A run that ended settled leaves nothing staged: every staged file was
    /// published by a commit or an open's re-commit, or removed by an abort or
    /// an open's cleanup (the model's NoUnownedStaged at the end).
    fn nothing_staged(&self) -> Result<(), String> {
        let mut left = Vec::new();
        for uid in ["windows-out", "idle-out"] {
            let staged = self.output().join(uid).join(".staged");
            for entry in std::fs::read_dir(&staged).map_err(|e| format!("{}: {e}", staged.display()))? {
                let entry = entry.map_err(|e| e.to_string())?;
                left.push(format!("{uid}/.staged/{}", entry.file_name().to_string_lossy()));
            }
        }
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("left staged after the run to END: {}", left.join(", ")))
        }
    }

    /// Plants the late COMPLETED-3 a superseded coordinator that decided 3
    /// would write (a copy of COMPLETED-2 naming 3): with fencing no live run
    /// can, so the test writes it between two runs.
    fn plant_late_marker(&self) -> Result<(), String> {
        let jobs = self.dir.path().join("ck/_jobs/1");
        let text = std::fs::read_to_string(jobs.join("COMPLETED-2")).map_err(|e| format!("COMPLETED-2: {e}"))?;
        let mut marker: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
        marker["checkpoint"] = 3.into();
        let planted = jobs.join(".COMPLETED-3.planted");
        std::fs::write(&planted, marker.to_string()).map_err(|e| e.to_string())?;
        std::fs::rename(&planted, jobs.join("COMPLETED-3")).map_err(|e| e.to_string())
    }

    /// The first id a new run over the directory numbers: one above every id
    /// the disk knows (markers, snapshots, the RESTORED record's next - 1).
    fn next_id(&self) -> u64 {
        let ck = self.dir.path().join("ck");
        let mut highest = self.last_completed();
        if let Ok(text) = std::fs::read_to_string(ck.join("_jobs/1/RESTORED")) {
            let record: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
            highest = highest.max(record["next"].as_u64().unwrap_or(1).saturating_sub(1));
        }
        let state = ck.join("_state/1/v1");
        for participant in std::fs::read_dir(state).into_iter().flatten().flatten() {
            for snap in std::fs::read_dir(participant.path()).into_iter().flatten().flatten() {
                let name = snap.file_name().to_string_lossy().into_owned();
                if let Some(id) = name.strip_prefix("checkpoint-").and_then(|n| n.strip_suffix(".snap")) {
                    highest = highest.max(id.parse().unwrap_or(0));
                }
            }
        }
        highest + 1
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

/// Every run's stall bound: a run that stops moving fails, saying on what
/// each subtask waits, well before the suite's own bound kills it.
const STALL_AFTER_S: &str = "10";

/// A run may not hang the suite: past a bound derived from a clean run of
/// the same job over the same input (timed once per process), it is killed
/// and the trial fails.
fn run_bound() -> std::time::Duration {
    static BOUND: OnceLock<std::time::Duration> = OnceLock::new();
    *BOUND.get_or_init(|| {
        let s = Scenario::new("clean-run-timing");
        let started = std::time::Instant::now();
        let out = run_bounded_by(&mut s.command(EVERY, &[], &[]), s.dir.path(), std::time::Duration::from_secs(300));
        assert!(out.status.success(), "the clean run that times the bound failed: {}", stderr(&out));
        let clean = started.elapsed();
        // Generous: the trials run side by side on a loaded machine, a kill
        // means two runs, and the slowed-sink trials sleep on purpose.
        (clean * 30).max(std::time::Duration::from_secs(60))
    })
}

fn run_bounded(cmd: &mut Command, scratch: &Path) -> Output {
    run_bounded_by(cmd, scratch, run_bound())
}

fn run_bounded_by(cmd: &mut Command, scratch: &Path, bound: std::time::Duration) -> Output {
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
        if started.elapsed() > bound {
            let _ = child.kill();
            let _ = child.wait();
            panic!("clink run did not finish within {bound:?} (derived from a clean run): {cmd:?}");
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
        let resumed = if point == "checkpoint.snapshot_fails" || point == "source.snapshot_fails" {
            // Not a kill: the job rewinds in-process and runs on, and says so.
            let out = s.run(&[("CLINK_FAULT", &fault)]);
            let restarted = if point == "checkpoint.snapshot_fails" {
                format!("restarting (checkpoint {c} failed:")
            } else {
                format!("restarting (op-1-0 failed: the position snapshot of checkpoint {c}:")
            };
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
    /// The resume succeeds with the right output, but staged files are left
    /// that no handle owns.
    StagedLeftOver,
    /// The run stalls: the stall watch fails it (exit 1) saying that the
    /// source waits for the trigger it asked for.
    Stalled,
}

/// How a defect is exposed.
#[derive(Clone, Copy, Debug)]
enum Exposure {
    /// Killed at the fault point, then resumed.
    KillThenResume(&'static str),
    /// One run with the fault armed (a failure, not a kill); `paced` holds the
    /// source to 20,000 records a second, so the failure is decided before
    /// the source has cut the checkpoints above it; `budget` the restart budget.
    OneRun { fault: &'static str, paced: bool, budget: Option<&'static str> },
    /// A paced run killed after deciding 3 and before its marker; the
    /// recovery killed after deciding its first checkpoint; the late
    /// COMPLETED-3 planted; a third run, whose first checkpoint fails when
    /// `restart` (so its in-process restart chooses the restore point).
    PlantedMarker { restart: bool },
    /// One run with a checkpoint every `every` records and every sink slowed
    /// by `slow` at each prepare (`sink.before_prepare@*=slow:<ms>`), so the
    /// source runs ahead and the checkpoints in flight reach the engine's
    /// bound (16) again and again.
    SlowSink { every: &'static str, slow: &'static str },
}

const PACED: [&str; 2] = ["--source-rate", "20000"];

/// Runs the exposure with `defect` switched on (or none), returning the last run.
fn expose(s: &Scenario, exposure: Exposure, defect: Option<&str>) -> Result<Output, Failed> {
    let defect_env: Vec<(&str, &str)> = defect.map(|d| ("CLINK_TEST_DEFECT", d)).into_iter().collect();
    fn with<'a>(defect_env: &[(&'a str, &'a str)], fault: &'a str) -> Vec<(&'a str, &'a str)> {
        let mut env = defect_env.to_vec();
        env.push(("CLINK_FAULT", fault));
        env
    }
    match exposure {
        Exposure::KillThenResume(fault) => kill_then_resume(s, &[fault], defect),
        Exposure::OneRun { fault, paced, budget } => {
            let mut args: Vec<&str> = if paced { PACED.to_vec() } else { Vec::new() };
            if let Some(budget) = budget {
                args.extend(["--restart-budget", budget]);
            }
            Ok(s.run_with(&with(&defect_env, fault), &args))
        }
        Exposure::SlowSink { every, slow } => {
            let fault = format!("sink.before_prepare@*={slow}");
            Ok(s.run_every(every, &with(&defect_env, &fault), &[]))
        }
        Exposure::PlantedMarker { restart } => {
            let first = s.run_with(&with(&defect_env, "coordinator.before_completed_marker@3"), &PACED);
            // The recovery's first checkpoint, whatever id the disk makes it.
            let recovery_fault = format!("coordinator.before_completed_marker@{}", s.next_id());
            let second = s.run_with(&with(&defect_env, &recovery_fault), &PACED);
            if !killed(&first) || !killed(&second) {
                return Err(format!(
                    "the first two runs were not killed where armed: {:?}, {:?}\n{}",
                    first.status,
                    second.status,
                    stderr(&second)
                )
                .into());
            }
            s.plant_late_marker()?;
            if restart {
                let fault = format!("checkpoint.snapshot_fails@{}", s.next_id());
                Ok(s.run_with(&with(&defect_env, &fault), &PACED))
            } else {
                Ok(s.run_with(&defect_env, &PACED))
            }
        }
    }
}

/// A sink slower than its source, far more checkpoints than the in-flight
/// bound: the correct engine holds the source's request at the bound and
/// runs to the end with the right output. (Today's main before the fix
/// dropped it: the same run with `drop_request_at_bound` stalls, which
/// `defect::drop_request_at_bound` shows.)
fn slow_sink_trial() -> Trial {
    let name = "liveness::slow_sink_past_the_in_flight_bound".to_string();
    Trial::test(name.clone(), move || {
        let s = Scenario::new(&name);
        let out = expose(&s, SLOW_SINK, None)?;
        if !out.status.success() {
            return Err(format!("the run with a slow sink did not finish: {:?}\n{}", out.status, stderr(&out)).into());
        }
        s.check_traces()?;
        let most = in_flight::most_in_flight(&s.traces)?;
        let completed = s.last_completed();
        // Positive evidence that the bound was reached, and passed many times.
        if most < clink_engine::runtime::protocol::MAX_IN_FLIGHT || completed < 3 * most as u64 {
            return Err(
                format!("the run never tested the bound: at most {most} in flight, {completed} completed").into()
            );
        }
        s.check_output().map_err(Failed::from)
    })
}

/// The slow sink's exposure: 76 checkpoints, each sink 40 ms slow at each
/// prepare, while the source cuts a checkpoint in a few milliseconds even
/// on a loaded machine: the backlog reaches the bound after about 17.
const SLOW_SINK: Exposure = Exposure::SlowSink { every: "80", slow: "slow:40" };

/// The exposure of a planted marker run by the correct engine: the RESTORED
/// record passes over the late marker, and the output is right.
fn planted_control_trial(restart: bool) -> Trial {
    let name = format!("fault::passed-over-marker{}", if restart { "-restart" } else { "" });
    Trial::test(name.clone(), move || {
        let s = Scenario::new(&name);
        let last = expose(&s, Exposure::PlantedMarker { restart }, None)?;
        if !last.status.success() {
            return Err(format!("the third run failed: {:?}\n{}", last.status, stderr(&last)).into());
        }
        s.check_traces()?;
        s.check_output().map_err(Failed::from)
    })
}

/// A defect switched back on, under the fault that exposes it: the
/// comparison with the reference must fail, in the way the defect predicts.
fn defect_trial(defect: &'static str, exposure: Exposure, symptom: Symptom) -> Trial {
    let name = format!("defect::{defect}");
    Trial::test(name.clone(), move || {
        let s = Scenario::new(&name);
        let resumed = expose(&s, exposure, Some(defect))?;
        let (missing, unexpected) = s.missing_and_unexpected()?;
        let caught = match symptom {
            Symptom::Duplicates => resumed.status.success() && unexpected > 0 && missing == 0,
            Symptom::Loss => resumed.status.success() && missing > 0 && unexpected == 0,
            Symptom::FailedResume(message) => resumed.status.code() == Some(1) && stderr(&resumed).contains(message),
            Symptom::StagedLeftOver => {
                resumed.status.success() && missing == 0 && unexpected == 0 && s.nothing_staged().is_err()
            }
            Symptom::Stalled => {
                let err = stderr(&resumed);
                resumed.status.code() == Some(1)
                    && err.contains("the job stalled: nothing moved for")
                    && err.contains("op-1-0 waits for the trigger of the periodic checkpoint it asked for")
            }
        };
        s.check_traces()?;
        if caught {
            Ok(())
        } else {
            Err(format!(
                "with {defect} and {exposure:?}: expected {symptom:?}, found exit {:?}, {missing} rows missing, {unexpected} unexpected, {}\n{}",
                resumed.status.code(),
                s.nothing_staged().err().unwrap_or_else(|| "nothing staged".into()),
                stderr(&resumed)
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
    use Exposure::{KillThenResume, OneRun, PlantedMarker};
    use Symptom::{Duplicates, FailedResume, Loss, StagedLeftOver};
    let failed_snapshot = |fault, paced, budget| OneRun { fault, paced, budget };
    trials.push(planted_control_trial(false));
    trials.push(planted_control_trial(true));
    trials.push(slow_sink_trial());
    trials.push(defect_trial("drop_request_at_bound", SLOW_SINK, Symptom::Stalled));
    for (defect, exposure, symptom) in [
        ("broadcast_before_marker", KillThenResume("coordinator.before_completed_marker@2"), Duplicates),
        ("no_recommit_at_open", KillThenResume("coordinator.after_completed_marker@2"), Loss),
        (
            "ack_before_durable",
            KillThenResume("coordinator.after_completed_marker@2"),
            FailedResume("which is neither staged nor published"),
        ),
        ("commit_at_barrier", KillThenResume("coordinator.before_completed_marker@2"), Duplicates),
        ("no_rewind_on_failed_checkpoint", failed_snapshot("checkpoint.snapshot_fails@2", true, None), Loss),
        ("complete_above_failed", failed_snapshot("checkpoint.snapshot_fails@2", false, None), Loss),
        ("commit_above_checkpoint", failed_snapshot("checkpoint.snapshot_fails@3", false, None), Duplicates),
        ("recommit_unheld_at_open", KillThenResume("coordinator.before_completed_marker@2"), Duplicates),
        ("no_cleanup_at_open", KillThenResume("coordinator.before_completed_marker@2"), StagedLeftOver),
        ("sail_on_without_budget", failed_snapshot("checkpoint.snapshot_fails@2", true, Some("0")), Loss),
        (
            "restore_without_marker",
            KillThenResume("source.after_position_snapshot@2"),
            FailedResume("restoring checkpoint 2"),
        ),
        ("no_restored_record", PlantedMarker { restart: false }, FailedResume("neither staged nor published")),
        ("restore_from_superseded", PlantedMarker { restart: false }, FailedResume("neither staged nor published")),
        ("restore_ignores_restored", PlantedMarker { restart: true }, FailedResume("neither staged nor published")),
    ] {
        trials.push(defect_trial(defect, exposure, symptom));
    }
    trials.push(coverage_trial(&trials));
    libtest_mimic::run(&args, trials).exit();
}

/// The engine's list of fault points against an independent one, the
/// points `engine/PROTOCOL.md` documents (each quoted as `name@c`): a point
/// added to the engine without its protocol step, or documented and gone,
/// fails; and every point of the engine's list must have its trial at
/// checkpoint 2 here.
fn coverage_trial(trials: &[Trial]) -> Trial {
    let names: Vec<String> = trials.iter().map(|t| t.name().to_string()).collect();
    Trial::test("fault::every_point_has_a_trial", move || {
        let engine: BTreeSet<&str> = FaultPoint::ALL.iter().map(|p| p.name()).collect();
        // The commit-confirmed family's points are documented too; the
        // Kafka sink suite (tests/kafka_sink.rs) has their trials.
        let protocol: BTreeSet<&str> =
            engine.iter().copied().chain(FaultPoint::CONFIRMED.iter().map(|p| p.name())).collect();
        let documented = documented_fault_points()?;
        let mut problems: Vec<String> = Vec::new();
        problems
            .extend(protocol.iter().filter(|p| !documented.contains(**p)).map(|p| format!("{p}: not in PROTOCOL.md")));
        problems.extend(
            documented
                .iter()
                .filter(|p| !protocol.contains(p.as_str()))
                .map(|p| format!("{p}: documented, not in the engine")),
        );
        problems.extend(
            engine.iter().filter(|p| !names.contains(&format!("fault::{p}@2"))).map(|p| format!("{p}: no trial at 2")),
        );
        if problems.is_empty() {
            Ok(())
        } else {
            Err(format!("fault points: {}", problems.join("; ")).into())
        }
    })
}

/// The fault points PROTOCOL.md documents: every `name@c` it quotes.
fn documented_fault_points() -> Result<BTreeSet<String>, Failed> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../engine/PROTOCOL.md");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let points: BTreeSet<String> = text
        .split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|quoted| quoted.split_once('@').map(|(name, _)| name))
        .filter(|name| name.contains('.') && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_' || b == b'.'))
        .map(str::to_string)
        .collect();
    if points.is_empty() {
        return Err(format!("{} documents no fault point", path.display()).into());
    }
    Ok(points)
}
