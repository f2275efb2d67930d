//! Where each checkpoint artifact lives under the checkpoint directory.
//!
//! ```text
//! _jobs/<job>/COMPLETED-<id>        completion markers
//! _jobs/<job>/RESTORED              the newest redeploy's record
//! _jobs/<job>/CONFIRMED-<id>        commit-confirmed family: every sink's commit receipted
//! _jobs/<job>/receipts/<participant>/receipt-<id>       a commit's receipt
//! _jobs/<job>/unresolved/<participant>/unresolved-<id>  a handle the in-doubt walk left
//! _state/<job>/v<gen>/<participant>/checkpoint-<id>.snap[.meta]
//! _state/<job>/v<gen>/<participant>.cp-<id>/   a RocksDB checkpoint (its sidecar as above)
//! _state/<job>/v<gen>/<participant>.db/        a RocksDB participant's live database
//! ```
//! `_state/` lives under the checkpoint directory, or under the root
//! `--state` names ([`StateRoot`]).
//! Only this module joins these paths, so the engine, the collector and the
//! checks agree on them.

use std::path::{Path, PathBuf};

use clink_basics::ids::OperatorId;

use super::identity::{RunCell, RunIdentity};
use super::state_root::StateRoot;

/// The first state layout generation. A restore at another parallelism
/// writes one past its restore point's (`crate::operators::rescale`); the markers name
/// the generation of each checkpoint.
pub const GENERATION: u32 = 1;

/// A participant's name: the operator id and subtask index.
pub fn participant_name(operator: OperatorId, subtask: u32) -> String {
    format!("op-{operator}-{subtask}")
}

/// Splits a participant name back into operator id and subtask.
pub fn parse_participant_name(name: &str) -> Option<(OperatorId, u32)> {
    let rest = name.strip_prefix("op-")?;
    let (op, sub) = rest.rsplit_once('-')?;
    let op = OperatorId::parse(op)?;
    let sub = clink_basics::ids::parse_decimal_u64(sub).and_then(|s| u32::try_from(s).ok())?;
    Some((op, sub))
}

#[derive(Debug, Clone)]
pub struct CheckpointLayout {
    root: PathBuf,
    job: u64,
    /// The run writing through this layout and its clones, once it holds
    /// the directory (`fence::acquire`): what every writer stamps.
    writer: RunCell,
    /// Where `_state/` lives and which backend writes it.
    state: StateRoot,
}

impl CheckpointLayout {
    pub fn new(root: impl Into<PathBuf>, job: u64) -> Self {
        Self { root: root.into(), job, writer: RunCell::default(), state: StateRoot::default() }
    }

    /// The same layout, its state kept where `state` says.
    pub fn with_state(self, state: StateRoot) -> Self {
        Self { state, ..self }
    }

    /// Where this layout's state lives and which backend writes it.
    pub fn state(&self) -> &StateRoot {
        &self.state
    }

    /// The run writing through this layout, if a run holds the directory.
    pub fn writer(&self) -> Option<RunIdentity> {
        self.writer.get()
    }

    /// Records the run that took the directory's lock (`fence::acquire`).
    pub(super) fn set_writer(&self, run: RunIdentity) -> Result<(), String> {
        self.writer.set(run)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn job(&self) -> u64 {
        self.job
    }

    pub fn jobs_dir(&self) -> PathBuf {
        self.root.join("_jobs").join(self.job.to_string())
    }

    pub fn completed_marker(&self, checkpoint: u64) -> PathBuf {
        self.jobs_dir().join(completed_marker_name(checkpoint))
    }

    /// The record of a checkpoint imported from a dataset (`clink run
    /// --restore-from-dir`): its id, as decimal text.
    pub fn imported_record(&self) -> PathBuf {
        self.jobs_dir().join(IMPORTED_NAME)
    }

    pub fn restored_record(&self) -> PathBuf {
        self.jobs_dir().join(RESTORED_NAME)
    }

    pub fn receipts_dir(&self, participant: &str) -> PathBuf {
        self.jobs_dir().join("receipts").join(participant)
    }

    pub fn receipt(&self, participant: &str, checkpoint: u64) -> PathBuf {
        self.receipts_dir(participant).join(format!("{RECEIPT_PREFIX}{checkpoint}"))
    }

    pub fn unresolved_dir(&self, participant: &str) -> PathBuf {
        self.jobs_dir().join("unresolved").join(participant)
    }

    pub fn unresolved(&self, participant: &str, checkpoint: u64) -> PathBuf {
        self.unresolved_dir(participant).join(format!("{UNRESOLVED_PREFIX}{checkpoint}"))
    }

    pub fn confirmed_marker(&self, checkpoint: u64) -> PathBuf {
        self.jobs_dir().join(confirmed_marker_name(checkpoint))
    }

    pub fn state_root(&self) -> PathBuf {
        self.state.base(&self.root).join("_state").join(self.job.to_string())
    }

    pub fn generation_dir(&self, generation: u32) -> PathBuf {
        self.state_root().join(format!("v{generation}"))
    }

    pub fn participant_dir(&self, generation: u32, participant: &str) -> PathBuf {
        self.generation_dir(generation).join(participant)
    }

    pub fn snapshot(&self, generation: u32, participant: &str, checkpoint: u64) -> PathBuf {
        self.participant_dir(generation, participant).join(snapshot_name(checkpoint))
    }

    pub fn snapshot_meta(&self, generation: u32, participant: &str, checkpoint: u64) -> PathBuf {
        self.participant_dir(generation, participant).join(snapshot_meta_name(checkpoint))
    }

    /// A participant's RocksDB checkpoint of `checkpoint` (a directory).
    pub fn rocks_checkpoint(&self, generation: u32, participant: &str, checkpoint: u64) -> PathBuf {
        self.generation_dir(generation).join(rocks_checkpoint_name(participant, checkpoint))
    }

    /// A RocksDB participant's live database, which its checkpoints are taken of.
    pub fn rocks_live(&self, generation: u32, participant: &str) -> PathBuf {
        self.generation_dir(generation).join(format!("{participant}.db"))
    }
}

/// `<participant>.cp-<id>`: a RocksDB checkpoint directory's name.
pub fn rocks_checkpoint_name(participant: &str, checkpoint: u64) -> String {
    format!("{participant}.cp-{checkpoint}")
}

/// The participant and checkpoint a RocksDB checkpoint directory's name says.
pub fn parse_rocks_checkpoint_name(name: &str) -> Option<(&str, u64)> {
    let (participant, id) = name.rsplit_once(".cp-")?;
    parse_participant_name(participant)?;
    Some((participant, clink_basics::ids::parse_decimal_u64(id)?))
}

pub const RESTORED_NAME: &str = "RESTORED";
/// The record of a checkpoint imported from a dataset (its id, decimal text).
pub const IMPORTED_NAME: &str = "IMPORTED";
pub const RECEIPT_PREFIX: &str = "receipt-";
pub const UNRESOLVED_PREFIX: &str = "unresolved-";
pub const COMPLETED_PREFIX: &str = "COMPLETED-";

pub fn completed_marker_name(checkpoint: u64) -> String {
    format!("{COMPLETED_PREFIX}{checkpoint}")
}

pub fn snapshot_name(checkpoint: u64) -> String {
    format!("checkpoint-{checkpoint}.snap")
}

pub fn snapshot_meta_name(checkpoint: u64) -> String {
    format!("checkpoint-{checkpoint}.snap.meta")
}

/// The checkpoint id of a `COMPLETED-<id>` name: the prefix and a canonical
/// positive decimal, nothing else.
pub fn parse_completed_marker_name(name: &str) -> Option<u64> {
    let id = clink_basics::ids::parse_decimal_u64(name.strip_prefix(COMPLETED_PREFIX)?)?;
    (id > 0).then_some(id)
}

pub const CONFIRMED_PREFIX: &str = "CONFIRMED-";

pub fn confirmed_marker_name(checkpoint: u64) -> String {
    format!("{CONFIRMED_PREFIX}{checkpoint}")
}

/// The checkpoint id of a `CONFIRMED-<id>` name.
pub fn parse_confirmed_marker_name(name: &str) -> Option<u64> {
    let id = clink_basics::ids::parse_decimal_u64(name.strip_prefix(CONFIRMED_PREFIX)?)?;
    (id > 0).then_some(id)
}

/// The checkpoint id of a `checkpoint-<id>.snap` name.
pub fn parse_snapshot_name(name: &str) -> Option<u64> {
    let id = clink_basics::ids::parse_decimal_u64(name.strip_prefix("checkpoint-")?.strip_suffix(".snap")?)?;
    (id > 0).then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_names_are_exactly_prefix_and_id() {
        assert_eq!(parse_completed_marker_name("COMPLETED-12"), Some(12));
        for bad in
            ["COMPLETED-", "COMPLETED-0", "COMPLETED-012", "COMPLETED-1.tmp", ".COMPLETED-1.tmp-5-0", "COMPLETED--1"]
        {
            assert_eq!(parse_completed_marker_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn participant_names_round_trip() {
        let name = participant_name(OperatorId(u64::MAX), 3);
        assert_eq!(parse_participant_name(&name), Some((OperatorId(u64::MAX), 3)));
        assert_eq!(parse_participant_name("op-1-x"), None);
    }
}
