//! `proc_time_counter`: counts each key's records and reports the count on a
//! processing-time timer, `interval_ms` after the first record since the last
//! report. Row: `key..., count, fired_at`.
//!
//! It is the engine's processing-time operator: its timers are registered at a
//! clock reading and fire at the clock positions the runner hands it, which is
//! what replay must reproduce. Keyed state slot `counts`, version 1.

use std::collections::BTreeMap;

use serde_json::Value as Json;

use crate::checkpoint::StateSlots;
use clink_basics::fields::{FieldError, Fields};
use crate::timers::Timer;
use crate::value::{ColumnType, Row, Schema, Value};

use super::keyed::{get_keyed, key_bytes, key_values, put_keyed};
use super::window::{column, key_columns};
use super::{defaults, Context, Descriptor, OperatorError, Transform};

pub const TYPE: &str = "proc_time_counter";
pub const COUNTS_SLOT: &str = "counts";
pub const COUNTS_VERSION: u32 = 1;

#[derive(Debug, Clone)]
pub struct Plan {
    key: Vec<usize>,
    interval_ms: i64,
    pub output: Schema,
}

pub fn plan(params: &Json, input: &Schema) -> Result<Plan, FieldError> {
    let f = Fields::object(params, "$")?;
    f.only(&["key", "interval_ms"])?;
    let key = key_columns(&f, input)?;
    let interval_ms = f.u64("interval_ms")?;
    if interval_ms == 0 || interval_ms > i64::MAX as u64 / 4 {
        return Err(f.error("interval_ms", "expected a positive interval in milliseconds"));
    }
    let mut output = Schema(key.iter().map(|&i| input.0[i].clone()).collect());
    output.0.extend([column("count", ColumnType::Int), column("fired_at", ColumnType::Timestamp)]);
    Ok(Plan { key, interval_ms: interval_ms as i64, output })
}

pub struct ProcTimeCounter {
    plan: Plan,
    counts: BTreeMap<Vec<u8>, i64>,
}

impl ProcTimeCounter {
    pub fn new(plan: Plan) -> Self {
        Self { plan, counts: BTreeMap::new() }
    }
}

impl Transform for ProcTimeCounter {
    fn on_record(&mut self, row: Row, cx: &mut Context<'_>) -> Result<(), OperatorError> {
        let key = key_bytes(&row, &self.plan.key);
        let count = self.counts.entry(key.clone()).or_insert(0);
        if *count == 0 {
            let due = cx.timers.now_ms().saturating_add(self.plan.interval_ms);
            cx.timers.register_processing_time(Timer { time: due, key: key.into(), namespace: 0 });
        }
        *count += 1;
        Ok(())
    }

    fn on_processing_timer(&mut self, timer: Timer, cx: &mut Context<'_>) -> Result<(), OperatorError> {
        let Some(count) = self.counts.remove(&*timer.key) else {
            return Ok(());
        };
        let mut row = key_values(&timer.key).map_err(|e| OperatorError::state(COUNTS_SLOT, e))?;
        let count = if crate::defects::active().has(crate::defects::Defect::StateOutsideSnapshot) {
            static REPORTS: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);
            count + REPORTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        } else {
            count
        };
        row.extend([Value::Int(count), Value::Timestamp(timer.time)]);
        cx.emit(row);
        Ok(())
    }

    fn snapshot(&self, slots: &mut StateSlots) -> Result<(), OperatorError> {
        put_keyed(slots, COUNTS_SLOT, COUNTS_VERSION, &self.counts, |w, v| {
            w.i64(*v);
        });
        Ok(())
    }

    fn restore(&mut self, slots: &StateSlots) -> Result<(), OperatorError> {
        self.counts = get_keyed(slots, COUNTS_SLOT, COUNTS_VERSION, |r| r.i64())?;
        Ok(())
    }
}

pub const DESCRIPTOR: Descriptor = Descriptor::transform(TYPE, build, plan_schema)
    .keyed_by(defaults::leading_key_columns)
    .reads_the_clock_on_records();

planned_transform!(ProcTimeCounter::new);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operators::driver::Driver;
    use crate::event::Event;
    use crate::operators::segment_source::output_schema;
    use crate::timers::Clock;
    use crate::value::Decimal;

    #[test]
    fn counts_fire_at_the_clock_positions_handed_in() {
        let params = serde_json::json!({"key": ["account"], "interval_ms": 10});
        let mut d =
            Driver::new(Box::new(ProcTimeCounter::new(plan(&params, &output_schema()).unwrap())), Clock::Manual(100));
        let rec = |a: &str| {
            Event::Record(vec![Value::Timestamp(0), Value::Str(a.into()), Value::Decimal(Decimal::new(1, 2))])
        };
        let mut out = Vec::new();
        for e in [rec("a"), rec("a"), Event::ProcessingTime(105), rec("b"), Event::ProcessingTime(110)] {
            d.handle(e, &mut out).unwrap();
        }
        let lines: Vec<String> = out.iter().map(|r| crate::value::render_line(r)).collect();
        // a's timer (100 + 10) fires at 110; b registered at clock 105, due 115.
        assert_eq!(lines, vec!["a,2,110"]);
        d.handle(Event::ProcessingTime(200), &mut out).unwrap();
        assert_eq!(crate::value::render_line(&out[1]), "b,1,115");
    }
}
