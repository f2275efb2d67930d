//! The restore rule: which checkpoint a restart restores from, and, its
//! mirror image, which state each epoch of a run started from.
//!
//! There is exactly one implementation, [`choose_restore_point`], and one way to
//! apply it to a directory, [`restore_point_on_disk`]. The engine's restarts
//! (a new process, an in-process restart), the incident collector and the
//! `checkpoint.restore_rule` check all call it; none of them may decide
//! otherwise. [`epoch_start`] answers the replay's question with the same
//! markers and the same RESTORED record: epoch `N` holds the events between
//! checkpoints `N-1` and `N`, so it starts from checkpoint `N-1`, except the
//! first epoch of a restored run, which starts from the restore point.

use thiserror::Error;

use super::backend::{FileStateBackend, StateError};
use super::layout::CheckpointLayout;
use super::markers::{list_completed, list_confirmed, read_restored, MarkerError, RestoredRecord};

/// Which markers a job restores from. This engine's sinks recover their own
/// commits (the recoverable family), so it restores by `NewestCompleted`; a job
/// whose sinks need commit confirmation restores from the newest CONFIRMED
/// marker instead, and the collector and checks evaluate that rule too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestoreRule {
    NewestCompleted,
    NewestConfirmed,
}

impl RestoreRule {
    pub fn for_confirmation(requires_commit_confirmation: bool) -> Self {
        if requires_commit_confirmation {
            RestoreRule::NewestConfirmed
        } else {
            RestoreRule::NewestCompleted
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            RestoreRule::NewestCompleted => "newest_completed_not_passed_over",
            RestoreRule::NewestConfirmed => "newest_confirmed",
        }
    }
}

/// The restore point and what it was chosen from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestorePoint {
    /// The checkpoint to restore from; 0 means start from nothing.
    pub checkpoint: u64,
    /// The rule that chose it.
    pub rule: RestoreRule,
    /// Every COMPLETED marker seen, ascending.
    pub completed: Vec<u64>,
    /// Every CONFIRMED marker seen, ascending.
    pub confirmed: Vec<u64>,
    /// The RESTORED record seen, if any.
    pub restored: Option<RestoredRecord>,
    /// Markers the RESTORED record passed over.
    pub passed_over: Vec<u64>,
}

/// The newest completed checkpoint that the RESTORED record does not pass
/// over, or 0 when there is none.
pub fn choose_restore_point(completed: &[u64], restored: Option<&RestoredRecord>) -> u64 {
    completed.iter().copied().filter(|&c| !restored.is_some_and(|r| r.passes_over(c))).max().unwrap_or(0)
}

/// Applies the engine's restore rule to a job's markers on disk.
pub fn restore_point_on_disk(layout: &CheckpointLayout) -> Result<RestorePoint, MarkerError> {
    restore_point_on_disk_by(layout, RestoreRule::NewestCompleted)
}

/// Who chooses a restore point: a new run over the directory (a recovery,
/// `CoordRecovers`), or an in-process restart after its drain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChosenBy {
    Recovery,
    Restart,
}

/// Why the engine could not choose its restore point.
#[derive(Debug, Error)]
pub enum RestoreError {
    #[error(transparent)]
    Markers(#[from] MarkerError),
    #[error(transparent)]
    State(#[from] StateError),
}

/// The engine's restore point: [`restore_point_on_disk`], the one rule, for a
/// recovery and a restart alike. Only a test build's restore defects (each a
/// branch marked `DEFECT`) choose otherwise.
///
/// `rule` is the job's: [`RestoreRule::NewestConfirmed`] when its sinks
/// confirm their commits (the CONFIRMED rule), else the COMPLETED rule.
pub fn engine_restore_point(
    layout: &CheckpointLayout,
    rule: RestoreRule,
    chosen_by: ChosenBy,
    defects: &crate::defects::Defects,
) -> Result<RestorePoint, RestoreError> {
    let point = restore_point_on_disk_by(layout, rule)?;
    #[cfg(any(test, feature = "defects"))]
    if let Some(checkpoint) = defective_restore_point(layout, &point, chosen_by, defects)? {
        return Ok(RestorePoint { checkpoint, ..point });
    }
    let _ = (chosen_by, defects);
    Ok(point)
}

/// The restore point a restore defect chooses instead of the rule's.
#[cfg(any(test, feature = "defects"))]
fn defective_restore_point(
    layout: &CheckpointLayout,
    point: &RestorePoint,
    chosen_by: ChosenBy,
    defects: &crate::defects::Defects,
) -> Result<Option<u64>, RestoreError> {
    use crate::defects::Defect;
    if point.rule == RestoreRule::NewestConfirmed {
        // DEFECT restore_from_completed: a job of commit-confirmed sinks
        // restores from the newest COMPLETED marker.
        return Ok(defects.has(Defect::RestoreFromCompleted).then(|| point.completed.last().copied().unwrap_or(0)));
    }
    let ignores_record = match chosen_by {
        // DEFECT restore_ignores_restored: a restart's rule without the record.
        ChosenBy::Restart => defects.has(Defect::RestoreIgnoresRestored),
        // DEFECT restore_from_superseded: a new run's rule without the record.
        ChosenBy::Recovery => defects.has(Defect::RestoreFromSuperseded),
    };
    if ignores_record {
        return Ok(Some(choose_restore_point(&point.completed, None)));
    }
    if defects.has(Defect::RestoreWithoutMarker) {
        // DEFECT restore_without_marker: the newest checkpoint any participant
        // has a snapshot of, marker or not.
        let snapshots = FileStateBackend::new(layout.clone()).snapshot_ids()?;
        return Ok(Some(snapshots.last().copied().unwrap_or(0).max(point.checkpoint)));
    }
    Ok(None)
}

/// Applies a restore rule to a job's markers on disk.
pub fn restore_point_on_disk_by(layout: &CheckpointLayout, rule: RestoreRule) -> Result<RestorePoint, MarkerError> {
    Ok(restore_point_from(list_completed(layout)?, list_confirmed(layout)?, read_restored(layout)?, rule))
}

/// Applies a restore rule to markers already read (ascending ids, and the
/// RESTORED record if there is one): what [`restore_point_on_disk_by`] does
/// after its listing, for readers that hold the markers' bytes themselves.
pub fn restore_point_from(
    completed: Vec<u64>,
    confirmed: Vec<u64>,
    restored: Option<RestoredRecord>,
    rule: RestoreRule,
) -> RestorePoint {
    let checkpoint = match rule {
        RestoreRule::NewestCompleted => choose_restore_point(&completed, restored.as_ref()),
        RestoreRule::NewestConfirmed => confirmed.last().copied().unwrap_or(0),
    };
    let passed_over =
        completed.iter().copied().filter(|&c| restored.as_ref().is_some_and(|r| r.passes_over(c))).collect();
    RestorePoint { checkpoint, rule, completed, confirmed, restored, passed_over }
}

/// The first id a redeploy may number: above every id the disk knows, so a
/// new checkpoint never shares an id with anything an earlier run left.
pub fn next_checkpoint_id(layout: &CheckpointLayout, point: &RestorePoint) -> Result<u64, StateError> {
    let snapshots = FileStateBackend::new(layout.clone()).snapshot_ids()?;
    let highest = [
        point.completed.last().copied().unwrap_or(0),
        snapshots.last().copied().unwrap_or(0),
        point.restored.as_ref().map_or(0, |r| r.next.saturating_sub(1)),
        point.checkpoint,
    ]
    .into_iter()
    .max()
    .unwrap_or(0);
    Ok(highest + 1)
}

/// Where an epoch's replay starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartPoint {
    /// From nothing: the first epoch of a run that started fresh, or restored from 0.
    Empty,
    Checkpoint(u64),
}

/// Why an epoch's starting state is not known.
#[derive(Debug, Error)]
pub enum EpochStartError {
    #[error(transparent)]
    Markers(#[from] MarkerError),
    #[error(
        "epoch {epoch} starts from checkpoint {previous}, which did not complete, and no recorded restore starts a run at epoch {epoch}"
    )]
    Unknown { epoch: u64, previous: u64 },
}

/// The state epoch `epoch` started from. The RESTORED record names the
/// newest restore; `known_restores` ((restored_from, next) pairs, from the
/// traces' Redeploy events) can name earlier ones. Any other epoch starts
/// from `epoch - 1` only when that checkpoint completed (its marker is on
/// disk); otherwise what it started from is not known.
pub fn epoch_start(
    layout: &CheckpointLayout,
    epoch: u64,
    known_restores: &[(u64, u64)],
) -> Result<StartPoint, EpochStartError> {
    let restored = read_restored(layout)?;
    epoch_start_from(&list_completed(layout)?, restored.as_ref(), epoch, known_restores)
}

/// [`epoch_start`] over markers already read: the COMPLETED ids and the
/// RESTORED record.
pub fn epoch_start_from(
    completed: &[u64],
    restored: Option<&RestoredRecord>,
    epoch: u64,
    known_restores: &[(u64, u64)],
) -> Result<StartPoint, EpochStartError> {
    let mut restores: Vec<(u64, u64)> = known_restores.to_vec();
    if let Some(r) = restored {
        restores.push((r.restored_from, r.next));
    }
    if let Some(&(from, _)) = restores.iter().find(|(_, next)| *next == epoch) {
        return Ok(if from == 0 { StartPoint::Empty } else { StartPoint::Checkpoint(from) });
    }
    if epoch <= 1 {
        return Ok(StartPoint::Empty);
    }
    if completed.contains(&(epoch - 1)) {
        Ok(StartPoint::Checkpoint(epoch - 1))
    } else {
        Err(EpochStartError::Unknown { epoch, previous: epoch - 1 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::markers::{write_completed, write_restored, CheckpointKind, CompletedMarker};

    fn record(from: u64, next: u64) -> RestoredRecord {
        RestoredRecord::new(1, from, next)
    }

    #[test]
    fn nothing_completed_restores_from_nothing() {
        assert_eq!(choose_restore_point(&[], None), 0);
        assert_eq!(choose_restore_point(&[], Some(&record(0, 4))), 0);
    }

    #[test]
    fn the_newest_completed_checkpoint_is_chosen() {
        assert_eq!(choose_restore_point(&[1, 2, 5], None), 5);
        assert_eq!(choose_restore_point(&[1, 2, 5], Some(&record(2, 5))), 5, "next itself is not passed over");
    }

    #[test]
    fn a_marker_the_restored_record_passes_over_is_not_chosen() {
        // A deploy restored from 2 and numbered from 5: markers 3 and 4 belong
        // to a run the restore discarded, even if they landed on disk later.
        assert_eq!(choose_restore_point(&[1, 2, 3, 4], Some(&record(2, 5))), 2);
        assert_eq!(choose_restore_point(&[3], Some(&record(0, 4))), 0);
    }

    #[test]
    fn the_rule_on_disk_reads_markers_and_record_and_ignores_temporaries() {
        let dir = tempfile::tempdir().unwrap();
        let layout = CheckpointLayout::new(dir.path(), 1);
        for c in [1, 2, 3] {
            write_completed(&layout, &CompletedMarker::new(1, c, 1, CheckpointKind::Periodic, vec![], None)).unwrap();
        }
        write_restored(&layout, &record(2, 4)).unwrap();
        // A marker half-written by a kill sits under a temporary name.
        std::fs::write(layout.jobs_dir().join(".COMPLETED-9.tmp-1-0"), b"{").unwrap();
        let point = restore_point_on_disk(&layout).unwrap();
        assert_eq!(point.checkpoint, 2);
        assert_eq!(point.passed_over, vec![3]);
        assert_eq!(next_checkpoint_id(&layout, &point).unwrap(), 4);
    }

    #[test]
    fn the_restore_defects_choose_otherwise_and_only_where_they_apply() {
        use crate::defects::{Defect, Defects};
        let dir = tempfile::tempdir().unwrap();
        let layout = CheckpointLayout::new(dir.path(), 1);
        for c in [1, 3] {
            write_completed(&layout, &CompletedMarker::new(1, c, 1, CheckpointKind::Periodic, vec![], None)).unwrap();
        }
        // A deploy restored from 1 and numbered from 4: the late marker 3 is passed over.
        write_restored(&layout, &record(1, 4)).unwrap();
        let choose = |by, defects: &[Defect]| {
            engine_restore_point(&layout, RestoreRule::NewestCompleted, by, &Defects::of(defects)).unwrap()
        };
        assert_eq!(choose(ChosenBy::Restart, &[]).checkpoint, 1);
        assert_eq!(choose(ChosenBy::Recovery, &[]).checkpoint, 1);
        assert_eq!(choose(ChosenBy::Restart, &[Defect::RestoreIgnoresRestored]).checkpoint, 3);
        assert_eq!(choose(ChosenBy::Recovery, &[Defect::RestoreIgnoresRestored]).checkpoint, 1, "restarts only");
        assert_eq!(choose(ChosenBy::Recovery, &[Defect::RestoreFromSuperseded]).checkpoint, 3);
        assert_eq!(choose(ChosenBy::Restart, &[Defect::RestoreFromSuperseded]).checkpoint, 1, "recoveries only");
        // A snapshot of 5 without a marker.
        let backend = FileStateBackend::new(layout.clone());
        let header = crate::checkpoint::snapshot::SnapshotHeader { job: 1, checkpoint: 5, operator: 1, subtask: 0 };
        backend.write("op-1-0", &header, &crate::checkpoint::StateSlots::new()).unwrap();
        assert_eq!(choose(ChosenBy::Recovery, &[]).checkpoint, 1);
        assert_eq!(choose(ChosenBy::Recovery, &[Defect::RestoreWithoutMarker]).checkpoint, 5);
    }

    #[test]
    fn a_confirming_job_restores_from_its_newest_confirmed_checkpoint() {
        use super::super::commits::{write_confirmed, ConfirmedMarker};
        use crate::defects::{Defect, Defects};
        let dir = tempfile::tempdir().unwrap();
        let layout = CheckpointLayout::new(dir.path(), 1);
        let choose = |defects: &[Defect]| {
            engine_restore_point(&layout, RestoreRule::NewestConfirmed, ChosenBy::Restart, &Defects::of(defects))
                .unwrap()
                .checkpoint
        };
        assert_eq!(choose(&[]), 0, "nothing confirmed: from nothing");
        for c in [1, 2, 3] {
            write_completed(&layout, &CompletedMarker::new(1, c, 1, CheckpointKind::Periodic, vec![], None)).unwrap();
        }
        write_confirmed(&layout, &ConfirmedMarker::new(1, 1, vec![], "sinks", None)).unwrap();
        assert_eq!(choose(&[]), 1, "completed 2 and 3 are not confirmed");
        assert_eq!(choose(&[Defect::RestoreFromCompleted]), 3);
        assert_eq!(
            engine_restore_point(
                &layout,
                RestoreRule::NewestCompleted,
                ChosenBy::Restart,
                &Defects::of(&[Defect::RestoreFromCompleted])
            )
            .unwrap()
            .checkpoint,
            3,
            "the defect changes nothing for a job that does not confirm"
        );
    }

    #[test]
    fn epochs_start_from_the_previous_completed_checkpoint_or_the_restore() {
        let dir = tempfile::tempdir().unwrap();
        let layout = CheckpointLayout::new(dir.path(), 1);
        for c in [1, 2] {
            write_completed(&layout, &CompletedMarker::new(1, c, 1, CheckpointKind::Periodic, vec![], None)).unwrap();
        }
        assert_eq!(epoch_start(&layout, 1, &[]).unwrap(), StartPoint::Empty);
        assert_eq!(epoch_start(&layout, 3, &[]).unwrap(), StartPoint::Checkpoint(2));
        assert!(epoch_start(&layout, 5, &[]).is_err(), "checkpoint 4 never completed");
        write_restored(&layout, &RestoredRecord::new(1, 2, 5)).unwrap();
        assert_eq!(epoch_start(&layout, 5, &[]).unwrap(), StartPoint::Checkpoint(2));
        assert_eq!(epoch_start(&layout, 9, &[(0, 9)]).unwrap(), StartPoint::Empty);
    }
}
