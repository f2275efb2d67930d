//! The source subtask: reads its input, asks for checkpoints, and at each
//! trigger snapshots its position, acks and emits the barrier.

use std::num::NonZeroU64;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use crate::checkpoint::markers::CheckpointKind;
use crate::fault::{fails, kill_point, FaultPoint};
use crate::operators::{Source, SourceItem};
use crate::trace_event;

use super::super::frames::{Element, ToCoordinator, ToTask};
use super::super::gates::OutputGate;
use super::{TaskContext, TaskExit, WORKER_ID};

/// How the source asks for checkpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceTriggers {
    /// Ask for a checkpoint after this many records.
    pub every_records: Option<NonZeroU64>,
    /// Take a savepoint and stop once the watermark reaches this.
    pub stop_at_watermark: Option<i64>,
    /// Emit at most this many records per second (unpaced when `None`).
    pub records_per_second: Option<NonZeroU64>,
}

/// Holds a source to a rate: after each batch of records it sleeps until the
/// wall clock catches up with the records emitted.
struct Pacer {
    rate: NonZeroU64,
    start: Instant,
    records: u64,
}

impl Pacer {
    /// The time to wait before the next record, if the source is ahead.
    fn ahead_by(&mut self) -> Option<Duration> {
        self.records += 1;
        if !self.records.is_multiple_of(16) {
            return None;
        }
        let due = self.start + Duration::from_secs_f64(self.records as f64 / self.rate.get() as f64);
        due.checked_duration_since(Instant::now())
    }
}

pub fn run(
    cx: TaskContext,
    mut source: Box<dyn Source>,
    out: OutputGate,
    control: Receiver<ToTask>,
    triggers: SourceTriggers,
) {
    cx.place();
    let pacer = triggers.records_per_second.map(|rate| Pacer { rate, start: Instant::now(), records: 0 });
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
            if polled.is_multiple_of(CONTROL_POLL_RECORDS) {
                self.poll_control(source)?;
            }
            if let Some(n) = self.triggers.every_records {
                if self.records_since_checkpoint >= n.get() {
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
                SourceItem::Idle => {
                    self.out.flush()?;
                    self.poll_control(source)?;
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
            ToTask::CommitCheckpoint { checkpoint } => {
                Err(TaskExit::violation(format!("the source was sent the commit of checkpoint {checkpoint}")))
            }
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
    /// A position snapshot that did not become durable fails the source: no
    /// DeliverBarrier, no ack and no barrier (the restart budget decides).
    fn checkpoint(&mut self, source: &mut dyn Source, checkpoint: u64, kind: CheckpointKind) -> Result<(), TaskExit> {
        let slots = source.snapshot()?;
        let header = self.cx.header(checkpoint);
        let written = if fails(FaultPoint::SourceSnapshotFails, checkpoint) {
            Err("injected snapshot failure".to_string())
        } else {
            self.cx.backend.write(&self.cx.participant, &header, &slots).map(|_| ()).map_err(|e| e.to_string())
        };
        if let Err(e) = written {
            return Err(TaskExit::Failed(format!("the position snapshot of checkpoint {checkpoint}: {e}")));
        }
        // The line follows the durable write, so it never claims a position
        // snapshot that a kill or an I/O error kept off the disk.
        trace_event!(
            DeliverBarrier,
            job = self.cx.job,
            ckpt = checkpoint,
            epoch = self.cx.epoch,
            worker = WORKER_ID,
            fenced = false
        );
        kill_point(FaultPoint::SourceAfterPositionSnapshot, checkpoint);
        self.cx.ack(checkpoint, None)?;
        self.out.broadcast(Element::Barrier { checkpoint, kind })?;
        self.out.flush()?;
        self.records_since_checkpoint = 0;
        Ok(())
    }
}
