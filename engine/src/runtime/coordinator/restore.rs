//! Where the coordinator restores from, and the redeploy: before anything
//! is written, every restore (the directory's own history or a dataset) is
//! checked and mapped onto the job ([`crate::state_map`]); on a recovery or
//! a restart the restore rule chooses the point, the RESTORED record is made
//! durable, and the subtasks are deployed from it. It never chooses a
//! restore point itself: [`engine_restore_point`] does.

use crate::checkpoint::dataset::{self, Dataset};
use crate::checkpoint::durable::remove_stale_temps;
use crate::checkpoint::markers::write_restored;
use crate::checkpoint::{
    engine_restore_point, next_checkpoint_id, restore_point_on_disk_by, CheckpointLayout, ChosenBy, RestorePoint,
    RestoreRule, RestoredRecord, GENERATION,
};
use crate::fault::{kill_point, FaultPoint};
use crate::runtime::deploy;
use crate::runtime::{RunError, RunOptions};
use crate::state_map::{map_state, CompatError, StateMap};
use crate::trace_event;

use super::Coordinator;

impl Coordinator {
    /// Whether an earlier run of this job left anything in the checkpoint directory.
    pub(super) fn has_history(&self) -> bool {
        self.layout.jobs_dir().exists() || self.layout.state_root().exists()
    }

    /// A new process over an earlier run's directory: read the markers once,
    /// then redeploy from the restore point.
    pub(super) fn recover(&mut self) -> Result<(), RunError> {
        remove_stale_temps(&self.layout.jobs_dir()).map_err(|e| RunError::Failed(e.to_string()))?;
        if self.protocol.confirms() {
            return self.recover_confirmed();
        }
        let point = self.restore_point(ChosenBy::Recovery)?;
        trace_event!(
            CoordRecovers,
            job = self.layout.job(),
            epoch = self.epoch(),
            completed = point.checkpoint,
            confirmed = 0u64
        );
        self.redeploy(point)
    }

    /// A recovery of a job whose sinks confirm their commits: the confirmed
    /// point is the newest CONFIRMED marker, and the job is held for the
    /// in-doubt walk above it before it redeploys.
    fn recover_confirmed(&mut self) -> Result<(), RunError> {
        let confirmed = restore_point_on_disk_by(&self.layout, RestoreRule::NewestConfirmed)
            .map_err(|e| RunError::Failed(e.to_string()))?
            .checkpoint;
        self.protocol.seed_confirmed(confirmed);
        trace_event!(
            CoordRecovers,
            job = self.layout.job(),
            epoch = self.epoch(),
            completed = self.newest_completed()?,
            confirmed = confirmed
        );
        self.resolve_then_redeploy(ChosenBy::Recovery)
    }

    /// The job's restore rule: the CONFIRMED rule when its sinks confirm
    /// their commits, else the COMPLETED rule.
    pub(super) fn restore_rule(&self) -> RestoreRule {
        RestoreRule::for_confirmation(self.options.job.requires_commit_confirmation())
    }

    /// The restore rule, applied to the directory now.
    pub(super) fn restore_point(&self, chosen_by: ChosenBy) -> Result<RestorePoint, RunError> {
        engine_restore_point(&self.layout, self.restore_rule(), chosen_by, &self.options.env.defects)
            .map_err(|e| RunError::Failed(e.to_string()))
    }

    /// Records the restore point and deploys from it: `next` is the larger of
    /// the disk's next id and this coordinator's own, and the RESTORED record
    /// is durable before any subtask starts.
    pub(super) fn redeploy(&mut self, point: RestorePoint) -> Result<(), RunError> {
        let state = match point.checkpoint {
            0 => None,
            checkpoint => Some(
                map_state(&self.layout, checkpoint, &self.options.job, self.options.allow_non_restored_state)
                    .map_err(|e| RunError::Failed(format!("restoring checkpoint {checkpoint}: {e}")))?,
            ),
        };
        if let Some(state) = &state {
            for dropped in &state.dropped {
                eprintln!("clink: job {}: dropping state (--allow-non-restored-state): {dropped}", self.layout.job());
            }
        }
        let generation = state.as_ref().map_or(GENERATION, StateMap::next_generation);
        self.backend = self.backend.clone().writing_generation(generation);
        let disk_next = next_checkpoint_id(&self.layout, &point)
            .map_err(|e| RunError::Failed(format!("reading the checkpoint directory: {e}")))?;
        let next = self.protocol.redeployed(point.checkpoint, disk_next);
        kill_point(FaultPoint::CoordinatorBeforeRestoredRecord, point.checkpoint);
        // DEFECT no_restored_record: the redeploy writes no RESTORED record.
        #[cfg(any(test, feature = "defects"))]
        let write_record = !self.options.env.defects.has(crate::defects::Defect::NoRestoredRecord);
        #[cfg(not(any(test, feature = "defects")))]
        let write_record = true;
        if write_record {
            let record = RestoredRecord::new(self.layout.job(), point.checkpoint, next);
            write_restored(&self.layout, &record).map_err(|e| RunError::Failed(e.to_string()))?;
        }
        trace_event!(Redeploy, job = self.layout.job(), restore = point.checkpoint, next = next);
        for (op, rescale) in state.iter().flat_map(|s| &s.rescaled) {
            // A scope marker: the specification keys a sink by its index and
            // fixes the set for a run; a rescale changes both.
            trace_event!(
                Rescale,
                job = self.layout.job(),
                op = op.0,
                from = rescale.from,
                to = rescale.to,
                mode = "restore"
            );
            eprintln!(
                "clink: job {}: operator {op} restored at parallelism {} from {} (state re-divided; layout generation {generation})",
                self.layout.job(),
                rescale.to,
                rescale.from
            );
        }
        // What the run restores from is complete, whatever this process saw.
        self.completed.completed(point.checkpoint);
        self.deployment = Some(deploy::deploy(
            &self.options,
            &self.participants,
            &self.backend,
            point.checkpoint,
            state.as_ref(),
            self.epoch(),
            &self.completed,
        )?);
        Ok(())
    }
}

/// Whether this build ignores every restore (the `defect-ignore-restore` variant).
pub(super) fn ignores_restores() -> bool {
    cfg!(feature = "defect-ignore-restore")
}

/// What a run restores from, checked before anything is written: a dataset
/// (verified, of this job, holding the checkpoint asked for, into a
/// directory with no history of the job), or the directory's own restore
/// point; either way the checkpoint's state is mapped onto the job, and
/// state the job would leave behind refuses the run unless dropping it was
/// asked for.
pub(super) fn preflight_restore(options: &RunOptions, layout: &CheckpointLayout) -> Result<Option<Dataset>, RunError> {
    let refused = |what: String| RunError::Refused(what);
    let job = &options.job;
    let map = |layout: &CheckpointLayout, checkpoint: u64| -> Result<StateMap, RunError> {
        map_state(layout, checkpoint, job, options.allow_non_restored_state).map_err(|e| match e {
            CompatError::Refused { .. } | CompatError::Rescaled { .. } | CompatError::StateRoot { .. } => {
                refused(format!("restore refused: {e}"))
            }
            // Damaged state is a failed restore, not bad usage.
            other => RunError::Failed(format!("restoring checkpoint {checkpoint}: {other}")),
        })
    };
    let history = layout.jobs_dir().exists() || layout.state_root().exists();
    let Some(from) = &options.restore_from else {
        if history {
            let rule = RestoreRule::for_confirmation(job.requires_commit_confirmation());
            let point = restore_point_on_disk_by(layout, rule)
                .map_err(|e| refused(format!("the checkpoint directory: {e}")))?;
            if point.checkpoint > 0 {
                map(layout, point.checkpoint)?;
            }
        }
        return Ok(None);
    };
    if history {
        return Err(refused(format!(
            "--restore-from-dir: {} already holds job {}'s checkpoints; resume it without --restore-from-dir, or restore into a new --checkpoint-dir",
            options.checkpoint_dir.display(),
            job.job_id
        )));
    }
    let dataset = dataset::verify(&from.dataset, None).map_err(|e| refused(format!("--restore-from-dir: {e}")))?;
    if dataset.job != job.job_id {
        return Err(refused(format!(
            "--restore-from-dir: the dataset holds job {}, and this job is job {}",
            dataset.job, job.job_id
        )));
    }
    if dataset.index.checkpoint != from.checkpoint {
        return Err(refused(format!(
            "--restore-from-checkpoint-id {}: the dataset holds checkpoint {}",
            from.checkpoint, dataset.index.checkpoint
        )));
    }
    map(&dataset.layout(), from.checkpoint)?;
    Ok(Some(dataset))
}
