//! The coordinator's protocol as a state machine with no I/O.
//!
//! It owns the decisions of `engine/PROTOCOL.md`: which id a trigger takes,
//! when a checkpoint is complete (every participant acked, all ok), that its
//! marker is written before its commit is broadcast, that a failed checkpoint
//! discards every checkpoint above it and restarts the job within the restart
//! budget, and that a restart never numbers below an id already used. It
//! answers each input with the [`Step`]s the runtime must take, in order; the
//! runtime ([`super::coordinator`]) takes them (markers, frames, trace
//! events, fault points) and tells the core what it found on disk.
//!
//! It never touches a file, a channel or a clock, so every ordering the fault
//! matrix exercises is unit-tested here directly. An input the protocol
//! cannot receive (an ack of a checkpoint never triggered, a second ack from
//! one subtask, a task that does not exist) is a [`ProtocolError::Invariant`]
//! that fails the job by name: it is never dropped.

use std::collections::{BTreeMap, BTreeSet};

use thiserror::Error;

use crate::checkpoint::markers::CheckpointKind;

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
    /// Wait until every sink has committed the checkpoint (only under the
    /// `broadcast_before_marker` defect, its worst interleaving).
    AwaitCommits { checkpoint: u64 },
    /// Keep the snapshots of the newest completed checkpoints only.
    Prune { checkpoint: u64 },
    /// A failed checkpoint restarts nothing (only under the
    /// `no_rewind_on_failed_checkpoint` defect).
    RunOn { checkpoint: u64, reason: String },
    /// Cancel every subtask and wait for them: the job restarts.
    TearDown { checkpoint: u64, cause: String },
    /// Choose the restore point on disk, record it, deploy from it, and tell
    /// the core with [`Protocol::redeployed`].
    Redeploy,
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
    /// Test-only defect: broadcast, wait for the commits, then write the marker.
    pub broadcast_before_marker: bool,
    /// Test-only defect: a failed checkpoint restarts nothing.
    pub no_rewind_on_failed_checkpoint: bool,
}

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
    progress: Progress,
}

impl Protocol {
    pub fn new(config: ProtocolConfig) -> Protocol {
        Protocol {
            progress: Progress { job: config.job, first_checkpoint: 1, ..Progress::default() },
            config,
            next_id: 1,
            pending: BTreeMap::new(),
            finished: BTreeSet::new(),
            source_closing: false,
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

    /// Every subtask finished and nothing is in flight: the run is over.
    pub fn is_done(&self) -> bool {
        self.finished.len() == self.config.participants && self.pending.is_empty()
    }

    /// The source asks for a checkpoint (every N records, at END, for a savepoint).
    pub fn request(&mut self, kind: CheckpointKind) -> Vec<Step> {
        if kind != CheckpointKind::Periodic {
            self.source_closing = true;
        }
        vec![self.trigger(kind)]
    }

    /// The checkpoint interval elapsed: a periodic trigger, unless the source
    /// has asked for its last checkpoint.
    pub fn interval_elapsed(&mut self) -> Vec<Step> {
        if self.source_closing {
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
        match pending.failed.clone() {
            None => Ok(self.complete(checkpoint)),
            Some(reason) => self.fail(checkpoint, reason),
        }
    }

    /// Every ack is in and ok: the marker, then the broadcast.
    fn complete(&mut self, checkpoint: u64) -> Vec<Step> {
        let Some(pending) = self.pending.remove(&checkpoint) else {
            return Vec::new();
        };
        let kind = pending.kind;
        let mut steps = vec![Step::Decided { checkpoint, outcome: Outcome::Completed }];
        if self.config.broadcast_before_marker {
            steps.extend([
                Step::BroadcastCommit { checkpoint },
                Step::AwaitCommits { checkpoint },
                Step::WriteMarker { checkpoint, kind },
            ]);
        } else {
            steps.extend([Step::WriteMarker { checkpoint, kind }, Step::BroadcastCommit { checkpoint }]);
        }
        self.progress.last_completed = checkpoint;
        self.progress.completed += 1;
        if kind == CheckpointKind::Savepoint {
            self.progress.stopped_with_savepoint = true;
        }
        steps.push(Step::Prune { checkpoint });
        steps
    }

    /// A checkpoint failed: it and every checkpoint above it still in flight
    /// are decided without a marker, and the job restarts.
    fn fail(&mut self, checkpoint: u64, reason: String) -> Result<Vec<Step>, ProtocolError> {
        self.pending.remove(&checkpoint);
        let mut steps = vec![Step::Decided { checkpoint, outcome: Outcome::Failed }];
        if self.config.no_rewind_on_failed_checkpoint {
            steps.push(Step::RunOn { checkpoint, reason });
            return Ok(steps);
        }
        let above: Vec<u64> = self.pending.range(checkpoint + 1..).map(|(&c, _)| c).collect();
        for c in above {
            self.pending.remove(&c);
            steps.push(Step::Decided { checkpoint: c, outcome: Outcome::Discarded });
        }
        steps.extend(self.restart(checkpoint, format!("checkpoint {checkpoint} failed: {reason}"))?);
        Ok(steps)
    }

    /// A subtask failed (an operator error, an I/O error, a panic).
    pub fn task_failed(&mut self, task: usize, cause: String) -> Result<Vec<Step>, ProtocolError> {
        self.check_task(task, "a failure")?;
        self.restart(0, cause)
    }

    /// Restarts the job in this process, within the restart budget.
    fn restart(&mut self, checkpoint: u64, cause: String) -> Result<Vec<Step>, ProtocolError> {
        if self.progress.restarts >= self.config.restart_budget {
            return Err(ProtocolError::BudgetSpent { cause, budget: self.config.restart_budget });
        }
        self.progress.restarts += 1;
        let mut steps = vec![Step::TearDown { checkpoint, cause }];
        for (c, _) in std::mem::take(&mut self.pending) {
            steps.push(Step::Decided { checkpoint: c, outcome: Outcome::Discarded });
        }
        steps.push(Step::Redeploy);
        Ok(steps)
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
        self.next_id = next;
        self.progress.first_checkpoint = next;
        self.progress.restored_from = restore_point;
        self.progress.last_completed = self.progress.last_completed.max(restore_point);
        self.finished.clear();
        self.source_closing = false;
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
            broadcast_before_marker: false,
            no_rewind_on_failed_checkpoint: false,
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
        p.config.broadcast_before_marker = true;
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
        let err = p.task_failed(0, "boom".into()).unwrap_err();
        assert_eq!(err, ProtocolError::BudgetSpent { cause: "boom".into(), budget: 3 });
        assert_eq!(err.to_string(), "boom; the restart budget (3) is spent");
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
    fn the_no_rewind_defect_runs_on_without_a_restart() {
        let mut p = protocol(1);
        p.config.no_rewind_on_failed_checkpoint = true;
        p.request(Periodic);
        let steps = p.ack(0, 1, Err("x".into())).unwrap();
        assert_eq!(
            steps,
            [
                Step::Decided { checkpoint: 1, outcome: Outcome::Failed },
                Step::RunOn { checkpoint: 1, reason: "x".into() },
            ]
        );
        assert_eq!(p.progress().restarts, 0);
    }
}
