//! THE reader of a bundle's evidence: every artifact the manifest vouches
//! for, read once, into one typed model, every fact compared wherever two
//! artifacts state it as the model is assembled.
//!
//! A fact two artifacts state (which run wrote them, the job and its graph at
//! each checkpoint, the sink family and its restore rule, which checkpoint was
//! restored from and by which run, the participants and their state, each
//! sink interval's bounds and account, the traces' history beside the
//! markers') is compared here and nowhere else, so no check can pass a fact
//! another artifact contradicts because it happened not to read that
//! artifact. What disagrees becomes a [`Finding`] naming the fact and both
//! places, or, for artifacts of another lineage mixed into the bundle, a
//! refusal. The checks (`clink-verify`) then judge the model; this module
//! never judges the job, never runs anything a bundle names, and reads only
//! the bytes the manifest vouches for.
//!
//! What a profile examines: [`Depth::Listing`] (the integrity profile) reads
//! no artifact's contents, only their presence; [`Depth::Contents`] reads
//! every artifact, whatever the family or the selection would use.
//! [`Evidence::unexamined`] says, for the depth read, what was not examined
//! and which depth examines it.

mod captures;
mod checkpoints;
mod history;
mod rescale;
mod runs;
mod sinks;
mod state;
mod traces;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use clink_basics::ids::OperatorId;
use clink_engine::capture::{CaptureShape, OpSpecFile, SinkEvidence};
use clink_engine::checkpoint::backend::VerifiedSnapshot;
use clink_engine::checkpoint::commits::{ConfirmedMarker, Receipt, UnresolvedMarker};
use clink_engine::checkpoint::dataset::ImportedRecord;
use clink_engine::checkpoint::lineage::{LineageId, RunRecord};
use clink_engine::checkpoint::{CompletedMarker, RestoredRecord, SnapshotMeta};
use clink_engine::job::JobGraph;
use clink_engine::job_manifest::JobManifest;

use crate::manifest::Bundle;
use crate::paths::{kind_of, ArtifactKind};

pub use captures::{spec_agrees_with_graph, SpecMismatch, MAX_CAPTURE_BYTES};
pub use traces::{TraceFile, TraceLine, MAX_TRACE_BYTES};

/// How much of a bundle a profile reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Depth {
    /// Which artifacts are there: nothing's contents.
    Listing,
    /// Every artifact's contents, and every fact compared.
    Contents,
}

/// Which fact a finding is about: the check that reports it follows from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fact {
    /// An artifact that does not read, or one the bundle should hold and
    /// does not: nothing it states can be compared.
    Unread,
    /// Which run of the lineage wrote an artifact (incarnations, run records,
    /// the trace files' processes).
    Writer,
    /// A COMPLETED marker against its graph, its sidecars and the traces.
    Marker,
    /// The family, the rule, the RESTORED record, CONFIRMED markers,
    /// receipts and the evidence a family must not have.
    Restore,
    /// The participants and generation of a checkpoint.
    Participants,
    /// A participant's state: its sidecar, its header, its keys.
    State,
    /// A captured epoch, its op.json, and a sink interval's evidence and account.
    Capture,
    /// What the traces say happened, against the other evidence.
    Trace,
}

/// Two places that state one fact and disagree, or evidence that cannot be
/// read (naming the place and why).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Finding {
    pub fact: Fact,
    pub detail: String,
}

/// The bundle's evidence, read and compared.
#[derive(Debug, Default)]
pub struct Evidence {
    pub job: u64,
    /// What was read.
    pub depth: Option<Depth>,
    /// The lineage every artifact names (`None`: none names one, as in a
    /// bundle a build before run identities wrote).
    pub lineage: Option<LineageId>,
    /// Whether the bundle's artifacts name the runs that wrote them (a build
    /// before run identities wrote none: which run wrote what is then not
    /// established).
    pub identified: bool,
    /// Each run's record, by incarnation.
    pub runs: BTreeMap<u64, RunRecord>,
    pub completed: BTreeMap<u64, CompletedMarker>,
    /// The job graph each COMPLETED marker names, by checkpoint.
    pub graphs: BTreeMap<u64, Arc<JobGraph>>,
    pub confirmed: BTreeMap<u64, ConfirmedMarker>,
    pub receipts: BTreeMap<(String, u64), Receipt>,
    pub unresolved: BTreeMap<(String, u64), UnresolvedMarker>,
    pub restored: Option<RestoredRecord>,
    pub imported: Option<ImportedRecord>,
    pub job_manifest: Option<JobManifest>,
    /// Whether the job's sinks need commit confirmation, as every source
    /// that says agrees (`None`: no source says).
    pub family: Option<bool>,
    /// Sidecars by (generation, participant, checkpoint).
    pub sidecars: BTreeMap<(u32, String, u64), SnapshotMeta>,
    /// Snapshots, verified against their sidecars, by the same key.
    pub snapshots: BTreeMap<(u32, String, u64), VerifiedSnapshot>,
    pub op_specs: BTreeMap<(OperatorId, u32), OpSpecFile>,
    /// Every captured epoch's header and counts, by (operator, subtask, epoch).
    pub captures: BTreeMap<(OperatorId, u32, u64), CaptureShape>,
    pub sink_evidence: BTreeMap<(OperatorId, u32, u64), SinkEvidence>,
    pub traces: Vec<TraceFile>,
    /// Restores the evidence records, as (restored_from, next): the RESTORED
    /// record's and every Redeploy of the traces.
    pub restores: BTreeSet<(u64, u64)>,
    pub findings: Vec<Finding>,
}

/// Evidence of another lineage mixed into the bundle, or the manifest's own
/// claims contradicted: the bundle is refused (exit 2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

impl Evidence {
    /// Reads the bundle to `depth`, comparing every fact as it goes. Call it
    /// once bundle.artifacts has passed: it reads vouched bytes only.
    pub fn read(bundle: &Bundle, depth: Depth) -> Result<Evidence, Refused> {
        let mut e = Evidence { job: bundle.job_id(), depth: Some(depth), ..Evidence::default() };
        if depth == Depth::Listing {
            return Ok(e);
        }
        runs::read(bundle, &mut e);
        checkpoints::read(bundle, &mut e);
        state::read(bundle, &mut e);
        captures::read(bundle, &mut e);
        traces::read(bundle, &mut e);
        // Everything read: now the facts that span artifacts.
        runs::compare(bundle, &mut e)?;
        checkpoints::compare(bundle, &mut e);
        state::compare(&mut e);
        captures::compare(bundle, &mut e);
        sinks::compare(bundle, &mut e);
        traces::compare(bundle, &mut e)?;
        history::compare(&mut e);
        e.findings.sort();
        e.findings.dedup();
        Ok(e)
    }

    pub(crate) fn find(&mut self, fact: Fact, detail: impl Into<String>) {
        self.findings.push(Finding { fact, detail: detail.into() });
    }

    /// The findings about one fact.
    pub fn about(&self, fact: Fact) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(move |f| f.fact == fact)
    }

    /// The job graph of completed checkpoint `checkpoint`, as its marker names it.
    pub fn graph_at(&self, checkpoint: u64) -> Option<&JobGraph> {
        self.graphs.get(&checkpoint).map(|g| g.as_ref())
    }

    /// The job graph an artifact of run `incarnation` at `checkpoint` was
    /// written under: the one the run's own newest COMPLETED marker names (a
    /// run deploys one graph), else the checkpoint's. A run killed after a
    /// checkpoint writes evidence of the next, which a redeployed graph may
    /// complete.
    pub fn graph_of_run_at(&self, incarnation: Option<u64>, checkpoint: u64) -> Option<&JobGraph> {
        let own = incarnation.and_then(|run| {
            self.completed
                .iter()
                .rev()
                .find(|(_, m)| m.run.as_ref().is_some_and(|r| r.incarnation == run))
                .and_then(|(c, _)| self.graph_at(*c))
        });
        own.or_else(|| self.graph_at(checkpoint))
    }

    /// The newest incarnation the bundle's run records name.
    pub fn newest_run(&self) -> Option<u64> {
        self.runs.keys().next_back().copied()
    }

    /// Where the replay of `epoch` of a participant starts: what the engine's
    /// restore rule says from the markers and every restore the evidence
    /// records.
    pub fn epoch_start(&self, epoch: u64) -> Result<clink_engine::checkpoint::StartPoint, String> {
        let completed: Vec<u64> = self.completed.keys().copied().collect();
        let known: Vec<(u64, u64)> = self.restores.iter().copied().collect();
        clink_engine::checkpoint::epoch_start_from(&completed, self.restored.as_ref(), epoch, &known)
            .map_err(|e| e.to_string())
    }
}

/// What a depth leaves unexamined, by artifact kind: `(what, how many,
/// the depth that examines it)`. `Contents` examines everything.
pub fn unexamined(bundle: &Bundle, depth: Depth) -> Vec<(String, usize, Depth)> {
    if depth == Depth::Contents {
        return Vec::new();
    }
    let mut by_kind: BTreeMap<&'static str, usize> = BTreeMap::new();
    for a in &bundle.manifest.artifacts {
        if let Some(kind) = kind_of(&a.path) {
            *by_kind.entry(kind_name(&kind)).or_default() += 1;
        }
    }
    by_kind.into_iter().map(|(what, n)| (format!("the contents of {what}"), n, Depth::Contents)).collect()
}

/// A kind's name in reports, plural.
pub fn kind_name(kind: &ArtifactKind) -> &'static str {
    match kind {
        ArtifactKind::CompletedMarker { .. } => "COMPLETED markers",
        ArtifactKind::ConfirmedMarker { .. } => "CONFIRMED markers",
        ArtifactKind::RestoredRecord { .. } => "RESTORED records",
        ArtifactKind::LineageRecord { .. } => "LINEAGE records",
        ArtifactKind::RunRecord { .. } => "run records",
        ArtifactKind::ImportedRecord { .. } => "IMPORTED records",
        ArtifactKind::CommitReceipt { .. } => "commit receipts",
        ArtifactKind::UnresolvedMarker { .. } => "unresolved markers",
        ArtifactKind::JobGraph { .. } => "job graphs",
        ArtifactKind::Snapshot { .. } => "snapshots",
        ArtifactKind::SnapshotMeta { .. } => "snapshot sidecars",
        ArtifactKind::OpSpec { .. } => "op.json files",
        ArtifactKind::Capture { .. } => "captured epochs",
        ArtifactKind::SinkEvidence { .. } => "sink interval evidence",
        ArtifactKind::Trace { .. } => "trace files",
        ArtifactKind::JobManifest => "job manifests",
    }
}

/// A finding about the artifact at `path`: the reader's reason, which names
/// the path itself when it does.
pub(crate) fn placed(path: &str, why: &impl std::fmt::Display) -> String {
    let why = why.to_string();
    if why.contains(path) {
        why
    } else {
        format!("{path}: {why}")
    }
}

/// A short name of a run for findings.
pub(crate) fn show_run(run: Option<&clink_engine::checkpoint::lineage::RunIdentity>) -> String {
    run.map_or_else(|| "no run".to_string(), ToString::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Bundle {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/bundles").join(name);
        crate::read_bundle(&dir).unwrap()
    }

    #[test]
    fn each_real_bundle_reads_whole_one_lineage_and_agrees_with_itself() {
        for name in ["good", "kafka-kafka", "kafka-clickhouse"] {
            let bundle = fixture(name);
            let e = Evidence::read(&bundle, Depth::Contents).unwrap();
            assert!(e.findings.is_empty(), "{name}: {:?}", e.findings);
            assert!(e.identified && e.lineage.is_some(), "{name}: every artifact names its run");
            assert!(e.runs.len() >= 2, "{name}: killed and resumed: {:?}", e.runs.keys());
            assert!(!e.traces.is_empty() && !e.captures.is_empty() && !e.snapshots.is_empty(), "{name}");
            assert_eq!(
                e.completed.len(),
                bundle.artifacts_of_kind(|k| matches!(k, ArtifactKind::CompletedMarker { .. })).count()
            );
        }
    }

    #[test]
    fn the_listing_depth_reads_nothing_and_says_so() {
        let bundle = fixture("good");
        let e = Evidence::read(&bundle, Depth::Listing).unwrap();
        assert!(e.completed.is_empty() && e.findings.is_empty());
        let unread = unexamined(&bundle, Depth::Listing);
        assert_eq!(unread.iter().map(|(_, n, _)| n).sum::<usize>(), bundle.manifest.artifacts.len());
        assert!(unexamined(&bundle, Depth::Contents).is_empty());
    }
}
