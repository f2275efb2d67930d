//! `idle_detector`: notices keys that went quiet.
//!
//! Keyed state `last_seen` (the greatest event time seen for the key) and
//! `idle_count` (how often the key went idle), both version 1. Each time
//! `last_seen` advances, an event-time timer is registered at
//! `last_seen + timeout`. A timer fires at the first watermark at or past its
//! time; if `last_seen + timeout` still equals that time, the key has been idle
//! for the whole timeout: `idle_count` is incremented and
//! `key..., last_seen, idle_count` is emitted.

use std::collections::BTreeMap;

use serde_json::Value as Json;

use crate::checkpoint::StateSlots;
use clink_basics::fields::{FieldError, Fields};
use crate::timers::Timer;
use crate::value::{ColumnType, Row, Schema, Value};

use super::keyed::{get_keyed, key_bytes_into, key_values, put_keyed};
use super::window::{column, key_columns, typed_column};
use super::{defaults, Context, Descriptor, OperatorError, Transform};

pub const TYPE: &str = "idle_detector";
pub const LAST_SEEN_SLOT: &str = "last_seen";
pub const IDLE_COUNT_SLOT: &str = "idle_count";
pub const SLOT_VERSION: u32 = 1;

#[derive(Debug, Clone)]
pub struct Plan {
    key: Vec<usize>,
    time: usize,
    timeout_ms: i64,
    pub output: Schema,
}

pub fn plan(params: &Json, input: &Schema) -> Result<Plan, FieldError> {
    let f = Fields::object(params, "$")?;
    f.only(&["key", "time", "timeout_ms"])?;
    let key = key_columns(&f, input)?;
    let time = typed_column(&f, "time", input, |t| t == ColumnType::Timestamp, "a timestamp")?;
    let timeout_ms = f.u64("timeout_ms")?;
    if timeout_ms == 0 || timeout_ms > i64::MAX as u64 / 4 {
        return Err(f.error("timeout_ms", "expected a positive timeout in milliseconds"));
    }
    let mut output = Schema(key.iter().map(|&i| input.0[i].clone()).collect());
    output.0.extend([column("last_seen", ColumnType::Timestamp), column("idle_count", ColumnType::Int)]);
    Ok(Plan { key, time, timeout_ms: timeout_ms as i64, output })
}

pub struct IdleDetector {
    plan: Plan,
    last_seen: BTreeMap<Vec<u8>, i64>,
    idle_count: BTreeMap<Vec<u8>, i64>,
    /// A record's key bytes, reused from record to record.
    scratch: Vec<u8>,
}

impl IdleDetector {
    pub fn new(plan: Plan) -> Self {
        Self { plan, last_seen: BTreeMap::new(), idle_count: BTreeMap::new(), scratch: Vec::new() }
    }
}

impl Transform for IdleDetector {
    fn on_record(&mut self, row: Row, cx: &mut Context<'_>) -> Result<(), OperatorError> {
        let Some(Value::Timestamp(time)) = row.get(self.plan.time) else {
            return Err(OperatorError::Input(format!("record without a timestamp in column {}", self.plan.time)));
        };
        let key = key_bytes_into(std::mem::take(&mut self.scratch), &row, &self.plan.key);
        let seen = match self.last_seen.get_mut(key.as_slice()) {
            Some(seen) => seen,
            None => self.last_seen.entry(key.clone()).or_insert(i64::MIN),
        };
        if *time > *seen {
            *seen = *time;
            let timer = Timer { time: time.saturating_add(self.plan.timeout_ms), key: key.clone(), namespace: 0 };
            cx.timers.register_event_time(timer);
        }
        self.scratch = key;
        Ok(())
    }

    fn on_event_timer(&mut self, timer: Timer, cx: &mut Context<'_>) -> Result<(), OperatorError> {
        let Some(&seen) = self.last_seen.get(&timer.key) else {
            return Ok(());
        };
        if seen.saturating_add(self.plan.timeout_ms) != timer.time {
            // The key was seen again since this timer was set; a later timer stands.
            return Ok(());
        }
        let count = self.idle_count.entry(timer.key.clone()).or_insert(0);
        *count += 1;
        let mut row = key_values(&timer.key).map_err(|e| OperatorError::state(LAST_SEEN_SLOT, e))?;
        row.extend([Value::Timestamp(seen), Value::Int(*count)]);
        cx.emit(row);
        Ok(())
    }

    fn snapshot(&self, slots: &mut StateSlots) -> Result<(), OperatorError> {
        put_keyed(slots, LAST_SEEN_SLOT, SLOT_VERSION, &self.last_seen, |w, v| {
            w.i64(*v);
        });
        put_keyed(slots, IDLE_COUNT_SLOT, SLOT_VERSION, &self.idle_count, |w, v| {
            w.i64(*v);
        });
        Ok(())
    }

    fn restore(&mut self, slots: &StateSlots) -> Result<(), OperatorError> {
        self.last_seen = get_keyed(slots, LAST_SEEN_SLOT, SLOT_VERSION, |r| r.i64())?;
        self.idle_count = get_keyed(slots, IDLE_COUNT_SLOT, SLOT_VERSION, |r| r.i64())?;
        Ok(())
    }
}

pub const DESCRIPTOR: Descriptor =
    Descriptor::transform(TYPE, build, plan_schema).keyed_by(defaults::leading_key_columns);

planned_transform!(IdleDetector::new);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operators::driver::Driver;
    use crate::event::Event;
    use crate::operators::segment_source::output_schema;
    use crate::timers::Clock;
    use crate::value::Decimal;

    fn driver() -> Driver {
        let params = serde_json::json!({"key": ["account"], "time": "time", "timeout_ms": 30});
        Driver::new(Box::new(IdleDetector::new(plan(&params, &output_schema()).unwrap())), Clock::Manual(0))
    }

    fn event(time: i64, account: &str) -> Event {
        Event::Record(vec![Value::Timestamp(time), Value::Str(account.into()), Value::Decimal(Decimal::new(1, 2))])
    }

    fn wm(time: i64) -> Event {
        Event::Watermark { time, idle: false }
    }

    #[test]
    fn a_key_idle_for_the_timeout_is_counted_once_per_quiet_spell() {
        let mut d = driver();
        let mut out = Vec::new();
        for e in [event(0, "a"), event(10, "a"), wm(35), wm(40), event(45, "a"), wm(100), event(110, "b"), wm(i64::MAX)]
        {
            d.handle(e, &mut out).unwrap();
        }
        let lines: Vec<String> = out.iter().map(|r| crate::value::render_line(r)).collect();
        // The timer at 30 is stale (a was seen at 10); the one at 40 fires at
        // the watermark 40; a's next spell fires at 75 (watermark 100).
        assert_eq!(lines, vec!["a,10,1", "a,45,2", "b,110,1"]);
    }
}
