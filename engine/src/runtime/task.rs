//! The subtasks: one thread each, running a source, a transform or a sink
//! through the protocol's steps.
//!
//! A subtask talks to the coordinator only through frames. It snapshots at its
//! aligned barrier and acks only once the snapshot is durable; a sink prepares
//! (seals its staged file) before that snapshot and commits only on the
//! coordinator's `CommitCheckpoint`. Fault points and trace events sit at each
//! of these steps, in the order `engine/PROTOCOL.md` gives.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use crate::capture::spec::CaptureAccount;
use crate::capture::{EpochRecorder, SinkEvidence};
use crate::checkpoint::markers::CheckpointKind;
use crate::checkpoint::snapshot::SnapshotHeader;
use crate::checkpoint::{FileStateBackend, StateSlots};
use crate::fault::{fails, kill_point, FaultPoint};
use crate::job::PlannedOperator;
use crate::operators::driver::{Driver, Event};
use crate::operators::{Environment, OperatorError, Sink, Source, SourceItem};
use crate::timers::{wall_clock_ms, Clock};
use crate::trace_event;

use super::frames::{Element, ToCoordinator, ToTask};
use super::gates::{Disconnected, Input, InputGate, OutputGate};

/// The id of the one worker that hosts every subtask of this process.
pub const WORKER_ID: u64 = 1;

/// How the source asks for checkpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceTriggers {
    /// Ask for a checkpoint after this many records.
    pub every_records: Option<u64>,
    /// Take a savepoint and stop once the watermark reaches this.
    pub stop_at_watermark: Option<i64>,
    /// Emit at most this many records per second (unpaced when `None`).
    pub records_per_second: Option<u64>,
}

/// Holds a source to a rate: after each batch of records it sleeps until the
/// wall clock catches up with the records emitted.
struct Pacer {
    rate: u64,
    start: Instant,
    records: u64,
}

impl Pacer {
    /// The time to wait before the next record, if the source is ahead.
    fn ahead_by(&mut self) -> Option<Duration> {
        self.records += 1;
        if self.records % 16 != 0 {
            return None;
        }
        let due = self.start + Duration::from_secs_f64(self.records as f64 / self.rate as f64);
        due.checked_duration_since(Instant::now())
    }
}

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
    pub env: Environment,
    /// The flight recorder of this subtask, when capture is on.
    pub recorder: Option<EpochRecorder>,
}

/// Why a subtask stopped early.
#[derive(Debug)]
pub enum TaskExit {
    /// Cancelled by the coordinator, or its peers went away: not an error.
    Cancelled,
    Failed(String),
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
    fn record(&mut self, event: &Event) {
        if let Some(recorder) = &mut self.recorder {
            recorder.record(event);
        }
    }

    /// Closes the capture epoch at barrier `epoch`. A recorder that cannot
    /// write stops (with a warning); the job runs on without it.
    fn close_epoch(&mut self, epoch: u64) -> Option<crate::capture::recorder::EpochWritten> {
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

    fn send(&self, frame: ToCoordinator) -> Result<(), TaskExit> {
        self.to_coordinator.send(frame).map_err(|_| TaskExit::Cancelled)
    }

    fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }

    fn place(&self, is_source: bool) {
        trace_event!(Placement, job = self.job, sub = &self.participant, worker = WORKER_ID, source = is_source);
    }

    /// Writes the snapshot durably, then acks; the ack never precedes durability.
    fn snapshot_and_ack(&self, checkpoint: u64, slots: &StateSlots) -> Result<(), TaskExit> {
        let header =
            SnapshotHeader { job: self.job, checkpoint, operator: self.operator.spec.id.0, subtask: self.subtask };
        let written = self.backend.write(&self.participant, &header, slots);
        let error = written.err().map(|e| e.to_string());
        self.ack(checkpoint, error)
    }

    fn ack(&self, checkpoint: u64, error: Option<String>) -> Result<(), TaskExit> {
        let ok = error.is_none();
        trace_event!(SubtaskAck, job = self.job, sub = &self.participant, ckpt = checkpoint, ok = ok);
        self.send(ToCoordinator::Ack { task: self.task, checkpoint, ok, error })
    }

    fn finish(&self, result: Result<(), TaskExit>) {
        let frame = match result {
            Ok(()) => ToCoordinator::Finished { task: self.task },
            Err(TaskExit::Cancelled) => return,
            Err(TaskExit::Failed(error)) => ToCoordinator::Failed { task: self.task, error },
        };
        let _ = self.to_coordinator.send(frame);
    }
}

pub fn run_source(
    cx: TaskContext,
    mut source: Box<dyn Source>,
    out: OutputGate,
    control: Receiver<ToTask>,
    triggers: SourceTriggers,
) {
    cx.place(true);
    let pacer = triggers.records_per_second.map(|rate| Pacer { rate: rate.max(1), start: Instant::now(), records: 0 });
    let result = SourceTask { cx: &cx, out, control, triggers, pacer, records_since_checkpoint: 0 }.run(&mut *source);
    cx.finish(result);
}

struct SourceTask<'a> {
    cx: &'a TaskContext,
    out: OutputGate,
    control: Receiver<ToTask>,
    triggers: SourceTriggers,
    pacer: Option<Pacer>,
    records_since_checkpoint: u64,
}

/// How often the source looks at its control frames between records.
const CONTROL_POLL_RECORDS: u64 = 64;

impl SourceTask<'_> {
    fn run(&mut self, source: &mut dyn Source) -> Result<(), TaskExit> {
        source.restore(self.cx.restored.as_ref())?;
        if let Some(watermark) = source.restored_watermark() {
            self.out.broadcast(Element::Watermark { time: watermark, idle: false })?;
        }
        let mut polled = 0u64;
        loop {
            polled += 1;
            if polled % CONTROL_POLL_RECORDS == 0 {
                self.poll_control(source)?;
            }
            if let Some(n) = self.triggers.every_records {
                if self.records_since_checkpoint >= n {
                    self.request_checkpoint(source, CheckpointKind::Periodic)?;
                }
            }
            match source.next_item()? {
                SourceItem::Record(row) => {
                    self.out.emit(row)?;
                    self.records_since_checkpoint += 1;
                    if let Some(wait) = self.pacer.as_mut().and_then(Pacer::ahead_by) {
                        self.out.flush()?;
                        std::thread::sleep(wait);
                    }
                }
                SourceItem::Watermark(time) => {
                    self.out.broadcast(Element::Watermark { time, idle: false })?;
                    if self.triggers.stop_at_watermark.is_some_and(|at| time >= at) {
                        self.request_checkpoint(source, CheckpointKind::Savepoint)?;
                        return self.close(Element::Stop);
                    }
                }
                SourceItem::End => {
                    self.out.broadcast(Element::Watermark { time: i64::MAX, idle: false })?;
                    self.request_checkpoint(source, CheckpointKind::Final)?;
                    return self.close(Element::End);
                }
                SourceItem::Exhausted => {
                    self.request_checkpoint(source, CheckpointKind::Savepoint)?;
                    return self.close(Element::Stop);
                }
            }
        }
    }

    fn close(&mut self, last: Element) -> Result<(), TaskExit> {
        self.out.broadcast(last)?;
        self.out.flush()?;
        Ok(())
    }

    /// Handles the control frames that are waiting, without blocking.
    fn poll_control(&mut self, source: &mut dyn Source) -> Result<(), TaskExit> {
        while let Ok(frame) = self.control.try_recv() {
            self.on_control(source, frame)?;
        }
        if self.cx.cancelled() {
            return Err(TaskExit::Cancelled);
        }
        Ok(())
    }

    /// Returns the checkpoint a trigger started, if the frame was one.
    fn on_control(&mut self, source: &mut dyn Source, frame: ToTask) -> Result<Option<CheckpointKind>, TaskExit> {
        match frame {
            ToTask::TriggerCheckpoint { checkpoint, kind } => {
                self.checkpoint(source, checkpoint, kind)?;
                Ok(Some(kind))
            }
            ToTask::CommitCheckpoint { .. } => Ok(None),
            ToTask::Cancel => Err(TaskExit::Cancelled),
        }
    }

    /// Asks the coordinator for a checkpoint and runs triggers until one of
    /// the requested kind has been taken.
    fn request_checkpoint(&mut self, source: &mut dyn Source, kind: CheckpointKind) -> Result<(), TaskExit> {
        self.out.flush()?;
        self.cx.send(ToCoordinator::RequestCheckpoint { kind })?;
        loop {
            let frame = self.control.recv().map_err(|_| TaskExit::Cancelled)?;
            if self.on_control(source, frame)? == Some(kind) {
                return Ok(());
            }
        }
    }

    /// The source's step of checkpoint `c`: position snapshot, ack, barrier.
    fn checkpoint(&mut self, source: &mut dyn Source, checkpoint: u64, kind: CheckpointKind) -> Result<(), TaskExit> {
        let slots = source.snapshot()?;
        let header = SnapshotHeader {
            job: self.cx.job,
            checkpoint,
            operator: self.cx.operator.spec.id.0,
            subtask: self.cx.subtask,
        };
        let written = self.cx.backend.write(&self.cx.participant, &header, &slots);
        // The line follows the write, so it never claims a position snapshot
        // that a kill kept off the disk.
        trace_event!(
            DeliverBarrier,
            job = self.cx.job,
            ckpt = checkpoint,
            epoch = 0u64,
            worker = WORKER_ID,
            fenced = false
        );
        kill_point(FaultPoint::SourceAfterPositionSnapshot, checkpoint);
        self.cx.ack(checkpoint, written.err().map(|e| e.to_string()))?;
        self.out.broadcast(Element::Barrier { checkpoint, kind })?;
        self.out.flush()?;
        self.records_since_checkpoint = 0;
        Ok(())
    }
}

pub fn run_transform(mut cx: TaskContext, driver: Driver, gate: InputGate, out: OutputGate) {
    cx.place(false);
    let result = TransformTask { cx: &mut cx, driver, gate, out, emitted: Vec::new() }.run();
    cx.finish(result);
}

struct TransformTask<'a> {
    cx: &'a mut TaskContext,
    driver: Driver,
    gate: InputGate,
    out: OutputGate,
    emitted: Vec<crate::value::Row>,
}

impl TransformTask<'_> {
    fn run(&mut self) -> Result<(), TaskExit> {
        if let Some(slots) = &self.cx.restored {
            self.driver.restore(slots)?;
        }
        loop {
            // Due processing-time timers fire even while data keeps arriving.
            if let Some(due) = self.driver.next_processing_deadline() {
                let now = wall_clock_ms();
                if now >= due {
                    self.deliver(Event::ProcessingTime(now))?;
                }
            }
            let deadline = self.processing_deadline();
            match self.gate.next(deadline) {
                Input::Record(row) => self.deliver(Event::Record(row))?,
                Input::Watermark { time, idle } => {
                    self.deliver(Event::Watermark { time, idle })?;
                    self.out.broadcast(Element::Watermark { time, idle })?;
                    self.out.flush()?;
                }
                Input::Timeout => self.deliver(Event::ProcessingTime(wall_clock_ms()))?,
                Input::Barrier { checkpoint, kind } => {
                    self.out.flush()?;
                    self.cx.close_epoch(checkpoint);
                    let slots = self.driver.snapshot()?;
                    self.cx.snapshot_and_ack(checkpoint, &slots)?;
                    self.out.broadcast(Element::Barrier { checkpoint, kind })?;
                    self.out.flush()?;
                }
                Input::End => return self.close(Element::End),
                Input::Stop => return self.close(Element::Stop),
                Input::Control(ToTask::Cancel) | Input::Cancelled => return Err(TaskExit::Cancelled),
                Input::Control(_) => {}
            }
        }
    }

    fn processing_deadline(&self) -> Option<Instant> {
        let due = self.driver.next_processing_deadline()?;
        let wait = due.saturating_sub(wall_clock_ms()).max(0) as u64;
        Some(Instant::now() + Duration::from_millis(wait))
    }

    /// Hands one event to the operator and routes what it emitted.
    fn deliver(&mut self, event: Event) -> Result<(), TaskExit> {
        self.cx.record(&event);
        self.driver.handle(event, &mut self.emitted)?;
        for row in self.emitted.drain(..) {
            self.out.emit(row)?;
        }
        Ok(())
    }

    fn close(&mut self, last: Element) -> Result<(), TaskExit> {
        self.out.broadcast(last)?;
        self.out.flush()?;
        Ok(())
    }
}

/// The clock a production transform reads.
pub fn production_clock() -> Clock {
    Clock::Wall
}

pub fn run_sink(mut cx: TaskContext, mut sink: Box<dyn Sink>, gate: InputGate) {
    cx.place(false);
    let previous_barrier = cx.restore_point;
    let result = SinkTask { cx: &mut cx, gate, previous_barrier, last_acked: 0, last_committed: 0, input_done: false }
        .run(&mut *sink);
    cx.finish(result);
}

struct SinkTask<'a> {
    cx: &'a mut TaskContext,
    gate: InputGate,
    previous_barrier: u64,
    last_acked: u64,
    last_committed: u64,
    input_done: bool,
}

impl SinkTask<'_> {
    fn run(&mut self, sink: &mut dyn Sink) -> Result<(), TaskExit> {
        let job = self.cx.job;
        let recommitted = sink.open(self.cx.restored.as_ref())?;
        trace_event!(
            SinkOpens,
            job = job,
            sub = &self.cx.participant,
            family = sink.family().as_str(),
            restore = self.cx.restore_point,
            recommitted = recommitted
        );
        loop {
            if self.input_done && self.last_committed >= self.last_acked {
                return Ok(());
            }
            match self.gate.next(None) {
                Input::Record(row) => {
                    if self.cx.recorder.is_some() {
                        self.cx.record(&Event::Record(row.clone()));
                    }
                    sink.write(&row)?
                }
                Input::Watermark { time, idle } => self.cx.record(&Event::Watermark { time, idle }),
                Input::Timeout => {}
                Input::Barrier { checkpoint, .. } => self.prepare_and_ack(sink, checkpoint)?,
                Input::End | Input::Stop => self.input_done = true,
                Input::Control(ToTask::CommitCheckpoint { checkpoint }) => self.commit(sink, checkpoint)?,
                Input::Control(ToTask::TriggerCheckpoint { .. }) => {}
                Input::Control(ToTask::Cancel) | Input::Cancelled => return Err(TaskExit::Cancelled),
            }
        }
    }

    fn prepare_and_ack(&mut self, sink: &mut dyn Sink, checkpoint: u64) -> Result<(), TaskExit> {
        kill_point(FaultPoint::SinkBeforePrepare, checkpoint);
        let prepared = sink.prepare(checkpoint)?;
        if prepared.durable {
            self.trace_prepare(&*sink, checkpoint, prepared.staged);
        }
        if prepared.published {
            // The defect's commit at the barrier, recorded where it happened.
            trace_event!(SinkCommit, job = self.cx.job, sub = &self.cx.participant, ckpt = checkpoint);
        }
        kill_point(FaultPoint::SinkAfterPrepare, checkpoint);
        self.record_interval(sink, checkpoint);
        self.last_acked = checkpoint;
        let written = if fails(FaultPoint::CheckpointSnapshotFails, checkpoint) {
            Err(format!("injected snapshot failure at checkpoint {checkpoint}"))
        } else {
            let slots = sink.snapshot()?;
            let header = SnapshotHeader {
                job: self.cx.job,
                checkpoint,
                operator: self.cx.operator.spec.id.0,
                subtask: self.cx.subtask,
            };
            self.cx.backend.write(&self.cx.participant, &header, &slots).map(|_| ()).map_err(|e| e.to_string())
        };
        match written {
            Ok(()) => self.cx.ack(checkpoint, None),
            Err(error) => {
                // A failed snapshot holds no handle: the interval's staged file goes too.
                sink.abort(checkpoint)?;
                self.cx.ack(checkpoint, Some(error))
            }
        }
    }

    /// Writes the interval's capture and the sink's evidence, after the
    /// sink's barrier handling and before its ack.
    fn record_interval(&mut self, sink: &dyn Sink, checkpoint: u64) {
        let previous = std::mem::replace(&mut self.previous_barrier, checkpoint);
        let Some(written) = self.cx.close_epoch(checkpoint) else {
            return;
        };
        let evidence = SinkEvidence {
            format: crate::capture::spec::SINK_EVIDENCE_FORMAT.into(),
            version: crate::capture::spec::DOC_VERSION,
            job: self.cx.job.to_string(),
            operator: self.cx.operator.spec.id.to_string(),
            uid: self.cx.operator.spec.uid.clone(),
            subtask: self.cx.subtask,
            epoch: checkpoint,
            previous_barrier: previous,
            capture: CaptureAccount {
                file: written.file,
                records: written.true_records,
                events: written.true_events,
                stored_events: written.stored_events,
                truncated: written.truncated,
            },
            sink: sink.evidence(checkpoint),
        };
        if let Some(recorder) = &self.cx.recorder {
            if let Err(e) = recorder.write_sink_evidence(&evidence) {
                eprintln!("clink: {}: cannot write the sink evidence of epoch {checkpoint}: {e}", self.cx.participant);
            }
        }
    }

    /// The seal of a checkpoint's staged file (or of nothing), where it
    /// became durable.
    fn trace_prepare(&self, sink: &dyn Sink, checkpoint: u64, staged: bool) {
        trace_event!(
            SinkPrepare,
            job = self.cx.job,
            sub = &self.cx.participant,
            ckpt = checkpoint,
            family = sink.family().as_str(),
            staged = staged
        );
    }

    fn commit(&mut self, sink: &mut dyn Sink, checkpoint: u64) -> Result<(), TaskExit> {
        let sub = &self.cx.participant;
        trace_event!(DeliverCommit, job = self.cx.job, sub = sub, ckpt = checkpoint, accepted = true);
        kill_point(FaultPoint::SinkBeforeCommit, checkpoint);
        for sealed in sink.commit(checkpoint)? {
            self.trace_prepare(&*sink, sealed, true);
        }
        trace_event!(SinkCommit, job = self.cx.job, sub = sub, ckpt = checkpoint);
        kill_point(FaultPoint::SinkAfterCommit, checkpoint);
        self.last_committed = self.last_committed.max(checkpoint);
        self.cx.send(ToCoordinator::Committed { task: self.cx.task, checkpoint })
    }
}
