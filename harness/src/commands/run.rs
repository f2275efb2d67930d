//! `clink run`: runs a job, resuming from the checkpoint directory when an
//! earlier run of the job left one there.

use std::path::PathBuf;

use clap::Args;
use clink_engine::capture::CaptureOptions;
use clink_engine::defects::Defects;
use clink_engine::job::load_job;
use clink_engine::operators::Environment;
use clink_engine::runtime::{run, RunError, RunOptions, TriggerMode};
use clink_engine::timers::wall_clock_ms;
use clink_engine::{fault, job_manifest, trace};

use super::{refuse, EXIT_FAILED, EXIT_OK};

/// Run a job (or resume it from its checkpoints) until its input's END.
///
/// Fault injection for tests: CLINK_FAULT=<point>@<checkpoint>[,...] kills the
/// process (or fails a snapshot) at a protocol step. Protocol tracing:
/// CLINK_PROTOCOL_TRACE_DIR=<dir>.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// The job graph (JSON, format clink-job version 1).
    #[arg(long, value_name = "FILE")]
    job: PathBuf,
    /// Directory of the source's segment-NNNN.txt files.
    #[arg(long, value_name = "DIR")]
    input_dir: PathBuf,
    /// Sinks publish into <DIR>/<sink uid>/.
    #[arg(long, value_name = "DIR")]
    output_dir: PathBuf,
    /// Markers, RESTORED record and snapshots; running again over it resumes.
    #[arg(long, value_name = "DIR")]
    checkpoint_dir: PathBuf,
    /// Take a checkpoint after every N source records (deterministic).
    #[arg(long, value_name = "N", conflicts_with = "checkpoint_interval_ms")]
    checkpoint_every_records: Option<u64>,
    /// Take a checkpoint every N milliseconds.
    #[arg(long, value_name = "N")]
    checkpoint_interval_ms: Option<u64>,
    /// Once the watermark reaches MS, take a savepoint and stop, keeping state.
    #[arg(long, value_name = "MS", allow_negative_numbers = true)]
    stop_with_savepoint_at: Option<i64>,
    /// In-process restarts a failed checkpoint or subtask may take.
    #[arg(long, value_name = "N", default_value_t = 3)]
    restart_budget: u32,
    /// Completed checkpoints whose snapshots are kept.
    #[arg(long, value_name = "N", default_value_t = 3)]
    retain_checkpoints: u32,
    /// Turn the flight recorder on: per operator, subtask and epoch, the
    /// events handed to the operator, under DIR/op-<id>/subtask-<s>/.
    #[arg(long, value_name = "DIR")]
    capture_dir: Option<PathBuf>,
    /// Records the recorder keeps per operator, subtask and epoch; past it the
    /// epoch is marked truncated.
    #[arg(long, value_name = "N", default_value_t = 100_000, requires = "capture_dir")]
    capture_records: u64,
    /// Captured epochs kept per operator subtask; older ones are removed.
    #[arg(long, value_name = "N", default_value_t = 64, requires = "capture_dir")]
    capture_retain_epochs: u64,
    /// Publish the job's manifest under DIR/jobs/<job>/ while it runs (the
    /// graph and settings an incident collector reads); replaced by its
    /// terminal status when the job ends.
    #[arg(long, value_name = "DIR")]
    ha_dir: Option<PathBuf>,
    /// Pace the source to N records per second (default: as fast as it can).
    #[arg(long, value_name = "N")]
    source_rate: Option<u64>,
    /// No progress lines on standard error.
    #[arg(long)]
    quiet: bool,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

pub fn main(args: RunArgs) -> u8 {
    let job = match load_job(&args.job) {
        Ok(job) => job,
        Err(e) => return refuse(format!("job refused: {e}")),
    };
    if args.source_rate == Some(0) {
        return refuse("--source-rate must be positive");
    }
    if !args.input_dir.is_dir() {
        return refuse(format!("--input-dir {}: not a directory", args.input_dir.display()));
    }
    let defects = match Defects::from_env() {
        Ok(d) => d,
        Err(e) => return refuse(e),
    };
    if !defects.is_empty() {
        eprintln!("clink: WARNING: test-only protocol defects are switched on: {}", defects.names().join(", "));
    }
    if let Err(e) = fault::arm_from_env() {
        return refuse(e);
    }
    if let Err(e) = trace::init_from_env() {
        return refuse(format!("{}: {e}", trace::ENV_VAR));
    }
    if let Err(e) = std::fs::create_dir_all(&args.output_dir) {
        return refuse(format!("--output-dir {}: {e}", args.output_dir.display()));
    }
    let trigger = match (args.checkpoint_every_records, args.checkpoint_interval_ms) {
        (Some(0), _) | (_, Some(0)) => return refuse("checkpoint triggers must be positive"),
        (Some(n), _) => TriggerMode::EveryRecords(n),
        (None, Some(ms)) => TriggerMode::IntervalMs(ms),
        (None, None) => TriggerMode::OnlyFinal,
    };
    let job_id = job.job_id;
    if let Some(ha_dir) = &args.ha_dir {
        if let Err(e) = publish_manifest(ha_dir, &args.job, &job, trigger) {
            return refuse(format!("--ha-dir {}: {e}", ha_dir.display()));
        }
    }
    let options = RunOptions {
        job,
        env: Environment { input_dir: args.input_dir, output_dir: args.output_dir.clone(), defects },
        checkpoint_dir: args.checkpoint_dir,
        trigger,
        stop_with_savepoint_at: args.stop_with_savepoint_at,
        restart_budget: args.restart_budget,
        retain_checkpoints: args.retain_checkpoints,
        progress: !args.quiet,
        source_rate: args.source_rate,
        capture: args.capture_dir.map(|dir| CaptureOptions {
            dir,
            records_bound: args.capture_records,
            retain_epochs: args.capture_retain_epochs,
        }),
    };
    let result = run(options);
    if let Some(ha_dir) = &args.ha_dir {
        let terminal = match &result {
            Ok(s) if s.stopped_with_savepoint => "stopped_with_savepoint",
            Ok(_) => "finished",
            Err(_) => "failed",
        };
        if let Err(e) = job_manifest::retire(ha_dir, job_id, terminal, wall_clock_ms() as u64) {
            eprintln!("clink: --ha-dir {}: cannot record the terminal status: {e}", ha_dir.display());
        }
    }
    match result {
        Ok(summary) => {
            if args.json {
                let json = serde_json::json!({
                    "format": "clink-run-summary",
                    "version": 1,
                    "job": summary.job.to_string(),
                    "restored_from": summary.restored_from,
                    "first_checkpoint": summary.first_checkpoint,
                    "last_completed": summary.last_completed,
                    "completed": summary.completed,
                    "restarts": summary.restarts,
                    "stopped_with_savepoint": summary.stopped_with_savepoint,
                });
                println!("{json}");
            } else {
                let end = if summary.stopped_with_savepoint { "stopped at a savepoint" } else { "finished" };
                println!(
                    "job {} {end}: restored from checkpoint {}, {} checkpoints completed (last {}), {} restarts; output in {}",
                    summary.job,
                    summary.restored_from,
                    summary.completed,
                    summary.last_completed,
                    summary.restarts,
                    args.output_dir.display()
                );
            }
            EXIT_OK
        }
        Err(RunError::Refused(e)) => refuse(e),
        Err(RunError::Failed(e)) => {
            eprintln!("clink: job failed: {e}");
            EXIT_FAILED
        }
    }
}

fn publish_manifest(
    ha_dir: &std::path::Path,
    job_file: &std::path::Path,
    job: &clink_engine::job::JobGraph,
    trigger: TriggerMode,
) -> Result<(), String> {
    let text = std::fs::read(job_file).map_err(|e| e.to_string())?;
    let graph: serde_json::Value = serde_json::from_slice(&text).map_err(|e| e.to_string())?;
    let manifest = job_manifest::JobManifest {
        format: job_manifest::FORMAT.into(),
        version: job_manifest::VERSION,
        job: job.job_id.to_string(),
        name: job.name.clone(),
        graph,
        checkpoint_trigger: match trigger {
            TriggerMode::EveryRecords(n) => format!("every_records:{n}"),
            TriggerMode::IntervalMs(ms) => format!("interval_ms:{ms}"),
            TriggerMode::OnlyFinal => "final_only".into(),
        },
        requires_commit_confirmation: false,
        started_at_ms: wall_clock_ms() as u64,
    };
    job_manifest::publish(ha_dir, &manifest, job.job_id).map_err(|e| e.to_string())
}
