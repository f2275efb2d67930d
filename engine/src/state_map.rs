//! Which state of a checkpoint a job may restore, and the refusal of a
//! restore that would leave state behind.
//!
//! A checkpoint's state belongs to operators by id and uid: its COMPLETED
//! marker names the job graph it was taken of, and each participant's
//! snapshot holds the state of one subtask. A job restores an operator's
//! state only into an operator with the same id and the same uid, at the
//! same parallelism, or at another one when its type re-divides its state
//! ([`crate::operators::rescale`]): the map then records the rescale, and the run writes
//! the next layout generation. An operator of the checkpoint that holds
//! state and has no such counterpart in the job (its uid changed, or it is
//! gone) would leave that state read by nothing: the restore is refused by
//! default, naming the operator, and [`map_state`] with `allow_non_restored`
//! drops that state instead (the counterpart, if any, starts empty). State
//! an operator cannot re-divide is never dropped for a rescale: that restore
//! is refused, whatever the opt-in. Operators of the job the checkpoint does
//! not know (new, or stateless ones rescaled) start empty.
//!
//! "Holds state" is read from the snapshots themselves: any slot besides
//! the driver's timers and watermark, or a registered timer.
//!
//! This module sits above both the checkpoint files and the job graph: it
//! reads the first and compares it with the second. It never writes a
//! checkpoint file, and `checkpoint` never imports it (or `job`, or
//! `operators`): the structure test (engine/tests/structure.rs) forbids it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use thiserror::Error;

use clink_basics::ids::{parse_decimal_u64, OperatorId};

use crate::checkpoint::backend::{FileStateBackend, StateError};
use crate::checkpoint::graph::{read_graph, GraphError};
use crate::checkpoint::layout::{parse_participant_name, participant_name, CheckpointLayout};
use crate::checkpoint::markers::{read_completed, MarkerError};
use crate::checkpoint::snapshot::StateSlots;
use crate::codec::Reader;
use crate::job::JobGraph;
use crate::operators::driver::TIMERS_SLOT;
use crate::operators::rescale::{self, Rescale};
use crate::timers::{Clock, TimerService};

/// An operator of the checkpoint, as its job graph names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointOperator {
    pub id: OperatorId,
    /// `None` when the checkpoint's marker names no graph (a version 1 marker).
    pub uid: Option<String>,
    pub type_name: Option<String>,
    pub subtasks: u32,
    pub holds_state: bool,
}

/// Why an operator's state has no place in the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unmapped {
    /// No operator of the job has its id.
    Missing,
    /// The operator with its id has another uid in the job.
    UidChanged { now: String },
    /// The operator runs at another parallelism in the job, and its state
    /// cannot be re-divided (`reason`).
    ParallelismChanged { now: u32, reason: String },
}

/// State of the checkpoint that the job would not restore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnmappedState {
    pub operator: CheckpointOperator,
    pub why: Unmapped,
}

impl fmt::Display for UnmappedState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = &self.operator;
        write!(f, "operator {}", op.id)?;
        if let Some(uid) = &op.uid {
            write!(f, " (uid {uid:?}")?;
            if let Some(t) = &op.type_name {
                write!(f, ", {t}")?;
            }
            write!(f, ")")?;
        }
        match &self.why {
            Unmapped::Missing => write!(f, " holds state and is not in this job"),
            Unmapped::UidChanged { now } => write!(f, " holds state and has uid {now:?} in this job"),
            Unmapped::ParallelismChanged { now, reason } => {
                write!(f, " holds state at parallelism {} and runs at {now} in this job, and {reason}", op.subtasks)
            }
        }
    }
}

/// What a job restores from a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateMap {
    pub checkpoint: u64,
    /// The participants restored from the checkpoint's snapshots; every
    /// other participant of the job starts empty.
    pub restored: BTreeSet<String>,
    /// State dropped by the explicit opt-in (empty otherwise).
    pub dropped: Vec<UnmappedState>,
    /// Whether the checkpoint named its job graph (uids were compared).
    pub graph_known: bool,
    /// The layout generation the checkpoint's marker names (its snapshots' directory).
    pub generation: u32,
    /// The operators restored at another parallelism, their state re-divided.
    pub rescaled: BTreeMap<OperatorId, Rescale>,
}

impl StateMap {
    /// Whether a participant of the job starts empty.
    pub fn starts_empty(&self, participant: &str) -> bool {
        !self.restored.contains(participant)
    }

    /// The layout generation the restored run writes: one past the
    /// checkpoint's when state was re-divided, so no directory of the old
    /// layout is ever written again.
    pub fn next_generation(&self) -> u32 {
        // map_state refuses a rescale past the last generation.
        self.generation.saturating_add(u32::from(!self.rescaled.is_empty()))
    }
}

#[derive(Debug, Error)]
pub enum CompatError {
    #[error(
        "checkpoint {checkpoint}: {}; a restore that leaves state behind is refused (--allow-non-restored-state drops it)",
        list(.unmapped)
    )]
    Refused { checkpoint: u64, unmapped: Vec<UnmappedState> },
    #[error("checkpoint {checkpoint}: {}; a restore at another parallelism needs every such operator's state re-divisible", list(.unmapped))]
    Rescaled { checkpoint: u64, unmapped: Vec<UnmappedState> },
    #[error(transparent)]
    Markers(#[from] MarkerError),
    #[error(transparent)]
    Graph(#[from] GraphError),
    #[error(transparent)]
    State(#[from] StateError),
    #[error("checkpoint {checkpoint}: its job graph: {reason}")]
    GraphInvalid { checkpoint: u64, reason: String },
    #[error("--state: checkpoint {checkpoint}'s state is {marker} (its COMPLETED marker says so); this run's is {run}; give the run the --state its checkpoints were written with")]
    StateRoot { checkpoint: u64, marker: String, run: String },
}

fn list(unmapped: &[UnmappedState]) -> String {
    unmapped.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

/// Whether a snapshot holds state: a slot besides the timers, or a timer.
pub fn slots_hold_state(slots: &StateSlots) -> bool {
    slots.0.iter().any(|(name, slot)| {
        if name != TIMERS_SLOT {
            return true;
        }
        let mut timers = TimerService::new(Clock::Manual(0));
        let mut r = Reader::new(&slot.bytes);
        // A timers slot that does not decode is state the restore will judge.
        timers.decode(&mut r).map_or(true, |()| timers.timer_count() > 0)
    })
}

/// The operators of a checkpoint: from its marker's graph (ids, uids,
/// types) and its participants (subtasks), each read for whether it holds state.
pub fn checkpoint_operators(
    layout: &CheckpointLayout,
    checkpoint: u64,
) -> Result<(Vec<CheckpointOperator>, bool), CompatError> {
    checkpoint_operators_of(layout, checkpoint).map(|(ops, known, _)| (ops, known))
}

/// [`checkpoint_operators`] with the marker's layout generation.
fn checkpoint_operators_of(
    layout: &CheckpointLayout,
    checkpoint: u64,
) -> Result<(Vec<CheckpointOperator>, bool, u32), CompatError> {
    let marker = read_completed(layout, checkpoint)?;
    let written_with = marker.state.clone().unwrap_or_default();
    if written_with != *layout.state() {
        return Err(CompatError::StateRoot {
            checkpoint,
            marker: written_with.to_string(),
            run: layout.state().to_string(),
        });
    }
    let mut named: BTreeMap<OperatorId, (Option<String>, Option<String>)> = BTreeMap::new();
    let graph_known = marker.graph.is_some();
    if let Some(graph) = &marker.graph {
        let bytes = read_graph(layout, graph)?;
        let invalid = |reason: String| CompatError::GraphInvalid { checkpoint, reason };
        let doc: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| invalid(e.to_string()))?;
        let operators =
            doc.get("operators").and_then(|o| o.as_array()).ok_or_else(|| invalid("no operators".into()))?;
        for op in operators {
            let field = |name: &str| op.get(name).and_then(|v| v.as_str());
            let id =
                field("id").and_then(parse_decimal_u64).ok_or_else(|| invalid("an operator without an id".into()))?;
            named.insert(OperatorId(id), (field("uid").map(str::to_string), field("type").map(str::to_string)));
        }
    }
    let backend = FileStateBackend::new(layout.clone());
    let mut operators: BTreeMap<OperatorId, CheckpointOperator> = BTreeMap::new();
    for participant in &marker.participants {
        let Some((id, _)) = parse_participant_name(participant) else {
            return Err(CompatError::GraphInvalid {
                checkpoint,
                reason: format!("the marker names participant {participant:?}"),
            });
        };
        let snapshot = backend.read(marker.generation, participant, checkpoint)?;
        let (uid, type_name) = named.get(&id).cloned().unwrap_or((None, None));
        let entry =
            operators.entry(id).or_insert(CheckpointOperator { id, uid, type_name, subtasks: 0, holds_state: false });
        entry.subtasks += 1;
        entry.holds_state |= slots_hold_state(&snapshot.slots);
    }
    Ok((operators.into_values().collect(), graph_known, marker.generation))
}

/// Maps a checkpoint's state onto a job: which participants restore, and
/// what state would be left behind (refused unless `allow_non_restored`).
pub fn map_state(
    layout: &CheckpointLayout,
    checkpoint: u64,
    job: &JobGraph,
    allow_non_restored: bool,
) -> Result<StateMap, CompatError> {
    let (operators, graph_known, generation) = checkpoint_operators_of(layout, checkpoint)?;
    let mut restored = BTreeSet::new();
    let mut unmapped = Vec::new();
    let mut rescaled = Vec::new();
    let mut redivided = BTreeMap::new();
    for op in operators {
        let counterpart = job.operator(op.id);
        let why = match counterpart {
            None => Some(Unmapped::Missing),
            Some(c) if op.uid.as_ref().is_some_and(|uid| *uid != c.spec.uid) => {
                Some(Unmapped::UidChanged { now: c.spec.uid.clone() })
            }
            Some(c) if c.spec.parallelism != op.subtasks => {
                match rescale::refusal(c.spec.descriptor, &c.spec.params).filter(|_| op.holds_state) {
                    Some(reason) => Some(Unmapped::ParallelismChanged { now: c.spec.parallelism, reason }),
                    None => {
                        if op.holds_state {
                            redivided.insert(op.id, Rescale { from: op.subtasks, to: c.spec.parallelism });
                            restored.extend((0..c.spec.parallelism).map(|s| participant_name(op.id, s)));
                        }
                        continue;
                    }
                }
            }
            Some(_) => None,
        };
        match why {
            None => restored.extend((0..op.subtasks).map(|s| participant_name(op.id, s))),
            // Without state there is nothing to leave behind: the operator starts empty.
            Some(_) if !op.holds_state => {}
            Some(why @ Unmapped::ParallelismChanged { .. }) => rescaled.push(UnmappedState { operator: op, why }),
            Some(why) => unmapped.push(UnmappedState { operator: op, why }),
        }
    }
    if !rescaled.is_empty() {
        return Err(CompatError::Rescaled { checkpoint, unmapped: rescaled });
    }
    if !redivided.is_empty() && generation == u32::MAX {
        return Err(CompatError::GraphInvalid {
            checkpoint,
            reason: format!("its marker names layout generation {generation}, which a rescale cannot follow"),
        });
    }
    if !unmapped.is_empty() && !allow_non_restored {
        return Err(CompatError::Refused { checkpoint, unmapped });
    }
    Ok(StateMap { checkpoint, restored, dropped: unmapped, graph_known, generation, rescaled: redivided })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::graph::write_graph;
    use crate::checkpoint::markers::{write_completed, CheckpointKind, CompletedMarker};
    use crate::checkpoint::snapshot::{SlotKind, SnapshotHeader};
    use crate::job::parse_job;

    const EXAMPLE: &str = include_str!("../../fixtures/jobs/example/job.json");

    /// Checkpoint 1 of the example job: every participant holds a slot of
    /// its own, except key_by (operator 2), which holds only its watermark.
    fn checkpoint_of(job_text: &str) -> (tempfile::TempDir, CheckpointLayout) {
        let dir = tempfile::tempdir().unwrap();
        let job = parse_job(job_text).unwrap();
        let layout = CheckpointLayout::new(dir.path(), job.job_id);
        let graph = write_graph(&layout, job.to_document().to_string().as_bytes()).unwrap();
        let backend = FileStateBackend::new(layout.clone());
        let mut participants = Vec::new();
        for op in &job.operators {
            for s in 0..op.spec.parallelism {
                let name = participant_name(op.spec.id, s);
                let mut slots = StateSlots::new();
                let mut w = crate::codec::Writer::new();
                TimerService::new(Clock::Manual(0)).encode(&mut w);
                slots.put(TIMERS_SLOT, SlotKind::Timers, 1, w.into_bytes());
                if op.spec.id != OperatorId(2) {
                    slots.put("own", SlotKind::Operator, 1, vec![1]);
                }
                let header = SnapshotHeader { job: job.job_id, checkpoint: 1, operator: op.spec.id.0, subtask: s };
                backend.write(&name, &header, &slots).unwrap();
                participants.push(name);
            }
        }
        let marker = CompletedMarker::new(job.job_id, 1, 1, CheckpointKind::Savepoint, participants, Some(graph));
        write_completed(&layout, &marker).unwrap();
        (dir, layout)
    }

    #[test]
    fn the_same_job_restores_every_participant() {
        let (_dir, layout) = checkpoint_of(EXAMPLE);
        let job = parse_job(EXAMPLE).unwrap();
        let map = map_state(&layout, 1, &job, false).unwrap();
        assert_eq!(map.restored.len(), 10);
        assert!(map.dropped.is_empty() && map.graph_known);
    }

    #[test]
    fn a_changed_uid_is_refused_naming_the_operator_unless_dropping_is_asked_for() {
        let (_dir, layout) = checkpoint_of(EXAMPLE);
        let changed = parse_job(&EXAMPLE.replace("\"uid\": \"windows\"", "\"uid\": \"windows-v2\"")).unwrap();
        let err = map_state(&layout, 1, &changed, false).unwrap_err().to_string();
        assert!(
            err.contains("operator 3 (uid \"windows\", tumbling_window)") && err.contains("\"windows-v2\""),
            "{err}"
        );
        let map = map_state(&layout, 1, &changed, true).unwrap();
        assert_eq!(map.dropped.len(), 1);
        assert!(map.starts_empty("op-3-0") && map.starts_empty("op-3-1") && !map.starts_empty("op-4-0"));
    }

    #[test]
    fn a_missing_stateful_operator_is_refused_and_a_stateless_one_is_not() {
        let (_dir, layout) = checkpoint_of(EXAMPLE);
        // key_by (2) holds only its watermark: a new uid for it drops nothing.
        let key_by = parse_job(&EXAMPLE.replace("\"uid\": \"by-account\"", "\"uid\": \"keys\"")).unwrap();
        let map = map_state(&layout, 1, &key_by, false).unwrap();
        assert!(map.starts_empty("op-2-0"));
        // The idle detector (4) gone from the job: its state would be read by nothing.
        let mut doc: serde_json::Value = serde_json::from_str(EXAMPLE).unwrap();
        doc["operators"].as_array_mut().unwrap().retain(|o| o["id"] != "4" && o["id"] != "6");
        doc["edges"].as_array_mut().unwrap().retain(|e| e["to"] != "4" && e["to"] != "6");
        let without_idle = parse_job(&doc.to_string()).unwrap();
        let err = map_state(&layout, 1, &without_idle, false).unwrap_err().to_string();
        assert!(err.contains("operator 4 (uid \"idle\"") && err.contains("not in this job"), "{err}");
        assert!(err.contains("operator 6"), "the idle sink's handles are state too: {err}");
    }

    #[test]
    fn a_rescaled_operator_whose_state_re_divides_is_mapped_and_bumps_the_generation() {
        let (_dir, layout) = checkpoint_of(EXAMPLE);
        let text = EXAMPLE
            .replace("\"size_ms\": 10000}, \"parallelism\": 2", "\"size_ms\": 10000}, \"parallelism\": 3")
            .replace(
                "\"windows-out\", \"type\": \"staged_file_sink\", \"params\": {}, \"parallelism\": 2",
                "\"windows-out\", \"type\": \"staged_file_sink\", \"params\": {}, \"parallelism\": 3",
            );
        let rescaled = parse_job(&text).unwrap();
        let map = map_state(&layout, 1, &rescaled, false).unwrap();
        assert_eq!(map.rescaled.get(&OperatorId(3)), Some(&Rescale { from: 2, to: 3 }));
        assert_eq!(map.rescaled.get(&OperatorId(5)), Some(&Rescale { from: 2, to: 3 }));
        assert!(!map.starts_empty("op-3-2") && !map.starts_empty("op-5-2"));
        assert_eq!((map.generation, map.next_generation()), (1, 2));
        let same = map_state(&layout, 1, &parse_job(EXAMPLE).unwrap(), false).unwrap();
        assert_eq!(same.next_generation(), 1);
    }

    #[test]
    fn a_stateful_operator_that_cannot_re_divide_is_refused_even_when_dropping_is_allowed() {
        let (_dir, layout) = checkpoint_of(EXAMPLE);
        // The idle detector with its timers keyed by the key's text: a
        // rescale could not route them with their state.
        let text = EXAMPLE
            .replace(
                "\"timeout_ms\": 30000}, \"parallelism\": 2",
                "\"timeout_ms\": 30000, \"timer_key\": \"text\"}, \"parallelism\": 3",
            )
            .replace(
                "\"idle-out\", \"type\": \"staged_file_sink\", \"params\": {}, \"parallelism\": 2",
                "\"idle-out\", \"type\": \"staged_file_sink\", \"params\": {}, \"parallelism\": 3",
            );
        let rescaled = parse_job(&text).unwrap();
        assert_eq!(rescaled.operator(OperatorId(4)).unwrap().spec.parallelism, 3);
        let err = map_state(&layout, 1, &rescaled, true).unwrap_err().to_string();
        assert!(err.contains("operator 4 (uid \"idle\"") && err.contains("keyed by the key's text"), "{err}");
        assert!(!err.contains("operator 6"), "the sink's handles re-divide: {err}");
    }

    #[test]
    fn a_rescale_past_the_last_layout_generation_is_refused_not_wrapped() {
        let (_dir, layout) = checkpoint_of(EXAMPLE);
        std::fs::rename(layout.generation_dir(1), layout.generation_dir(u32::MAX)).unwrap();
        let mut marker = read_completed(&layout, 1).unwrap();
        marker.generation = u32::MAX;
        std::fs::remove_file(layout.jobs_dir().join("COMPLETED-1")).unwrap();
        write_completed(&layout, &marker).unwrap();
        let same = map_state(&layout, 1, &parse_job(EXAMPLE).unwrap(), false).unwrap();
        assert_eq!(same.next_generation(), u32::MAX);
        let text = EXAMPLE
            .replace("\"size_ms\": 10000}, \"parallelism\": 2", "\"size_ms\": 10000}, \"parallelism\": 1")
            .replace(
                "\"windows-out\", \"type\": \"staged_file_sink\", \"params\": {}, \"parallelism\": 2",
                "\"windows-out\", \"type\": \"staged_file_sink\", \"params\": {}, \"parallelism\": 1",
            );
        let err = map_state(&layout, 1, &parse_job(&text).unwrap(), false).unwrap_err().to_string();
        assert!(err.contains("cannot follow"), "{err}");
    }
}
