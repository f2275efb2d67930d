//! The operators the registry can build, and the interfaces they implement.
//!
//! Three shapes: a [`Source`] produces records and watermarks and owns its input
//! position; a [`Transform`] is handed records, due event-time timers and due
//! processing-time timers by a [`driver::Driver`]; a [`Sink`] writes rows and
//! takes part in the two-phase protocol (prepare at the barrier, commit on the
//! coordinator's word). Operators never talk to the coordinator, never read the
//! wall clock, and never decide when a checkpoint happens: the runtime calls
//! them at the protocol's steps.

pub mod driver;
pub mod filter;
pub mod idle;
pub mod key_by;
pub mod keyed;
pub mod line_sink;
pub mod proc_time_counter;
pub mod project;
pub mod segment_source;
pub mod staged_sink;
pub mod window;

use std::io;
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::checkpoint::StateSlots;
use crate::defects::Defects;
use crate::timers::{Timer, TimerService};
use crate::value::Row;

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
}

pub trait Source: Send {
    /// Resumes at a snapshot's position (`None`: from the beginning).
    fn restore(&mut self, slots: Option<&StateSlots>) -> Result<(), OperatorError>;
    /// The watermark a restored source emits before anything else.
    fn restored_watermark(&self) -> Option<i64>;
    fn next_item(&mut self) -> Result<SourceItem, OperatorError>;
    fn snapshot(&self) -> Result<StateSlots, OperatorError>;
}

/// The two sink families.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkFamily {
    /// Two-phase with persisted handles re-committed idempotently at open.
    Recoverable,
    /// Writes as rows arrive; a replay may write them again.
    AtLeastOnce,
}

impl SinkFamily {
    pub fn as_str(self) -> &'static str {
        match self {
            SinkFamily::Recoverable => "recoverable",
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
}

/// What the environment gives operators: where input and output live, and
/// which test-only defects are switched on.
#[derive(Debug, Clone, Default)]
pub struct Environment {
    pub input_dir: PathBuf,
    pub output_dir: PathBuf,
    pub defects: Defects,
}
