//! A commit-confirmed sink's own steps, in the order `engine/PROTOCOL.md`
//! gives: the open that settles its orphan before it fences, the wait for
//! the commit of the one transaction it holds, and the commit's receipt and
//! confirmation.
//!
//! The durable evidence is written here, never by the sink: the receipt the
//! instant the broker acknowledged a commit (before the next transaction can
//! begin, since beginning it makes the commit's outcome indescribable), and
//! the clearing of the sink's `.unresolved` markers once its open settled
//! them. Replay suppression is armed with the rows of every receipt above
//! the restore point. Nothing here decides an outcome the broker did not report: an
//! orphan it cannot settle fails the open.

use crate::checkpoint::commits::{
    clear_unresolved, list_receipts, list_unresolved, read_receipt, read_unresolved, write_receipt, ProvenBy,
    RowDigest, TxnHandle,
};
use crate::fault::{kill_point, FaultPoint};
use crate::operators::{ConfirmedSink, OrphanSeen, Sink};
use crate::trace_event;

use super::super::super::frames::{ToCoordinator, ToTask};
use super::super::super::gates::Input;
use super::super::TaskExit;
use super::SinkTask;

/// How the open settled its orphan (the `settled` field of `SinkOpens`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Settled {
    /// Its receipt was on disk already.
    Receipt,
    /// The broker says it committed: its receipt is written now.
    Committed,
    /// It was still open, and the open's abort under its identity ended it.
    Aborted,
    /// Aborted before, expired, superseded, or never prepared.
    NotCommitted,
}

impl Settled {
    fn as_str(self) -> &'static str {
        match self {
            Settled::Receipt => "receipt",
            Settled::Committed => "committed",
            Settled::Aborted => "aborted",
            Settled::NotCommitted => "not_committed",
        }
    }
}

fn failed(what: impl std::fmt::Display) -> TaskExit {
    TaskExit::Failed(what.to_string())
}

fn family_of(sink: &mut dyn Sink) -> Result<&mut dyn ConfirmedSink, TaskExit> {
    sink.confirmed().ok_or_else(|| TaskExit::violation("a commit-confirmed sink without its confirmed steps"))
}

impl SinkTask<'_> {
    /// The open, at every restore point (0 included): the orphan named by
    /// the newest unresolved marker above the restore point is described,
    /// then settled (its receipt, an abort under its own identity, or the
    /// broker's word that it committed); only then does `open` fence the id;
    /// then the markers go and suppression arms from the receipts above the
    /// restore point.
    pub(super) fn open_confirmed(&mut self, sink: &mut dyn Sink) -> Result<(), TaskExit> {
        let restore = self.cx.restore_point;
        let layout = self.cx.backend.layout().clone();
        let sub = self.cx.participant.clone();
        let defects = self.cx.env.defects.clone();
        let _ = &defects;
        // DEFECT open_skips_restore_zero: a restart from nothing settles
        // nothing and suppresses nothing.
        #[cfg(any(test, feature = "defects"))]
        let skips = restore == 0 && defects.has(crate::defects::Defect::OpenSkipsRestoreZero);
        #[cfg(not(any(test, feature = "defects")))]
        let skips = false;
        let orphan = match skips {
            true => None,
            false => list_unresolved(&layout, &sub).map_err(failed)?.into_iter().filter(|&c| c > restore).max(),
        };
        // The pre-fence describe, and its fault point, come first; from the
        // settlement to the line the open is one step to the fault injector.
        let described = match orphan {
            Some(o) => {
                let handle = read_unresolved(&layout, &sub, o).map_err(failed)?.handle;
                self.describe_orphan(sink, &handle)?.map(|first| (handle, first))
            }
            None => None,
        };
        crate::fault::unsplit(|| {
            let settled = match described {
                Some((handle, first)) => Some((handle.checkpoint, self.settle_orphan(sink, &handle, first)?)),
                None => None,
            };
            let recommitted = sink.open(self.cx.restored.as_ref())?;
            if !skips {
                clear_unresolved(&layout, &sub).map_err(failed)?;
            }
            let owed = if skips { Vec::new() } else { self.receipted_rows(restore)? };
            family_of(sink)?.suppress(owed);
            let (job, family) = (self.cx.job, sink.family().as_str());
            match settled {
                Some((orphan, settled)) => trace_event!(
                    SinkOpens,
                    job = job,
                    sub = &sub,
                    family = family,
                    restore = restore,
                    recommitted = recommitted,
                    orphan = orphan,
                    settled = settled.as_str()
                ),
                None => trace_event!(
                    SinkOpens,
                    job = job,
                    sub = &sub,
                    family = family,
                    restore = restore,
                    recommitted = recommitted
                ),
            }
            Ok(())
        })
    }

    /// The pre-fence describe: what the broker says of the orphan before
    /// anything is sent that ends it. `None`: the open fences blind (a
    /// defect's open only).
    fn describe_orphan(&mut self, sink: &mut dyn Sink, orphan: &TxnHandle) -> Result<Option<OrphanSeen>, TaskExit> {
        // DEFECT blind_fence: the open fences without describing its orphan.
        #[cfg(any(test, feature = "defects"))]
        if self.cx.env.defects.has(crate::defects::Defect::BlindFence) {
            return Ok(None);
        }
        let first = family_of(sink)?.describe(orphan)?;
        kill_point(FaultPoint::SinkOrphanDescribed, orphan.checkpoint);
        Ok(Some(first))
    }

    /// The settlement: the orphan's receipt, or an abort under its own
    /// identity and, where that is refused, the broker's word on its end.
    fn settle_orphan(
        &mut self,
        sink: &mut dyn Sink,
        orphan: &TxnHandle,
        first: OrphanSeen,
    ) -> Result<Settled, TaskExit> {
        let layout = self.cx.backend.layout().clone();
        let sub = self.cx.participant.clone();
        if read_receipt(&layout, &sub, orphan.checkpoint).map_err(failed)?.is_some() {
            return Ok(Settled::Receipt);
        }
        let confirmed = family_of(sink)?;
        // DEFECT orphan_left_to_init: the first describe decides, and an
        // undecided orphan is left to init_transactions.
        #[cfg(any(test, feature = "defects"))]
        let seen = if self.cx.env.defects.has(crate::defects::Defect::OrphanLeftToInit) {
            match first {
                OrphanSeen::Committed => OrphanSeen::Committed,
                _ => OrphanSeen::NotCommitted,
            }
        } else {
            confirmed.settle(orphan)?
        };
        #[cfg(not(any(test, feature = "defects")))]
        let seen = {
            let _ = first;
            confirmed.settle(orphan)?
        };
        match seen {
            OrphanSeen::Committed => {
                write_receipt(&layout, &sub, orphan, ProvenBy::Open).map_err(failed)?;
                Ok(Settled::Committed)
            }
            OrphanSeen::AbortedNow => Ok(Settled::Aborted),
            OrphanSeen::NotCommitted => Ok(Settled::NotCommitted),
            OrphanSeen::Ongoing => Err(failed(format!(
                "{sub}: the orphan of checkpoint {} is still open after the open's abort",
                orphan.checkpoint
            ))),
            OrphanSeen::Unknown { why } => Err(failed(format!(
                "{sub}: cannot settle the orphan transaction of checkpoint {} ({:?}, producer {}/{}): {why}",
                orphan.checkpoint, orphan.transactional_id, orphan.producer_id, orphan.epoch
            ))),
        }
    }

    /// The rows of every receipt above the restore point: the replay
    /// swallows them, since they are committed.
    fn receipted_rows(&self, restore: u64) -> Result<Vec<RowDigest>, TaskExit> {
        let layout = self.cx.backend.layout();
        let sub = &self.cx.participant;
        let mut rows = Vec::new();
        for checkpoint in list_receipts(layout, sub).map_err(failed)?.into_iter().filter(|&c| c > restore) {
            let receipt = read_receipt(layout, sub, checkpoint)
                .map_err(failed)?
                .ok_or_else(|| failed(format!("{sub}: the receipt of checkpoint {checkpoint} went away")))?;
            rows.extend(receipt.handle.rows.0);
        }
        Ok(rows)
    }

    /// After acking `checkpoint`, only control frames are read until its
    /// commit arrives and is finished.
    pub(super) fn await_commit(&mut self, sink: &mut dyn Sink, checkpoint: u64) -> Result<(), TaskExit> {
        loop {
            self.cx.watch.waits(crate::runtime::watch::Wait::Commit(checkpoint));
            match self.gate.next_control(None) {
                Input::Control(ToTask::CommitCheckpoint { checkpoint: c }) if c == checkpoint => {
                    return self.commit_confirmed(sink, checkpoint)
                }
                Input::Control(ToTask::CommitCheckpoint { checkpoint: c }) => {
                    return Err(TaskExit::violation(format!(
                        "the commit of checkpoint {c} while the commit of {checkpoint} was awaited"
                    )))
                }
                Input::Control(ToTask::Cancel) | Input::Cancelled => return self.cancelled(sink),
                Input::Timeout => {}
                Input::Control(other) => {
                    return Err(TaskExit::violation(format!("a sink awaiting a commit was sent {other:?}")))
                }
                other => return Err(TaskExit::violation(format!("control input {other:?}"))),
            }
        }
    }

    /// The broker's commit, its receipt, the commit's tail, and the
    /// confirmation, with a fault point between each.
    fn commit_confirmed(&mut self, sink: &mut dyn Sink, checkpoint: u64) -> Result<(), TaskExit> {
        let (job, sub) = (self.cx.job, self.cx.participant.clone());
        trace_event!(DeliverCommit, job = job, sub = &sub, ckpt = checkpoint, accepted = true);
        kill_point(FaultPoint::SinkBeforeCommit, checkpoint);
        let defects = self.cx.env.defects.clone();
        let _ = &defects;
        // DEFECT confirm_before_commit: CommitConfirmed goes out as the
        // commit frame is taken.
        #[cfg(any(test, feature = "defects"))]
        let confirmed_early = defects.has(crate::defects::Defect::ConfirmBeforeCommit);
        #[cfg(not(any(test, feature = "defects")))]
        let confirmed_early = false;
        if confirmed_early {
            self.confirm(checkpoint)?;
            self.await_confirmed_marker(checkpoint);
        }
        let handle = family_of(sink)?
            .handle(checkpoint)
            .ok_or_else(|| TaskExit::violation(format!("the commit of checkpoint {checkpoint} with no handle")))?;
        crate::fault::unsplit(|| -> Result<(), TaskExit> {
            sink.commit(checkpoint)?;
            trace_event!(SinkCommit, job = job, sub = &sub, ckpt = checkpoint);
            Ok(())
        })?;
        // DEFECT receipt_after_begin: the next transaction begins (and takes
        // a record) before the receipt; DEFECT no_receipts: no receipt.
        #[cfg(any(test, feature = "defects"))]
        let (early_finish, receipt) =
            (defects.has(crate::defects::Defect::ReceiptAfterBegin), !defects.has(crate::defects::Defect::NoReceipts));
        #[cfg(not(any(test, feature = "defects")))]
        let (early_finish, receipt) = (false, true);
        if early_finish {
            family_of(sink)?.finish(checkpoint)?;
            self.await_next_record(sink)?;
        }
        kill_point(FaultPoint::SinkBetweenCommitAndReceipt, checkpoint);
        if receipt {
            crate::fault::unsplit(|| -> Result<(), TaskExit> {
                write_receipt(self.cx.backend.layout(), &sub, &handle, ProvenBy::Sink).map_err(failed)?;
                trace_event!(SinkReceipt, job = job, sub = &sub, ckpt = checkpoint);
                Ok(())
            })?;
        }
        kill_point(FaultPoint::SinkAfterExternalCommit, checkpoint);
        if !early_finish {
            family_of(sink)?.finish(checkpoint)?;
        }
        kill_point(FaultPoint::SinkAfterCommit, checkpoint);
        self.last_committed = self.last_committed.max(checkpoint);
        if !confirmed_early {
            self.confirm(checkpoint)?;
        }
        Ok(())
    }

    /// CommitConfirmed: the worker tells the coordinator the commit is done.
    fn confirm(&mut self, checkpoint: u64) -> Result<(), TaskExit> {
        trace_event!(SinkConfirm, job = self.cx.job, sub = &self.cx.participant, ckpt = checkpoint);
        self.cx.send(ToCoordinator::Committed { task: self.cx.task, checkpoint })
    }

    /// DEFECT confirm_before_commit's exposing interleaving: the commit waits
    /// (a few seconds at most) until the confirmation it sent early is a
    /// durable CONFIRMED marker.
    fn await_confirmed_marker(&self, checkpoint: u64) {
        let marker = self.cx.backend.layout().confirmed_marker(checkpoint);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !marker.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// DEFECT receipt_after_begin's exposing interleaving: the next
    /// transaction holds a record before the receipt is written.
    #[cfg(any(test, feature = "defects"))]
    fn await_next_record(&mut self, sink: &mut dyn Sink) -> Result<(), TaskExit> {
        loop {
            match self.gate.next(None) {
                Input::Record(row) => {
                    self.cx.record(&crate::event::Event::Record(row.clone()));
                    return Ok(sink.write(&row)?);
                }
                Input::Timeout => {}
                // Anything else is handled by the task's loop, next.
                other => {
                    self.held = Some(other);
                    return Ok(());
                }
            }
        }
    }

    #[cfg(not(any(test, feature = "defects")))]
    fn await_next_record(&mut self, _sink: &mut dyn Sink) -> Result<(), TaskExit> {
        Ok(())
    }
}
