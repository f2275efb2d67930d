//! The runtime: deploys a job's subtasks as threads, runs the coordinator's
//! checkpoint and commit protocol over them, and restarts from the restore
//! point after a failure.
//!
//! This module owns the protocol's order of steps (`engine/PROTOCOL.md`). It
//! never chooses a restore point itself: it asks
//! [`restore_point_on_disk`](crate::checkpoint::restore_point_on_disk).

mod coordinator;
mod deploy;
pub mod frames;
pub mod gates;
pub mod output;
pub mod protocol;
pub mod requests;
pub mod task;
pub mod watch;

use std::num::{NonZeroU32, NonZeroU64};
use std::path::PathBuf;

use thiserror::Error;

use crate::job::JobGraph;
use crate::operators::Environment;

pub use coordinator::Coordinator;

/// How checkpoints are triggered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TriggerMode {
    /// The source asks for one after every N records (deterministic).
    EveryRecords(NonZeroU64),
    /// The coordinator triggers one every N milliseconds.
    IntervalMs(NonZeroU64),
    /// Only the final checkpoint (or a savepoint).
    OnlyFinal,
}

#[derive(Debug, Clone)]
pub struct RunOptions {
    pub job: JobGraph,
    pub env: Environment,
    pub checkpoint_dir: PathBuf,
    /// Where the participants' state lives and which backend writes it
    /// (`--state`; the default: files under the checkpoint directory).
    pub state: crate::checkpoint::StateRoot,
    pub trigger: TriggerMode,
    pub stop_with_savepoint_at: Option<i64>,
    /// How many in-process restarts a failure may take before the job fails.
    pub restart_budget: u32,
    /// How many completed checkpoints keep their snapshots.
    pub retain_checkpoints: NonZeroU32,
    /// Print a progress line per completed checkpoint (at most once a second).
    pub progress: bool,
    /// Pace the source to this many records per second.
    pub source_rate: Option<NonZeroU64>,
    /// The flight recorder, when on.
    pub capture: Option<crate::capture::CaptureOptions>,
    /// Restore from a checkpoint dataset (`--restore-from-dir`) instead of
    /// from the checkpoint directory's own history, which must be empty.
    pub restore_from: Option<RestoreFrom>,
    /// Drop the state of operators the job no longer has (or whose uid
    /// changed) instead of refusing the restore.
    pub allow_non_restored_state: bool,
    /// How long nothing may move, while something is owed (a checkpoint in
    /// flight, a request held, a subtask waiting on the job), before the job
    /// is declared stalled and fails (`watch`).
    pub stall_after: std::time::Duration,
    /// Let a sink write where another lineage's committed output is (its
    /// preflight refuses otherwise).
    pub allow_other_lineage: bool,
    /// The job manifest to publish in an HA directory once the run holds the
    /// checkpoint directory, naming the run (`--ha-dir`).
    pub job_manifest: Option<(PathBuf, crate::job_manifest::JobManifest)>,
}

/// The default of [`RunOptions::stall_after`], in seconds: longer than any
/// one step of a healthy job (a snapshot's write, a broker's commit, an
/// INSERT) takes.
pub const DEFAULT_STALL_AFTER_S: NonZeroU64 = NonZeroU64::new(300).unwrap();

/// A checkpoint dataset to restore a new run from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreFrom {
    pub dataset: PathBuf,
    pub checkpoint: u64,
}

/// What a finished run did: the protocol's account of it.
pub type RunSummary = protocol::Progress;

#[derive(Debug, Error)]
pub enum RunError {
    /// The request or its input is refused before anything runs.
    #[error("{0}")]
    Refused(String),
    /// The job ran and failed.
    #[error("{0}")]
    Failed(String),
    /// Nothing moved for the job's stall bound while something was owed:
    /// what each subtask waited on, and the job stopped (a failure).
    #[error("{0}")]
    Stalled(String),
}

/// Runs a job to its end (or its savepoint), resuming from the checkpoint
/// directory when an earlier run left one.
pub fn run(options: RunOptions) -> Result<RunSummary, RunError> {
    Coordinator::start(options)?.run()
}
