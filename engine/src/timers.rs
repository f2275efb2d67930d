//! The timer service an operator schedules work with, and the clock that is the
//! only source of processing time an operator may read.
//!
//! It owns registered timers (event time and processing time), the current
//! watermark, and the clock. It never decides when a timer fires: the driver
//! does, when a watermark or a processing-time tick is handed to it, so a
//! replay that hands it the captured ticks on a manual clock fires the same
//! timers at the same stream positions.

use std::collections::BTreeSet;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::codec::{DecodeError, Reader, Writer};
use crate::keys::Key;

/// One registered timer: its due time, the key it belongs to (canonical key
/// bytes, empty for an unkeyed operator), and an operator-chosen namespace
/// (a window's start, say). Timers order by time, then key bytes, then
/// namespace, which is the order they fire in. The key is shared with the
/// operator's state entry for it ([`Key`]), so registering a timer copies no
/// key bytes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timer {
    pub time: i64,
    pub key: Key,
    pub namespace: i64,
}

/// Where processing time comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clock {
    /// The wall clock (production).
    Wall,
    /// A clock only the driver moves (replay and tests).
    Manual(i64),
}

impl Clock {
    pub fn now_ms(&self) -> i64 {
        match self {
            Clock::Wall => wall_clock_ms(),
            Clock::Manual(t) => *t,
        }
    }
}

pub fn wall_clock_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// The watermark before any has arrived.
pub const NO_WATERMARK: i64 = i64::MIN;

#[derive(Debug, Clone)]
pub struct TimerService {
    event_time: BTreeSet<Timer>,
    processing_time: BTreeSet<Timer>,
    watermark: i64,
    clock: Clock,
}

impl TimerService {
    pub fn new(clock: Clock) -> Self {
        Self { event_time: BTreeSet::new(), processing_time: BTreeSet::new(), watermark: NO_WATERMARK, clock }
    }

    pub fn watermark(&self) -> i64 {
        self.watermark
    }

    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    pub fn clock(&self) -> Clock {
        self.clock
    }

    pub fn register_event_time(&mut self, timer: Timer) {
        self.event_time.insert(timer);
    }

    pub fn register_processing_time(&mut self, timer: Timer) {
        self.processing_time.insert(timer);
    }

    pub fn delete_event_time(&mut self, timer: &Timer) {
        self.event_time.remove(timer);
    }

    /// Advances the watermark and takes the event-time timers it made due, in
    /// firing order. A watermark at or below the current one changes nothing.
    pub fn advance_watermark(&mut self, watermark: i64) -> Vec<Timer> {
        let mut due = Vec::new();
        self.advance_watermark_into(watermark, &mut due);
        due
    }

    /// [`advance_watermark`](Self::advance_watermark) into the caller's
    /// buffer (appended), which the driver reuses from watermark to watermark.
    pub fn advance_watermark_into(&mut self, watermark: i64, due: &mut Vec<Timer>) {
        if watermark <= self.watermark {
            return;
        }
        self.watermark = watermark;
        take_due(&mut self.event_time, watermark, due);
    }

    /// Moves a manual clock to `now` (a wall clock is not moved) and takes the
    /// processing-time timers due at it, in firing order.
    pub fn advance_processing_time(&mut self, now: i64) -> Vec<Timer> {
        if let Clock::Manual(t) = &mut self.clock {
            *t = (*t).max(now);
        }
        let mut due = Vec::new();
        take_due(&mut self.processing_time, now, &mut due);
        due
    }

    /// How many timers are registered, of both kinds.
    pub fn timer_count(&self) -> usize {
        self.event_time.len() + self.processing_time.len()
    }

    /// The registered event-time timers, in firing order.
    pub fn event_timers(&self) -> impl Iterator<Item = &Timer> {
        self.event_time.iter()
    }

    /// The registered processing-time timers, in firing order.
    pub fn processing_timers(&self) -> impl Iterator<Item = &Timer> {
        self.processing_time.iter()
    }

    /// The timers of several services that `keep` accepts, under the lowest
    /// of their watermarks, so no timer of the merge fires earlier than it
    /// would have in the service it came from (a rescale's re-division).
    pub fn merged(parts: &[TimerService], mut keep: impl FnMut(&Timer) -> bool) -> TimerService {
        let mut merged = TimerService::new(Clock::Manual(0));
        merged.watermark = parts.iter().map(|p| p.watermark).min().unwrap_or(NO_WATERMARK);
        for part in parts {
            merged.event_time.extend(part.event_time.iter().filter(|t| keep(t)).cloned());
            merged.processing_time.extend(part.processing_time.iter().filter(|t| keep(t)).cloned());
        }
        merged
    }

    /// Keeps only the event-time timers `keep` accepts.
    pub fn retain_event_timers(&mut self, keep: impl FnMut(&Timer) -> bool) {
        self.event_time.retain(keep);
    }

    /// The earliest processing-time timer, which the task polls the clock for.
    pub fn next_processing_deadline(&self) -> Option<i64> {
        self.processing_time.first().map(|t| t.time)
    }

    /// The timers and the watermark as one state slot.
    pub fn encode(&self, w: &mut Writer) {
        w.i64(self.watermark);
        for set in [&self.event_time, &self.processing_time] {
            w.u32(set.len() as u32);
            for t in set {
                w.i64(t.time).bytes(&t.key).i64(t.namespace);
            }
        }
    }

    /// Restores what [`encode`](Self::encode) wrote, keeping this service's clock.
    pub fn decode(&mut self, r: &mut Reader<'_>) -> Result<(), DecodeError> {
        self.watermark = r.i64()?;
        for which in 0..2 {
            let n = r.count(20)?;
            let mut set = BTreeSet::new();
            for _ in 0..n {
                let time = r.i64()?;
                let key = Key::from(r.bytes()?);
                let namespace = r.i64()?;
                set.insert(Timer { time, key, namespace });
            }
            if which == 0 {
                self.event_time = set;
            } else {
                self.processing_time = set;
            }
        }
        Ok(())
    }
}

fn take_due(set: &mut BTreeSet<Timer>, upto: i64, due: &mut Vec<Timer>) {
    while let Some(first) = set.first() {
        if first.time > upto {
            break;
        }
        if let Some(t) = set.pop_first() {
            due.push(t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timer(time: i64, key: &str) -> Timer {
        Timer { time, key: Key::from(key.as_bytes()), namespace: 0 }
    }

    #[test]
    fn event_timers_fire_in_time_then_key_order_once() {
        let mut s = TimerService::new(Clock::Manual(0));
        s.register_event_time(timer(20, "b"));
        s.register_event_time(timer(10, "z"));
        s.register_event_time(timer(20, "a"));
        s.register_event_time(timer(30, "a"));
        assert_eq!(s.advance_watermark(20), vec![timer(10, "z"), timer(20, "a"), timer(20, "b")]);
        assert!(s.advance_watermark(20).is_empty(), "a repeated watermark fires nothing");
        assert!(s.advance_watermark(15).is_empty(), "the watermark never goes back");
        assert_eq!(s.watermark(), 20);
        assert_eq!(s.advance_watermark(i64::MAX), vec![timer(30, "a")]);
    }

    #[test]
    fn a_manual_clock_moves_only_forward() {
        let mut s = TimerService::new(Clock::Manual(5));
        s.register_processing_time(timer(7, "k"));
        assert!(s.advance_processing_time(6).is_empty());
        assert_eq!(s.advance_processing_time(9), vec![timer(7, "k")]);
        s.advance_processing_time(3);
        assert_eq!(s.now_ms(), 9);
    }

    #[test]
    fn timers_round_trip_through_their_slot() {
        let mut s = TimerService::new(Clock::Wall);
        s.register_event_time(timer(1, "a"));
        s.register_processing_time(timer(2, "b"));
        s.advance_watermark(0);
        let mut w = Writer::new();
        s.encode(&mut w);
        let bytes = w.into_bytes();
        let mut back = TimerService::new(Clock::Manual(0));
        let mut r = Reader::new(&bytes);
        back.decode(&mut r).unwrap();
        r.finish().unwrap();
        assert_eq!(back.watermark(), 0);
        assert_eq!(back.advance_watermark(5), vec![timer(1, "a")]);
        assert_eq!(back.next_processing_deadline(), Some(2));
    }
}
