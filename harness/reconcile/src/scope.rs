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

use clink_basics::ids::OperatorId;
use clink_bundle::Bundle;
use clink_connectors::clickhouse::destination::Destination;
use clink_engine::capture::{read_capture, SinkEvidence};
use clink_engine::checkpoint::backend::FileStateBackend;
use clink_engine::checkpoint::markers::{list_completed, read_completed, read_restored, CheckpointKind};
use clink_engine::checkpoint::{participant_name, CheckpointLayout};
use clink_engine::event::Event;
use clink_engine::operators::kafka_source::{decode_position, Position};
use serde_json::{json, Value as Json};
use thiserror::Error;

use crate::cells::{self, Cell, CellKind};
use crate::shape::{shape, JobShape};

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

/// Why `--key` does not name the audit's key.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum KeyError {
    /// A windowed job's key is its windows' identity, nothing else.
    #[error(
        "--key {} is not the windows' identity {}, which the job's window names",
        .given.join(","),
        .identity.join(",")
    )]
    NotTheWindowIdentity { given: Vec<String>, identity: Vec<String> },
    /// A record-wise job's key must be named.
    #[error("name the key with --key: the columns that identify one row the job writes")]
    Missing,
    /// `written` lists the columns the sink writes.
    #[error("--key {name:?} is not a column the sink writes (it writes {})", .written.join(", "))]
    NotAColumn { name: String, written: Vec<String> },
    #[error("--key names {name:?} twice")]
    Twice { name: String },
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

fn layout(bundle: &Bundle) -> CheckpointLayout {
    CheckpointLayout::new(bundle.checkpoint_dir(), bundle.job_id())
}

impl Scope {
    /// The scope of `request.checkpoint` in `bundle`, whose integrity the caller checked.
    pub fn compute(bundle: &Bundle, request: ScopeRequest) -> Result<Scope, ScopeError> {
        let graph = bundle
            .job_graph()
            .map_err(|e| ScopeError::Refused(format!("the bundle names no usable job graph: {e}")))?
            .graph;
        let shape = shape(&graph).map_err(|e| ScopeError::Unsupported(e.to_string()))?;
        let layout = layout(bundle);
        let completed: BTreeSet<u64> = list_completed(&layout)
            .map_err(|e| ScopeError::Refused(format!("the bundle's markers: {e}")))?
            .into_iter()
            .collect();
        let restored = read_restored(&layout).map_err(|e| ScopeError::Refused(format!("the RESTORED record: {e}")))?;
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
        let marker = read_completed(&layout, n).map_err(|e| ScopeError::Refused(format!("COMPLETED-{n}: {e}")))?;
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
        scope.read_positions(bundle, &layout);
        scope.read_destinations();
        Ok(scope)
    }

    /// Walks back from the audited interval through the previous barriers.
    fn walk(
        &mut self,
        bundle: &Bundle,
        completed: &BTreeSet<u64>,
        restored: Option<(u64, u64)>,
    ) -> Result<(), ScopeError> {
        let n = self.request.checkpoint;
        let mut epoch = n;
        let mut intervals = Vec::new();
        loop {
            if intervals.len() >= MAX_INTERVALS {
                self.problems.push(format!("the walk back from checkpoint {n} passed {MAX_INTERVALS} intervals"));
                break;
            }
            let (interval, problems) = self.interval(bundle, epoch);
            self.problems.extend(problems);
            let Some(previous) = self.previous_barrier(&interval) else {
                self.problems.push(format!(
                    "no sink subtask's evidence of interval {epoch} is in the bundle, so the intervals before it are not known (collect with --include-captures, and --epochs reaching back that far)"
                ));
                intervals.push(interval);
                self.start = Start::RunStart;
                break;
            };
            intervals.push(interval);
            if previous >= epoch {
                self.problems.push(format!(
                    "interval {epoch} names barrier {previous} before it, which is not earlier: the evidence is inconsistent"
                ));
                break;
            }
            if previous + 1 != epoch {
                self.crossings.push(Crossing {
                    restored_from: previous,
                    first_epoch: epoch,
                    recorded: restored == Some((previous, epoch)),
                });
            }
            let stop = match self.request.kind {
                ScopeKind::Interval => previous == 0 || completed.contains(&previous),
                ScopeKind::Lineage => previous == 0,
                ScopeKind::Increment { base } if previous == base => true,
                ScopeKind::Increment { base } if previous < base => {
                    return Err(ScopeError::Refused(format!(
                        "--since {base}: checkpoint {base} is not on the lineage of checkpoint {n}; a restore went back past it, to checkpoint {previous}"
                    )))
                }
                ScopeKind::Increment { .. } => false,
            };
            if stop {
                self.start = if previous == 0 { Start::RunStart } else { Start::Checkpoint(previous) };
                break;
            }
            epoch = previous;
        }
        intervals.reverse();
        self.crossings.reverse();
        let on_chain: BTreeSet<u64> = intervals.iter().map(|i| i.epoch).collect();
        let mut checkpoints: Vec<u64> = intervals.iter().map(|i| i.epoch).filter(|e| completed.contains(e)).collect();
        if let Start::Checkpoint(c) = self.start {
            checkpoints.insert(0, c);
        }
        self.checkpoints = checkpoints;
        self.intervals = intervals;
        // The base's own interval says what the sink had recorded there.
        if let ScopeKind::Increment { base } = self.request.kind {
            let (interval, _) = self.interval(bundle, base);
            self.base_watermark = interval.recorded_watermark();
            if self.base_watermark.is_none() {
                self.problems.push(format!(
                    "the sink's evidence of checkpoint {base} (the increment's base) is not in the bundle whole, so the watermark it recorded there is not known (collect with --epochs reaching back to {base})"
                ));
            }
        }
        // The run a restore at the scope's start discarded, and what came after.
        let mut sink_epochs: BTreeSet<u64> = BTreeSet::new();
        for e in bundle.manifest.epochs.iter().filter(|e| e.role == "sink" && e.operator_id() == self.shape.sink) {
            sink_epochs.insert(e.epoch);
        }
        for crossing in &self.crossings {
            for e in sink_epochs.range(crossing.restored_from + 1..crossing.first_epoch) {
                if !on_chain.contains(e) {
                    self.discarded.push(self.interval(bundle, *e).0);
                }
            }
        }
        for e in sink_epochs.range(n + 1..) {
            self.after.push(self.interval(bundle, *e).0);
        }
        Ok(())
    }

    /// The previous barrier every subtask's evidence of `interval` names (they must agree).
    fn previous_barrier(&mut self, interval: &Interval) -> Option<u64> {
        let named: BTreeSet<u64> =
            interval.subtasks.iter().filter_map(|s| s.evidence.as_ref().map(|e| e.previous_barrier)).collect();
        if named.len() > 1 {
            self.problems.push(format!(
                "the sink's subtasks disagree on the barrier before interval {}: {}",
                interval.epoch,
                list(&named)
            ));
        }
        named.into_iter().next_back()
    }

    /// One interval's evidence and rows from the bundle, every sink
    /// subtask's, and what is not whole in it.
    fn interval(&self, bundle: &Bundle, epoch: u64) -> (Interval, Vec<String>) {
        let sink = self.shape.sink;
        let mut subtasks = Vec::new();
        let mut problems = Vec::new();
        for subtask in 0..self.shape.sink_parallelism {
            let (s, problem) = read_subtask_interval(bundle, sink, subtask, epoch, &self.kinds);
            problems.extend(problem);
            subtasks.push(s);
        }
        let previous_barrier =
            subtasks.iter().find_map(|s| s.evidence.as_ref().map(|e| e.previous_barrier)).unwrap_or(0);
        (Interval { epoch, previous_barrier, subtasks }, problems)
    }

    /// The source's positions at the scope's checkpoints.
    fn read_positions(&mut self, bundle: &Bundle, layout: &CheckpointLayout) {
        let backend = FileStateBackend::new(layout.clone());
        let participant = participant_name(self.shape.source, 0);
        let wanted: Vec<u64> = match self.request.kind {
            ScopeKind::Interval => {
                let mut w = vec![self.request.checkpoint];
                if let Start::Checkpoint(c) = self.start {
                    w.insert(0, c);
                }
                w
            }
            _ => self.checkpoints.clone(),
        };
        for c in wanted {
            let generation = match read_completed(layout, c) {
                Ok(m) => m.generation,
                Err(e) => {
                    self.problems.push(format!("COMPLETED-{c}: {e}"));
                    continue;
                }
            };
            let path = format!("checkpoint/_state/{}/v{generation}/{participant}/checkpoint-{c}.snap", self.job_id);
            if bundle.artifact(&path).is_none() || bundle.artifact(&format!("{path}.meta")).is_none() {
                self.problems.push(format!(
                    "the source's position at checkpoint {c} is not in the bundle ({path}; collect with --include-state --include-captures)"
                ));
                continue;
            }
            match backend
                .read(generation, &participant, c)
                .map_err(|e| e.to_string())
                .and_then(|v| decode_position(&v.slots).map_err(|e| e.to_string()))
            {
                Ok(p) => {
                    self.positions.insert(c, p);
                }
                Err(e) => self.problems.push(format!("the source's position at checkpoint {c}: {e}")),
            }
        }
    }

    fn read_destinations(&mut self) {
        let mut all: Vec<Destination> = Vec::new();
        for interval in &self.intervals {
            for s in &interval.subtasks {
                let Some(doc) = s.evidence.as_ref().and_then(|e| e.sink.get("destination")) else { continue };
                match serde_json::from_value::<Destination>(doc.clone()) {
                    Ok(d) => {
                        if !all.contains(&d) {
                            all.push(d);
                        }
                    }
                    Err(e) => self.problems.push(format!(
                        "interval {} of sink subtask {}: the recorded destination does not read: {e}",
                        interval.epoch, s.subtask
                    )),
                }
            }
        }
        let n = self.request.checkpoint;
        self.destination = self
            .intervals
            .iter()
            .filter(|i| i.epoch == n)
            .flat_map(|i| &i.subtasks)
            .find_map(|s| s.evidence.as_ref().and_then(|e| e.sink.get("destination")))
            .and_then(|d| serde_json::from_value(d.clone()).ok())
            .or_else(|| all.first().cloned());
        self.destinations = all;
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

    /// The audit's key: the window identity for a windowed job, else `key`.
    pub fn key_columns(&self, key: Option<&[String]>) -> Result<Vec<usize>, KeyError> {
        let names: Vec<String> = match (self.shape.window_identity(), key) {
            (Some(identity), None) => identity,
            (Some(identity), Some(given)) if given == identity.as_slice() => identity,
            (Some(identity), Some(given)) => {
                return Err(KeyError::NotTheWindowIdentity { given: given.to_vec(), identity })
            }
            (None, Some(given)) => given.to_vec(),
            (None, None) => return Err(KeyError::Missing),
        };
        let mut indices = Vec::new();
        for name in &names {
            let Some(i) = self.shape.columns.iter().position(|c| &c.name == name) else {
                return Err(KeyError::NotAColumn {
                    name: name.clone(),
                    written: self.shape.columns.iter().map(|c| c.name.clone()).collect(),
                });
            };
            if indices.contains(&i) {
                return Err(KeyError::Twice { name: name.clone() });
            }
            indices.push(i);
        }
        Ok(indices)
    }

    /// The scope document (`clink-audit-scope`), with its `scope_sha256`.
    pub fn document(&self) -> Json {
        let version = self.version();
        let sink_columns: Vec<Json> = self
            .shape
            .columns
            .iter()
            .zip(&self.kinds)
            .map(|(c, k)| json!({"name": c.name, "type": c.ty, "cell": k.name()}))
            .collect();
        let n = self.request.checkpoint;
        let start_json = match self.start {
            Start::RunStart => json!({"run_start": true}),
            Start::Checkpoint(c) => json!({"checkpoint": c}),
        };
        let mut doc = json!({
            "format": SCOPE_FORMAT,
            "version": version,
            "job": {
                "id": self.job_id.to_string(),
                "name": self.job_name,
                "graph_sha256": self.graph_sha256,
            },
            "sink": {
                "operator": self.shape.sink.to_string(),
                "uid": self.shape.sink_uid,
                "type": clink_engine::operators::clickhouse_sink::TYPE,
                "subtasks": self.shape.sink_parallelism,
                "database": self.shape.database,
                "table": self.shape.table,
                "runs": self.crossings.iter().map(|c| json!({"restored_from": c.restored_from, "first_interval": c.first_epoch, "recorded": c.recorded})).collect::<Vec<_>>(),
            },
            "checkpoint": n,
            "start": start_json,
            "from_run_start": self.start == Start::RunStart,
            "intervals": self.intervals.iter().map(|i| i.epoch).collect::<Vec<_>>(),
            "sources": [self.source_document()],
            "columns": sink_columns,
            "semantics": cells::SEMANTICS,
            "complete": self.whole(),
            "incomplete": self.problems,
        });
        if let (Some(rules), Some(identity)) = (self.shape.windowed(), self.shape.window_identity()) {
            doc["key"] = json!(identity);
            doc["transform"] = rules.document();
            let lineage: Vec<Json> = self
                .checkpoints
                .iter()
                .filter(|c| !matches!(self.request.kind, ScopeKind::Increment { base } if base == **c))
                .map(|c| {
                    json!({
                        "checkpoint": c,
                        "positions": self.positions.get(c).map(positions_json),
                        "watermark": self.recorded_watermark(*c).map(watermark_json),
                    })
                })
                .collect();
            doc["lineage"] = json!({
                "restores": self.crossings.iter().map(|c| json!({"restored_from": c.restored_from, "first_interval": c.first_epoch, "recorded": c.recorded})).collect::<Vec<_>>(),
                "checkpoints": lineage,
            });
            doc["finality"] = json!({
                "checkpoint": n,
                "watermark": self.recorded_watermark(n).map(watermark_json),
                "allowed_lateness_ms": rules.allowed_lateness_ms,
            });
            if let ScopeKind::Increment { base } = self.request.kind {
                doc["base"] = json!({
                    "checkpoint": base,
                    "positions": self.positions.get(&base).map(positions_json),
                    "watermark": self.base_watermark.map(watermark_json),
                });
            }
        }
        let sha = canonical_sha256(&doc);
        doc["scope_sha256"] = Json::String(sha);
        doc
    }

    fn source_document(&self) -> Json {
        let plan = &self.shape.source_plan;
        let end = self.positions.get(&self.request.checkpoint);
        let start = match self.start {
            Start::Checkpoint(c) => self.positions.get(&c),
            Start::RunStart => None,
        };
        let log = |p: Option<&Position>| p.and_then(|p| serde_json::from_str::<Json>(&p.log).ok());
        let (log_start, log_end) = (log(start), log(end));
        let identity = |log: &Option<Json>| {
            log.as_ref().map(|l| (l.get("topic").cloned(), l.get("cluster_id").cloned(), l.get("topic_id").cloned()))
        };
        let same_log = match (self.start, &log_start, &log_end) {
            (Start::RunStart, _, Some(_)) => Json::Null,
            (_, Some(_), Some(_)) => Json::Bool(identity(&log_start) == identity(&log_end)),
            _ => Json::Null,
        };
        let partitions: Vec<Json> = end
            .map(|e| {
                e.partitions
                    .iter()
                    .map(|(p, pos)| {
                        json!({
                            "partition": p,
                            "from": start.and_then(|s| s.partitions.get(p)).map(|s| s.next),
                            "to": pos.next,
                            "end": e.end.as_ref().and_then(|end| end.get(p)).copied(),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        let field = |name: &str| log_end.as_ref().and_then(|l| l.get(name)).cloned().unwrap_or(Json::Null);
        json!({
            "operator": self.shape.source.to_string(),
            "uid": self.shape.source_uid,
            "topic": plan.topic,
            "cluster_id": field("cluster_id"),
            "topic_id": field("topic_id"),
            "isolation": plan.isolation.as_str(),
            "event_time_column": plan.columns.0.get(plan.event_time).map(|c| c.name.clone()),
            "columns": plan.columns,
            "log_at_start": log_start,
            "log_at_end": log_end,
            "same_log": same_log,
            "partitions": partitions,
        })
    }
}

pub const SCOPE_FORMAT: &str = "clink-audit-scope";

fn positions_json(p: &Position) -> Json {
    Json::Array(p.partitions.iter().map(|(partition, pos)| json!({"partition": partition, "next": pos.next})).collect())
}

/// A recorded watermark: a number, or null when none had arrived.
pub fn watermark_json(w: Option<i64>) -> Json {
    w.map_or(Json::Null, Json::from)
}

/// One sink subtask's interval from the bundle, and what is wrong with it.
fn read_subtask_interval(
    bundle: &Bundle,
    sink: OperatorId,
    subtask: u32,
    epoch: u64,
    kinds: &[CellKind],
) -> (SubtaskInterval, Option<String>) {
    let mut s =
        SubtaskInterval { subtask, evidence: None, rows: None, inserts: Vec::new(), rows_without_evidence: None };
    let dir = format!("capture/op-{sink}/subtask-{subtask}");
    let evidence_path = format!("{dir}/{}", clink_engine::capture::sink_evidence_name(epoch));
    let capture_path = clink_bundle::manifest::capture_path(sink, subtask, epoch);
    let label = format!("interval {epoch} of sink subtask {subtask}");
    if bundle.artifact(&evidence_path).is_none() {
        // A run killed between its INSERT and its evidence leaves the
        // recorded input alone: enough to say what it may have sent.
        if let Ok(rows) = read_rows(bundle, &capture_path, kinds, &label) {
            s.rows_without_evidence = Some(rows);
        }
        return (s, Some(format!("{label}: its evidence ({evidence_path}) is not in the bundle")));
    }
    let evidence = match SinkEvidence::read(&bundle.root.join(&evidence_path)) {
        Ok(e) => e,
        Err(e) => return (s, Some(format!("{label}: {e}"))),
    };
    let interval = evidence.sink.get("interval").cloned().unwrap_or(Json::Null);
    s.inserts = interval.get("inserts").and_then(Json::as_array).cloned().unwrap_or_default();
    let recorded_rows = interval.get("rows").and_then(Json::as_u64);
    s.evidence = Some(evidence.clone());
    if evidence.epoch != epoch || evidence.subtask != subtask || evidence.operator != sink.to_string() {
        return (
            s,
            Some(format!(
                "{label}: its evidence names operator {} subtask {} epoch {}",
                evidence.operator, evidence.subtask, evidence.epoch
            )),
        );
    }
    if evidence.capture.truncated {
        return (s, Some(format!("{label}: the sink's recorded input was truncated (raise --capture-records)")));
    }
    let (rows, true_records) = match read_rows(bundle, &capture_path, kinds, &label) {
        Ok(r) => r,
        Err(problem) => return (s, Some(problem)),
    };
    let n = rows.len() as u64;
    if true_records != n || evidence.capture.records != n {
        return (
            s,
            Some(format!(
                "{label}: the recorded input holds {n} rows, its header counts {true_records} and the evidence {}",
                evidence.capture.records
            )),
        );
    }
    let ledger: u64 = s.inserts.iter().filter_map(|i| i.get("rows").and_then(Json::as_u64)).sum();
    if recorded_rows != Some(n) || ledger != n {
        return (s, Some(format!(
            "{label}: the sink's ledger does not account for exactly the {n} rows its recorded input holds (interval rows {}, INSERTs {ledger})",
            recorded_rows.map_or("absent".to_string(), |r| r.to_string())
        )));
    }
    s.rows = Some(rows);
    (s, None)
}

/// The rows of a sink's recorded input, whole, as cells, and the count its header gives.
fn read_rows(
    bundle: &Bundle,
    capture_path: &str,
    kinds: &[CellKind],
    label: &str,
) -> Result<(Vec<Vec<Cell>>, u64), String> {
    let Some(artifact) = bundle.artifact(capture_path) else {
        return Err(format!("{label}: its recorded input ({capture_path}) is not in the bundle"));
    };
    let bytes = clink_basics::files::read_bounded(&bundle.root.join(capture_path), artifact.size)
        .map_err(|e| format!("{label}: {capture_path}: {e}"))?;
    let capture = read_capture(&bytes).map_err(|e| format!("{label}: {capture_path}: {e}"))?;
    if !capture.is_whole() {
        return Err(format!("{label}: {capture_path} is not whole (truncated or cut short)"));
    }
    let mut rows = Vec::new();
    for event in &capture.events {
        if let Event::Record(row) = event {
            if row.len() != kinds.len() {
                return Err(format!(
                    "{label}: a recorded row has {} values, the sink writes {} columns",
                    row.len(),
                    kinds.len()
                ));
            }
            let cells: Result<Vec<Cell>, _> = row.iter().zip(kinds).map(|(v, k)| cells::from_value(v, *k)).collect();
            rows.push(cells.map_err(|e| format!("{label}: a recorded row: {e}"))?);
        }
    }
    Ok((rows, capture.header.true_records))
}

fn list(items: &BTreeSet<u64>) -> String {
    if items.is_empty() {
        "none".into()
    } else {
        items.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
    }
}

/// SHA-256 of a document's canonical form: keys sorted, no whitespace.
pub fn canonical_sha256(doc: &Json) -> String {
    let mut out = Vec::new();
    canonical_into(doc, &mut out);
    clink_basics::digest::sha256_hex(&out)
}

fn canonical_into(doc: &Json, out: &mut Vec<u8>) {
    match doc {
        Json::Object(map) => {
            out.push(b'{');
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(Json::String(k.clone()).to_string().as_bytes());
                out.push(b':');
                if let Some(v) = map.get(k) {
                    canonical_into(v, out);
                }
            }
            out.push(b'}');
        }
        Json::Array(items) => {
            out.push(b'[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                canonical_into(v, out);
            }
            out.push(b']');
        }
        other => out.extend_from_slice(other.to_string().as_bytes()),
    }
}

/// The scope document's hash, recomputed without its `scope_sha256` field.
pub fn document_sha256(doc: &Json) -> Option<String> {
    let mut copy = doc.clone();
    copy.as_object_mut()?.remove("scope_sha256");
    Some(canonical_sha256(&copy))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_canonical_hash_ignores_key_order_and_whitespace() {
        let a: Json = serde_json::from_str(r#"{"b": [1, {"y": 2, "x": "é"}], "a": null}"#).unwrap();
        let b: Json = serde_json::from_str(r#"{"a":null,"b":[1,{"x":"é","y":2}]}"#).unwrap();
        assert_eq!(canonical_sha256(&a), canonical_sha256(&b));
        let c: Json = serde_json::from_str(r#"{"a":null,"b":[1,{"x":"é","y":3}]}"#).unwrap();
        assert_ne!(canonical_sha256(&a), canonical_sha256(&c));
    }
}
