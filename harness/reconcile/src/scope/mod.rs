//! The scope of a completed checkpoint, from the bundle alone: which sink
//! intervals it completed, what the sink received in them, where the source
//! stood at the checkpoints bounding them, and what the sink recorded.
//!
//! Each sink interval's evidence names the barrier before it, so the
//! intervals of checkpoint N are found by walking back from N's interval
//! through those barriers: to the previous completed checkpoint (the
//! interval scope), to the run's start with no state through every restore
//! (the lineage), or to an earlier completed checkpoint M of the lineage (an
//! increment). A restored run's first interval names the restore point as
//! its previous barrier, so the walk follows the surviving runs and never a
//! run a restore discarded.
//!
//! Nothing here fails on evidence that is missing or not whole: it is listed
//! in [`Scope::problems`], and the checks built on it are unavailable. What
//! the request cannot mean (a checkpoint the bundle does not hold as
//! completed, an increment base off the lineage) is a [`ScopeError::Refused`];
//! a job the audit does not support is a [`ScopeError::Unsupported`].

use std::collections::{BTreeMap, BTreeSet};

use clink_bundle::Bundle;
use clink_connectors::clickhouse::destination::Destination;
use clink_engine::capture::SinkEvidence;
use clink_engine::checkpoint::markers::CheckpointKind;
use clink_engine::operators::kafka_source::Position;
use serde_json::Value as Json;
use thiserror::Error;

use crate::cells::{Cell, CellKind};
use crate::evidence::{self, Unread};
use crate::shape::{shape, JobShape};

mod document;
mod explain;
mod interval;
mod key;
mod walk;

pub use document::{canonical_sha256, document_sha256, watermark_json, SCOPE_FORMAT};
pub use key::KeyError;

/// The most intervals a scope walks (a bound on malformed evidence, far
/// above any real lineage a bundle can hold).
pub const MAX_INTERVALS: usize = 100_000;

#[derive(Debug, Error)]
pub enum ScopeError {
    /// The request does not fit the bundle (exit 2).
    #[error("{0}")]
    Refused(String),
    /// The job's shape is not one the audit supports (exit 3, nothing written).
    #[error("{0}")]
    Unsupported(String),
}

/// Which intervals a scope spans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScopeKind {
    /// Back to the previous completed checkpoint, or the run's start or restore point.
    Interval,
    /// Back to a run that began with no state, through every restore.
    Lineage,
    /// Back to the completed checkpoint `base` of the lineage.
    Increment { base: u64 },
}

impl ScopeKind {
    /// The scope `--since` and `--from-run-start` ask for, for a job that is
    /// windowed or not, when the caller needs a lineage for its own reasons
    /// (`lineage`): one rule for incident-scope and incident-reconcile. The
    /// two options name different starts, so both together are refused, as
    /// is an increment of a record-wise job.
    pub fn requested(since: Option<u64>, from_run_start: bool, windowed: bool, lineage: bool) -> Result<Self, String> {
        if let Some(why) = conflicting_starts(since, from_run_start) {
            return Err(why);
        }
        match since {
            Some(base) if !windowed => Err(format!(
                "--since {base}: increments are for windowed jobs; a record-wise scope is one interval (or --from-run-start)"
            )),
            Some(base) => Ok(ScopeKind::Increment { base }),
            None if from_run_start || lineage => Ok(ScopeKind::Lineage),
            None => Ok(ScopeKind::Interval),
        }
    }
}

/// The job's shape at completed checkpoint `checkpoint`, from the graph its
/// marker names, when that graph reads and is a job the audit knows; where
/// it is not, [`Scope::compute`] says why.
pub fn shape_at(bundle: &Bundle, checkpoint: u64) -> Option<JobShape> {
    bundle.job_graph_at(checkpoint).ok().and_then(|g| shape(&g.graph).ok())
}

/// Why `--since` and `--from-run-start` together are refused: they name
/// different starts.
pub fn conflicting_starts(since: Option<u64>, from_run_start: bool) -> Option<String> {
    let base = since.filter(|_| from_run_start)?;
    Some(format!(
        "--since {base} and --from-run-start name different starts (checkpoint {base}, the run's start): give one"
    ))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScopeRequest {
    pub checkpoint: u64,
    pub kind: ScopeKind,
}

/// One sink subtask's account of one interval.
#[derive(Debug, Clone)]
pub struct SubtaskInterval {
    pub subtask: u32,
    pub evidence: Option<SinkEvidence>,
    /// The rows the sink received, as cells; `None` when they could not be
    /// read whole.
    pub rows: Option<Vec<Vec<Cell>>>,
    /// The interval's INSERT ledger, as the evidence records it.
    pub inserts: Vec<Json>,
    /// The recorded input of an interval whose evidence was never written
    /// (a run killed after its INSERT): what it may have sent, unchecked.
    pub rows_without_evidence: Option<(Vec<Vec<Cell>>, u64)>,
}

impl SubtaskInterval {
    /// Whether the ledger says a resend of this interval may have landed twice.
    pub fn may_land_twice(&self) -> bool {
        self.inserts.iter().any(|i| i.get("may_land_twice") == Some(&Json::Bool(true)))
    }
}

/// One interval (epoch) of the scope, every sink subtask's account of it.
#[derive(Debug, Clone)]
pub struct Interval {
    pub epoch: u64,
    pub previous_barrier: u64,
    pub subtasks: Vec<SubtaskInterval>,
}

impl Interval {
    pub fn rows(&self) -> usize {
        self.subtasks.iter().map(|s| s.rows.as_ref().map_or(0, Vec::len)).sum()
    }

    /// The least watermark the sink's subtasks recorded at this interval's
    /// barrier: `Some(None)` when some subtask had none yet, `None` when the
    /// evidence does not record it.
    pub fn recorded_watermark(&self) -> Option<Option<i64>> {
        let mut least: Option<Option<i64>> = None;
        for s in &self.subtasks {
            let w = s.evidence.as_ref()?.watermark?.last;
            least = Some(match (least, w) {
                (None, w) => w,
                (Some(None), _) | (_, None) => None,
                (Some(Some(a)), Some(b)) => Some(a.min(b)),
            });
        }
        least
    }
}

/// Where a scope starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// A run that began with no state.
    RunStart,
    /// A completed checkpoint (the previous one, a restore point, or an increment's base).
    Checkpoint(u64),
}

/// A restore the scope's walk passes: the run restored from `restored_from`
/// numbered its first interval `first_epoch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Crossing {
    pub restored_from: u64,
    pub first_epoch: u64,
    /// Whether the bundle's RESTORED record names it.
    pub recorded: bool,
}

/// The scope of one completed checkpoint.
#[derive(Debug, Clone)]
pub struct Scope {
    pub request: ScopeRequest,
    pub job_id: u64,
    pub job_name: Option<String>,
    pub graph_sha256: Option<String>,
    pub shape: JobShape,
    pub kinds: Vec<CellKind>,
    /// The intervals, oldest first.
    pub intervals: Vec<Interval>,
    pub start: Start,
    pub crossings: Vec<Crossing>,
    /// The completed checkpoints the walk passes (oldest first), the start and the audited one included.
    pub checkpoints: Vec<u64>,
    /// The source's position at each of `checkpoints` (and the start) the bundle holds.
    pub positions: BTreeMap<u64, Position>,
    /// The sink's recorded watermark at the increment's base.
    pub base_watermark: Option<Option<i64>>,
    /// Intervals of runs a restore at the scope's start discarded, as far as the bundle holds them.
    pub discarded: Vec<Interval>,
    /// Sink intervals after the audited checkpoint that the bundle holds.
    pub after: Vec<Interval>,
    /// Whether the audited checkpoint is a run's final one (its source ended).
    pub final_checkpoint: bool,
    /// The destination as the sink's open found it, in the audited interval's evidence.
    pub destination: Option<Destination>,
    /// Every destination the scope's evidence records (one, unless the evidence disagrees).
    pub destinations: Vec<Destination>,
    /// What is missing or not whole: each makes the scope's checks unavailable.
    pub problems: Vec<String>,
}

impl Scope {
    /// The scope of `request.checkpoint` in `bundle`, whose integrity the
    /// caller checked. Its job graph is the one checkpoint N's marker names.
    pub fn compute(bundle: &Bundle, request: ScopeRequest) -> Result<Scope, ScopeError> {
        let (completed, restored) = evidence::markers(bundle).map_err(refused("the bundle's markers"))?;
        let n = request.checkpoint;
        let passed_over = |c: u64| restored.as_ref().is_some_and(|r| r.passes_over(c));
        if !completed.contains(&n) {
            return Err(ScopeError::Refused(format!(
                "checkpoint {n} is not completed in this bundle (it holds COMPLETED markers for {})",
                list(&completed)
            )));
        }
        if passed_over(n) {
            return Err(ScopeError::Refused(format!(
                "checkpoint {n} was completed by a run the restore to checkpoint {} discarded (the RESTORED record passes over it)",
                restored.as_ref().map_or(0, |r| r.restored_from)
            )));
        }
        if let ScopeKind::Increment { base } = request.kind {
            if base >= n {
                return Err(ScopeError::Refused(format!("--since {base} is not before checkpoint {n}")));
            }
            if !completed.contains(&base) || passed_over(base) {
                return Err(ScopeError::Refused(format!(
                    "--since {base}: the bundle does not hold checkpoint {base} as completed on the lineage"
                )));
            }
        }
        let marker = evidence::completed(bundle, n).map_err(refused(&format!("COMPLETED-{n}")))?;
        let graph = bundle
            .job_graph_at(n)
            .map_err(|e| ScopeError::Refused(format!("the bundle names no usable job graph for checkpoint {n}: {e}")))?
            .graph;
        let shape = shape(&graph).map_err(|e| ScopeError::Unsupported(e.to_string()))?;
        let kinds = shape.columns.iter().map(|c| CellKind::of(c.ty)).collect();
        let mut scope = Scope {
            request,
            job_id: bundle.job_id(),
            job_name: bundle.manifest.job.name.clone(),
            graph_sha256: marker.graph.as_ref().map(|g| g.sha256.clone()),
            shape,
            kinds,
            intervals: Vec::new(),
            start: Start::RunStart,
            crossings: Vec::new(),
            checkpoints: Vec::new(),
            positions: BTreeMap::new(),
            base_watermark: None,
            discarded: Vec::new(),
            after: Vec::new(),
            final_checkpoint: marker.kind == CheckpointKind::Final,
            destination: None,
            destinations: Vec::new(),
            problems: Vec::new(),
        };
        scope.walk(bundle, &completed, restored.as_ref().map(|r| (r.restored_from, r.next)))?;
        scope.read_positions(bundle)?;
        scope.read_destinations();
        Ok(scope)
    }

    /// Whether the scope's evidence is whole.
    pub fn whole(&self) -> bool {
        self.problems.is_empty()
    }

    /// The rows the sink received over the scope, every interval's and subtask's.
    pub fn expected_rows(&self) -> Vec<Vec<Cell>> {
        self.intervals.iter().flat_map(|i| &i.subtasks).flat_map(|s| s.rows.iter().flatten().cloned()).collect()
    }

    /// The sink's recorded watermark at a checkpoint of the scope.
    pub fn recorded_watermark(&self, checkpoint: u64) -> Option<Option<i64>> {
        if let (ScopeKind::Increment { base }, true) = (self.request.kind, true) {
            if checkpoint == base {
                return self.base_watermark;
            }
        }
        self.intervals.iter().find(|i| i.epoch == checkpoint).and_then(Interval::recorded_watermark)
    }

    pub fn version(&self) -> u64 {
        match (self.shape.windowed(), self.request.kind) {
            (None, _) => 1,
            (Some(_), ScopeKind::Increment { .. }) => 3,
            (Some(_), _) => 2,
        }
    }
}

/// A refusal of `what`, for evidence that does not read or is not what the
/// manifest vouched for.
fn refused(what: &str) -> impl Fn(Unread) -> ScopeError + '_ {
    move |e| ScopeError::Refused(format!("{what}: {e}"))
}

/// Evidence that gives nothing to decide on: a problem of the scope (its
/// checks cannot decide), or a refusal when it is not what it should be.
fn problem_or_refusal(e: Unread, problems: &mut Vec<String>) -> Result<(), ScopeError> {
    match e {
        Unread::Refused(why) => Err(ScopeError::Refused(why)),
        Unread::Absent(why) | Unread::Unreadable(why) => {
            problems.push(why);
            Ok(())
        }
    }
}

fn list(items: &BTreeSet<u64>) -> String {
    if items.is_empty() {
        "none".into()
    } else {
        items.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scope_request_names_one_start() {
        assert_eq!(ScopeKind::requested(None, false, false, false), Ok(ScopeKind::Interval));
        assert_eq!(ScopeKind::requested(None, true, false, false), Ok(ScopeKind::Lineage));
        assert_eq!(ScopeKind::requested(None, false, true, true), Ok(ScopeKind::Lineage));
        assert_eq!(ScopeKind::requested(Some(3), false, true, true), Ok(ScopeKind::Increment { base: 3 }));
        let both = ScopeKind::requested(Some(3), true, true, false).unwrap_err();
        assert!(both.contains("--since 3 and --from-run-start"), "{both}");
        let record_wise = ScopeKind::requested(Some(3), false, false, false).unwrap_err();
        assert!(record_wise.contains("increments are for windowed jobs"), "{record_wise}");
    }
}
