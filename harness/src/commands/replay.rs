//! `clink replay` and `clink replay-diff`.

use std::path::PathBuf;

use clap::Args;
use clink_engine::job::OperatorId;
use clink_harness::replay::emissions::{encode_dump, first_difference, read_dump};
use clink_harness::replay::regression::{emit_bundle, run_bundle, BundleError};
use clink_harness::replay::{list_captured, load_epoch, replay, verify, EpochRef, ReplayError};

use super::{refuse, EXIT_FAILED, EXIT_OK, EXIT_PARTIAL};

/// Replay captured epochs, or run a regression bundle.
///
/// Rebuilds the operator from its op.json, restores its state from the
/// checkpoint before the epoch, and feeds it the captured events on a manual
/// clock.
///
/// With --op, --subtask and --epoch: one epoch. Without --op and with --verify:
/// every captured single-input operator's epochs. --run-test runs a regression
/// bundle instead.
#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// The flight recorder's directory (clink run --capture-dir).
    #[arg(long, value_name = "DIR", required_unless_present = "run_test")]
    capture_dir: Option<PathBuf>,
    /// The checkpoint directory the starting states come from.
    #[arg(long, value_name = "DIR", required_unless_present = "run_test")]
    checkpoint_dir: Option<PathBuf>,
    /// The job id (decimal).
    #[arg(long, value_name = "ID", default_value = "1")]
    job: String,
    /// Operator id (decimal).
    #[arg(long, value_name = "ID", requires_all = ["subtask", "epoch"])]
    op: Option<String>,
    /// The operator's subtask.
    #[arg(long, value_name = "S")]
    subtask: Option<u32>,
    /// The epoch: the events between checkpoints N-1 and N.
    #[arg(long, value_name = "N")]
    epoch: Option<u64>,
    /// Replay twice and compare the emissions byte for byte (exit 1 when they differ).
    #[arg(long)]
    verify: bool,
    /// Write the emissions to FILE (for replay-diff).
    #[arg(long, value_name = "FILE", requires = "op")]
    out: Option<PathBuf>,
    /// Freeze the epoch as a regression bundle in DIR (a new directory).
    #[arg(long, value_name = "DIR", requires = "op")]
    emit_test: Option<PathBuf>,
    /// Run the regression bundle in DIR: exit 0 pass, 1 divergence, 2 bad bundle.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["capture_dir", "op", "verify", "out", "emit_test"])]
    run_test: Option<PathBuf>,
}

fn error_code(e: &ReplayError) -> u8 {
    match e {
        ReplayError::Refused(_) => super::EXIT_REFUSED,
        ReplayError::Failed(_) => EXIT_FAILED,
        ReplayError::Unsupported(_) | ReplayError::Unavailable(_) => EXIT_PARTIAL,
    }
}

pub fn main(args: ReplayArgs) -> u8 {
    if let Some(dir) = &args.run_test {
        return run_test(dir);
    }
    let (Some(capture_dir), Some(checkpoint_dir)) = (&args.capture_dir, &args.checkpoint_dir) else {
        return refuse("--capture-dir and --checkpoint-dir are required");
    };
    let Some(job) = clink_engine::job::parse_decimal_u64(&args.job) else {
        return refuse(format!("--job {:?}: expected a decimal id", args.job));
    };
    let Some(op) = &args.op else {
        if !args.verify {
            return refuse("without --op, only --verify (a sweep of every captured epoch) is possible");
        }
        return sweep(capture_dir, checkpoint_dir, job);
    };
    let Some(operator) = OperatorId::parse(op) else {
        return refuse(format!("--op {op:?}: expected a decimal operator id"));
    };
    let at = EpochRef { operator, subtask: args.subtask.unwrap_or(0), epoch: args.epoch.unwrap_or(0) };
    let evidence = match load_epoch(capture_dir, checkpoint_dir, job, &at) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("clink: replay {at}: {e}");
            return error_code(&e);
        }
    };
    if let Some(dest) = &args.emit_test {
        return match emit_bundle(&evidence, dest) {
            Ok(m) => {
                println!(
                    "regression bundle {} written: {at}, {} golden emissions, starts from checkpoint {}; it passes on this build",
                    dest.display(),
                    m.golden_emissions,
                    m.start_checkpoint
                );
                EXIT_OK
            }
            Err(e) => {
                eprintln!("clink: --emit-test: {e}");
                error_code(&e)
            }
        };
    }
    let outcome = if args.verify {
        match verify(&evidence) {
            Ok(v) => {
                for note in &v.outcome.notes {
                    println!("note: {note}");
                }
                if !v.identical {
                    let d = v.first_difference.map(|d| d.to_string()).unwrap_or_default();
                    println!("replay {at}: NOT deterministic: the two replays differ at {d}");
                    return EXIT_FAILED;
                }
                let partial = if v.outcome.partial { " (a partial epoch)" } else { "" };
                println!(
                    "replay {at}: deterministic: two replays emitted the same {} rows{partial}",
                    v.outcome.emissions.len()
                );
                v.outcome
            }
            Err(e) => {
                eprintln!("clink: replay {at}: {e}");
                return error_code(&e);
            }
        }
    } else {
        match replay(&evidence) {
            Ok(o) => {
                for note in &o.notes {
                    println!("note: {note}");
                }
                println!("replay {at}: {} emissions", o.emissions.len());
                o
            }
            Err(e) => {
                eprintln!("clink: replay {at}: {e}");
                return error_code(&e);
            }
        }
    };
    if let Some(out) = &args.out {
        if let Err(e) = std::fs::write(out, encode_dump(&at, &outcome.emissions)) {
            return refuse(format!("--out {}: {e}", out.display()));
        }
    }
    EXIT_OK
}

fn run_test(dir: &std::path::Path) -> u8 {
    match run_bundle(dir) {
        Ok(n) => {
            println!("{}: passed ({n} emissions equal the golden)", dir.display());
            EXIT_OK
        }
        Err(BundleError::Diverged(d)) => {
            println!("{}: FAILED: {d}", dir.display());
            EXIT_FAILED
        }
        Err(BundleError::Refused(e)) => refuse(format!("{}: {e}", dir.display())),
        Err(BundleError::Replay(e)) => {
            eprintln!("clink: {}: {e}", dir.display());
            error_code(&e)
        }
    }
}

/// Verifies every captured epoch of every replayable operator.
fn sweep(capture_dir: &std::path::Path, checkpoint_dir: &std::path::Path, job: u64) -> u8 {
    let captured = match list_captured(capture_dir) {
        Ok(c) => c,
        Err(e) => return refuse(e),
    };
    let (mut verified, mut differ, mut unavailable, mut unsupported) = (0, 0, 0, 0);
    for (at, _) in &captured {
        let result = load_epoch(capture_dir, checkpoint_dir, job, at).and_then(|e| verify(&e));
        match result {
            Ok(v) if v.identical => verified += 1,
            Ok(v) => {
                differ += 1;
                println!("{at}: NOT deterministic: {}", v.first_difference.map(|d| d.to_string()).unwrap_or_default());
            }
            Err(ReplayError::Unsupported(_)) => unsupported += 1,
            Err(ReplayError::Unavailable(e)) => {
                unavailable += 1;
                println!("{at}: unavailable: {e}");
            }
            Err(e) => {
                differ += 1;
                println!("{at}: {e}");
            }
        }
    }
    println!(
        "sweep: {} captured epochs: {verified} deterministic, {differ} failed, {unavailable} unavailable, {unsupported} not replayable (sinks, multi-input)",
        captured.len()
    );
    if differ > 0 {
        EXIT_FAILED
    } else if verified == 0 || unavailable > 0 {
        EXIT_PARTIAL
    } else {
        EXIT_OK
    }
}

/// Compare two emission dumps (clink replay --out).
///
/// Exit 0 when identical; 1 naming the first differing emission (its index and
/// both rows); 2 when a dump is unreadable.
#[derive(Args, Debug)]
pub struct ReplayDiffArgs {
    a: PathBuf,
    b: PathBuf,
}

pub fn diff_main(args: ReplayDiffArgs) -> u8 {
    let (a, b) = match (read_dump(&args.a), read_dump(&args.b)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => return refuse(e),
    };
    match first_difference(&a.rows, &b.rows) {
        None => {
            println!("identical: {} emissions", a.rows.len());
            EXIT_OK
        }
        Some(d) => {
            println!("different: {d}");
            EXIT_FAILED
        }
    }
}
