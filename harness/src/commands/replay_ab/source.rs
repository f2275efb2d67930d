//! Where an A/B run's epochs come from: a run's capture and checkpoint
//! directories, or an incident bundle.
//!
//! From a bundle, this build reads every epoch through the bytes the
//! manifest vouched for (after `bundle.artifacts` has hashed every file),
//! with the bundle's own rule for where an epoch starts (its restores
//! included). The candidate is handed the bundle's `capture/` and
//! `checkpoint/` directories, which mirror a run's, and starts each epoch by
//! its own rule over them: an epoch where that rule, as this build applies
//! it to the same directories, would start from another state than the
//! bundle's is unavailable, never compared. Once the candidates have run,
//! the bundle is hashed whole again: a bundle that changed under them is
//! refused, whatever the comparisons said.

use std::path::{Path, PathBuf};

use clink_bundle::Bundle;
use clink_engine::job::JobGraph;
use clink_replay::bundle::{epoch_entry, load_bundle_epoch, BundleEpochs};
use clink_replay::{list_captured, load_epoch, EpochEvidence, EpochRef, ReplayError, StartState};

pub(super) enum Source {
    Dirs { capture: PathBuf, checkpoint: PathBuf, job: u64 },
    Bundle { root: PathBuf, bundle: Box<Bundle>, epochs: Box<BundleEpochs>, graph: Option<JobGraph> },
}

impl Source {
    /// A bundle, read and checked whole before anything is replayed from it.
    pub(super) fn open_bundle(root: &Path) -> Result<Source, String> {
        let bundle = clink_bundle::manifest::read_bundle(root).map_err(|e| format!("{}: {e}", root.display()))?;
        let artifacts = clink_verify::artifacts_check(&bundle);
        if artifacts.status != clink_basics::status::Status::Passed {
            return Err(format!(
                "{}: bundle.artifacts {}: {}; nothing is replayed from bytes the manifest does not vouch for",
                root.display(),
                artifacts.status.as_str(),
                artifacts.reason
            ));
        }
        clink_verify::claims_hold(&bundle).map_err(|e| format!("{}: {e}", root.display()))?;
        let graph = match bundle.job_graph() {
            Ok(known) => Some(known.graph),
            Err(clink_bundle::graph::GraphProblem::Absent(_)) => None,
            Err(broken) => return Err(format!("{}: the job graph does not hold: {broken}", root.display())),
        };
        let epochs = Box::new(BundleEpochs::read(&bundle));
        Ok(Source::Bundle { root: root.to_path_buf(), bundle: Box::new(bundle), epochs, graph })
    }

    /// After the candidates ran: every file of a bundle still hashes as its
    /// manifest says, so what they read is what was vouched for.
    pub(super) fn still_vouched(&self) -> Result<(), String> {
        let Source::Bundle { root, bundle, .. } = self else { return Ok(()) };
        let artifacts = clink_verify::artifacts_check(bundle);
        if artifacts.status != clink_basics::status::Status::Passed {
            return Err(format!(
                "{}: the bundle changed while the candidate read it: bundle.artifacts {}: {}; no comparison is reported",
                root.display(),
                artifacts.status.as_str(),
                artifacts.reason
            ));
        }
        Ok(())
    }

    pub(super) fn capture_dir(&self) -> PathBuf {
        match self {
            Source::Dirs { capture, .. } => capture.clone(),
            Source::Bundle { root, .. } => root.join("capture"),
        }
    }

    pub(super) fn checkpoint_dir(&self) -> PathBuf {
        match self {
            Source::Dirs { checkpoint, .. } => checkpoint.clone(),
            Source::Bundle { root, .. } => root.join("checkpoint"),
        }
    }

    pub(super) fn job(&self) -> u64 {
        match self {
            Source::Dirs { job, .. } => *job,
            Source::Bundle { bundle, .. } => bundle.job_id(),
        }
    }

    /// What the report names as the evidence.
    pub(super) fn describe(&self) -> String {
        match self {
            Source::Dirs { capture, checkpoint, .. } => {
                format!("captures {}, checkpoints {}", capture.display(), checkpoint.display())
            }
            Source::Bundle { root, .. } => format!("bundle {}", root.display()),
        }
    }

    /// Every captured epoch, in operator, subtask, epoch order.
    pub(super) fn epochs(&self) -> Result<Vec<EpochRef>, String> {
        match self {
            Source::Dirs { capture, .. } => {
                Ok(list_captured(capture).map_err(|e| e.to_string())?.into_iter().map(|(at, _)| at).collect())
            }
            Source::Bundle { bundle, .. } => {
                let mut found: Vec<EpochRef> = bundle
                    .manifest
                    .epochs
                    .iter()
                    .map(|e| EpochRef { operator: e.operator_id(), subtask: e.subtask, epoch: e.epoch })
                    .collect();
                found.sort_by_key(|r| (r.operator, r.subtask, r.epoch));
                Ok(found)
            }
        }
    }

    /// One epoch's evidence as this build replays it.
    pub(super) fn load(&self, at: &EpochRef) -> Result<EpochEvidence, ReplayError> {
        match self {
            Source::Dirs { capture, checkpoint, job } => load_epoch(capture, checkpoint, *job, at),
            Source::Bundle { bundle, epochs, graph, .. } => {
                let entry = epoch_entry(bundle, at)?;
                let evidence = load_bundle_epoch(bundle, entry, epochs, graph.as_ref())?;
                self.candidate_starts_alike(&evidence)?;
                Ok(evidence)
            }
        }
    }

    /// The candidate places the epoch by the directories alone; it must land
    /// where the bundle's rule does.
    fn candidate_starts_alike(&self, ours: &EpochEvidence) -> Result<(), ReplayError> {
        let at = &ours.at;
        let theirs = load_epoch(&self.capture_dir(), &self.checkpoint_dir(), self.job(), at).map_err(|e| {
            ReplayError::Unavailable(format!("a candidate handed the bundle's directories could not place it: {e}"))
        })?;
        let start = |s: &StartState| match s {
            StartState::Empty => 0,
            StartState::Snapshot { checkpoint, .. } => *checkpoint,
        };
        if start(&ours.start) != start(&theirs.start) {
            return Err(ReplayError::Unavailable(format!(
                "the bundle starts it from checkpoint {} (restores its traces record), the directories alone from {}",
                start(&ours.start),
                start(&theirs.start)
            )));
        }
        Ok(())
    }
}
