//! The generated TLA+ modules of a merged trace: its constants
//! (`TraceConstants.tla`) and its events as literals (`TraceEvents.tla`).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value as Json;
use thiserror::Error;

use super::merge::MergedTrace;
use super::read::{coordinator_event, TraceLine};
use super::vocabulary::Vocabulary;

/// The sink family of a job (formal/ExactlyOnce.tla's `Family`): every sink of
/// a job is of one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkFamily {
    /// The staged-file sink: handles re-committed at open, the restore from
    /// the newest COMPLETED marker.
    Recoverable,
    /// The transactional Kafka sink: receipts, CONFIRMED markers, the
    /// in-doubt walk, the open that settles its orphan.
    Confirmed,
}

impl SinkFamily {
    /// The family's name on a trace line and in the specification.
    pub fn name(self) -> &'static str {
        match self {
            SinkFamily::Recoverable => "recoverable",
            SinkFamily::Confirmed => "confirmed",
        }
    }

    fn from_name(name: &str) -> Option<SinkFamily> {
        match name {
            "recoverable" => Some(SinkFamily::Recoverable),
            "confirmed" => Some(SinkFamily::Confirmed),
            _ => None,
        }
    }
}

/// Events only a job of the commit-confirmed family writes.
fn confirmed_only(event: &str) -> bool {
    matches!(
        event,
        "SinkReceipt"
            | "SinkConfirm"
            | "WriteConfirmed"
            | "RestartProceeds"
            | "WalkSkips"
            | "WalkReadsReceipt"
            | "WalkProbes"
            | "WalkRetries"
            | "WalkExhausted"
            | "WalkCancelled"
            | "WalkDecides"
            | "WalkFinishes"
    )
}

/// The constants the trace module is instantiated with, read off the trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceConstants {
    pub job: u64,
    /// Every subtask a Placement names.
    pub subtasks: BTreeSet<String>,
    /// The sink subtasks among them.
    pub sinks: BTreeSet<String>,
    pub source: String,
    pub max_ckpt: u64,
    pub deaths: u64,
    pub snap_fails: u64,
    pub restarts: u64,
    /// Subtask errors the trace may hide: one per `RestartOnError`, and one
    /// per `JobEnds` `failed` (a subtask error with no restart budget left).
    pub task_errors: u64,
    /// The epoch the trace's first run carries: 1 when it starts fresh (a
    /// fresh start claims the job's first epoch), 0 when it starts with a
    /// recovery, whose own line names its epoch.
    pub first_epoch: u64,
    /// The family the sinks' `SinkPrepare` and `SinkOpens` lines name.
    pub family: SinkFamily,
    /// Early stops of the in-doubt walk: one per `WalkExhausted` and
    /// `WalkCancelled` line.
    pub walk_stops: u64,
    /// Broker transaction expiries the trace may hide: one per `SinkOpens`
    /// that found its orphan aborted (`settled` `not_committed`).
    pub expiries: u64,
}

/// Why a merged trace gives the trace module no constants.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConstantsError {
    #[error("the trace has no Placement event: which subtasks exist is unknown")]
    NoPlacement,
    #[error("no Placement names a source subtask")]
    NoSource,
    /// The model has one source; `sources` lists the subtasks placed as one.
    #[error("the model has one source; this trace places {sources:?}")]
    Sources { sources: Vec<String> },
    #[error("{file}:{seq}: a Placement without a role")]
    NoRole { file: String, seq: u64 },
    #[error("the trace places no sink subtask: there is nothing to validate")]
    NoSink,
    /// A sink line names a family the specification does not have.
    #[error("{file}:{seq}: sink family {family:?} is neither recoverable nor confirmed")]
    UnknownFamily { file: String, seq: u64, family: String },
    /// The sinks' lines name two families; the engine refuses such a job at
    /// planning, so this is not a run of it.
    #[error("the sinks' lines name two families ({first} and {second}): a job's sinks are of one")]
    MixedFamilies { first: String, second: String },
}

/// The family of a trace's job: the one its sinks' `SinkPrepare` and
/// `SinkOpens` lines name. A trace in which no sink line names one (a run
/// killed before any sink opened) is of the commit-confirmed family when it
/// carries one of that family's own events, of the recoverable one otherwise.
pub fn family(trace: &MergedTrace) -> Result<SinkFamily, ConstantsError> {
    let mut found: Option<SinkFamily> = None;
    for e in trace.events.iter().filter(|e| matches!(e.event(), "SinkPrepare" | "SinkOpens")) {
        let Some(name) = e.str("family") else { continue };
        let this = SinkFamily::from_name(name).ok_or_else(|| ConstantsError::UnknownFamily {
            file: e.file.clone(),
            seq: e.seq,
            family: name.to_string(),
        })?;
        match found {
            Some(f) if f != this => {
                return Err(ConstantsError::MixedFamilies { first: f.name().into(), second: this.name().into() })
            }
            _ => found = Some(this),
        }
    }
    Ok(found.unwrap_or(if trace.events.iter().any(|e| confirmed_only(e.event())) {
        SinkFamily::Confirmed
    } else {
        SinkFamily::Recoverable
    }))
}

/// Reads the constants off a merged trace. The subtasks, the source and the
/// sinks come from the Placement events (their `role`), never from which
/// subtasks happened to act: a sink that never acted is a sink all the same,
/// and its missing acks are found.
pub fn constants(trace: &MergedTrace) -> Result<TraceConstants, ConstantsError> {
    let placements: Vec<&TraceLine> = trace.events.iter().filter(|e| e.event() == "Placement").collect();
    let subtasks: BTreeSet<String> = placements.iter().filter_map(|e| e.str("sub").map(str::to_string)).collect();
    if subtasks.is_empty() {
        return Err(ConstantsError::NoPlacement);
    }
    let sources: BTreeSet<&str> = placements
        .iter()
        .filter(|e| e.fields.get("source") == Some(&Json::Bool(true)))
        .filter_map(|e| e.str("sub"))
        .collect();
    let source = match sources.iter().collect::<Vec<_>>().as_slice() {
        [only] => only.to_string(),
        [] => return Err(ConstantsError::NoSource),
        many => return Err(ConstantsError::Sources { sources: many.iter().map(|s| s.to_string()).collect() }),
    };
    if let Some(bare) = placements.iter().find(|e| e.str("role").is_none()) {
        return Err(ConstantsError::NoRole { file: bare.file.clone(), seq: bare.seq });
    }
    let sinks: BTreeSet<String> = placements
        .iter()
        .filter(|e| e.str("role") == Some("sink"))
        .filter_map(|e| e.str("sub").map(str::to_string))
        .collect();
    if sinks.is_empty() {
        return Err(ConstantsError::NoSink);
    }
    let mut max_ckpt = 1;
    for e in &trace.events {
        for field in ["ckpt", "restore", "completed"] {
            max_ckpt = max_ckpt.max(e.u64(field).unwrap_or(0));
        }
        if e.event() == "Redeploy" {
            max_ckpt = max_ckpt.max(e.u64("next").unwrap_or(1).saturating_sub(1));
        }
    }
    let count = |pred: &dyn Fn(&TraceLine) -> bool| trace.events.iter().filter(|e| pred(e)).count() as u64;
    let starts_with_recovery =
        trace.events.iter().find(|e| coordinator_event(e.event())).is_some_and(|e| e.event() == "CoordRecovers");
    let first_epoch = if starts_with_recovery { 0 } else { 1 };
    let restarts = count(&|e| e.event() == "RestartOnError");
    let failed_ends = count(&|e| e.event() == "JobEnds" && e.str("outcome") == Some("failed"));
    let family = family(trace)?;
    Ok(TraceConstants {
        job: trace.job,
        subtasks,
        sinks: sinks.clone(),
        source,
        max_ckpt,
        deaths: count(&|e| e.event() == "CoordRecovers"),
        snap_fails: count(&|e| {
            e.event() == "SubtaskAck"
                && e.fields.get("ok") == Some(&Json::Bool(false))
                && e.str("sub").is_some_and(|s| sinks.contains(s))
        }),
        restarts,
        task_errors: restarts + failed_ends,
        first_epoch,
        family,
        walk_stops: count(&|e| matches!(e.event(), "WalkExhausted" | "WalkCancelled")),
        expiries: count(&|e| e.event() == "SinkOpens" && e.str("settled") == Some("not_committed")),
    })
}

pub(super) fn tla_string(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// Why a value cannot be written as a TLA+ literal.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LiteralError {
    #[error("field {field}: {value} is not an integer TLC can hold (0 to 2^31)")]
    NotAnInteger { field: String, value: serde_json::Number },
    #[error("field {field}: {value} is not a literal")]
    NotALiteral { field: String, value: Json },
    #[error("unknown event {0:?}")]
    UnknownEvent(String),
}

pub(super) fn tla_value(field: &str, v: &Json) -> Result<String, LiteralError> {
    Ok(match v {
        Json::Bool(b) => if *b { "TRUE" } else { "FALSE" }.to_string(),
        Json::String(s) => tla_string(s),
        Json::Number(n) => match n.as_u64() {
            Some(n) if n < (1 << 31) => n.to_string(),
            _ => return Err(LiteralError::NotAnInteger { field: field.to_string(), value: n.clone() }),
        },
        other => return Err(LiteralError::NotALiteral { field: field.to_string(), value: other.clone() }),
    })
}

fn tla_set(items: &BTreeSet<String>) -> String {
    format!("{{{}}}", items.iter().map(|s| tla_string(s)).collect::<Vec<_>>().join(", "))
}

/// The fields of a line the module reads, as a TLA+ record (the vocabulary's
/// fields, optional ones when present, and pending additions; never `seq`,
/// `ts`, `proc` or a dropped one).
pub(super) fn tla_record(vocabulary: &Vocabulary, e: &TraceLine) -> Result<String, LiteralError> {
    let spec = vocabulary.events.get(e.event()).ok_or_else(|| LiteralError::UnknownEvent(e.event().to_string()))?;
    let mut record = vec![format!("event |-> {}", tla_string(e.event()))];
    for (k, v) in &e.fields {
        let read = spec.read().any(|f| f == k) || spec.added.contains(k) || spec.optional.contains(k);
        if read {
            record.push(format!("{k} |-> {}", tla_value(k, v)?));
        }
    }
    Ok(format!("[{}]", record.join(", ")))
}

/// Why the trace modules were not written.
#[derive(Debug, Error)]
pub enum ModulesError {
    #[error(transparent)]
    Constants(#[from] ConstantsError),
    /// A constant that is no TLA+ literal.
    #[error(transparent)]
    Constant(#[from] LiteralError),
    /// Event `index` (from 1 in the merged trace) has a field that is no literal.
    #[error("event {index}: {error}")]
    Event { index: usize, error: LiteralError },
    #[error("{}: {error}", path.display())]
    Write { path: PathBuf, error: std::io::Error },
}

/// Writes `TraceConstants.tla` and `TraceEvents.tla` into `dir`.
pub fn write_modules(vocabulary: &Vocabulary, dir: &Path, trace: &MergedTrace) -> Result<TraceConstants, ModulesError> {
    let c = constants(trace)?;
    let constants_module = format!(
        "---- MODULE TraceConstants ----\n\
         TraceJob == {}\n\
         TraceSubtasks == {}\n\
         TraceSinks == {}\n\
         TraceSource == {}\n\
         TraceMaxCkpt == {}\n\
         TraceDeaths == {}\n\
         TraceSnapFails == {}\n\
         TraceRestarts == {}\n\
         TraceTaskErrors == {}\n\
         TraceFirstEpoch == {}\n\
         TraceFamily == {}\n\
         TraceWalkStops == {}\n\
         TraceExpiries == {}\n\
         ====\n",
        tla_value("job", &Json::from(c.job))?,
        tla_set(&c.subtasks),
        tla_set(&c.sinks),
        tla_string(&c.source),
        c.max_ckpt,
        c.deaths,
        c.snap_fails,
        c.restarts,
        c.task_errors,
        tla_value("epoch", &Json::from(c.first_epoch))?,
        tla_string(c.family.name()),
        c.walk_stops,
        c.expiries,
    );
    let mut events = String::from("---- MODULE TraceEvents ----\nTrace == <<\n");
    for (i, e) in trace.events.iter().enumerate() {
        let record = tla_record(vocabulary, e).map_err(|error| ModulesError::Event { index: i + 1, error })?;
        let sep = if i + 1 == trace.events.len() { "" } else { "," };
        let _ = writeln!(events, "    {record}{sep}");
    }
    events.push_str("  >>\n====\n");
    for (name, text) in [("TraceConstants.tla", constants_module), ("TraceEvents.tla", events)] {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|error| ModulesError::Write { path, error })?;
    }
    Ok(c)
}
