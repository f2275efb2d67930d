//! `clink incident-collect`: gather a job's evidence into a portable bundle.

use std::path::PathBuf;

use clap::Args;
use clink_engine::job::{parse_decimal_u64, OperatorId};
use clink_harness::bundle::collect::{collect, CollectOptions};

use super::{refuse, EXIT_FAILED, EXIT_OK};

/// Collect a job's checkpoints, captures and traces into a bundle.
///
/// The checkpoint is the one the engine's restore rule chooses (or
/// --checkpoint). Markers are listed before and after copying and every file
/// is hashed while copied: a checkpoint completing mid-collection refuses the
/// bundle (exit 1, nothing left at --out); collect again or stop the job first.
#[derive(Args, Debug)]
pub struct IncidentCollectArgs {
    /// The job's checkpoint directory (clink run --checkpoint-dir).
    #[arg(long, value_name = "DIR")]
    checkpoint_dir: PathBuf,
    /// The job id (decimal).
    #[arg(long, value_name = "ID", default_value = "1")]
    job: String,
    /// The coordinator's HA directory (clink run --ha-dir): the job manifest.
    #[arg(long, value_name = "DIR")]
    ha_dir: Option<PathBuf>,
    /// The flight recorder's directory (clink run --capture-dir).
    #[arg(long, value_name = "DIR")]
    capture_dir: Option<PathBuf>,
    /// The protocol traces (CLINK_PROTOCOL_TRACE_DIR).
    #[arg(long, value_name = "DIR")]
    trace_dir: Option<PathBuf>,
    /// Include the snapshots (they hold the job's records; nothing redacts them).
    #[arg(long)]
    include_state: bool,
    /// Include the captured epochs (they hold the job's records).
    #[arg(long)]
    include_captures: bool,
    /// Collect this checkpoint instead of the engine's choice (both are recorded).
    #[arg(long, value_name = "ID")]
    checkpoint: Option<u64>,
    /// Whether the job's sinks need commit confirmation, when no job manifest says.
    #[arg(long, value_name = "yes|no")]
    commit_confirmation: Option<String>,
    /// Only these operators' captures (comma-separated decimal ids).
    #[arg(long, value_name = "IDS")]
    op: Option<String>,
    /// Only these epochs (comma-separated; default: the selected checkpoint's,
    /// the next, and a restored run's first).
    #[arg(long, value_name = "N,...")]
    epochs: Option<String>,
    /// The bundle directory to create; it must not exist.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// At most this many bytes: past it, required evidence refuses the
    /// collection and optional captures are excluded.
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 30)]
    max_bytes: u64,
    /// At most this many files (the same rule as --max-bytes).
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    max_files: u64,
    /// Give up (refuse) after this many seconds.
    #[arg(long, value_name = "S", default_value_t = 600)]
    timeout_s: u64,
    /// Print the result (or the refusal and its kind) as JSON.
    #[arg(long)]
    json: bool,
}

fn list<T>(text: &str, parse: impl Fn(&str) -> Option<T>) -> Option<Vec<T>> {
    text.split(',').map(|s| parse(s.trim())).collect()
}

pub fn main(args: IncidentCollectArgs) -> u8 {
    let Some(job) = parse_decimal_u64(&args.job) else {
        return refuse(format!("--job {:?}: expected a decimal id", args.job));
    };
    let commit_confirmation = match args.commit_confirmation.as_deref() {
        None => None,
        Some("yes") => Some(true),
        Some("no") => Some(false),
        Some(other) => return refuse(format!("--commit-confirmation {other:?}: expected yes or no")),
    };
    let ops = match &args.op {
        None => None,
        Some(text) => match list(text, OperatorId::parse) {
            Some(ops) => Some(ops),
            None => return refuse(format!("--op {text:?}: expected comma-separated decimal ids")),
        },
    };
    let epochs = match &args.epochs {
        None => None,
        Some(text) => match list(text, parse_decimal_u64) {
            Some(e) => Some(e),
            None => return refuse(format!("--epochs {text:?}: expected comma-separated epoch numbers")),
        },
    };
    if args.out.exists() {
        return refuse(format!("--out {}: exists; a bundle is never written over", args.out.display()));
    }
    let options = CollectOptions {
        checkpoint_dir: args.checkpoint_dir,
        job,
        ha_dir: args.ha_dir,
        capture_dir: args.capture_dir,
        trace_dir: args.trace_dir,
        include_state: args.include_state,
        include_captures: args.include_captures,
        checkpoint: args.checkpoint,
        commit_confirmation,
        ops,
        epochs,
        out: args.out,
        max_bytes: args.max_bytes,
        max_files: args.max_files,
        timeout_s: args.timeout_s,
    };
    match collect(&options) {
        Ok(c) => {
            if args.json {
                let json = serde_json::json!({
                    "format": "clink-collect-report", "version": 1, "result": "published",
                    "out": c.out.display().to_string(), "checkpoint": c.checkpoint, "engine_choice": c.engine_choice,
                    "files": c.files, "bytes": c.bytes, "epochs": c.epochs, "seconds": c.seconds,
                });
                println!("{json}");
            } else {
                println!(
                    "published {}: checkpoint {} (engine choice {}), {} files, {} bytes, {} captured epochs, in {:.2}s",
                    c.out.display(),
                    c.checkpoint,
                    c.engine_choice,
                    c.files,
                    c.bytes,
                    c.epochs,
                    c.seconds
                );
            }
            EXIT_OK
        }
        Err(r) => {
            if args.json {
                let json = serde_json::json!({
                    "format": "clink-collect-report", "version": 1, "result": "refused",
                    "kind": r.kind.as_str(), "reason": r.reason,
                    "next_action": "collect again, or stop the job first",
                });
                println!("{json}");
            }
            eprintln!("clink: incident-collect {r}");
            EXIT_FAILED
        }
    }
}
