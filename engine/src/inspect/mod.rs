//! Checkpoint state as a person or a gate reads it: the logical listing of
//! a dataset (`clink state-cat`), the raw comparison of two datasets
//! (`clink state-diff`), and whether a job's restore paths accept a
//! dataset's snapshots (`clink check-savepoint`).
//!
//! The listing decodes each participant's slots in the job's documented
//! encodings, with the same decoders the restore paths use: a segment
//! source's position, a Kafka source's (its four slots, one position: per
//! partition the next offset and the greatest event time, the watermark and
//! the log's identity, a bounded input's end offsets, the partitions the
//! watermark waited for), each open window's count and sum, `last_seen`, `idle_count`,
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

use clink_basics::ids::OperatorId;

use crate::checkpoint::backend::FileStateBackend;
use crate::checkpoint::dataset::Dataset;
use crate::checkpoint::graph::read_graph;
use crate::checkpoint::layout::parse_participant_name;
use crate::checkpoint::snapshot::StateSlots;
use crate::job::{parse_job, JobGraph, PlannedOperator};
use crate::state_map::{map_state, slots_hold_state, CompatError};

mod lister;
use crate::value::Value;
use lister::Lister;

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
        let op = parse_participant_name(participant).and_then(|(id, _)| expected.operator(id));
        // At another parallelism every old subtask's state is read (and re-divided).
        let rescale = op.and_then(|op| map.as_ref()?.rescaled.get(&op.spec.id)).copied();
        let restored = rescale.is_some() || map.as_ref().is_some_and(|m| !m.starts_empty(participant));
        let (status, reason) = match op {
            Some(op) if restored => match (op.decode_state(&snapshot.slots), rescale) {
                (Ok(()), None) => ("accepted", format!("{} restores it", op.spec.uid)),
                (Ok(()), Some(r)) => (
                    "accepted",
                    format!("{} restores it, re-divided from {} to {} subtasks", op.spec.uid, r.from, r.to),
                ),
                (Err(e), _) => ("refused", format!("{}'s restore path refuses it: {e}", op.spec.uid)),
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
    use crate::keys::subtask_for_key;
    use crate::operators::driver::Driver;
    use crate::operators::keyed::key_of_values;
    use crate::operators::{kafka_source, segment_source, staged_sink};
    use crate::timers::Clock;
    use crate::timers::NO_WATERMARK;
    use crate::value::Decimal;

    const EXAMPLE: &str = include_str!("../../../fixtures/jobs/example/job.json");

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

    #[test]
    fn a_kafka_sources_four_slots_are_listed_as_its_position() {
        let job = parse_job(include_str!("../../../fixtures/jobs/kafka-kafka/job.json")).unwrap();
        let op = job.operators.iter().find(|o| o.spec.type_name == kafka_source::TYPE).unwrap();
        let mut position = kafka_source::Position { log: "{\"topic\":\"events\"}".into(), ..Default::default() };
        position.partitions.insert(0, kafka_source::PartitionPosition { next: 12, greatest: 5_000 });
        position.partitions.insert(1, kafka_source::PartitionPosition { next: 0, greatest: NO_WATERMARK });
        position.end = Some(BTreeMap::from([(0, 40), (1, 41)]));
        position.waited_for = vec![1];
        position.watermark = 4_000;
        let mut listing = Listing {
            format: LISTING_FORMAT,
            version: VERSION,
            job: job.job_id.to_string(),
            checkpoint: 1,
            kind: "periodic".into(),
            dataset_digest: String::new(),
            graph_known: true,
            operators: Vec::new(),
            rows: Vec::new(),
            misplaced: Vec::new(),
            undocumented: Vec::new(),
        };
        let mut lister = Lister { listing: &mut listing, id: op.spec.id, subtask: 0, op: Some(op) };
        lister.participant(op, &kafka_source::encode_position(&position));
        assert!(listing.undocumented.is_empty(), "{:?}", listing.undocumented);
        let kinds: Vec<&str> = listing.rows.iter().map(|r| r.kind).collect();
        assert_eq!(
            kinds,
            [
                "source.kafka.partition",
                "source.kafka.partition",
                "source.kafka.log",
                "source.kafka.end",
                "source.kafka.end",
                "source.kafka.waited_for"
            ]
        );
        // A slot that does not decode leaves all four undocumented, each with the reason.
        let mut broken = kafka_source::encode_position(&position);
        broken.put(kafka_source::END_SLOT, crate::checkpoint::SlotKind::Operator, 1, vec![9]);
        listing.rows.clear();
        let mut lister = Lister { listing: &mut listing, id: op.spec.id, subtask: 0, op: Some(op) };
        lister.participant(op, &broken);
        assert_eq!(listing.undocumented.len(), 4, "{:?}", listing.undocumented);
        assert!(listing.rows.is_empty());
    }
}
