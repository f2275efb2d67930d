//! The driver hands a transform its events and owns its timer service. The
//! runtime's subtasks and replay both drive operators through it, so a replayed
//! operator goes through the production paths.

use crate::checkpoint::{SlotKind, StateSlots};
use crate::codec::{Reader, Writer};
use crate::event::Event;
use crate::timers::{Clock, TimerService};
use crate::value::Row;

use super::{Context, OperatorError, Transform};

/// The state slot holding the timers and the watermark.
pub const TIMERS_SLOT: &str = "timers";
pub const TIMERS_SLOT_VERSION: u32 = 1;

pub struct Driver {
    op: Box<dyn Transform>,
    timers: TimerService,
}

impl Driver {
    pub fn new(op: Box<dyn Transform>, clock: Clock) -> Self {
        Self { op, timers: TimerService::new(clock) }
    }

    /// Hands one event to the operator; what it emits is appended to `out`.
    pub fn handle(&mut self, event: Event, out: &mut Vec<Row>) -> Result<(), OperatorError> {
        match event {
            Event::Record(row) => {
                let mut cx = Context { out, timers: &mut self.timers };
                self.op.on_record(row, &mut cx)
            }
            Event::Watermark { time, .. } => {
                for timer in self.timers.advance_watermark(time) {
                    let mut cx = Context { out: &mut *out, timers: &mut self.timers };
                    self.op.on_event_timer(timer, &mut cx)?;
                }
                Ok(())
            }
            Event::ProcessingTime(now) => {
                for timer in self.timers.advance_processing_time(now) {
                    let mut cx = Context { out: &mut *out, timers: &mut self.timers };
                    self.op.on_processing_timer(timer, &mut cx)?;
                }
                Ok(())
            }
        }
    }

    pub fn watermark(&self) -> i64 {
        self.timers.watermark()
    }

    pub fn now_ms(&self) -> i64 {
        self.timers.now_ms()
    }

    pub fn next_processing_deadline(&self) -> Option<i64> {
        self.timers.next_processing_deadline()
    }

    pub fn snapshot(&self) -> Result<StateSlots, OperatorError> {
        let mut slots = StateSlots::new();
        self.op.snapshot(&mut slots)?;
        let mut w = Writer::new();
        self.timers.encode(&mut w);
        slots.put(TIMERS_SLOT, SlotKind::Timers, TIMERS_SLOT_VERSION, w.into_bytes());
        Ok(slots)
    }

    pub fn restore(&mut self, slots: &StateSlots) -> Result<(), OperatorError> {
        let slot =
            slots.get(TIMERS_SLOT).ok_or_else(|| OperatorError::state(TIMERS_SLOT, "missing from the snapshot"))?;
        if slot.version != TIMERS_SLOT_VERSION {
            return Err(OperatorError::state(
                TIMERS_SLOT,
                format!("version {} is not {TIMERS_SLOT_VERSION}", slot.version),
            ));
        }
        let mut r = Reader::new(&slot.bytes);
        self.timers.decode(&mut r).and_then(|()| r.finish()).map_err(|e| OperatorError::state(TIMERS_SLOT, e))?;
        self.op.restore(slots)
    }
}
