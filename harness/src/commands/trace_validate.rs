//! `clink trace-validate`: check one run's protocol trace against the
//! specification with TLC.

use std::path::PathBuf;

use clap::Args;
use clink_engine::job::parse_decimal_u64;
use clink_harness::formal::trace::{validate_run, Verdict};

use super::{refuse, EXIT_FAILED, EXIT_OK, EXIT_PARTIAL};

/// Validate a run's protocol trace against the TLA+ specification.
///
/// Merges the run's per-process files (CLINK_PROTOCOL_TRACE_DIR), keeps one
/// job, generates the trace modules and runs TLC on formal/ExactlyOnce.tla.
/// Exit 0 accepted; 1 rejected (naming the first event no step could produce);
/// 3 when Java or the pinned jar is missing; 2 on bad usage or a trace that
/// cannot be read.
#[derive(Args, Debug)]
pub struct TraceValidateArgs {
    /// The directory holding the run's *.ndjson trace files.
    #[arg(long, value_name = "DIR")]
    trace: PathBuf,
    /// The job to validate (default: the only job in the trace).
    #[arg(long, value_name = "ID")]
    job: Option<String>,
    #[arg(long, value_name = "DIR")]
    formal_dir: Option<PathBuf>,
    #[arg(long, value_name = "DIR")]
    formal_tools_dir: Option<PathBuf>,
}

pub fn main(args: TraceValidateArgs) -> u8 {
    let job = match &args.job {
        None => None,
        Some(j) => match parse_decimal_u64(j) {
            Some(j) => Some(j),
            None => return refuse(format!("--job {j:?}: expected a decimal id")),
        },
    };
    let tools = match clink_harness::formal::locate(args.formal_dir.as_deref(), args.formal_tools_dir.as_deref()) {
        Ok(t) => t,
        Err(why) => {
            eprintln!("clink: trace validation unavailable: {why}");
            return EXIT_PARTIAL;
        }
    };
    let validation = match validate_run(&tools, &args.trace, job) {
        Ok(v) => v,
        Err(e) => return refuse(format!("{}: {e}", args.trace.display())),
    };
    for tie in &validation.ties {
        eprintln!("clink: {}: timestamp tie (ordered by file name): {tie}", args.trace.display());
    }
    match &validation.verdict {
        Verdict::Accepted { events } => {
            println!(
                "{}: accepted: {events} events are a behaviour of the specification ({:.2}s)",
                args.trace.display(),
                validation.seconds
            );
            EXIT_OK
        }
        Verdict::Rejected { k, event } => {
            println!(
                "{}: REJECTED at event {k} of {}: no step of the specification produces {event}",
                args.trace.display(),
                validation.events
            );
            if let Some(dir) = &validation.modules_dir {
                println!("  the generated modules and TLC's output are kept in {}", dir.display());
            }
            EXIT_FAILED
        }
        Verdict::Violated { invariant, k } => {
            println!(
                "{}: VIOLATED: the state after event {k} of {} breaks the invariant {invariant}",
                args.trace.display(),
                validation.events
            );
            if let Some(dir) = &validation.modules_dir {
                println!("  the generated modules and TLC's output are kept in {}", dir.display());
            }
            EXIT_FAILED
        }
        Verdict::Error(e) => {
            eprintln!("clink: {}: TLC did not check the trace: {e}", args.trace.display());
            if let Some(dir) = &validation.modules_dir {
                eprintln!("  the generated modules and TLC's output are kept in {}", dir.display());
            }
            super::EXIT_REFUSED
        }
    }
}
