//! The coordinator: the runtime around the protocol core. It deploys the job,
//! feeds the core the frames its subtasks send, and takes the steps the core
//! answers with: trigger frames, durable COMPLETED markers (before any commit
//! is broadcast), commit broadcasts, pruning, and restarts. On a recovery or a
//! restart it chooses the restore point with the restore rule, writes the
//! RESTORED record, and redeploys.
//!
//! Every protocol decision is [`Protocol`]'s; this module only does the I/O,
//! at the fault points and trace events `engine/PROTOCOL.md` places. It never
//! waits on its subtasks without a bound: a subtask whose thread ended
//! without a word fails the job by name.
//!
//! It also answers requests from outside the process ([`super::requests`]):
//! a savepoint is a checkpoint triggered like any other, whose marker says
//! `savepoint` and whose snapshots this run never prunes; a stop raises the
//! run's stop signal. Before anything is written, every restore (from the
//! directory's own history or from a dataset) is mapped onto the job
//! ([`crate::state_map`]): state the job would leave behind refuses
//! the run unless dropping it was asked for.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crossbeam_channel::RecvTimeoutError;

use crate::checkpoint::dataset::{self, Dataset};
use crate::checkpoint::fence::{self, Fence, FenceError};
use crate::checkpoint::graph::{write_graph, GraphRef};
use crate::checkpoint::lineage::read_lineage;
use crate::checkpoint::markers::{list_completed, write_completed, CheckpointKind, CompletedMarker};
use crate::checkpoint::{CheckpointLayout, ChosenBy, FileStateBackend};
use crate::fault::{kill_point, FaultPoint};
use crate::operators::{LineageCheck, OperatorKind};
use crate::trace_event;

mod answers;
mod restore;
mod walk;

use answers::{RequestBook, REQUEST_LOOK};
use restore::{ignores_restores, preflight_restore};

use super::deploy::{self, Deployment, Participant};
use super::frames::{ToCoordinator, ToTask};
use super::protocol::{Outcome, Protocol, ProtocolConfig, ProtocolDefects, ProtocolError, Step, MAX_IN_FLIGHT};
use super::requests::{self, RequestResult};
use super::watch::Owed;
use super::{RunError, RunOptions, RunSummary, TriggerMode};
use crate::capture::recorder::prune_finished;
use crate::capture::CompletedCheckpoint;

/// How long the coordinator waits for a frame before it looks at its subtasks' threads.
const LIVENESS_CHECK: Duration = Duration::from_secs(1);

/// DEFECT broadcast_during_drain: how long a deciding drain waits for a frame
/// before it takes what is still in flight as unable to complete.
#[cfg(any(test, feature = "defects"))]
const DRAIN_QUIET: Duration = Duration::from_millis(500);

pub struct Coordinator {
    options: RunOptions,
    layout: CheckpointLayout,
    backend: FileStateBackend,
    participants: Vec<Participant>,
    sinks: Vec<usize>,
    protocol: Protocol,
    deployment: Option<Deployment>,
    /// Frames set aside while the coordinator waited for commits (a defect's path).
    deferred: VecDeque<ToCoordinator>,
    last_progress: Option<Instant>,
    /// The job graph the markers name.
    graph: Option<GraphRef>,
    /// This run's hold on the job's directory, taken before anything of the
    /// job is read; its epoch is stamped on the coordinator's trace lines.
    fence: Option<Fence>,
    /// The dataset this run restores from (`--restore-from-dir`), verified.
    dataset: Option<Dataset>,
    /// Requests from outside the process and what became of them.
    requests: RequestBook,
    /// The newest checkpoint whose marker is durable, which the recorders'
    /// retention counts back from.
    completed: CompletedCheckpoint,
    /// Frames taken from the subtasks: the coordinator's own movement, for
    /// the stall watch.
    frames_taken: u64,
}

impl From<ProtocolError> for RunError {
    fn from(e: ProtocolError) -> Self {
        RunError::Failed(e.to_string())
    }
}

impl Coordinator {
    /// Checks the job, its input and what it restores from: nothing is
    /// written before the checks pass.
    pub fn start(mut options: RunOptions) -> Result<Coordinator, RunError> {
        let layout =
            CheckpointLayout::new(&options.checkpoint_dir, options.job.job_id).with_state(options.state.clone());
        options.env.lineage = LineageCheck {
            on_disk: read_lineage(&layout).map_err(|e| RunError::Refused(e.to_string()))?,
            accept_others: options.allow_other_lineage || options.restore_from.is_some(),
        };
        for op in &options.job.operators {
            op.preflight(&options.env).map_err(|e| RunError::Refused(e.to_string()))?;
        }
        let dataset = preflight_restore(&options, &layout)?;
        let backend = FileStateBackend::new(layout.clone());
        let participants = deploy::participants(&options);
        let sinks =
            participants.iter().enumerate().filter(|(_, p)| p.kind == OperatorKind::Sink).map(|(i, _)| i).collect();
        let confirming = participants
            .iter()
            .enumerate()
            .filter(|(_, p)| options.job.operators[p.operator].spec.descriptor.confirmation.is_some())
            .map(|(i, _)| i)
            .collect();
        let protocol = Protocol::new(ProtocolConfig {
            job: options.job.job_id,
            participants: participants.len(),
            restart_budget: options.restart_budget,
            max_in_flight: MAX_IN_FLIGHT,
            confirming,
            defects: ProtocolDefects::of(&options.env.defects),
        });
        Ok(Coordinator {
            options,
            layout,
            backend,
            participants,
            sinks,
            protocol,
            deployment: None,
            deferred: VecDeque::new(),
            last_progress: None,
            graph: None,
            fence: None,
            dataset,
            requests: RequestBook::default(),
            completed: CompletedCheckpoint::default(),
            frames_taken: 0,
        })
    }

    /// Recovers or starts fresh, then coordinates until every subtask finished.
    pub fn run(mut self) -> Result<RunSummary, RunError> {
        // Looked at before the fence creates the job's directory, which then
        // exists from the start: a run killed before its first checkpoint is
        // resumed as a recovery.
        let history = self.has_history();
        let fence = fence::acquire(&self.layout).map_err(|e| match e {
            FenceError::Owned { .. } => RunError::Refused(e.to_string()),
            other => RunError::Failed(other.to_string()),
        })?;
        self.options.env.run = Some(fence.identity());
        if let Some((ha_dir, manifest)) = &self.options.job_manifest {
            let manifest = manifest.clone().published_by(fence.identity());
            crate::job_manifest::publish(ha_dir, &manifest, self.layout.job())
                .map_err(|e| RunError::Refused(format!("--ha-dir {}: {e}", ha_dir.display())))?;
        }
        self.fence = Some(fence);
        self.graph = Some(self.record_graph()?);
        let mut history = history;
        if let Some(dataset) = &self.dataset {
            // The dataset's checkpoint becomes this directory's restore point:
            // a run killed before its first checkpoint resumes from it too.
            if !ignores_restores() {
                dataset::import(dataset, &self.layout)
                    .map_err(|e| RunError::Failed(format!("--restore-from-dir: importing the checkpoint: {e}")))?;
                if self.protocol.confirms() {
                    // The run that took it committed its sinks' transactions:
                    // it is this run's confirmed point, and its floor.
                    self.put_confirmed(dataset.index.checkpoint, "import")?;
                }
                history = true;
            }
        }
        self.options.env.imported_checkpoint = dataset::imported_checkpoint(&self.layout);
        // DEFECT ignore_restore (feature defect-ignore-restore): a restore is
        // accepted and ignored; the job starts from nothing.
        if history && !ignores_restores() {
            self.recover()?;
        } else {
            self.deployment = Some(deploy::deploy(
                &self.options,
                &self.participants,
                &self.backend,
                0,
                None,
                self.epoch(),
                &self.completed,
            )?);
        }
        let result = self.coordinate();
        if let Some(deployment) = self.deployment.take() {
            deployment.shut_down();
        }
        if result.is_ok() {
            self.prune_captures();
        }
        let outcome = match &result {
            Ok(()) if self.protocol.progress().stopped_with_savepoint => "savepoint",
            Ok(()) => "finished",
            Err(RunError::Stalled(_)) => "stalled",
            Err(_) => "failed",
        };
        trace_event!(JobEnds, job = self.layout.job(), outcome = outcome, epoch = self.epoch());
        self.answer_at_end(outcome);
        result?;
        Ok(self.protocol.progress())
    }

    /// A run that ended well keeps the captures its checkpoints do: its
    /// subtasks closed their last epochs before its last markers. (A run
    /// that failed keeps all it has: the evidence of what went wrong.)
    fn prune_captures(&self) {
        let Some(capture) = &self.options.capture else {
            return;
        };
        for p in self.participants.iter().filter(|p| p.kind != OperatorKind::Source) {
            let op = self.options.job.operators[p.operator].spec.id;
            let dir = crate::capture::subtask_dir(&capture.dir, op, p.subtask);
            if let Err(e) = prune_finished(&dir, self.completed.newest(), capture.retain_epochs) {
                eprintln!("clink: {}: pruning its captures: {e}", dir.display());
            }
        }
    }

    /// This run's fencing epoch (0 only before the fence is taken).
    fn epoch(&self) -> u64 {
        self.fence.as_ref().map_or(0, |f| f.epoch)
    }

    /// Writes the job graph beside the markers, which will name it.
    fn record_graph(&self) -> Result<GraphRef, RunError> {
        // Redacted like every copy of a graph that leaves the process.
        let mut document = self.options.job.to_document();
        clink_basics::redact::redact(&mut document);
        let document =
            serde_json::to_vec_pretty(&document).map_err(|e| RunError::Failed(format!("the job graph: {e}")))?;
        write_graph(&self.layout, &document).map_err(|e| RunError::Failed(format!("recording the job graph: {e}")))
    }

    /// The coordinator's loop: until every subtask finished and nothing is in flight.
    fn coordinate(&mut self) -> Result<(), RunError> {
        let interval = match self.options.trigger {
            TriggerMode::IntervalMs(ms) => Some(Duration::from_millis(ms.get())),
            _ => None,
        };
        let mut next_interval = interval.map(|i| Instant::now() + i);
        while !self.protocol.is_done() {
            self.look_at_requests()?;
            if let Some(frame) = self.deferred.pop_front() {
                self.on_frame(frame)?;
                continue;
            }
            let until_interval = next_interval.map(|t| t.saturating_duration_since(Instant::now()));
            let wait = until_interval.map_or(LIVENESS_CHECK, |t| t.min(LIVENESS_CHECK)).min(REQUEST_LOOK);
            match self.receive(wait)? {
                Some(frame) => {
                    self.frames_taken += 1;
                    self.on_frame(frame)?
                }
                None => {
                    self.look_for_a_stall()?;
                    if let (Some(i), Some(due)) = (interval, next_interval) {
                        if Instant::now() >= due {
                            let steps = self.protocol.interval_elapsed();
                            self.take(steps)?;
                            next_interval = Some(Instant::now() + i);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Fails the job, saying what each subtask waits on, when nothing has
    /// moved for the job's stall bound while something is owed.
    fn look_for_a_stall(&mut self) -> Result<(), RunError> {
        let owed = Owed { in_flight: self.protocol.in_flight(), held_request: self.protocol.held_request() };
        let frames = self.frames_taken;
        let Some(stall) = self.deployment.as_mut().and_then(|d| d.stall.look(frames, owed)) else {
            return Ok(());
        };
        Err(RunError::Stalled(stall.to_string()))
    }

    /// The next frame from the subtasks, or `None` when `wait` passed. A
    /// subtask whose thread ended without a `Finished` or `Failed` frame
    /// fails the job: nothing else would ever wake the coordinator.
    fn receive(&mut self, wait: Duration) -> Result<Option<ToCoordinator>, RunError> {
        let Some(deployment) = &self.deployment else {
            return Err(RunError::Failed("protocol invariant broken: coordinating without a deployment".into()));
        };
        match deployment.from_tasks.recv_timeout(wait) {
            Ok(frame) => Ok(Some(frame)),
            Err(RecvTimeoutError::Timeout) => {
                let silent: Vec<&str> = deployment
                    .ended()
                    .into_iter()
                    .filter(|name| !self.protocol.has_finished(self.task_of(name)))
                    .collect();
                if !silent.is_empty() {
                    // A thread may end right after its last frame: read what is left first.
                    if let Ok(frame) = deployment.from_tasks.try_recv() {
                        return Ok(Some(frame));
                    }
                    return Err(RunError::Failed(format!(
                        "subtasks {} stopped without reporting how; the coordinator cannot go on",
                        silent.join(", ")
                    )));
                }
                Ok(None)
            }
            Err(RecvTimeoutError::Disconnected) => Err(RunError::Failed("every subtask went away".into())),
        }
    }

    fn task_of(&self, name: &str) -> usize {
        self.participants.iter().position(|p| p.name == name).unwrap_or(usize::MAX)
    }

    fn name_of(&self, task: usize) -> String {
        self.participants.get(task).map_or_else(|| format!("task {task}"), |p| p.name.clone())
    }

    fn on_frame(&mut self, frame: ToCoordinator) -> Result<(), RunError> {
        let steps = match frame {
            ToCoordinator::RequestCheckpoint { kind } => self.protocol.request(kind),
            ToCoordinator::Ack { task, checkpoint, ok, error } => {
                let result =
                    if ok { Ok(()) } else { Err(format!("{}: {}", self.name_of(task), error.unwrap_or_default())) };
                self.protocol.ack(task, checkpoint, result)?
            }
            // A commit-confirmed sink's Committed is its CommitConfirmed.
            ToCoordinator::Committed { task, checkpoint } if self.protocol.confirms() => {
                self.protocol.confirmed(task, checkpoint)?
            }
            ToCoordinator::Committed { .. } => Vec::new(),
            ToCoordinator::Finished { task } => {
                self.protocol.finished(task)?;
                Vec::new()
            }
            ToCoordinator::Failed { task, error } => {
                let cause = format!("{} failed: {error}", self.name_of(task));
                self.protocol.task_failed(task, cause)?
            }
        };
        self.take(steps)
    }

    /// Takes the protocol's steps in order.
    fn take(&mut self, steps: Vec<Step>) -> Result<(), RunError> {
        let job = self.layout.job();
        let epoch = self.epoch();
        for step in steps {
            match step {
                Step::Trigger { checkpoint, kind } => {
                    trace_event!(Trigger, job = job, ckpt = checkpoint, epoch = epoch, kind = kind.as_str());
                    self.send(0, ToTask::TriggerCheckpoint { checkpoint, kind });
                }
                Step::Decided { checkpoint, outcome } => {
                    trace_event!(
                        CoordComplete,
                        job = job,
                        ckpt = checkpoint,
                        outcome = outcome.as_str(),
                        epoch = epoch
                    );
                    if outcome != Outcome::Completed {
                        if let Some(request) = self.requests.savepoints.remove(&checkpoint) {
                            let reason = format!("checkpoint {checkpoint} was {}", outcome.as_str());
                            self.answer(RequestResult::new(
                                &request,
                                requests::Outcome::Failed,
                                Some(checkpoint),
                                reason,
                            ));
                        }
                    }
                }
                Step::WriteMarker { checkpoint, kind } => {
                    let requested = self.requests.savepoints.remove(&checkpoint);
                    let kind = if requested.is_some() { CheckpointKind::Savepoint } else { kind };
                    self.write_marker(checkpoint, kind)?;
                    if let Some(request) = requested {
                        self.requests.kept.insert(checkpoint);
                        let reason = format!("savepoint {checkpoint} completed: its marker is durable");
                        self.answer(RequestResult::new(
                            &request,
                            requests::Outcome::Completed,
                            Some(checkpoint),
                            reason,
                        ));
                    }
                }
                Step::BroadcastCommit { checkpoint } => {
                    kill_point(FaultPoint::CoordinatorBeforeCommitBroadcast, checkpoint);
                    trace_event!(Broadcast, job = job, ckpt = checkpoint, withheld = false, epoch = epoch);
                    for &sink in &self.sinks {
                        self.send(sink, ToTask::CommitCheckpoint { checkpoint });
                    }
                }
                Step::Prune { checkpoint } => {
                    self.prune(checkpoint)?;
                    self.report_progress(checkpoint);
                }
                Step::TearDown { checkpoint, cause } => {
                    // The cause is free text no trace module could constrain:
                    // it goes to standard error only.
                    trace_event!(RestartOnError, job = job, ckpt = checkpoint);
                    eprintln!("clink: job {job}: restarting ({cause})");
                    if let Some(deployment) = self.deployment.take() {
                        deployment.shut_down();
                    }
                    self.deferred.clear();
                }
                Step::WriteConfirmed { checkpoint } => self.write_confirmed_marker(checkpoint)?,
                Step::Redeploy if self.protocol.confirms() => self.resolve_then_redeploy(ChosenBy::Restart)?,
                Step::Redeploy => {
                    let point = self.restore_point(ChosenBy::Restart)?;
                    self.redeploy(point)?;
                }
                Step::GiveUp { cause, budget } => {
                    return Err(RunError::Failed(ProtocolError::BudgetSpent { cause, budget }.to_string()));
                }
                #[cfg(any(test, feature = "defects"))]
                Step::AwaitCommits { checkpoint } => self.await_commits(checkpoint)?,
                #[cfg(any(test, feature = "defects"))]
                Step::RunOn { checkpoint, reason, stranded } => {
                    eprintln!(
                        "clink: job {job}: checkpoint {checkpoint} failed ({reason}); DEFECT: running on without a rewind"
                    );
                    if stranded {
                        return Err(RunError::Failed(format!(
                            "DEFECT: checkpoint {checkpoint} failed and the source's last checkpoint was discarded without a rewind: the job can never end"
                        )));
                    }
                }
                #[cfg(any(test, feature = "defects"))]
                Step::TearDownDeciding { checkpoint, cause } => self.tear_down_deciding(checkpoint, cause)?,
            }
        }
        Ok(())
    }

    /// DEFECT broadcast_during_drain: the restart begins, but its subtasks run
    /// on and their acks are decided (marked, broadcast) until nothing in
    /// flight is left or no frame comes for a while; only then are they
    /// cancelled, and the restore point is chosen after that.
    #[cfg(any(test, feature = "defects"))]
    fn tear_down_deciding(&mut self, checkpoint: u64, cause: String) -> Result<(), RunError> {
        let job = self.layout.job();
        trace_event!(RestartOnError, job = job, ckpt = checkpoint);
        eprintln!("clink: job {job}: restarting ({cause}); DEFECT: deciding what is in flight during the drain");
        let mut last_frame = Instant::now();
        while !self.protocol.in_flight().is_empty() && last_frame.elapsed() < DRAIN_QUIET {
            let Some(deployment) = &self.deployment else {
                break;
            };
            let Ok(frame) = deployment.from_tasks.recv_timeout(Duration::from_millis(50)) else {
                continue;
            };
            last_frame = Instant::now();
            // Requests trigger nothing during a drain; finishes, commits and
            // failures change nothing now.
            if matches!(frame, ToCoordinator::Ack { .. }) {
                self.on_frame(frame)?;
            }
        }
        if let Some(deployment) = self.deployment.take() {
            deployment.shut_down();
        }
        self.deferred.clear();
        let steps = self.protocol.drain_ended();
        self.take(steps)
    }

    fn send(&self, task: usize, frame: ToTask) {
        if let Some(d) = &self.deployment {
            d.send(task, frame);
        }
    }

    fn write_marker(&mut self, checkpoint: u64, kind: CheckpointKind) -> Result<(), RunError> {
        kill_point(FaultPoint::CoordinatorBeforeCompletedMarker, checkpoint);
        let participants = self.participants.iter().map(|p| p.name.clone()).collect();
        let marker = CompletedMarker::new(
            self.layout.job(),
            checkpoint,
            self.backend.generation(),
            kind,
            participants,
            self.graph.clone(),
        )
        .with_state(self.layout.state());
        write_completed(&self.layout, &marker).map_err(|e| RunError::Failed(e.to_string()))?;
        self.completed.completed(checkpoint);
        trace_event!(WriteCompleted, job = self.layout.job(), ckpt = checkpoint, epoch = self.epoch());
        kill_point(FaultPoint::CoordinatorAfterCompletedMarker, checkpoint);
        Ok(())
    }

    /// DEFECT broadcast_before_marker: waits until every sink has committed,
    /// the worst interleaving of a broadcast before the marker.
    #[cfg(any(test, feature = "defects"))]
    fn await_commits(&mut self, checkpoint: u64) -> Result<(), RunError> {
        let mut committed = std::collections::BTreeSet::new();
        while committed.len() < self.sinks.len() {
            match self.receive(LIVENESS_CHECK)? {
                Some(ToCoordinator::Committed { task, checkpoint: c }) if c >= checkpoint => {
                    committed.insert(task);
                }
                Some(other) => self.deferred.push_back(other),
                None => {}
            }
        }
        Ok(())
    }

    /// Keeps the snapshots of the newest completed checkpoints only, and,
    /// with the recorder on, those every kept captured epoch starts from.
    fn prune(&self, checkpoint: u64) -> Result<(), RunError> {
        let retain = snapshots_kept(self.options.retain_checkpoints, self.options.capture.as_ref());
        let completed = list_completed(&self.layout).map_err(|e| RunError::Failed(e.to_string()))?;
        let keep: Vec<u64> = completed.iter().rev().take(retain).copied().collect();
        let mut keep_from = keep.last().copied().unwrap_or(checkpoint).min(checkpoint);
        if self.protocol.confirms() {
            // The restore point and the walk's handles: nothing from the
            // confirmed point up may go.
            keep_from = keep_from.min(self.protocol.confirmed_point());
        }
        self.backend
            .prune_below_keeping(keep_from, &self.requests.kept)
            .map_err(|e| RunError::Failed(format!("pruning snapshots: {e}")))
    }

    fn report_progress(&mut self, checkpoint: u64) {
        if !self.options.progress {
            return;
        }
        let now = Instant::now();
        if self.last_progress.is_some_and(|t| now.duration_since(t) < Duration::from_secs(1)) {
            return;
        }
        self.last_progress = Some(now);
        eprintln!("clink: job {}: checkpoint {checkpoint} completed", self.layout.job());
    }
}

/// How many of the newest completed checkpoints keep their snapshots. A
/// captured epoch `e` replays from checkpoint `e - 1`: when checkpoint `n`
/// completes the recorder holds epochs `n - K + 1 ..= n` (K its window),
/// which start from the `K + 1` newest checkpoints, `n - K ..= n - 1`; so
/// every epoch the recorder keeps stays replayable.
pub(crate) fn snapshots_kept(retain: std::num::NonZeroU32, capture: Option<&crate::capture::CaptureOptions>) -> usize {
    let retain = retain.get() as usize;
    match capture {
        Some(c) => retain.max(usize::try_from(c.retain_epochs).unwrap_or(usize::MAX).saturating_add(1)),
        None => retain,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::num::NonZeroU32;

    fn capture(retain_epochs: u64) -> crate::capture::CaptureOptions {
        crate::capture::CaptureOptions { dir: "c".into(), records_bound: 1, retain_epochs }
    }

    #[test]
    fn every_kept_epoch_keeps_the_checkpoint_it_starts_from() {
        let three = NonZeroU32::new(3).unwrap();
        assert_eq!(snapshots_kept(three, None), 3);
        // Epochs n-2, n-1, n start from checkpoints n-3 ..= n-1: four kept with n.
        assert_eq!(snapshots_kept(three, Some(&capture(3))), 4);
        assert_eq!(snapshots_kept(three, Some(&capture(1))), 3);
        assert_eq!(snapshots_kept(three, Some(&capture(64))), 65);
        assert_eq!(snapshots_kept(three, Some(&capture(u64::MAX))), usize::MAX);
    }
}
