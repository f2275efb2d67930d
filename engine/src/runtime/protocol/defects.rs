//! The protocol's test-only defects: which ones the core decides
//! ([`ProtocolDefects`]), what only their branches keep, and the branches
//! themselves, each marked `DEFECT <name>` and compiled only in builds with
//! the switches (`crate::defects`). It never changes what a default build
//! decides: there every switch is false and the branches do not exist.

use std::collections::BTreeSet;

#[cfg(any(test, feature = "defects"))]
use super::{Outcome, Protocol, Step};
#[cfg(any(test, feature = "defects"))]
use crate::checkpoint::markers::CheckpointKind;
use crate::defects::{Defect, Defects};

/// The test-only defects the core itself decides (the others are the
/// runtime's, the restore rule's or the sinks'). All false in a default build.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProtocolDefects {
    /// Broadcast, wait for the commits, then write the marker.
    pub broadcast_before_marker: bool,
    /// A failed checkpoint (its above discarded) restarts nothing.
    pub no_rewind_on_failed_checkpoint: bool,
    /// A failed checkpoint discards nothing above it; the checkpoint above
    /// completes before the restart.
    pub complete_above_failed: bool,
    /// The core's part of `commit_above_checkpoint` (the sink publishes every
    /// handle): the interleaving that exposes it, a completed checkpoint's
    /// broadcast held until the next checkpoint has every ack.
    pub commit_above_checkpoint: bool,
    /// A redeploy numbers from the restore point plus one.
    pub id_reuse: bool,
    /// A restart numbers from the disk's next id only.
    pub restart_numbers_from_disk: bool,
    /// With the budget spent, a failed checkpoint is forgotten.
    pub sail_on_without_budget: bool,
    /// A restart decides what is in flight until the subtasks stop.
    pub broadcast_during_drain: bool,
    /// A periodic request past the in-flight bound is dropped.
    pub drop_request_at_bound: bool,
}

impl ProtocolDefects {
    pub fn of(defects: &Defects) -> ProtocolDefects {
        ProtocolDefects {
            broadcast_before_marker: defects.has(Defect::BroadcastBeforeMarker),
            no_rewind_on_failed_checkpoint: defects.has(Defect::NoRewindOnFailedCheckpoint),
            complete_above_failed: defects.has(Defect::CompleteAboveFailed),
            commit_above_checkpoint: defects.has(Defect::CommitAboveCheckpoint),
            id_reuse: defects.has(Defect::IdReuse),
            restart_numbers_from_disk: defects.has(Defect::RestartNumbersFromDisk),
            sail_on_without_budget: defects.has(Defect::SailOnWithoutBudget),
            broadcast_during_drain: defects.has(Defect::BroadcastDuringDrain),
            drop_request_at_bound: defects.has(Defect::DropRequestAtBound),
        }
    }
}

/// What only a defect's branch keeps (always empty in a default build).
#[derive(Debug, Default)]
#[cfg_attr(not(any(test, feature = "defects")), allow(dead_code))]
pub(super) struct DefectState {
    /// complete_above_failed: a failed checkpoint whose decision waits for
    /// the next checkpoint's acks.
    pub(super) held_failure: Option<(u64, String)>,
    /// commit_above_checkpoint: a completed checkpoint whose broadcast waits
    /// for the next checkpoint's acks.
    pub(super) held_broadcast: Option<u64>,
    /// no_rewind / sail_on: checkpoints discarded without a restart, whose
    /// late acks are dropped (the deployment runs on and sends them).
    pub(super) dropped: BTreeSet<u64>,
    /// broadcast_during_drain: a restart has begun and its subtasks still run.
    pub(super) draining: bool,
}

/// The defects' branches: each answers `Some(steps)` where its defect takes
/// over from the rule, `None` where the rule stands.
#[cfg(any(test, feature = "defects"))]
impl Protocol {
    /// Every ack of `checkpoint` is in.
    pub(super) fn defect_on_decidable(
        &mut self,
        checkpoint: u64,
        kind: CheckpointKind,
        failed: &Option<String>,
    ) -> Option<Vec<Step>> {
        let d = self.config.defects;
        let mut steps = Vec::new();
        // DEFECT commit_above_checkpoint: the held broadcast goes out now that
        // the next checkpoint has every ack (its sinks hold its handle).
        if let Some(c) = self.defect.held_broadcast.take() {
            steps.push(Step::BroadcastCommit { checkpoint: c });
            // The sinks publish before a restart below can stop them: the
            // harm then shows in every run, not only in those where the
            // sinks happened to win the race (a loaded machine lost it 1 in 12).
            steps.push(Step::AwaitCommits { checkpoint: c });
        }
        // DEFECT complete_above_failed: the held failure is decided now, the
        // checkpoint above completes (nothing was discarded), then the restart.
        if let Some((c, reason)) = self.defect.held_failure.take() {
            steps.push(Step::Decided { checkpoint: c, outcome: Outcome::Failed });
            match failed {
                None => steps.extend(self.complete(checkpoint)),
                Some(_) => {
                    self.pending.remove(&checkpoint);
                    steps.push(Step::Decided { checkpoint, outcome: Outcome::Failed });
                }
            }
            steps.extend(self.restart(c, format!("checkpoint {c} failed: {reason}")));
            return Some(steps);
        }
        if let Some(reason) = failed {
            if d.complete_above_failed && kind == CheckpointKind::Periodic && !self.defect.draining {
                // DEFECT complete_above_failed: hold the failed decision until the
                // checkpoint above has every ack (a decision taken later).
                self.pending.remove(&checkpoint);
                self.defect.held_failure = Some((checkpoint, reason.clone()));
                return Some(steps);
            }
            if self.defect.draining {
                // DEFECT broadcast_during_drain: decided during the drain; the
                // restart under way is the only one.
                self.pending.remove(&checkpoint);
                steps.push(Step::Decided { checkpoint, outcome: Outcome::Failed });
                return Some(steps);
            }
        }
        if steps.is_empty() {
            return None;
        }
        steps.extend(match failed {
            None => self.complete(checkpoint),
            Some(reason) => self.fail(checkpoint, reason.clone()),
        });
        Some(steps)
    }

    /// `checkpoint` completed: the marker and the broadcast, as a defect orders them.
    pub(super) fn defect_complete(&mut self, checkpoint: u64, kind: CheckpointKind) -> Option<Vec<Step>> {
        let d = self.config.defects;
        if d.broadcast_before_marker {
            // DEFECT broadcast_before_marker: step 8 before step 7.
            return Some(vec![
                Step::BroadcastCommit { checkpoint },
                Step::AwaitCommits { checkpoint },
                Step::WriteMarker { checkpoint, kind },
            ]);
        }
        if d.commit_above_checkpoint && kind == CheckpointKind::Periodic && !self.defect.draining {
            // DEFECT commit_above_checkpoint: the marker now, the broadcast
            // once the next checkpoint has every ack (a broadcast taken later).
            self.defect.held_broadcast = Some(checkpoint);
            return Some(vec![Step::WriteMarker { checkpoint, kind }]);
        }
        None
    }

    /// `checkpoint` failed and the checkpoints `above` were discarded
    /// (`stranded`: the source's last one among them).
    pub(super) fn defect_after_failure(
        &mut self,
        checkpoint: u64,
        reason: &str,
        above: &[u64],
        stranded: bool,
    ) -> Option<Vec<Step>> {
        let d = self.config.defects;
        let spent = self.progress.restarts >= self.config.restart_budget;
        // DEFECT no_rewind_on_failed_checkpoint: no restart, the job runs on.
        // DEFECT sail_on_without_budget: the same, once the budget is spent.
        if d.no_rewind_on_failed_checkpoint || (d.sail_on_without_budget && spent) {
            self.defect.dropped.extend(above.iter().copied());
            let mut steps = Vec::new();
            if let Some(c) = self.defect.held_broadcast.take() {
                steps.push(Step::BroadcastCommit { checkpoint: c });
            }
            steps.push(Step::RunOn { checkpoint, reason: reason.to_string(), stranded });
            return Some(steps);
        }
        None
    }

    /// A subtask failed.
    pub(super) fn defect_task_failed(&mut self, cause: &str) -> Option<Vec<Step>> {
        // DEFECT broadcast_during_drain: a restart is under way already.
        if self.defect.draining {
            return Some(Vec::new());
        }
        // DEFECT complete_above_failed: a held failure is decided, and restarts.
        let (c, reason) = self.defect.held_failure.take()?;
        let _ = cause;
        let mut steps = vec![Step::Decided { checkpoint: c, outcome: Outcome::Failed }];
        steps.extend(self.restart(c, format!("checkpoint {c} failed: {reason}")));
        Some(steps)
    }

    /// DEFECT broadcast_during_drain: the subtasks have stopped; what is still
    /// in flight is discarded and the job redeploys.
    pub fn drain_ended(&mut self) -> Vec<Step> {
        let mut steps = self.discard_all();
        steps.push(Step::Redeploy);
        steps
    }

    /// The first id of a redeploy, as a numbering defect chooses it.
    pub(super) fn defect_next(&self, restore_point: u64, disk_next: u64) -> Option<u64> {
        let d = self.config.defects;
        if d.id_reuse {
            // DEFECT id_reuse: from the restore point.
            Some(restore_point + 1)
        } else if d.restart_numbers_from_disk {
            // DEFECT restart_numbers_from_disk: the disk's next id only.
            Some(disk_next)
        } else {
            None
        }
    }
}
