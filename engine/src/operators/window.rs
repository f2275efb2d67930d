//! `tumbling_window`: a keyed event-time tumbling window that counts its
//! records and sums a column exactly.
//!
//! Keyed state slot `windows` (version 1): per key, the open windows by start,
//! each with its count and sum. A window `[s, s + size)` fires, and its row
//! `key..., s, s + size, count, sum` is emitted, when the watermark reaches
//! `s + size`. A record whose window has already fired is late and dropped.

use std::collections::BTreeMap;

use serde_json::Value as Json;

use crate::checkpoint::StateSlots;
use crate::codec::Writer;
use clink_basics::fields::{FieldError, Fields};
use crate::timers::Timer;
use crate::value::{decode_value, encode_value, Column, ColumnType, Decimal, Row, Schema, Value};

use super::keyed::{get_keyed, key_bytes_into, key_values, put_keyed};
use super::{defaults, Context, Descriptor, OperatorError, Transform};

pub const TYPE: &str = "tumbling_window";
pub const WINDOWS_SLOT: &str = "windows";
pub const WINDOWS_VERSION: u32 = 1;

#[derive(Debug, Clone)]
pub struct Plan {
    key: Vec<usize>,
    time: usize,
    value: usize,
    value_type: ColumnType,
    size_ms: i64,
    pub output: Schema,
}

pub fn plan(params: &Json, input: &Schema) -> Result<Plan, FieldError> {
    let f = Fields::object(params, "$")?;
    f.only(&["key", "time", "value", "size_ms"])?;
    let key = key_columns(&f, input)?;
    let time = typed_column(&f, "time", input, |t| t == ColumnType::Timestamp, "a timestamp")?;
    let value = typed_column(
        &f,
        "value",
        input,
        |t| matches!(t, ColumnType::Int | ColumnType::Decimal { .. }),
        "an int or decimal",
    )?;
    let size_ms = f.u64("size_ms")?;
    if size_ms == 0 || size_ms > i64::MAX as u64 / 4 {
        return Err(f.error("size_ms", "expected a positive window size in milliseconds"));
    }
    let value_type = input.0[value].ty;
    let mut output = Schema(key.iter().map(|&i| input.0[i].clone()).collect());
    output.0.extend([
        column("window_start", ColumnType::Timestamp),
        column("window_end", ColumnType::Timestamp),
        column("count", ColumnType::Int),
        column("sum", value_type),
    ]);
    Ok(Plan { key, time, value, value_type, size_ms: size_ms as i64, output })
}

pub(crate) fn column(name: &str, ty: ColumnType) -> Column {
    Column { name: name.into(), ty }
}

pub(crate) fn key_columns(f: &Fields<'_>, input: &Schema) -> Result<Vec<usize>, FieldError> {
    let names = f.str_list("key")?;
    if names.is_empty() {
        return Err(f.error("key", "name at least one key column"));
    }
    names
        .iter()
        .map(|n| {
            input.index_of(n).ok_or_else(|| {
                f.error("key", format!("no input column {n:?}; the input has {}", input.names().join(", ")))
            })
        })
        .collect()
}

pub(crate) fn typed_column(
    f: &Fields<'_>,
    field: &str,
    input: &Schema,
    accepts: impl Fn(ColumnType) -> bool,
    expected: &str,
) -> Result<usize, FieldError> {
    let name = f.str(field)?;
    let (i, col) = input.column(name).ok_or_else(|| {
        f.error(field, format!("no input column {name:?}; the input has {}", input.names().join(", ")))
    })?;
    if !accepts(col.ty) {
        return Err(f.error(field, format!("column {name:?} is {:?}; expected {expected}", col.ty)));
    }
    Ok(i)
}

#[derive(Debug, Clone, PartialEq)]
struct Accumulator {
    count: i64,
    sum: Value,
}

pub struct TumblingWindow {
    plan: Plan,
    windows: BTreeMap<Vec<u8>, BTreeMap<i64, Accumulator>>,
    /// A record's key bytes, reused from record to record.
    scratch: Vec<u8>,
}

impl TumblingWindow {
    pub fn new(plan: Plan) -> Self {
        Self { plan, windows: BTreeMap::new(), scratch: Vec::new() }
    }

    fn zero(&self) -> Value {
        match self.plan.value_type {
            ColumnType::Decimal { scale } => Value::Decimal(Decimal::new(0, scale)),
            _ => Value::Int(0),
        }
    }
}

fn add(sum: &Value, v: &Value) -> Result<Value, OperatorError> {
    let overflow = || OperatorError::Input("the window sum overflowed".into());
    match (sum, v) {
        (_, Value::Null) => Ok(sum.clone()),
        (Value::Int(a), Value::Int(b)) => a.checked_add(*b).map(Value::Int).ok_or_else(overflow),
        (Value::Decimal(a), Value::Decimal(b)) => a.checked_add(*b).map(Value::Decimal).ok_or_else(overflow),
        _ => Err(OperatorError::Input(format!("cannot add {v:?} to a sum of {sum:?}"))),
    }
}

/// The end a fired window's row names: exclusive, `start + size`. A build
/// with the `defect-window-end-inclusive` feature names `start + size - 1`,
/// a subtly wrong engine the regression suite and the replay checks must catch.
fn window_end(start: i64, size: i64) -> i64 {
    if cfg!(feature = "defect-window-end-inclusive") {
        start + size - 1
    } else {
        start + size
    }
}

impl Transform for TumblingWindow {
    fn on_record(&mut self, row: Row, cx: &mut Context<'_>) -> Result<(), OperatorError> {
        let Some(Value::Timestamp(time)) = row.get(self.plan.time) else {
            return Err(OperatorError::Input(format!("record without a timestamp in column {}", self.plan.time)));
        };
        let size = self.plan.size_ms;
        let overflow = || OperatorError::Input(format!("time {time} is out of the window range"));
        let start = time.div_euclid(size).checked_mul(size).ok_or_else(overflow)?;
        let end = start.checked_add(size).ok_or_else(overflow)?;
        if end <= cx.timers.watermark() {
            // Late: the window has fired already.
            return Ok(());
        }
        let key = key_bytes_into(std::mem::take(&mut self.scratch), &row, &self.plan.key);
        let value = row.get(self.plan.value).unwrap_or(&Value::Null);
        // The timer of a window is registered when its accumulator is made;
        // it stays registered until it fires (the timer set is snapshotted).
        let existing = self.windows.get_mut(key.as_slice()).and_then(|per_key| per_key.get_mut(&start));
        if let Some(acc) = existing {
            acc.count += 1;
            acc.sum = add(&acc.sum, value)?;
            self.scratch = key;
            return Ok(());
        }
        let acc = Accumulator { count: 1, sum: add(&self.zero(), value)? };
        self.windows.entry(key.clone()).or_default().insert(start, acc);
        cx.timers.register_event_time(Timer { time: end, key: key.clone(), namespace: start });
        self.scratch = key;
        Ok(())
    }

    fn on_event_timer(&mut self, timer: Timer, cx: &mut Context<'_>) -> Result<(), OperatorError> {
        let Some(per_key) = self.windows.get_mut(&timer.key) else {
            return Ok(());
        };
        let Some(acc) = per_key.remove(&timer.namespace) else {
            return Ok(());
        };
        if per_key.is_empty() {
            self.windows.remove(&timer.key);
        }
        let mut row = key_values(&timer.key).map_err(|e| OperatorError::state(WINDOWS_SLOT, e))?;
        row.extend([
            Value::Timestamp(timer.namespace),
            Value::Timestamp(window_end(timer.namespace, self.plan.size_ms)),
            Value::Int(acc.count),
            acc.sum,
        ]);
        cx.emit(row);
        Ok(())
    }

    fn snapshot(&self, slots: &mut StateSlots) -> Result<(), OperatorError> {
        // DEFECT memory_windows (feature defect-memory-windows): the windows
        // are kept in memory only; the checkpoint holds an empty slot, so a
        // restore starts every window empty, without a warning.
        let memory_only = BTreeMap::new();
        let windows = if cfg!(feature = "defect-memory-windows") { &memory_only } else { &self.windows };
        put_keyed(slots, WINDOWS_SLOT, WINDOWS_VERSION, windows, |w: &mut Writer, per_key| {
            w.u32(per_key.len() as u32);
            for (start, acc) in per_key {
                w.i64(*start).i64(acc.count);
                encode_value(w, &acc.sum);
            }
        });
        Ok(())
    }

    fn restore(&mut self, slots: &StateSlots) -> Result<(), OperatorError> {
        self.windows = decode_windows(slots)?
            .into_iter()
            .map(|(key, per_key)| {
                (key, per_key.into_iter().map(|(start, (count, sum))| (start, Accumulator { count, sum })).collect())
            })
            .collect();
        Ok(())
    }
}

/// The open windows a snapshot holds, per key (canonical key bytes) and
/// window start: the count and the sum. The restore path's decoding, usable
/// on its own (`clink state-cat`).
pub fn decode_windows(slots: &StateSlots) -> Result<OpenWindows, OperatorError> {
    get_keyed(slots, WINDOWS_SLOT, WINDOWS_VERSION, |r| {
        let n = r.count(17)?;
        let mut per_key = BTreeMap::new();
        for _ in 0..n {
            let start = r.i64()?;
            let count = r.i64()?;
            let sum = decode_value(r)?;
            per_key.insert(start, (count, sum));
        }
        Ok(per_key)
    })
}

/// Open windows: per key, per window start, the count and the sum.
pub type OpenWindows = BTreeMap<Vec<u8>, BTreeMap<i64, (i64, Value)>>;

pub const DESCRIPTOR: Descriptor =
    Descriptor::transform(TYPE, build, plan_schema).keyed_by(defaults::leading_key_columns);

planned_transform!(TumblingWindow::new);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operators::driver::Driver;
    use crate::event::Event;
    use crate::operators::segment_source::output_schema;
    use crate::timers::Clock;

    fn driver() -> Driver {
        let params = serde_json::json!({"key": ["account"], "time": "time", "value": "amount", "size_ms": 10});
        Driver::new(Box::new(TumblingWindow::new(plan(&params, &output_schema()).unwrap())), Clock::Manual(0))
    }

    fn event(time: i64, account: &str, cents: i128) -> Event {
        Event::Record(vec![Value::Timestamp(time), Value::Str(account.into()), Value::Decimal(Decimal::new(cents, 2))])
    }

    fn run(d: &mut Driver, events: Vec<Event>) -> Vec<String> {
        let mut out = Vec::new();
        for e in events {
            d.handle(e, &mut out).unwrap();
        }
        out.iter().map(|r| crate::value::render_line(r)).collect()
    }

    #[test]
    fn a_window_fires_when_the_watermark_reaches_its_end() {
        let mut d = driver();
        let out = run(
            &mut d,
            vec![event(1, "a", 100), event(9, "a", 5), event(3, "b", 1), Event::Watermark { time: 9, idle: false }],
        );
        assert!(out.is_empty(), "{out:?}");
        let out = run(&mut d, vec![Event::Watermark { time: 10, idle: false }]);
        assert_eq!(out, vec!["a,0,10,2,1.05", "b,0,10,1,0.01"]);
        let out = run(&mut d, vec![event(5, "a", 1), Event::Watermark { time: 30, idle: false }]);
        assert!(out.is_empty(), "a late record is dropped: {out:?}");
    }

    #[test]
    fn restored_state_fires_the_same_rows() {
        let mut d = driver();
        run(&mut d, vec![event(1, "a", 100), event(12, "a", 1), Event::Watermark { time: 2, idle: false }]);
        let snapshot = d.snapshot().unwrap();
        let mut restored = driver();
        restored.restore(&snapshot).unwrap();
        let done = Event::Watermark { time: i64::MAX, idle: false };
        assert_eq!(run(&mut restored, vec![done.clone()]), run(&mut d, vec![done]));
    }
}
