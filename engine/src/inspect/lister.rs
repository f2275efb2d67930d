//! The listing's decoders: one participant's slots turned into typed rows in
//! the encodings each operator documents, and what no encoding reads listed
//! whole. It reads the slots it is handed and nothing else.

use clink_basics::digest::sha256_hex;
use clink_basics::ids::OperatorId;

use super::{typed_json, Listing, StateRow, Undocumented};
use crate::checkpoint::snapshot::{Slot, StateSlots};
use crate::codec::Reader;
use crate::job::PlannedOperator;
use crate::keys::{key_of_values, key_values, subtask_for_key};
use crate::operators::driver::TIMERS_SLOT;
use crate::operators::idle::{self, TimerKey};
use crate::operators::{kafka_source, segment_source, staged_sink, window};
use crate::timers::{Clock, Timer, TimerService, NO_WATERMARK};
use crate::value::{ColumnType, Decimal, Value};

/// The slots a Kafka source's snapshot holds, all four one position.
pub(super) const KAFKA_SOURCE_SLOTS: [&str; 4] =
    [kafka_source::POSITION_SLOT, kafka_source::END_SLOT, kafka_source::LOG_SLOT, kafka_source::WAITED_SLOT];

pub(super) struct Lister<'a> {
    pub(super) listing: &'a mut Listing,
    pub(super) id: OperatorId,
    pub(super) subtask: u32,
    pub(super) op: Option<&'a PlannedOperator>,
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

    pub(super) fn undocumented(&mut self, name: &str, slot: &Slot, entry: Option<String>, reason: String) {
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

    pub(super) fn participant(&mut self, op: &PlannedOperator, slots: &StateSlots) {
        let type_name = op.spec.type_name.as_str();
        // A Kafka source's four slots are one position, decoded together.
        let kafka_position = (type_name == kafka_source::TYPE).then(|| self.kafka_position(slots));
        for (name, slot) in &slots.0 {
            if let Some(listed) = &kafka_position {
                if KAFKA_SOURCE_SLOTS.contains(&name.as_str()) {
                    if let Err(reason) = listed {
                        self.undocumented(name, slot, None, reason.clone());
                    }
                    continue;
                }
            }
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

    /// A Kafka source's position, from its four slots: a row per partition
    /// (`source.kafka.partition`: partition, next offset, greatest event
    /// time read), one for the watermark and the log the offsets belong to
    /// (`source.kafka.log`: watermark, the log's identity as JSON text), one
    /// per partition of a bounded input's end (`source.kafka.end`:
    /// partition, end offset), and one per partition the watermark waited
    /// for (`source.kafka.waited_for`: partition).
    fn kafka_position(&mut self, slots: &StateSlots) -> Result<(), String> {
        let p = kafka_source::decode_position(slots).map_err(|e| e.to_string())?;
        let time = |t: i64| if t == NO_WATERMARK { Value::Null } else { Value::Timestamp(t) };
        for (partition, pos) in &p.partitions {
            let values = vec![Value::Int(i64::from(*partition)), Value::Int(pos.next), time(pos.greatest)];
            self.row("source.kafka.partition", values);
        }
        self.row("source.kafka.log", vec![time(p.watermark), Value::Str(p.log.clone())]);
        for (partition, end) in p.end.iter().flatten() {
            self.row("source.kafka.end", vec![Value::Int(i64::from(*partition)), Value::Int(*end)]);
        }
        for partition in &p.waited_for {
            self.row("source.kafka.waited_for", vec![Value::Int(i64::from(*partition))]);
        }
        Ok(())
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
