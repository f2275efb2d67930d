//! The transform subtask: hands its operator the events its input gate
//! yields (through the driver), snapshots at each aligned barrier, and fires
//! processing-time timers when due.
//!
//! Its output leaves in batches (the output gate's rules); the one rule that
//! is the task's own is the idle flush: before it waits for input it sends
//! whatever it buffered, so nothing it emitted waits on a quiet input.

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
            let driver = &self.driver;
            let deadline = || processing_deadline(driver);
            match next_or_flush(&mut self.gate, &mut self.out, deadline)? {
                Input::Record(row) => self.deliver(Event::Record(row))?,
                Input::Watermark { time, idle } => {
                    self.deliver(Event::Watermark { time, idle })?;
                    self.out.broadcast(Element::Watermark { time, idle })?;
                }
                Input::Timeout => self.deliver(Event::ProcessingTime(wall_clock_ms()))?,
                Input::Barrier { checkpoint, kind } => {
                    // What the interval emitted leaves before the snapshot's
                    // disk wait, so the consumers work meanwhile.
                    self.out.flush()?;
                    self.cx.close_epoch(checkpoint);
                    let slots = self.driver.snapshot()?;
                    self.cx.snapshot_and_ack(checkpoint, &slots)?;
                    self.out.broadcast(Element::Barrier { checkpoint, kind })?;
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
        Ok(())
    }
}

/// When the driver's earliest processing-time timer is due, as an instant.
fn processing_deadline(driver: &Driver) -> Option<Instant> {
    let due = driver.next_processing_deadline()?;
    let wait = due.saturating_sub(wall_clock_ms()).max(0) as u64;
    Some(Instant::now() + Duration::from_millis(wait))
}

/// The next input; when none is ready, the output's buffers are sent first
/// and then the task waits (until `deadline()`, the processing-time timer).
fn next_or_flush(
    gate: &mut InputGate,
    out: &mut OutputGate,
    deadline: impl FnOnce() -> Option<Instant>,
) -> Result<Input, TaskExit> {
    if let Some(input) = gate.try_next() {
        return Ok(input);
    }
    out.flush()?;
    Ok(gate.next(deadline()))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    use crossbeam_channel::unbounded;

    use super::*;
    use crate::runtime::frames::DataFrame;
    use crate::runtime::gates::{OutputEdge, Route};
    use crate::value::Value;

    #[test]
    fn a_task_with_nothing_to_read_sends_what_it_buffered_before_it_waits() {
        let (in_tx, in_rx) = unbounded();
        let (_control_tx, control_rx) = unbounded();
        let mut gate = InputGate::new(in_rx, control_rx, 1);
        let (out_tx, out_rx) = unbounded();
        let edge = OutputEdge { route: Route::Forward, targets: vec![(out_tx, 0)] };
        let hour = Duration::from_secs(3600);
        let mut out = OutputGate::with_batching(0, vec![edge], Arc::new(AtomicBool::new(false)), 1000, hour);
        let row = vec![Value::Int(1)];
        let watermark = Element::Watermark { time: 5, idle: false };
        in_tx.send(DataFrame { channel: 0, elements: vec![Element::Record(row.clone()), watermark.clone()] }).unwrap();
        let soon = || Some(Instant::now() + Duration::from_millis(20));
        // Input is ready: the task takes it without sending anything.
        assert!(matches!(next_or_flush(&mut gate, &mut out, soon).unwrap(), Input::Record(_)));
        out.emit(row.clone()).unwrap();
        assert!(matches!(next_or_flush(&mut gate, &mut out, soon).unwrap(), Input::Watermark { time: 5, .. }));
        out.broadcast(watermark.clone()).unwrap();
        assert!(out_rx.try_recv().is_err(), "busy, within the linger: batched");
        // Nothing left to read: the batch leaves, then the task waits.
        assert!(matches!(next_or_flush(&mut gate, &mut out, soon).unwrap(), Input::Timeout));
        let sent: Vec<Element> = out_rx.try_iter().flat_map(|f| f.elements).collect();
        assert_eq!(sent, vec![Element::Record(row), watermark]);
    }
}
