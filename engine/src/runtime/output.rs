//! A subtask's output gate: routes its rows over its output edges, broadcasts
//! watermarks, barriers and ends, and sends what it buffered in batches.
//!
//! Each consumer subtask of each edge has one buffer, and a buffer leaves as
//! one frame, so the elements for one consumer keep the order they were
//! handed in: a barrier never overtakes a row sent before it, and neither
//! does a watermark. The flush rules, all here:
//!
//! - **full**: a buffer is sent once it holds [`BATCH_ELEMENTS`] elements;
//! - **barrier, end, stop**: broadcasting one sends every buffer at once (a
//!   checkpoint never waits on a batch, nor does a stream's end);
//! - **linger**: once the oldest buffered element has waited [`LINGER`],
//!   every buffer is sent; the gate looks at the clock whenever a watermark
//!   is broadcast and every [`LINGER_CHECK_EVERY`] rows, so a watermark (and
//!   what a timer emitted) waits at most about that long under load;
//! - **idle**: a subtask with nothing left to do calls [`OutputGate::flush`]
//!   before it waits for input (the tasks do), so nothing waits on a quiet
//!   stream.
//!
//! It never reorders elements for one consumer, never drops one, and never
//! blocks without looking at the deployment's cancel flag.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{SendTimeoutError, Sender};

use crate::routing::{Route, Router};
use crate::value::Row;

use super::frames::{DataFrame, Element};
use super::watch::{TaskWatch, Wait};

/// One output edge: its route and one sender per consumer subtask, each with
/// the channel index this subtask has at that consumer.
pub struct OutputEdge {
    pub route: Route,
    pub targets: Vec<(Sender<DataFrame>, u32)>,
}

/// A buffer is sent as one frame once it holds this many elements: large
/// enough that a frame's send and wake-up are paid once per many rows, small
/// enough that a frame is a few hundred kilobytes at most.
pub const BATCH_ELEMENTS: usize = 1024;

/// No buffered element waits much longer than this under load.
pub const LINGER: Duration = Duration::from_millis(5);

/// The gate reads the clock for the linger rule once per this many rows
/// (and at every watermark), not per row.
pub const LINGER_CHECK_EVERY: u32 = 256;

pub struct OutputGate {
    subtask: u32,
    edges: Vec<OutputEdge>,
    router: Router,
    /// Per edge, per consumer subtask: the elements not yet sent.
    buffers: Vec<Vec<Vec<Element>>>,
    cancel: Arc<AtomicBool>,
    batch: usize,
    linger: Duration,
    /// When the oldest element still buffered was buffered.
    oldest: Option<Instant>,
    rows_since_clock: u32,
    /// Told of every frame sent and of every wait for a consumer's room.
    watch: Arc<TaskWatch>,
}

/// The consumers went away or the deployment was cancelled mid-send.
#[derive(Debug)]
pub struct Disconnected;

impl OutputGate {
    pub fn new(subtask: u32, edges: Vec<OutputEdge>, cancel: Arc<AtomicBool>) -> Self {
        Self::with_batching(subtask, edges, cancel, BATCH_ELEMENTS, LINGER)
    }

    /// A gate with its own batch size and linger (tests use small ones).
    pub fn with_batching(
        subtask: u32,
        edges: Vec<OutputEdge>,
        cancel: Arc<AtomicBool>,
        batch: usize,
        linger: Duration,
    ) -> Self {
        let buffers = edges.iter().map(|e| vec![Vec::new(); e.targets.len()]).collect();
        let router = Router::new(edges.iter().map(|e| e.route.clone()).collect());
        Self {
            subtask,
            edges,
            router,
            buffers,
            cancel,
            batch: batch.max(1),
            linger,
            oldest: None,
            rows_since_clock: 0,
            watch: TaskWatch::new(),
        }
    }

    /// The gate tells this watch (its subtask's) what it sends and waits for.
    pub fn watched_by(mut self, watch: Arc<TaskWatch>) -> Self {
        self.watch = watch;
        self
    }

    /// Routes one row to every output edge.
    pub fn emit(&mut self, row: Row) -> Result<(), Disconnected> {
        self.router.hash_row(&row);
        let mut row = Some(row);
        let last = self.edges.len().saturating_sub(1);
        for edge in 0..self.edges.len() {
            let target = self.router.target(edge, self.subtask, self.edges[edge].targets.len() as u32) as usize;
            // The last edge takes the row itself; the others a copy.
            let r = if edge == last { row.take() } else { row.clone() };
            self.push(edge, target, Element::Record(r.ok_or(Disconnected)?))?;
        }
        self.rows_since_clock += 1;
        if self.rows_since_clock >= LINGER_CHECK_EVERY {
            self.flush_if_lingered(Instant::now())?;
        }
        Ok(())
    }

    /// Sends an element to every consumer subtask this subtask feeds. A
    /// barrier, an end or a stop is sent at once, with everything before it.
    pub fn broadcast(&mut self, element: Element) -> Result<(), Disconnected> {
        for edge in 0..self.edges.len() {
            let consumers = self.edges[edge].targets.len() as u32;
            for t in self.edges[edge].route.broadcast_targets(self.subtask, consumers) {
                self.push(edge, t as usize, element.clone())?;
            }
        }
        match element {
            Element::Barrier { .. } | Element::End | Element::Stop => self.flush(),
            Element::Watermark { .. } => self.flush_if_lingered(Instant::now()),
            Element::Record(_) => Ok(()),
        }
    }

    fn push(&mut self, edge: usize, target: usize, element: Element) -> Result<(), Disconnected> {
        let buffer = self.buffers[edge].get_mut(target).ok_or(Disconnected)?;
        buffer.push(element);
        let full = buffer.len() >= self.batch;
        if self.oldest.is_none() {
            self.oldest = Some(Instant::now());
        }
        if full {
            self.flush_one(edge, target)?;
        }
        Ok(())
    }

    /// Sends every buffer once its oldest element has waited the linger.
    pub fn flush_if_lingered(&mut self, now: Instant) -> Result<(), Disconnected> {
        self.rows_since_clock = 0;
        match self.oldest {
            Some(oldest) if now.saturating_duration_since(oldest) >= self.linger => self.flush(),
            _ => Ok(()),
        }
    }

    /// Sends every buffered element.
    pub fn flush(&mut self) -> Result<(), Disconnected> {
        for edge in 0..self.edges.len() {
            for target in 0..self.buffers[edge].len() {
                self.flush_one(edge, target)?;
            }
        }
        self.oldest = None;
        Ok(())
    }

    /// How many elements wait in the buffers.
    pub fn buffered(&self) -> usize {
        self.buffers.iter().flatten().map(Vec::len).sum()
    }

    fn flush_one(&mut self, edge: usize, target: usize) -> Result<(), Disconnected> {
        if self.buffers[edge][target].is_empty() {
            return Ok(());
        }
        let elements = std::mem::replace(&mut self.buffers[edge][target], Vec::with_capacity(self.batch));
        let (sender, channel) = &self.edges[edge].targets[target];
        let mut frame = DataFrame { channel: *channel, elements };
        loop {
            if self.cancel.load(Ordering::Relaxed) {
                return Err(Disconnected);
            }
            match sender.send_timeout(frame, Duration::from_millis(100)) {
                Ok(()) => {
                    self.watch.waits(Wait::Working);
                    self.watch.moved();
                    return Ok(());
                }
                Err(SendTimeoutError::Timeout(back)) => {
                    self.watch.waits(Wait::OutputSpace);
                    frame = back;
                }
                Err(SendTimeoutError::Disconnected(_)) => return Err(Disconnected),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::markers::CheckpointKind;
    use crate::value::Value;
    use crossbeam_channel::{unbounded, Receiver};

    const HOUR: Duration = Duration::from_secs(3600);

    /// A gate of one hash edge (key column 0) to `consumers` subtasks.
    fn gate(consumers: usize, batch: usize, linger: Duration) -> (OutputGate, Vec<Receiver<DataFrame>>) {
        let (targets, receivers): (Vec<_>, Vec<_>) = (0..consumers)
            .map(|_| {
                let (tx, rx) = unbounded();
                ((tx, 0), rx)
            })
            .unzip();
        let edge = OutputEdge { route: Route::Hash(vec![0]), targets };
        (OutputGate::with_batching(0, vec![edge], Arc::new(AtomicBool::new(false)), batch, linger), receivers)
    }

    fn row(i: i64) -> Row {
        vec![Value::Int(i)]
    }

    /// Everything a consumer has been sent, frame by frame.
    fn sent(rx: &Receiver<DataFrame>) -> Vec<Vec<Element>> {
        rx.try_iter().map(|f| f.elements).collect()
    }

    #[test]
    fn a_full_buffer_leaves_as_one_frame_and_not_before() {
        let (mut g, rx) = gate(1, 4, HOUR);
        for i in 0..3 {
            g.emit(row(i)).unwrap();
        }
        assert!(sent(&rx[0]).is_empty(), "three of four: nothing sent yet");
        g.emit(row(3)).unwrap();
        assert_eq!(sent(&rx[0]), vec![(0..4).map(|i| Element::Record(row(i))).collect::<Vec<_>>()]);
        assert_eq!(g.buffered(), 0);
    }

    #[test]
    fn a_barrier_leaves_at_once_behind_every_row_and_watermark_before_it() {
        let (mut g, rx) = gate(2, 1000, HOUR);
        for i in 0..40 {
            g.emit(row(i)).unwrap();
        }
        g.broadcast(Element::Watermark { time: 7, idle: false }).unwrap();
        g.emit(row(40)).unwrap();
        let barrier = Element::Barrier { checkpoint: 3, kind: CheckpointKind::Periodic };
        g.broadcast(barrier.clone()).unwrap();
        // No flush was asked for: the barrier sent itself and all before it.
        let mut rows = 0;
        for (consumer, rx) in rx.iter().enumerate() {
            let stream: Vec<Element> = sent(rx).into_iter().flatten().collect();
            assert_eq!(stream.last(), Some(&barrier), "consumer {consumer}: {stream:?}");
            let expected: Vec<Element> = (0..41)
                .filter(|&i| Route::Hash(vec![0]).target(0, &row(i), 2) as usize == consumer)
                .map(|i| Element::Record(row(i)))
                .collect();
            let got: Vec<Element> = stream.iter().filter(|e| matches!(e, Element::Record(_))).cloned().collect();
            assert_eq!(got, expected, "consumer {consumer}: every row before the barrier, in order");
            let watermark = stream.iter().position(|e| matches!(e, Element::Watermark { .. }));
            let row_40 = stream.iter().position(|e| *e == Element::Record(row(40)));
            if let (Some(w), Some(r)) = (watermark, row_40) {
                assert!(w < r, "the watermark keeps its place before row 40");
            }
            rows += got.len();
        }
        assert_eq!(rows, 41);
        assert_eq!(g.buffered(), 0);
    }

    #[test]
    fn a_watermark_waits_in_its_batch_at_most_the_linger() {
        let (mut g, rx) = gate(1, 1000, Duration::from_millis(50));
        g.emit(row(1)).unwrap();
        g.broadcast(Element::Watermark { time: 7, idle: false }).unwrap();
        assert!(sent(&rx[0]).is_empty(), "within the linger the watermark rides in the batch");
        g.flush_if_lingered(Instant::now() + Duration::from_millis(60)).unwrap();
        let frames = sent(&rx[0]);
        assert_eq!(frames, vec![vec![Element::Record(row(1)), Element::Watermark { time: 7, idle: false }]]);
        // A watermark broadcast once the linger has passed sends itself.
        g.emit(row(2)).unwrap();
        std::thread::sleep(Duration::from_millis(60));
        g.broadcast(Element::Watermark { time: 8, idle: false }).unwrap();
        assert_eq!(sent(&rx[0]).len(), 1, "the lingering batch left with the watermark");
    }

    #[test]
    fn rows_alone_are_sent_once_they_linger() {
        let (mut g, rx) = gate(1, 100_000, Duration::from_millis(1));
        g.emit(row(0)).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        let every = i64::from(LINGER_CHECK_EVERY);
        for i in 1..every - 1 {
            g.emit(row(i)).unwrap();
        }
        assert!(sent(&rx[0]).is_empty(), "the clock is read once per {every} rows");
        g.emit(row(every - 1)).unwrap();
        assert_eq!(sent(&rx[0]).concat().len(), LINGER_CHECK_EVERY as usize);
    }
}
