//! The commit-confirmed family's side of the coordinator: CONFIRMED markers,
//! and the restart held for in-doubt resolution.
//!
//! A confirmation's CONFIRMED marker is made durable before the confirmed
//! point in memory moves to it. A restart (or a recovery) of a job whose
//! sinks confirm their commits does not redeploy at once: it is held
//! (`RestartProceeds`) while the in-doubt walk goes through the COMPLETED
//! checkpoints above the confirmed point, in id order, and proves each
//! sink's commit by its receipt or by asking the broker (a proof over the
//! wire becomes a receipt); a checkpoint proven at every sink is confirmed.
//! The walk never commits anything and never guesses: a handle it cannot
//! prove is refused, and at its first refused checkpoint (or when the broker
//! stays unreachable, or its deadline passes) it stops and leaves an
//! `.unresolved` marker for every unreceipted handle of a completed
//! checkpoint from there up, which the owning sink's open settles before it
//! fences. The job then redeploys from the confirmed point (the restore
//! rule's answer, which must be the point in memory).

use std::time::{Duration, Instant};

use crate::checkpoint::commits::{
    read_receipt, write_confirmed, write_receipt, write_unresolved, ConfirmedMarker, ProvenBy, TxnHandle,
};
use crate::checkpoint::markers::list_completed;
use crate::checkpoint::ChosenBy;
use crate::fault::{kill_point, FaultPoint};
use crate::operators::{CommitConfirmation, Probe};
use crate::runtime::RunError;
use crate::trace_event;

use super::Coordinator;

/// The walk's deadline (its watchdog), unless `CLINK_WALK_TIMEOUT_MS` sets one.
const WALK_TIMEOUT: Duration = Duration::from_secs(120);
const WALK_TIMEOUT_VAR: &str = "CLINK_WALK_TIMEOUT_MS";
/// How often the walk asks an unreachable broker again before it gives up.
const PROBE_RETRIES: u32 = 3;
const PROBE_BACKOFF: Duration = Duration::from_millis(500);

/// What the walk established of one sink's handle of a checkpoint.
enum Proof {
    /// Its receipt is on disk.
    Receipt,
    /// The broker says it committed; the receipt is durable now.
    Probed,
    Refused(String),
    /// The broker stayed unreachable through every retry.
    Exhausted(String),
}

/// Why the walk stopped early.
#[derive(Clone, Copy)]
enum Stop {
    Refused,
    Exhausted,
    Cancelled,
}

impl Coordinator {
    /// Every commit-confirmed sink confirmed `checkpoint`: its CONFIRMED
    /// marker is made durable, then the confirmed point in memory advances.
    pub(super) fn write_confirmed_marker(&mut self, checkpoint: u64) -> Result<(), RunError> {
        // DEFECT advance_before_confirmed_put: memory first, and the pruning
        // that trusts it, before the put (the fault point between them).
        #[cfg(any(test, feature = "defects"))]
        if self.options.env.defects.has(crate::defects::Defect::AdvanceBeforeConfirmedPut) {
            self.protocol.advance_confirmed(checkpoint);
            self.prune(checkpoint)?;
        }
        kill_point(FaultPoint::CoordinatorBeforeConfirmedMarker, checkpoint);
        crate::fault::unsplit(|| {
            self.put_confirmed(checkpoint, "sinks")?;
            self.protocol.advance_confirmed(checkpoint);
            trace_event!(WriteConfirmed, job = self.layout.job(), ckpt = checkpoint, epoch = self.epoch());
            Ok(())
        })
    }

    pub(super) fn put_confirmed(&self, checkpoint: u64, by: &str) -> Result<(), RunError> {
        let sinks = self.confirming().into_iter().map(|(task, _)| self.name_of(task)).collect();
        let marker = ConfirmedMarker::new(self.layout.job(), checkpoint, sinks, by, self.graph.clone());
        write_confirmed(&self.layout, &marker).map_err(|e| RunError::Failed(e.to_string()))
    }

    /// The commit-confirmed sinks of the job: task and how to read and prove
    /// their handles.
    pub(super) fn confirming(&self) -> Vec<(usize, CommitConfirmation)> {
        self.sinks
            .iter()
            .filter_map(|&task| {
                let operator = &self.options.job.operators[self.participants[task].operator];
                operator.spec.descriptor.confirmation.map(|c| (task, c))
            })
            .collect()
    }

    /// A restart or a recovery of a job whose sinks confirm their commits:
    /// held for the walk, then redeployed from the confirmed point.
    pub(super) fn resolve_then_redeploy(&mut self, chosen_by: ChosenBy) -> Result<(), RunError> {
        let job = self.layout.job();
        let completed = self.newest_completed()?;
        let confirmed = self.protocol.confirmed_point();
        trace_event!(RestartProceeds, job = job, resolving = true, completed = completed, confirmed = confirmed);
        kill_point(FaultPoint::CoordinatorBeforeInDoubtWalk, confirmed);
        self.walk(confirmed, completed)?;
        let point = self.restore_point(chosen_by)?;
        #[cfg(any(test, feature = "defects"))]
        let memory = if self.options.env.defects.has(crate::defects::Defect::RestoreFromCompleted) {
            point.checkpoint
        } else {
            self.protocol.confirmed_point()
        };
        #[cfg(not(any(test, feature = "defects")))]
        let memory = self.protocol.confirmed_point();
        if point.checkpoint != memory {
            return Err(RunError::Failed(format!(
                "protocol invariant broken: the restore rule chose checkpoint {} and the confirmed point in memory is {memory}",
                point.checkpoint
            )));
        }
        self.redeploy(point)
    }

    pub(super) fn newest_completed(&self) -> Result<u64, RunError> {
        let completed = list_completed(&self.layout).map_err(|e| RunError::Failed(e.to_string()))?;
        Ok(completed.last().copied().unwrap_or(0))
    }

    /// The in-doubt walk over the COMPLETED checkpoints above `confirmed`.
    fn walk(&mut self, confirmed: u64, newest: u64) -> Result<(), RunError> {
        let job = self.layout.job();
        let completed = list_completed(&self.layout).map_err(|e| RunError::Failed(e.to_string()))?;
        let deadline = Instant::now() + walk_timeout();
        for checkpoint in confirmed + 1..=newest {
            if Instant::now() >= deadline {
                return self.stop_walk(checkpoint, &[], Stop::Cancelled);
            }
            if !completed.contains(&checkpoint) {
                trace_event!(WalkSkips, job = job, ckpt = checkpoint);
                continue;
            }
            let mut proven = Vec::new();
            let mut refused = false;
            for (task, confirmation) in self.confirming() {
                // DEFECT stop_at_first_refusal: no probe after a refusal.
                #[cfg(any(test, feature = "defects"))]
                if refused && self.options.env.defects.has(crate::defects::Defect::StopAtFirstRefusal) {
                    break;
                }
                let sub = self.name_of(task);
                match self.prove(&sub, checkpoint, &confirmation)? {
                    Proof::Receipt => {
                        trace_event!(WalkReadsReceipt, job = job, ckpt = checkpoint, sub = &sub);
                        proven.push(task);
                    }
                    Proof::Probed => {
                        trace_event!(WalkProbes, job = job, ckpt = checkpoint, sub = &sub, verdict = "committed");
                        proven.push(task);
                    }
                    Proof::Refused(why) => {
                        eprintln!("clink: job {job}: in-doubt walk: {sub} checkpoint {checkpoint} not proven: {why}");
                        trace_event!(WalkProbes, job = job, ckpt = checkpoint, sub = &sub, verdict = "refused");
                        refused = true;
                    }
                    Proof::Exhausted(why) => {
                        eprintln!("clink: job {job}: in-doubt walk: {sub} checkpoint {checkpoint}: {why}");
                        return self.stop_walk(checkpoint, &proven, Stop::Exhausted);
                    }
                }
            }
            if refused {
                return self.stop_walk(checkpoint, &proven, Stop::Refused);
            }
            self.put_confirmed(checkpoint, "walk")?;
            self.protocol.advance_confirmed(checkpoint);
            trace_event!(WalkDecides, job = job, ckpt = checkpoint, verdict = "confirmed");
        }
        trace_event!(WalkFinishes, job = job, confirmed = self.protocol.confirmed_point());
        Ok(())
    }

    /// One sink's handle of `checkpoint`: its receipt, or the broker's word
    /// (retried while the broker is unreachable), materialised as a receipt.
    fn prove(&self, sub: &str, checkpoint: u64, confirmation: &CommitConfirmation) -> Result<Proof, RunError> {
        let job = self.layout.job();
        let handle = match self.handle_of(sub, checkpoint, confirmation) {
            Ok(handle) => handle,
            Err(why) => return Ok(Proof::Refused(why)),
        };
        match read_receipt(&self.layout, sub, checkpoint) {
            Ok(Some(receipt)) if receipt.handle == handle => return Ok(Proof::Receipt),
            Ok(Some(receipt)) => {
                return Ok(Proof::Refused(format!("its receipt names {:?}, its snapshot {:?}", receipt.handle, handle)))
            }
            Ok(None) => {}
            Err(e) => return Ok(Proof::Refused(format!("its receipt cannot be read: {e}"))),
        }
        let mut attempt = 0;
        loop {
            match (confirmation.probe)(&self.options.env, &handle) {
                Probe::Committed => break,
                Probe::Refused { why } => return Ok(Proof::Refused(why)),
                Probe::Unreachable { why } if attempt >= PROBE_RETRIES => {
                    return Ok(Proof::Exhausted(format!("the broker stayed unreachable: {why}")))
                }
                Probe::Unreachable { .. } => {
                    attempt += 1;
                    trace_event!(WalkRetries, job = job, ckpt = checkpoint, sub = sub);
                    std::thread::sleep(PROBE_BACKOFF);
                }
            }
        }
        // DEFECT no_materialised_receipts: the proof stays in memory.
        #[cfg(any(test, feature = "defects"))]
        if self.options.env.defects.has(crate::defects::Defect::NoMaterialisedReceipts) {
            return Ok(Proof::Probed);
        }
        write_receipt(&self.layout, sub, &handle, ProvenBy::Walk).map_err(|e| RunError::Failed(e.to_string()))?;
        Ok(Proof::Probed)
    }

    /// The handle a sink's snapshot of `checkpoint` holds.
    fn handle_of(&self, sub: &str, checkpoint: u64, confirmation: &CommitConfirmation) -> Result<TxnHandle, String> {
        let snapshot =
            self.backend.read(self.backend.generation(), sub, checkpoint).map_err(|e| format!("its snapshot: {e}"))?;
        match (confirmation.handle)(&snapshot.slots) {
            Ok(Some(handle)) if handle.checkpoint == checkpoint => Ok(handle),
            Ok(Some(handle)) => Err(format!("its snapshot holds the handle of checkpoint {}", handle.checkpoint)),
            Ok(None) => Err("its snapshot holds no transaction".into()),
            Err(e) => Err(format!("its snapshot: {e}")),
        }
    }

    /// The walk stops at `at`: an unresolved marker for every unreceipted
    /// handle of a completed checkpoint from `at` up that it did not prove
    /// (`proven`: the sinks proven at `at`), durable before the line.
    fn stop_walk(&mut self, at: u64, proven: &[usize], stop: Stop) -> Result<(), RunError> {
        let job = self.layout.job();
        let completed = list_completed(&self.layout).map_err(|e| RunError::Failed(e.to_string()))?;
        for &checkpoint in completed.iter().filter(|&&c| c >= at) {
            // DEFECT refusal_wall: nothing above the stop is marked.
            #[cfg(any(test, feature = "defects"))]
            if checkpoint > at && self.options.env.defects.has(crate::defects::Defect::RefusalWall) {
                break;
            }
            for (task, confirmation) in self.confirming() {
                if checkpoint == at && proven.contains(&task) {
                    continue;
                }
                let sub = self.name_of(task);
                let receipted =
                    read_receipt(&self.layout, &sub, checkpoint).map_err(|e| RunError::Failed(e.to_string()))?;
                if receipted.is_some() {
                    continue;
                }
                let handle = self.handle_of(&sub, checkpoint, &confirmation).map_err(|why| {
                    RunError::Failed(format!(
                        "in-doubt walk: {sub} checkpoint {checkpoint} needs an unresolved marker, and {why}"
                    ))
                })?;
                write_unresolved(&self.layout, &sub, &handle).map_err(|e| RunError::Failed(e.to_string()))?;
            }
        }
        match stop {
            Stop::Refused => trace_event!(WalkDecides, job = job, ckpt = at, verdict = "refused"),
            Stop::Exhausted => trace_event!(WalkExhausted, job = job, ckpt = at),
            Stop::Cancelled => trace_event!(WalkCancelled, job = job, ckpt = at),
        }
        Ok(())
    }
}

fn walk_timeout() -> Duration {
    std::env::var(WALK_TIMEOUT_VAR).ok().and_then(|v| v.parse::<u64>().ok()).map_or(WALK_TIMEOUT, Duration::from_millis)
}
