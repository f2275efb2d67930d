//! The subtasks: one thread each, running a source, a transform or a sink
//! through the protocol's steps ([`source`], [`transform`], [`sink`]).
//!
//! A subtask talks to the coordinator only through frames. It snapshots at its
//! aligned barrier and acks only once the snapshot is durable; a sink prepares
//! (seals its staged file) before that snapshot and commits only on the
//! coordinator's `CommitCheckpoint`. Fault points and trace events sit at each
//! of these steps, in the order `engine/PROTOCOL.md` gives. This module holds
//! what every kind of subtask shares: its context, its ack, its end.

pub mod sink;
pub mod source;
pub mod transform;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crossbeam_channel::Sender;

use crate::capture::EpochRecorder;
use crate::checkpoint::snapshot::SnapshotHeader;
use crate::checkpoint::{FileStateBackend, StateSlots};
use crate::event::Event;
use crate::job::PlannedOperator;
use crate::operators::{Environment, OperatorError, OperatorKind};
use crate::timers::Clock;
use crate::trace_event;

use super::frames::ToCoordinator;
use super::gates::Disconnected;

/// The id of the one worker that hosts every subtask of this process.
pub const WORKER_ID: u64 = 1;

/// What every subtask knows about itself.
pub struct TaskContext {
    pub task: usize,
    pub job: u64,
    pub participant: String,
    pub operator: PlannedOperator,
    pub subtask: u32,
    pub to_coordinator: Sender<ToCoordinator>,
    pub cancel: Arc<AtomicBool>,
    pub backend: FileStateBackend,
    pub restored: Option<StateSlots>,
    pub restore_point: u64,
    /// The run's fencing epoch (1 for a job's first run), stamped on trace lines.
    pub epoch: u64,
    pub env: Environment,
    /// The flight recorder of this subtask, when capture is on.
    pub recorder: Option<EpochRecorder>,
    /// What this subtask is doing, for the coordinator's stall watch.
    pub watch: std::sync::Arc<super::watch::TaskWatch>,
}

/// Why a subtask stopped early.
#[derive(Debug)]
pub enum TaskExit {
    /// Cancelled by the coordinator, or its peers went away: not an error.
    Cancelled,
    Failed(String),
}

impl TaskExit {
    /// Something the protocol never sends arrived: the subtask fails, naming it.
    pub fn violation(what: impl std::fmt::Display) -> TaskExit {
        TaskExit::Failed(format!("protocol invariant broken: {what}"))
    }
}

impl From<Disconnected> for TaskExit {
    fn from(_: Disconnected) -> Self {
        TaskExit::Cancelled
    }
}

impl From<OperatorError> for TaskExit {
    fn from(e: OperatorError) -> Self {
        TaskExit::Failed(e.to_string())
    }
}

impl TaskContext {
    /// Records an event handed to the operator, if the recorder is on.
    #[inline]
    pub(super) fn record(&mut self, event: &Event) {
        if let Some(recorder) = &mut self.recorder {
            recorder.record(event);
        }
    }

    /// Records a row handed to a sink, if the recorder is on, without copying it.
    #[inline]
    pub(super) fn record_row(&mut self, row: &[crate::value::Value]) {
        if let Some(recorder) = &mut self.recorder {
            recorder.record_row(row);
        }
    }

    /// Closes the capture epoch at barrier `epoch`. A recorder that cannot
    /// write stops (with a warning); the job runs on without it.
    pub(super) fn close_epoch(&mut self, epoch: u64) -> Option<crate::capture::recorder::EpochWritten> {
        let recorder = self.recorder.as_mut()?;
        match recorder.finish_epoch(epoch) {
            Ok(written) => Some(written),
            Err(e) => {
                eprintln!("clink: {}: the flight recorder stops: {e}", self.participant);
                self.recorder = None;
                None
            }
        }
    }

    pub(super) fn send(&self, frame: ToCoordinator) -> Result<(), TaskExit> {
        self.to_coordinator.send(frame).map_err(|_| TaskExit::Cancelled)
    }

    pub(super) fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }

    /// The subtask is deployed: where, and what it is (the validator reads
    /// the job's sinks from these lines, not from which sinks acted).
    pub(super) fn place(&self) {
        let kind = self.operator.spec.kind();
        let role = match kind {
            OperatorKind::Source => "source",
            OperatorKind::Transform => "transform",
            OperatorKind::Sink => "sink",
        };
        trace_event!(
            Placement,
            job = self.job,
            sub = &self.participant,
            worker = WORKER_ID,
            source = kind == OperatorKind::Source,
            role = role
        );
    }

    /// Writes the snapshot durably, then acks; the ack never precedes durability.
    pub(super) fn snapshot_and_ack(&self, checkpoint: u64, slots: &StateSlots) -> Result<(), TaskExit> {
        let header = self.header(checkpoint);
        let written = self.backend.write(&self.participant, &header, slots);
        let error = written.err().map(|e| e.to_string());
        self.ack(checkpoint, error)
    }

    pub(super) fn ack(&self, checkpoint: u64, error: Option<String>) -> Result<(), TaskExit> {
        let ok = error.is_none();
        trace_event!(SubtaskAck, job = self.job, sub = &self.participant, ckpt = checkpoint, ok = ok);
        self.send(ToCoordinator::Ack { task: self.task, checkpoint, ok, error })
    }

    pub(super) fn finish(&self, result: Result<(), TaskExit>) {
        self.watch.waits(super::watch::Wait::Ended);
        let frame = match result {
            Ok(()) => ToCoordinator::Finished { task: self.task },
            Err(TaskExit::Cancelled) => return,
            Err(TaskExit::Failed(error)) => ToCoordinator::Failed { task: self.task, error },
        };
        let _ = self.to_coordinator.send(frame);
    }
}

/// The snapshot header of this subtask's snapshot of `checkpoint`.
impl TaskContext {
    pub(super) fn header(&self, checkpoint: u64) -> SnapshotHeader {
        SnapshotHeader { job: self.job, checkpoint, operator: self.operator.spec.id.0, subtask: self.subtask }
    }
}

/// The clock a production transform reads.
pub fn production_clock() -> Clock {
    Clock::Wall
}
