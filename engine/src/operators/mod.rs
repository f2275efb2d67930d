//! The operators this build can run, and the interfaces they implement.
//!
//! Three shapes: a [`Source`] produces records and watermarks and owns its input
//! position; a [`Transform`] is handed records, due event-time timers and due
//! processing-time timers by a [`driver::Driver`]; a [`Sink`] writes rows and
//! takes part in the two-phase protocol (prepare at the barrier, commit on the
//! coordinator's word). Operators never talk to the coordinator, never read the
//! wall clock, and never decide when a checkpoint happens: the runtime calls
//! them at the protocol's steps.
//!
//! Each operator type lives in one file that exports a [`Descriptor`]: its
//! name, its shape, how its params are checked, how it is built, how its
//! state is decoded, which columns key its output, and what it checks before
//! a job starts. The [`registered_operators!`] line below lists them; the
//! registry ([`crate::registry`]) looks them up. This module never depends on
//! the job graph or the runtime.

pub mod driver;
pub mod keyed;
pub mod rescale;

/// THE registry line: every operator type this build knows. Adding an operator
/// is one new file in this folder and its module name here.
macro_rules! registered_operators {
    ($($module:ident),* $(,)?) => {
        $(pub mod $module;)*

        /// Every operator type's descriptor, in registration order.
        pub static DESCRIPTORS: &[&Descriptor] = &[$(&$module::DESCRIPTOR),*];
    };
}

/// The descriptor functions of a transform planned by its module's
/// `plan(params, input)` into a plan with an `output` schema, and built from
/// that plan by `$new`: `plan_schema` and `build`, for `Descriptor::transform`.
macro_rules! planned_transform {
    ($new:expr) => {
        fn plan_schema(
            params: &serde_json::Value,
            input: Option<&crate::value::Schema>,
        ) -> Result<crate::value::Schema, clink_basics::fields::FieldError> {
            plan(params, super::defaults::input(input)?).map(|p| p.output)
        }

        fn build(setup: &super::Setup<'_>) -> Result<Box<dyn super::Transform>, super::OperatorError> {
            Ok(Box::new($new(plan(setup.params, setup.input()?).map_err(setup.params_error())?)))
        }
    };
}

registered_operators!(
    segment_source,
    kafka_source,
    filter,
    project,
    rename,
    key_by,
    window,
    idle,
    proc_time_counter,
    line_sink,
    staged_sink,
    clickhouse_sink,
    kafka_sink,
);

use std::io;
use std::path::{Path, PathBuf};

use thiserror::Error;

use clink_basics::fields::FieldError;
use serde_json::Value as Json;

use crate::checkpoint::commits::{RowDigest, TxnHandle};
use crate::checkpoint::StateSlots;
use crate::defects::Defects;
use crate::timers::{Timer, TimerService};
use crate::value::{Row, Schema, Value};

#[derive(Debug, Error)]
pub enum OperatorError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("state slot {slot:?}: {reason}")]
    State { slot: String, reason: String },
    #[error("{0}")]
    Input(String),
    #[error("{0}")]
    Protocol(String),
}

impl OperatorError {
    pub fn io(path: &Path) -> impl FnOnce(io::Error) -> OperatorError + '_ {
        move |source| OperatorError::Io { path: path.to_path_buf(), source }
    }

    pub fn state(slot: &str, reason: impl ToString) -> OperatorError {
        OperatorError::State { slot: slot.to_string(), reason: reason.to_string() }
    }
}

/// What an operator may touch while it handles one event: where its output
/// rows go, and its timer service (which also tells processing time).
pub struct Context<'a> {
    pub out: &'a mut Vec<Row>,
    pub timers: &'a mut TimerService,
}

impl Context<'_> {
    pub fn emit(&mut self, row: Row) {
        self.out.push(row);
    }
}

pub trait Transform: Send {
    fn on_record(&mut self, row: Row, cx: &mut Context<'_>) -> Result<(), OperatorError>;

    /// A record the caller keeps (replay hands each captured record over
    /// twice). An operator that only reads its records implements this and
    /// has `on_record` call it, so both paths are one; the default copies
    /// the row for `on_record`, which an operator that forwards or keeps its
    /// rows needs.
    fn on_record_ref(&mut self, row: &[Value], cx: &mut Context<'_>) -> Result<(), OperatorError> {
        self.on_record(row.to_vec(), cx)
    }

    /// An event-time timer this operator registered became due.
    fn on_event_timer(&mut self, _timer: Timer, _cx: &mut Context<'_>) -> Result<(), OperatorError> {
        Ok(())
    }

    /// A processing-time timer this operator registered became due.
    fn on_processing_timer(&mut self, _timer: Timer, _cx: &mut Context<'_>) -> Result<(), OperatorError> {
        Ok(())
    }

    /// Adds this operator's state slots (the driver adds the timers).
    fn snapshot(&self, _slots: &mut StateSlots) -> Result<(), OperatorError> {
        Ok(())
    }

    fn restore(&mut self, _slots: &StateSlots) -> Result<(), OperatorError> {
        Ok(())
    }
}

/// One element a source yields.
#[derive(Debug, Clone, PartialEq)]
pub enum SourceItem {
    Record(Row),
    Watermark(i64),
    /// The input's END: every window and timer is to fire, then the job ends.
    End,
    /// No more input for now and no END: the job stops with its state kept.
    Exhausted,
    /// Nothing arrived within the source's wait: the task looks at its
    /// control frames (a checkpoint may be due) and asks again.
    Idle,
}

pub trait Source: Send {
    /// Resumes at a snapshot's position (`None`: from the beginning).
    fn restore(&mut self, slots: Option<&StateSlots>) -> Result<(), OperatorError>;
    /// The watermark a restored source emits before anything else.
    fn restored_watermark(&self) -> Option<i64>;
    fn next_item(&mut self) -> Result<SourceItem, OperatorError>;
    fn snapshot(&self) -> Result<StateSlots, OperatorError>;
}

/// The sink families.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkFamily {
    /// Two-phase with persisted handles re-committed idempotently at open.
    Recoverable,
    /// Two-phase with an external transaction that cannot be committed again
    /// once its owner is gone (a Kafka transaction): commit receipts,
    /// CONFIRMED markers, in-doubt resolution and replay suppression.
    Confirmed,
    /// Writes as rows arrive; a replay may write them again.
    AtLeastOnce,
}

impl SinkFamily {
    pub fn as_str(self) -> &'static str {
        match self {
            SinkFamily::Recoverable => "recoverable",
            SinkFamily::Confirmed => "confirmed",
            SinkFamily::AtLeastOnce => "at_least_once",
        }
    }

    /// Whether the job must restore from a checkpoint whose commits every
    /// sink confirmed (the CONFIRMED restore rule).
    pub fn needs_commit_confirmation(self) -> bool {
        self == SinkFamily::Confirmed
    }

    /// The delivery guarantee a sink of this family gives its destination.
    pub fn guarantee(self) -> &'static str {
        match self {
            SinkFamily::Recoverable | SinkFamily::Confirmed => "exactly_once",
            SinkFamily::AtLeastOnce => "at_least_once",
        }
    }
}

/// What a sink's prepare sealed for a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prepared {
    /// A staged file was sealed; false for an empty interval.
    pub staged: bool,
    /// The staged file is durable now. Only a defective sink seals later (on
    /// the commit, which then reports it), and the trace records the seal
    /// where it really happens.
    pub durable: bool,
    /// The staged file was published already (only a defective sink does:
    /// a commit at the barrier), and the trace records that commit.
    pub published: bool,
}

impl Prepared {
    pub const EMPTY: Prepared = Prepared { staged: false, durable: true, published: false };
    pub const SEALED: Prepared = Prepared { staged: true, durable: true, published: false };
}

pub trait Sink: Send {
    fn family(&self) -> SinkFamily;
    /// Before any row: re-commit what the restored snapshot holds and clear
    /// what it does not (`None`: a fresh start).
    /// Returns how many of the restored handles it re-committed.
    fn open(&mut self, restored: Option<&StateSlots>) -> Result<u64, OperatorError>;
    fn write(&mut self, row: &Row) -> Result<(), OperatorError>;
    /// At the aligned barrier: seal the interval's rows durably.
    fn prepare(&mut self, checkpoint: u64) -> Result<Prepared, OperatorError>;
    fn snapshot(&self) -> Result<StateSlots, OperatorError>;
    /// The checkpoint's snapshot failed: forget what prepare sealed for it.
    fn abort(&mut self, checkpoint: u64) -> Result<(), OperatorError>;
    /// The coordinator's word: publish everything sealed up to `checkpoint`.
    /// Returns the checkpoints whose staged files this commit had to seal
    /// first (always none for a correct sink).
    fn commit(&mut self, checkpoint: u64) -> Result<Vec<u64>, OperatorError>;
    /// The sink's own account of what it did with checkpoint's interval, for
    /// the flight recorder's interval evidence.
    fn evidence(&self, _checkpoint: u64) -> serde_json::Value {
        serde_json::json!({ "family": self.family().as_str() })
    }

    /// The commit-confirmed family's own steps; `None` for the other families.
    fn confirmed(&mut self) -> Option<&mut dyn ConfirmedSink> {
        None
    }
}

/// The steps only a commit-confirmed sink has. The runtime's sink task
/// calls them in the protocol's order (`engine/PROTOCOL.md`) and keeps the
/// durable evidence (receipts, markers) itself; the sink talks to its
/// external system.
pub trait ConfirmedSink {
    /// The handle of the transaction `prepare` sealed for `checkpoint`.
    fn handle(&self, checkpoint: u64) -> Option<TxnHandle>;
    /// The commit's tail, once its receipt is durable: the handle erased
    /// and the next transaction begun.
    fn finish(&mut self, checkpoint: u64) -> Result<(), OperatorError>;
    /// The pre-fence describe of an orphan, before `open`: what the external
    /// system says of it now (nothing is sent that could change it).
    fn describe(&mut self, orphan: &TxnHandle) -> Result<OrphanSeen, OperatorError>;
    /// Ends the orphan, before `open`: an abort under its own identity, and
    /// where that is refused a second look. Never guesses: an outcome the
    /// external system cannot establish is an error.
    fn settle(&mut self, orphan: &TxnHandle) -> Result<OrphanSeen, OperatorError>;
    /// Replay suppression: each of these rows (by digest, a row as many
    /// times as it is listed) is swallowed once when the replay sends it
    /// again, since a receipted commit carries it already.
    fn suppress(&mut self, rows: Vec<RowDigest>);
}

/// What the external system says of a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OrphanSeen {
    /// Committed under the handle's own identity.
    Committed,
    /// Still open: neither committed nor aborted yet.
    Ongoing,
    /// Aborted by this call (the open's abort under its identity).
    AbortedNow,
    /// Not committed and not open: aborted before, expired, superseded by a
    /// later transaction of the id, or never begun.
    NotCommitted,
    /// The system cannot tell (it lacks the request, or its answer decides
    /// nothing): `why` says which.
    Unknown { why: String },
}

/// A probe of the in-doubt walk: whether a handle's transaction committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    Committed,
    /// Not provably committed (ongoing, aborted, superseded, or the system
    /// cannot describe it): `why` says which.
    Refused {
        why: String,
    },
    /// The system could not be reached: the walk may retry.
    Unreachable {
        why: String,
    },
}

/// How the in-doubt walk reads and proves a commit-confirmed sink's handles,
/// without the sink: from its snapshot, and over the wire.
#[derive(Clone, Copy)]
pub struct CommitConfirmation {
    /// The handle a participant's snapshot holds for its checkpoint.
    pub handle: fn(&StateSlots) -> Result<Option<TxnHandle>, OperatorError>,
    /// Asks the external system whether a handle's transaction committed.
    pub probe: fn(&Environment, &TxnHandle) -> Probe,
}

/// What the environment gives operators: where input and output live, the
/// external systems connectors talk to, whether a source waits for more
/// input, the run's stop signal, and which test-only defects are switched on.
#[derive(Debug, Clone, Default)]
pub struct Environment {
    /// The job this run is of (0 where no job runs, as in a replay).
    pub job: u64,
    pub input_dir: PathBuf,
    pub output_dir: PathBuf,
    pub connections: Connections,
    pub defects: Defects,
    /// A source that reaches the end of the input available so far waits for
    /// more (until its END, or a stop) instead of stopping with a savepoint.
    pub follow_input: bool,
    /// Raised when a stop is requested (`clink stop`): a source that honours
    /// it ends its input at its next read, and the job stops with a
    /// savepoint, its state kept.
    pub stop: StopSignal,
    /// The checkpoint this run imported from a dataset (`--restore-from-dir`):
    /// a sink's restored handles up to it were committed by the run that
    /// took it, into that run's output, and are not re-committed here.
    pub imported_checkpoint: Option<u64>,
    /// Which run this is (the checkpoint directory's lineage and this
    /// process's incarnation of it); `None` where no job runs, as in a replay.
    pub run: Option<crate::checkpoint::lineage::RunIdentity>,
    /// What a sink's preflight needs to tell this run's lineage from
    /// another's before anything is written.
    pub lineage: LineageCheck,
}

/// The lineage a run will continue, known before it starts: what the
/// checkpoint directory records (`None`: the run begins a new lineage), and
/// whether output another lineage wrote may be written over
/// (`--allow-other-lineage`, or a restore from another directory's dataset,
/// which continues that run by the user's choice).
#[derive(Debug, Clone, Default)]
pub struct LineageCheck {
    pub on_disk: Option<crate::checkpoint::lineage::LineageId>,
    pub accept_others: bool,
}

/// A stop requested from outside the job, shared by every subtask of a run.
#[derive(Debug, Clone, Default)]
pub struct StopSignal(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl StopSignal {
    pub fn request(&self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn is_requested(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// The external systems a run's connectors reach, as the operator named them
/// on the command line (a job file names topics and tables, never servers).
#[derive(Debug, Clone, Default)]
pub struct Connections {
    /// `host:port[,host:port...]` of the Kafka brokers.
    pub kafka_bootstrap: Option<String>,
    pub clickhouse: Option<clink_connectors::clickhouse::Endpoint>,
}

/// The three shapes of operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperatorKind {
    Source,
    Transform,
    Sink,
}

/// What a constructor is given: the operator's checked params, the rows it
/// receives, and where it runs.
pub struct Setup<'a> {
    pub uid: &'a str,
    pub params: &'a Json,
    pub input: Option<&'a Schema>,
    pub subtask: u32,
    /// The operator's subtasks (a preflight looks at all of them).
    pub parallelism: u32,
    pub env: &'a Environment,
}

impl Setup<'_> {
    /// The input schema; only a source has none, and sources do not ask.
    pub fn input(&self) -> Result<&Schema, OperatorError> {
        self.input.ok_or_else(|| OperatorError::Protocol(format!("operator {:?} has no input schema", self.uid)))
    }

    /// A params error found while building (planning checked them already).
    pub fn params_error(&self) -> impl FnOnce(FieldError) -> OperatorError + '_ {
        move |e| OperatorError::Input(format!("operator {:?} params: {e}", self.uid))
    }
}

/// How an operator type is built, by shape.
#[derive(Clone, Copy)]
pub enum Build {
    Source(fn(&Setup<'_>) -> Result<Box<dyn Source>, OperatorError>),
    Transform(fn(&Setup<'_>) -> Result<Box<dyn Transform>, OperatorError>),
    Sink { family: SinkFamily, build: fn(&Setup<'_>) -> Result<Box<dyn Sink>, OperatorError> },
}

/// How a snapshot of an operator is decoded through its restore path, with no
/// side effect on input or output.
#[derive(Clone, Copy)]
pub enum StateDecoding {
    /// A transform: a fresh instance restores it on a manual clock, timers included.
    Restore,
    /// A source's position or a sink's handles, decoded by the operator's own reader.
    Decode(fn(&StateSlots) -> Result<(), OperatorError>),
    /// The operator keeps nothing in its snapshot.
    Stateless,
}

/// Everything the engine and the harness need to know about one operator type.
#[derive(Clone, Copy)]
pub struct Descriptor {
    pub type_name: &'static str,
    pub build: Build,
    /// Checks params (and the input's columns) and returns the output schema.
    /// Error paths are relative to `params`.
    pub plan: fn(params: &Json, input: Option<&Schema>) -> Result<Schema, FieldError>,
    /// How a participant's snapshot is decoded without side effects.
    pub state: StateDecoding,
    /// The columns of the output rows that name the key each row belongs to
    /// (none: rows are ordered as a whole).
    pub key_columns: fn(params: &Json, output: &Schema) -> Vec<usize>,
    /// What it checks before the job starts (a source's whole input).
    pub preflight: fn(setup: &Setup<'_>) -> Result<(), OperatorError>,
    /// Whether a replay emits exactly what production emitted. False for an
    /// operator that reads the clock while handling a record (registering a
    /// timer at now + delay): replay's clock sits at the last captured fire
    /// there, so rows carrying that reading differ live against replay, while
    /// two replays still agree.
    pub replays_as_live: bool,
    /// A commit-confirmed sink's handles and probe, for the in-doubt walk.
    pub confirmation: Option<CommitConfirmation>,
    /// How its state is re-divided at another parallelism; `None`: a
    /// restore that changes its parallelism while it holds state is refused.
    pub redivision: Option<rescale::Redivision>,
}

impl PartialEq for Descriptor {
    /// A type name is registered once, so it names its descriptor.
    fn eq(&self, other: &Self) -> bool {
        self.type_name == other.type_name
    }
}

impl std::fmt::Debug for Descriptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Descriptor").field("type_name", &self.type_name).field("kind", &self.kind()).finish()
    }
}

impl Descriptor {
    /// A transform whose state, if any, restores through the driver, whose
    /// rows carry no key, and which checks nothing before the job starts.
    pub const fn transform(
        type_name: &'static str,
        build: fn(&Setup<'_>) -> Result<Box<dyn Transform>, OperatorError>,
        plan: fn(&Json, Option<&Schema>) -> Result<Schema, FieldError>,
    ) -> Descriptor {
        Descriptor {
            type_name,
            build: Build::Transform(build),
            plan,
            state: StateDecoding::Restore,
            key_columns: defaults::no_key_columns,
            preflight: defaults::no_preflight,
            replays_as_live: true,
            confirmation: None,
            redivision: None,
        }
    }

    /// A sink of `family` that takes no params.
    pub const fn sink(
        type_name: &'static str,
        family: SinkFamily,
        build: fn(&Setup<'_>) -> Result<Box<dyn Sink>, OperatorError>,
        state: StateDecoding,
    ) -> Descriptor {
        Descriptor {
            type_name,
            build: Build::Sink { family, build },
            plan: defaults::plan_no_params,
            state,
            key_columns: defaults::no_key_columns,
            preflight: defaults::no_preflight,
            replays_as_live: true,
            confirmation: None,
            redivision: None,
        }
    }

    /// The same descriptor, for an operator that reads the clock while it
    /// handles a record: replays agree with each other, not with production.
    pub const fn reads_the_clock_on_records(self) -> Descriptor {
        Descriptor { replays_as_live: false, ..self }
    }

    /// The same descriptor, for an operator whose state a rescale re-divides.
    pub const fn redivided_by(self, redivision: rescale::Redivision) -> Descriptor {
        Descriptor { redivision: Some(redivision), ..self }
    }

    /// The same descriptor, with the key columns its output rows carry.
    pub const fn keyed_by(self, key_columns: fn(&Json, &Schema) -> Vec<usize>) -> Descriptor {
        Descriptor { key_columns, ..self }
    }

    pub fn kind(&self) -> OperatorKind {
        match self.build {
            Build::Source(_) => OperatorKind::Source,
            Build::Transform(_) => OperatorKind::Transform,
            Build::Sink { .. } => OperatorKind::Sink,
        }
    }

    pub fn sink_family(&self) -> Option<SinkFamily> {
        match self.build {
            Build::Sink { family, .. } => Some(family),
            _ => None,
        }
    }
}

/// Descriptor parts most operators share.
pub mod defaults {
    use super::*;

    /// Nothing to check before the job starts.
    pub fn no_preflight(_: &Setup<'_>) -> Result<(), OperatorError> {
        Ok(())
    }

    /// The input schema a transform or sink plans against.
    pub fn input(input: Option<&Schema>) -> Result<&Schema, FieldError> {
        input.ok_or_else(|| FieldError::new("$", "the operator has no input"))
    }

    /// Output rows carry no key.
    pub fn no_key_columns(_: &Json, _: &Schema) -> Vec<usize> {
        Vec::new()
    }

    /// An operator that takes no params.
    pub fn no_params(params: &Json) -> Result<(), FieldError> {
        clink_basics::fields::Fields::object(params, "$")?.only(&[])
    }

    /// The plan of an operator that takes no params and emits no rows (a sink).
    pub fn plan_no_params(params: &Json, _input: Option<&Schema>) -> Result<Schema, FieldError> {
        no_params(params)?;
        Ok(Schema::default())
    }

    /// The columns a `key` param names, first in the output (keyed operators
    /// emit their key columns first).
    pub fn leading_key_columns(params: &Json, _: &Schema) -> Vec<usize> {
        let keys = params.get("key").and_then(|k| k.as_array()).map_or(0, Vec::len);
        (0..keys).collect()
    }
}
