//! The coordinator's protocol as a state machine with no I/O.
//!
//! It owns the decisions of `engine/PROTOCOL.md`: which id a trigger takes,
//! when a checkpoint is complete (every participant acked, all ok), that its
//! marker is written before its commit is broadcast, that a failed checkpoint
//! discards every checkpoint above it and restarts the job within the restart
//! budget (with none left, the decision is recorded and the job fails), and
//! that a restart never numbers below an id already used. It answers each
//! input with the [`Step`]s the runtime must take, in order; the runtime
//! ([`super::coordinator`]) takes them (markers, frames, trace events, fault
//! points) and tells the core what it found on disk.
//!
//! It never touches a file, a channel or a clock, so every ordering the fault
//! matrix exercises is unit-tested here directly. An input the protocol
//! cannot receive (an ack of a checkpoint never triggered, a second ack from
//! one subtask, a task that does not exist) is a [`ProtocolError::Invariant`]
//! that fails the job by name: it is never dropped.
//!
//! The test-only defects of [`ProtocolDefects`] are branches marked
//! `DEFECT <name>`, compiled only in builds with the switches
//! (`crate::defects`).

use std::collections::{BTreeMap, BTreeSet};

use thiserror::Error;

use crate::checkpoint::markers::CheckpointKind;

mod confirm;
mod defects;

use confirm::Confirmations;
use defects::DefectState;
pub use defects::ProtocolDefects;

/// How the coordinator decided a checkpoint (the trace's `CoordComplete` outcome).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Completed,
    Failed,
    /// In flight when a checkpoint below it failed, or when the job restarted.
    Discarded,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Failed => "failed",
            Outcome::Discarded => "discarded",
        }
    }
}

/// One step the runtime takes, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Send `TriggerCheckpoint` to the source.
    Trigger { checkpoint: u64, kind: CheckpointKind },
    /// The checkpoint is decided.
    Decided { checkpoint: u64, outcome: Outcome },
    /// Write the checkpoint's COMPLETED marker durably.
    WriteMarker { checkpoint: u64, kind: CheckpointKind },
    /// Send `CommitCheckpoint` to every sink.
    BroadcastCommit { checkpoint: u64 },
    /// Keep the snapshots of the newest completed checkpoints only (and, for
    /// the commit-confirmed family, everything from the confirmed point up).
    Prune { checkpoint: u64 },
    /// Every commit-confirmed sink confirmed its commit of the checkpoint:
    /// make its CONFIRMED marker durable, then advance the confirmed point.
    WriteConfirmed { checkpoint: u64 },
    /// Cancel every subtask and wait for them: the job restarts.
    TearDown { checkpoint: u64, cause: String },
    /// Choose the restore point on disk, record it, deploy from it, and tell
    /// the core with [`Protocol::redeployed`].
    Redeploy,
    /// No restart budget is left: the job fails (its decisions before this
    /// step are recorded all the same).
    GiveUp { cause: String, budget: u32 },
    /// DEFECT broadcast_before_marker: wait until every sink has committed the
    /// checkpoint (its worst interleaving).
    #[cfg(any(test, feature = "defects"))]
    AwaitCommits { checkpoint: u64 },
    /// DEFECT no_rewind_on_failed_checkpoint, sail_on_without_budget: a failed
    /// checkpoint restarts nothing. `stranded`: the source's last checkpoint
    /// (final or savepoint) was among those discarded, and the source, its
    /// input ended, cuts no other: the job can never end, and fails instead.
    #[cfg(any(test, feature = "defects"))]
    RunOn { checkpoint: u64, reason: String, stranded: bool },
    /// DEFECT broadcast_during_drain: the restart begins (RestartOnError), but
    /// the subtasks are left running and their acks decided until nothing in
    /// flight can complete; then they are cancelled and the runtime takes
    /// [`Protocol::drain_ended`]'s steps.
    #[cfg(any(test, feature = "defects"))]
    TearDownDeciding { checkpoint: u64, cause: String },
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ProtocolError {
    /// A failure the restart budget cannot absorb: the job fails.
    #[error("{cause}; the restart budget ({budget}) is spent")]
    BudgetSpent { cause: String, budget: u32 },
    /// An input the protocol cannot receive: a bug, named, never dropped.
    #[error("protocol invariant broken: {0}")]
    Invariant(String),
}

/// What the core needs to know about the job and the build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolConfig {
    pub job: u64,
    /// Every subtask of the deployment (tasks are numbered from 0).
    pub participants: usize,
    /// In-process restarts a failure may take before the job fails.
    pub restart_budget: u32,
    /// Checkpoints triggered and not yet decided, at most (the
    /// specification's MaxInFlight); at least 1.
    pub max_in_flight: usize,
    /// The tasks of the commit-confirmed sinks, whose CommitConfirmed frames
    /// confirm a checkpoint (none for a job of other sinks).
    pub confirming: BTreeSet<usize>,
    /// Test-only defects (none but in test builds).
    pub defects: ProtocolDefects,
}

/// The engine's bound on checkpoints in flight. A sink that stalls cannot
/// make the coordinator hold an ever-growing set of undecided checkpoints.
pub const MAX_IN_FLIGHT: usize = 16;

#[derive(Debug)]
struct Pending {
    kind: CheckpointKind,
    acked: BTreeSet<usize>,
    failed: Option<String>,
}

/// What the run did, for its summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    pub job: u64,
    /// The checkpoint the newest deploy restored from (0: from nothing).
    pub restored_from: u64,
    /// The first id the newest deploy numbers.
    pub first_checkpoint: u64,
    pub last_completed: u64,
    pub completed: u64,
    /// The confirmed restore point in memory (commit-confirmed family; 0
    /// otherwise): never ahead of a durable CONFIRMED marker.
    pub last_confirmed: u64,
    pub restarts: u32,
    /// Ended with a savepoint (state kept) rather than at the input's END.
    pub stopped_with_savepoint: bool,
}

pub struct Protocol {
    config: ProtocolConfig,
    next_id: u64,
    pending: BTreeMap<u64, Pending>,
    finished: BTreeSet<usize>,
    /// The source asked for its last checkpoint: no more interval triggers.
    source_closing: bool,
    /// A request that came while MaxInFlight were in flight: triggered as
    /// soon as one is decided, since the source that asked waits for it and
    /// asks nothing more until it comes (a restart drops it; the redeployed
    /// source asks again). A final or savepoint request outranks a periodic
    /// one: its trigger answers the source all the same.
    deferred: Option<CheckpointKind>,
    progress: Progress,
    confirm: Confirmations,
    defect: DefectState,
}

impl Protocol {
    pub fn new(config: ProtocolConfig) -> Protocol {
        Protocol {
            progress: Progress { job: config.job, first_checkpoint: 1, ..Progress::default() },
            confirm: Confirmations::default(),
            config,
            next_id: 1,
            pending: BTreeMap::new(),
            finished: BTreeSet::new(),
            source_closing: false,
            deferred: None,
            defect: DefectState::default(),
        }
    }

    pub fn progress(&self) -> Progress {
        self.progress
    }

    /// The id the next trigger takes.
    pub fn next_id(&self) -> u64 {
        self.next_id
    }

    /// Checkpoints triggered and not yet decided.
    pub fn in_flight(&self) -> Vec<u64> {
        self.pending.keys().copied().collect()
    }

    /// Whether a task of the current deployment reported that it finished.
    pub fn has_finished(&self, task: usize) -> bool {
        self.finished.contains(&task)
    }

    /// Whether the source has asked for its last checkpoint (final or
    /// savepoint) in this deployment: nothing else is triggered then.
    pub fn is_closing(&self) -> bool {
        self.source_closing
    }

    /// Every subtask finished and nothing is in flight: the run is over.
    pub fn is_done(&self) -> bool {
        let held = self.defect.held_failure.is_some() || self.defect.held_broadcast.is_some();
        self.finished.len() == self.config.participants && self.pending.is_empty() && !held
    }

    /// The source asks for a checkpoint (every N records, at END, for a savepoint).
    pub fn request(&mut self, kind: CheckpointKind) -> Vec<Step> {
        // DEFECT broadcast_during_drain: nothing is triggered while a restart drains.
        #[cfg(any(test, feature = "defects"))]
        if self.defect.draining {
            return Vec::new();
        }
        if kind != CheckpointKind::Periodic {
            self.source_closing = true;
        }
        if self.at_bound() {
            #[cfg(any(test, feature = "defects"))]
            if self.config.defects.drop_request_at_bound && kind == CheckpointKind::Periodic {
                // DEFECT drop_request_at_bound: a periodic request past the
                // bound is dropped, and the source waits for it forever.
                return Vec::new();
            }
            self.hold(kind);
            return Vec::new();
        }
        vec![self.trigger(kind)]
    }

    /// Holds a request until a checkpoint is decided (see `deferred`).
    fn hold(&mut self, kind: CheckpointKind) {
        self.deferred = match (self.deferred, kind) {
            (Some(held), CheckpointKind::Periodic) => Some(held),
            _ => Some(kind),
        };
    }

    /// The request held at the bound, if any: what the source waits for.
    pub fn held_request(&self) -> Option<CheckpointKind> {
        self.deferred
    }

    fn at_bound(&self) -> bool {
        self.pending.len() >= self.config.max_in_flight.max(1)
    }

    /// The checkpoint interval elapsed: a periodic trigger, unless the source
    /// has asked for its last checkpoint.
    pub fn interval_elapsed(&mut self) -> Vec<Step> {
        // DEFECT broadcast_during_drain: nothing is triggered while a restart drains.
        #[cfg(any(test, feature = "defects"))]
        if self.defect.draining {
            return Vec::new();
        }
        if self.source_closing || self.at_bound() {
            return Vec::new();
        }
        vec![self.trigger(CheckpointKind::Periodic)]
    }

    fn trigger(&mut self, kind: CheckpointKind) -> Step {
        let checkpoint = self.next_id;
        self.next_id += 1;
        self.pending.insert(checkpoint, Pending { kind, acked: BTreeSet::new(), failed: None });
        Step::Trigger { checkpoint, kind }
    }

    fn check_task(&self, task: usize, what: &str) -> Result<(), ProtocolError> {
        if task >= self.config.participants {
            return Err(ProtocolError::Invariant(format!(
                "{what} from task {task}; the deployment has {} tasks",
                self.config.participants
            )));
        }
        Ok(())
    }

    /// A subtask's snapshot of `checkpoint` is durable (`Ok`) or failed
    /// (`Err`, with the reason, naming the subtask).
    pub fn ack(
        &mut self,
        task: usize,
        checkpoint: u64,
        result: Result<(), String>,
    ) -> Result<Vec<Step>, ProtocolError> {
        self.check_task(task, &format!("an ack of checkpoint {checkpoint}"))?;
        // DEFECT no_rewind_on_failed_checkpoint, sail_on_without_budget: the
        // deployment ran on past a discard, so the discarded checkpoints' acks
        // still come; they are dropped, as a restart's cancel would have.
        #[cfg(any(test, feature = "defects"))]
        if self.defect.dropped.contains(&checkpoint) {
            return Ok(Vec::new());
        }
        let participants = self.config.participants;
        let Some(pending) = self.pending.get_mut(&checkpoint) else {
            let why = if checkpoint >= self.next_id { "was never triggered" } else { "is already decided" };
            return Err(ProtocolError::Invariant(format!("task {task} acked checkpoint {checkpoint}, which {why}")));
        };
        if !pending.acked.insert(task) {
            return Err(ProtocolError::Invariant(format!("task {task} acked checkpoint {checkpoint} twice")));
        }
        if let Err(reason) = result {
            pending.failed.get_or_insert(reason);
        }
        if pending.acked.len() < participants {
            return Ok(Vec::new());
        }
        let (kind, failed) = (pending.kind, pending.failed.clone());
        #[cfg(any(test, feature = "defects"))]
        if let Some(steps) = self.defect_on_decidable(checkpoint, kind, &failed) {
            return Ok(steps);
        }
        let _ = kind;
        Ok(match failed {
            None => self.complete(checkpoint),
            Some(reason) => self.fail(checkpoint, reason),
        })
    }

    /// Every ack is in and ok: the marker, then the broadcast.
    fn complete(&mut self, checkpoint: u64) -> Vec<Step> {
        let Some(pending) = self.pending.remove(&checkpoint) else {
            return Vec::new();
        };
        let kind = pending.kind;
        let mut steps = vec![Step::Decided { checkpoint, outcome: Outcome::Completed }];
        #[cfg(any(test, feature = "defects"))]
        let defective = self.defect_complete(checkpoint, kind);
        #[cfg(not(any(test, feature = "defects")))]
        let defective: Option<Vec<Step>> = None;
        match defective {
            Some(defective) => steps.extend(defective),
            None => steps.extend([Step::WriteMarker { checkpoint, kind }, Step::BroadcastCommit { checkpoint }]),
        }
        self.progress.last_completed = checkpoint;
        self.progress.completed += 1;
        if !self.config.confirming.is_empty() {
            self.confirm.completed(checkpoint);
        }
        if kind == CheckpointKind::Savepoint {
            self.progress.stopped_with_savepoint = true;
        }
        steps.push(Step::Prune { checkpoint });
        if !self.at_bound() {
            if let Some(kind) = self.deferred.take() {
                steps.push(self.trigger(kind));
            }
        }
        steps
    }

    /// A checkpoint failed: it and every checkpoint above it still in flight
    /// are decided without a marker, and the job restarts (or, with no budget
    /// left, fails, its decisions recorded).
    fn fail(&mut self, checkpoint: u64, reason: String) -> Vec<Step> {
        self.pending.remove(&checkpoint);
        let mut steps = vec![Step::Decided { checkpoint, outcome: Outcome::Failed }];
        let above: Vec<u64> = self.pending.range(checkpoint + 1..).map(|(&c, _)| c).collect();
        let mut last_discarded = false;
        for &c in &above {
            if let Some(p) = self.pending.remove(&c) {
                last_discarded |= p.kind != CheckpointKind::Periodic;
            }
            steps.push(Step::Decided { checkpoint: c, outcome: Outcome::Discarded });
        }
        #[cfg(any(test, feature = "defects"))]
        if let Some(defective) = self.defect_after_failure(checkpoint, &reason, &above, last_discarded) {
            steps.extend(defective);
            return steps;
        }
        #[cfg(not(any(test, feature = "defects")))]
        let _ = last_discarded;
        steps.extend(self.restart(checkpoint, format!("checkpoint {checkpoint} failed: {reason}")));
        steps
    }

    /// A subtask failed (an operator error, an I/O error, a panic).
    pub fn task_failed(&mut self, task: usize, cause: String) -> Result<Vec<Step>, ProtocolError> {
        self.check_task(task, "a failure")?;
        #[cfg(any(test, feature = "defects"))]
        if let Some(steps) = self.defect_task_failed(&cause) {
            return Ok(steps);
        }
        Ok(self.restart(0, cause))
    }

    /// Restarts the job in this process, within the restart budget; with none
    /// left, gives up.
    fn restart(&mut self, checkpoint: u64, cause: String) -> Vec<Step> {
        let mut steps = Vec::new();
        // DEFECT commit_above_checkpoint: a held broadcast goes out before the
        // restart (its marker is durable; a broadcast precedes any restart).
        #[cfg(any(test, feature = "defects"))]
        if let Some(c) = self.defect.held_broadcast.take() {
            steps.push(Step::BroadcastCommit { checkpoint: c });
        }
        if self.progress.restarts >= self.config.restart_budget {
            steps.push(Step::GiveUp { cause, budget: self.config.restart_budget });
            return steps;
        }
        self.progress.restarts += 1;
        #[cfg(any(test, feature = "defects"))]
        if self.config.defects.broadcast_during_drain {
            // DEFECT broadcast_during_drain: what is in flight stays decidable.
            self.defect.draining = true;
            steps.push(Step::TearDownDeciding { checkpoint, cause });
            return steps;
        }
        steps.push(Step::TearDown { checkpoint, cause });
        steps.extend(self.discard_all());
        steps.push(Step::Redeploy);
        steps
    }

    /// Every checkpoint in flight, discarded (a restart's).
    fn discard_all(&mut self) -> Vec<Step> {
        self.deferred = None;
        std::mem::take(&mut self.pending)
            .into_keys()
            .map(|c| Step::Decided { checkpoint: c, outcome: Outcome::Discarded })
            .collect()
    }

    /// A subtask is done (its input ended; for a sink, its last checkpoint committed).
    pub fn finished(&mut self, task: usize) -> Result<(), ProtocolError> {
        self.check_task(task, "a finish")?;
        self.finished.insert(task);
        Ok(())
    }

    /// The runtime chose `restore_point` with the restore rule and found
    /// `disk_next` to be one above every id the disk knows. Returns the first id
    /// the new deployment numbers: never below an id this coordinator already
    /// used, so a checkpoint id never repeats within a job's history.
    pub fn redeployed(&mut self, restore_point: u64, disk_next: u64) -> u64 {
        let next = disk_next.max(self.next_id);
        #[cfg(any(test, feature = "defects"))]
        let next = self.defect_next(restore_point, disk_next).unwrap_or(next);
        self.next_id = next;
        self.progress.first_checkpoint = next;
        self.progress.restored_from = restore_point;
        self.progress.last_completed = self.progress.last_completed.max(restore_point);
        self.finished.clear();
        self.source_closing = false;
        self.confirm.redeployed();
        self.defect = DefectState::default();
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use CheckpointKind::{Final, Periodic, Savepoint};

    fn protocol(participants: usize) -> Protocol {
        Protocol::new(ProtocolConfig {
            job: 1,
            participants,
            restart_budget: 3,
            max_in_flight: MAX_IN_FLIGHT,
            confirming: BTreeSet::new(),
            defects: ProtocolDefects::default(),
        })
    }

    fn ack_all(p: &mut Protocol, checkpoint: u64, tasks: std::ops::Range<usize>) -> Vec<Step> {
        let mut steps = Vec::new();
        for t in tasks {
            steps.extend(p.ack(t, checkpoint, Ok(())).unwrap());
        }
        steps
    }

    #[test]
    fn no_more_than_max_in_flight_are_triggered_and_the_last_checkpoint_waits_for_a_decision() {
        let mut p = protocol(1);
        p.config.max_in_flight = 2;
        assert_eq!(p.request(Periodic).len(), 1);
        assert_eq!(p.interval_elapsed().len(), 1);
        // At the bound: an interval is skipped (the timer comes again); the
        // final request is not lost: it is triggered once 1 is decided.
        assert!(p.interval_elapsed().is_empty());
        assert_eq!(p.in_flight(), [1, 2]);
        assert!(p.request(Final).is_empty());
        let steps = p.ack(0, 1, Ok(())).unwrap();
        assert_eq!(steps.last(), Some(&Step::Trigger { checkpoint: 3, kind: Final }));
        assert_eq!(p.in_flight(), [2, 3]);
        // A restart drops a deferred request: the redeployed source asks again.
        let mut p = protocol(1);
        p.config.max_in_flight = 1;
        p.request(Periodic);
        assert!(p.request(Savepoint).is_empty());
        let steps = p.ack(0, 1, Err("disk full".into())).unwrap();
        assert!(steps.contains(&Step::Redeploy), "{steps:?}");
        assert!(!steps.iter().any(|s| matches!(s, Step::Trigger { .. })), "{steps:?}");
        assert!(p.deferred.is_none());
    }

    /// The source that asks for a checkpoint waits for its trigger and asks
    /// nothing more: a request at the bound is held, never skipped, or the
    /// job stalls once a slow sink lets MaxInFlight build up.
    #[test]
    fn a_periodic_request_at_the_bound_is_held_until_a_checkpoint_is_decided() {
        let mut p = protocol(1);
        p.config.max_in_flight = 2;
        p.request(Periodic);
        p.request(Periodic);
        assert!(p.request(Periodic).is_empty(), "at the bound nothing is triggered at once");
        assert_eq!(p.held_request(), Some(Periodic));
        let steps = p.ack(0, 1, Ok(())).unwrap();
        assert_eq!(steps.last(), Some(&Step::Trigger { checkpoint: 3, kind: Periodic }), "{steps:?}");
        assert_eq!(p.held_request(), None);
        // Two requests held at once are one trigger (it answers both), and
        // a final one outranks a periodic one whichever came first.
        assert!(p.request(Periodic).is_empty());
        assert!(p.request(Final).is_empty());
        assert!(p.request(Periodic).is_empty());
        assert_eq!(p.held_request(), Some(Final));
        let steps = p.ack(0, 2, Ok(())).unwrap();
        let triggers: Vec<_> = steps.iter().filter(|s| matches!(s, Step::Trigger { .. })).collect();
        assert_eq!(triggers, [&Step::Trigger { checkpoint: 4, kind: Final }]);
    }

    #[test]
    fn the_drop_request_at_bound_defect_drops_the_request_the_source_waits_for() {
        let mut p = protocol(1);
        p.config.max_in_flight = 1;
        p.config.defects.drop_request_at_bound = true;
        p.request(Periodic);
        assert!(p.request(Periodic).is_empty());
        assert_eq!(p.held_request(), None, "DEFECT: nothing is held");
        let steps = p.ack(0, 1, Ok(())).unwrap();
        assert!(!steps.iter().any(|s| matches!(s, Step::Trigger { .. })), "nothing answers the source: {steps:?}");
    }

    #[test]
    fn checkpoints_complete_in_id_order() {
        // Each subtask acks in id order (its barriers are FIFO): whatever the
        // interleaving across subtasks, decisions come out in id order.
        let mut p = protocol(3);
        for _ in 0..3 {
            p.request(Periodic);
        }
        let acks = [(2, 1), (2, 2), (0, 1), (2, 3), (0, 2), (0, 3), (1, 1), (1, 2), (1, 3)];
        let mut decided = Vec::new();
        for (task, checkpoint) in acks {
            for step in p.ack(task, checkpoint, Ok(())).unwrap() {
                if let Step::Decided { checkpoint, .. } = step {
                    decided.push(checkpoint);
                }
            }
        }
        assert_eq!(decided, [1, 2, 3]);
    }

    #[test]
    fn triggers_number_from_one_and_never_repeat() {
        let mut p = protocol(2);
        assert_eq!(p.request(Periodic), [Step::Trigger { checkpoint: 1, kind: Periodic }]);
        assert_eq!(p.interval_elapsed(), [Step::Trigger { checkpoint: 2, kind: Periodic }]);
        assert_eq!(p.in_flight(), [1, 2]);
    }

    #[test]
    fn a_checkpoint_completes_only_when_every_participant_acked() {
        let mut p = protocol(3);
        p.request(Periodic);
        assert!(p.ack(0, 1, Ok(())).unwrap().is_empty());
        assert!(p.ack(2, 1, Ok(())).unwrap().is_empty());
        let steps = p.ack(1, 1, Ok(())).unwrap();
        assert_eq!(steps[0], Step::Decided { checkpoint: 1, outcome: Outcome::Completed });
        assert_eq!(p.progress().last_completed, 1);
    }

    #[test]
    fn the_marker_is_written_before_the_commit_is_broadcast() {
        let mut p = protocol(1);
        p.request(Periodic);
        let steps = p.ack(0, 1, Ok(())).unwrap();
        assert_eq!(
            steps,
            [
                Step::Decided { checkpoint: 1, outcome: Outcome::Completed },
                Step::WriteMarker { checkpoint: 1, kind: Periodic },
                Step::BroadcastCommit { checkpoint: 1 },
                Step::Prune { checkpoint: 1 },
            ]
        );
    }

    #[test]
    fn the_broadcast_before_marker_defect_inverts_exactly_that_order() {
        let mut p = protocol(1);
        p.config.defects.broadcast_before_marker = true;
        p.request(Periodic);
        let steps = p.ack(0, 1, Ok(())).unwrap();
        let marker = steps.iter().position(|s| matches!(s, Step::WriteMarker { .. })).unwrap();
        let broadcast = steps.iter().position(|s| matches!(s, Step::BroadcastCommit { .. })).unwrap();
        let awaited = steps.iter().position(|s| matches!(s, Step::AwaitCommits { .. })).unwrap();
        assert!(broadcast < awaited && awaited < marker, "{steps:?}");
    }

    #[test]
    fn a_failed_checkpoint_discards_every_one_above_it_and_restarts() {
        let mut p = protocol(2);
        for _ in 0..3 {
            p.request(Periodic);
        }
        p.ack(0, 1, Ok(())).unwrap();
        let steps = p.ack(1, 1, Err("op-2-0: disk full".into())).unwrap();
        assert_eq!(
            steps,
            [
                Step::Decided { checkpoint: 1, outcome: Outcome::Failed },
                Step::Decided { checkpoint: 2, outcome: Outcome::Discarded },
                Step::Decided { checkpoint: 3, outcome: Outcome::Discarded },
                Step::TearDown { checkpoint: 1, cause: "checkpoint 1 failed: op-2-0: disk full".into() },
                Step::Redeploy,
            ]
        );
        assert!(p.in_flight().is_empty());
        assert!(!steps.iter().any(|s| matches!(s, Step::WriteMarker { .. })), "no marker for a failed checkpoint");
        assert_eq!(p.progress().restarts, 1);
    }

    #[test]
    fn a_checkpoint_above_a_failed_one_never_completes() {
        let mut p = protocol(1);
        p.request(Periodic);
        p.request(Periodic);
        p.ack(0, 1, Err("x".into())).unwrap();
        // Checkpoint 2 was discarded with the failure: its late ack is a bug.
        let err = p.ack(0, 2, Ok(())).unwrap_err();
        assert!(matches!(err, ProtocolError::Invariant(ref m) if m.contains("already decided")), "{err}");
    }

    #[test]
    fn the_first_failure_reason_is_kept() {
        let mut p = protocol(2);
        p.request(Periodic);
        p.ack(0, 1, Err("first".into())).unwrap();
        let steps = p.ack(1, 1, Err("second".into())).unwrap();
        assert!(steps.contains(&Step::TearDown { checkpoint: 1, cause: "checkpoint 1 failed: first".into() }));
    }

    #[test]
    fn a_failed_subtask_restarts_with_checkpoint_zero_and_discards_what_is_in_flight() {
        let mut p = protocol(2);
        p.request(Periodic);
        let steps = p.task_failed(1, "op-3-1 failed: boom".into()).unwrap();
        assert_eq!(
            steps,
            [
                Step::TearDown { checkpoint: 0, cause: "op-3-1 failed: boom".into() },
                Step::Decided { checkpoint: 1, outcome: Outcome::Discarded },
                Step::Redeploy,
            ]
        );
    }

    #[test]
    fn the_restart_budget_is_finite() {
        let mut p = protocol(1);
        for _ in 0..3 {
            p.task_failed(0, "boom".into()).unwrap();
        }
        let steps = p.task_failed(0, "boom".into()).unwrap();
        assert_eq!(steps, [Step::GiveUp { cause: "boom".into(), budget: 3 }]);
        let err = ProtocolError::BudgetSpent { cause: "boom".into(), budget: 3 };
        assert_eq!(err.to_string(), "boom; the restart budget (3) is spent");
    }

    #[test]
    fn with_no_budget_left_a_failed_checkpoint_is_decided_and_recorded_before_the_job_fails() {
        let mut p = protocol(1);
        p.config.restart_budget = 0;
        p.request(Periodic);
        p.request(Periodic);
        let steps = p.ack(0, 1, Err("x".into())).unwrap();
        assert_eq!(
            steps,
            [
                Step::Decided { checkpoint: 1, outcome: Outcome::Failed },
                Step::Decided { checkpoint: 2, outcome: Outcome::Discarded },
                Step::GiveUp { cause: "checkpoint 1 failed: x".into(), budget: 0 },
            ]
        );
    }

    #[test]
    fn a_restart_never_numbers_below_an_id_already_triggered() {
        let mut p = protocol(1);
        p.request(Periodic); // 1
        p.request(Periodic); // 2: triggered, never reached the disk
        p.task_failed(0, "boom".into()).unwrap();
        // The disk knows only checkpoint 1's snapshots: it would say 2.
        assert_eq!(p.redeployed(1, 2), 3);
        assert_eq!(p.request(Periodic), [Step::Trigger { checkpoint: 3, kind: Periodic }]);
        // A disk that knows more wins.
        assert_eq!(p.redeployed(1, 9), 9);
        assert_eq!(p.progress().first_checkpoint, 9);
        assert_eq!(p.progress().restored_from, 1);
    }

    #[test]
    fn the_run_is_done_when_every_task_finished_and_nothing_is_in_flight() {
        let mut p = protocol(2);
        p.request(Final);
        p.finished(0).unwrap();
        p.finished(1).unwrap();
        assert!(!p.is_done(), "checkpoint 1 is in flight");
        ack_all(&mut p, 1, 0..2);
        assert!(p.is_done());
        // A redeploy starts the count again.
        p.redeployed(1, 2);
        assert!(!p.is_done());
    }

    #[test]
    fn after_the_last_request_no_interval_trigger_follows() {
        let mut p = protocol(1);
        p.request(Savepoint);
        assert!(p.interval_elapsed().is_empty());
        let steps = ack_all(&mut p, 1, 0..1);
        assert!(steps.contains(&Step::WriteMarker { checkpoint: 1, kind: Savepoint }));
        assert!(p.progress().stopped_with_savepoint);
    }

    #[test]
    fn impossible_inputs_are_named_invariant_violations() {
        let mut p = protocol(2);
        p.request(Periodic);
        let never = p.ack(0, 7, Ok(())).unwrap_err();
        assert!(never.to_string().contains("checkpoint 7, which was never triggered"), "{never}");
        p.ack(0, 1, Ok(())).unwrap();
        let twice = p.ack(0, 1, Ok(())).unwrap_err();
        assert!(twice.to_string().contains("twice"), "{twice}");
        let unknown = p.ack(5, 1, Ok(())).unwrap_err();
        assert!(unknown.to_string().contains("task 5"), "{unknown}");
        assert!(p.finished(2).is_err());
        assert!(p.task_failed(9, "x".into()).is_err());
    }

    #[test]
    fn the_no_rewind_defect_discards_what_is_above_then_runs_on_without_a_restart() {
        let mut p = protocol(1);
        p.config.defects.no_rewind_on_failed_checkpoint = true;
        p.request(Periodic);
        p.request(Periodic);
        let steps = p.ack(0, 1, Err("x".into())).unwrap();
        assert_eq!(
            steps,
            [
                Step::Decided { checkpoint: 1, outcome: Outcome::Failed },
                Step::Decided { checkpoint: 2, outcome: Outcome::Discarded },
                Step::RunOn { checkpoint: 1, reason: "x".into(), stranded: false },
            ]
        );
        assert_eq!(p.progress().restarts, 0);
        // The deployment runs on: the discarded checkpoint's ack is dropped,
        // and the next one completes.
        assert!(p.ack(0, 2, Ok(())).unwrap().is_empty());
        assert_eq!(p.request(Periodic), [Step::Trigger { checkpoint: 3, kind: Periodic }]);
        assert!(p.ack(0, 3, Ok(())).unwrap().contains(&Step::WriteMarker { checkpoint: 3, kind: Periodic }));
        // The source's final checkpoint discarded: nothing can end the job.
        p.request(Final);
        let steps = p.ack(0, 4, Err("y".into())).unwrap();
        assert!(steps.contains(&Step::RunOn { checkpoint: 4, reason: "y".into(), stranded: false }), "{steps:?}");
        let mut q = protocol(1);
        q.config.defects.no_rewind_on_failed_checkpoint = true;
        q.request(Periodic);
        q.request(Final);
        let steps = q.ack(0, 1, Err("x".into())).unwrap();
        assert!(steps.contains(&Step::RunOn { checkpoint: 1, reason: "x".into(), stranded: true }), "{steps:?}");
    }

    #[test]
    fn the_complete_above_failed_defect_completes_the_checkpoint_above_before_the_restart() {
        let run = |defect: bool| {
            let mut p = protocol(2);
            p.config.defects.complete_above_failed = defect;
            p.request(Periodic);
            p.request(Periodic);
            let mut steps = ack_all(&mut p, 1, 0..1);
            steps.extend(p.ack(1, 1, Err("x".into())).unwrap());
            for t in 0..2 {
                if p.in_flight().contains(&2) {
                    steps.extend(p.ack(t, 2, Ok(())).unwrap());
                }
            }
            steps
        };
        let teardown = Step::TearDown { checkpoint: 1, cause: "checkpoint 1 failed: x".into() };
        assert_eq!(
            run(false),
            [
                Step::Decided { checkpoint: 1, outcome: Outcome::Failed },
                Step::Decided { checkpoint: 2, outcome: Outcome::Discarded },
                teardown.clone(),
                Step::Redeploy,
            ]
        );
        // The failed decision waits for 2's acks, then 2 completes: marked and
        // broadcast above a failed checkpoint.
        assert_eq!(
            run(true),
            [
                Step::Decided { checkpoint: 1, outcome: Outcome::Failed },
                Step::Decided { checkpoint: 2, outcome: Outcome::Completed },
                Step::WriteMarker { checkpoint: 2, kind: Periodic },
                Step::BroadcastCommit { checkpoint: 2 },
                Step::Prune { checkpoint: 2 },
                teardown,
                Step::Redeploy,
            ]
        );
    }

    #[test]
    fn the_commit_above_checkpoint_interleaving_holds_a_broadcast_until_the_next_checkpoint_is_acked() {
        let mut p = protocol(1);
        p.config.defects.commit_above_checkpoint = true;
        p.request(Periodic);
        p.request(Periodic);
        let first = p.ack(0, 1, Ok(())).unwrap();
        assert!(first.contains(&Step::WriteMarker { checkpoint: 1, kind: Periodic }));
        assert!(!first.iter().any(|s| matches!(s, Step::BroadcastCommit { .. })), "{first:?}");
        assert!(!p.is_done());
        // 2 fails: 1's broadcast goes out first (its marker is durable) and
        // its commits are awaited, then the restart.
        let steps = p.ack(0, 2, Err("x".into())).unwrap();
        assert_eq!(steps[0], Step::BroadcastCommit { checkpoint: 1 });
        assert_eq!(steps[1], Step::AwaitCommits { checkpoint: 1 });
        assert_eq!(steps[2], Step::Decided { checkpoint: 2, outcome: Outcome::Failed });
        assert!(steps.contains(&Step::Redeploy));
        // A final checkpoint is broadcast at once.
        p.redeployed(1, 3);
        p.request(Final);
        assert!(p.ack(0, 3, Ok(())).unwrap().contains(&Step::BroadcastCommit { checkpoint: 3 }));
    }

    #[test]
    fn the_sail_on_defect_forgets_a_failure_only_once_the_budget_is_spent() {
        let mut p = protocol(1);
        p.config.restart_budget = 0;
        p.config.defects.sail_on_without_budget = true;
        p.request(Periodic);
        p.request(Periodic);
        let steps = p.ack(0, 1, Err("x".into())).unwrap();
        assert_eq!(
            steps,
            [
                Step::Decided { checkpoint: 1, outcome: Outcome::Failed },
                Step::Decided { checkpoint: 2, outcome: Outcome::Discarded },
                Step::RunOn { checkpoint: 1, reason: "x".into(), stranded: false },
            ]
        );
        // A subtask's error is not a failed checkpoint: the job still fails.
        assert_eq!(p.task_failed(0, "boom".into()).unwrap(), [Step::GiveUp { cause: "boom".into(), budget: 0 }]);
        // With budget, the defect changes nothing.
        let mut q = protocol(1);
        q.config.defects.sail_on_without_budget = true;
        q.request(Periodic);
        assert!(q.ack(0, 1, Err("x".into())).unwrap().contains(&Step::Redeploy));
    }

    #[test]
    fn the_broadcast_during_drain_defect_decides_what_is_in_flight_until_the_drain_ends() {
        let mut p = protocol(2);
        p.config.defects.broadcast_during_drain = true;
        p.request(Periodic);
        let steps = p.task_failed(1, "boom".into()).unwrap();
        assert_eq!(steps, [Step::TearDownDeciding { checkpoint: 0, cause: "boom".into() }]);
        assert!(p.request(Periodic).is_empty(), "nothing is triggered during the drain");
        assert!(p.task_failed(0, "again".into()).unwrap().is_empty(), "one restart at a time");
        let decided = ack_all(&mut p, 1, 0..2);
        assert!(decided.contains(&Step::BroadcastCommit { checkpoint: 1 }), "{decided:?}");
        assert_eq!(p.drain_ended(), [Step::Redeploy]);
        assert_eq!(p.redeployed(1, 2), 2);
        // Without the defect the restart discards what is in flight at once.
        let mut q = protocol(2);
        q.request(Periodic);
        assert_eq!(
            q.task_failed(1, "boom".into()).unwrap(),
            [
                Step::TearDown { checkpoint: 0, cause: "boom".into() },
                Step::Decided { checkpoint: 1, outcome: Outcome::Discarded },
                Step::Redeploy,
            ]
        );
    }

    #[test]
    fn the_numbering_defects_reuse_ids() {
        let mut p = protocol(1);
        p.request(Periodic); // 1
        p.request(Periodic); // 2, never on disk
        p.task_failed(0, "boom".into()).unwrap();
        let mut from_disk = protocol(1);
        from_disk.config.defects.restart_numbers_from_disk = true;
        from_disk.request(Periodic);
        from_disk.request(Periodic);
        from_disk.task_failed(0, "boom".into()).unwrap();
        assert_eq!(p.redeployed(1, 2), 3);
        assert_eq!(from_disk.redeployed(1, 2), 2, "2 was triggered before the restart");
        let mut reuse = protocol(1);
        reuse.config.defects.id_reuse = true;
        assert_eq!(reuse.redeployed(1, 5), 2, "from the restore point");
    }
}
