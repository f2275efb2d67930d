//! `kafka_source`: reads every partition of one Kafka topic by manual
//! assignment. Each message is one JSON object whose fields are the declared
//! columns (decimals as strings, timestamps as epoch milliseconds); anything
//! else fails the job, naming the partition and offset: nothing is skipped.
//!
//! Its position is, per partition, the next offset to read and the greatest
//! event time read so far; a restored source resumes at those offsets. The
//! watermark is the least, over the partitions still being read, of each
//! partition's greatest event time, less the declared lag; a partition that
//! has delivered nothing holds it back. The snapshot also records the log the
//! offsets belong to (topic, cluster id, topic id where the client can see
//! it, isolation level) and, at every barrier, the partitions the watermark
//! was waiting for.
//!
//! With `"end": "offsets_at_start"` the input is bounded: a fresh start reads
//! each partition's end offset once, keeps it in its state, and the source
//! reaches END when every partition has been read to it (records written
//! later are not read). With `"end": "none"` it reads until it is stopped.
//! A source runs at parallelism 1 and owns every partition.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value as Json;

use clink_basics::fields::{FieldError, Fields};
use clink_connectors::kafka::{Isolation, LogIdentity, LogReader, Polled, Prefetch};

use crate::checkpoint::{SlotKind, StateSlots};
use crate::codec::{Reader, Writer};
use crate::timers::NO_WATERMARK;
use crate::value::{value_from_json, Column, ColumnType, Row, Schema};

use super::{defaults, Build, Descriptor, OperatorError, Setup, Source, SourceItem, StateDecoding};

pub const TYPE: &str = "kafka_source";
pub const POSITION_SLOT: &str = "position";
pub const END_SLOT: &str = "end";
pub const LOG_SLOT: &str = "log";
pub const WAITED_SLOT: &str = "watermark_waited_for";
pub const SLOT_VERSION: u32 = 1;
/// A message larger than this is refused.
pub const MAX_MESSAGE_BYTES: usize = 1 << 20;
/// How long one poll waits before the task looks at its control frames.
const POLL_WAIT: Duration = Duration::from_millis(100);

/// The source's checked params.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub topic: String,
    pub columns: Schema,
    pub event_time: usize,
    pub watermark_lag_ms: i64,
    pub isolation: Isolation,
    pub bounded: bool,
    pub broker_timeout_ms: u64,
    /// How far the client reads ahead of the records handed out.
    pub prefetch: Prefetch,
}

pub fn plan(params: &Json) -> Result<Plan, FieldError> {
    let f = Fields::object(params, "$")?;
    f.only(&[
        "topic",
        "format",
        "columns",
        "event_time",
        "watermark_lag_ms",
        "isolation",
        "end",
        "broker_timeout_ms",
        "prefetch_kbytes",
        "fetch_kbytes",
    ])?;
    let topic = f.str("topic")?.to_string();
    if topic.is_empty() || topic.len() > 249 || !topic.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)) {
        return Err(f.error("topic", format!("{topic:?} is not a Kafka topic name (1 to 249 of [A-Za-z0-9._-])")));
    }
    if let Some(format) = f.optional("format", Fields::str)? {
        if format != "json" {
            return Err(f.error("format", format!("{format:?}: the only message format is \"json\"")));
        }
    }
    let columns: Vec<Column> = serde_json::from_value(f.value("columns")?.clone())
        .map_err(|e| f.error("columns", format!("expected [{{\"name\": ..., \"type\": ...}}, ...]: {e}")))?;
    if columns.is_empty() {
        return Err(f.error("columns", "declare at least one column"));
    }
    for (i, c) in columns.iter().enumerate() {
        if columns[..i].iter().any(|d| d.name == c.name) {
            return Err(f.error("columns", format!("column {:?} is declared twice", c.name)));
        }
    }
    let columns = Schema(columns);
    let time_name = f.str("event_time")?;
    let event_time = match columns.column(time_name) {
        Some((i, c)) if matches!(c.ty, ColumnType::Int | ColumnType::Timestamp) => i,
        Some(_) => return Err(f.error("event_time", format!("column {time_name:?} is not an int or timestamp"))),
        None => return Err(f.error("event_time", format!("no declared column is named {time_name:?}"))),
    };
    let watermark_lag_ms = f.optional("watermark_lag_ms", Fields::u64)?.unwrap_or(0);
    if watermark_lag_ms > 86_400_000 {
        return Err(f.error("watermark_lag_ms", "at most a day (86400000)"));
    }
    let isolation = match f.optional("isolation", Fields::str)? {
        None => Isolation::ReadCommitted,
        Some(text) => Isolation::parse(text)
            .ok_or_else(|| f.error("isolation", format!("{text:?} is not read_committed or read_uncommitted")))?,
    };
    let bounded = match f.optional("end", Fields::str)? {
        None | Some("offsets_at_start") => true,
        Some("none") => false,
        Some(other) => return Err(f.error("end", format!("{other:?} is not offsets_at_start or none"))),
    };
    let broker_timeout_ms = f.optional("broker_timeout_ms", Fields::u64)?.unwrap_or(30_000);
    let prefetch_kbytes = f.optional("prefetch_kbytes", Fields::u32)?.unwrap_or(Prefetch::default().queued_kbytes);
    if !(1..=1_048_576).contains(&prefetch_kbytes) {
        return Err(f.error("prefetch_kbytes", "1 to 1048576"));
    }
    let fetch_kbytes = f.optional("fetch_kbytes", Fields::u32)?.unwrap_or(Prefetch::default().fetch_bytes / 1024);
    if !(1..=65_536).contains(&fetch_kbytes) {
        return Err(f.error("fetch_kbytes", "1 to 65536"));
    }
    Ok(Plan {
        topic,
        columns,
        event_time,
        watermark_lag_ms: watermark_lag_ms as i64,
        isolation,
        bounded,
        broker_timeout_ms,
        prefetch: Prefetch { queued_kbytes: prefetch_kbytes, fetch_bytes: fetch_kbytes * 1024 },
    })
}

/// One partition's progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionPosition {
    /// The next offset to read.
    pub next: i64,
    /// The greatest event time read from it, or [`NO_WATERMARK`].
    pub greatest: i64,
}

/// The source's state, as its snapshot holds it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Position {
    pub partitions: BTreeMap<i32, PartitionPosition>,
    /// The last watermark emitted.
    pub watermark: i64,
    /// Per partition, the offset at which a bounded input ends.
    pub end: Option<BTreeMap<i32, i64>>,
    /// The log the offsets belong to, as JSON.
    pub log: String,
    /// The partitions the watermark waited for when the snapshot was taken.
    pub waited_for: Vec<i32>,
}

impl Position {
    fn done(&self, partition: i32) -> bool {
        match (&self.end, self.partitions.get(&partition)) {
            (Some(end), Some(p)) => end.get(&partition).is_some_and(|&e| p.next >= e),
            _ => false,
        }
    }

    /// The watermark the partitions allow, and the partitions holding it.
    fn watermark_from(&self, lag: i64) -> (Option<i64>, Vec<i32>) {
        let reading: Vec<(i32, i64)> =
            self.partitions.iter().filter(|(p, _)| !self.done(**p)).map(|(p, pos)| (*p, pos.greatest)).collect();
        let Some(least) = reading.iter().map(|(_, g)| *g).min() else {
            return (None, Vec::new());
        };
        let holding = reading.iter().filter(|(_, g)| *g == least).map(|(p, _)| *p).collect();
        if least == NO_WATERMARK {
            return (None, holding);
        }
        (Some(least.saturating_sub(lag)), holding)
    }
}

pub fn encode_position(position: &Position) -> StateSlots {
    let mut slots = StateSlots::new();
    let mut w = Writer::new();
    w.u32(position.partitions.len() as u32);
    for (&p, pos) in &position.partitions {
        w.i64(i64::from(p)).i64(pos.next).i64(pos.greatest);
    }
    w.i64(position.watermark);
    slots.put(POSITION_SLOT, SlotKind::Operator, SLOT_VERSION, w.into_bytes());
    let mut w = Writer::new();
    match &position.end {
        None => {
            w.u8(0);
        }
        Some(end) => {
            w.u8(1).u32(end.len() as u32);
            for (&p, &o) in end {
                w.i64(i64::from(p)).i64(o);
            }
        }
    }
    slots.put(END_SLOT, SlotKind::Operator, SLOT_VERSION, w.into_bytes());
    let mut w = Writer::new();
    w.str(&position.log);
    slots.put(LOG_SLOT, SlotKind::Operator, SLOT_VERSION, w.into_bytes());
    let mut w = Writer::new();
    w.u32(position.waited_for.len() as u32);
    for &p in &position.waited_for {
        w.i64(i64::from(p));
    }
    slots.put(WAITED_SLOT, SlotKind::Operator, SLOT_VERSION, w.into_bytes());
    slots
}

/// Decodes a Kafka source's snapshot without touching any broker.
pub fn decode_position(slots: &StateSlots) -> Result<Position, OperatorError> {
    let slot = |name: &str| {
        let s = slots.get(name).ok_or_else(|| OperatorError::state(name, "missing from the snapshot"))?;
        if s.version != SLOT_VERSION {
            return Err(OperatorError::state(name, format!("version {} is not {SLOT_VERSION}", s.version)));
        }
        Ok(Reader::new(&s.bytes))
    };
    let partition = |r: &mut Reader<'_>| {
        let p = r.i64()?;
        i32::try_from(p).ok().filter(|p| *p >= 0).ok_or_else(|| r.invalid("partition", format!("{p}")))
    };
    let mut position = Position::default();
    let mut r = slot(POSITION_SLOT)?;
    (|| {
        for _ in 0..r.count(24)? {
            let p = partition(&mut r)?;
            let next = r.i64()?;
            let greatest = r.i64()?;
            if next < 0 {
                return Err(r.invalid("offset", format!("{next}")));
            }
            if position.partitions.insert(p, PartitionPosition { next, greatest }).is_some() {
                return Err(r.invalid("partition", format!("{p} listed twice")));
            }
        }
        position.watermark = r.i64()?;
        r.finish()
    })()
    .map_err(|e| OperatorError::state(POSITION_SLOT, e))?;
    let mut r = slot(END_SLOT)?;
    position.end = (|| {
        let end = match r.u8()? {
            0 => None,
            1 => {
                let mut end = BTreeMap::new();
                for _ in 0..r.count(16)? {
                    let p = partition(&mut r)?;
                    end.insert(p, r.i64()?);
                }
                Some(end)
            }
            other => return Err(r.invalid("end", format!("flag {other}"))),
        };
        r.finish()?;
        Ok(end)
    })()
    .map_err(|e| OperatorError::state(END_SLOT, e))?;
    let mut r = slot(LOG_SLOT)?;
    position.log = (|| {
        let log = r.str()?.to_string();
        r.finish()?;
        Ok(log)
    })()
    .map_err(|e: crate::codec::DecodeError| OperatorError::state(LOG_SLOT, e))?;
    serde_json::from_str::<Json>(&position.log)
        .map_err(|e| OperatorError::state(LOG_SLOT, format!("the recorded log is not JSON: {e}")))?;
    let mut r = slot(WAITED_SLOT)?;
    position.waited_for = (|| {
        let mut waited = Vec::new();
        for _ in 0..r.count(8)? {
            waited.push(partition(&mut r)?);
        }
        r.finish()?;
        Ok(waited)
    })()
    .map_err(|e: crate::codec::DecodeError| OperatorError::state(WAITED_SLOT, e))?;
    Ok(position)
}

/// Why a message's payload is not a row of the declared columns.
#[derive(Debug, thiserror::Error)]
pub enum MessageError {
    #[error("the message is {bytes} bytes, more than {}", MAX_MESSAGE_BYTES)]
    TooLarge { bytes: usize },
    #[error("not JSON: {0}")]
    NotJson(serde_json::Error),
    #[error("not a JSON object")]
    NotAnObject,
    #[error("field {field:?} is not a declared column")]
    Undeclared { field: String },
    #[error("field {field:?} is missing")]
    Missing { field: String },
    #[error("field {field:?} is null")]
    Null { field: String },
    /// The value does not read as the column's type.
    #[error("field {field:?}: {value} is not a {ty:?}")]
    WrongType { field: String, value: Json, ty: ColumnType },
}

/// Turns one message's payload into a row of the declared columns.
pub fn parse_message(columns: &Schema, payload: &[u8]) -> Result<Row, MessageError> {
    if payload.len() > MAX_MESSAGE_BYTES {
        return Err(MessageError::TooLarge { bytes: payload.len() });
    }
    let json: Json = serde_json::from_slice(payload).map_err(MessageError::NotJson)?;
    let Json::Object(object) = json else {
        return Err(MessageError::NotAnObject);
    };
    if let Some(extra) = object.keys().find(|k| columns.index_of(k).is_none()) {
        return Err(MessageError::Undeclared { field: extra.clone() });
    }
    columns
        .0
        .iter()
        .map(|c| {
            let cell = object.get(&c.name).ok_or_else(|| MessageError::Missing { field: c.name.clone() })?;
            match value_from_json(cell, c.ty) {
                Some(crate::value::Value::Null) => Err(MessageError::Null { field: c.name.clone() }),
                Some(v) => Ok(v),
                None => Err(MessageError::WrongType { field: c.name.clone(), value: cell.clone(), ty: c.ty }),
            }
        })
        .collect()
}

fn event_time(row: &Row, index: usize) -> Option<i64> {
    match row.get(index)? {
        crate::value::Value::Int(t) | crate::value::Value::Timestamp(t) => Some(*t),
        _ => None,
    }
}

pub struct KafkaSource {
    plan: Plan,
    bootstrap: String,
    group: String,
    reader: Option<LogReader>,
    position: Position,
    restored_watermark: Option<i64>,
    queued: std::collections::VecDeque<SourceItem>,
    ended: bool,
}

impl KafkaSource {
    fn reader(&self) -> Result<&LogReader, OperatorError> {
        self.reader.as_ref().ok_or_else(|| OperatorError::Protocol("the Kafka source was not restored".into()))
    }

    fn log_error(&self, e: clink_connectors::kafka::KafkaClientError) -> OperatorError {
        OperatorError::Input(format!("kafka_source {:?}: {e}", self.plan.topic))
    }

    /// Checks that a restored position belongs to the log this reader sees.
    fn check_restored(&self, log: &LogIdentity) -> Result<(), OperatorError> {
        let recorded: Json = serde_json::from_str(&self.position.log).unwrap_or(Json::Null);
        let differs = |what: &str, now: String| {
            OperatorError::Input(format!(
                "kafka_source: the checkpoint's offsets belong to another log: its {what} was {}, the broker now says {now}",
                recorded.get(what).map_or_else(|| "not recorded".to_string(), Json::to_string)
            ))
        };
        if recorded.get("topic").and_then(Json::as_str) != Some(log.topic.as_str()) {
            return Err(differs("topic", log.topic.clone()));
        }
        let recorded_cluster = recorded.pointer("/cluster_id/value").and_then(Json::as_str);
        if let (Some(then), Some(now)) = (recorded_cluster, log.cluster_id.value()) {
            if then != now {
                return Err(differs("cluster_id", now.to_string()));
            }
        }
        let reader = self.reader()?;
        for (&p, pos) in &self.position.partitions {
            let (low, high) = reader.watermarks(p).map_err(|e| self.log_error(e))?;
            if pos.next > high {
                return Err(OperatorError::Input(format!(
                    "kafka_source: partition {p} ends at offset {high}, before the checkpoint's position {}: the log is not the one recorded (recreated, or another cluster)",
                    pos.next
                )));
            }
            if pos.next < low {
                return Err(OperatorError::Input(format!(
                    "kafka_source: partition {p} now starts at offset {low}; the checkpoint's position {} has expired",
                    pos.next
                )));
            }
        }
        if self.position.partitions.len() != log.partitions as usize {
            return Err(OperatorError::Input(format!(
                "kafka_source: the checkpoint read {} partitions, the topic now has {}",
                self.position.partitions.len(),
                log.partitions
            )));
        }
        Ok(())
    }

    fn on_message(&mut self, partition: i32, offset: i64, payload: &[u8]) -> Result<(), OperatorError> {
        let Some(pos) = self.position.partitions.get(&partition).copied() else {
            return Err(OperatorError::Protocol(format!("a message of partition {partition}, which is not assigned")));
        };
        let beyond_end = self.position.end.as_ref().and_then(|e| e.get(&partition)).is_some_and(|&e| offset >= e);
        if offset < pos.next || beyond_end {
            return Ok(());
        }
        let row = parse_message(&self.plan.columns, payload).map_err(|why| {
            OperatorError::Input(format!(
                "kafka_source: topic {:?} partition {partition} offset {offset}: {why}",
                self.plan.topic
            ))
        })?;
        let time = event_time(&row, self.plan.event_time).unwrap_or(NO_WATERMARK);
        let entry = self.position.partitions.entry(partition).or_insert(pos);
        entry.next = offset + 1;
        entry.greatest = entry.greatest.max(time);
        self.queued.push_back(SourceItem::Record(row));
        self.advance_watermark();
        Ok(())
    }

    fn advance_watermark(&mut self) {
        // A build with the `defect-watermark-ahead` feature forgets the lag:
        // its watermark runs ahead of what the records allow.
        let lag = if cfg!(feature = "defect-watermark-ahead") { 0 } else { self.plan.watermark_lag_ms };
        if let (Some(w), _) = self.position.watermark_from(lag) {
            if w > self.position.watermark {
                self.position.watermark = w;
                self.queued.push_back(SourceItem::Watermark(w));
            }
        }
    }

    fn all_done(&self) -> bool {
        self.plan.bounded && self.position.partitions.keys().all(|&p| self.position.done(p))
    }
}

impl Source for KafkaSource {
    fn restore(&mut self, slots: Option<&StateSlots>) -> Result<(), OperatorError> {
        let reader =
            LogReader::connect_with(&self.bootstrap, &self.plan.topic, self.plan.isolation, &self.group, self.plan.prefetch)
                .map_err(|e| self.log_error(e))?;
        self.reader = Some(reader);
        let log = self.reader()?.describe(self.plan.isolation).map_err(|e| self.log_error(e))?;
        match slots {
            Some(slots) => {
                self.position = decode_position(slots)?;
                self.check_restored(&log)?;
                if self.position.watermark != NO_WATERMARK {
                    self.restored_watermark = Some(self.position.watermark);
                }
            }
            None => {
                let reader = self.reader()?;
                let mut partitions = BTreeMap::new();
                let mut end = BTreeMap::new();
                for p in reader.partitions().map_err(|e| self.log_error(e))? {
                    let (low, high) = reader.watermarks(p).map_err(|e| self.log_error(e))?;
                    partitions.insert(p, PartitionPosition { next: low, greatest: NO_WATERMARK });
                    end.insert(p, high);
                }
                self.position = Position {
                    partitions,
                    watermark: NO_WATERMARK,
                    end: self.plan.bounded.then_some(end),
                    log: serde_json::to_string(&log).unwrap_or_default(),
                    waited_for: Vec::new(),
                };
            }
        }
        let assigned: Vec<(i32, i64)> = self
            .position
            .partitions
            .iter()
            .filter(|(p, _)| !self.position.done(**p))
            .map(|(p, pos)| (*p, pos.next))
            .collect();
        self.reader()?.assign(&assigned).map_err(|e| self.log_error(e))
    }

    fn restored_watermark(&self) -> Option<i64> {
        self.restored_watermark
    }

    fn next_item(&mut self) -> Result<SourceItem, OperatorError> {
        loop {
            if let Some(item) = self.queued.pop_front() {
                return Ok(item);
            }
            if self.ended {
                return Ok(SourceItem::Idle);
            }
            if self.all_done() {
                self.ended = true;
                return Ok(SourceItem::End);
            }
            let reader = self.reader()?;
            reader.check_brokers(Duration::from_millis(self.plan.broker_timeout_ms)).map_err(|e| self.log_error(e))?;
            match reader.poll(POLL_WAIT).map_err(|e| self.log_error(e))? {
                Polled::Message { partition, offset, payload } => self.on_message(partition, offset, &payload)?,
                Polled::PartitionEnd { partition } => {
                    // Offsets a transaction's markers or aborted records hold
                    // are never delivered: the reader's position says where
                    // the partition really ends.
                    if let Some(at) = self.reader()?.position(partition).map_err(|e| self.log_error(e))? {
                        if let Some(pos) = self.position.partitions.get_mut(&partition) {
                            let end = self.position.end.as_ref().and_then(|e| e.get(&partition)).copied();
                            if end.is_some_and(|e| at >= e) {
                                pos.next = pos.next.max(end.unwrap_or(at));
                                self.advance_watermark();
                            }
                        }
                    }
                }
                Polled::Nothing => return Ok(SourceItem::Idle),
            }
        }
    }

    fn snapshot(&self) -> Result<StateSlots, OperatorError> {
        let mut position = self.position.clone();
        position.waited_for = self.position.watermark_from(self.plan.watermark_lag_ms).1;
        Ok(encode_position(&position))
    }
}

pub const DESCRIPTOR: Descriptor = Descriptor {
    type_name: TYPE,
    build: Build::Source(build),
    plan: plan_schema,
    state: StateDecoding::Decode(decode_state),
    key_columns: defaults::no_key_columns,
    preflight,
    replays_as_live: true,
    confirmation: None,
    redivision: None,
};

fn plan_schema(params: &Json, _input: Option<&Schema>) -> Result<Schema, FieldError> {
    plan(params).map(|p| p.columns)
}

fn bootstrap(setup: &Setup<'_>) -> Result<String, OperatorError> {
    setup.env.connections.kafka_bootstrap.clone().ok_or_else(|| {
        OperatorError::Input(format!("operator {:?} reads Kafka: name the brokers with --kafka-bootstrap", setup.uid))
    })
}

fn build(setup: &Setup<'_>) -> Result<Box<dyn Source>, OperatorError> {
    let plan = plan(setup.params).map_err(setup.params_error())?;
    Ok(Box::new(KafkaSource {
        plan,
        bootstrap: bootstrap(setup)?,
        group: format!("clink-{}", setup.uid),
        reader: None,
        position: Position::default(),
        restored_watermark: None,
        queued: Default::default(),
        ended: false,
    }))
}

fn decode_state(slots: &StateSlots) -> Result<(), OperatorError> {
    decode_position(slots).map(|_| ())
}

/// Before the job starts: the brokers answer and hold the topic.
fn preflight(setup: &Setup<'_>) -> Result<(), OperatorError> {
    let plan = plan(setup.params).map_err(setup.params_error())?;
    let bootstrap = bootstrap(setup)?;
    let reader = LogReader::connect(&bootstrap, &plan.topic, plan.isolation, &format!("clink-{}", setup.uid))
        .map_err(|e| OperatorError::Input(format!("kafka_source {:?}: {e}", plan.topic)))?;
    reader.describe(plan.isolation).map_err(|e| OperatorError::Input(format!("kafka_source {:?}: {e}", plan.topic)))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::{Decimal, Value};
    use proptest::prelude::*;

    fn params() -> Json {
        serde_json::json!({
            "topic": "events",
            "columns": [
                {"name": "id", "type": "int"},
                {"name": "time", "type": "timestamp"},
                {"name": "account", "type": "string"},
                {"name": "amount", "type": {"decimal": {"scale": 2}}}
            ],
            "event_time": "time",
            "watermark_lag_ms": 2000
        })
    }

    #[test]
    fn messages_parse_into_rows_of_the_declared_columns_or_are_refused_by_field() {
        let plan = plan(&params()).unwrap();
        let row = parse_message(&plan.columns, br#"{"id": 7, "time": 1000, "account": "a", "amount": "1.5"}"#).unwrap();
        assert_eq!(row, vec![Value::Int(7), Value::Timestamp(1000), Value::Str("a".into()), Value::Decimal(Decimal::new(150, 2))]);
        for (bad, why) in [
            (&br#"{"id": 7, "time": 1000, "account": "a"}"#[..], "\"amount\" is missing"),
            (br#"{"id": 7, "time": 1000, "account": "a", "amount": "1.5", "x": 1}"#, "\"x\" is not a declared column"),
            (br#"{"id": "7", "time": 1000, "account": "a", "amount": "1.5"}"#, "\"id\""),
            (br#"{"id": 7, "time": 1000, "account": null, "amount": "1.5"}"#, "is null"),
            (br#"[1, 2]"#, "not a JSON object"),
            (b"\xff", "not JSON"),
        ] {
            let e = parse_message(&plan.columns, bad).unwrap_err().to_string();
            assert!(e.contains(why), "{e} should say {why}");
        }
        assert!(matches!(parse_message(&plan.columns, b"[1]"), Err(MessageError::NotAnObject)));
        let missing = parse_message(&plan.columns, br#"{"id": 7, "time": 1000, "account": "a"}"#);
        assert!(matches!(missing, Err(MessageError::Missing { field }) if field == "amount"));
    }

    #[test]
    fn params_are_checked_by_path() {
        let mut p = params();
        p["event_time"] = "account".into();
        assert!(plan(&p).unwrap_err().to_string().contains("event_time"));
        let mut p = params();
        p["topic"] = "a/b".into();
        assert!(plan(&p).unwrap_err().to_string().contains("topic"));
        let mut p = params();
        p["end"] = "tomorrow".into();
        assert!(plan(&p).unwrap_err().to_string().contains("end"));
    }

    #[test]
    fn the_watermark_waits_for_every_partition_still_being_read() {
        let mut position = Position {
            partitions: BTreeMap::from([
                (0, PartitionPosition { next: 5, greatest: 10_000 }),
                (1, PartitionPosition { next: 0, greatest: NO_WATERMARK }),
            ]),
            watermark: NO_WATERMARK,
            end: Some(BTreeMap::from([(0, 10), (1, 3)])),
            ..Position::default()
        };
        assert_eq!(position.watermark_from(2000), (None, vec![1]), "partition 1 has delivered nothing");
        position.partitions.get_mut(&1).unwrap().greatest = 8_000;
        assert_eq!(position.watermark_from(2000), (Some(6_000), vec![1]));
        position.partitions.get_mut(&1).unwrap().next = 3;
        assert_eq!(position.watermark_from(2000), (Some(8_000), vec![0]), "a partition read to its end holds nothing");
    }

    #[test]
    fn positions_round_trip_through_the_snapshot() {
        let position = Position {
            partitions: BTreeMap::from([(0, PartitionPosition { next: 5, greatest: 10 }), (3, PartitionPosition { next: 0, greatest: NO_WATERMARK })]),
            watermark: 8,
            end: Some(BTreeMap::from([(0, 9), (3, 0)])),
            log: r#"{"topic":"events"}"#.into(),
            waited_for: vec![3],
        };
        assert_eq!(decode_position(&encode_position(&position)).unwrap(), position);
    }

    proptest! {
        #[test]
        fn any_payload_parses_or_is_refused_without_panicking(payload in proptest::collection::vec(any::<u8>(), 0..200)) {
            let plan = plan(&params()).unwrap();
            let _ = parse_message(&plan.columns, &payload);
        }

        #[test]
        fn any_snapshot_bytes_decode_or_are_refused_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..100)) {
            let mut slots = encode_position(&Position { log: "{}".into(), ..Position::default() });
            slots.put(POSITION_SLOT, SlotKind::Operator, SLOT_VERSION, bytes);
            let _ = decode_position(&slots);
        }
    }
}
