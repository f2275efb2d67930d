//! The source subtask: reads its input, asks for checkpoints, and at each
//! trigger snapshots its position, acks and emits the barrier.
//!
//! While a checkpoint it asked for is on its way (the request travels to the
//! coordinator and the trigger back), it reads ahead instead of waiting: the
//! position snapshot is taken where the barrier will stand, and what is read
//! meanwhile is held back and sent after the barrier. What it emits, and
//! where its barriers stand, are those of a source that waited; it only
//! reads sooner. It never holds an end, a stop, an error or the watermark
//! that stops it for a savepoint: those wait, unread by the read-ahead or
//! kept for after the checkpoint, exactly where they were.

use std::num::NonZeroU64;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, TryRecvError};

use crate::checkpoint::markers::CheckpointKind;
use crate::checkpoint::StateSlots;
use crate::fault::{fails, kill_point, FaultPoint};
use crate::operators::{OperatorError, Source, SourceItem};
use crate::trace_event;
use crate::value::Row;

use super::super::frames::{Element, ToCoordinator, ToTask};
use super::super::gates::OutputGate;
use super::super::watch::Wait;
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
    let result = SourceTask { cx: &cx, out, control, triggers, pacer, records_since_checkpoint: 0, pending: None }
        .run(&mut *source);
    cx.finish(result);
}

struct SourceTask<'a> {
    cx: &'a TaskContext,
    out: OutputGate,
    control: Receiver<ToTask>,
    triggers: SourceTriggers,
    pacer: Option<Pacer>,
    records_since_checkpoint: u64,
    /// What the read-ahead read and does not hold (an end, a stop, an error,
    /// the watermark that stops the source): the next item the loop takes.
    pending: Option<Result<SourceItem, OperatorError>>,
}

/// How often the source looks at its control frames between records.
const CONTROL_POLL_RECORDS: u64 = 64;

/// The most records read ahead while a trigger is awaited.
const MAX_READ_AHEAD: u64 = 1 << 14;

/// Where a checkpoint's barrier stands: the source's position now, or the
/// position taken when the source asked for the checkpoint it awaits.
enum At<'s> {
    Now(&'s dyn Source),
    Taken(&'s StateSlots),
}

impl At<'_> {
    fn slots(&self) -> Result<StateSlots, OperatorError> {
        match self {
            At::Now(source) => source.snapshot(),
            At::Taken(slots) => Ok((*slots).clone()),
        }
    }
}

/// What was read while a trigger was awaited, held back until its barrier.
struct ReadAhead {
    held: Vec<Element>,
    records: u64,
    limit: u64,
    /// Something the read-ahead does not hold came: it reads no further.
    stopped: bool,
}

impl ReadAhead {
    fn reading(&self) -> bool {
        !self.stopped && self.records < self.limit
    }
}

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
            let item = match self.pending.take() {
                Some(item) => item?,
                None => source.next_item()?,
            };
            match item {
                SourceItem::Record(row) => self.emit_record(row)?,
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
                    self.cx.watch.waits(Wait::ExternalInput);
                    self.poll_control(source)?;
                }
            }
        }
    }

    fn emit_record(&mut self, row: Row) -> Result<(), TaskExit> {
        self.out.emit(row)?;
        self.records_since_checkpoint += 1;
        if let Some(wait) = self.pacer.as_mut().and_then(Pacer::ahead_by) {
            self.out.flush()?;
            std::thread::sleep(wait);
        }
        Ok(())
    }

    fn close(&mut self, last: Element) -> Result<(), TaskExit> {
        self.out.broadcast(last)?;
        self.out.flush()?;
        Ok(())
    }

    /// Handles the control frames that are waiting, without blocking.
    fn poll_control(&mut self, source: &mut dyn Source) -> Result<(), TaskExit> {
        self.cx.watch.moved();
        while let Ok(frame) = self.control.try_recv() {
            self.on_control(At::Now(source), frame)?;
        }
        if self.cx.cancelled() {
            return Err(TaskExit::Cancelled);
        }
        Ok(())
    }

    /// Returns the checkpoint a trigger started, if the frame was one.
    fn on_control(&mut self, at: At<'_>, frame: ToTask) -> Result<Option<CheckpointKind>, TaskExit> {
        match frame {
            ToTask::TriggerCheckpoint { checkpoint, kind } => {
                self.checkpoint(at.slots()?, checkpoint, kind)?;
                Ok(Some(kind))
            }
            ToTask::CommitCheckpoint { checkpoint } => {
                Err(TaskExit::violation(format!("the source was sent the commit of checkpoint {checkpoint}")))
            }
            ToTask::Cancel => Err(TaskExit::Cancelled),
        }
    }

    /// Asks the coordinator for a checkpoint and runs triggers until one of
    /// the requested kind has been taken, every one at the position where
    /// the source asked; reads ahead meanwhile (see the module's doc) and
    /// sends what it read after the barrier.
    fn request_checkpoint(&mut self, source: &mut dyn Source, kind: CheckpointKind) -> Result<(), TaskExit> {
        self.out.flush()?;
        self.cx.send(ToCoordinator::RequestCheckpoint { kind })?;
        let at = source.snapshot()?;
        let mut ahead = ReadAhead { held: Vec::new(), records: 0, limit: self.read_ahead_limit(kind), stopped: false };
        loop {
            let frame = match self.control.try_recv() {
                Ok(frame) => frame,
                Err(TryRecvError::Disconnected) => return Err(TaskExit::Cancelled),
                Err(TryRecvError::Empty) if ahead.reading() => {
                    self.read_ahead(source, &mut ahead);
                    continue;
                }
                Err(TryRecvError::Empty) => {
                    self.cx.watch.waits(Wait::Trigger(kind));
                    let frame = self.control.recv().map_err(|_| TaskExit::Cancelled)?;
                    self.cx.watch.waits(Wait::Working);
                    frame
                }
            };
            if self.on_control(At::Taken(&at), frame)? == Some(kind) {
                break;
            }
        }
        for element in ahead.held {
            match element {
                Element::Record(row) => self.emit_record(row)?,
                other => self.out.broadcast(other)?,
            }
        }
        Ok(())
    }

    /// How many records may be read ahead while checkpoint `kind` is awaited:
    /// fewer than the records between two checkpoints (so the next request
    /// is where it would have been), none for an end or a savepoint, and
    /// none for a paced source (its pace is its point).
    fn read_ahead_limit(&self, kind: CheckpointKind) -> u64 {
        match (kind, self.triggers.every_records, &self.pacer) {
            (CheckpointKind::Periodic, Some(n), None) => (n.get() - 1).min(MAX_READ_AHEAD),
            _ => 0,
        }
    }

    /// Reads one item ahead: a record or a watermark is held; anything else
    /// stops the read-ahead and waits for the loop.
    fn read_ahead(&mut self, source: &mut dyn Source, ahead: &mut ReadAhead) {
        match source.next_item() {
            Ok(SourceItem::Record(row)) => {
                ahead.held.push(Element::Record(row));
                ahead.records += 1;
            }
            Ok(SourceItem::Watermark(time)) if self.triggers.stop_at_watermark.is_none_or(|at| time < at) => {
                ahead.held.push(Element::Watermark { time, idle: false });
            }
            other => {
                self.pending = Some(other);
                ahead.stopped = true;
            }
        }
    }

    /// The source's step of checkpoint `c`: position snapshot, ack, barrier.
    /// A position snapshot that did not become durable fails the source: no
    /// DeliverBarrier, no ack and no barrier (the restart budget decides).
    fn checkpoint(&mut self, slots: StateSlots, checkpoint: u64, kind: CheckpointKind) -> Result<(), TaskExit> {
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

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;

    use crossbeam_channel::{unbounded, Sender};

    use super::*;
    use crate::checkpoint::{participant_name, CheckpointLayout, FileStateBackend, GENERATION};
    use crate::job::{OperatorSpec, PlannedOperator};
    use crate::operators::segment_source::SegmentSource;
    use crate::operators::Environment;
    use crate::runtime::frames::DataFrame;
    use crate::runtime::gates::{OutputEdge, Route};
    use clink_basics::ids::OperatorId;

    /// A segment source that counts the items read from it, notes the count
    /// at its last position snapshot, and fails its read number `fail_at`.
    struct Counting {
        source: SegmentSource,
        reads: Arc<AtomicU64>,
        at_snapshot: Arc<AtomicU64>,
        fail_at: Option<u64>,
    }

    impl Source for Counting {
        fn restore(&mut self, slots: Option<&StateSlots>) -> Result<(), OperatorError> {
            self.source.restore(slots)
        }
        fn restored_watermark(&self) -> Option<i64> {
            self.source.restored_watermark()
        }
        fn next_item(&mut self) -> Result<SourceItem, OperatorError> {
            let read = self.reads.fetch_add(1, Ordering::Relaxed) + 1;
            if self.fail_at == Some(read) {
                return Err(OperatorError::Input(format!("read {read} fails")));
            }
            self.source.next_item()
        }
        fn snapshot(&self) -> Result<StateSlots, OperatorError> {
            self.at_snapshot.store(self.reads.load(Ordering::Relaxed), Ordering::Relaxed);
            self.source.snapshot()
        }
    }

    fn context(dir: &Path, to_coordinator: Sender<ToCoordinator>) -> TaskContext {
        let spec = OperatorSpec {
            id: OperatorId(1),
            uid: "source".into(),
            type_name: "segment_source".into(),
            params: serde_json::json!({}),
            parallelism: 1,
            descriptor: crate::registry::descriptor("segment_source").unwrap(),
        };
        TaskContext {
            task: 0,
            job: 1,
            participant: participant_name(OperatorId(1), 0),
            operator: PlannedOperator::plan(spec, None).unwrap(),
            subtask: 0,
            to_coordinator,
            cancel: Arc::new(AtomicBool::new(false)),
            backend: FileStateBackend::new(CheckpointLayout::new(dir.join("ck"), 1)),
            restored: None,
            restore_point: 0,
            epoch: 1,
            env: Environment::default(),
            recorder: None,
            watch: crate::runtime::watch::TaskWatch::new(),
        }
    }

    /// The records and watermarks a source restored from checkpoint `c`
    /// goes on with, to its end.
    fn resumed_from(dir: &Path, backend: &FileStateBackend, c: u64) -> Vec<Element> {
        let slots = backend.read(GENERATION, &participant_name(OperatorId(1), 0), c).unwrap().slots;
        let mut source = SegmentSource::new(dir.join("in"));
        source.restore(Some(&slots)).unwrap();
        let mut items = Vec::new();
        loop {
            match source.next_item().unwrap() {
                SourceItem::Record(row) => items.push(Element::Record(row)),
                SourceItem::Watermark(time) => items.push(Element::Watermark { time, idle: false }),
                _ => return items,
            }
        }
    }

    /// What a source task did over three segments of 70 records and 70
    /// watermarks (times 0, 100, ...) and an END, asked to checkpoint every 20
    /// records, its coordinator answering every request 5 ms late.
    struct Ran {
        dir: tempfile::TempDir,
        backend: FileStateBackend,
        stream: Vec<Element>,
        /// How many items the source read past its position snapshots while
        /// triggers travelled.
        read_ahead: u64,
        last_frame: Option<ToCoordinator>,
    }

    fn run_source(stop_at_watermark: Option<i64>, fail_at: Option<u64>) -> Ran {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("in")).unwrap();
        for s in 0..3 {
            let lines: String =
                (0..70).map(|i| format!("E,{},a{},1\nW,{}\n", 100 * (70 * s + i), i % 3, 100 * (70 * s + i))).collect();
            let end = if s == 2 { "END\n" } else { "" };
            std::fs::write(dir.path().join("in").join(format!("segment-{s:04}.txt")), lines + end).unwrap();
        }
        let (to_coordinator, requests) = unbounded();
        let (control_tx, control) = unbounded();
        let (data_tx, data) = unbounded::<DataFrame>();
        let cx = context(dir.path(), to_coordinator);
        let backend = cx.backend.clone();
        let (reads, at_snapshot) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let source = Counting {
            source: SegmentSource::new(dir.path().join("in")),
            reads: reads.clone(),
            at_snapshot: at_snapshot.clone(),
            fail_at,
        };
        let coordinator = std::thread::spawn(move || {
            let (mut next, mut read_ahead) = (1, 0);
            while let Ok(frame) = requests.recv() {
                match frame {
                    ToCoordinator::RequestCheckpoint { kind } => {
                        std::thread::sleep(Duration::from_millis(5));
                        read_ahead += reads.load(Ordering::Relaxed) - at_snapshot.load(Ordering::Relaxed);
                        let _ = control_tx.send(ToTask::TriggerCheckpoint { checkpoint: next, kind });
                        next += 1;
                    }
                    ToCoordinator::Finished { .. } | ToCoordinator::Failed { .. } => return (read_ahead, Some(frame)),
                    _ => {}
                }
            }
            (read_ahead, None)
        });
        let edge = OutputEdge { route: Route::Forward, targets: vec![(data_tx, 0)] };
        let out = OutputGate::new(0, vec![edge], Arc::new(AtomicBool::new(false)));
        let triggers =
            SourceTriggers { every_records: NonZeroU64::new(20), stop_at_watermark, records_per_second: None };
        run(cx, Box::new(source), out, control, triggers);
        let (read_ahead, last_frame) = coordinator.join().unwrap();
        let stream: Vec<Element> = data.try_iter().flat_map(|f| f.elements).collect();
        Ran { dir, backend, stream, read_ahead, last_frame }
    }

    #[test]
    fn reading_ahead_for_a_trigger_moves_no_barrier_and_no_position() {
        let Ran { dir, backend, stream, read_ahead, .. } = run_source(None, None);
        let mut barriers = 0;
        let mut since = 0;
        for (i, element) in stream.iter().enumerate() {
            match element {
                Element::Record(_) => since += 1,
                Element::Barrier { checkpoint, .. } => {
                    barriers += 1;
                    let last = stream[i + 1..].iter().all(|e| !matches!(e, Element::Record(_)));
                    assert!(since == 20 || last, "barrier {checkpoint} after {since} records");
                    since = 0;
                    // Restored there, the source goes on with exactly what
                    // followed (the end's maximal watermark is the task's).
                    let after: Vec<Element> = stream[i + 1..]
                        .iter()
                        .filter(|e| match e {
                            Element::Watermark { time, .. } => *time != i64::MAX,
                            e => matches!(e, Element::Record(_)),
                        })
                        .cloned()
                        .collect();
                    assert_eq!(resumed_from(dir.path(), &backend, *checkpoint), after, "checkpoint {checkpoint}");
                }
                _ => {}
            }
        }
        assert_eq!(barriers, 11, "210 records: 10 periodic checkpoints and the final one");
        assert!(read_ahead > 0, "the source read ahead while it awaited its triggers");
    }

    #[test]
    fn the_watermark_that_stops_the_source_is_never_read_ahead_past() {
        // The savepoint stop is at time 2,500 (the 26th watermark): a
        // read-ahead for checkpoint 1 reaches it and must leave it be.
        let ran = run_source(Some(2_500), None);
        let tail: Vec<&Element> = ran.stream.iter().rev().take(3).collect();
        assert!(
            matches!(
                tail.as_slice(),
                [
                    Element::Stop,
                    Element::Barrier { kind: CheckpointKind::Savepoint, .. },
                    Element::Watermark { time: 2_500, .. }
                ]
            ),
            "{tail:?}"
        );
        let records = ran.stream.iter().filter(|e| matches!(e, Element::Record(_))).count();
        assert_eq!(records, 26, "every record up to the stopping watermark, none after it");
        assert!(ran.read_ahead > 0);
    }

    #[test]
    fn an_error_read_ahead_fails_the_source_after_the_awaited_checkpoint() {
        // Read 45 is the 23rd record, read ahead while checkpoint 1 (after
        // record 20) is awaited: checkpoint 1 is taken, then the source fails.
        let ran = run_source(None, Some(45));
        let barriers: Vec<u64> = ran
            .stream
            .iter()
            .filter_map(|e| match e {
                Element::Barrier { checkpoint, .. } => Some(*checkpoint),
                _ => None,
            })
            .collect();
        assert_eq!(barriers, [1]);
        assert!(
            matches!(&ran.last_frame, Some(ToCoordinator::Failed { error, .. }) if error.contains("read 45 fails")),
            "{:?}",
            ran.last_frame
        );
        // What followed the barrier was buffered, not sent: the source failed
        // as it would have reading the 23rd record after the barrier.
        let records = ran.stream.iter().filter(|e| matches!(e, Element::Record(_))).count();
        assert_eq!(records, 20);
    }
}
