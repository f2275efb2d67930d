//! What each subtask is doing, so that a job that stops moving is noticed.
//!
//! Every subtask owns one [`TaskWatch`]: a count it moves on as it hands on
//! inputs, and what it waits for whenever it blocks (an input from upstream,
//! a barrier's alignment, the trigger of a checkpoint it asked for, room in
//! a consumer's channel, the commit of what it prepared, more input from
//! outside the job). The subtask alone writes it, with plain relaxed stores;
//! the coordinator reads every watch once per look ([`StallWatch::look`]) and
//! declares the job stalled when nothing moved for the bound the job sets
//! while something was owed: a checkpoint in flight, a request held, or a
//! subtask waiting on the job itself rather than on the world outside.
//!
//! It never decides anything the protocol decides, and never makes a subtask
//! wait: it only watches and, past the bound, says what each one waits on.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::checkpoint::markers::CheckpointKind;

/// What a subtask is blocked on (or that it is not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Not blocked: handing an input to its operator, snapshotting, writing.
    Working,
    /// An input from upstream (a record, a watermark, a barrier, an end).
    Input,
    /// The rest of barrier `checkpoint`, delivered by some input channels.
    Alignment(u64),
    /// The trigger of the checkpoint it asked the coordinator for.
    Trigger(CheckpointKind),
    /// Room in a consumer's input channel (back-pressure).
    OutputSpace,
    /// The coordinator's commit of checkpoint `c`, which it prepared.
    Commit(u64),
    /// More input from outside the job (a source with nothing new to read).
    ExternalInput,
    /// Its thread has ended.
    Ended,
}

impl Wait {
    /// Whether this wait is on the job itself: such a wait must end by the
    /// job's own doing, so a job in which it lasts is owed progress. (A wait
    /// for input from upstream ends when upstream moves, and a wait for input
    /// from outside is the world's to end.)
    pub fn is_owed(self) -> bool {
        !matches!(self, Wait::Input | Wait::ExternalInput | Wait::Ended)
    }

    fn encode(self) -> u64 {
        let (tag, detail) = match self {
            Wait::Working => (0, 0),
            Wait::Input => (1, 0),
            Wait::Alignment(c) => (2, c),
            Wait::Trigger(kind) => (3, kind_code(kind)),
            Wait::OutputSpace => (4, 0),
            Wait::Commit(c) => (5, c),
            Wait::ExternalInput => (6, 0),
            Wait::Ended => (7, 0),
        };
        (detail << 8) | tag
    }

    fn decode(word: u64) -> Wait {
        let detail = word >> 8;
        match word & 0xff {
            1 => Wait::Input,
            2 => Wait::Alignment(detail),
            3 => Wait::Trigger(kind_of_code(detail)),
            4 => Wait::OutputSpace,
            5 => Wait::Commit(detail),
            6 => Wait::ExternalInput,
            7 => Wait::Ended,
            _ => Wait::Working,
        }
    }
}

fn kind_code(kind: CheckpointKind) -> u64 {
    match kind {
        CheckpointKind::Periodic => 0,
        CheckpointKind::Final => 1,
        CheckpointKind::Savepoint => 2,
    }
}

fn kind_of_code(code: u64) -> CheckpointKind {
    match code {
        1 => CheckpointKind::Final,
        2 => CheckpointKind::Savepoint,
        _ => CheckpointKind::Periodic,
    }
}

impl std::fmt::Display for Wait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Wait::Working => write!(f, "working (inside its operator or a snapshot, not waiting)"),
            Wait::Input => write!(f, "waits for input from upstream"),
            Wait::Alignment(c) => write!(f, "waits for barrier {c} on the rest of its input channels"),
            Wait::Trigger(kind) => {
                write!(f, "waits for the trigger of the {} checkpoint it asked for", kind.as_str())
            }
            Wait::OutputSpace => write!(f, "waits for room in a consumer's input channel"),
            Wait::Commit(c) => write!(f, "waits for the commit of checkpoint {c}, which it prepared"),
            Wait::ExternalInput => write!(f, "waits for more input from outside the job"),
            Wait::Ended => write!(f, "has ended"),
        }
    }
}

/// One subtask's watch: written by the subtask only, read by the coordinator.
#[derive(Debug, Default)]
pub struct TaskWatch {
    moved: AtomicU64,
    wait: AtomicU64,
}

impl TaskWatch {
    pub fn new() -> Arc<TaskWatch> {
        Arc::new(TaskWatch::default())
    }

    /// The subtask handed something on (an input, a batch of records).
    #[inline]
    pub fn moved(&self) {
        // One writer: a load and a store, never a locked read-modify-write.
        self.moved.store(self.moved.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
    }

    /// The subtask is about to block on `wait` (or, `Working`, is back).
    #[inline]
    pub fn waits(&self, wait: Wait) {
        self.wait.store(wait.encode(), Ordering::Relaxed);
    }

    pub fn wait(&self) -> Wait {
        Wait::decode(self.wait.load(Ordering::Relaxed))
    }

    fn count(&self) -> u64 {
        self.moved.load(Ordering::Relaxed)
    }
}

/// The coordinator's side: every watch of the deployment, and since when
/// nothing has moved.
#[derive(Debug)]
pub struct StallWatch {
    bound: Duration,
    tasks: Vec<(String, Arc<TaskWatch>)>,
    last_counts: Vec<u64>,
    /// Frames the coordinator received and checkpoints it decided: they move too.
    last_coordinator: u64,
    still_since: Instant,
}

/// What the coordinator owes the job at a look (besides what subtasks wait on).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Owed {
    /// Checkpoints triggered and not yet decided.
    pub in_flight: Vec<u64>,
    /// A source's request held at the in-flight bound.
    pub held_request: Option<CheckpointKind>,
}

/// A stall: how long nothing moved, what was owed, and each subtask's wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stall {
    pub still_for: Duration,
    pub owed: Owed,
    pub waits: Vec<(String, Wait)>,
}

impl std::fmt::Display for Stall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the job stalled: nothing moved for {} s", self.still_for.as_secs())?;
        match self.owed.in_flight.as_slice() {
            [] => write!(f, ", no checkpoint in flight")?,
            [c] => write!(f, ", checkpoint {c} in flight")?,
            [first, .., last] => write!(f, ", checkpoints {first} to {last} in flight")?,
        }
        if let Some(kind) = self.owed.held_request {
            write!(f, ", a {} request held at the in-flight bound", kind.as_str())?;
        }
        // One line: the message travels through refusals and JSON reports.
        let waits: Vec<String> = self.waits.iter().map(|(name, wait)| format!("{name} {wait}")).collect();
        write!(f, ". What each subtask waits on: {}", waits.join("; "))
    }
}

impl StallWatch {
    pub fn new(bound: Duration, tasks: Vec<(String, Arc<TaskWatch>)>) -> StallWatch {
        let last_counts = tasks.iter().map(|(_, w)| w.count()).collect();
        StallWatch { bound, tasks, last_counts, last_coordinator: 0, still_since: Instant::now() }
    }

    /// Looks at every watch: `Some` when nothing moved (no subtask's count,
    /// not `coordinator`'s, the coordinator's own count of frames and
    /// decisions) for the bound while something was owed.
    pub fn look(&mut self, coordinator: u64, owed: Owed) -> Option<Stall> {
        self.look_at(Instant::now(), coordinator, owed)
    }

    fn look_at(&mut self, now: Instant, coordinator: u64, owed: Owed) -> Option<Stall> {
        let counts: Vec<u64> = self.tasks.iter().map(|(_, w)| w.count()).collect();
        if counts != self.last_counts || coordinator != self.last_coordinator {
            self.last_counts = counts;
            self.last_coordinator = coordinator;
            self.still_since = now;
            return None;
        }
        let still_for = now.saturating_duration_since(self.still_since);
        if still_for < self.bound {
            return None;
        }
        let waits: Vec<(String, Wait)> = self.tasks.iter().map(|(name, w)| (name.clone(), w.wait())).collect();
        let owed_by_a_task = waits.iter().any(|(_, wait)| wait.is_owed());
        if owed.in_flight.is_empty() && owed.held_request.is_none() && !owed_by_a_task {
            // Every subtask waits for input, the sources for the world
            // outside: the job is idle, not stalled.
            return None;
        }
        Some(Stall { still_for, owed, waits })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch_of(tasks: &[&str]) -> (StallWatch, Vec<Arc<TaskWatch>>) {
        let watches: Vec<Arc<TaskWatch>> = tasks.iter().map(|_| TaskWatch::new()).collect();
        let named = tasks.iter().map(|t| t.to_string()).zip(watches.iter().cloned()).collect();
        (StallWatch::new(Duration::from_secs(10), named), watches)
    }

    #[test]
    fn every_wait_reads_back_as_written() {
        let w = TaskWatch::new();
        for wait in [
            Wait::Working,
            Wait::Input,
            Wait::Alignment(u64::MAX >> 8),
            Wait::Trigger(CheckpointKind::Periodic),
            Wait::Trigger(CheckpointKind::Final),
            Wait::Trigger(CheckpointKind::Savepoint),
            Wait::OutputSpace,
            Wait::Commit(17),
            Wait::ExternalInput,
            Wait::Ended,
        ] {
            w.waits(wait);
            assert_eq!(w.wait(), wait);
        }
    }

    #[test]
    fn a_source_waiting_for_its_trigger_with_nothing_moving_is_a_stall_past_the_bound() {
        let (mut stall, watches) = watch_of(&["op-1-0", "op-2-0"]);
        let t0 = Instant::now();
        watches[0].waits(Wait::Trigger(CheckpointKind::Periodic));
        watches[1].waits(Wait::Input);
        assert_eq!(stall.look_at(t0, 0, Owed::default()), None, "the first look only counts");
        assert_eq!(stall.look_at(t0 + Duration::from_secs(9), 0, Owed::default()), None, "within the bound");
        let found = stall.look_at(t0 + Duration::from_secs(10), 0, Owed::default()).expect("a stall");
        let text = found.to_string();
        assert!(text.contains("op-1-0 waits for the trigger of the periodic checkpoint it asked for"), "{text}");
        assert!(text.contains("op-2-0 waits for input from upstream"), "{text}");
    }

    #[test]
    fn movement_anywhere_restarts_the_count() {
        let (mut stall, watches) = watch_of(&["op-1-0", "op-2-0"]);
        let t0 = Instant::now();
        watches[0].waits(Wait::Trigger(CheckpointKind::Periodic));
        stall.look_at(t0, 0, Owed::default());
        watches[1].moved();
        assert_eq!(stall.look_at(t0 + Duration::from_secs(10), 0, Owed::default()), None, "a subtask moved");
        assert_eq!(stall.look_at(t0 + Duration::from_secs(19), 0, Owed::default()), None);
        assert_eq!(stall.look_at(t0 + Duration::from_secs(20), 1, Owed::default()), None, "the coordinator moved");
        assert!(stall.look_at(t0 + Duration::from_secs(30), 1, Owed::default()).is_some());
    }

    #[test]
    fn an_idle_job_is_not_stalled_however_long_it_waits_for_input() {
        let (mut stall, watches) = watch_of(&["op-1-0", "op-2-0"]);
        let t0 = Instant::now();
        watches[0].waits(Wait::ExternalInput);
        watches[1].waits(Wait::Input);
        stall.look_at(t0, 0, Owed::default());
        assert_eq!(stall.look_at(t0 + Duration::from_secs(3600), 0, Owed::default()), None);
        // The same waits with a checkpoint in flight: that checkpoint is owed.
        let owed = Owed { in_flight: vec![4, 5], held_request: None };
        let found = stall.look_at(t0 + Duration::from_secs(3600), 0, owed).expect("owed a decision");
        assert!(found.to_string().contains("checkpoints 4 to 5 in flight"), "{found}");
    }
}
