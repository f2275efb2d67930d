//! Deploying a job: one subtask per operator and subtask index, its channels,
//! its restored state, its recorder, and its thread.
//!
//! Everything that can fail (reading snapshots, building operators, opening
//! the recorder) happens before the first thread starts, so a failed deploy
//! leaves none running. A subtask that panics becomes a `Failed` frame: the
//! coordinator restarts or fails the job, it never waits for a dead thread.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{bounded, unbounded, Receiver, Sender};

use crate::capture::{subtask_dir, CompletedCheckpoint, EpochRecorder, OpSpecFile};
use crate::checkpoint::{participant_name, FileStateBackend, StateSlots, GENERATION};
use crate::job::PlannedOperator;
use crate::operators::driver::Driver;
use crate::operators::rescale::{redivide, Share};
use crate::operators::{OperatorError, OperatorKind};
use crate::routing::Route;
use crate::state_map::StateMap;

use super::frames::{DataFrame, ToCoordinator, ToTask};
use super::gates::{InputGate, OutputEdge, OutputGate};
use super::task::source::SourceTriggers;
use super::task::{self, TaskContext};
use super::watch::{StallWatch, TaskWatch};
use super::{RunError, RunOptions, TriggerMode};

/// Frames buffered on a subtask's input: with batches of up to
/// `output::BATCH_ELEMENTS` elements, about 16k elements, enough that a
/// consumer's snapshot (a few fsyncs) rarely stops its producers.
const CHANNEL_FRAMES: usize = 16;

/// One subtask of the deployment.
#[derive(Debug, Clone)]
pub struct Participant {
    pub name: String,
    /// Index of its operator in the job's topological order.
    pub operator: usize,
    pub subtask: u32,
    pub kind: OperatorKind,
}

/// Every subtask of a job, in operator order then subtask order.
pub fn participants(options: &RunOptions) -> Vec<Participant> {
    let mut participants = Vec::new();
    for (i, op) in options.job.operators.iter().enumerate() {
        for s in 0..op.spec.parallelism {
            participants.push(Participant {
                name: participant_name(op.spec.id, s),
                operator: i,
                subtask: s,
                kind: op.spec.kind(),
            });
        }
    }
    participants
}

/// The threads and channels of one running deployment.
pub struct Deployment {
    pub control: Vec<Sender<ToTask>>,
    /// Every subtask's watch, looked at by the coordinator.
    pub stall: StallWatch,
    pub from_tasks: Receiver<ToCoordinator>,
    threads: Vec<(String, JoinHandle<()>)>,
    cancel: Arc<AtomicBool>,
}

impl Deployment {
    /// Sends a control frame; a subtask that already stopped does not need it.
    pub fn send(&self, task: usize, frame: ToTask) {
        if let Some(tx) = self.control.get(task) {
            let _ = tx.send(frame);
        }
    }

    /// Subtasks whose thread has ended, by name.
    pub fn ended(&self) -> Vec<&str> {
        self.threads.iter().filter(|(_, t)| t.is_finished()).map(|(n, _)| n.as_str()).collect()
    }

    /// Cancels every subtask and waits for its thread; frames sent after this are dropped.
    pub fn shut_down(self) {
        self.cancel.store(true, Ordering::Relaxed);
        for tx in &self.control {
            let _ = tx.send(ToTask::Cancel);
        }
        drop(self.control);
        drop(self.from_tasks);
        for (_, thread) in self.threads {
            let _ = thread.join();
        }
    }
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
    task: usize,
    to_coordinator: Sender<ToCoordinator>,
    run: Box<dyn FnOnce() + Send>,
}

impl Launch {
    /// Starts the subtask's thread; a panic in it is reported as the subtask's failure.
    fn spawn(self) -> Result<(String, JoinHandle<()>), RunError> {
        let Launch { name, task, to_coordinator, run } = self;
        let thread = std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || {
                if let Err(panic) = catch_unwind(AssertUnwindSafe(run)) {
                    let error = format!("panicked: {}", panic_message(&panic));
                    let _ = to_coordinator.send(ToCoordinator::Failed { task, error });
                }
            })
            .map_err(|e| RunError::Failed(format!("starting {name}: {e}")))?;
        Ok((name, thread))
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}

/// Builds every subtask of the job from `restore_point` (0: from nothing),
/// then starts them all.
/// `state` says which participants restore from `restore_point` (the
/// others start empty); with `restore_point` 0 every participant starts empty.
pub fn deploy(
    options: &RunOptions,
    participants: &[Participant],
    backend: &FileStateBackend,
    restore_point: u64,
    state: Option<&StateMap>,
    epoch: u64,
    completed: &CompletedCheckpoint,
) -> Result<Deployment, RunError> {
    let (to_coordinator, from_tasks) = unbounded();
    let cancel = Arc::new(AtomicBool::new(false));
    let mut wiring = Wiring::new(participants);
    let builder = Builder { options, participants, backend, restore_point, state, epoch, completed };
    let mut launches = Vec::new();
    let mut watches = Vec::new();
    for (task, p) in participants.iter().enumerate() {
        let watch = TaskWatch::new();
        watches.push((p.name.clone(), watch.clone()));
        launches.push(builder.launch(task, p, &mut wiring, &to_coordinator, &cancel, watch)?);
    }
    let threads = launches.into_iter().map(Launch::spawn).collect::<Result<Vec<_>, _>>()?;
    let stall = StallWatch::new(options.stall_after, watches);
    Ok(Deployment { control: wiring.control_tx, stall, from_tasks, threads, cancel })
}

struct Builder<'a> {
    options: &'a RunOptions,
    participants: &'a [Participant],
    backend: &'a FileStateBackend,
    restore_point: u64,
    state: Option<&'a StateMap>,
    epoch: u64,
    completed: &'a CompletedCheckpoint,
}

impl Builder<'_> {
    /// Builds one subtask, ready to run on its own thread.
    fn launch(
        &self,
        task: usize,
        p: &Participant,
        wiring: &mut Wiring,
        to_coordinator: &Sender<ToCoordinator>,
        cancel: &Arc<AtomicBool>,
        watch: Arc<TaskWatch>,
    ) -> Result<Launch, RunError> {
        let job = &self.options.job;
        let env = &self.options.env;
        let op = &job.operators[p.operator];
        let starts_empty = self.state.is_some_and(|m| m.starts_empty(&p.name));
        let restored = if self.restore_point == 0 || starts_empty { None } else { Some(self.restored_slots(op, p)?) };
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
            restore_point: self.restore_point,
            epoch: self.epoch,
            env: env.clone(),
            recorder: self.recorder_for(op, p)?,
            watch: watch.clone(),
        };
        let out = self.output_gate(p, &wiring.data_tx, cancel).watched_by(watch.clone());
        let control = wiring.control_rx[task]
            .take()
            .ok_or_else(|| RunError::Failed(format!("{}: its control channel was taken twice", p.name)))?;
        let refused = |e: OperatorError| RunError::Refused(e.to_string());
        let run: Box<dyn FnOnce() + Send> = match p.kind {
            OperatorKind::Source => {
                let source = op.build_source(env).map_err(refused)?;
                let triggers = SourceTriggers {
                    every_records: match self.options.trigger {
                        TriggerMode::EveryRecords(n) => Some(n),
                        _ => None,
                    },
                    stop_at_watermark: self.options.stop_with_savepoint_at,
                    records_per_second: self.options.source_rate,
                };
                Box::new(move || task::source::run(cx, source, out, control, triggers))
            }
            OperatorKind::Transform => {
                let driver = Driver::new(op.build_transform(env).map_err(refused)?, task::production_clock())
                    .with_key_owner(p.subtask, op.spec.parallelism);
                let gate = self.input_gate(p, op, wiring.data_rx[task].take(), control)?.watched_by(watch);
                Box::new(move || task::transform::run(cx, driver, gate, out))
            }
            OperatorKind::Sink => {
                let sink = op.build_sink(p.subtask, env).map_err(refused)?;
                let gate = self.input_gate(p, op, wiring.data_rx[task].take(), control)?.watched_by(watch);
                Box::new(move || task::sink::run(cx, sink, gate))
            }
        };
        Ok(Launch { name: p.name.clone(), task, to_coordinator: to_coordinator.clone(), run })
    }

    /// A participant's restored state: its own snapshot, or at another
    /// parallelism its share of every old subtask's (`crate::operators::rescale`), read
    /// from the generation the restore point's marker names.
    fn restored_slots(&self, op: &PlannedOperator, p: &Participant) -> Result<StateSlots, RunError> {
        let failed = |e: String| RunError::Failed(format!("restoring checkpoint {}: {e}", self.restore_point));
        let generation = self.state.map_or(GENERATION, |m| m.generation);
        let read =
            |name: &str| self.backend.read(generation, name, self.restore_point).map_err(|e| failed(e.to_string()));
        let Some(rescale) = self.state.and_then(|m| m.rescaled.get(&op.spec.id)).copied() else {
            return Ok(read(&p.name)?.slots);
        };
        let parts = (0..rescale.from)
            .map(|old| read(&participant_name(op.spec.id, old)).map(|s| s.slots))
            .collect::<Result<Vec<_>, _>>()?;
        let share = Share { rescale, subtask: p.subtask, parts: &parts };
        redivide(op.spec.descriptor, &op.spec.params, &share)
            .map_err(|e| failed(format!("{}: re-dividing its state from {} subtasks: {e}", p.name, rescale.from)))
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
        let spec = OpSpecFile::describe(&self.options.job, op, p.subtask).written_by(self.options.env.run.clone());
        EpochRecorder::create(dir, capture.records_bound, capture.retain_epochs, self.completed.clone(), &spec)
            .map(Some)
            .map_err(|e| RunError::Refused(format!("--capture-dir {}: {e}", capture.dir.display())))
    }

    fn input_gate(
        &self,
        p: &Participant,
        op: &PlannedOperator,
        data: Option<Receiver<DataFrame>>,
        control: Receiver<ToTask>,
    ) -> Result<InputGate, RunError> {
        let data =
            data.ok_or_else(|| RunError::Failed(format!("{}: a {:?} without an input channel", p.name, p.kind)))?;
        let job = &self.options.job;
        let channels = job
            .inputs_of(op.spec.id)
            .map(|edge| {
                let producers = job.operator(edge.from).map_or(1, |u| u.spec.parallelism);
                Route::of(&edge.partition).channels_per_consumer(producers)
            })
            .sum();
        Ok(InputGate::new(data, control, channels))
    }

    fn output_gate(
        &self,
        p: &Participant,
        data_tx: &[Option<Sender<DataFrame>>],
        cancel: &Arc<AtomicBool>,
    ) -> OutputGate {
        let job = &self.options.job;
        let op = &job.operators[p.operator];
        let mut edges = Vec::new();
        for edge in job.outputs_of(op.spec.id) {
            let Some(consumer) = job.operators.iter().position(|o| o.spec.id == edge.to) else {
                continue;
            };
            let first = self.participants.iter().position(|q| q.operator == consumer).unwrap_or(0);
            let parallelism = job.operators[consumer].spec.parallelism as usize;
            let route = Route::of(&edge.partition);
            let channel = route.channel_at_consumer(p.subtask);
            let targets = (0..parallelism).filter_map(|s| data_tx[first + s].clone().map(|tx| (tx, channel))).collect();
            edges.push(OutputEdge { route, targets });
        }
        OutputGate::new(p.subtask, edges, cancel.clone())
    }
}
