//! `idle_detector`: notices keys that went quiet.
//!
//! Keyed state `last_seen` (the greatest event time seen for the key) and
//! `idle_count` (how often the key went idle), both version 1. Each time
//! `last_seen` advances, an event-time timer is registered at
//! `last_seen + timeout`. A timer fires at the first watermark at or past its
//! time; if `last_seen + timeout` still equals that time, the key has been idle
//! for the whole timeout: `idle_count` is incremented and
//! `key..., last_seen, idle_count` is emitted.
//!
//! Timers are keyed by the key's canonical bytes, the encoding of the keyed
//! state. A job may key them by the key's text instead (`"timer_key":
//! "text"`, one key column): the timers slot then holds the key's rendered
//! text, a documented encoding other than the keyed state's. A restore at
//! the same layout keeps every timer either way.

use serde_json::Value as Json;

use crate::checkpoint::StateSlots;
use clink_basics::fields::{FieldError, Fields};
use crate::timers::Timer;
use crate::value::{ColumnType, Row, Schema, Value};

use super::keyed::{get_keyed, key_bytes_into, key_values, put_keyed, redivide_keyed, Key, KeyedMap};
use crate::operators::rescale::{Redivision, Share};
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
    timer_key: TimerKey,
    pub output: Schema,
}

/// How the operator keys its timers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimerKey {
    /// The key's canonical bytes, as the keyed state is keyed (the default).
    Canonical,
    /// The key's rendered text (`"timer_key": "text"`).
    Text,
}

pub const TIMER_KEY_PARAM: &str = "timer_key";

/// How an idle detector's params say its timers are keyed.
pub fn timer_key_of(params: &Json) -> TimerKey {
    match params.get(TIMER_KEY_PARAM).and_then(|v| v.as_str()) {
        Some("text") => TimerKey::Text,
        _ => TimerKey::Canonical,
    }
}

pub fn plan(params: &Json, input: &Schema) -> Result<Plan, FieldError> {
    let f = Fields::object(params, "$")?;
    f.only(&["key", "time", "timeout_ms", TIMER_KEY_PARAM])?;
    let key = key_columns(&f, input)?;
    let time = typed_column(&f, "time", input, |t| t == ColumnType::Timestamp, "a timestamp")?;
    let timeout_ms = f.u64("timeout_ms")?;
    if timeout_ms == 0 || timeout_ms > i64::MAX as u64 / 4 {
        return Err(f.error("timeout_ms", "expected a positive timeout in milliseconds"));
    }
    let timer_key = match f.optional(TIMER_KEY_PARAM, |f, k| f.str(k).map(str::to_string))?.as_deref() {
        None | Some("key") => TimerKey::Canonical,
        Some("text") if key.len() == 1 => TimerKey::Text,
        Some("text") => return Err(f.error(TIMER_KEY_PARAM, "text timer keys need exactly one key column")),
        Some(other) => return Err(f.error(TIMER_KEY_PARAM, format!("expected \"key\" or \"text\", found {other:?}"))),
    };
    let mut output = Schema(key.iter().map(|&i| input.0[i].clone()).collect());
    output.0.extend([column("last_seen", ColumnType::Timestamp), column("idle_count", ColumnType::Int)]);
    Ok(Plan { key, time, timeout_ms: timeout_ms as i64, timer_key, output })
}

/// One key's state: its shared key (which its timers hold too, with
/// canonical timer keys), the greatest event time seen, and how often it
/// went idle. Either may be absent in a restored snapshot; a key seen in
/// this run always has `last_seen`.
#[derive(Debug, Clone)]
struct KeyState {
    key: Key,
    last_seen: Option<i64>,
    idle_count: Option<i64>,
}

impl KeyState {
    fn new(key: Key) -> KeyState {
        KeyState { key, last_seen: None, idle_count: None }
    }
}

pub struct IdleDetector {
    plan: Plan,
    keys: KeyedMap<KeyState>,
    /// With text timer keys: each key's text to its canonical key (derived
    /// from `last_seen`, never snapshotted).
    text_keys: KeyedMap<Key>,
    /// A record's key bytes, reused from record to record.
    scratch: Vec<u8>,
}

impl IdleDetector {
    pub fn new(plan: Plan) -> Self {
        Self { plan, keys: KeyedMap::default(), text_keys: KeyedMap::default(), scratch: Vec::new() }
    }

    /// The key a timer of this operator carries for a key.
    fn timer_key(&mut self, key: &Key) -> Result<Key, OperatorError> {
        match self.plan.timer_key {
            TimerKey::Canonical => Ok(key.clone()),
            TimerKey::Text => {
                let text = Key::from(text_of_key(key).map_err(|e| OperatorError::state(LAST_SEEN_SLOT, e))?);
                self.text_keys.insert(text.clone(), key.clone());
                Ok(text)
            }
        }
    }

    /// The canonical key a timer serves.
    fn state_key(&self, timer_key: &Key) -> Option<Key> {
        match self.plan.timer_key {
            TimerKey::Canonical => Some(timer_key.clone()),
            TimerKey::Text => self.text_keys.get(&**timer_key).cloned(),
        }
    }

    /// The state of the key whose bytes are `key`, made when it is new (the
    /// restore's path; a record's is [`see`]).
    fn state_of(&mut self, key: &[u8]) -> &mut KeyState {
        self.keys.entry(Key::from(key)).or_insert_with_key(|key| KeyState::new(key.clone()))
    }
}

/// A record of `time` seen for a key: its last-seen time advances, and the
/// key is returned when it did (a timer is then due at the time + timeout).
fn see(state: &mut KeyState, time: i64) -> Option<Key> {
    let seen = state.last_seen.get_or_insert(i64::MIN);
    if time > *seen {
        *seen = time;
        Some(state.key.clone())
    } else {
        None
    }
}

/// A key's text: its values rendered as a sink renders them.
pub fn text_of_key(key: &[u8]) -> Result<Vec<u8>, crate::codec::DecodeError> {
    Ok(crate::value::render_line(&key_values(key)?).into_bytes())
}

impl Transform for IdleDetector {
    fn on_record(&mut self, row: Row, cx: &mut Context<'_>) -> Result<(), OperatorError> {
        self.on_record_ref(&row, cx)
    }

    /// Reads the record and keeps none of it (its key is copied into state
    /// only when new).
    fn on_record_ref(&mut self, row: &[Value], cx: &mut Context<'_>) -> Result<(), OperatorError> {
        let Some(Value::Timestamp(time)) = row.get(self.plan.time) else {
            return Err(OperatorError::Input(format!("record without a timestamp in column {}", self.plan.time)));
        };
        let time = *time;
        let bytes = key_bytes_into(std::mem::take(&mut self.scratch), row, &self.plan.key);
        // Found by its bytes in the reused buffer: a known key costs no allocation.
        let advanced = match self.keys.get_mut(bytes.as_slice()) {
            Some(state) => see(state, time),
            None => {
                let key = Key::from(bytes.as_slice());
                let mut state = KeyState::new(key.clone());
                let advanced = see(&mut state, time);
                self.keys.insert(key, state);
                advanced
            }
        };
        self.scratch = bytes;
        if let Some(key) = advanced {
            let timer_key = self.timer_key(&key)?;
            cx.timers.register_event_time(Timer {
                time: time.saturating_add(self.plan.timeout_ms),
                key: timer_key,
                namespace: 0,
            });
        }
        Ok(())
    }

    fn on_event_timer(&mut self, timer: Timer, cx: &mut Context<'_>) -> Result<(), OperatorError> {
        let Some(key) = self.state_key(&timer.key) else {
            return Ok(());
        };
        let timeout = self.plan.timeout_ms;
        let Some(state) = self.keys.get_mut(&*key) else {
            return Ok(());
        };
        let Some(seen) = state.last_seen else {
            return Ok(());
        };
        if seen.saturating_add(timeout) != timer.time {
            // The key was seen again since this timer was set; a later timer stands.
            return Ok(());
        }
        let count = state.idle_count.get_or_insert(0);
        *count += 1;
        let count = *count;
        let mut row = key_values(&key).map_err(|e| OperatorError::state(LAST_SEEN_SLOT, e))?;
        row.extend([Value::Timestamp(seen), Value::Int(count)]);
        cx.emit(row);
        Ok(())
    }

    fn snapshot(&self, slots: &mut StateSlots) -> Result<(), OperatorError> {
        let last_seen = self.keys.iter().filter_map(|(k, s)| s.last_seen.as_ref().map(|v| (k, v)));
        put_keyed(slots, LAST_SEEN_SLOT, SLOT_VERSION, last_seen, |w, v| {
            w.i64(*v);
        });
        let idle_count = self.keys.iter().filter_map(|(k, s)| s.idle_count.as_ref().map(|v| (k, v)));
        put_keyed(slots, IDLE_COUNT_SLOT, SLOT_VERSION, idle_count, |w, v| {
            w.i64(*v);
        });
        Ok(())
    }

    fn restore(&mut self, slots: &StateSlots) -> Result<(), OperatorError> {
        let last_seen = get_keyed(slots, LAST_SEEN_SLOT, SLOT_VERSION, |r| r.i64())?;
        let idle_count = get_keyed(slots, IDLE_COUNT_SLOT, SLOT_VERSION, |r| r.i64())?;
        self.keys.clear();
        for (key, seen) in last_seen {
            self.state_of(&key).last_seen = Some(seen);
        }
        for (key, count) in idle_count {
            self.state_of(&key).idle_count = Some(count);
        }
        self.text_keys.clear();
        if self.plan.timer_key == TimerKey::Text {
            // In key order, as the keys were restored before.
            let mut keys: Vec<Key> =
                self.keys.values().filter(|s| s.last_seen.is_some()).map(|s| s.key.clone()).collect();
            keys.sort();
            for key in keys {
                self.timer_key(&key)?;
            }
        }
        Ok(())
    }
}

/// Its timers must be keyed as its state is for a rescale to route them.
fn refuses_redivision(params: &Json) -> Option<String> {
    (timer_key_of(params) == TimerKey::Text)
        .then(|| "its timers are keyed by the key's text (\"timer_key\": \"text\"), not by the keyed state's key".into())
}

/// A rescale's share of `last_seen` and `idle_count`: the keys the new subtask owns.
fn redivide(_: &Json, share: &Share<'_>) -> Result<StateSlots, OperatorError> {
    let mut slots = StateSlots::new();
    for name in [LAST_SEEN_SLOT, IDLE_COUNT_SLOT] {
        redivide_keyed(share, &mut slots, name, SLOT_VERSION, |r| r.i64(), |w, v| {
            w.i64(*v);
        })?;
    }
    Ok(slots)
}

pub const DESCRIPTOR: Descriptor = Descriptor::transform(TYPE, build, plan_schema)
    .keyed_by(defaults::leading_key_columns)
    .redivided_by(Redivision { refuses: refuses_redivision, split: redivide });

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

    fn text_driver() -> Driver {
        let params = serde_json::json!({"key": ["account"], "time": "time", "timeout_ms": 30, "timer_key": "text"});
        Driver::new(Box::new(IdleDetector::new(plan(&params, &output_schema()).unwrap())), Clock::Manual(0))
    }

    #[test]
    fn text_timer_keys_fire_the_same_rows_and_survive_a_restore() {
        let events = [event(0, "a"), event(10, "a"), wm(35), wm(40), event(45, "a"), event(50, "bb"), wm(60)];
        let (mut canonical, mut text) = (driver(), text_driver());
        let (mut out_c, mut out_t) = (Vec::new(), Vec::new());
        for e in events {
            canonical.handle(e.clone(), &mut out_c).unwrap();
            text.handle(e, &mut out_t).unwrap();
        }
        assert_eq!(out_c, out_t);
        let snapshot = text.snapshot().unwrap();
        let mut timers = crate::timers::TimerService::new(Clock::Manual(0));
        let slot = snapshot.get(crate::operators::driver::TIMERS_SLOT).unwrap();
        timers.decode(&mut crate::codec::Reader::new(&slot.bytes)).unwrap();
        assert!(timers.event_timers().any(|t| t.key == b"bb"), "keyed by the key's text");
        let mut restored = text_driver();
        restored.restore(&snapshot).unwrap();
        let (mut rest_c, mut rest_t) = (Vec::new(), Vec::new());
        canonical.handle(wm(i64::MAX), &mut rest_c).unwrap();
        restored.handle(wm(i64::MAX), &mut rest_t).unwrap();
        assert_eq!(rest_c, rest_t);
        assert_eq!(rest_t.len(), 2, "a and bb go idle after the restore");
    }

    #[test]
    fn text_timer_keys_need_one_key_column_and_a_known_form() {
        let two = serde_json::json!({"key": ["account", "time"], "time": "time", "timeout_ms": 30, "timer_key": "text"});
        assert!(plan(&two, &output_schema()).is_err());
        let other = serde_json::json!({"key": ["account"], "time": "time", "timeout_ms": 30, "timer_key": "hex"});
        assert!(plan(&other, &output_schema()).is_err());
    }
}
