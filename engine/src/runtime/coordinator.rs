//! The coordinator: triggers checkpoints, collects acks, decides each
//! checkpoint, writes its COMPLETED marker durably and only then broadcasts the
//! commit; on a recovery or an in-process restart it chooses the restore point
//! with the restore rule, writes the RESTORED record, and redeploys.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, unbounded, Receiver, RecvTimeoutError, Sender};

use crate::capture::{subtask_dir, EpochRecorder, OpSpecFile};
use crate::checkpoint::durable::{create_dir_durably, remove_stale_temps};
use crate::checkpoint::markers::{list_completed, write_completed, write_restored, CheckpointKind, CompletedMarker};
use crate::checkpoint::{
    next_checkpoint_id, participant_name, restore_point_on_disk, CheckpointLayout, FileStateBackend, RestoredRecord,
    GENERATION,
};
use crate::defects::Defect;
use crate::fault::{kill_point, FaultPoint};
use crate::job::{Partition, PlannedOperator};
use crate::operators::driver::Driver;
use crate::registry::{self, OperatorKind};
use crate::trace_event;

use super::frames::{DataFrame, ToCoordinator, ToTask};
use super::gates::{InputGate, OutputEdge, OutputGate, Route};
use super::task::{self, SourceTriggers, TaskContext};
use super::{RunError, RunOptions, RunSummary, TriggerMode};

/// Frames buffered between two subtasks.
const CHANNEL_FRAMES: usize = 64;

/// One subtask of the deployment.
#[derive(Debug, Clone)]
struct Participant {
    name: String,
    operator: usize,
    subtask: u32,
    kind: OperatorKind,
}

#[derive(Debug)]
struct Pending {
    kind: CheckpointKind,
    acked: BTreeSet<usize>,
    failed: Option<String>,
}

/// The channels of one deployment: a data receiver per non-source subtask
/// (bounded: back-pressure), a control channel per subtask (unbounded: the
/// coordinator never blocks on a subtask).
struct Wiring {
    data_tx: Vec<Option<Sender<DataFrame>>>,
    data_rx: Vec<Option<Receiver<DataFrame>>>,
    control_tx: Vec<Sender<ToTask>>,
    control_rx: Vec<Option<Receiver<ToTask>>>,
}

impl Wiring {
    fn new(participants: &[Participant]) -> Wiring {
        let mut w = Wiring { data_tx: Vec::new(), data_rx: Vec::new(), control_tx: Vec::new(), control_rx: Vec::new() };
        for p in participants {
            if p.kind == OperatorKind::Source {
                w.data_tx.push(None);
                w.data_rx.push(None);
            } else {
                let (tx, rx) = bounded(CHANNEL_FRAMES);
                w.data_tx.push(Some(tx));
                w.data_rx.push(Some(rx));
            }
            let (tx, rx) = unbounded();
            w.control_tx.push(tx);
            w.control_rx.push(Some(rx));
        }
        w
    }
}

/// A subtask built and ready to start.
struct Launch {
    name: String,
    run: Box<dyn FnOnce() + Send>,
}

impl Launch {
    fn spawn(self) -> Result<JoinHandle<()>, RunError> {
        let name = self.name;
        std::thread::Builder::new()
            .name(name.clone())
            .spawn(self.run)
            .map_err(|e| RunError::Failed(format!("starting {name}: {e}")))
    }
}

/// The threads and channels of one deployment.
struct Deployment {
    control: Vec<Sender<ToTask>>,
    from_tasks: Receiver<ToCoordinator>,
    threads: Vec<JoinHandle<()>>,
    cancel: Arc<AtomicBool>,
    finished: BTreeSet<usize>,
    source_closing: bool,
}

pub struct Coordinator {
    options: RunOptions,
    layout: CheckpointLayout,
    backend: FileStateBackend,
    participants: Vec<Participant>,
    sinks: Vec<usize>,
    next_id: u64,
    restored_from: u64,
    first_checkpoint: u64,
    last_completed: u64,
    completed: u64,
    restarts: u32,
    pending: BTreeMap<u64, Pending>,
    deployment: Option<Deployment>,
    deferred: VecDeque<ToCoordinator>,
    stopped_with_savepoint: bool,
    last_progress: Option<Instant>,
}

fn failed(context: &str) -> impl FnOnce(String) -> RunError + '_ {
    move |e| RunError::Failed(format!("{context}: {e}"))
}

impl Coordinator {
    /// Checks the job and its input, then recovers or starts fresh: nothing is
    /// written before the checks pass.
    pub fn start(options: RunOptions) -> Result<Coordinator, RunError> {
        for op in &options.job.operators {
            registry::preflight(op, &options.env).map_err(|e| RunError::Refused(e.to_string()))?;
        }
        let job = options.job.job_id;
        let layout = CheckpointLayout::new(&options.checkpoint_dir, job);
        let backend = FileStateBackend::new(layout.clone());
        let mut participants = Vec::new();
        for (i, op) in options.job.operators.iter().enumerate() {
            for s in 0..op.spec.parallelism {
                participants.push(Participant {
                    name: participant_name(op.spec.id, s),
                    operator: i,
                    subtask: s,
                    kind: op.spec.kind,
                });
            }
        }
        let sinks =
            participants.iter().enumerate().filter(|(_, p)| p.kind == OperatorKind::Sink).map(|(i, _)| i).collect();
        Ok(Coordinator {
            options,
            layout,
            backend,
            participants,
            sinks,
            next_id: 1,
            restored_from: 0,
            first_checkpoint: 1,
            last_completed: 0,
            completed: 0,
            restarts: 0,
            pending: BTreeMap::new(),
            deployment: None,
            deferred: VecDeque::new(),
            stopped_with_savepoint: false,
            last_progress: None,
        })
    }

    pub fn run(mut self) -> Result<RunSummary, RunError> {
        let job = self.layout.job();
        if self.has_history() {
            self.recover()?;
        } else {
            // The job's directory exists from the start, so a run killed
            // before its first checkpoint is resumed as a recovery.
            let dir = self.layout.jobs_dir();
            create_dir_durably(&dir).map_err(|e| RunError::Failed(format!("{}: {e}", dir.display())))?;
            self.deploy(0)?;
        }
        let result = self.coordinate();
        if let Some(deployment) = self.deployment.take() {
            shut_down(deployment);
        }
        result?;
        Ok(RunSummary {
            job,
            restored_from: self.restored_from,
            first_checkpoint: self.first_checkpoint,
            last_completed: self.last_completed,
            completed: self.completed,
            restarts: self.restarts,
            stopped_with_savepoint: self.stopped_with_savepoint,
        })
    }

    /// Whether an earlier run of this job left anything in the checkpoint directory.
    fn has_history(&self) -> bool {
        self.layout.jobs_dir().exists() || self.layout.state_root().exists()
    }

    /// A new process over an earlier run's directory: read the markers once,
    /// then redeploy from the restore point.
    fn recover(&mut self) -> Result<(), RunError> {
        remove_stale_temps(&self.layout.jobs_dir()).map_err(|e| RunError::Failed(e.to_string()))?;
        let point = restore_point_on_disk(&self.layout).map_err(|e| RunError::Failed(e.to_string()))?;
        trace_event!(
            CoordRecovers,
            job = self.layout.job(),
            epoch = 0u64,
            completed = point.checkpoint,
            confirmed = 0u64
        );
        self.redeploy()
    }

    /// Chooses the restore point, records it, and deploys from it.
    fn redeploy(&mut self) -> Result<(), RunError> {
        let point = restore_point_on_disk(&self.layout).map_err(|e| RunError::Failed(e.to_string()))?;
        let next = next_checkpoint_id(&self.layout, &point).map_err(failed("reading the checkpoint directory"))?;
        let next = next.max(self.next_id);
        kill_point(FaultPoint::CoordinatorBeforeRestoredRecord, point.checkpoint);
        let record = RestoredRecord::new(self.layout.job(), point.checkpoint, next);
        write_restored(&self.layout, &record).map_err(|e| RunError::Failed(e.to_string()))?;
        trace_event!(Redeploy, job = self.layout.job(), restore = point.checkpoint, next = next);
        self.next_id = next;
        self.first_checkpoint = next;
        self.restored_from = point.checkpoint;
        self.last_completed = self.last_completed.max(point.checkpoint);
        self.deploy(point.checkpoint)
    }

    /// Deploys every subtask from the restore point. Everything that can fail
    /// (reading snapshots, building operators, opening the recorder) happens
    /// before the first thread starts, so a failed deploy leaves none running.
    fn deploy(&mut self, restore_point: u64) -> Result<(), RunError> {
        let (to_coordinator, from_tasks) = unbounded();
        let cancel = Arc::new(AtomicBool::new(false));
        let mut wiring = Wiring::new(&self.participants);
        let mut launches = Vec::new();
        for (task, p) in self.participants.iter().enumerate() {
            launches.push(self.prepare_task(task, p, restore_point, &mut wiring, &to_coordinator, &cancel)?);
        }
        let threads = launches.into_iter().map(Launch::spawn).collect::<Result<Vec<_>, _>>()?;
        self.deployment = Some(Deployment {
            control: wiring.control_tx,
            from_tasks,
            threads,
            cancel,
            finished: BTreeSet::new(),
            source_closing: false,
        });
        Ok(())
    }

    /// Builds one subtask, ready to run on its own thread.
    fn prepare_task(
        &self,
        task: usize,
        p: &Participant,
        restore_point: u64,
        wiring: &mut Wiring,
        to_coordinator: &Sender<ToCoordinator>,
        cancel: &Arc<AtomicBool>,
    ) -> Result<Launch, RunError> {
        let job = &self.options.job;
        let env = &self.options.env;
        let op = &job.operators[p.operator];
        let restored = if restore_point == 0 {
            None
        } else {
            let snapshot = self
                .backend
                .read(GENERATION, &p.name, restore_point)
                .map_err(|e| RunError::Failed(format!("restoring checkpoint {restore_point}: {e}")))?;
            Some(snapshot.slots)
        };
        let cx = TaskContext {
            task,
            job: job.job_id,
            participant: p.name.clone(),
            operator: op.clone(),
            subtask: p.subtask,
            to_coordinator: to_coordinator.clone(),
            cancel: cancel.clone(),
            backend: self.backend.clone(),
            restored,
            restore_point,
            env: env.clone(),
            recorder: self.recorder_for(op, p)?,
        };
        let first_task_of = |op: usize| self.participants.iter().position(|q| q.operator == op).unwrap_or(0);
        let out = self.output_gate(p, &wiring.data_tx, &first_task_of, cancel);
        let control =
            wiring.control_rx[task].take().ok_or_else(|| RunError::Failed("control channel taken twice".into()))?;
        let refused = |e: crate::operators::OperatorError| RunError::Refused(e.to_string());
        let run: Box<dyn FnOnce() + Send> = match p.kind {
            OperatorKind::Source => {
                let source = registry::build_source(op, env).map_err(refused)?;
                let triggers = SourceTriggers {
                    every_records: match self.options.trigger {
                        TriggerMode::EveryRecords(n) => Some(n.max(1)),
                        _ => None,
                    },
                    stop_at_watermark: self.options.stop_with_savepoint_at,
                    records_per_second: self.options.source_rate,
                };
                Box::new(move || task::run_source(cx, source, out, control, triggers))
            }
            OperatorKind::Transform => {
                let driver = Driver::new(registry::build_transform(op).map_err(refused)?, task::production_clock());
                let gate = self.input_gate(op, wiring.data_rx[task].take(), control)?;
                Box::new(move || task::run_transform(cx, driver, gate, out))
            }
            OperatorKind::Sink => {
                let sink = registry::build_sink(op, p.subtask, env).map_err(refused)?;
                let gate = self.input_gate(op, wiring.data_rx[task].take(), control)?;
                Box::new(move || task::run_sink(cx, sink, gate))
            }
        };
        Ok(Launch { name: p.name.clone(), run })
    }

    /// The flight recorder of a transform or sink subtask, when capture is on.
    fn recorder_for(&self, op: &PlannedOperator, p: &Participant) -> Result<Option<EpochRecorder>, RunError> {
        let Some(capture) = &self.options.capture else {
            return Ok(None);
        };
        if p.kind == OperatorKind::Source {
            return Ok(None);
        }
        let dir = subtask_dir(&capture.dir, op.spec.id, p.subtask);
        let spec = OpSpecFile::describe(&self.options.job, op, p.subtask);
        EpochRecorder::create(dir, capture.records_bound, capture.retain_epochs, &spec)
            .map(Some)
            .map_err(|e| RunError::Refused(format!("--capture-dir {}: {e}", capture.dir.display())))
    }

    fn input_gate(
        &self,
        op: &PlannedOperator,
        data: Option<Receiver<DataFrame>>,
        control: Receiver<ToTask>,
    ) -> Result<InputGate, RunError> {
        let data = data.ok_or_else(|| RunError::Failed(format!("operator {} has no input channel", op.spec.id)))?;
        let channels = self
            .options
            .job
            .inputs_of(op.spec.id)
            .map(|edge| match edge.partition {
                Partition::Forward => 1,
                Partition::Hash { .. } => {
                    self.options.job.operator(edge.from).map_or(1, |u| u.spec.parallelism as usize)
                }
            })
            .sum();
        Ok(InputGate::new(data, control, channels))
    }

    fn output_gate(
        &self,
        p: &Participant,
        data_tx: &[Option<Sender<DataFrame>>],
        first_task_of: &dyn Fn(usize) -> usize,
        cancel: &Arc<AtomicBool>,
    ) -> OutputGate {
        let job = &self.options.job;
        let op = &job.operators[p.operator];
        let mut edges = Vec::new();
        for edge in job.outputs_of(op.spec.id) {
            let Some(consumer) = job.operators.iter().position(|o| o.spec.id == edge.to) else {
                continue;
            };
            let first = first_task_of(consumer);
            let parallelism = job.operators[consumer].spec.parallelism as usize;
            let (route, channel) = match &edge.partition {
                Partition::Forward => (Route::Forward, 0),
                Partition::Hash { indices, .. } => (Route::Hash(indices.clone()), p.subtask),
            };
            let targets = (0..parallelism).filter_map(|s| data_tx[first + s].clone().map(|tx| (tx, channel))).collect();
            edges.push(OutputEdge { route, targets });
        }
        OutputGate::new(p.subtask, edges, cancel.clone())
    }

    /// The coordinator's loop: until every subtask finished.
    fn coordinate(&mut self) -> Result<(), RunError> {
        let mut next_interval = self.interval().map(|i| Instant::now() + i);
        loop {
            let Some(deployment) = &self.deployment else {
                return Err(RunError::Failed("no deployment".into()));
            };
            if deployment.finished.len() == self.participants.len() && self.pending.is_empty() {
                return Ok(());
            }
            let frame = match self.deferred.pop_front() {
                Some(frame) => frame,
                None => {
                    let timeout = next_interval
                        .map_or(Duration::from_secs(3600), |t| t.saturating_duration_since(Instant::now()));
                    match deployment.from_tasks.recv_timeout(timeout) {
                        Ok(frame) => frame,
                        Err(RecvTimeoutError::Timeout) => {
                            if let (Some(interval), false) = (self.interval(), deployment.source_closing) {
                                self.trigger(CheckpointKind::Periodic)?;
                                next_interval = Some(Instant::now() + interval);
                            }
                            continue;
                        }
                        Err(RecvTimeoutError::Disconnected) => {
                            return Err(RunError::Failed("every subtask went away".into()));
                        }
                    }
                }
            };
            self.on_frame(frame)?;
        }
    }

    fn interval(&self) -> Option<Duration> {
        match self.options.trigger {
            TriggerMode::IntervalMs(ms) => Some(Duration::from_millis(ms.max(1))),
            _ => None,
        }
    }

    fn on_frame(&mut self, frame: ToCoordinator) -> Result<(), RunError> {
        match frame {
            ToCoordinator::RequestCheckpoint { kind } => {
                if kind != CheckpointKind::Periodic {
                    if let Some(d) = &mut self.deployment {
                        d.source_closing = true;
                    }
                }
                self.trigger(kind)
            }
            ToCoordinator::Ack { task, checkpoint, ok, error } => self.on_ack(task, checkpoint, ok, error),
            ToCoordinator::Committed { .. } => Ok(()),
            ToCoordinator::Finished { task } => {
                if let Some(d) = &mut self.deployment {
                    d.finished.insert(task);
                }
                Ok(())
            }
            ToCoordinator::Failed { task, error } => {
                let name = self.participants.get(task).map_or("?", |p| p.name.as_str()).to_string();
                self.restart_on_error(0, format!("{name} failed: {error}"))
            }
        }
    }

    fn trigger(&mut self, kind: CheckpointKind) -> Result<(), RunError> {
        let checkpoint = self.next_id;
        self.next_id += 1;
        self.pending.insert(checkpoint, Pending { kind, acked: BTreeSet::new(), failed: None });
        trace_event!(Trigger, job = self.layout.job(), ckpt = checkpoint, epoch = 0u64, kind = kind.as_str());
        self.send(0, ToTask::TriggerCheckpoint { checkpoint, kind });
        Ok(())
    }

    fn send(&self, task: usize, frame: ToTask) {
        if let Some(d) = &self.deployment {
            if let Some(tx) = d.control.get(task) {
                // A subtask that already stopped does not need the frame.
                let _ = tx.send(frame);
            }
        }
    }

    fn on_ack(&mut self, task: usize, checkpoint: u64, ok: bool, error: Option<String>) -> Result<(), RunError> {
        let Some(pending) = self.pending.get_mut(&checkpoint) else {
            return Ok(());
        };
        pending.acked.insert(task);
        if !ok && pending.failed.is_none() {
            let name = self.participants.get(task).map_or("?", |p| p.name.as_str());
            pending.failed = Some(format!("{name}: {}", error.unwrap_or_default()));
        }
        if pending.acked.len() < self.participants.len() {
            return Ok(());
        }
        match pending.failed.clone() {
            None => self.complete(checkpoint),
            Some(reason) => self.fail(checkpoint, reason),
        }
    }

    /// Every ack of `checkpoint` is in and ok: marker, then broadcast.
    fn complete(&mut self, checkpoint: u64) -> Result<(), RunError> {
        let job = self.layout.job();
        let Some(pending) = self.pending.remove(&checkpoint) else {
            return Ok(());
        };
        trace_event!(CoordComplete, job = job, ckpt = checkpoint, outcome = "completed", epoch = 0u64);
        let defects = &self.options.env.defects;
        if defects.has(Defect::BroadcastBeforeMarker) {
            self.broadcast(checkpoint);
            self.await_commits(checkpoint)?;
            self.write_marker(checkpoint, pending.kind)?;
        } else {
            self.write_marker(checkpoint, pending.kind)?;
            kill_point(FaultPoint::CoordinatorBeforeCommitBroadcast, checkpoint);
            self.broadcast(checkpoint);
        }
        self.last_completed = checkpoint;
        self.completed += 1;
        if pending.kind == CheckpointKind::Savepoint {
            self.stopped_with_savepoint = true;
        }
        self.prune(checkpoint)?;
        self.report_progress(checkpoint);
        Ok(())
    }

    fn write_marker(&mut self, checkpoint: u64, kind: CheckpointKind) -> Result<(), RunError> {
        kill_point(FaultPoint::CoordinatorBeforeCompletedMarker, checkpoint);
        let participants = self.participants.iter().map(|p| p.name.clone()).collect();
        let marker = CompletedMarker::new(self.layout.job(), checkpoint, GENERATION, kind, participants);
        write_completed(&self.layout, &marker).map_err(|e| RunError::Failed(e.to_string()))?;
        trace_event!(WriteCompleted, job = self.layout.job(), ckpt = checkpoint, epoch = 0u64);
        kill_point(FaultPoint::CoordinatorAfterCompletedMarker, checkpoint);
        Ok(())
    }

    fn broadcast(&mut self, checkpoint: u64) {
        trace_event!(Broadcast, job = self.layout.job(), ckpt = checkpoint, withheld = false, epoch = 0u64);
        for &sink in &self.sinks {
            self.send(sink, ToTask::CommitCheckpoint { checkpoint });
        }
    }

    /// Only under the `broadcast_before_marker` defect: waits until every sink
    /// has committed, the worst interleaving of a broadcast before the marker.
    fn await_commits(&mut self, checkpoint: u64) -> Result<(), RunError> {
        let mut committed = BTreeSet::new();
        while committed.len() < self.sinks.len() {
            let Some(d) = &self.deployment else {
                return Ok(());
            };
            match d.from_tasks.recv() {
                Ok(ToCoordinator::Committed { task, checkpoint: c }) if c >= checkpoint => {
                    committed.insert(task);
                }
                Ok(other) => self.deferred.push_back(other),
                Err(_) => return Err(RunError::Failed("every subtask went away".into())),
            }
        }
        Ok(())
    }

    /// Keeps the snapshots of the newest completed checkpoints only.
    fn prune(&self, checkpoint: u64) -> Result<(), RunError> {
        let retain = self.options.retain_checkpoints.max(1) as usize;
        let completed = list_completed(&self.layout).map_err(|e| RunError::Failed(e.to_string()))?;
        let keep: Vec<u64> = completed.iter().rev().take(retain).copied().collect();
        let keep_from = keep.last().copied().unwrap_or(checkpoint).min(checkpoint);
        self.backend.prune_below(keep_from).map_err(|e| RunError::Failed(format!("pruning snapshots: {e}")))
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

    /// A checkpoint failed: it and every checkpoint above it still in flight
    /// are decided without a marker, and the job restarts from the restore point.
    fn fail(&mut self, checkpoint: u64, reason: String) -> Result<(), RunError> {
        let job = self.layout.job();
        self.pending.remove(&checkpoint);
        trace_event!(CoordComplete, job = job, ckpt = checkpoint, outcome = "failed", epoch = 0u64);
        if self.options.env.defects.has(Defect::NoRewindOnFailedCheckpoint) {
            eprintln!("clink: job {job}: checkpoint {checkpoint} failed ({reason}); running on without a rewind");
            return Ok(());
        }
        let above: Vec<u64> = self.pending.range(checkpoint + 1..).map(|(&c, _)| c).collect();
        for c in above {
            self.pending.remove(&c);
            trace_event!(CoordComplete, job = job, ckpt = c, outcome = "discarded", epoch = 0u64);
        }
        self.restart_on_error(checkpoint, format!("checkpoint {checkpoint} failed: {reason}"))
    }

    /// Restarts the job in this process, within the restart budget.
    fn restart_on_error(&mut self, checkpoint: u64, cause: String) -> Result<(), RunError> {
        if self.restarts >= self.options.restart_budget {
            return Err(RunError::Failed(format!(
                "{cause}; the restart budget ({}) is spent",
                self.options.restart_budget
            )));
        }
        self.restarts += 1;
        trace_event!(RestartOnError, job = self.layout.job(), ckpt = checkpoint, cause = cause.as_str());
        eprintln!("clink: job {}: restarting ({cause})", self.layout.job());
        if let Some(deployment) = self.deployment.take() {
            shut_down(deployment);
        }
        for (c, _) in std::mem::take(&mut self.pending) {
            trace_event!(CoordComplete, job = self.layout.job(), ckpt = c, outcome = "discarded", epoch = 0u64);
        }
        self.deferred.clear();
        self.redeploy()
    }
}

/// Cancels every subtask and waits for its thread; frames sent after this are dropped.
fn shut_down(deployment: Deployment) {
    deployment.cancel.store(true, Ordering::Relaxed);
    for tx in &deployment.control {
        let _ = tx.send(ToTask::Cancel);
    }
    drop(deployment.control);
    drop(deployment.from_tasks);
    for thread in deployment.threads {
        let _ = thread.join();
    }
}
