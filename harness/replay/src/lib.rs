//! clink-replay: rebuild a captured operator through the engine's registry,
//! restore its starting state, put its clock under manual control, and hand
//! it the captured events through the same driver production used.
//!
//! This crate reads the evidence of one epoch, from a run's directories
//! ([`load_epoch`]) or from an incident bundle ([`bundle::load_bundle_epoch`]),
//! with the engine's own rule for where an epoch starts
//! ([`clink_engine::checkpoint::epoch_start`]); replays it ([`replay`]) and
//! twice to compare ([`verify`]); dumps and compares emissions
//! ([`emissions`]), compares rows key by key ([`compare`]); and freezes an
//! epoch as a regression bundle ([`regression`]).
//!
//! It never writes into a checkpoint or capture directory, never replays an
//! operator that calls out of the process, and never judges a bundle: the
//! verifier turns what it finds into check statuses.
//!
//! ```no_run
//! use clink_replay::{load_epoch, verify, EpochRef};
//! use clink_basics::ids::OperatorId;
//! let at = EpochRef { operator: OperatorId(3), subtask: 0, epoch: 12 };
//! let evidence = load_epoch("capture".as_ref(), "checkpoints".as_ref(), 1, &at)?;
//! assert!(verify(&evidence)?.identical);
//! # Ok::<(), clink_replay::ReplayError>(())
//! ```

pub mod ab;
pub mod bundle;
pub mod compare;
pub mod emissions;
pub mod regression;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clink_basics::ids::{parse_decimal_u64, OperatorId};
use clink_engine::capture::{read_capture, subtask_dir, Capture, OpSpecFile};
use clink_engine::checkpoint::backend::verify_snapshot;
use clink_engine::checkpoint::markers::read_completed;
use clink_engine::checkpoint::{participant_name, CheckpointLayout, FileStateBackend, StateSlots};
use clink_engine::job::PlannedOperator;
use clink_engine::operators::driver::Driver;
use clink_engine::operators::{Environment, OperatorKind};
use clink_engine::registry;
use clink_engine::timers::Clock;
use clink_engine::value::Row;
use thiserror::Error;

use clink_engine::checkpoint::{epoch_start, StartPoint};

/// A capture file larger than this is refused unread.
pub const MAX_CAPTURE_BYTES: u64 = 1 << 30;

/// Where a capture and its starting state live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpochRef {
    pub operator: OperatorId,
    pub subtask: u32,
    pub epoch: u64,
}

impl std::fmt::Display for EpochRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "operator {} subtask {} epoch {}", self.operator, self.subtask, self.epoch)
    }
}

#[derive(Debug, Error)]
pub enum ReplayError {
    /// The evidence is malformed or names something it should not: exit 2.
    #[error("{0}")]
    Refused(String),
    /// This build cannot replay it (a multi-input operator, a sink, ...).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// Evidence replay needs is missing (a capture, a starting snapshot).
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The operator failed while replaying.
    #[error("the operator failed during replay: {0}")]
    Failed(String),
}

/// The starting state of a replay.
#[derive(Debug, Clone)]
pub enum StartState {
    /// A fresh operator (the run started from nothing).
    Empty,
    Snapshot {
        checkpoint: u64,
        slots: StateSlots,
    },
}

/// Everything one epoch's replay needs.
#[derive(Debug, Clone)]
pub struct EpochEvidence {
    pub at: EpochRef,
    pub spec: OpSpecFile,
    /// Shared: a bundle's loader keeps the captures it decoded last.
    pub capture: Arc<Capture>,
    pub start: StartState,
}

/// What a replay produced.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayOutcome {
    pub emissions: Vec<Row>,
    /// Only a prefix of the epoch was replayed (truncated or cut-short capture).
    pub partial: bool,
    pub notes: Vec<String>,
    /// The operator's state once every captured event was handed over: what
    /// its snapshot at the epoch's barrier holds, when the epoch is whole.
    pub end_state: StateSlots,
}

/// Reads a capture file, refusing what is not one.
pub fn read_capture_file(path: &Path) -> Result<Capture, ReplayError> {
    let bytes = clink_basics::files::read_bounded(path, MAX_CAPTURE_BYTES)
        .map_err(|e| ReplayError::Unavailable(format!("{}: {e}", path.display())))?;
    read_capture(&bytes).map_err(|e| ReplayError::Refused(format!("{}: {e}", path.display())))
}

/// The operator a spec describes, if this build can replay it.
pub fn replayable(spec: &OpSpecFile) -> Result<PlannedOperator, ReplayError> {
    match registry::kind_of(&spec.type_name) {
        None => {
            return Err(ReplayError::Unsupported(format!(
                "operator type {:?} is not in this build's registry",
                spec.type_name
            )))
        }
        Some(OperatorKind::Transform) => {}
        Some(kind) => {
            return Err(ReplayError::Unsupported(format!(
                "operator {} is a {kind:?}; replay rebuilds transforms only",
                spec.id
            )))
        }
    }
    if spec.inputs.len() != 1 {
        return Err(ReplayError::Unsupported(format!(
            "operator {} ({}) has {} inputs; replay supports single-input operators only, since the interleaving of several inputs is not captured",
            spec.id,
            spec.type_name,
            spec.inputs.len()
        )));
    }
    spec.plan().map_err(|e| ReplayError::Refused(e.to_string()))
}

/// Loads one epoch's evidence from a capture directory and a checkpoint
/// directory, choosing its starting state with [`epoch_start`].
pub fn load_epoch(
    capture_dir: &Path,
    checkpoint_dir: &Path,
    job: u64,
    at: &EpochRef,
) -> Result<EpochEvidence, ReplayError> {
    let dir = subtask_dir(capture_dir, at.operator, at.subtask);
    let spec = OpSpecFile::read(&dir.join(clink_engine::capture::OP_SPEC_NAME))
        .map_err(|e| ReplayError::Unavailable(e.to_string()))?;
    check_spec_names(&spec, job, at)?;
    let capture = read_capture_file(&dir.join(clink_engine::capture::epoch_file_name(at.epoch)))?;
    check_capture_names(&capture, job, at)?;
    let layout = CheckpointLayout::new(checkpoint_dir, job);
    let start = match epoch_start(&layout, at.epoch, &[]).map_err(|e| ReplayError::Unavailable(e.to_string()))? {
        StartPoint::Empty => StartState::Empty,
        StartPoint::Checkpoint(c) => {
            let name = participant_name(at.operator, at.subtask);
            let generation = start_generation(&layout, &spec, at, c)?;
            if pruned(&layout, generation, &name, c) {
                return Err(ReplayError::Unavailable(format!(
                    "its starting checkpoint {c} was pruned by retention (its COMPLETED marker remains, its \
                     snapshot and sidecar are gone): a run keeps --retain-checkpoints checkpoints, and the one \
                     every epoch --capture-retain-epochs keeps starts from; raise them before the incident"
                )));
            }
            let snapshot = FileStateBackend::new(layout)
                .read(generation, &name, c)
                .map_err(|e| ReplayError::Unavailable(format!("the starting state (checkpoint {c}): {e}")))?;
            StartState::Snapshot { checkpoint: c, slots: snapshot.slots }
        }
    };
    Ok(EpochEvidence { at: at.clone(), spec, capture: Arc::new(capture), start })
}

/// Whether the snapshot of `participant` at `checkpoint`, a completed
/// one, is gone whole (snapshot and sidecar), as pruning leaves it: one
/// without the other is damage, reported as such by the read.
fn pruned(layout: &CheckpointLayout, generation: u32, participant: &str, checkpoint: u64) -> bool {
    let gone = |p: PathBuf| matches!(std::fs::symlink_metadata(p), Err(e) if e.kind() == std::io::ErrorKind::NotFound);
    gone(layout.snapshot(generation, participant, checkpoint))
        && gone(layout.snapshot_meta(generation, participant, checkpoint))
}

/// The layout generation of an epoch's starting checkpoint, from its marker.
/// An epoch whose operator ran at another parallelism than the checkpoint
/// holds started from a re-division of that checkpoint's state (a restore at
/// another parallelism), which is not replayed: unavailable, never a
/// snapshot of another key range.
fn start_generation(layout: &CheckpointLayout, spec: &OpSpecFile, at: &EpochRef, c: u64) -> Result<u32, ReplayError> {
    let marker = read_completed(layout, c)
        .map_err(|e| ReplayError::Unavailable(format!("the starting checkpoint {c}'s marker: {e}")))?;
    let prefix = format!("op-{}-", at.operator);
    let held = marker.participants.iter().filter(|p| p.starts_with(&prefix)).count();
    if held != spec.parallelism as usize {
        return Err(ReplayError::Unavailable(format!(
            "its starting checkpoint {c} holds operator {} at parallelism {held}, and the epoch ran it at {}: \
             the epoch started from a restore at another parallelism, whose re-divided state is not replayed",
            at.operator, spec.parallelism
        )));
    }
    Ok(marker.generation)
}

pub fn check_spec_names(spec: &OpSpecFile, job: u64, at: &EpochRef) -> Result<(), ReplayError> {
    if spec.job_id() != job || spec.operator_id() != at.operator.0 || spec.subtask != at.subtask {
        return Err(ReplayError::Refused(format!(
            "op.json names job {} operator {} subtask {}, not job {job} {at}",
            spec.job, spec.id, spec.subtask
        )));
    }
    Ok(())
}

pub fn check_capture_names(capture: &Capture, job: u64, at: &EpochRef) -> Result<(), ReplayError> {
    let h = &capture.header;
    if h.job != job || h.operator != at.operator.0 || h.subtask != at.subtask || h.epoch != at.epoch {
        return Err(ReplayError::Refused(format!(
            "the capture names job {} operator {} subtask {} epoch {}, not job {job} {at}",
            h.job, h.operator, h.subtask, h.epoch
        )));
    }
    Ok(())
}

/// Reads a starting snapshot that sits at `snap` beside its sidecar.
pub fn read_start_snapshot(snap: &Path, meta: &Path, checkpoint: u64) -> Result<StartState, ReplayError> {
    let verified = verify_snapshot(snap, meta).map_err(|e| ReplayError::Refused(e.to_string()))?;
    Ok(StartState::Snapshot { checkpoint, slots: verified.slots })
}

/// Replays one epoch once.
pub fn replay(evidence: &EpochEvidence) -> Result<ReplayOutcome, ReplayError> {
    let planned = replayable(&evidence.spec)?;
    let transform =
        planned.build_transform(&Environment::default()).map_err(|e| ReplayError::Refused(e.to_string()))?;
    let mut driver = Driver::new(transform, Clock::Manual(0));
    if let StartState::Snapshot { slots, .. } = &evidence.start {
        driver.restore(slots).map_err(|e| ReplayError::Refused(format!("restoring the starting state: {e}")))?;
    }
    let mut emissions = Vec::new();
    for event in &evidence.capture.events {
        driver.handle_ref(event, &mut emissions).map_err(|e| ReplayError::Failed(e.to_string()))?;
    }
    let header = &evidence.capture.header;
    let mut notes = Vec::new();
    let partial = !evidence.capture.is_whole();
    if header.truncated {
        notes.push(format!(
            "partial: the capture is truncated at its bound ({} records); {} of {} events were replayed",
            header.bound,
            evidence.capture.events.len(),
            header.true_events
        ));
    } else if evidence.capture.cut_short {
        notes.push(format!(
            "partial: the capture file is cut short; {} of the {} events it should hold were replayed",
            evidence.capture.events.len(),
            header.stored_events
        ));
    }
    if !header.holds_control_events() {
        notes.push(format!(
            "capture version {} holds records only: watermarks and timer fires are not replayed",
            header.version
        ));
    }
    let end_state = driver.snapshot().map_err(|e| ReplayError::Failed(format!("the state after the epoch: {e}")))?;
    Ok(ReplayOutcome { emissions, partial, notes, end_state })
}

/// Replays twice and compares the emissions byte for byte.
pub fn verify(evidence: &EpochEvidence) -> Result<Verification, ReplayError> {
    let first = replay(evidence)?;
    let second = replay(evidence)?;
    let first_difference = emissions::first_difference(&first.emissions, &second.emissions);
    Ok(Verification { identical: first_difference.is_none(), first_difference, outcome: first })
}

#[derive(Debug, Clone)]
pub struct Verification {
    pub identical: bool,
    pub first_difference: Option<emissions::Difference>,
    pub outcome: ReplayOutcome,
}

/// Why a capture directory could not be listed whole.
#[derive(Debug, Error)]
pub enum ListCapturedError {
    #[error("{}: {error}", dir.display())]
    Unreadable { dir: PathBuf, error: std::io::Error },
    /// An entry whose name is not UTF-8 (shown lossily): never skipped.
    #[error("{}: an entry whose name is not UTF-8: {name:?}", dir.display())]
    NotUtf8 { dir: PathBuf, name: String },
    /// What a capture fetch cut short left: never read as a capture.
    #[error("{}: an interrupted `clink capture fetch` left this ({} is there): fetch again", dir.display(), marker.display())]
    InterruptedFetch { dir: PathBuf, marker: PathBuf },
}

/// Every captured (operator, subtask, epoch) under a capture directory, in
/// operator, subtask, epoch order.
pub fn list_captured(capture_dir: &Path) -> Result<Vec<(EpochRef, PathBuf)>, ListCapturedError> {
    if let Some(marker) = clink_basics::files::interrupted_fetch(capture_dir) {
        return Err(ListCapturedError::InterruptedFetch { dir: capture_dir.to_path_buf(), marker });
    }
    let mut found = Vec::new();
    // An entry that cannot be listed is an error, never a capture skipped.
    let read = |dir: &Path| -> Result<Vec<String>, ListCapturedError> {
        let listing = clink_basics::files::list_dir(dir)
            .map_err(|error| ListCapturedError::Unreadable { dir: dir.to_path_buf(), error })?;
        match listing.not_utf8.first() {
            Some(name) => Err(ListCapturedError::NotUtf8 { dir: dir.to_path_buf(), name: name.clone() }),
            None => Ok(listing.names),
        }
    };
    for op_name in read(capture_dir)? {
        let Some(op) = op_name.strip_prefix("op-").and_then(OperatorId::parse) else {
            continue;
        };
        let op_dir = capture_dir.join(&op_name);
        for sub_name in read(&op_dir)? {
            let Some(subtask) =
                sub_name.strip_prefix("subtask-").and_then(parse_decimal_u64).and_then(|s| u32::try_from(s).ok())
            else {
                continue;
            };
            let sub_dir = op_dir.join(&sub_name);
            for name in read(&sub_dir)? {
                if let Some(epoch) = clink_engine::capture::parse_epoch_file_name(&name) {
                    found.push((EpochRef { operator: op, subtask, epoch }, sub_dir.join(&name)));
                }
            }
        }
    }
    found.sort_by_key(|(r, _)| (r.operator, r.subtask, r.epoch));
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capture_directory_that_cannot_be_listed_is_an_error_naming_it() {
        let scratch = tempfile::tempdir().unwrap();
        assert!(list_captured(scratch.path()).unwrap().is_empty());
        let missing = scratch.path().join("nowhere");
        match list_captured(&missing) {
            Err(ListCapturedError::Unreadable { dir, .. }) => assert_eq!(dir, missing),
            other => panic!("{other:?}"),
        }
        std::fs::create_dir_all(scratch.path().join("op-7/subtask-0")).unwrap();
        std::fs::write(scratch.path().join("op-7/subtask-0/unrelated"), b"").unwrap();
        assert!(list_captured(scratch.path()).unwrap().is_empty(), "only epoch files are captures");
    }
}
