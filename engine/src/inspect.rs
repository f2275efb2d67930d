//! Checkpoint state as a person or a gate reads it: the logical listing of
//! a dataset (`clink state-cat`), the raw comparison of two datasets
//! (`clink state-diff`), and whether a job's restore paths accept a
//! dataset's snapshots (`clink check-savepoint`).
//!
//! The listing decodes each participant's slots in the job's documented
//! encodings, with the same decoders the restore paths use: the source's
//! position, each open window's count and sum, `last_seen`, `idle_count`,
//! registered timers and watermarks, the sinks' pending handles. Values are
//! typed. A slot (or a timer) in no documented encoding is listed as such,
//! with its size and digest, never dropped. A keyed row held by a subtask
//! that does not own its key is listed apart (counted and reported, not
//! state). The operators are those of the job graph the checkpoint's marker
//! names; without one, every slot is undocumented.
//!
//! This module reads datasets only through [`crate::checkpoint::dataset`]
//! and the backend (verified against sidecars); it writes nothing.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{json, Value as Json};

use clink_basics::digest::sha256_hex;
use clink_basics::ids::OperatorId;

use crate::checkpoint::backend::FileStateBackend;
use crate::checkpoint::dataset::Dataset;
use crate::checkpoint::graph::read_graph;
use crate::checkpoint::layout::parse_participant_name;
use crate::checkpoint::snapshot::{Slot, StateSlots};
use crate::codec::Reader;
use crate::job::{parse_job, JobGraph, PlannedOperator};
use crate::keys::{key_of_values, key_values, subtask_for_key};
use crate::operators::driver::TIMERS_SLOT;
use crate::operators::idle::{self, TimerKey};
use crate::operators::{segment_source, staged_sink, window};
use crate::state_map::{map_state, slots_hold_state, CompatError};
use crate::timers::{Clock, Timer, TimerService, NO_WATERMARK};
use crate::value::{ColumnType, Decimal, Value};

pub const LISTING_FORMAT: &str = "clink-state-listing";
pub const DIFF_FORMAT: &str = "clink-state-diff";
pub const SCHEMA_CHECK_FORMAT: &str = "clink-savepoint-check";
pub const VERSION: u64 = 1;

/// A value as the listings write it: its type named, 64-bit numbers as
/// decimal text (`{"int": "3"}`, `{"timestamp": "1700000000000"}`,
/// `{"decimal": "12.50"}`, `{"string": "a"}`, `{"bool": true}`, `{"null": null}`).
pub fn typed_json(value: &Value) -> Json {
    match value {
        Value::Null => json!({ "null": null }),
        Value::Bool(b) => json!({ "bool": b }),
        Value::Int(i) => json!({ "int": i.to_string() }),
        Value::Float(x) => json!({ "float": x.to_string() }),
        Value::Decimal(d) => json!({ "decimal": d.to_string() }),
        Value::Str(s) => json!({ "string": s }),
        Value::Timestamp(t) => json!({ "timestamp": t.to_string() }),
    }
}

/// An operator of the listed checkpoint.
#[derive(Debug, Clone, Serialize)]
pub struct ListedOperator {
    pub id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_name: Option<String>,
    pub parallelism: u32,
    pub holds_state: bool,
}

/// One row of logical state.
#[derive(Debug, Clone, Serialize)]
pub struct StateRow {
    pub operator: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    pub subtask: u32,
    pub kind: &'static str,
    pub values: Vec<Json>,
}

/// State this listing has no documented encoding for, listed whole.
#[derive(Debug, Clone, Serialize)]
pub struct Undocumented {
    pub operator: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    pub subtask: u32,
    pub slot: String,
    /// Which entry of the slot (a timer's position), when one entry is at fault.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<String>,
    pub bytes: u64,
    pub sha256: String,
    pub reason: String,
}

/// `clink state-cat --json`.
#[derive(Debug, Clone, Serialize)]
pub struct Listing {
    pub format: &'static str,
    pub version: u64,
    pub job: String,
    pub checkpoint: u64,
    pub kind: String,
    pub dataset_digest: String,
    pub graph_known: bool,
    pub operators: Vec<ListedOperator>,
    pub rows: Vec<StateRow>,
    /// Keyed rows held by a subtask that does not own their key: counted
    /// and reported, never state.
    pub misplaced: Vec<StateRow>,
    pub undocumented: Vec<Undocumented>,
}

/// Why a dataset cannot be listed at all.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    #[error(transparent)]
    State(#[from] crate::checkpoint::StateError),
    #[error(transparent)]
    Graph(#[from] crate::checkpoint::graph::GraphError),
    #[error(transparent)]
    Compat(#[from] CompatError),
    #[error("{0}")]
    Invalid(String),
}

/// The job graph a dataset's checkpoint names, planned by this build; `None`
/// when there is none, or this build cannot plan it (the reason is returned).
fn dataset_graph(dataset: &Dataset) -> Result<(Option<JobGraph>, Option<String>), InspectError> {
    let Some(graph) = &dataset.index.graph else {
        return Ok((None, Some("the checkpoint names no job graph".into())));
    };
    let bytes = read_graph(&dataset.layout(), graph)?;
    let text = String::from_utf8(bytes).map_err(|_| InspectError::Invalid("the job graph is not UTF-8".into()))?;
    match parse_job(&text) {
        Ok(job) => Ok((Some(job), None)),
        Err(e) => Ok((None, Some(format!("this build cannot plan the checkpoint's job graph: {e}")))),
    }
}

/// Lists a verified dataset's state.
pub fn list(dataset: &Dataset) -> Result<Listing, InspectError> {
    let (job, no_graph) = dataset_graph(dataset)?;
    let backend = FileStateBackend::new(dataset.layout());
    let index = &dataset.index;
    let mut listing = Listing {
        format: LISTING_FORMAT,
        version: VERSION,
        job: index.job.clone(),
        checkpoint: index.checkpoint,
        kind: index.kind.clone(),
        dataset_digest: dataset.digest.clone(),
        graph_known: job.is_some(),
        operators: Vec::new(),
        rows: Vec::new(),
        misplaced: Vec::new(),
        undocumented: Vec::new(),
    };
    let mut operators: BTreeMap<OperatorId, ListedOperator> = BTreeMap::new();
    for participant in &index.participants {
        let (id, subtask) = parse_participant_name(participant)
            .ok_or_else(|| InspectError::Invalid(format!("participant {participant:?} is not op-<id>-<subtask>")))?;
        let snapshot = backend.read(index.generation, participant, index.checkpoint)?;
        let op = job.as_ref().and_then(|j| j.operator(id));
        let entry = operators.entry(id).or_insert_with(|| ListedOperator {
            id: id.to_string(),
            uid: op.map(|o| o.spec.uid.clone()),
            type_name: op.map(|o| o.spec.type_name.clone()),
            parallelism: op.map_or(0, |o| o.spec.parallelism),
            holds_state: false,
        });
        if op.is_none() {
            entry.parallelism += 1;
        }
        entry.holds_state |= slots_hold_state(&snapshot.slots);
        let mut lister = Lister { listing: &mut listing, id, subtask, op };
        match op {
            Some(op) => lister.participant(op, &snapshot.slots),
            None => {
                let reason =
                    no_graph.clone().unwrap_or_else(|| format!("operator {id} is not in the checkpoint's job graph"));
                for (name, slot) in &snapshot.slots.0 {
                    lister.undocumented(name, slot, None, reason.clone());
                }
            }
        }
    }
    listing.operators = operators.into_values().collect();
    Ok(listing)
}

/// One participant's state as `state-cat` lists it: the keyed rows it holds
/// whose key another subtask owns (the key-group rule of `keys.rs`), and
/// the slots no documented encoding reads. A verifier holds a subtask's
/// snapshot to its key-group range with this.
pub fn misplaced_and_undocumented(
    op: &PlannedOperator,
    subtask: u32,
    slots: &StateSlots,
) -> (Vec<StateRow>, Vec<Undocumented>) {
    let mut listing = Listing {
        format: LISTING_FORMAT,
        version: VERSION,
        job: String::new(),
        checkpoint: 0,
        kind: String::new(),
        dataset_digest: String::new(),
        graph_known: true,
        operators: Vec::new(),
        rows: Vec::new(),
        misplaced: Vec::new(),
        undocumented: Vec::new(),
    };
    Lister { listing: &mut listing, id: op.spec.id, subtask, op: Some(op) }.participant(op, slots);
    (listing.misplaced, listing.undocumented)
}

struct Lister<'a> {
    listing: &'a mut Listing,
    id: OperatorId,
    subtask: u32,
    op: Option<&'a PlannedOperator>,
}

impl Lister<'_> {
    fn uid(&self) -> Option<String> {
        self.op.map(|o| o.spec.uid.clone())
    }

    fn row(&mut self, kind: &'static str, values: Vec<Value>) {
        let row = StateRow {
            operator: self.id.to_string(),
            uid: self.uid(),
            subtask: self.subtask,
            kind,
            values: values.iter().map(typed_json).collect(),
        };
        self.listing.rows.push(row);
    }

    /// A keyed row: listed as state when this subtask owns the key, apart otherwise.
    fn keyed_row(&mut self, kind: &'static str, key: &[u8], values: Vec<Value>) {
        let parallelism = self.op.map_or(1, |o| o.spec.parallelism);
        let row = StateRow {
            operator: self.id.to_string(),
            uid: self.uid(),
            subtask: self.subtask,
            kind,
            values: values.iter().map(typed_json).collect(),
        };
        if subtask_for_key(key, parallelism) == self.subtask {
            self.listing.rows.push(row);
        } else {
            self.listing.misplaced.push(row);
        }
    }

    fn undocumented(&mut self, name: &str, slot: &Slot, entry: Option<String>, reason: String) {
        let item = Undocumented {
            operator: self.id.to_string(),
            uid: self.uid(),
            subtask: self.subtask,
            slot: name.to_string(),
            entry,
            bytes: slot.bytes.len() as u64,
            sha256: sha256_hex(&slot.bytes),
            reason,
        };
        self.listing.undocumented.push(item);
    }

    fn participant(&mut self, op: &PlannedOperator, slots: &StateSlots) {
        let type_name = op.spec.type_name.as_str();
        for (name, slot) in &slots.0 {
            let one = single(name, slot);
            let listed = match (type_name, name.as_str()) {
                (_, TIMERS_SLOT) if is_transform(op) => self.timers(op, name, slot),
                (segment_source::TYPE, segment_source::POSITION_SLOT) => self.position(&one),
                (window::TYPE, window::WINDOWS_SLOT) => self.windows(&one),
                (idle::TYPE, idle::LAST_SEEN_SLOT) => self.keyed_i64(&one, name, "last_seen", Value::Timestamp),
                (idle::TYPE, idle::IDLE_COUNT_SLOT) => self.keyed_i64(&one, name, "idle_count", Value::Int),
                (staged_sink::TYPE, staged_sink::HANDLES_SLOT) => self.handles(&one),
                _ => Err(format!("{type_name} documents no slot {name:?} at version {}", slot.version)),
            };
            if let Err(reason) = listed {
                self.undocumented(name, slot, None, reason);
            }
        }
    }

    fn position(&mut self, slots: &StateSlots) -> Result<(), String> {
        let p = segment_source::decode_position(slots).map_err(|e| e.to_string())?;
        let watermark = if p.watermark == NO_WATERMARK { Value::Null } else { Value::Timestamp(p.watermark) };
        self.row(
            "source.position",
            vec![Value::Str(p.segment), Value::Int(p.line as i64), watermark, Value::Bool(p.ended)],
        );
        Ok(())
    }

    fn windows(&mut self, slots: &StateSlots) -> Result<(), String> {
        let windows = window::decode_windows(slots).map_err(|e| e.to_string())?;
        for (key, per_key) in windows {
            let key_row = key_values(&key).map_err(|e| e.to_string())?;
            for (start, (count, sum)) in per_key {
                let mut values = key_row.clone();
                values.extend([Value::Timestamp(start), Value::Int(count), sum]);
                self.keyed_row("window", &key, values);
            }
        }
        Ok(())
    }

    fn keyed_i64(
        &mut self,
        slots: &StateSlots,
        name: &str,
        kind: &'static str,
        make: fn(i64) -> Value,
    ) -> Result<(), String> {
        let map = crate::operators::keyed::get_keyed(slots, name, idle::SLOT_VERSION, |r| r.i64())
            .map_err(|e| e.to_string())?;
        for (key, v) in map {
            let mut values = key_values(&key).map_err(|e| e.to_string())?;
            values.push(make(v));
            self.keyed_row(kind, &key, values);
        }
        Ok(())
    }

    fn handles(&mut self, slots: &StateSlots) -> Result<(), String> {
        for h in staged_sink::decode_handles(slots).map_err(|e| e.to_string())?.into_values() {
            self.row(
                "sink.handle",
                vec![
                    Value::Int(h.checkpoint as i64),
                    Value::Str(h.file),
                    Value::Int(h.rows as i64),
                    Value::Int(h.bytes as i64),
                    Value::Str(h.sha256),
                ],
            );
        }
        Ok(())
    }

    /// The driver's slot: the watermark, and each timer with its key decoded
    /// in the encoding the operator documents for its timers.
    fn timers(&mut self, op: &PlannedOperator, name: &str, slot: &Slot) -> Result<(), String> {
        if slot.version != crate::operators::driver::TIMERS_SLOT_VERSION {
            return Err(format!("timers at version {}", slot.version));
        }
        let mut service = TimerService::new(Clock::Manual(0));
        let mut r = Reader::new(&slot.bytes);
        service.decode(&mut r).and_then(|()| r.finish()).map_err(|e| e.to_string())?;
        let watermark = service.watermark();
        self.row("watermark", vec![if watermark == NO_WATERMARK { Value::Null } else { Value::Timestamp(watermark) }]);
        let text_keys = op.spec.type_name == idle::TYPE && idle::timer_key_of(&op.spec.params) == TimerKey::Text;
        let key_type = text_keys.then(|| text_key_type(op)).flatten();
        let timers =
            service.event_timers().map(|t| ("event", t)).chain(service.processing_timers().map(|t| ("processing", t)));
        let mut faults = Vec::new();
        let mut rows = Vec::new();
        for (i, (domain, timer)) in timers.enumerate() {
            match timer_key(timer, text_keys, key_type) {
                Ok((canonical, key)) => rows.push((domain, timer.clone(), canonical, key)),
                Err(reason) => faults.push((i, reason)),
            }
        }
        for (domain, timer, canonical, key) in rows {
            let mut values = vec![Value::Str(domain.into()), Value::Timestamp(timer.time), Value::Int(timer.namespace)];
            values.extend(key);
            if canonical.is_empty() {
                self.row("timer", values);
            } else {
                self.keyed_row("timer", &canonical, values);
            }
        }
        for (i, reason) in faults {
            self.undocumented(name, slot, Some(format!("timer {i}")), reason);
        }
        Ok(())
    }
}

fn single(name: &str, slot: &Slot) -> StateSlots {
    let mut slots = StateSlots::new();
    slots.0.insert(name.to_string(), slot.clone());
    slots
}

fn is_transform(op: &PlannedOperator) -> bool {
    op.spec.kind() == crate::operators::OperatorKind::Transform
}

/// The type of an idle detector's one key column, for its text timer keys.
fn text_key_type(op: &PlannedOperator) -> Option<ColumnType> {
    let column = op.spec.params.get("key")?.as_array()?.first()?.as_str()?;
    op.input_schema.as_ref()?.column(column).map(|(_, c)| c.ty)
}

/// A timer's key: its canonical bytes and its values. An unkeyed timer has
/// neither. A key in neither documented encoding is an error.
fn timer_key(timer: &Timer, text: bool, key_type: Option<ColumnType>) -> Result<(Vec<u8>, Vec<Value>), String> {
    if timer.key.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    if !text {
        let values = key_values(&timer.key).map_err(|e| format!("the timer's key is not a canonical key: {e}"))?;
        return Ok((timer.key.to_vec(), values));
    }
    let text = std::str::from_utf8(&timer.key).map_err(|_| "a text timer key that is not UTF-8".to_string())?;
    let value = match key_type {
        Some(ColumnType::String) => Some(Value::Str(text.to_string())),
        Some(ColumnType::Int) => text.parse().ok().map(Value::Int),
        Some(ColumnType::Timestamp) => text.parse().ok().map(Value::Timestamp),
        Some(ColumnType::Bool) => text.parse().ok().map(Value::Bool),
        Some(ColumnType::Decimal { scale }) => Decimal::parse(text, scale).ok().map(Value::Decimal),
        Some(ColumnType::Float) | None => None,
    }
    .ok_or_else(|| format!("text timer key {text:?} does not read as the key column's type"))?;
    Ok((key_of_values(std::slice::from_ref(&value)), vec![value]))
}

/// One participant's slot-by-slot comparison.
#[derive(Debug, Clone, Serialize)]
pub struct ParticipantDiff {
    /// `<uid>-<subtask>` when both graphs name the operator, else the participant's name.
    pub participant: String,
    pub status: &'static str,
    pub slots: Vec<SlotDiff>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SlotDiff {
    pub slot: String,
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub a_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub b_bytes: Option<u64>,
}

/// `clink state-diff --json`: raw bytes, slot by slot.
#[derive(Debug, Clone, Serialize)]
pub struct RawDiff {
    pub format: &'static str,
    pub version: u64,
    pub a: Json,
    pub b: Json,
    pub equal: bool,
    pub participants: Vec<ParticipantDiff>,
}

/// Each dataset's participants by a name both sides share: `<uid>-<subtask>`
/// from the graph, or the participant's name.
fn participants_by_identity(dataset: &Dataset) -> Result<BTreeMap<String, StateSlots>, InspectError> {
    let (job, _) = dataset_graph(dataset)?;
    let backend = FileStateBackend::new(dataset.layout());
    let mut out = BTreeMap::new();
    for participant in &dataset.index.participants {
        let Some((id, subtask)) = parse_participant_name(participant) else {
            return Err(InspectError::Invalid(format!("participant {participant:?} is not op-<id>-<subtask>")));
        };
        let name = match job.as_ref().and_then(|j| j.operator(id)) {
            Some(op) => format!("{}-{subtask}", op.spec.uid),
            None => participant.clone(),
        };
        let snapshot = backend.read(dataset.index.generation, participant, dataset.index.checkpoint)?;
        out.insert(name, snapshot.slots);
    }
    Ok(out)
}

/// Compares two datasets' slots byte for byte. `only_uids` (when not
/// empty) limits it to those operators.
pub fn raw_diff(a: &Dataset, b: &Dataset, only_uids: &[String]) -> Result<RawDiff, InspectError> {
    let left = participants_by_identity(a)?;
    let right = participants_by_identity(b)?;
    let wanted = |name: &str| {
        // `<uid>-<subtask>`: the uid is everything before the last dash.
        only_uids.is_empty() || name.rsplit_once('-').is_some_and(|(uid, _)| only_uids.iter().any(|u| u == uid))
    };
    let mut names: Vec<&String> = left.keys().chain(right.keys()).filter(|n| wanted(n)).collect();
    names.sort();
    names.dedup();
    let mut participants = Vec::new();
    for name in names {
        let (l, r) = (left.get(name), right.get(name));
        let mut slots = Vec::new();
        let empty = StateSlots::new();
        let (ls, rs) = (l.unwrap_or(&empty), r.unwrap_or(&empty));
        let mut slot_names: Vec<&String> = ls.0.keys().chain(rs.0.keys()).collect();
        slot_names.sort();
        slot_names.dedup();
        for slot in slot_names {
            let (x, y) = (ls.0.get(slot), rs.0.get(slot));
            let status = match (x, y) {
                (Some(x), Some(y)) if x == y => "equal",
                (Some(_), Some(_)) => "differs",
                (Some(_), None) => "only_in_a",
                _ => "only_in_b",
            };
            slots.push(SlotDiff {
                slot: slot.clone(),
                status,
                a_bytes: x.map(|s| s.bytes.len() as u64),
                b_bytes: y.map(|s| s.bytes.len() as u64),
            });
        }
        let status = match (l, r) {
            (Some(_), None) => "only_in_a",
            (None, Some(_)) => "only_in_b",
            _ if slots.iter().all(|s| s.status == "equal") => "equal",
            _ => "differs",
        };
        participants.push(ParticipantDiff { participant: name.clone(), status, slots });
    }
    let side = |d: &Dataset| json!({"digest": d.digest, "checkpoint": d.index.checkpoint, "job": d.index.job});
    Ok(RawDiff {
        format: DIFF_FORMAT,
        version: VERSION,
        a: side(a),
        b: side(b),
        equal: participants.iter().all(|p| p.status == "equal"),
        participants,
    })
}

/// One snapshot's verdict in a savepoint check.
#[derive(Debug, Clone, Serialize)]
pub struct SnapshotVerdict {
    pub participant: String,
    /// accepted, refused, or not_restored (no operator of the job restores
    /// it and it holds no state).
    pub status: &'static str,
    pub reason: String,
}

/// `clink check-savepoint --json`.
#[derive(Debug, Clone, Serialize)]
pub struct SchemaCheck {
    pub format: &'static str,
    pub version: u64,
    pub dataset_digest: String,
    pub checkpoint: u64,
    pub accepted: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    pub snapshots: Vec<SnapshotVerdict>,
}

/// Whether `expected`'s restore paths accept every snapshot of a dataset:
/// the state maps onto the job (id, uid, parallelism), and each restored
/// snapshot decodes through its operator's restore path.
pub fn check_savepoint(dataset: &Dataset, expected: &JobGraph) -> Result<SchemaCheck, InspectError> {
    let layout = dataset.layout();
    let index = &dataset.index;
    let (refusal, map) = match map_state(&layout, index.checkpoint, expected, false) {
        Ok(map) => (None, Some(map)),
        Err(e @ (CompatError::Refused { .. } | CompatError::Rescaled { .. })) => (Some(e.to_string()), None),
        Err(other) => return Err(other.into()),
    };
    let backend = FileStateBackend::new(layout);
    let mut snapshots = Vec::new();
    for participant in &index.participants {
        let snapshot = backend.read(index.generation, participant, index.checkpoint)?;
        let restored = map.as_ref().is_some_and(|m| !m.starts_empty(participant));
        let op = parse_participant_name(participant).and_then(|(id, _)| expected.operator(id));
        let (status, reason) = match op {
            Some(op) if restored => match op.decode_state(&snapshot.slots) {
                Ok(()) => ("accepted", format!("{} restores it", op.spec.uid)),
                Err(e) => ("refused", format!("{}'s restore path refuses it: {e}", op.spec.uid)),
            },
            _ if !slots_hold_state(&snapshot.slots) => ("not_restored", "holds no state; nothing restores it".into()),
            _ => ("refused", "holds state no operator of the job restores".into()),
        };
        snapshots.push(SnapshotVerdict { participant: participant.clone(), status, reason });
    }
    let accepted = refusal.is_none() && snapshots.iter().all(|s| s.status != "refused");
    Ok(SchemaCheck {
        format: SCHEMA_CHECK_FORMAT,
        version: VERSION,
        dataset_digest: dataset.digest.clone(),
        checkpoint: index.checkpoint,
        accepted,
        refusal,
        snapshots,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::dataset::{export, verify};
    use crate::checkpoint::graph::write_graph;
    use crate::checkpoint::markers::{write_completed, CheckpointKind, CompletedMarker};
    use crate::checkpoint::snapshot::SnapshotHeader;
    use crate::checkpoint::{participant_name, CheckpointLayout};
    use crate::event::Event;
    use crate::operators::driver::Driver;

    const EXAMPLE: &str = include_str!("../../fixtures/jobs/example/job.json");

    fn record(time: i64, account: &str) -> Event {
        Event::Record(vec![Value::Timestamp(time), Value::Str(account.into()), Value::Decimal(Decimal::new(150, 2))])
    }

    /// Checkpoint 1 of the example job with real operator state: each keyed
    /// subtask drove the records of the keys it owns.
    fn dataset_of(job_text: &str, misplace: bool) -> (tempfile::TempDir, Dataset) {
        let dir = tempfile::tempdir().unwrap();
        let job = parse_job(job_text).unwrap();
        let layout = CheckpointLayout::new(dir.path().join("ck"), job.job_id);
        let graph = write_graph(&layout, job.to_document().to_string().as_bytes()).unwrap();
        let backend = FileStateBackend::new(layout.clone());
        let env = crate::operators::Environment::default();
        let accounts = ["a", "b", "c", "d", "e", "f"];
        let mut participants = Vec::new();
        for op in &job.operators {
            for s in 0..op.spec.parallelism {
                let slots = match op.spec.kind() {
                    crate::operators::OperatorKind::Transform => {
                        let mut d = Driver::new(op.build_transform(&env).unwrap(), Clock::Manual(0));
                        for (i, account) in accounts.iter().enumerate() {
                            let key = key_of_values(&[Value::Str((*account).into())]);
                            let owned = subtask_for_key(&key, op.spec.parallelism) == s;
                            if owned != misplace || op.spec.id.0 == 2 {
                                d.handle(record(1000 * i as i64, account), &mut Vec::new()).unwrap();
                            }
                        }
                        d.handle(Event::Watermark { time: 500, idle: false }, &mut Vec::new()).unwrap();
                        d.snapshot().unwrap()
                    }
                    crate::operators::OperatorKind::Source => {
                        let src = segment_source::SegmentSource::new(dir.path().to_path_buf());
                        crate::operators::Source::snapshot(&src).unwrap()
                    }
                    crate::operators::OperatorKind::Sink => {
                        let sink = staged_sink::StagedFileSink::new(dir.path().join("out"), s, Default::default());
                        crate::operators::Sink::snapshot(&sink).unwrap()
                    }
                };
                let name = participant_name(op.spec.id, s);
                let header = SnapshotHeader { job: job.job_id, checkpoint: 1, operator: op.spec.id.0, subtask: s };
                backend.write(&name, &header, &slots).unwrap();
                participants.push(name);
            }
        }
        let marker = CompletedMarker::new(job.job_id, 1, 1, CheckpointKind::Savepoint, participants, Some(graph));
        write_completed(&layout, &marker).unwrap();
        let out = dir.path().join("ds");
        export(&layout, 1, &out, "test").unwrap();
        let dataset = verify(&out, None).unwrap();
        (dir, dataset)
    }

    fn kinds(listing: &Listing, uid: &str, kind: &str) -> usize {
        listing.rows.iter().filter(|r| r.uid.as_deref() == Some(uid) && r.kind == kind).count()
    }

    #[test]
    fn the_listing_decodes_every_documented_slot_as_typed_rows() {
        let (_dir, dataset) = dataset_of(EXAMPLE, false);
        let listing = list(&dataset).unwrap();
        assert!(listing.undocumented.is_empty(), "{:?}", listing.undocumented);
        assert!(listing.misplaced.is_empty());
        assert_eq!(kinds(&listing, "windows", "window"), 6, "one open window per account");
        assert_eq!(kinds(&listing, "windows", "timer"), 6);
        assert_eq!(kinds(&listing, "idle", "last_seen"), 6);
        assert_eq!(kinds(&listing, "idle", "timer"), 6);
        assert_eq!(kinds(&listing, "source", "source.position"), 1);
        assert_eq!(kinds(&listing, "windows", "watermark"), 2, "one per subtask");
        let window = listing.rows.iter().find(|r| r.kind == "window").unwrap();
        assert_eq!(window.values[2], json!({"int": "1"}));
        assert_eq!(window.values[3], json!({"decimal": "1.50"}));
        let doc = serde_json::to_value(&listing).unwrap();
        assert_eq!(doc["format"], LISTING_FORMAT);
    }

    #[test]
    fn text_timer_keys_list_as_the_same_logical_timers() {
        let text = EXAMPLE.replace("\"timeout_ms\": 30000}", "\"timeout_ms\": 30000, \"timer_key\": \"text\"}");
        let (_d1, canonical) = dataset_of(EXAMPLE, false);
        let (_d2, texted) = dataset_of(&text, false);
        let timers = |l: &Listing| {
            let mut t: Vec<String> = l
                .rows
                .iter()
                .filter(|r| r.uid.as_deref() == Some("idle") && r.kind == "timer")
                .map(|r| format!("{}{:?}", r.subtask, r.values))
                .collect();
            t.sort();
            t
        };
        let (a, b) = (list(&canonical).unwrap(), list(&texted).unwrap());
        assert!(b.undocumented.is_empty(), "{:?}", b.undocumented);
        assert_eq!(timers(&a), timers(&b));
        let raw = raw_diff(&canonical, &texted, &["idle".into()]).unwrap();
        assert!(!raw.equal, "the bytes differ although the timers are the same");
    }

    #[test]
    fn keyed_rows_a_subtask_does_not_own_are_listed_apart() {
        let (_dir, dataset) = dataset_of(EXAMPLE, true);
        let listing = list(&dataset).unwrap();
        assert_eq!(kinds(&listing, "windows", "window"), 0);
        assert_eq!(listing.misplaced.iter().filter(|r| r.kind == "window").count(), 6);
    }

    #[test]
    fn a_slot_in_no_documented_encoding_is_listed_never_dropped() {
        let (_dir, dataset) = dataset_of(EXAMPLE, false);
        // Rewrite one window snapshot with an extra slot, resealing its sidecar.
        let layout = dataset.layout();
        let backend = FileStateBackend::new(layout.clone());
        let mut snap = backend.read(1, "op-3-0", 1).unwrap();
        snap.slots.put("mystery", crate::checkpoint::SlotKind::Keyed, 7, vec![1, 2, 3]);
        std::fs::remove_file(layout.snapshot(1, "op-3-0", 1)).unwrap();
        std::fs::remove_file(layout.snapshot_meta(1, "op-3-0", 1)).unwrap();
        backend.write("op-3-0", &snap.header, &snap.slots).unwrap();
        let unverified = crate::checkpoint::dataset::read_index(&dataset.dir).unwrap();
        let listing = list(&unverified).unwrap();
        assert_eq!(listing.undocumented.len(), 1);
        assert_eq!(listing.undocumented[0].slot, "mystery");
        assert_eq!(listing.undocumented[0].bytes, 3);
    }

    #[test]
    fn the_savepoint_check_accepts_the_same_job_and_names_a_changed_uid() {
        let (_dir, dataset) = dataset_of(EXAMPLE, false);
        let same = check_savepoint(&dataset, &parse_job(EXAMPLE).unwrap()).unwrap();
        assert!(same.accepted, "{same:?}");
        let changed = parse_job(&EXAMPLE.replace("\"uid\": \"windows\"", "\"uid\": \"windows-2\"")).unwrap();
        let check = check_savepoint(&dataset, &changed).unwrap();
        assert!(!check.accepted);
        assert!(check.refusal.unwrap().contains("operator 3 (uid \"windows\""));
        let raw = raw_diff(&dataset, &dataset, &[]).unwrap();
        assert!(raw.equal);
    }
}
