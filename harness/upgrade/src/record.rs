//! `clink upgrade record`: runs the baseline to the definition's cut, takes
//! a savepoint there while the job runs, exports it with the tools build,
//! stops the job, and writes the evidence set under `<out>/evidence`.
//!
//! Before it publishes, it compares the baseline's committed output and the
//! savepoint's decoded state with the reference at the cut; it publishes
//! either way, and the result is failed when they differ, so a baseline that
//! is already wrong is visible before anything is compared with it.

use std::path::{Path, PathBuf};
use std::time::Instant;

use clink_basics::exit::Exit;
use serde_json::json;

use crate::compare::{self, account};
use crate::definition::Definition;
use crate::evidence::{self, FileIdentity, Identity, Index, Savepoint, SavepointOperator};
use crate::report::{self, Checks, Status, RECORD_TABLE};
use crate::runner::Runner;
use crate::steps::{self, RunDirs, StepError};
use crate::{Bounds, Build, UsageError};
use clink_isolation::Proof;

#[derive(Debug, Clone)]
pub struct RecordArgs {
    pub test: PathBuf,
    pub out: PathBuf,
    pub tools: PathBuf,
    pub baseline: Build,
    pub bounds: Bounds,
}

#[derive(Debug)]
pub struct Outcome {
    pub exit: Exit,
    pub text: String,
    pub digest: Option<String>,
}

/// Checks the arguments before anything is written.
pub fn preflight(out: &Path, files: &[(&str, &Path)]) -> Result<(), UsageError> {
    if out.exists() || out.symlink_metadata().is_ok() {
        return Err(UsageError::Bad(format!("--out {} exists; give a fresh directory", out.display())));
    }
    for (flag, path) in files {
        match std::fs::metadata(path) {
            Ok(m) if m.is_file() => {}
            _ => return Err(UsageError::Bad(format!("{flag} {}: not a file", path.display()))),
        }
    }
    Ok(())
}

fn identity(build: &Build, caps: Option<&steps::Capabilities>) -> Result<Identity, String> {
    Ok(Identity {
        clink: FileIdentity::of(&build.clink)?,
        job: FileIdentity::of(&build.job)?,
        build: caps.and_then(|c| c.build.clone()),
    })
}

pub fn record(a: &RecordArgs, isolation: Proof) -> Result<Outcome, UsageError> {
    preflight(
        &a.out,
        &[("--baseline-clink", &a.baseline.clink), ("--baseline-job", &a.baseline.job), ("--tools-clink", &a.tools)],
    )?;
    let def = Definition::read(&a.test)?;
    let job = steps::job_id(&a.baseline.job).map_err(UsageError::Bad)?;
    let started = Instant::now();
    let mk = |p: &Path| std::fs::create_dir_all(p).map_err(|source| UsageError::Io { path: p.to_path_buf(), source });
    mk(&a.out)?;
    let mut runner = Runner::new(&a.out, a.bounds).map_err(|source| UsageError::Io { path: a.out.clone(), source })?;
    let mut checks = Checks::new(RECORD_TABLE);
    let mut facts = json!({"test_sha256": def.sha256});
    let digest = run(a, &def, job, isolation, &mut runner, &mut checks, &mut facts);
    if let Err(e) = &digest {
        checks.undecided_unavailable(&e.to_string());
    }
    let digest = digest.ok().flatten();
    if let Some(d) = &digest {
        facts["evidence"] = json!(a.out.join("evidence").display().to_string());
        facts["evidence_digest"] = json!(d);
    }
    let text = report::write(&a.out, "record", &checks, facts, &runner.commands, started.elapsed().as_secs_f64())
        .map_err(UsageError::Bad)?;
    let mut text = text;
    if let Some(d) = &digest {
        text.push_str(&format!("evidence: {}\ndigest: {d}\n", a.out.join("evidence").display()));
    }
    Ok(Outcome { exit: checks.result(), text, digest })
}

fn run(
    a: &RecordArgs,
    def: &Definition,
    job: u64,
    isolation: Proof,
    r: &mut Runner,
    checks: &mut Checks,
    facts: &mut serde_json::Value,
) -> Result<Option<String>, StepError> {
    let status = report::isolation_status(&isolation);
    checks.set("isolation", status, &isolation.reason);
    match status {
        Status::Passed => {}
        Status::Failed => return Err(StepError::Failed("isolation is not enforced; no build was run".into())),
        _ => return Err(StepError::Failed("isolation was not proven; no build was run".into())),
    }
    let caps = steps::capabilities(r, "baseline", &a.baseline.clink)?;
    let tools_caps = steps::capabilities(r, "tools", &a.tools)?;
    let missing: Vec<&String> = def.capabilities.iter().filter(|c| !caps.names.contains(*c)).collect();
    let tools_missing: Vec<&str> =
        ["dataset.export", "state.cat"].into_iter().filter(|c| !tools_caps.names.contains(*c)).collect();
    if missing.is_empty() && tools_missing.is_empty() {
        checks.set(
            "builds.capabilities",
            Status::Passed,
            format!("the baseline ({}) and the tools build report every one required", caps.how),
        );
    } else {
        checks.set(
            "builds.capabilities",
            Status::Unsupported,
            format!("not reported: baseline {missing:?} ({}), tools {tools_missing:?}", caps.how),
        );
        return Err(StepError::Failed("a required capability is unsupported".into()));
    }
    let baseline_id = identity(&a.baseline, Some(&caps)).map_err(StepError::Failed)?;
    let tools_id = identity(&Build { clink: a.tools.clone(), job: a.baseline.job.clone() }, Some(&tools_caps))
        .map_err(StepError::Failed)?;
    facts["baseline"] = serde_json::to_value(&baseline_id).unwrap_or_default();
    facts["tools"] = serde_json::to_value(&tools_id.clink).unwrap_or_default();

    let input = def.input();
    let cut = def.cut();
    let work = a.out.join("work");
    let dirs = RunDirs::under(&work.join("baseline"));
    steps::publish(&dirs.input, &input[..cut]).map_err(StepError::Failed)?;
    let expected_position = (input[cut - 1].0.clone(), input[cut - 1].1.lines().count() as u64);

    let mut running = steps::start_job(r, "baseline-run", &a.baseline, &dirs, None)?;
    // Savepoints until one covers the whole input before the cut.
    let (dataset, listing, checkpoint, dataset_digest) = loop {
        let id = steps::savepoint(r, "baseline-savepoint", &a.baseline, &dirs, job, &mut running)?;
        let out = work.join(format!("savepoint-{id}"));
        let (digest, _) = steps::export(r, "tools-export", &a.tools, &dirs.checkpoints, job, &id.to_string(), &out)?;
        let listing = steps::state_cat(r, "tools-state-cat", &a.tools, &out)?;
        if steps::source_position(&listing).as_ref() == Some(&expected_position) {
            break (out, listing, id, digest);
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    checks.set(
        "record.savepoint",
        Status::Passed,
        format!(
            "savepoint {checkpoint} at {} line {} (dataset {dataset_digest})",
            expected_position.0, expected_position.1
        ),
    );
    let stop = r.run(
        "baseline-stop",
        &a.baseline.clink,
        &crate::args!["stop", "--checkpoint-dir", dirs.checkpoints.display(), "--job-id", job, "--json"],
    )?;
    let ended = r.wait(running, None)?;
    if !stop.ok() || !ended.ok() {
        return Err(StepError::Failed(format!(
            "the baseline did not stop cleanly: stop {}, run {}: {}",
            stop.describe(),
            ended.describe(),
            ended.last_error_line()
        )));
    }

    // The evidence set.
    let set = a.out.join("evidence");
    let write = |rel: &str, bytes: &[u8]| -> Result<(), StepError> {
        let path = set.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| StepError::Failed(format!("{}: {e}", parent.display())))?;
        }
        std::fs::write(&path, bytes).map_err(|e| StepError::Failed(format!("{}: {e}", path.display())))
    };
    write("test.json", &def.bytes)?;
    for (name, text) in &input {
        write(&format!("input/{name}"), text.as_bytes())?;
    }
    steps::copy_tree(&dataset, &set.join("checkpoint")).map_err(StepError::Failed)?;
    for sink in def.sinks.values() {
        let dir = dirs.output.join(sink);
        std::fs::create_dir_all(set.join("output").join(sink)).map_err(|e| StepError::Failed(e.to_string()))?;
        let lines = if dir.exists() {
            clink_reference::output::read_output_lines(&dir).map_err(|e| StepError::Failed(e.to_string()))?
        } else {
            Vec::new()
        };
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        write(&format!("output/{sink}/committed.txt"), text.as_bytes())?;
    }
    let expectation = clink_reference::upgrade::expect(&def.semantics, &input)
        .map_err(|e| StepError::Failed(format!("the reference: {e}")))?;
    let reference = expectation.to_json();
    write("reference.json", &serde_json::to_vec_pretty(&reference).unwrap_or_default())?;

    // The record-time checks: the baseline against the reference at the cut.
    let (want_rows, want_state) = compare::reference_part(&reference, "at_cut").map_err(StepError::Failed)?;
    let got_rows = compare::committed_rows(&set.join("output"), def).map_err(StepError::Failed)?;
    let rows = compare::diff_rows(&want_rows, &got_rows);
    checks.pass_or_fail(
        "record.output",
        rows.is_equal(),
        format!("the baseline's committed rows against the reference at the cut: {}", account(&rows)),
    );
    let state = compare::logical_state(&listing, def).map_err(StepError::Failed)?;
    let sdiff = compare::diff_state(&want_state, &state.rows);
    let undocumented = if state.undocumented.is_empty() {
        String::new()
    } else {
        format!("; undocumented: {}", state.undocumented.join("; "))
    };
    checks.pass_or_fail(
        "record.state",
        sdiff.is_equal() && state.undocumented.is_empty(),
        format!(
            "the savepoint's logical state against the reference at the cut: {}; {} misplaced rows counted{undocumented}",
            account(&sdiff),
            state.misplaced
        ),
    );
    let index = Index {
        format: evidence::FORMAT.into(),
        version: evidence::VERSION,
        test_sha256: def.sha256.clone(),
        baseline: baseline_id,
        tools: tools_id,
        savepoint: Savepoint {
            job: job.to_string(),
            checkpoint,
            dataset_digest,
            last_watermark: def.last_watermark_at_cut(),
            operators: state
                .operators
                .iter()
                .map(|o| SavepointOperator {
                    uid: o.uid.clone(),
                    id: o.id.clone(),
                    subtasks: o.parallelism,
                    holds_state: o.holds_state,
                })
                .collect(),
        },
        record_checks: checks.checks.iter().map(|c| serde_json::to_value(c).unwrap_or_default()).collect(),
        files: Default::default(),
    };
    let digest = evidence::seal(&set, index).map_err(StepError::Failed)?;
    Ok(Some(digest))
}
