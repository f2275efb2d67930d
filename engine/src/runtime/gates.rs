//! A subtask's input and output gates.
//!
//! The input gate merges the channels of the subtask's input edge: it aligns
//! barriers (a channel that delivered barrier `c` is held back until every
//! channel has), combines watermarks (the minimum over the channels still
//! open), and folds the channels' ends into one. Frames arrive as batches;
//! the gate hands their elements over one at a time, in each channel's
//! order, and never copies a batch to do so. The output gate (routing,
//! batches and their flush rules) is [`super::output`], re-exported here.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver, RecvTimeoutError, TryRecvError};

use crate::checkpoint::markers::CheckpointKind;
pub use crate::routing::Route;
use crate::timers::NO_WATERMARK;
use crate::value::Row;

use super::frames::{DataFrame, Element, ToTask};
pub use super::output::{Disconnected, OutputEdge, OutputGate};
use super::watch::{TaskWatch, Wait};

/// What the input gate hands its subtask next.
#[derive(Debug)]
pub enum Input {
    Record(Row),
    Watermark {
        time: i64,
        idle: bool,
    },
    /// Barrier `checkpoint`, aligned over every channel.
    Barrier {
        checkpoint: u64,
        kind: CheckpointKind,
    },
    /// Every channel ended.
    End,
    /// Every channel stopped (or ended, with at least one stopped).
    Stop,
    Control(ToTask),
    /// The deadline passed with nothing to hand over.
    Timeout,
    /// The deployment is being torn down.
    Cancelled,
    /// Something the protocol never sends arrived: the subtask fails, naming it.
    Violation(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChannelState {
    Open,
    /// Delivered the barrier being aligned; held back.
    Blocked,
    Ended,
    Stopped,
}

pub struct InputGate {
    data: Receiver<DataFrame>,
    control: Receiver<ToTask>,
    /// Per channel, the batches received and not yet handed over, in order.
    queues: Vec<VecDeque<std::vec::IntoIter<Element>>>,
    states: Vec<ChannelState>,
    watermarks: Vec<i64>,
    combined: i64,
    aligning: Option<(u64, CheckpointKind)>,
    finished: bool,
    next_channel: usize,
    /// Told of every input handed over and of every wait for one.
    watch: std::sync::Arc<TaskWatch>,
}

impl InputGate {
    pub fn new(data: Receiver<DataFrame>, control: Receiver<ToTask>, channels: usize) -> Self {
        Self {
            data,
            control,
            queues: vec![VecDeque::new(); channels],
            states: vec![ChannelState::Open; channels],
            watermarks: vec![NO_WATERMARK; channels],
            combined: NO_WATERMARK,
            aligning: None,
            finished: channels == 0,
            next_channel: 0,
            watch: TaskWatch::new(),
        }
    }

    /// The gate tells this watch (its subtask's) what it hands over and
    /// waits for.
    pub fn watched_by(mut self, watch: std::sync::Arc<TaskWatch>) -> Self {
        self.watch = watch;
        self
    }

    /// What the gate waits for when it blocks for data.
    fn data_wait(&self) -> Wait {
        match self.aligning {
            Some((checkpoint, _)) => Wait::Alignment(checkpoint),
            None => Wait::Input,
        }
    }

    /// The next input, waiting at most until `deadline` (forever when `None`).
    pub fn next(&mut self, deadline: Option<Instant>) -> Input {
        let input = self.wait_for_next(deadline);
        self.watch.waits(Wait::Working);
        self.watch.moved();
        input
    }

    fn wait_for_next(&mut self, deadline: Option<Instant>) -> Input {
        loop {
            if let Some(input) = self.ready() {
                return input;
            }
            if self.finished {
                return self.wait_control(deadline);
            }
            let timeout = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if timeout == Some(Duration::ZERO) {
                return Input::Timeout;
            }
            let never = crossbeam_channel::never();
            let timer = match timeout {
                Some(t) => crossbeam_channel::after(t),
                None => never,
            };
            self.watch.waits(self.data_wait());
            select! {
                recv(self.control) -> frame => match frame {
                    Ok(frame) => return Input::Control(frame),
                    Err(_) => return Input::Cancelled,
                },
                recv(self.data) -> frame => match frame {
                    Ok(frame) => {
                        if let Some(violation) = self.enqueue(frame) {
                            return violation;
                        }
                    }
                    // Every producer is gone without ending its stream: torn down.
                    Err(_) => return Input::Cancelled,
                },
                recv(timer) -> _ => return Input::Timeout,
            }
        }
    }

    /// The next input if one is ready now, without waiting: `None` when the
    /// subtask would have to wait (what a task flushes its output before).
    pub fn try_next(&mut self) -> Option<Input> {
        if let Some(input) = self.ready() {
            self.watch.moved();
            return Some(input);
        }
        match self.control.try_recv() {
            Ok(frame) => Some(Input::Control(frame)),
            Err(TryRecvError::Disconnected) => Some(Input::Cancelled),
            Err(TryRecvError::Empty) => None,
        }
    }

    /// What can be handed over without waiting: a control frame first (a
    /// commit never waits behind data), then buffered elements, then frames
    /// already in the data channel.
    fn ready(&mut self) -> Option<Input> {
        loop {
            if let Ok(frame) = self.control.try_recv() {
                return Some(Input::Control(frame));
            }
            if let Some(input) = self.next_buffered() {
                return Some(input);
            }
            if self.finished {
                return None;
            }
            match self.data.try_recv() {
                Ok(frame) => {
                    if let Some(violation) = self.enqueue(frame) {
                        return Some(violation);
                    }
                }
                // Every producer is gone without ending its stream: torn down.
                Err(TryRecvError::Disconnected) => return Some(Input::Cancelled),
                Err(TryRecvError::Empty) => return None,
            }
        }
    }

    /// Queues a received batch on its channel, or names the violation.
    fn enqueue(&mut self, frame: DataFrame) -> Option<Input> {
        let channels = self.queues.len();
        match self.queues.get_mut(frame.channel as usize) {
            Some(queue) => {
                queue.push_back(frame.elements.into_iter());
                None
            }
            None => Some(Input::Violation(format!(
                "a frame for channel {} of an input gate with {channels} channels",
                frame.channel
            ))),
        }
    }

    /// The next control frame only, the data left where it is: a sink that
    /// must take a commit before it reads more rows waits here (and says so
    /// to its watch first).
    pub fn next_control(&mut self, deadline: Option<Instant>) -> Input {
        let input = self.wait_control(deadline);
        self.watch.waits(Wait::Working);
        self.watch.moved();
        input
    }

    fn wait_control(&mut self, deadline: Option<Instant>) -> Input {
        let result = match deadline {
            Some(d) => self.control.recv_timeout(d.saturating_duration_since(Instant::now())),
            None => self.control.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match result {
            Ok(frame) => Input::Control(frame),
            Err(RecvTimeoutError::Timeout) => Input::Timeout,
            Err(RecvTimeoutError::Disconnected) => Input::Cancelled,
        }
    }

    /// Processes queued elements of open channels until one yields an input.
    fn next_buffered(&mut self) -> Option<Input> {
        let n = self.queues.len();
        let mut idle_rounds = 0;
        while idle_rounds < n {
            let ch = self.next_channel;
            if self.states[ch] != ChannelState::Open {
                self.next_channel = (ch + 1) % n;
                idle_rounds += 1;
                continue;
            }
            let Some(element) = pop_element(&mut self.queues[ch]) else {
                self.next_channel = (ch + 1) % n;
                idle_rounds += 1;
                continue;
            };
            idle_rounds = 0;
            if let Some(input) = self.accept(ch, element) {
                return Some(input);
            }
        }
        None
    }

    fn accept(&mut self, ch: usize, element: Element) -> Option<Input> {
        match element {
            Element::Record(row) => Some(Input::Record(row)),
            Element::Watermark { time, idle } => {
                self.watermarks[ch] = self.watermarks[ch].max(time);
                self.advance_watermark(idle)
            }
            Element::Barrier { checkpoint, kind } => {
                if let Some((aligning, _)) = self.aligning.filter(|(c, _)| *c != checkpoint) {
                    return Some(Input::Violation(format!(
                        "barrier {checkpoint} arrived on channel {ch} while barrier {aligning} was being aligned"
                    )));
                }
                self.states[ch] = ChannelState::Blocked;
                self.aligning = Some((checkpoint, kind));
                self.complete_alignment()
            }
            Element::End | Element::Stop => {
                self.states[ch] = if element == Element::End { ChannelState::Ended } else { ChannelState::Stopped };
                if let Some(barrier) = self.complete_alignment() {
                    // The end is processed after the barrier it completed.
                    return Some(barrier);
                }
                if self.states.iter().all(|s| matches!(s, ChannelState::Ended | ChannelState::Stopped)) {
                    self.finished = true;
                    let stopped = self.states.contains(&ChannelState::Stopped);
                    return Some(if stopped { Input::Stop } else { Input::End });
                }
                self.advance_watermark(false)
            }
        }
    }

    fn advance_watermark(&mut self, idle: bool) -> Option<Input> {
        let open = self
            .states
            .iter()
            .zip(&self.watermarks)
            .filter(|(s, _)| matches!(s, ChannelState::Open | ChannelState::Blocked))
            .map(|(_, w)| *w)
            .min();
        let combined = open?;
        if combined > self.combined {
            self.combined = combined;
            Some(Input::Watermark { time: combined, idle })
        } else {
            None
        }
    }

    /// When every channel still open has delivered the barrier, releases them.
    fn complete_alignment(&mut self) -> Option<Input> {
        let (checkpoint, kind) = self.aligning?;
        if self.states.contains(&ChannelState::Open) {
            return None;
        }
        if !self.states.contains(&ChannelState::Blocked) {
            return None;
        }
        for s in &mut self.states {
            if *s == ChannelState::Blocked {
                *s = ChannelState::Open;
            }
        }
        self.aligning = None;
        Some(Input::Barrier { checkpoint, kind })
    }
}

/// The next element of a channel's queued batches, dropping spent batches.
fn pop_element(queue: &mut VecDeque<std::vec::IntoIter<Element>>) -> Option<Element> {
    loop {
        let batch = queue.front_mut()?;
        if let Some(element) = batch.next() {
            return Some(element);
        }
        queue.pop_front();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::{unbounded, Sender};

    fn gate(channels: usize) -> (InputGate, Sender<DataFrame>, Sender<ToTask>) {
        let (dtx, drx) = unbounded();
        let (ctx, crx) = unbounded();
        (InputGate::new(drx, crx, channels), dtx, ctx)
    }

    fn send(tx: &Sender<DataFrame>, channel: u32, elements: Vec<Element>) {
        tx.send(DataFrame { channel, elements }).unwrap();
    }

    fn barrier(c: u64) -> Element {
        Element::Barrier { checkpoint: c, kind: CheckpointKind::Periodic }
    }

    fn row(v: i64) -> Element {
        Element::Record(vec![crate::value::Value::Int(v)])
    }

    #[test]
    fn a_barrier_holds_its_channel_until_every_channel_delivered_it() {
        let (mut g, tx, _ctl) = gate(2);
        send(&tx, 0, vec![row(1), barrier(1), row(2)]);
        send(&tx, 1, vec![row(3), barrier(1)]);
        let mut seen = Vec::new();
        for _ in 0..4 {
            seen.push(format!("{:?}", g.next(None)));
        }
        // Row 2 comes after the barrier even though it arrived before row 3.
        assert!(seen[0].contains("Int(1)") && seen[1].contains("Int(3)"), "{seen:?}");
        assert!(seen[2].starts_with("Barrier"), "{seen:?}");
        assert!(seen[3].contains("Int(2)"), "{seen:?}");
    }

    #[test]
    fn the_watermark_is_the_minimum_of_open_channels() {
        let (mut g, tx, _ctl) = gate(2);
        send(&tx, 0, vec![Element::Watermark { time: 10, idle: false }]);
        send(&tx, 1, vec![Element::Watermark { time: 5, idle: false }, Element::End]);
        let first = g.next(None);
        assert!(matches!(first, Input::Watermark { time: 5, .. }), "{first:?}");
        // Channel 1 ended: only channel 0 holds the watermark back.
        let second = g.next(None);
        assert!(matches!(second, Input::Watermark { time: 10, .. }), "{second:?}");
        send(&tx, 0, vec![Element::End]);
        assert!(matches!(g.next(None), Input::End));
    }

    #[test]
    fn a_frame_for_an_unknown_channel_or_a_second_barrier_mid_alignment_is_a_violation() {
        let (mut g, tx, _ctl) = gate(2);
        send(&tx, 5, vec![row(1)]);
        assert!(matches!(g.next(None), Input::Violation(ref m) if m.contains("channel 5")));
        // A producer that sends barrier 2 on channel 1 first breaks the order.
        let (mut g, tx, _ctl) = gate(2);
        send(&tx, 0, vec![barrier(1)]);
        send(&tx, 1, vec![barrier(2)]);
        let mut verdict = None;
        for _ in 0..2 {
            if let Input::Violation(m) = g.next(None) {
                verdict = Some(m);
                break;
            }
        }
        assert!(verdict.is_some_and(|m| m.contains("barrier 2 arrived on channel 1 while barrier 1")));
    }

    #[test]
    fn control_frames_are_seen_even_while_data_waits() {
        let (mut g, tx, ctl) = gate(1);
        send(&tx, 0, vec![row(1)]);
        ctl.send(ToTask::CommitCheckpoint { checkpoint: 1 }).unwrap();
        assert!(matches!(g.next(None), Input::Control(ToTask::CommitCheckpoint { checkpoint: 1 })));
        assert!(matches!(g.next(None), Input::Record(_)));
        let deadline = Instant::now() + Duration::from_millis(10);
        assert!(matches!(g.next(Some(deadline)), Input::Timeout));
    }
}
