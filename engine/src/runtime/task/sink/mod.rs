//! The sink subtask: writes rows, prepares (seals) at each aligned barrier,
//! snapshots its handles and acks, and commits on the coordinator's word.
//! A commit-confirmed sink's own steps (the open that settles its orphan,
//! the commit's receipt and confirmation) are in [`confirmed`].

mod confirmed;

use crate::capture::spec::CaptureAccount;
use crate::capture::SinkEvidence;
use crate::event::Event;
use crate::fault::{fails, kill_point, FaultPoint};
use crate::operators::{Sink, SinkFamily};
use crate::trace_event;

use super::super::frames::{ToCoordinator, ToTask};
use super::super::gates::{Input, InputGate};
use super::{TaskContext, TaskExit};

/// Whether the sink's family confirms its commits.
fn confirms(sink: &dyn Sink) -> bool {
    sink.family() == SinkFamily::Confirmed
}

pub fn run(mut cx: TaskContext, mut sink: Box<dyn Sink>, gate: InputGate) {
    cx.place();
    let previous_barrier = cx.restore_point;
    let result = SinkTask {
        cx: &mut cx,
        gate,
        previous_barrier,
        last_acked: 0,
        last_committed: 0,
        input_done: false,
        watermark: None,
        held: None,
    }
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
    /// The last watermark received (recorded in the interval evidence).
    watermark: Option<i64>,
    /// An input taken from the gate early and handled next.
    held: Option<Input>,
}

impl SinkTask<'_> {
    fn run(&mut self, sink: &mut dyn Sink) -> Result<(), TaskExit> {
        if confirms(sink) {
            self.open_confirmed(sink)?;
        } else {
            let recommitted = sink.open(self.cx.restored.as_ref())?;
            trace_event!(
                SinkOpens,
                job = self.cx.job,
                sub = &self.cx.participant,
                family = sink.family().as_str(),
                restore = self.cx.restore_point,
                recommitted = recommitted
            );
        }
        loop {
            if self.input_done && self.last_committed >= self.last_acked {
                return Ok(());
            }
            if self.input_done {
                // Only the commit of what it acked can come now.
                self.cx.watch.waits(crate::runtime::watch::Wait::Commit(self.last_acked));
            }
            let input = self.held.take().unwrap_or_else(|| self.gate.next(None));
            match input {
                Input::Record(row) => {
                    self.cx.record_row(&row);
                    sink.write(&row)?
                }
                Input::Watermark { time, idle } => {
                    self.watermark = Some(time);
                    self.cx.record(&Event::Watermark { time, idle })
                }
                Input::Timeout => {}
                Input::Barrier { checkpoint, .. } => {
                    let acked = self.prepare_and_ack(sink, checkpoint)?;
                    // One transaction at a time: a commit-confirmed sink
                    // reads no row of the next interval before its commit
                    // of this one is finished.
                    if acked && confirms(sink) {
                        self.await_commit(sink, checkpoint)?;
                    }
                }
                Input::End | Input::Stop => self.input_done = true,
                Input::Control(ToTask::CommitCheckpoint { checkpoint }) if confirms(sink) => {
                    return Err(TaskExit::violation(format!(
                        "a commit-confirmed sink was sent the commit of checkpoint {checkpoint} with nothing prepared"
                    )))
                }
                Input::Control(ToTask::CommitCheckpoint { checkpoint }) => self.commit(sink, checkpoint)?,
                Input::Control(ToTask::TriggerCheckpoint { checkpoint, .. }) => {
                    return Err(TaskExit::violation(format!("a sink was sent the trigger of checkpoint {checkpoint}")))
                }
                Input::Control(ToTask::Cancel) | Input::Cancelled => return self.cancelled(sink),
                Input::Violation(what) => return Err(TaskExit::violation(what)),
            }
        }
    }

    /// The deployment is torn down: the sink stops, and leaves what it
    /// prepared as it is (the restore point's snapshot, or the in-doubt walk
    /// and the next open, decide it).
    fn cancelled(&mut self, sink: &mut dyn Sink) -> Result<(), TaskExit> {
        // DEFECT close_aborts_prepared: the cancelled sink aborts every handle
        // it holds (deleting staged files; a Kafka sink aborts its transaction).
        #[cfg(any(test, feature = "defects"))]
        abort_held_on_cancel(sink, &self.cx.env.defects, self.last_committed, self.last_acked)?;
        #[cfg(not(any(test, feature = "defects")))]
        let _ = sink;
        Err(TaskExit::Cancelled)
    }

    /// Prepares and acks checkpoint `checkpoint`; whether the ack was ok.
    fn prepare_and_ack(&mut self, sink: &mut dyn Sink, checkpoint: u64) -> Result<bool, TaskExit> {
        kill_point(FaultPoint::SinkBeforePrepare, checkpoint);
        // An at-least-once sink's prepare is its effect (the rows leave for
        // the destination): the interval's input is written first, so the
        // evidence of what was sent survives a death during or after it.
        let written_early = match sink.family() {
            SinkFamily::AtLeastOnce => Some(self.cx.close_epoch(checkpoint)),
            SinkFamily::Recoverable | SinkFamily::Confirmed => None,
        };
        let prepared = sink.prepare(checkpoint)?;
        if prepared.durable {
            self.trace_prepare(&*sink, checkpoint, prepared.staged);
        }
        if prepared.published {
            // The defect's commit at the barrier, recorded where it happened.
            trace_event!(SinkCommit, job = self.cx.job, sub = &self.cx.participant, ckpt = checkpoint);
        }
        kill_point(FaultPoint::SinkAfterPrepare, checkpoint);
        let written = written_early.unwrap_or_else(|| self.cx.close_epoch(checkpoint));
        self.record_interval(sink, checkpoint, written);
        self.last_acked = checkpoint;
        let written = if fails(FaultPoint::CheckpointSnapshotFails, checkpoint) {
            Err(format!("injected snapshot failure at checkpoint {checkpoint}"))
        } else {
            let slots = sink.snapshot()?;
            let header = self.cx.header(checkpoint);
            self.cx.backend.write(&self.cx.participant, &header, &slots).map(|_| ()).map_err(|e| e.to_string())
        };
        match written {
            Ok(()) => self.cx.ack(checkpoint, None).map(|()| true),
            Err(error) => {
                // A failed snapshot holds no handle: the interval's staged
                // file (or transaction) goes too.
                sink.abort(checkpoint)?;
                self.cx.ack(checkpoint, Some(error)).map(|()| false)
            }
        }
    }

    /// Writes the interval's capture and the sink's evidence, after the
    /// sink's barrier handling and before its ack.
    fn record_interval(
        &mut self,
        sink: &dyn Sink,
        checkpoint: u64,
        written: Option<crate::capture::recorder::EpochWritten>,
    ) {
        let previous = std::mem::replace(&mut self.previous_barrier, checkpoint);
        let Some(written) = written else {
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
            watermark: Some(crate::capture::spec::BarrierWatermark { last: self.watermark }),
            // The recorder names the run that writes it.
            run: None,
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

/// DEFECT close_aborts_prepared: a cancelled sink aborts every handle it holds
/// (those it prepared after its last commit), deleting their staged files. A
/// correct sink leaves them: the restore point's snapshot may hold one, which
/// the next open re-commits.
#[cfg(any(test, feature = "defects"))]
fn abort_held_on_cancel(
    sink: &mut dyn Sink,
    defects: &crate::defects::Defects,
    last_committed: u64,
    last_acked: u64,
) -> Result<(), TaskExit> {
    if defects.has(crate::defects::Defect::CloseAbortsPrepared) {
        for checkpoint in last_committed + 1..=last_acked {
            sink.abort(checkpoint)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::defects::{Defect, Defects};
    use crate::operators::staged_sink::StagedFileSink;
    use crate::value::Value;

    /// A sink prepares checkpoint 1 and snapshots it; 1 completes (its marker
    /// is durable) but the sink is cancelled before it takes the commit; the
    /// next deploy reopens it from that snapshot, as the restore point.
    fn cancel_before_the_commit_then_reopen(defects: Defects) -> Result<u64, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let out = dir.path().join("out");
        let mut s = StagedFileSink::new(out.clone(), 0, defects.clone());
        s.open(None).map_err(|e| e.to_string())?;
        s.write(&vec![Value::Int(1)]).map_err(|e| e.to_string())?;
        s.prepare(1).map_err(|e| e.to_string())?;
        let snapshot = s.snapshot().map_err(|e| e.to_string())?;
        abort_held_on_cancel(&mut s, &defects, 0, 1).map_err(|e| format!("{e:?}"))?;
        let mut again = StagedFileSink::new(out.clone(), 0, defects);
        let recommitted = again.open(Some(&snapshot)).map_err(|e| e.to_string())?;
        if !out.join("part-0-1").is_file() {
            return Err("the restore point's rows were never published".into());
        }
        Ok(recommitted)
    }

    #[test]
    fn a_cancelled_sink_keeps_the_staged_files_a_reopen_re_commits() {
        assert_eq!(cancel_before_the_commit_then_reopen(Defects::none()), Ok(1));
        let broken = cancel_before_the_commit_then_reopen(Defects::of(&[Defect::CloseAbortsPrepared])).unwrap_err();
        assert!(broken.contains("neither staged nor published"), "{broken}");
    }
}
