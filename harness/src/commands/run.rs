//! `clink run`: runs a job, resuming from the checkpoint directory when an
//! earlier run of the job left one there.

use std::num::{NonZeroU32, NonZeroU64};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use clink_basics::exit::Exit;
use clink_connectors::clickhouse::Endpoint;
use clink_engine::capture::CaptureOptions;
use clink_engine::defects::Defects;
use clink_engine::job::{parse_job, JobGraph, MAX_JOB_BYTES};
use clink_engine::operators::{segment_source, Connections, Environment};
use clink_engine::runtime::{Coordinator, RestoreFrom, RunError, RunOptions, TriggerMode};
use clink_engine::timers::wall_clock_ms;
use clink_engine::{fault, job_manifest, trace};
use serde_json::json;

use super::Output;

/// Run a job (or resume it from its checkpoints) until its input's END.
///
/// Everything is checked before anything is written: the job, its whole
/// input, the options, and what it restores from. A restore (from the
/// checkpoint directory's own history, or from a dataset with
/// --restore-from-dir) whose state the job would leave behind (an operator
/// that holds state is gone, or its uid changed) is refused, naming the
/// operator, unless --allow-non-restored-state drops that state. A running
/// job takes a savepoint on request (`clink savepoint`) and stops on
/// request (`clink stop`). Fault injection for tests:
/// CLINK_FAULT=<point>@<checkpoint>[,...] kills the process (or fails a
/// snapshot) at a protocol step. Protocol tracing: CLINK_PROTOCOL_TRACE_DIR=<dir>.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// The job graph (JSON, format clink-job version 1).
    #[arg(long, value_name = "FILE")]
    job: PathBuf,
    /// Directory of a segment_source's segment-NNNN.txt files.
    #[arg(long, value_name = "DIR")]
    input_dir: Option<PathBuf>,
    /// The Kafka brokers a kafka_source reads (HOST:PORT[,HOST:PORT...]).
    #[arg(long, value_name = "HOSTS", env = "CLINK_KAFKA_BOOTSTRAP")]
    kafka_bootstrap: Option<String>,
    /// The ClickHouse server a clickhouse_sink writes (HOST:PORT of its HTTP
    /// interface, or an http:// URL).
    #[arg(long, value_name = "ADDRESS", env = "CLINK_CLICKHOUSE_HTTP")]
    clickhouse: Option<String>,
    /// The ClickHouse user (default: the server's default user).
    #[arg(long, value_name = "USER", requires = "clickhouse")]
    clickhouse_user: Option<String>,
    /// The environment variable holding the ClickHouse user's password.
    #[arg(long, value_name = "VAR", requires = "clickhouse")]
    clickhouse_password_env: Option<String>,
    /// Sinks publish into <DIR>/<sink uid>/.
    #[arg(long, value_name = "DIR")]
    output_dir: PathBuf,
    /// Markers, RESTORED record and snapshots; running again over it resumes.
    #[arg(long, value_name = "DIR")]
    checkpoint_dir: PathBuf,
    /// Where the participants' state lives: file:///ABS/PATH or
    /// rocksdb:///ABS/PATH (default: files under the checkpoint directory).
    /// A resume must name the same root its checkpoints were written with.
    #[arg(long, value_name = "URL")]
    state: Option<String>,
    /// Take a checkpoint after every N source records (deterministic).
    #[arg(long, value_name = "N", conflicts_with = "checkpoint_interval_ms")]
    checkpoint_every_records: Option<NonZeroU64>,
    /// Take a checkpoint every N milliseconds.
    #[arg(long, value_name = "N")]
    checkpoint_interval_ms: Option<NonZeroU64>,
    /// Once the watermark reaches MS, take a savepoint and stop, keeping state.
    #[arg(long, value_name = "MS", allow_negative_numbers = true)]
    stop_with_savepoint_at: Option<i64>,
    /// In-process restarts a failed checkpoint or subtask may take.
    #[arg(long, value_name = "N", default_value_t = 3)]
    restart_budget: u32,
    /// Completed checkpoints whose snapshots are kept (at least 1).
    #[arg(long, value_name = "N", default_value = "3")]
    retain_checkpoints: NonZeroU32,
    /// Turn the flight recorder on: per operator, subtask and epoch, the
    /// events handed to the operator, under DIR/op-<id>/subtask-<s>/.
    #[arg(long, value_name = "DIR")]
    capture_dir: Option<PathBuf>,
    /// Records the recorder keeps per operator, subtask and epoch; past it the
    /// epoch is marked truncated.
    #[arg(long, value_name = "N", default_value_t = 100_000, requires = "capture_dir")]
    capture_records: u64,
    /// Captured epochs kept per operator subtask, counted back from the
    /// newest completed checkpoint (epochs closed after it are kept too);
    /// older ones are removed. Default: as many as --retain-checkpoints. The run keeps the snapshot
    /// every kept epoch replays from (N + 1 checkpoints where that is more
    /// than --retain-checkpoints), so every captured epoch stays replayable.
    #[arg(long, value_name = "N", requires = "capture_dir", value_parser = clap::value_parser!(u64).range(1..))]
    capture_retain_epochs: Option<u64>,
    /// Publish the job's manifest under DIR/jobs/<job>/ while it runs (the
    /// graph and settings an incident collector reads); replaced by its
    /// terminal status when the job ends.
    #[arg(long, value_name = "DIR")]
    ha_dir: Option<PathBuf>,
    /// Pace the source to N records per second (default: as fast as it can).
    #[arg(long, value_name = "N")]
    source_rate: Option<NonZeroU64>,
    /// At the end of the input available so far (before END), wait for new
    /// segments instead of stopping with a savepoint. Publish segments whole
    /// (write another name, then rename); `clink stop` ends the wait.
    #[arg(long)]
    follow_input: bool,
    /// Restore from this checkpoint dataset (`clink checkpoint export`)
    /// instead of from --checkpoint-dir's history, which must hold nothing of
    /// the job; the dataset is verified first and imported, so a killed run
    /// resumes from it too.
    #[arg(long, value_name = "DIR", requires = "restore_from_checkpoint_id")]
    restore_from_dir: Option<PathBuf>,
    /// The checkpoint of --restore-from-dir to restore (the one it holds).
    #[arg(long, value_name = "ID", requires = "restore_from_dir", value_parser = super::decimal_u64)]
    restore_from_checkpoint_id: Option<u64>,
    /// Drop the state of an operator the job no longer has, or whose uid
    /// changed, instead of refusing the restore (the operator starts empty).
    #[arg(long)]
    allow_non_restored_state: bool,
    /// Run a segment_source job whose --input-dir holds no segment (it
    /// reads nothing and stops); refused without this, as a wrong directory
    /// is the likelier cause.
    #[arg(long)]
    allow_empty_input: bool,
    /// Fail the job (exit 1) when nothing has moved for S seconds while
    /// something is owed: a checkpoint in flight, a source's request, a
    /// subtask waiting on the job (a barrier's alignment, a commit, room
    /// downstream); what each subtask waits on is printed. A job idle for
    /// want of input is never stalled.
    #[arg(long, value_name = "S", default_value_t = clink_engine::runtime::DEFAULT_STALL_AFTER_S)]
    stall_after_s: NonZeroU64,
    /// Write into output another lineage of this job already committed to
    /// (an earlier run over another, or an emptied, checkpoint directory):
    /// a Kafka sink's transactional ids that committed another lineage's
    /// transactions are refused without it, since the run would write that
    /// output again. A restore from a dataset (--restore-from-dir) accepts it.
    #[arg(long)]
    allow_other_lineage: bool,
    /// No progress lines on standard error.
    #[arg(long)]
    quiet: bool,
    /// Print the summary (or the refusal) as JSON.
    #[arg(long)]
    json: bool,
}

/// The external systems named on the command line.
fn connections(args: &RunArgs) -> Result<Connections, String> {
    let clickhouse = match &args.clickhouse {
        None => None,
        Some(address) => {
            let mut endpoint = Endpoint::parse(address).map_err(|e| format!("--clickhouse: {e}"))?;
            endpoint.user = args.clickhouse_user.clone();
            if let Some(var) = &args.clickhouse_password_env {
                let password = std::env::var(var)
                    .map_err(|_| format!("--clickhouse-password-env: the variable {var} is not set"))?;
                endpoint.password = Some(password);
            }
            Some(endpoint)
        }
    };
    Ok(Connections { kafka_bootstrap: args.kafka_bootstrap.clone(), clickhouse })
}

pub fn main(args: RunArgs) -> Exit {
    let out = Output::new("run", args.json);
    // The job file is read once: the graph is planned from these bytes, and
    // the HA manifest publishes the same bytes.
    let text = match clink_basics::files::read_bounded_text(&args.job, MAX_JOB_BYTES) {
        Ok(text) => text,
        Err(e) => return out.refuse(format!("job refused: {}: cannot read: {e}", args.job.display())),
    };
    let job = match parse_job(&text) {
        Ok(job) => job,
        Err(e) => return out.refuse(format!("job refused: {}: {e}", args.job.display())),
    };
    if let Err(why) = check_input(&args, &job) {
        return out.refuse(why);
    }
    let state = match args.state.as_deref().map(clink_engine::checkpoint::parse_state_flag).transpose() {
        Ok(state) => state.unwrap_or_default(),
        Err(why) => return out.refuse(why),
    };
    let connections = match connections(&args) {
        Ok(c) => c,
        Err(e) => return out.refuse(e),
    };
    let defects = match Defects::from_env() {
        Ok(d) => d,
        Err(e) => return out.refuse(e),
    };
    if !defects.is_empty() {
        eprintln!("clink: WARNING: test-only protocol defects are switched on: {}", defects.names().join(", "));
    }
    if let Err(e) = fault::arm_from_env() {
        return out.refuse(e);
    }
    let trigger = match (args.checkpoint_every_records, args.checkpoint_interval_ms) {
        (Some(n), _) => TriggerMode::EveryRecords(n),
        (None, Some(ms)) => TriggerMode::IntervalMs(ms),
        (None, None) => TriggerMode::OnlyFinal,
    };
    let job_id = job.job_id;
    let manifest = args.ha_dir.as_ref().map(|_| job_manifest_of(&text, &job, trigger));
    let options = RunOptions {
        job,
        env: Environment {
            job: job_id,
            input_dir: args.input_dir.unwrap_or_default(),
            output_dir: args.output_dir.clone(),
            connections,
            defects,
            follow_input: args.follow_input,
            stop: Default::default(),
            imported_checkpoint: None,
            run: None,
            lineage: Default::default(),
        },
        checkpoint_dir: args.checkpoint_dir,
        state,
        trigger,
        stop_with_savepoint_at: args.stop_with_savepoint_at,
        restart_budget: args.restart_budget,
        retain_checkpoints: args.retain_checkpoints,
        progress: !args.quiet,
        source_rate: args.source_rate,
        capture: args.capture_dir.map(|dir| CaptureOptions {
            dir,
            records_bound: args.capture_records,
            retain_epochs: args.capture_retain_epochs.unwrap_or(u64::from(args.retain_checkpoints.get())),
        }),
        restore_from: args
            .restore_from_dir
            .zip(args.restore_from_checkpoint_id)
            .map(|(dataset, checkpoint)| RestoreFrom { dataset, checkpoint }),
        allow_non_restored_state: args.allow_non_restored_state,
        stall_after: Duration::from_secs(args.stall_after_s.get()),
        allow_other_lineage: args.allow_other_lineage,
        // Published by the run once it holds the checkpoint directory, naming it.
        job_manifest: args.ha_dir.clone().zip(manifest),
    };
    // Every check (the whole input included) before the first write.
    let coordinator = match Coordinator::start(options) {
        Ok(c) => c,
        Err(RunError::Failed(e) | RunError::Stalled(e)) => return out.stop(Exit::Failed, e),
        Err(e) => return out.refuse(e),
    };
    if let Err(e) = trace::init_from_env() {
        return out.refuse(format!("{}: {e}", trace::ENV_VAR));
    }
    if let Err(e) = std::fs::create_dir_all(&args.output_dir) {
        return out.refuse(format!("--output-dir {}: {e}", args.output_dir.display()));
    }
    let result = coordinator.run();
    if let Some(ha_dir) = &args.ha_dir {
        retire(ha_dir, job_id, &result);
    }
    match result {
        Ok(summary) => {
            let doc = json!({
                "format": "clink-run-summary",
                "version": 1,
                "job": summary.job.to_string(),
                "clink": clink_engine::defects::build_description(),
                "restored_from": summary.restored_from,
                "first_checkpoint": summary.first_checkpoint,
                "last_completed": summary.last_completed,
                "completed": summary.completed,
                "restarts": summary.restarts,
                "stopped_with_savepoint": summary.stopped_with_savepoint,
            });
            let text = || {
                let end = if summary.stopped_with_savepoint { "stopped at a savepoint" } else { "finished" };
                format!(
                    "job {} {end}: restored from checkpoint {}, {} checkpoints completed (last {}), {} restarts; output in {}",
                    summary.job,
                    summary.restored_from,
                    summary.completed,
                    summary.last_completed,
                    summary.restarts,
                    args.output_dir.display()
                )
            };
            out.report(doc, text, Exit::Passed)
        }
        Err(RunError::Refused(e)) => out.refuse(e),
        Err(RunError::Failed(e)) => out.stop(Exit::Failed, format!("job failed: {e}")),
        Err(RunError::Stalled(e)) => out.stop(Exit::Failed, format!("job failed: {e}")),
    }
}

/// The input a segment_source job reads: --input-dir given, an existing
/// directory, and (unless the run follows it or was told otherwise) holding
/// at least one segment file.
fn check_input(args: &RunArgs, job: &JobGraph) -> Result<(), String> {
    let reads_segments = job.operators.iter().any(|o| o.spec.type_name == segment_source::TYPE);
    let Some(dir) = &args.input_dir else {
        return match reads_segments {
            true => Err("--input-dir is required: the job has a segment_source".into()),
            false => Ok(()),
        };
    };
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!("--input-dir {}: no such directory", dir.display()))
        }
        Err(e) => return Err(format!("--input-dir {}: {e}", dir.display())),
        Ok(m) if !m.is_dir() => return Err(format!("--input-dir {}: not a directory", dir.display())),
        Ok(_) => {}
    }
    if !reads_segments || args.follow_input || args.allow_empty_input {
        return Ok(());
    }
    let segments = segment_source::list_segments(dir).map_err(|e| format!("--input-dir {}: {e}", dir.display()))?;
    if segments.is_empty() {
        return Err(format!(
            "--input-dir {}: holds no segment file (segment-NNNN.txt): the job would read nothing; \
             make input with `clink gen-input`, or give --allow-empty-input",
            dir.display()
        ));
    }
    Ok(())
}

fn job_manifest_of(text: &str, job: &JobGraph, trigger: TriggerMode) -> job_manifest::JobManifest {
    job_manifest::JobManifest {
        format: job_manifest::FORMAT.into(),
        version: job_manifest::VERSION_UNIDENTIFIED,
        job: job.job_id.to_string(),
        name: job.name.clone(),
        // The bytes parsed as a job above, so they are JSON.
        graph: serde_json::from_str(text).unwrap_or_default(),
        checkpoint_trigger: match trigger {
            TriggerMode::EveryRecords(n) => format!("every_records:{n}"),
            TriggerMode::IntervalMs(ms) => format!("interval_ms:{ms}"),
            TriggerMode::OnlyFinal => "final_only".into(),
        },
        requires_commit_confirmation: job.requires_commit_confirmation(),
        started_at_ms: wall_clock_ms() as u64,
        run: None,
    }
}

/// Replaces the job's manifest with its terminal status.
fn retire(ha_dir: &Path, job: u64, result: &Result<clink_engine::runtime::RunSummary, RunError>) {
    let terminal = match result {
        Ok(s) if s.stopped_with_savepoint => "stopped_with_savepoint",
        Ok(_) => "finished",
        Err(_) => "failed",
    };
    if let Err(e) = job_manifest::retire(ha_dir, job, terminal, wall_clock_ms() as u64) {
        eprintln!("clink: --ha-dir {}: cannot record the terminal status: {e}", ha_dir.display());
    }
}
