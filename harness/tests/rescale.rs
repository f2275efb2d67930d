//! Restore at another parallelism: the example job checkpointed (or stopped
//! at a savepoint, or killed at a protocol fault point) at one parallelism of
//! its keyed operators and sinks, resumed over the same checkpoint directory
//! at another, and run to its END, must commit exactly the output the
//! independent reference computes from the input alone and leave nothing
//! staged: every key's windows, last-seen and timers land on the subtask its
//! records are now routed to, and every old sink subtask's prepared files are
//! published by exactly one new subtask. The rescaled run writes the next
//! layout generation, and its markers say so. A rescale the engine cannot
//! re-divide is refused with exit 2 before anything is written.
//!
//! The source runs at parallelism 1 (the engine allows no other), so its
//! position is restored as it was: no segment is read twice or skipped.
//!
//! Built with the engine's `defect-rescale-orphans` variant (old subtasks
//! past the new parallelism get no successor: the formal mutant
//! `rescale_orphans`), the suite runs one trial instead, which must see the
//! harm: `cargo test -p clink-harness --features
//! clink-engine/defect-rescale-orphans --test rescale`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use clink_basics::multiset::{describe, multiset_diff};
use clink_reference::example::{compute, ReferenceOutput, ReferenceParams};
use clink_reference::output::read_output_lines;
use libtest_mimic::{Arguments, Failed, Trial};

#[path = "rescale/rocksdb.rs"]
mod rocksdb;

const EVENTS: &str = "6000";
const EVERY: &str = "500";
/// The operators a rescale of the example job changes: the windows, the
/// idle detector and their sinks (forward edges keep each pair equal).
const RESCALED: [&str; 4] = ["3", "4", "5", "6"];

fn clink() -> &'static str {
    env!("CARGO_BIN_EXE_clink")
}

fn example_job() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/jobs/example/job.json")
}

fn scratch() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

struct Shared {
    input: PathBuf,
    reference: ReferenceOutput,
    /// A watermark about half way through the input (for the savepoint).
    middle_watermark: i64,
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
        let mut watermarks: Vec<i64> = Vec::new();
        let mut segments: Vec<PathBuf> = std::fs::read_dir(&input).unwrap().map(|e| e.unwrap().path()).collect();
        segments.sort();
        for segment in segments {
            for line in std::fs::read_to_string(segment).unwrap().lines() {
                if let Some(w) = line.strip_prefix("W,") {
                    watermarks.push(w.parse().unwrap());
                }
            }
        }
        let middle_watermark = watermarks[watermarks.len() / 2];
        Shared { input, reference, middle_watermark, _dir: dir }
    })
}

/// The example job with its keyed operators and sinks at `parallelism`.
fn job_at(dir: &Path, parallelism: u32) -> PathBuf {
    let mut job: serde_json::Value = serde_json::from_slice(&std::fs::read(example_job()).unwrap()).unwrap();
    for op in job["operators"].as_array_mut().unwrap() {
        if RESCALED.contains(&op["id"].as_str().unwrap()) {
            op["parallelism"] = parallelism.into();
        }
    }
    let path = dir.join(format!("job-{parallelism}.json"));
    std::fs::write(&path, serde_json::to_vec_pretty(&job).unwrap()).unwrap();
    path
}

/// Which state backend a scenario's runs use.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Backend {
    /// The default: files under the checkpoint directory.
    File,
    /// `--state rocksdb://<scenario>/state`: outside the checkpoint directory.
    Rocksdb,
    /// `--state file://<scenario>/state`: files, outside the checkpoint directory.
    FileRoot,
}

impl Backend {
    fn prefix(self) -> &'static str {
        match self {
            Backend::File => "",
            Backend::Rocksdb => "rocksdb::",
            Backend::FileRoot => "file-root::",
        }
    }
}

struct Scenario {
    dir: tempfile::TempDir,
    backend: Backend,
}

impl Scenario {
    fn new() -> Scenario {
        Scenario::on(Backend::File)
    }

    fn on(backend: Backend) -> Scenario {
        Scenario { dir: tempfile::tempdir_in(scratch()).expect("scratch directory"), backend }
    }

    /// The directory `_state/` is in.
    fn state_base(&self) -> PathBuf {
        match self.backend {
            Backend::File => self.dir.path().join("ck"),
            Backend::Rocksdb | Backend::FileRoot => self.dir.path().join("state"),
        }
    }

    fn output(&self) -> PathBuf {
        self.dir.path().join("out")
    }

    fn run(&self, parallelism: u32, fault: Option<&str>, args: &[&str]) -> Output {
        self.command(parallelism, fault, args).output().expect("clink run starts")
    }

    fn command(&self, parallelism: u32, fault: Option<&str>, args: &[&str]) -> Command {
        let mut cmd = Command::new(clink());
        cmd.arg("run")
            .arg("--quiet")
            .arg("--job")
            .arg(job_at(self.dir.path(), parallelism))
            .arg("--input-dir")
            .arg(&shared().input)
            .arg("--output-dir")
            .arg(self.output())
            .arg("--checkpoint-dir")
            .arg(self.dir.path().join("ck"))
            .args(["--checkpoint-every-records", EVERY, "--stall-after-s", "20"])
            .args(args)
            .args(match self.backend {
                Backend::File => vec![],
                Backend::Rocksdb => vec!["--state".to_string(), format!("rocksdb://{}", self.state_base().display())],
                Backend::FileRoot => vec!["--state".to_string(), format!("file://{}", self.state_base().display())],
            })
            .env_remove("CLINK_FAULT")
            .env_remove("CLINK_TEST_DEFECT")
            .env_remove("CLINK_PROTOCOL_TRACE_DIR");
        if let Some(fault) = fault {
            cmd.env("CLINK_FAULT", fault);
        }
        cmd
    }

    /// The committed output against the reference, and nothing left staged.
    fn check_output(&self) -> Result<(), String> {
        let reference = &shared().reference;
        let mut problems = Vec::new();
        for (uid, expected) in [("windows-out", &reference.windows), ("idle-out", &reference.idle)] {
            let actual = read_output_lines(&self.output().join(uid)).map_err(|e| format!("{uid}: {e}"))?;
            let diff = multiset_diff(expected.iter().cloned(), actual);
            if !diff.is_equal() {
                problems.push(format!("{uid}: {}", describe(&diff, 3)));
            }
            let staged = self.output().join(uid).join(".staged");
            for entry in std::fs::read_dir(&staged).map_err(|e| format!("{}: {e}", staged.display()))? {
                problems.push(format!("left staged: {uid}/.staged/{}", entry.unwrap().file_name().to_string_lossy()));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("\n"))
        }
    }

    /// The newest COMPLETED marker: its id, its generation and its participants of `op`.
    fn newest_marker(&self, op: &str) -> Result<(u64, u64, usize), String> {
        let jobs = self.dir.path().join("ck/_jobs/1");
        let newest = std::fs::read_dir(&jobs)
            .map_err(|e| e.to_string())?
            .filter_map(|e| e.ok()?.file_name().to_str()?.strip_prefix("COMPLETED-")?.parse::<u64>().ok())
            .max()
            .ok_or("no checkpoint completed before the kill: nothing to rescale")?;
        let text = std::fs::read_to_string(jobs.join(format!("COMPLETED-{newest}"))).unwrap();
        let marker: serde_json::Value = serde_json::from_str(&text).unwrap();
        let prefix = format!("op-{op}-");
        let subs = marker["participants"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p.as_str().is_some_and(|p| p.starts_with(&prefix)))
            .count();
        Ok((newest, marker["generation"].as_u64().unwrap(), subs))
    }

    /// The first id a new run over the directory numbers: one above every
    /// id the disk knows (markers, the RESTORED record, any generation's snapshots).
    fn next_id(&self) -> u64 {
        let ck = self.dir.path().join("ck");
        let mut highest = self.newest_marker("5").map_or(0, |m| m.0);
        if let Ok(text) = std::fs::read_to_string(ck.join("_jobs/1/RESTORED")) {
            let record: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
            highest = highest.max(record["next"].as_u64().unwrap_or(1).saturating_sub(1));
        }
        for generation in std::fs::read_dir(self.state_base().join("_state/1")).into_iter().flatten().flatten() {
            for participant in std::fs::read_dir(generation.path()).into_iter().flatten().flatten() {
                for snap in std::fs::read_dir(participant.path()).into_iter().flatten().flatten() {
                    let name = snap.file_name().to_string_lossy().into_owned();
                    let name = name.strip_suffix(".meta").unwrap_or(&name);
                    if let Some(id) = name.strip_prefix("checkpoint-").and_then(|n| n.strip_suffix(".snap")) {
                        highest = highest.max(id.parse().unwrap_or(0));
                    }
                }
            }
        }
        highest + 1
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn killed(out: &Output) -> bool {
    use std::os::unix::process::ExitStatusExt;
    out.status.signal() == Some(9)
}

/// How the run at the old parallelism ends before the rescaled resume.
#[derive(Clone, Copy)]
enum Before {
    /// Killed at a protocol fault point (`point@checkpoint`).
    Killed(&'static str),
    /// Killed once a checkpoint is sure to have completed (after checkpoint
    /// 2's marker), resumed at the same parallelism, and killed at a point of
    /// its first checkpoint: for the points a first run may reach before any
    /// checkpoint completed (checkpoints overlap in flight).
    KilledAfterACompletion(&'static str),
    /// Stopped at a savepoint half way through the input.
    Savepoint,
}

/// Runs at `from`, ends as `before` says, resumes at `to` (killed again at
/// `then_killed`, if given, and resumed at `to`), and judges the output.
/// `then_killed`: a fault point armed in the rescaled run, at its first
/// checkpoint (`false`) or the one after (`true`).
fn rescale_trial(from: u32, to: u32, before: Before, then_killed: Option<(&'static str, bool)>) -> Trial {
    rescale_trial_on(Backend::File, from, to, before, then_killed)
}

/// [`rescale_trial`] with the scenario's runs on `backend`.
fn rescale_trial_on(
    backend: Backend,
    from: u32,
    to: u32,
    before: Before,
    then_killed: Option<(&'static str, bool)>,
) -> Trial {
    let label = match before {
        Before::Killed(fault) => fault.to_string(),
        Before::KilledAfterACompletion(point) => format!("{point}@next"),
        Before::Savepoint => "savepoint".to_string(),
    };
    let again =
        then_killed.map(|(f, after)| format!("+{f}@{}", if after { "next+1" } else { "next" })).unwrap_or_default();
    Trial::test(format!("{}rescale::{from}->{to}@{label}{again}", backend.prefix()), move || {
        let s = Scenario::on(backend);
        match before {
            Before::Killed(fault) => {
                let out = s.run(from, Some(fault), &[]);
                if !killed(&out) {
                    return Err(format!(
                        "the run armed with {fault} was not killed: {:?}\n{}",
                        out.status,
                        stderr(&out)
                    )
                    .into());
                }
            }
            Before::KilledAfterACompletion(point) => {
                // The second fault names the resumed run's first checkpoint,
                // so it is made after the first run ended.
                let first = "coordinator.after_completed_marker@2".to_string();
                for fault in [Some(first), None] {
                    let fault = fault.unwrap_or_else(|| format!("{point}@{}", s.next_id()));
                    let out = s.run(from, Some(&fault), &[]);
                    if !killed(&out) {
                        return Err(format!(
                            "the run armed with {fault} was not killed: {:?}\n{}",
                            out.status,
                            stderr(&out)
                        )
                        .into());
                    }
                }
            }
            Before::Savepoint => {
                let at = shared().middle_watermark.to_string();
                let out = s.run(from, None, &["--stop-with-savepoint-at", &at]);
                if !out.status.success() || !String::from_utf8_lossy(&out.stdout).contains("stopped at a savepoint") {
                    return Err(format!("the savepoint run: {:?}\n{}", out.status, stderr(&out)).into());
                }
            }
        }
        let (_, old_generation, old_subs) = s.newest_marker("5")?;
        if old_subs != from as usize {
            return Err(format!("the old run's marker names {old_subs} sink subtasks, not {from}").into());
        }
        if let Some((point, after_first)) = then_killed {
            // The rescaled run's first checkpoint, or the one after it.
            let fault = format!("{point}@{}", s.next_id() + u64::from(after_first));
            let out = s.run(to, Some(&fault), &[]);
            if !killed(&out) {
                return Err(format!(
                    "the rescaled run armed with {fault} was not killed: {:?}\n{}",
                    out.status,
                    stderr(&out)
                )
                .into());
            }
        }
        // Whether the resume starts from the old layout (nothing of the
        // rescaled run completed), which it must re-divide again.
        let redivides = s.newest_marker("5")?.1 == old_generation;
        let out = s.run(to, None, &[]);
        if !out.status.success() {
            return Err(format!("the rescaled resume failed: {:?}\n{}", out.status, stderr(&out)).into());
        }
        let said = stderr(&out).contains(&format!("restored at parallelism {to} from {from}"));
        if said != redivides {
            return Err(format!("the resume re-divided state: {said}, expected {redivides}:\n{}", stderr(&out)).into());
        }
        let (_, generation, subs) = s.newest_marker("5")?;
        if subs != to as usize {
            return Err(format!("the newest marker names {subs} sink subtasks, not {to}").into());
        }
        if generation != old_generation + 1 {
            return Err(format!("the rescaled run wrote generation {generation}, not {}", old_generation + 1).into());
        }
        s.check_output().map_err(Failed::from)?;
        rocksdb::state_went_to_its_root(&s).map_err(Failed::from)
    })
}

/// A rescaled run's protocol trace is skipped and counted by trace
/// validation, never judged: `clink trace-validate` exits 3 naming the
/// Rescale scope markers (one per re-divided operator); the same job's trace
/// without a rescale is judged (accepted).
fn trace_scope_trial() -> Trial {
    Trial::test("rescale::trace-validate::skipped-and-counted", || {
        let s = Scenario::new();
        let traces = s.dir.path().join("traces");
        let traced = |parallelism: u32, fault: Option<&str>| {
            s.command(parallelism, fault, &[]).env("CLINK_PROTOCOL_TRACE_DIR", &traces).output().unwrap()
        };
        let validate =
            || Command::new(clink()).args(["trace-validate", "--json", "--trace"]).arg(&traces).output().unwrap();
        if !killed(&traced(2, Some("coordinator.after_completed_marker@2"))) {
            return Err("the traced run was not killed".into());
        }
        let judged = validate();
        if judged.status.code() != Some(0) {
            return Err(format!(
                "the run without a rescale was not accepted: {:?}\n{}{}",
                judged.status,
                String::from_utf8_lossy(&judged.stdout),
                stderr(&judged)
            )
            .into());
        }
        let out = traced(3, None);
        if !out.status.success() {
            return Err(format!("the rescaled resume failed: {}", stderr(&out)).into());
        }
        let skipped = validate();
        let said = format!("{}{}", String::from_utf8_lossy(&skipped.stdout), stderr(&skipped));
        if skipped.status.code() != Some(3) || !said.contains("skipped") || !said.contains("4 Rescale scope marker") {
            return Err(format!(
                "expected exit 3, skipped with 4 Rescale markers counted: {:?}\n{said}",
                skipped.status
            )
            .into());
        }
        s.check_output().map_err(Failed::from)
    })
}

/// The incident tooling over a rescaled run: collected whole (state,
/// captures, traces), the bundle verifies with replay (the markers' two
/// generations accepted because the graphs show the parallelism changed and
/// every old subtask has one successor), and the full profile says the
/// protocol conformance is unsupported for it, never passed.
fn incident_trial() -> Trial {
    Trial::test("rescale::incident::collect-and-verify", || {
        let s = Scenario::new();
        let d = s.dir.path();
        let evidence = |parallelism: u32, fault: Option<&str>| {
            let mut cmd = s.command(parallelism, fault, &[]);
            cmd.env("CLINK_PROTOCOL_TRACE_DIR", d.join("traces")).arg("--ha-dir").arg(d.join("ha"));
            cmd.arg("--capture-dir").arg(d.join("capture"));
            cmd.output().unwrap()
        };
        if !killed(&evidence(2, Some("sink.before_commit@2"))) {
            return Err("the first run was not killed".into());
        }
        let out = evidence(3, None);
        if !out.status.success() {
            return Err(format!("the rescaled resume failed: {}", stderr(&out)).into());
        }
        s.check_output()?;
        let collect = Command::new(clink())
            .args(["incident-collect", "--include-state", "--include-captures"])
            .arg("--checkpoint-dir")
            .arg(d.join("ck"))
            .arg("--ha-dir")
            .arg(d.join("ha"))
            .arg("--capture-dir")
            .arg(d.join("capture"))
            .arg("--trace-dir")
            .arg(d.join("traces"))
            .arg("--out")
            .arg(d.join("bundle"))
            .output()
            .unwrap();
        if !collect.status.success() {
            return Err(format!("incident-collect: {:?}\n{}", collect.status, stderr(&collect)).into());
        }
        let verify = |profile: &str| {
            let out = Command::new(clink())
                .arg("incident-verify")
                .arg(d.join("bundle"))
                .args(["--profile", profile])
                .output()
                .unwrap();
            (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned() + &stderr(&out))
        };
        let (code, report) = verify("replay");
        if code != Some(0) {
            return Err(format!("incident-verify --profile replay: {code:?}\n{report}").into());
        }
        let (code, report) = verify("full");
        let unsupported = report.lines().any(|l| l.contains("unsupported") && l.contains("protocol.conformance"));
        if code != Some(3) || !unsupported || !report.contains("Rescale scope marker") {
            return Err(format!(
                "incident-verify --profile full: expected 3, conformance unsupported: {code:?}\n{report}"
            )
            .into());
        }
        Ok(())
    })
}

/// A rescaled run killed before its first checkpoint completed: the job
/// manifest (published at its start) runs the job at the new parallelism,
/// the newest marker holds the old one. The bundle's job graph is the
/// marker's, the RESTORED record restores from it, and it verifies.
fn incident_mid_rescale_trial() -> Trial {
    Trial::test("rescale::incident::killed-before-the-first-rescaled-checkpoint", || {
        let s = Scenario::new();
        let d = s.dir.path();
        let run = |parallelism: u32, fault: &str| {
            let mut cmd = s.command(parallelism, Some(fault), &[]);
            cmd.arg("--ha-dir").arg(d.join("ha"));
            cmd.output().unwrap()
        };
        if !killed(&run(2, "coordinator.after_completed_marker@2")) {
            return Err("the first run was not killed".into());
        }
        let fault = format!("sink.after_prepare@{}", s.next_id());
        let out = run(3, &fault);
        if !killed(&out) {
            return Err(format!("the rescaled run was not killed at {fault}: {}", stderr(&out)).into());
        }
        if s.newest_marker("5")?.2 != 2 {
            return Err("a checkpoint of the rescaled run completed: the trial needs none".into());
        }
        let collect = Command::new(clink())
            .args(["incident-collect", "--include-state", "--checkpoint-dir"])
            .arg(d.join("ck"))
            .arg("--ha-dir")
            .arg(d.join("ha"))
            .arg("--out")
            .arg(d.join("bundle"))
            .output()
            .unwrap();
        if !collect.status.success() {
            return Err(format!("incident-collect: {:?}\n{}", collect.status, stderr(&collect)).into());
        }
        let verify = Command::new(clink())
            .arg("incident-verify")
            .arg(d.join("bundle"))
            .args(["--profile", "consistency"])
            .output()
            .unwrap();
        if verify.status.code() != Some(0) {
            return Err(format!(
                "incident-verify: {:?}\n{}{}",
                verify.status,
                String::from_utf8_lossy(&verify.stdout),
                stderr(&verify)
            )
            .into());
        }
        Ok(())
    })
}

/// A savepoint exported as a dataset, checked against the job at 3
/// (`check-savepoint`: every old subtask's snapshot accepted, re-divided),
/// and restored at 3 into a new checkpoint directory and output: the old
/// run's committed output and the new one's together are the reference's,
/// each row once.
fn dataset_trial() -> Trial {
    Trial::test("rescale::savepoint-dataset::checked-and-restored-at-3", || {
        let s = Scenario::new();
        let d = s.dir.path();
        let at = shared().middle_watermark.to_string();
        let out = s.run(2, None, &["--stop-with-savepoint-at", &at]);
        if !out.status.success() {
            return Err(format!("the savepoint run: {}", stderr(&out)).into());
        }
        let (savepoint, _, _) = s.newest_marker("5")?;
        let clink_in = |args: &[&str]| Command::new(clink()).current_dir(d).args(args).output().unwrap();
        let export = clink_in(&[
            "checkpoint",
            "export",
            "--checkpoint-dir",
            "ck",
            "--job-id",
            "1",
            "--checkpoint",
            "latest",
            "--out",
            "ds",
        ]);
        if !export.status.success() {
            return Err(format!("export: {}", stderr(&export)).into());
        }
        let job3 = job_at(d, 3);
        let check = clink_in(&["check-savepoint", "--dataset", "ds", "--expected", job3.to_str().unwrap(), "--json"]);
        let said = String::from_utf8_lossy(&check.stdout).into_owned();
        if check.status.code() != Some(0) || !said.contains("re-divided from 2 to 3 subtasks") {
            return Err(format!("check-savepoint at 3: {:?}\n{said}{}", check.status, stderr(&check)).into());
        }
        let restored = Command::new(clink())
            .current_dir(d)
            .args(["run", "--quiet", "--job"])
            .arg(&job3)
            .arg("--input-dir")
            .arg(&shared().input)
            .args(["--output-dir", "out2", "--checkpoint-dir", "ck2", "--checkpoint-every-records", EVERY])
            .args(["--restore-from-dir", "ds", "--restore-from-checkpoint-id", &savepoint.to_string()])
            .output()
            .unwrap();
        if !restored.status.success() || !stderr(&restored).contains("restored at parallelism 3 from 2") {
            return Err(format!("the restore at 3: {:?}\n{}", restored.status, stderr(&restored)).into());
        }
        let reference = &shared().reference;
        for (uid, expected) in [("windows-out", &reference.windows), ("idle-out", &reference.idle)] {
            let mut actual = read_output_lines(&d.join("out").join(uid)).map_err(|e| format!("{uid}: {e}"))?;
            actual.extend(read_output_lines(&d.join("out2").join(uid)).map_err(|e| format!("{uid}: {e}"))?);
            let diff = multiset_diff(expected.iter().cloned(), actual);
            if !diff.is_equal() {
                return Err(format!("{uid}, both runs' output together: {}", describe(&diff, 3)).into());
            }
        }
        Ok(())
    })
}

/// A rescale whose state cannot be re-divided is refused, exit 2, before
/// anything is written; the same job at its old parallelism resumes.
fn refusal_trial() -> Trial {
    Trial::test("rescale::refused::idle_timers_keyed_by_text", || {
        let s = Scenario::new();
        let text_keys = |parallelism: u32| {
            let path = job_at(s.dir.path(), parallelism);
            let mut job: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            job["operators"][3]["params"]["timer_key"] = "text".into();
            std::fs::write(&path, serde_json::to_vec_pretty(&job).unwrap()).unwrap();
            path
        };
        let run = |job: &Path, fault: Option<&str>| {
            let mut cmd = Command::new(clink());
            cmd.args(["run", "--quiet", "--job"])
                .arg(job)
                .arg("--input-dir")
                .arg(&shared().input)
                .arg("--output-dir")
                .arg(s.output())
                .arg("--checkpoint-dir")
                .arg(s.dir.path().join("ck"))
                .args(["--checkpoint-every-records", EVERY])
                .env_remove("CLINK_FAULT")
                .env_remove("CLINK_TEST_DEFECT");
            if let Some(fault) = fault {
                cmd.env("CLINK_FAULT", fault);
            }
            cmd.output().unwrap()
        };
        let killed_run = run(&text_keys(2), Some("coordinator.after_completed_marker@2"));
        if !killed(&killed_run) {
            return Err(format!("not killed: {}", stderr(&killed_run)).into());
        }
        let before = std::fs::read_dir(s.dir.path().join("ck/_jobs/1")).unwrap().count();
        let refused = run(&text_keys(3), None);
        let reason = stderr(&refused);
        if refused.status.code() != Some(2)
            || !reason.contains("keyed by the key's text")
            || !reason.contains("operator 4")
        {
            return Err(
                format!("expected exit 2 naming operator 4's text timer keys: {:?}\n{reason}", refused.status).into()
            );
        }
        if std::fs::read_dir(s.dir.path().join("ck/_jobs/1")).unwrap().count() != before {
            return Err("the refused run wrote into the checkpoint directory".into());
        }
        let resumed = run(&text_keys(2), None);
        if !resumed.status.success() {
            return Err(format!("the resume at the old parallelism failed: {}", stderr(&resumed)).into());
        }
        s.check_output().map_err(Failed::from)
    })
}

/// The variant's trial: 3 -> 1 after a kill that leaves every old sink
/// subtask's staged file of checkpoint 2 held and uncommitted. Without a
/// successor, old subtasks 1 and 2's rows are never published: the output
/// misses rows (and has none twice), and their staged files stay.
fn orphans_variant_trial() -> Trial {
    Trial::test("rescale::variant::defect-rescale-orphans::rows-lost", || {
        let s = Scenario::new();
        let killed_run = s.run(3, Some("coordinator.after_completed_marker@2"), &[]);
        if !killed(&killed_run) {
            return Err(format!("not killed: {}", stderr(&killed_run)).into());
        }
        let out = s.run(1, None, &[]);
        if !out.status.success() {
            return Err(format!("the rescaled resume failed: {}", stderr(&out)).into());
        }
        let reference = &shared().reference;
        let (mut missing, mut unexpected) = (0, 0);
        for (uid, expected) in [("windows-out", &reference.windows), ("idle-out", &reference.idle)] {
            let actual = read_output_lines(&s.output().join(uid)).map_err(|e| format!("{uid}: {e}"))?;
            let diff = multiset_diff(expected.iter().cloned(), actual);
            missing += diff.missing_copies();
            unexpected += diff.unexpected_copies();
        }
        let judged = s.check_output();
        match judged {
            Err(problems) if missing > 0 && unexpected == 0 && problems.contains("left staged") => Ok(()),
            other => Err(format!(
                "the orphaned prepared work was not caught as lost rows with staged files left: \
                 {missing} missing, {unexpected} unexpected, {other:?}"
            )
            .into()),
        }
    })
}

fn main() {
    let args = Arguments::from_args();
    if clink_engine::defects::variant_features().contains(&"defect-rescale-orphans") {
        libtest_mimic::run(&args, vec![orphans_variant_trial()]).exit();
    }
    use Before::{Killed, KilledAfterACompletion, Savepoint};
    let trials = vec![
        rescale_trial(2, 3, Savepoint, None),
        rescale_trial(3, 1, Savepoint, None),
        rescale_trial(2, 3, Killed("coordinator.after_completed_marker@2"), None),
        rescale_trial(2, 4, Killed("sink.before_commit@2"), None),
        rescale_trial(2, 4, KilledAfterACompletion("sink.after_prepare"), None),
        rescale_trial(3, 1, Killed("coordinator.after_completed_marker@2"), None),
        rescale_trial(3, 2, Killed("sink.before_commit@3"), None),
        rescale_trial(4, 2, Killed("coordinator.before_commit_broadcast@2"), None),
        rescale_trial(3, 1, KilledAfterACompletion("sink.after_prepare"), None),
        rescale_trial(2, 3, KilledAfterACompletion("sink.before_prepare"), None),
        rescale_trial(3, 1, Killed("sink.after_commit@2"), None),
        rescale_trial(2, 4, KilledAfterACompletion("coordinator.before_completed_marker"), None),
        // Killed again inside the rescaled run: before its first checkpoint
        // completed (the resume re-divides the same restore point again), and
        // after (the resume restores the new generation as it is).
        rescale_trial(2, 3, Killed("coordinator.after_completed_marker@2"), Some(("sink.after_prepare", false))),
        rescale_trial(3, 1, Killed("sink.before_commit@2"), Some(("coordinator.after_completed_marker", true))),
        rescale_trial(4, 3, Killed("sink.before_commit@3"), Some(("sink.before_commit", false))),
        refusal_trial(),
        trace_scope_trial(),
        incident_trial(),
        incident_mid_rescale_trial(),
        dataset_trial(),
    ];
    let trials = trials.into_iter().chain(rocksdb::trials()).collect();
    libtest_mimic::run(&args, trials).exit();
}
