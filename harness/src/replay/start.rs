//! Where an epoch's replay starts.
//!
//! Epoch `N` holds the events between checkpoints `N-1` and `N`, so it starts
//! from checkpoint `N-1`, except the first epoch of a restored run: a run that
//! restored from `R` numbers from `next`, so epoch `next` starts from `R`. The
//! RESTORED record names the newest restore; the traces' Redeploy events can
//! name earlier ones (`known_restores`). Any other epoch starts from `N-1` only
//! when `N-1` completed (its marker is on disk); otherwise the state it started
//! from is not known and the replay is unavailable.

use clink_engine::checkpoint::markers::{list_completed, read_restored};
use clink_engine::checkpoint::CheckpointLayout;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartPoint {
    /// From nothing: the first epoch of a run that started fresh, or restored from 0.
    Empty,
    Checkpoint(u64),
}

/// `known_restores`: (restored_from, next) pairs beyond the RESTORED record.
pub fn epoch_start(layout: &CheckpointLayout, epoch: u64, known_restores: &[(u64, u64)]) -> Result<StartPoint, String> {
    let restored = read_restored(layout).map_err(|e| e.to_string())?;
    let mut restores: Vec<(u64, u64)> = known_restores.to_vec();
    if let Some(r) = &restored {
        restores.push((r.restored_from, r.next));
    }
    if let Some(&(from, _)) = restores.iter().find(|(_, next)| *next == epoch) {
        return Ok(if from == 0 { StartPoint::Empty } else { StartPoint::Checkpoint(from) });
    }
    if epoch == 1 {
        return Ok(StartPoint::Empty);
    }
    let completed = list_completed(layout).map_err(|e| e.to_string())?;
    if completed.contains(&(epoch - 1)) {
        Ok(StartPoint::Checkpoint(epoch - 1))
    } else {
        Err(format!(
            "epoch {epoch} starts from checkpoint {}, which did not complete, and no recorded restore starts a run at epoch {epoch}",
            epoch - 1
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clink_engine::checkpoint::markers::{write_completed, write_restored, CheckpointKind, CompletedMarker};
    use clink_engine::checkpoint::RestoredRecord;

    #[test]
    fn epochs_start_from_the_previous_completed_checkpoint_or_the_restore() {
        let dir = tempfile::tempdir().unwrap();
        let layout = CheckpointLayout::new(dir.path(), 1);
        for c in [1, 2] {
            write_completed(&layout, &CompletedMarker::new(1, c, 1, CheckpointKind::Periodic, vec![])).unwrap();
        }
        assert_eq!(epoch_start(&layout, 1, &[]), Ok(StartPoint::Empty));
        assert_eq!(epoch_start(&layout, 3, &[]), Ok(StartPoint::Checkpoint(2)));
        assert!(epoch_start(&layout, 5, &[]).is_err(), "checkpoint 4 never completed");
        write_restored(&layout, &RestoredRecord::new(1, 2, 5)).unwrap();
        assert_eq!(epoch_start(&layout, 5, &[]), Ok(StartPoint::Checkpoint(2)));
        assert_eq!(epoch_start(&layout, 9, &[(0, 9)]), Ok(StartPoint::Empty));
    }
}
