//! The bundle's evidence, typed, from vouched bytes.
//!
//! Each reader here takes an artifact's bytes through [`Bundle::read_vouched`]
//! (so the bytes are the ones the manifest lists) and parses them with the
//! engine's own from-bytes readers, checking every name the evidence carries
//! against the path it sits at: a marker's job and checkpoint, a sidecar's and
//! a snapshot header's job, checkpoint and participant. Checks, scopes and
//! reconciliations read evidence through here and nowhere else, so one rule
//! says what evidence a bundle holds: its listed paths.
//!
//! These readers find things; they decide nothing about the job.

use std::path::Path;

use clink_basics::ids::OperatorId;
use clink_engine::capture::spec::MAX_DOC_BYTES;
use clink_engine::capture::{OpSpecFile, SinkEvidence};
use clink_engine::checkpoint::backend::{
    check_meta_names, check_snapshot_names, parse_snapshot_meta, verify_snapshot_bytes, VerifiedSnapshot,
    MAX_META_BYTES,
};
use clink_engine::checkpoint::commits::{
    parse_confirmed_bytes, parse_receipt_bytes, ConfirmedMarker, Receipt, MAX_COMMITS_BYTES,
};
use clink_engine::checkpoint::graph::{check_graph_bytes, GraphRef, MAX_GRAPH_BYTES};
use clink_engine::checkpoint::markers::{
    check_completed_names, parse_completed_bytes, parse_restored_bytes, MAX_MARKER_BYTES,
};
use clink_engine::checkpoint::snapshot::MAX_SNAPSHOT_BYTES;
use clink_engine::checkpoint::{CheckpointLayout, CompletedMarker, RestoredRecord, SnapshotMeta};
use thiserror::Error;

use crate::manifest::{Artifact, Bundle};
use crate::paths::{kind_of, ArtifactKind};
use crate::vouched::VouchError;

/// Why a piece of evidence cannot be handed to a check.
#[derive(Debug, Error)]
pub enum EvidenceError {
    /// The bytes are not the ones the manifest vouched for, or not listed.
    #[error(transparent)]
    Vouch(#[from] VouchError),
    /// The bytes are vouched for, and do not read as what their path says.
    #[error("{0}")]
    Invalid(String),
}

impl EvidenceError {
    /// Whether the evidence is simply not in the bundle (as opposed to there
    /// and wrong).
    pub fn is_unlisted(&self) -> bool {
        matches!(self, EvidenceError::Vouch(VouchError::Unlisted { .. }))
    }
}

fn invalid(e: impl std::fmt::Display) -> EvidenceError {
    EvidenceError::Invalid(e.to_string())
}

/// The markers a bundle lists: what the restore rule and the epoch-start rule
/// read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Markers {
    /// COMPLETED ids, ascending.
    pub completed: Vec<u64>,
    /// CONFIRMED ids, ascending.
    pub confirmed: Vec<u64>,
    pub restored: Option<RestoredRecord>,
}

impl Bundle {
    /// The engine's layout over the bundle's copy of the checkpoint directory:
    /// for naming paths, never for reading them.
    pub fn layout(&self) -> CheckpointLayout {
        CheckpointLayout::new(self.checkpoint_dir(), self.job_id())
    }

    /// Every listed artifact with the kind its path gives, in manifest order.
    pub fn artifacts_of_kind<'a>(
        &'a self,
        wanted: impl Fn(&ArtifactKind) -> bool + 'a,
    ) -> impl Iterator<Item = (&'a Artifact, ArtifactKind)> + 'a {
        self.manifest.artifacts.iter().filter_map(move |a| kind_of(&a.path).filter(&wanted).map(|k| (a, k)))
    }

    /// The trace files, by path (`traces/<file>`), in manifest order.
    pub fn trace_artifacts(&self) -> Vec<&Artifact> {
        self.artifacts_of_kind(|k| matches!(k, ArtifactKind::Trace { .. })).map(|(a, _)| a).collect()
    }

    fn vouched_at(&self, file: &Path, limit: u64) -> Result<Vec<u8>, EvidenceError> {
        Ok(self.read_vouched_file(file, limit)?)
    }

    /// The COMPLETED marker of `checkpoint`, naming this job and checkpoint.
    pub fn completed_marker(&self, checkpoint: u64) -> Result<CompletedMarker, EvidenceError> {
        let path = self.layout().completed_marker(checkpoint);
        let bytes = self.vouched_at(&path, MAX_MARKER_BYTES)?;
        let marker = parse_completed_bytes(&path, &bytes).map_err(invalid)?;
        check_completed_names(&path, &marker, self.job_id(), checkpoint).map_err(invalid)?;
        Ok(marker)
    }

    /// The CONFIRMED marker of `checkpoint`, naming this job and checkpoint.
    pub fn confirmed_marker(&self, checkpoint: u64) -> Result<ConfirmedMarker, EvidenceError> {
        let path = self.layout().confirmed_marker(checkpoint);
        let bytes = self.vouched_at(&path, MAX_COMMITS_BYTES)?;
        parse_confirmed_bytes(&path, &bytes, self.job_id(), checkpoint).map_err(invalid)
    }

    /// `participant`'s commit receipt of `checkpoint`, naming this job, that
    /// participant and that checkpoint.
    pub fn receipt(&self, participant: &str, checkpoint: u64) -> Result<Receipt, EvidenceError> {
        let path = self.layout().receipt(participant, checkpoint);
        let bytes = self.vouched_at(&path, MAX_COMMITS_BYTES)?;
        parse_receipt_bytes(&path, &bytes, self.job_id(), participant, checkpoint).map_err(invalid)
    }

    /// The markers the manifest lists, each read and checked against its
    /// path (a marker that does not parse, or names another job or
    /// checkpoint, is an error, never counted by its name), and the RESTORED
    /// record read.
    pub fn markers(&self) -> Result<Markers, EvidenceError> {
        let mut markers = Markers::default();
        let mut restored = None;
        for (a, kind) in self.artifacts_of_kind(|_| true) {
            match kind {
                ArtifactKind::CompletedMarker { checkpoint, .. } => markers.completed.push(checkpoint),
                ArtifactKind::ConfirmedMarker { checkpoint, .. } => markers.confirmed.push(checkpoint),
                ArtifactKind::RestoredRecord { .. } => restored = Some(a.path.clone()),
                _ => {}
            }
        }
        markers.completed.sort_unstable();
        markers.confirmed.sort_unstable();
        for &c in &markers.completed {
            self.completed_marker(c)?;
        }
        for &c in &markers.confirmed {
            self.confirmed_marker(c)?;
        }
        if let Some(path) = restored {
            let bytes = self.read_vouched(&path, MAX_MARKER_BYTES)?;
            let file = self.layout().restored_record();
            markers.restored = Some(parse_restored_bytes(&file, &bytes, self.job_id()).map_err(invalid)?);
        }
        Ok(markers)
    }

    /// The checkpoint the bundle's IMPORTED record names, read from vouched
    /// bytes; `None` when the bundle holds no such record.
    pub fn imported_checkpoint(&self) -> Result<Option<u64>, EvidenceError> {
        let path = self.layout().imported_record();
        let bytes = match self.vouched_at(&path, 64) {
            Ok(bytes) => bytes,
            Err(e) if e.is_unlisted() => return Ok(None),
            Err(e) => return Err(e),
        };
        let text = std::str::from_utf8(&bytes).map_err(|_| invalid(format!("{}: not UTF-8", path.display())))?;
        clink_basics::ids::parse_decimal_u64(text.trim())
            .map(Some)
            .ok_or_else(|| invalid(format!("{}: {:?} is not a checkpoint id", path.display(), text.trim())))
    }

    /// The job graph a marker names: the file's name is its hash, and its
    /// bytes hash to it.
    pub fn graph_bytes(&self, graph: &GraphRef) -> Result<Vec<u8>, EvidenceError> {
        let path = self.layout().jobs_dir().join(&graph.file);
        let bytes = self.vouched_at(&path, MAX_GRAPH_BYTES)?;
        check_graph_bytes(&path, graph, &bytes).map_err(invalid)?;
        Ok(bytes)
    }

    /// A participant's sidecar of a checkpoint, naming what its path says.
    pub fn snapshot_meta(
        &self,
        generation: u32,
        participant: &str,
        checkpoint: u64,
    ) -> Result<SnapshotMeta, EvidenceError> {
        let path = self.layout().snapshot_meta(generation, participant, checkpoint);
        let bytes = self.vouched_at(&path, MAX_META_BYTES)?;
        let meta = parse_snapshot_meta(&path, &bytes).map_err(invalid)?;
        check_meta_names(&meta, &path, self.job_id(), participant, checkpoint).map_err(invalid)?;
        Ok(meta)
    }

    /// A participant's snapshot of a checkpoint, verified against its sidecar
    /// (size, SHA-256, slots) and decoded, its header and sidecar naming what
    /// its path says: the restore path's own rule, on vouched bytes.
    pub fn snapshot(
        &self,
        generation: u32,
        participant: &str,
        checkpoint: u64,
    ) -> Result<VerifiedSnapshot, EvidenceError> {
        let layout = self.layout();
        let meta_path = layout.snapshot_meta(generation, participant, checkpoint);
        let snap_path = layout.snapshot(generation, participant, checkpoint);
        let meta = self.snapshot_meta(generation, participant, checkpoint)?;
        let bytes = self.vouched_at(&snap_path, MAX_SNAPSHOT_BYTES)?;
        let verified = verify_snapshot_bytes(&snap_path, &bytes, meta).map_err(invalid)?;
        check_snapshot_names(&verified, &snap_path, &meta_path, self.job_id(), participant, checkpoint)
            .map_err(invalid)?;
        Ok(verified)
    }

    /// The op.json captured for an operator's subtask.
    pub fn op_spec(&self, operator: OperatorId, subtask: u32) -> Result<OpSpecFile, EvidenceError> {
        let file = clink_engine::capture::subtask_dir(&self.capture_dir(), operator, subtask).join("op.json");
        let bytes = self.vouched_at(&file, MAX_DOC_BYTES)?;
        OpSpecFile::parse(&file, &bytes).map_err(invalid)
    }

    /// A sink subtask's interval evidence of an epoch.
    pub fn sink_evidence(&self, operator: OperatorId, subtask: u32, epoch: u64) -> Result<SinkEvidence, EvidenceError> {
        let file = clink_engine::capture::subtask_dir(&self.capture_dir(), operator, subtask)
            .join(clink_engine::capture::sink_evidence_name(epoch));
        let bytes = self.vouched_at(&file, MAX_DOC_BYTES)?;
        SinkEvidence::parse(&file, &bytes).map_err(invalid)
    }

    /// The bytes of a captured epoch (the capture reader parses them; the
    /// caller checks the header's names against the path).
    pub fn capture_bytes(
        &self,
        operator: OperatorId,
        subtask: u32,
        epoch: u64,
        limit: u64,
    ) -> Result<Vec<u8>, EvidenceError> {
        Ok(self.read_vouched(&crate::manifest::capture_path(operator, subtask, epoch), limit)?)
    }
}
