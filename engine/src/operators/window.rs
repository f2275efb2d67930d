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
use crate::codec::{DecodeError, Reader, Writer};
use crate::operators::rescale::{never_refuses, Redivision, Share};
use clink_basics::fields::{FieldError, Fields};
use crate::timers::Timer;
use crate::value::{decode_value, encode_value, Column, ColumnType, Decimal, Row, Schema, Value};

use super::keyed::{get_keyed, key_bytes_into, key_values, put_keyed, redivide_keyed, Key, KeyedMap};
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

/// One key's open windows: its shared key (which its timers hold too), its
/// values (decoded once, for the rows it fires), and its windows by start.
/// A key has one or two windows open at a time, so a sorted vector is the
/// map; an entry whose windows all fired stays until the next sweep.
#[derive(Debug, Clone)]
struct KeyWindows {
    key: Key,
    values: Row,
    open: Vec<(i64, Accumulator)>,
}

impl KeyWindows {
    fn new(key: Key) -> Result<KeyWindows, OperatorError> {
        let values = key_values(&key).map_err(|e| OperatorError::state(WINDOWS_SLOT, e))?;
        Ok(KeyWindows { key, values, open: Vec::new() })
    }

    fn position(&self, start: i64) -> Result<usize, usize> {
        self.open.binary_search_by_key(&start, |(s, _)| *s)
    }

    /// Adds a record's value to its window `[start, end)`, opening the window
    /// (and registering its timer, once) when it is new. True when the window
    /// was opened in an entry that had none open.
    fn add(
        &mut self,
        start: i64,
        end: i64,
        value: &Value,
        zero: Value,
        cx: &mut Context<'_>,
    ) -> Result<bool, OperatorError> {
        match self.position(start) {
            Ok(i) => {
                let acc = &mut self.open[i].1;
                acc.count += 1;
                acc.sum = add(&acc.sum, value)?;
                Ok(false)
            }
            Err(i) => {
                let acc = Accumulator { count: 1, sum: add(&zero, value)? };
                let was_empty = self.open.is_empty();
                self.open.insert(i, (start, acc));
                // The timer of a window is registered when its accumulator is
                // made; it stays registered until it fires (the timer set is
                // snapshotted).
                cx.timers.register_event_time(Timer { time: end, key: self.key.clone(), namespace: start });
                Ok(was_empty)
            }
        }
    }
}

/// Entries with no open window are kept until there are more than this many.
const SWEEP_AT_LEAST: usize = 1024;

pub struct TumblingWindow {
    plan: Plan,
    windows: KeyedMap<KeyWindows>,
    /// Entries with no open window, swept once they outnumber the rest.
    empty: usize,
    /// A record's key bytes, reused from record to record.
    scratch: Vec<u8>,
}

impl TumblingWindow {
    pub fn new(plan: Plan) -> Self {
        Self { plan, windows: KeyedMap::default(), empty: 0, scratch: Vec::new() }
    }

    fn zero(&self) -> Value {
        match self.plan.value_type {
            ColumnType::Decimal { scale } => Value::Decimal(Decimal::new(0, scale)),
            _ => Value::Int(0),
        }
    }

    /// Drops the entries with no open window once they are many and
    /// outnumber the others two to one, so memory follows the open windows,
    /// not every key ever seen, and a key that comes back soon keeps its entry.
    fn sweep(&mut self) {
        let open = self.windows.len() - self.empty;
        if self.empty > SWEEP_AT_LEAST && self.empty > 2 * open {
            self.windows.retain(|_, entry| !entry.open.is_empty());
            self.empty = 0;
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
        self.on_record_ref(&row, cx)
    }

    /// Reads the record and keeps none of it (its key is copied into state
    /// only when new).
    fn on_record_ref(&mut self, row: &[Value], cx: &mut Context<'_>) -> Result<(), OperatorError> {
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
        let key = key_bytes_into(std::mem::take(&mut self.scratch), row, &self.plan.key);
        let value = row.get(self.plan.value).unwrap_or(&Value::Null);
        let zero = self.zero();
        // Found by its bytes in the reused buffer: a known key costs no allocation.
        let result = match self.windows.get_mut(key.as_slice()) {
            Some(entry) => entry.add(start, end, value, zero, cx),
            None => KeyWindows::new(Key::from(key.as_slice())).and_then(|mut entry| {
                let opened = entry.add(start, end, value, zero, cx)?;
                self.windows.insert(entry.key.clone(), entry);
                self.empty += 1;
                Ok(opened)
            }),
        };
        self.scratch = key;
        if result? {
            self.empty = self.empty.saturating_sub(1);
        }
        Ok(())
    }

    fn on_event_timer(&mut self, timer: Timer, cx: &mut Context<'_>) -> Result<(), OperatorError> {
        let Some(entry) = self.windows.get_mut(&*timer.key) else {
            return Ok(());
        };
        let Ok(i) = entry.position(timer.namespace) else {
            return Ok(());
        };
        let (_, acc) = entry.open.remove(i);
        let mut row = Vec::with_capacity(entry.values.len() + 4);
        row.extend(entry.values.iter().cloned());
        row.extend([
            Value::Timestamp(timer.namespace),
            Value::Timestamp(window_end(timer.namespace, self.plan.size_ms)),
            Value::Int(acc.count),
            acc.sum,
        ]);
        if entry.open.is_empty() {
            self.empty += 1;
            self.sweep();
        }
        cx.emit(row);
        Ok(())
    }

    fn snapshot(&self, slots: &mut StateSlots) -> Result<(), OperatorError> {
        // DEFECT memory_windows (feature defect-memory-windows): the windows
        // are kept in memory only; the checkpoint holds an empty slot, so a
        // restore starts every window empty, without a warning.
        let open = self.windows.iter().filter(|(_, entry)| !entry.open.is_empty());
        let open = open.filter(|_| !cfg!(feature = "defect-memory-windows"));
        put_keyed(slots, WINDOWS_SLOT, WINDOWS_VERSION, open, |w: &mut Writer, entry| {
            write_per_key(w, entry.open.iter().map(|(start, acc)| (*start, acc.count, &acc.sum)), entry.open.len());
        });
        Ok(())
    }

    fn restore(&mut self, slots: &StateSlots) -> Result<(), OperatorError> {
        let mut windows = KeyedMap::default();
        for (bytes, per_key) in decode_windows(slots)? {
            let mut entry = KeyWindows::new(Key::from(bytes))?;
            entry.open = per_key.into_iter().map(|(start, (count, sum))| (start, Accumulator { count, sum })).collect();
            windows.insert(entry.key.clone(), entry);
        }
        self.empty = windows.values().filter(|entry: &&KeyWindows| entry.open.is_empty()).count();
        self.windows = windows;
        Ok(())
    }
}

/// The open windows a snapshot holds, per key (canonical key bytes) and
/// window start: the count and the sum. The restore path's decoding, usable
/// on its own (`clink state-cat`).
pub fn decode_windows(slots: &StateSlots) -> Result<OpenWindows, OperatorError> {
    get_keyed(slots, WINDOWS_SLOT, WINDOWS_VERSION, read_per_key)
}

/// One key's open windows in a snapshot: their count, then each start, count and sum.
fn write_per_key<'a>(w: &mut Writer, open: impl Iterator<Item = (i64, i64, &'a Value)>, len: usize) {
    w.u32(len as u32);
    for (start, count, sum) in open {
        w.i64(start).i64(count);
        encode_value(w, sum);
    }
}

fn read_per_key(r: &mut Reader<'_>) -> Result<BTreeMap<i64, (i64, Value)>, DecodeError> {
    let n = r.count(17)?;
    let mut per_key = BTreeMap::new();
    for _ in 0..n {
        let start = r.i64()?;
        let count = r.i64()?;
        let sum = decode_value(r)?;
        per_key.insert(start, (count, sum));
    }
    Ok(per_key)
}

/// A rescale's share of the open windows: the keys the new subtask owns.
fn redivide(_: &Json, share: &Share<'_>) -> Result<StateSlots, OperatorError> {
    let mut slots = StateSlots::new();
    redivide_keyed(share, &mut slots, WINDOWS_SLOT, WINDOWS_VERSION, read_per_key, |w, per_key| {
        write_per_key(w, per_key.iter().map(|(start, (count, sum))| (*start, *count, sum)), per_key.len());
    })?;
    Ok(slots)
}

/// Open windows: per key, per window start, the count and the sum.
pub type OpenWindows = BTreeMap<Vec<u8>, BTreeMap<i64, (i64, Value)>>;

pub const DESCRIPTOR: Descriptor = Descriptor::transform(TYPE, build, plan_schema)
    .keyed_by(defaults::leading_key_columns)
    .redivided_by(Redivision { refuses: never_refuses, split: redivide });

planned_transform!(TumblingWindow::new);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operators::driver::Driver;
    use crate::event::Event;
    use crate::operators::segment_source::output_schema;
    use crate::operators::Context;
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
    fn keys_whose_windows_all_fired_are_swept_once_they_are_many() {
        let params = serde_json::json!({"key": ["account"], "time": "time", "value": "amount", "size_ms": 10});
        let mut op = TumblingWindow::new(plan(&params, &output_schema()).unwrap());
        let mut timers = crate::timers::TimerService::new(Clock::Manual(0));
        let mut out = Vec::new();
        let keys = 3 * SWEEP_AT_LEAST;
        for k in 0..keys {
            let Event::Record(row) = event(1, &format!("k{k}"), 1) else { unreachable!() };
            op.on_record(row, &mut Context { out: &mut out, timers: &mut timers }).unwrap();
        }
        for timer in timers.advance_watermark(10) {
            op.on_event_timer(timer, &mut Context { out: &mut out, timers: &mut timers }).unwrap();
        }
        assert_eq!(out.len(), keys, "every window fired");
        assert!(op.windows.len() <= SWEEP_AT_LEAST + 1, "{} entries kept for no open window", op.windows.len());
        // A key that comes back opens its window again.
        let Event::Record(row) = event(15, "k7", 2) else { unreachable!() };
        op.on_record(row, &mut Context { out: &mut out, timers: &mut timers }).unwrap();
        assert_eq!(op.windows.get(b"k7".as_slice()).map(|e| e.open.len()), None, "keys are canonical bytes");
        let key = crate::keys::key_of_values(&[Value::Str("k7".into())]);
        assert_eq!(op.windows.get(key.as_slice()).map(|e| e.open.len()), Some(1));
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
