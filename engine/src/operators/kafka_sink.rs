//! `kafka_sink`: the commit-confirmed family's sink. It writes its rows into
//! a Kafka topic inside broker transactions, one transactional id per (job,
//! sink uid, subtask) and one transaction sealed at every barrier, records
//! or none: prepare is a flush inside the open transaction, and the commit
//! is the broker's `EndTxn` on the coordinator's word.
//!
//! A broker transaction cannot be committed again once the producer that
//! opened it is gone (a successor's init fences it), so this sink cannot
//! recover its own commits the way a staged-file sink re-commits its handles.
//! What it did must be on disk instead: the runtime's sink task writes a
//! commit receipt the instant the broker acknowledged a commit, the
//! coordinator confirms a checkpoint once every sink's commit is receipted,
//! and a restore goes back to the newest confirmed checkpoint. This sink
//! supplies the broker side of that protocol ([`ConfirmedSink`]): the handle
//! of each transaction, the pre-fence describe of an orphan, its settlement
//! under its own identity, and replay suppression (records whose commit is
//! receipted are swallowed on replay). It never writes a receipt or a marker
//! itself and never decides an outcome the broker did not report.
//!
//! Replay suppression is by content, not by position: a restored sink is
//! handed the digests of every row a receipt above its restore point says
//! was committed (and those its snapshot still owed), and swallows each of
//! them once when the replay sends it again. The replay need not cut its
//! intervals where the first run did, nor send in the same order: a source
//! reading several partitions interleaves them as the broker answers.
//!
//! A row is sent as its canonical text line ([`render_line_into`]); its key,
//! when `key` names columns, is the line of those columns.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value as Json};

use clink_basics::fields::{FieldError, Fields};
use clink_connectors::kafka_txn::orphan::{self, Described, Settlement, TxnState};
use clink_connectors::kafka_txn::{
    check_transactional_id, last_mark, ProducerIdentity, TxnConfig, TxnError, TxnProducer,
};

use crate::checkpoint::commits::{row_digest, RowDigest, RowDigests, TxnHandle};
use crate::checkpoint::lineage::{LineageId, RunIdentity};
use crate::checkpoint::{SlotKind, StateSlots};
use crate::value::{render_line_into, Row, Schema};

use super::{
    defaults, Build, CommitConfirmation, ConfirmedSink, Descriptor, Environment, OperatorError, OrphanSeen, Prepared,
    Probe, Setup, Sink, SinkFamily, StateDecoding,
};

pub const TYPE: &str = "kafka_sink";
const TXN_SLOT: &str = "txn";
const TXN_VERSION: u32 = 1;
/// The bound on each request the sink sends outside librdkafka (describe,
/// the orphan's abort).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub topic: String,
    /// The columns whose line keys each record (none: no key).
    pub key: Vec<String>,
    pub transaction_timeout_ms: u64,
    /// What each subtask's transactional id starts with (`clink-<job id>`
    /// when not given). Two jobs writing through one broker with the same
    /// ids would fence each other's transactions, as Kafka fences any
    /// producer a later one of its id supersedes: jobs that share a job id
    /// on one broker need prefixes of their own.
    pub transactional_id_prefix: Option<String>,
}

pub fn plan(params: &Json) -> Result<Plan, FieldError> {
    let f = Fields::object(params, "$")?;
    f.only(&["topic", "key", "transaction_timeout_ms", "transactional_id_prefix"])?;
    let topic = f.str("topic")?;
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if topic.is_empty() || topic.len() > 249 || !topic.chars().all(legal) || topic == "." || topic == ".." {
        return Err(f.error("topic", "a Kafka topic name: 1 to 249 of [A-Za-z0-9._-], not . or .."));
    }
    let key = f.optional("key", Fields::str_list)?.unwrap_or_default();
    let transaction_timeout_ms = f.optional("transaction_timeout_ms", Fields::u64)?.unwrap_or(60_000);
    if !(1_000..=900_000).contains(&transaction_timeout_ms) {
        return Err(f.error("transaction_timeout_ms", "1000 to 900000"));
    }
    let transactional_id_prefix = f.optional("transactional_id_prefix", Fields::str)?.map(str::to_string);
    if let Some(prefix) = &transactional_id_prefix {
        // The id adds "-<uid>-<subtask>"; the whole is checked at build.
        if check_transactional_id(prefix).is_err() || prefix.len() > 200 {
            return Err(f.error("transactional_id_prefix", "1 to 200 of [A-Za-z0-9._:-]"));
        }
    }
    Ok(Plan { topic: topic.to_string(), key, transaction_timeout_ms, transactional_id_prefix })
}

fn plan_schema(params: &Json, input: Option<&Schema>) -> Result<Schema, FieldError> {
    let plan = plan(params)?;
    key_indexes(&plan, defaults::input(input)?)?;
    Ok(Schema::default())
}

fn key_indexes(plan: &Plan, input: &Schema) -> Result<Vec<usize>, FieldError> {
    plan.key
        .iter()
        .enumerate()
        .map(|(i, name)| {
            input.index_of(name).ok_or_else(|| FieldError::new(format!("key[{i}]"), format!("no input column {name:?}")))
        })
        .collect()
}

/// What the snapshot holds: the rows replay suppression still owes (each
/// digest as many times as it is owed, ascending), and the transaction
/// sealed at the barrier (committed later, or never).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SinkState {
    suppressing: RowDigests,
    prepared: Option<TxnHandle>,
}

pub struct KafkaSink {
    plan: Plan,
    key_index: Vec<usize>,
    bootstrap: String,
    /// What each transaction's mark says of the run that wrote it.
    note: String,
    transactional_id: String,
    producer: Option<TxnProducer>,
    identity: Option<ProducerIdentity>,
    /// The digests of the rows sent in the open transaction.
    sent: Vec<RowDigest>,
    /// Replay suppression: rows still to swallow, and how many times each.
    suppressing: BTreeMap<RowDigest, u32>,
    /// Rows swallowed since the last barrier (the interval's evidence).
    swallowed: u64,
    prepared: Option<TxnHandle>,
    line: Vec<u8>,
    key: Vec<u8>,
}

impl KafkaSink {
    fn producer(&self) -> Result<&TxnProducer, OperatorError> {
        self.producer.as_ref().ok_or_else(|| OperatorError::Protocol("the Kafka sink is not open".into()))
    }

    fn broker(&self, e: TxnError) -> OperatorError {
        OperatorError::Input(format!("kafka_sink {:?}: {e}", self.plan.topic))
    }

    fn begin(&self) -> Result<(), OperatorError> {
        self.producer()?.begin().map_err(|e| self.broker(e))
    }
}

impl Sink for KafkaSink {
    fn family(&self) -> SinkFamily {
        FAMILY
    }

    /// init_transactions (every older epoch of the id is fenced, and what it
    /// left open ends), then the first transaction begins. The orphan the
    /// runtime found was settled before this, through [`ConfirmedSink`].
    fn open(&mut self, restored: Option<&StateSlots>) -> Result<u64, OperatorError> {
        self.suppressing.clear();
        if let Some(slots) = restored {
            self.suppress(decode_txn_state(slots)?.suppressing.0);
        }
        let mut config = TxnConfig::new(&self.bootstrap, &self.transactional_id);
        config.transaction_timeout = Duration::from_millis(self.plan.transaction_timeout_ms);
        let producer = TxnProducer::open(config).map_err(|e| self.broker(e))?;
        let (identity, _) = producer.identity(Duration::from_secs(2)).ok_or_else(|| {
            OperatorError::Input(format!(
                "kafka_sink {:?}: librdkafka reported no producer identity for {:?} after init_transactions",
                self.plan.topic, self.transactional_id
            ))
        })?;
        self.identity = Some(identity);
        self.producer = Some(producer);
        self.begin()?;
        Ok(0)
    }

    fn write(&mut self, row: &Row) -> Result<(), OperatorError> {
        self.line.clear();
        render_line_into(&mut self.line, row);
        self.key.clear();
        if !self.key_index.is_empty() {
            let key: Vec<_> = self.key_index.iter().filter_map(|&i| row.get(i).cloned()).collect();
            render_line_into(&mut self.key, &key);
        }
        let digest = row_digest(&self.key, &self.line);
        if let Some(owed) = self.suppressing.get_mut(&digest) {
            *owed -= 1;
            if *owed == 0 {
                self.suppressing.remove(&digest);
            }
            self.swallowed += 1;
            return Ok(());
        }
        let producer = self.producer()?;
        producer.send(&self.plan.topic, None, &self.key, &self.line).map_err(|e| self.broker(e))?;
        self.sent.push(digest);
        Ok(())
    }

    fn prepare(&mut self, checkpoint: u64) -> Result<Prepared, OperatorError> {
        // The mark makes the transaction one the broker knows, records or
        // none: the in-doubt walk and the open describe it by its identity.
        let producer = self.producer()?;
        producer.mark(&self.plan.topic, checkpoint, &self.note).map_err(|e| self.broker(e))?;
        producer.prepare().map_err(|e| self.broker(e))?;
        let identity = self.identity.ok_or_else(|| OperatorError::Protocol("the Kafka sink is not open".into()))?;
        self.prepared = Some(TxnHandle {
            checkpoint,
            transactional_id: self.transactional_id.clone(),
            producer_id: identity.producer_id,
            epoch: identity.epoch,
            rows: RowDigests(std::mem::take(&mut self.sent)),
        });
        Ok(Prepared::SEALED)
    }

    fn snapshot(&self) -> Result<StateSlots, OperatorError> {
        let owed = self.suppressing.iter().flat_map(|(&d, &n)| std::iter::repeat_n(d, n as usize)).collect();
        let state = SinkState { suppressing: RowDigests(owed), prepared: self.prepared.clone() };
        let bytes = serde_json::to_vec(&state).map_err(|e| OperatorError::state(TXN_SLOT, e))?;
        let mut slots = StateSlots::new();
        slots.put(TXN_SLOT, SlotKind::Operator, TXN_VERSION, bytes);
        Ok(slots)
    }

    /// The checkpoint's snapshot failed: its transaction is aborted at the
    /// broker, and the next one begins.
    fn abort(&mut self, checkpoint: u64) -> Result<(), OperatorError> {
        if self.prepared.as_ref().is_some_and(|h| h.checkpoint == checkpoint) {
            self.prepared = None;
            self.sent.clear();
            self.producer()?.abort().map_err(|e| self.broker(e))?;
            self.begin()?;
        }
        Ok(())
    }

    /// The broker's commit of the transaction sealed for `checkpoint`.
    fn commit(&mut self, checkpoint: u64) -> Result<Vec<u64>, OperatorError> {
        match &self.prepared {
            Some(h) if h.checkpoint == checkpoint => {}
            other => {
                return Err(OperatorError::Protocol(format!(
                    "kafka_sink {:?}: a commit of checkpoint {checkpoint} with {} prepared",
                    self.plan.topic,
                    other.as_ref().map_or("nothing".to_string(), |h| format!("checkpoint {}", h.checkpoint))
                )))
            }
        }
        self.producer()?.commit().map_err(|e| self.broker(e))?;
        Ok(Vec::new())
    }

    fn evidence(&self, checkpoint: u64) -> Json {
        let handle = self.prepared.as_ref().filter(|h| h.checkpoint == checkpoint);
        json!({
            "type": TYPE,
            "family": FAMILY.as_str(),
            "topic": self.plan.topic,
            "transactional_id": handle.map(|h| &h.transactional_id),
            "producer": handle.map(|h| json!({"id": h.producer_id, "epoch": h.epoch})),
            "rows_sent": handle.map_or(0, |h| h.rows.0.len()),
            "rows_suppressed": self.swallowed,
            "rows_still_owed": self.suppressing.values().map(|&n| u64::from(n)).sum::<u64>(),
        })
    }

    fn confirmed(&mut self) -> Option<&mut dyn ConfirmedSink> {
        Some(self)
    }
}

impl ConfirmedSink for KafkaSink {
    fn handle(&self, checkpoint: u64) -> Option<TxnHandle> {
        self.prepared.clone().filter(|h| h.checkpoint == checkpoint)
    }

    fn finish(&mut self, checkpoint: u64) -> Result<(), OperatorError> {
        if self.prepared.as_ref().is_some_and(|h| h.checkpoint == checkpoint) {
            self.prepared = None;
        }
        self.begin()
    }

    fn describe(&mut self, orphan: &TxnHandle) -> Result<OrphanSeen, OperatorError> {
        match orphan::describe(&self.bootstrap, &orphan.transactional_id, REQUEST_TIMEOUT) {
            Ok(described) => Ok(seen_in(described.as_ref(), orphan)),
            Err(TxnError::Unsupported { message, .. }) => Ok(OrphanSeen::Unknown { why: message }),
            Err(e) => Err(self.broker(e)),
        }
    }

    fn settle(&mut self, orphan: &TxnHandle) -> Result<OrphanSeen, OperatorError> {
        let identity = ProducerIdentity { producer_id: orphan.producer_id, epoch: orphan.epoch };
        let settled = orphan::settle(&self.bootstrap, &orphan.transactional_id, identity, REQUEST_TIMEOUT)
            .map_err(|e| self.broker(e))?;
        Ok(match settled.settlement {
            Settlement::Committed { .. } => OrphanSeen::Committed,
            Settlement::Aborted { by_this_call: true } => OrphanSeen::AbortedNow,
            Settlement::Aborted { by_this_call: false } => OrphanSeen::NotCommitted,
            // A later epoch holds the id: the broker expired the orphan, or
            // a successor's init fenced it. A committed orphan would have its
            // receipt already (a commit is receipted before its successor
            // begins, and the open reads receipts before it settles), so
            // this one never committed: as `seen_in` reads a later epoch.
            Settlement::Superseded { .. } => OrphanSeen::NotCommitted,
            Settlement::Undetermined { why } => OrphanSeen::Unknown { why: format!("{why} ({})", settled.steps.join("; ")) },
        })
    }

    fn suppress(&mut self, rows: Vec<RowDigest>) {
        for digest in rows {
            *self.suppressing.entry(digest).or_default() += 1;
        }
    }
}

/// What a description says of `orphan`: only its own identity's record
/// decides it; a later epoch means a successor superseded it, and a
/// committed orphan is always receipted before any successor of it begins.
fn seen_in(described: Option<&Described>, orphan: &TxnHandle) -> OrphanSeen {
    let Some(d) = described else {
        return OrphanSeen::NotCommitted;
    };
    if d.identity != (ProducerIdentity { producer_id: orphan.producer_id, epoch: orphan.epoch }) {
        return OrphanSeen::NotCommitted;
    }
    match d.state {
        TxnState::CompleteCommit | TxnState::PrepareCommit => OrphanSeen::Committed,
        TxnState::Ongoing => OrphanSeen::Ongoing,
        TxnState::CompleteAbort | TxnState::PrepareAbort | TxnState::Empty | TxnState::Dead => OrphanSeen::NotCommitted,
        ref other => OrphanSeen::Unknown { why: format!("the broker describes the transaction as {other:?}") },
    }
}

/// Two-phase with broker transactions: receipts, confirmations, the walk.
const FAMILY: SinkFamily = SinkFamily::Confirmed;

pub const DESCRIPTOR: Descriptor = Descriptor {
    type_name: TYPE,
    build: Build::Sink { family: FAMILY, build },
    plan: plan_schema,
    state: StateDecoding::Decode(decode_state),
    key_columns: defaults::no_key_columns,
    preflight,
    replays_as_live: true,
    confirmation: Some(CommitConfirmation { handle: prepared_handle, probe }),
    redivision: None,
};

fn bootstrap(env: &Environment) -> Option<&str> {
    env.connections.kafka_bootstrap.as_deref()
}

/// The transactional id of one subtask of a sink: fixed by the prefix (the
/// job's, unless the plan names one), the sink's uid and the subtask, so
/// every incarnation of it fences the last.
pub fn transactional_id(prefix: Option<&str>, job: u64, uid: &str, subtask: u32) -> String {
    match prefix {
        Some(prefix) => format!("{prefix}-{uid}-{subtask}"),
        None => format!("clink-{job}-{uid}-{subtask}"),
    }
}

/// The note every transaction's mark carries: the run that committed it.
fn mark_note(run: Option<&RunIdentity>) -> String {
    match run {
        Some(run) => format!("clink lineage {} incarnation {}", run.lineage, run.incarnation),
        None => "clink lineage unknown".into(),
    }
}

/// The lineage a mark's note names, if it is one of ours that names one.
fn lineage_of_note(note: &str) -> Option<LineageId> {
    let rest = note.strip_prefix("clink lineage ")?;
    LineageId::parse(rest.split(' ').next()?)
}

/// Before anything is written: a sink whose transactional ids already
/// committed transactions of another lineage (an earlier run of the same
/// job file over another, or an emptied, checkpoint directory) would write
/// the output again under the same ids, unnoticed. Refused, naming what was
/// found, unless the run accepts other lineages' output.
fn preflight(setup: &Setup<'_>) -> Result<(), OperatorError> {
    let env = setup.env;
    let (Some(bootstrap), false) = (bootstrap(env), env.lineage.accept_others) else {
        return Ok(());
    };
    let plan = plan(setup.params).map_err(setup.params_error())?;
    for subtask in 0..setup.parallelism {
        let id = transactional_id(plan.transactional_id_prefix.as_deref(), env.job, setup.uid, subtask);
        let found = last_mark(bootstrap, &id, &plan.topic, REQUEST_TIMEOUT)
            .map_err(|e| OperatorError::Input(format!("kafka_sink {:?}: {e}", setup.uid)))?;
        let Some((mark, note)) = found else {
            continue;
        };
        let theirs = lineage_of_note(&note);
        if theirs.is_some() && theirs == env.lineage.on_disk {
            continue;
        }
        let ours = match &env.lineage.on_disk {
            Some(lineage) => format!("this checkpoint directory's lineage is {lineage}"),
            None => "this run begins a new lineage (its checkpoint directory holds none)".into(),
        };
        let theirs = match theirs {
            Some(lineage) => format!("lineage {lineage}"),
            None => format!("a writer that names no lineage ({note:?})"),
        };
        return Err(OperatorError::Input(format!(
            "kafka_sink {:?}: topic {:?} already holds transactions committed under transactional id {id:?} by \
             {theirs} (its last at checkpoint {mark}); {ours}, and would write the output again under the same ids. \
             Resume the run that wrote it (its checkpoint directory), give this job another topic or \
             transactional_id_prefix, or pass --allow-other-lineage to write over it anyway",
            setup.uid, plan.topic
        )));
    }
    Ok(())
}

fn build(setup: &Setup<'_>) -> Result<Box<dyn Sink>, OperatorError> {
    let plan = plan(setup.params).map_err(setup.params_error())?;
    let key_index = key_indexes(&plan, setup.input()?).map_err(setup.params_error())?;
    let bootstrap = bootstrap(setup.env).map(str::to_string).ok_or_else(|| {
        OperatorError::Input(format!("operator {:?} writes Kafka: name the brokers with --kafka-bootstrap", setup.uid))
    })?;
    let transactional_id =
        transactional_id(plan.transactional_id_prefix.as_deref(), setup.env.job, setup.uid, setup.subtask);
    // DEFECT no_fencing: each process its own id, so no incarnation fences another.
    #[cfg(any(test, feature = "defects"))]
    let transactional_id = if setup.env.defects.has(crate::defects::Defect::NoFencing) {
        format!("{transactional_id}.p{}", std::process::id())
    } else {
        transactional_id
    };
    check_transactional_id(&transactional_id)
        .map_err(|e| OperatorError::Input(format!("operator {:?}: {e} (its uid makes the id)", setup.uid)))?;
    Ok(Box::new(KafkaSink {
        plan,
        key_index,
        bootstrap,
        note: mark_note(setup.env.run.as_ref()),
        transactional_id,
        producer: None,
        identity: None,
        sent: Vec::new(),
        suppressing: BTreeMap::new(),
        swallowed: 0,
        prepared: None,
        line: Vec::new(),
        key: Vec::new(),
    }))
}

fn decode_txn_state(slots: &StateSlots) -> Result<SinkState, OperatorError> {
    let slot = slots.get(TXN_SLOT).ok_or_else(|| OperatorError::state(TXN_SLOT, "missing from the snapshot"))?;
    if slot.version != TXN_VERSION {
        return Err(OperatorError::state(TXN_SLOT, format!("version {} is not {TXN_VERSION}", slot.version)));
    }
    let state: SinkState = serde_json::from_slice(&slot.bytes).map_err(|e| OperatorError::state(TXN_SLOT, e))?;
    if let Some(h) = &state.prepared {
        check_transactional_id(&h.transactional_id).map_err(|e| OperatorError::state(TXN_SLOT, e))?;
    }
    Ok(state)
}

fn decode_state(slots: &StateSlots) -> Result<(), OperatorError> {
    decode_txn_state(slots).map(|_| ())
}

fn prepared_handle(slots: &StateSlots) -> Result<Option<TxnHandle>, OperatorError> {
    decode_txn_state(slots).map(|s| s.prepared)
}

/// The in-doubt walk's probe: committed only when the broker describes the
/// handle's own transaction as committed.
fn probe(env: &Environment, handle: &TxnHandle) -> Probe {
    let Some(bootstrap) = bootstrap(env) else {
        return Probe::Refused { why: "no --kafka-bootstrap to describe the transaction at".into() };
    };
    match orphan::describe(bootstrap, &handle.transactional_id, REQUEST_TIMEOUT) {
        Ok(described) => match seen_in(described.as_ref(), handle) {
            OrphanSeen::Committed => Probe::Committed,
            other => Probe::Refused { why: format!("the broker describes {other:?}") },
        },
        Err(e @ TxnError::Unreachable { .. }) => Probe::Unreachable { why: e.to_string() },
        Err(e) => Probe::Refused { why: e.to_string() },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::ColumnType;

    fn input() -> Schema {
        Schema::of(&[("account", ColumnType::String), ("count", ColumnType::Int)])
    }

    #[test]
    fn params_are_checked_by_name() {
        let ok = plan_schema(&json!({"topic": "windows-out", "key": ["account"]}), Some(&input()));
        assert_eq!(ok, Ok(Schema::default()));
        for (params, why) in [
            (json!({}), "topic"),
            (json!({"topic": "a b"}), "topic: a Kafka topic name"),
            (json!({"topic": ".."}), "topic: a Kafka topic name"),
            (json!({"topic": "t", "key": ["nope"]}), "key[0]: no input column"),
            (json!({"topic": "t", "transaction_timeout_ms": 10}), "transaction_timeout_ms: 1000 to 900000"),
            (json!({"topic": "t", "extra": 1}), "extra"),
            (json!({"topic": "t", "transactional_id_prefix": "a b"}), "transactional_id_prefix: 1 to 200"),
        ] {
            let e = plan_schema(&params, Some(&input())).unwrap_err().to_string();
            assert!(e.contains(why), "{params}: {e}");
        }
    }

    fn handle(producer_id: i64, epoch: i16) -> TxnHandle {
        TxnHandle {
            checkpoint: 3,
            transactional_id: "clink-1-out-0".into(),
            producer_id,
            epoch,
            rows: RowDigests(vec![7, 7, 9]),
        }
    }

    fn described(state: TxnState, producer_id: i64, epoch: i16) -> Described {
        Described {
            state,
            identity: ProducerIdentity { producer_id, epoch },
            timeout_ms: 1,
            start_time_ms: 0,
            partitions: vec![],
        }
    }

    #[test]
    fn only_the_handles_own_record_says_it_committed() {
        let h = handle(7, 2);
        assert_eq!(seen_in(Some(&described(TxnState::CompleteCommit, 7, 2)), &h), OrphanSeen::Committed);
        assert_eq!(seen_in(Some(&described(TxnState::Ongoing, 7, 2)), &h), OrphanSeen::Ongoing);
        assert_eq!(seen_in(Some(&described(TxnState::CompleteAbort, 7, 2)), &h), OrphanSeen::NotCommitted);
        // A successor's commit says nothing of the orphan.
        assert_eq!(seen_in(Some(&described(TxnState::CompleteCommit, 7, 3)), &h), OrphanSeen::NotCommitted);
        assert_eq!(seen_in(None, &h), OrphanSeen::NotCommitted);
        let odd = seen_in(Some(&described(TxnState::Other("Weird".into()), 7, 2)), &h);
        assert!(matches!(odd, OrphanSeen::Unknown { .. }), "{odd:?}");
    }

    #[test]
    fn the_snapshot_round_trips_and_a_hostile_one_is_refused() {
        let state = SinkState { suppressing: RowDigests(vec![1, 1, 2]), prepared: Some(handle(7, 2)) };
        let mut slots = StateSlots::new();
        slots.put(TXN_SLOT, SlotKind::Operator, TXN_VERSION, serde_json::to_vec(&state).unwrap());
        assert_eq!(prepared_handle(&slots).unwrap(), Some(handle(7, 2)));
        assert_eq!(decode_txn_state(&slots).unwrap(), state);
        let mut bad = state.clone();
        bad.prepared.as_mut().unwrap().transactional_id = "a b".into();
        slots.put(TXN_SLOT, SlotKind::Operator, TXN_VERSION, serde_json::to_vec(&bad).unwrap());
        assert!(decode_state(&slots).is_err(), "a transactional id no producer could have");
        let odd = b"{\"suppressing\": \"123\", \"prepared\": null}";
        slots.put(TXN_SLOT, SlotKind::Operator, TXN_VERSION, odd.to_vec());
        assert!(decode_state(&slots).is_err(), "digests that are not whole");
        slots.put(TXN_SLOT, SlotKind::Operator, TXN_VERSION, b"{\"suppressing\": \"\", \"prepared\": null, \"x\": 1}".to_vec());
        assert!(decode_state(&slots).is_err(), "an unknown field is refused");
        assert!(decode_state(&StateSlots::new()).is_err(), "a missing slot is refused");
    }

    /// A sink that never opened: anything it would send fails.
    fn unopened() -> KafkaSink {
        KafkaSink {
            plan: plan(&json!({"topic": "out", "key": ["account"]})).unwrap(),
            key_index: vec![0],
            bootstrap: "127.0.0.1:9".into(),
            note: mark_note(None),
            transactional_id: "clink-0-out-0".into(),
            producer: None,
            identity: None,
            sent: Vec::new(),
            suppressing: BTreeMap::new(),
            swallowed: 0,
            prepared: None,
            line: Vec::new(),
            key: Vec::new(),
        }
    }

    fn row(account: &str, count: i64) -> Row {
        vec![crate::value::Value::Str(account.into()), crate::value::Value::Int(count)]
    }

    fn digest(r: &Row) -> RowDigest {
        let (mut key, mut line) = (Vec::new(), Vec::new());
        render_line_into(&mut key, &r[..1]);
        render_line_into(&mut line, r);
        row_digest(&key, &line)
    }

    #[test]
    fn suppression_swallows_each_receipted_row_as_often_as_it_was_committed() {
        let mut sink = unopened();
        let (a, b) = (row("acct-1", 3), row("acct-2", 5));
        sink.suppress(vec![digest(&a), digest(&a), digest(&b)]);
        // Replayed in another order than committed: still swallowed.
        for r in [&b, &a, &a] {
            sink.write(r).expect("an owed row is swallowed, never sent");
        }
        assert_eq!(sink.swallowed, 3);
        // A third copy of `a` was never committed: it must be sent.
        assert!(sink.write(&a).unwrap_err().to_string().contains("not open"), "a row not owed is sent");
        assert!(sink.suppressing.is_empty());
    }

    #[test]
    fn what_suppression_still_owes_travels_in_the_snapshot() {
        let mut sink = unopened();
        let a = row("acct-1", 3);
        sink.suppress(vec![digest(&a), digest(&a)]);
        sink.write(&a).unwrap();
        let slots = sink.snapshot().unwrap();
        assert_eq!(decode_txn_state(&slots).unwrap().suppressing, RowDigests(vec![digest(&a)]));
    }

    #[test]
    fn transactional_ids_name_job_uid_and_subtask() {
        assert_eq!(transactional_id(None, 22, "windows-out", 1), "clink-22-windows-out-1");
        assert_eq!(transactional_id(Some("blue"), 22, "windows-out", 1), "blue-windows-out-1");
    }

    #[test]
    fn a_marks_note_names_its_lineage_and_only_ours_are_read_as_one() {
        let lineage = LineageId::parse("0123456789abcdef0123456789abcdef").unwrap();
        let note = mark_note(Some(&RunIdentity { lineage: lineage.clone(), incarnation: 3 }));
        assert_eq!(note, "clink lineage 0123456789abcdef0123456789abcdef incarnation 3");
        assert_eq!(lineage_of_note(&note), Some(lineage));
        for foreign in ["", "clink lineage unknown", "someone else", "clink lineage 0123 incarnation 1"] {
            assert_eq!(lineage_of_note(foreign), None, "{foreign:?}");
        }
    }
}
