//! `clink incident-collect`: gather a job's evidence into a portable bundle.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use clink_basics::exit::Exit;
use clink_basics::ids::OperatorId;
use clink_basics::text::count;
use clink_bundle::collect::{collect_observed, CollectOptions, EpochSelection};
use serde_json::json;

use super::{decimal_u64, operator_id, Output};

/// Whether the job's sinks need commit confirmation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum YesNo {
    Yes,
    No,
}

/// Collect a job's checkpoints, captures and traces into a bundle.
///
/// The checkpoint is the one the engine's restore rule chooses (or
/// --checkpoint). Markers are listed before and after copying and every file
/// is hashed while copied: a checkpoint completing mid-collection refuses the
/// bundle (exit 1, refusal kind `changed`, nothing left at --out); collect
/// again or stop the job first. Refusal kinds: changed, missing, bound,
/// timeout, other.
#[derive(Args, Debug)]
pub struct IncidentCollectArgs {
    /// The job's checkpoint directory (clink run --checkpoint-dir).
    #[arg(long, value_name = "DIR")]
    checkpoint_dir: PathBuf,
    /// The job id (decimal).
    #[arg(long, value_name = "ID", default_value = "1", value_parser = decimal_u64)]
    job: u64,
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
    #[arg(long, value_name = "ID", value_parser = decimal_u64)]
    checkpoint: Option<u64>,
    /// Whether the job's sinks need commit confirmation, when no job manifest says.
    #[arg(long, value_enum, value_name = "yes|no")]
    commit_confirmation: Option<YesNo>,
    /// Only these operators' captures (decimal ids, comma-separated).
    #[arg(long, value_name = "ID,...", value_delimiter = ',', value_parser = operator_id)]
    op: Option<Vec<OperatorId>>,
    /// Only these epochs (comma-separated), or `all` that the capture
    /// directory holds (a scope from the run's start needs every one);
    /// default: the selected checkpoint's, the next unless the selected one
    /// is the job's final, a restored run's first, and each sink's interval.
    #[arg(long, value_name = "N,...|all", value_parser = epoch_selection)]
    epochs: Option<EpochSelection>,
    /// The bundle directory to create; it must not exist.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// At most this many bytes: past it, required evidence refuses the
    /// collection and optional captures are excluded.
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 30, value_parser = clap::value_parser!(u64).range(1..))]
    max_bytes: u64,
    /// At most this many files (the same rule as --max-bytes).
    #[arg(long, value_name = "N", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    max_files: u64,
    /// Give up (refuse) after this many seconds.
    #[arg(long, value_name = "S", default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..))]
    timeout_s: u64,
    /// Print the result (or the refusal and its kind) as JSON.
    #[arg(long)]
    json: bool,
}

/// `--epochs`: `all`, or decimal epochs separated by commas.
fn epoch_selection(text: &str) -> Result<EpochSelection, String> {
    if text == "all" {
        return Ok(EpochSelection::All);
    }
    text.split(',').map(decimal_u64).collect::<Result<Vec<u64>, String>>().map(EpochSelection::Only)
}

/// Why a directory named on the command line cannot be collected from, if
/// it cannot: a missing one is a mistyped name, never an empty part.
fn not_a_directory(flag: &str, dir: &Path) -> Option<String> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => None,
        Ok(_) => Some(format!("{flag} {}: not a directory", dir.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Some(format!("{flag} {}: no such directory ({})", dir.display(), who_makes(flag)))
        }
        Err(e) => Some(format!("{flag} {}: {e}", dir.display())),
    }
}

/// What writes the directory behind `flag`, and what to do when the job
/// never had one: the job's own options decide which exist.
fn who_makes(flag: &str) -> &'static str {
    match flag {
        "--ha-dir" => "a job writes it only when run with --ha-dir; leave --ha-dir out for a job run without it",
        "--capture-dir" => {
            "a job records captures only when run with --capture-dir; leave --capture-dir out for a job run \
             without it"
        }
        "--trace-dir" => {
            "a job writes protocol traces only where CLINK_PROTOCOL_TRACE_DIR pointed when it ran; leave \
             --trace-dir out for a job run without it"
        }
        _ => "name the directory the job's clink run was given as --checkpoint-dir",
    }
}

pub fn main(args: IncidentCollectArgs) -> Exit {
    let out = Output::new("incident-collect", args.json);
    if std::fs::symlink_metadata(&args.out).is_ok() {
        return out.refuse(format!("--out {}: exists; a bundle is never written over", args.out.display()));
    }
    let named = [
        ("--checkpoint-dir", Some(&args.checkpoint_dir)),
        ("--ha-dir", args.ha_dir.as_ref()),
        ("--capture-dir", args.capture_dir.as_ref()),
        ("--trace-dir", args.trace_dir.as_ref()),
    ];
    for (flag, dir) in named {
        if let Some(why) = dir.and_then(|d| not_a_directory(flag, d)) {
            return out.refuse(why);
        }
    }
    let options = CollectOptions {
        checkpoint_dir: args.checkpoint_dir,
        job: args.job,
        ha_dir: args.ha_dir,
        capture_dir: args.capture_dir,
        trace_dir: args.trace_dir,
        include_state: args.include_state,
        include_captures: args.include_captures,
        checkpoint: args.checkpoint,
        commit_confirmation: args.commit_confirmation.map(|c| c == YesNo::Yes),
        ops: args.op,
        epochs: args.epochs.unwrap_or(EpochSelection::Default),
        out: args.out,
        max_bytes: args.max_bytes,
        max_files: args.max_files,
        timeout_s: args.timeout_s,
    };
    let mut progress = crate::progress::Progress::spinner(args.json, "collecting");
    let collected = collect_observed(&options, &mut progress);
    drop(progress);
    match collected {
        Ok(c) => {
            let doc = json!({
                "format": "clink-collect-report", "version": 1, "result": "published",
                "out": c.out.display().to_string(), "checkpoint": c.checkpoint, "engine_choice": c.engine_choice,
                "files": c.files, "bytes": c.bytes, "epochs": c.epochs, "seconds": c.seconds,
                "absent": c.absent.iter().map(|n| json!({"what": n.what, "why": n.why})).collect::<Vec<_>>(),
            });
            let text = || {
                let mut text = format!(
                    "published {}: checkpoint {} ({}), {}, {} bytes, {}, in {:.2}s",
                    c.out.display(),
                    c.checkpoint,
                    c.engine_choice.map_or("named; no restore rule was known".into(), |e| format!("engine choice {e}")),
                    count(c.files as usize, "file", "files"),
                    c.bytes,
                    count(c.epochs, "captured epoch", "captured epochs"),
                    c.seconds
                );
                for note in &c.absent {
                    text.push_str(&format!("\n  absent: {}: {}", note.what, note.why));
                }
                text
            };
            out.report(doc, text, Exit::Passed)
        }
        Err(r) => {
            let doc = json!({
                "format": "clink-collect-report", "version": 1, "result": "refused",
                "kind": r.kind.as_str(), "reason": r.reason,
                "next_action": r.kind.advice(),
            });
            if args.json {
                println!("{doc}");
            } else {
                eprintln!("clink incident-collect: {r}");
            }
            Exit::Failed
        }
    }
}
