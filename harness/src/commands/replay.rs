//! `clink replay <epoch|sweep|emit-test|run-test|diff>` and `clink replay-diff`.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use clink_basics::exit::Exit;
use clink_replay::emissions::{encode_dump, first_difference, origin_mismatch, read_dump};
use clink_replay::regression::{emit_bundle, run_bundle, BundleError};
use clink_replay::{list_captured, load_epoch, replay, verify, EpochEvidence, EpochRef, ReplayError};
use serde_json::json;

use super::{decimal_u64, Output, Which};

/// Replay captured epochs, freeze one as a regression test, or run one.
///
/// Replay rebuilds the operator from its op.json, restores its state from
/// the checkpoint before the epoch, and feeds it the captured events on a
/// manual clock, through the same driver production used.
#[derive(Args, Debug)]
pub struct ReplayArgs {
    #[command(subcommand)]
    command: ReplayCommand,
}

#[derive(Subcommand, Debug)]
enum ReplayCommand {
    /// Replay one captured epoch (with --verify: twice, compared byte for byte).
    Epoch(EpochArgs),
    /// Replay every captured epoch of every replayable operator twice.
    Sweep(SweepArgs),
    /// Freeze one captured epoch as a regression bundle (a new directory).
    EmitTest(EmitTestArgs),
    /// Run a regression bundle: exit 0 pass, 1 divergence, 2 bad bundle.
    RunTest(RunTestArgs),
    /// Compare two emission dumps (replay epoch --out).
    Diff(DiffArgs),
    /// Replay epochs with this build and with a candidate build, and report
    /// where their emissions first differ.
    Ab(super::replay_ab::AbArgs),
}

/// Where a run's captures and checkpoints are.
#[derive(Args, Debug)]
pub(super) struct RunDirs {
    /// The flight recorder's directory (clink run --capture-dir).
    #[arg(long, value_name = "DIR")]
    pub(super) capture_dir: PathBuf,
    /// The checkpoint directory the starting states come from.
    #[arg(long, value_name = "DIR")]
    pub(super) checkpoint_dir: PathBuf,
    /// The job id (decimal).
    #[arg(long, value_name = "ID", default_value = "1", value_parser = decimal_u64)]
    pub(super) job: u64,
}

fn at(which: &Which) -> EpochRef {
    EpochRef { operator: which.op, subtask: which.subtask, epoch: which.epoch }
}

#[derive(Args, Debug)]
struct EpochArgs {
    #[command(flatten)]
    dirs: RunDirs,
    #[command(flatten)]
    which: Which,
    /// Replay twice and compare the emissions byte for byte (exit 1 when they differ).
    #[arg(long)]
    verify: bool,
    /// Write the emissions to FILE (for replay diff).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct SweepArgs {
    #[command(flatten)]
    dirs: RunDirs,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct EmitTestArgs {
    #[command(flatten)]
    dirs: RunDirs,
    #[command(flatten)]
    which: Which,
    /// The regression bundle directory to create (it must not exist).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct RunTestArgs {
    /// The regression bundle directory.
    bundle: PathBuf,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

/// Compare two emission dumps (clink replay epoch --out).
///
/// Both dumps must name the same job, operator, subtask and epoch (a version
/// 1 dump names no job, so it never agrees without the flag below). Exit 0
/// when identical; 1 naming the first differing emission (its index and both
/// rows); 2 when a dump is unreadable, its header missing or malformed, or
/// the two name different epochs.
#[derive(Args, Debug)]
pub struct DiffArgs {
    /// The first dump.
    a: PathBuf,
    /// The second dump.
    b: PathBuf,
    /// Compare the rows even when the headers name different jobs,
    /// operators, subtasks or epochs (or a version 1 dump names no job).
    #[arg(long)]
    allow_different_epochs: bool,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

/// What a replay error means for the exit code.
pub(super) fn exit_of(e: &ReplayError) -> Exit {
    match e {
        ReplayError::Refused(_) => Exit::Refused,
        ReplayError::Failed(_) => Exit::Failed,
        ReplayError::Unsupported(_) | ReplayError::Unavailable(_) => Exit::NotEstablished,
    }
}

pub fn main(args: ReplayArgs) -> Exit {
    match args.command {
        ReplayCommand::Epoch(a) => epoch(a),
        ReplayCommand::Sweep(a) => sweep(a),
        ReplayCommand::EmitTest(a) => emit_test(a),
        ReplayCommand::RunTest(a) => run_test(a),
        ReplayCommand::Diff(a) => diff_main(a),
        ReplayCommand::Ab(a) => super::replay_ab::main(a),
    }
}

fn load(out: &Output, dirs: &RunDirs, at: &EpochRef) -> Result<EpochEvidence, Exit> {
    load_epoch(&dirs.capture_dir, &dirs.checkpoint_dir, dirs.job, at)
        .map_err(|e| out.stop(exit_of(&e), format!("replay {at}: {e}")))
}

fn epoch(args: EpochArgs) -> Exit {
    let out = Output::new("replay epoch", args.json);
    let at = at(&args.which);
    let evidence = match load(&out, &args.dirs, &at) {
        Ok(e) => e,
        Err(exit) => return exit,
    };
    let (outcome, identical, difference) = if args.verify {
        match verify(&evidence) {
            Ok(v) => (v.outcome, Some(v.identical), v.first_difference.map(|d| d.to_string())),
            Err(e) => return out.stop(exit_of(&e), format!("replay {at}: {e}")),
        }
    } else {
        match replay(&evidence) {
            Ok(o) => (o, None, None),
            Err(e) => return out.stop(exit_of(&e), format!("replay {at}: {e}")),
        }
    };
    if let Some(path) = &args.out {
        if let Err(e) = std::fs::write(path, encode_dump(args.dirs.job, &at, &outcome.emissions)) {
            return out.refuse(format!("--out {}: {e}", path.display()));
        }
    }
    let exit = if identical == Some(false) { Exit::Failed } else { Exit::Passed };
    let doc = json!({
        "format": "clink-replay-result", "version": 1, "operator": at.operator.to_string(), "subtask": at.subtask,
        "epoch": at.epoch, "emissions": outcome.emissions.len(), "partial": outcome.partial, "notes": outcome.notes,
        "verified": identical.is_some(), "identical": identical, "first_difference": difference,
        "exit_code": exit.code(),
    });
    let text = || {
        let mut lines: Vec<String> = outcome.notes.iter().map(|n| format!("note: {n}")).collect();
        lines.push(match identical {
            Some(false) => format!(
                "replay {at}: NOT deterministic: the two replays differ at {}",
                difference.clone().unwrap_or_default()
            ),
            Some(true) => format!(
                "replay {at}: deterministic: two replays emitted the same {} rows{}",
                outcome.emissions.len(),
                if outcome.partial { " (a partial epoch)" } else { "" }
            ),
            None => format!("replay {at}: {} emissions", outcome.emissions.len()),
        });
        lines.join("\n")
    };
    out.report(doc, text, exit)
}

fn emit_test(args: EmitTestArgs) -> Exit {
    let out = Output::new("replay emit-test", args.json);
    let at = at(&args.which);
    let evidence = match load(&out, &args.dirs, &at) {
        Ok(e) => e,
        Err(exit) => return exit,
    };
    match emit_bundle(&evidence, &args.out) {
        Ok(m) => {
            let doc = json!({
                "format": "clink-emit-test-result", "version": 1, "out": args.out.display().to_string(),
                "golden_emissions": m.golden_emissions, "start_checkpoint": m.start_checkpoint,
            });
            let text = || {
                format!(
                    "regression bundle {} written: {at}, {} golden emissions, starts from checkpoint {}; it passes on this build",
                    args.out.display(),
                    m.golden_emissions,
                    m.start_checkpoint
                )
            };
            out.report(doc, text, Exit::Passed)
        }
        Err(e) => out.stop(exit_of(&e), e),
    }
}

fn run_test(args: RunTestArgs) -> Exit {
    let out = Output::new("replay run-test", args.json);
    let dir = &args.bundle;
    let (exit, detail) = match run_bundle(dir) {
        Ok(n) => (Exit::Passed, format!("passed ({n} emissions equal the golden)")),
        Err(BundleError::Diverged(d)) => (Exit::Failed, format!("FAILED: {d}")),
        Err(BundleError::Refused(e)) => return out.refuse(format!("{}: {e}", dir.display())),
        Err(BundleError::Replay(e)) => return out.stop(exit_of(&e), format!("{}: {e}", dir.display())),
    };
    let doc = json!({
        "format": "clink-run-test-result", "version": 1, "bundle": dir.display().to_string(),
        "result": exit.as_str(), "detail": detail, "exit_code": exit.code(),
    });
    out.report(doc, || format!("{}: {detail}", dir.display()), exit)
}

/// Verifies every captured epoch of every replayable operator.
fn sweep(args: SweepArgs) -> Exit {
    let out = Output::new("replay sweep", args.json);
    let dirs = &args.dirs;
    let captured = match list_captured(&dirs.capture_dir) {
        Ok(c) => c,
        Err(e) => return out.refuse(e),
    };
    let (mut verified, mut failed, mut unavailable, mut unsupported) = (0, 0, 0, 0);
    let mut lines = Vec::new();
    let progress = crate::progress::Progress::bar(args.json, "replaying", "epochs");
    progress.set_length(captured.len() as u64);
    for (at, _) in &captured {
        progress.message(at.to_string());
        let result = load_epoch(&dirs.capture_dir, &dirs.checkpoint_dir, dirs.job, at).and_then(|e| verify(&e));
        match result {
            Ok(v) if v.identical => verified += 1,
            Ok(v) => {
                failed += 1;
                let d = v.first_difference.map(|d| d.to_string()).unwrap_or_default();
                lines.push(format!("{at}: NOT deterministic: {d}"));
            }
            Err(ReplayError::Unsupported(_)) => unsupported += 1,
            Err(ReplayError::Unavailable(e)) => {
                unavailable += 1;
                lines.push(format!("{at}: unavailable: {e}"));
            }
            Err(e) => {
                failed += 1;
                lines.push(format!("{at}: {e}"));
            }
        }
        progress.inc();
    }
    drop(progress);
    let exit = if failed > 0 {
        Exit::Failed
    } else if verified == 0 || unavailable > 0 {
        Exit::NotEstablished
    } else {
        Exit::Passed
    };
    let doc = json!({
        "format": "clink-replay-sweep", "version": 1, "captured": captured.len(), "deterministic": verified,
        "failed": failed, "unavailable": unavailable, "unsupported": unsupported, "problems": lines,
        "exit_code": exit.code(),
    });
    let text = || {
        lines.push(format!(
            "sweep: {} captured epochs: {verified} deterministic, {failed} failed, {unavailable} unavailable, {unsupported} not replayable (sinks, multi-input)",
            captured.len()
        ));
        lines.join("\n")
    };
    out.report(doc, text, exit)
}

pub fn diff_main(args: DiffArgs) -> Exit {
    let out = Output::new("replay diff", args.json);
    let read = |path: &Path| read_dump(path).map_err(|e| format!("{}: {e}", path.display()));
    let (a, b) = match (read(&args.a), read(&args.b)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => return out.refuse(e),
    };
    let mismatch = origin_mismatch(&a, &b);
    if let (Some(why), false) = (&mismatch, args.allow_different_epochs) {
        return out.refuse(format!(
            "{} ({}) and {} ({}) are not dumps of the same epoch: {why}; --allow-different-epochs compares them anyway",
            args.a.display(),
            a.origin(),
            args.b.display(),
            b.origin()
        ));
    }
    let difference = first_difference(&a.rows, &b.rows);
    let exit = if difference.is_none() { Exit::Passed } else { Exit::Failed };
    let doc = json!({
        "format": "clink-replay-diff", "version": 1, "identical": difference.is_none(),
        "origins": [a.origin(), b.origin()], "same_epoch": mismatch.is_none(),
        "emissions": [a.rows.len(), b.rows.len()], "first_difference": difference.as_ref().map(|d| d.to_string()),
        "exit_code": exit.code(),
    });
    let text = || match &difference {
        None => format!("identical: {} emissions", a.rows.len()),
        Some(d) => format!("different: {d}"),
    };
    out.report(doc, text, exit)
}
