//! The transform subtask: hands its operator the events its input gate
//! yields (through the driver), snapshots at each aligned barrier, and fires
//! processing-time timers when due.

use std::time::{Duration, Instant};

use crate::event::Event;
use crate::operators::driver::Driver;
use crate::timers::wall_clock_ms;

use super::super::frames::{Element, ToTask};
use super::super::gates::{Input, InputGate, OutputGate};
use super::{TaskContext, TaskExit};

pub fn run(mut cx: TaskContext, driver: Driver, gate: InputGate, out: OutputGate) {
    cx.place();
    let result = TransformTask { cx: &mut cx, driver, gate, out, emitted: Vec::new() }.run();
    cx.finish(result);
}

struct TransformTask<'a> {
    cx: &'a mut TaskContext,
    driver: Driver,
    gate: InputGate,
    out: OutputGate,
    emitted: Vec<crate::value::Row>,
}

impl TransformTask<'_> {
    fn run(&mut self) -> Result<(), TaskExit> {
        if let Some(slots) = &self.cx.restored {
            self.driver.restore(slots)?;
        }
        loop {
            // Due processing-time timers fire even while data keeps arriving.
            if let Some(due) = self.driver.next_processing_deadline() {
                let now = wall_clock_ms();
                if now >= due {
                    self.deliver(Event::ProcessingTime(now))?;
                }
            }
            let deadline = self.processing_deadline();
            match self.gate.next(deadline) {
                Input::Record(row) => self.deliver(Event::Record(row))?,
                Input::Watermark { time, idle } => {
                    self.deliver(Event::Watermark { time, idle })?;
                    self.out.broadcast(Element::Watermark { time, idle })?;
                    self.out.flush()?;
                }
                Input::Timeout => self.deliver(Event::ProcessingTime(wall_clock_ms()))?,
                Input::Barrier { checkpoint, kind } => {
                    self.out.flush()?;
                    self.cx.close_epoch(checkpoint);
                    let slots = self.driver.snapshot()?;
                    self.cx.snapshot_and_ack(checkpoint, &slots)?;
                    self.out.broadcast(Element::Barrier { checkpoint, kind })?;
                    self.out.flush()?;
                }
                Input::End => return self.close(Element::End),
                Input::Stop => return self.close(Element::Stop),
                Input::Control(ToTask::Cancel) | Input::Cancelled => return Err(TaskExit::Cancelled),
                Input::Control(frame) => {
                    return Err(TaskExit::violation(format!("a transform was sent {frame:?}")));
                }
                Input::Violation(what) => return Err(TaskExit::violation(what)),
            }
        }
    }

    fn processing_deadline(&self) -> Option<Instant> {
        let due = self.driver.next_processing_deadline()?;
        let wait = due.saturating_sub(wall_clock_ms()).max(0) as u64;
        Some(Instant::now() + Duration::from_millis(wait))
    }

    /// Hands one event to the operator and routes what it emitted.
    fn deliver(&mut self, event: Event) -> Result<(), TaskExit> {
        self.cx.record(&event);
        self.driver.handle(event, &mut self.emitted)?;
        for row in self.emitted.drain(..) {
            self.out.emit(row)?;
        }
        Ok(())
    }

    fn close(&mut self, last: Element) -> Result<(), TaskExit> {
        self.out.broadcast(last)?;
        self.out.flush()?;
        Ok(())
    }
}
