//! The job's durable decisions: `COMPLETED-<id>` markers and the `RESTORED`
//! record.
//!
//! A COMPLETED marker says every participant of a checkpoint acked with its
//! snapshot durable; the coordinator writes it before it broadcasts any commit.
//! The RESTORED record names the checkpoint the newest deploy restored from and
//! the first id its run numbers; it is written before the deploy sends any frame.
//! Scans read markers by name only (the prefix and a canonical id), so a
//! writer's temporary file is never taken for a marker.

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::backend::read_dir_names;
use super::durable::{create_dir_durably, write_durably};
use super::graph::GraphRef;
use super::identity::RunIdentity;
use super::layout::{
    completed_marker_name, parse_completed_marker_name, parse_confirmed_marker_name, CheckpointLayout, RESTORED_NAME,
};
use super::state_root::StateRoot;

pub const COMPLETED_FORMAT: &str = "clink-completed-marker";
pub const RESTORED_FORMAT: &str = "clink-restored-record";
/// COMPLETED markers: version 3 names the run that wrote it, version 2 (read
/// still, and written outside a run) the job graph alone, version 1 neither.
pub const COMPLETED_VERSION: u64 = 3;
const COMPLETED_VERSION_UNIDENTIFIED: u64 = 2;
/// RESTORED records: version 2 names the run that restored (its `epoch` is
/// that run's incarnation); version 1, read still, names none (epoch 0).
pub const RESTORED_VERSION: u64 = 2;
/// A marker or record larger than this is refused unread.
pub const MAX_MARKER_BYTES: u64 = 1 << 20;

#[derive(Debug, Error)]
pub enum MarkerError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path}: invalid: {reason}")]
    Invalid { path: PathBuf, reason: String },
}

/// What kind of trigger a checkpoint came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointKind {
    Periodic,
    Final,
    Savepoint,
}

impl CheckpointKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CheckpointKind::Periodic => "periodic",
            CheckpointKind::Final => "final",
            CheckpointKind::Savepoint => "savepoint",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompletedMarker {
    pub format: String,
    pub version: u64,
    pub job: String,
    pub checkpoint: u64,
    pub generation: u32,
    pub kind: CheckpointKind,
    /// Every participant that acked, by name (`op-<id>-<subtask>`).
    pub participants: Vec<String>,
    /// The job graph the checkpoint was taken of (version 2 on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph: Option<GraphRef>,
    /// The run whose coordinator completed the checkpoint (version 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunIdentity>,
    /// Where the participants' state is and which backend wrote it, when
    /// not files under the checkpoint directory (`clink run --state`). A
    /// build that does not know the field refuses the marker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<StateRoot>,
}

impl CompletedMarker {
    pub fn new(
        job: u64,
        checkpoint: u64,
        generation: u32,
        kind: CheckpointKind,
        participants: Vec<String>,
        graph: Option<GraphRef>,
    ) -> Self {
        Self {
            format: COMPLETED_FORMAT.into(),
            version: COMPLETED_VERSION_UNIDENTIFIED,
            job: job.to_string(),
            checkpoint,
            generation,
            kind,
            participants,
            graph,
            run: None,
            state: None,
        }
    }

    /// The marker naming the state root its participants wrote to (none
    /// for the default).
    pub fn with_state(mut self, state: &StateRoot) -> Self {
        self.state = (!state.is_default()).then(|| state.clone());
        self
    }

    /// The marker as `run` writes it (version 3); unchanged without one.
    pub fn written_by(mut self, run: Option<RunIdentity>) -> Self {
        if let Some(run) = run {
            self.version = COMPLETED_VERSION;
            self.run = Some(run);
        }
        self
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestoredRecord {
    pub format: String,
    pub version: u64,
    pub job: String,
    /// The checkpoint the deploy restored from; 0 for none.
    pub restored_from: u64,
    /// The first checkpoint id the restored run numbers.
    pub next: u64,
    /// The incarnation of the run that restored and wrote it (version 2; 0
    /// in version 1, which names no run).
    pub epoch: u64,
    /// The run that restored (version 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunIdentity>,
}

impl RestoredRecord {
    pub fn new(job: u64, restored_from: u64, next: u64) -> Self {
        Self {
            format: RESTORED_FORMAT.into(),
            version: 1,
            job: job.to_string(),
            restored_from,
            next,
            epoch: 0,
            run: None,
        }
    }

    /// The record as `run` writes it (version 2); unchanged without one.
    pub fn written_by(mut self, run: Option<RunIdentity>) -> Self {
        if let Some(run) = run {
            self.version = RESTORED_VERSION;
            self.epoch = run.incarnation;
            self.run = Some(run);
        }
        self
    }

    /// Whether this record passes over a marker: the deploy restored below it,
    /// so the run that wrote it was discarded.
    pub fn passes_over(&self, checkpoint: u64) -> bool {
        self.restored_from < checkpoint && checkpoint < self.next
    }
}

/// Every checkpoint id with a COMPLETED marker, ascending.
pub fn list_completed(layout: &CheckpointLayout) -> Result<Vec<u64>, MarkerError> {
    let dir = layout.jobs_dir();
    let names = read_dir_names(&dir).map_err(|e| MarkerError::Invalid { path: dir.clone(), reason: e.to_string() })?;
    let mut ids: Vec<u64> = names.iter().filter_map(|n| parse_completed_marker_name(n)).collect();
    ids.sort_unstable();
    Ok(ids)
}

/// Every checkpoint id with a CONFIRMED marker, ascending (written by jobs
/// whose sinks need commit confirmation; this engine writes none).
pub fn list_confirmed(layout: &CheckpointLayout) -> Result<Vec<u64>, MarkerError> {
    let dir = layout.jobs_dir();
    let names = read_dir_names(&dir).map_err(|e| MarkerError::Invalid { path: dir.clone(), reason: e.to_string() })?;
    let mut ids: Vec<u64> = names.iter().filter_map(|n| parse_confirmed_marker_name(n)).collect();
    ids.sort_unstable();
    Ok(ids)
}

/// Writes a COMPLETED marker, naming the run that writes through `layout`.
pub fn write_completed(layout: &CheckpointLayout, marker: &CompletedMarker) -> Result<(), MarkerError> {
    let dir = layout.jobs_dir();
    let marker = marker.clone().written_by(layout.writer());
    write_json(&dir, &completed_marker_name(marker.checkpoint), &marker)
}

/// Writes the RESTORED record, naming the run that writes through `layout`.
pub fn write_restored(layout: &CheckpointLayout, record: &RestoredRecord) -> Result<(), MarkerError> {
    write_json(&layout.jobs_dir(), RESTORED_NAME, &record.clone().written_by(layout.writer()))
}

fn write_json<T: Serialize>(dir: &Path, name: &str, value: &T) -> Result<(), MarkerError> {
    let io_err = |source| MarkerError::Io { path: dir.join(name), source };
    create_dir_durably(dir).map_err(io_err)?;
    let bytes = serde_json::to_vec_pretty(value)
        .map_err(|e| MarkerError::Invalid { path: dir.join(name), reason: e.to_string() })?;
    write_durably(dir, name, &bytes).map_err(|source| MarkerError::Io { path: dir.join(name), source })
}

/// Reads and checks a COMPLETED marker: a known format and version, and it
/// names this job and this checkpoint.
pub fn read_completed(layout: &CheckpointLayout, checkpoint: u64) -> Result<CompletedMarker, MarkerError> {
    let path = layout.completed_marker(checkpoint);
    let marker = parse_completed_marker(&path)?;
    check_completed_names(&path, &marker, layout.job(), checkpoint)?;
    Ok(marker)
}

/// Whether a COMPLETED marker read from `path` names the job and checkpoint
/// its path says.
pub fn check_completed_names(
    path: &Path,
    marker: &CompletedMarker,
    job: u64,
    checkpoint: u64,
) -> Result<(), MarkerError> {
    let invalid = |reason: String| MarkerError::Invalid { path: path.to_path_buf(), reason };
    if marker.job != job.to_string() {
        return Err(invalid(format!("names job {}, not job {job}", marker.job)));
    }
    if marker.checkpoint != checkpoint {
        return Err(invalid(format!("names checkpoint {}, not {checkpoint}", marker.checkpoint)));
    }
    Ok(())
}

/// Parses a COMPLETED marker file without judging whom it names.
pub fn parse_completed_marker(path: &Path) -> Result<CompletedMarker, MarkerError> {
    parse_completed_bytes(path, &read_bounded(path)?)
}

/// Parses a COMPLETED marker's bytes (read from `path`, which only names it
/// in errors) without judging whom it names.
pub fn parse_completed_bytes(path: &Path, bytes: &[u8]) -> Result<CompletedMarker, MarkerError> {
    let marker: CompletedMarker = parse_json(path, bytes)?;
    let invalid = |reason: String| MarkerError::Invalid { path: path.to_path_buf(), reason };
    if marker.format != COMPLETED_FORMAT || !(1..=COMPLETED_VERSION).contains(&marker.version) {
        return Err(invalid(format!(
            "format {:?} version {}; this build reads {COMPLETED_FORMAT:?} versions 1 to {COMPLETED_VERSION}",
            marker.format, marker.version
        )));
    }
    if marker.version >= 2 && marker.graph.is_none() {
        return Err(invalid(format!("a version {} marker names its job graph; this one does not", marker.version)));
    }
    if (marker.version >= COMPLETED_VERSION) != marker.run.is_some() {
        return Err(invalid(format!(
            "a version {} marker names the run that wrote it exactly from version 3",
            marker.version
        )));
    }
    Ok(marker)
}

/// Reads the RESTORED record; `None` when the job was never redeployed.
pub fn read_restored(layout: &CheckpointLayout) -> Result<Option<RestoredRecord>, MarkerError> {
    let path = layout.restored_record();
    if !path.exists() {
        return Ok(None);
    }
    parse_restored_bytes(&path, &read_bounded(&path)?, layout.job()).map(Some)
}

/// Parses and checks a RESTORED record's bytes (read from `path`) for `job`:
/// a known format and version, this job, and `next` above `restored_from`.
pub fn parse_restored_bytes(path: &Path, bytes: &[u8], job: u64) -> Result<RestoredRecord, MarkerError> {
    let record: RestoredRecord = parse_json(path, bytes)?;
    let invalid = |reason: String| MarkerError::Invalid { path: path.to_path_buf(), reason };
    if record.format != RESTORED_FORMAT || !(1..=RESTORED_VERSION).contains(&record.version) {
        return Err(invalid(format!("format {:?} version {}", record.format, record.version)));
    }
    let named = record.run.as_ref().map_or(0, |r| r.incarnation);
    if (record.version >= 2) != record.run.is_some() || record.epoch != named {
        return Err(invalid(format!(
            "version {} epoch {}: a version 2 record names the run that restored, and its epoch is that run's incarnation",
            record.version, record.epoch
        )));
    }
    if record.job != job.to_string() {
        return Err(invalid(format!("names job {}, not job {job}", record.job)));
    }
    if record.next <= record.restored_from {
        return Err(invalid(format!("next {} is not above restored_from {}", record.next, record.restored_from)));
    }
    Ok(record)
}

/// A marker file's bytes, bounded.
fn read_bounded(path: &Path) -> Result<Vec<u8>, MarkerError> {
    clink_basics::files::read_bounded(path, MAX_MARKER_BYTES)
        .map_err(|source| MarkerError::Io { path: path.to_path_buf(), source })
}

fn parse_json<T: serde::de::DeserializeOwned>(path: &Path, bytes: &[u8]) -> Result<T, MarkerError> {
    if bytes.len() as u64 > MAX_MARKER_BYTES {
        return Err(MarkerError::Invalid {
            path: path.to_path_buf(),
            reason: format!("{} bytes, over the limit of {MAX_MARKER_BYTES}", bytes.len()),
        });
    }
    serde_json::from_slice(bytes).map_err(|e| MarkerError::Invalid { path: path.to_path_buf(), reason: e.to_string() })
}
