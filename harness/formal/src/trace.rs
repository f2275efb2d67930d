//! Trace validation: a run's per-process protocol trace files read strictly
//! against the vocabulary (`formal/trace/events.txt`), merged into one job's
//! sequence of events, written as generated TLA+ modules of literals
//! (`TraceConstants.tla`, `TraceEvents.tla`; the format is formal/README.md's
//! "Generated trace modules"), and checked by TLC with the trace module.
//!
//! Reading refuses, never skips: a file whose `seq` does not run from 1 without
//! a gap in file order, whose `ts` does not strictly increase with it, whose
//! name or `proc` is not the engine's, or a line without `job`, of an unknown
//! event, missing a field, carrying a field the vocabulary does not list, or
//! of the wrong type, makes the whole trace malformed ([`Malformed`]). Merging
//! orders the files' lines by `ts`; two lines of one process never share a
//! stamp (one clock), and lines of different processes that do are reported as
//! ties.
//!
//! The modules are literals so TLC evaluates each event once: validation time
//! grows linearly with the trace's length.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value as Json};
use thiserror::Error;

use super::tlc::{self, TlcError, TlcJob, TlcRun};
use super::FormalTools;

/// Traces of at most this many events are also checked against the
/// specification's correctness invariants (`TraceExactlyOnceChecked.cfg`).
pub const CHECKED_MAX_EVENTS: usize = 400;

/// A trace that cannot be read as the engine writes it: refused (exit 2), never
/// validated in part.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("malformed trace: {0}")]
pub struct Malformed(pub String);

impl From<Malformed> for String {
    fn from(m: Malformed) -> String {
        m.to_string()
    }
}

// ---------------------------------------------------------------------------
// The vocabulary

/// The JSON type of a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldType {
    Number,
    Text,
    Bool,
}

/// The type of every field name the vocabulary may use.
pub fn field_type(name: &str) -> Option<FieldType> {
    Some(match name {
        "job" | "ckpt" | "epoch" | "worker" | "restore" | "next" | "completed" | "confirmed" | "recommitted" => {
            FieldType::Number
        }
        "sub" | "family" | "kind" | "outcome" | "role" | "cause" => FieldType::Text,
        "fenced" | "withheld" | "accepted" | "ok" | "staged" | "source" => FieldType::Bool,
        _ => return None,
    })
}

/// One event of the vocabulary: the fields a line must carry, and those it may.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventSpec {
    /// Fields every line of the event carries (the engine emits them today).
    pub fields: Vec<String>,
    /// Fields a pending change adds: read when present.
    pub added: Vec<String>,
    /// Fields a pending change drops: tolerated, not read.
    pub dropped: Vec<String>,
    /// The whole event is a pending addition (the engine does not emit it yet).
    pub pending: bool,
}

impl EventSpec {
    /// The fields the trace module reads: the vocabulary's, less the dropped.
    pub fn read(&self) -> impl Iterator<Item = &String> {
        self.fields.iter().filter(|f| !self.dropped.contains(f))
    }
}

/// `formal/trace/events.txt`, parsed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Vocabulary {
    pub events: BTreeMap<String, EventSpec>,
    /// Every pending change, in short (`add event JobEnds`, `Placement: add role`).
    pub pending: Vec<String>,
}

fn field_names(spec: &str) -> Vec<String> {
    spec.split_whitespace().map(|f| f.split('(').next().unwrap_or(f).to_string()).collect()
}

/// Why `formal/trace/events.txt` does not read.
#[derive(Debug, Error)]
pub enum VocabularyError {
    #[error("{}: {error}", path.display())]
    Read { path: PathBuf, error: std::io::Error },
    /// Line `line` (from 1), whose text is `text`, is wrong as `problem` says.
    #[error("events.txt:{line}: {problem}: {text:?}")]
    Line { line: usize, text: String, problem: VocabularyProblem },
}

/// What is wrong with a line of the vocabulary.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum VocabularyProblem {
    #[error("not an event name")]
    NotAnEventName,
    #[error("field {0} has no known type")]
    UnknownFieldType(String),
    #[error("the first field must be job")]
    JobNotFirst,
    #[error("listed twice")]
    ListedTwice,
    #[error("expected NAME | emitter | fields | step")]
    NotAnEntry,
    /// A pending field change names an event the vocabulary does not list.
    #[error("no such event")]
    NoSuchEvent,
    #[error("{event} has no field {field} to drop")]
    NoFieldToDrop { event: String, field: String },
}

/// Parses the vocabulary: entries `NAME | emitter | fields | step`, and the
/// pending changes `#+ NAME | emitter | fields | step` (a new event),
/// `#+ NAME | field(values)` (a new field), `#- NAME | field` (a field to drop).
pub fn parse_vocabulary(text: &str) -> Result<Vocabulary, VocabularyError> {
    let mut v = Vocabulary::default();
    let mut later = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let at = |problem: VocabularyProblem| VocabularyError::Line { line: i + 1, text: raw.to_string(), problem };
        let (mark, line) = if let Some(rest) = raw.strip_prefix("#+") {
            ('+', rest)
        } else if let Some(rest) = raw.strip_prefix("#-") {
            ('-', rest)
        } else if raw.starts_with('#') || raw.trim().is_empty() {
            continue;
        } else {
            (' ', raw)
        };
        let parts: Vec<&str> = line.split('|').map(str::trim).collect();
        let name = parts[0].to_string();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(at(VocabularyProblem::NotAnEventName));
        }
        match (mark, parts.len()) {
            (' ' | '+', 4) => {
                let fields = field_names(parts[2]);
                if let Some(bad) = fields.iter().find(|f| field_type(f).is_none()) {
                    return Err(at(VocabularyProblem::UnknownFieldType(bad.clone())));
                }
                if fields.first().map(String::as_str) != Some("job") {
                    return Err(at(VocabularyProblem::JobNotFirst));
                }
                let spec = EventSpec { fields, pending: mark == '+', ..EventSpec::default() };
                if v.events.insert(name.clone(), spec).is_some() {
                    return Err(at(VocabularyProblem::ListedTwice));
                }
                if mark == '+' {
                    v.pending.push(format!("add event {name}"));
                }
            }
            ('+' | '-', 2) => later.push((mark, name, field_names(parts[1]), i + 1, raw)),
            _ => return Err(at(VocabularyProblem::NotAnEntry)),
        }
    }
    for (mark, name, fields, line, raw) in later {
        let at = |problem: VocabularyProblem| VocabularyError::Line { line, text: raw.to_string(), problem };
        let spec = v.events.get_mut(&name).ok_or_else(|| at(VocabularyProblem::NoSuchEvent))?;
        for f in fields {
            if field_type(&f).is_none() {
                return Err(at(VocabularyProblem::UnknownFieldType(f)));
            }
            if mark == '+' {
                spec.added.push(f.clone());
                v.pending.push(format!("{name}: add {f}"));
            } else {
                if !spec.fields.contains(&f) {
                    return Err(at(VocabularyProblem::NoFieldToDrop { event: name.clone(), field: f }));
                }
                spec.dropped.push(f.clone());
                v.pending.push(format!("{name}: drop {f}"));
            }
        }
    }
    Ok(v)
}

/// Reads `<formal>/trace/events.txt`.
pub fn read_vocabulary(formal_dir: &Path) -> Result<Vocabulary, VocabularyError> {
    let path = formal_dir.join("trace/events.txt");
    let text = std::fs::read_to_string(&path).map_err(|error| VocabularyError::Read { path: path.clone(), error })?;
    parse_vocabulary(&text)
}

// ---------------------------------------------------------------------------
// Reading a run

/// One event of a trace file.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceLine {
    pub file: String,
    pub seq: u64,
    pub ts: u64,
    /// The process that wrote it (`<pid>-<start>` of its file name).
    pub process: String,
    pub fields: Map<String, Json>,
}

impl TraceLine {
    pub fn event(&self) -> &str {
        self.fields.get("event").and_then(Json::as_str).unwrap_or("")
    }

    pub fn u64(&self, field: &str) -> Option<u64> {
        self.fields.get(field).and_then(Json::as_u64)
    }

    pub fn str(&self, field: &str) -> Option<&str> {
        self.fields.get(field).and_then(Json::as_str)
    }
}

/// The role, pid and start stamp of a trace file name `<role>-<pid>-<start>.ndjson`.
fn parse_file_name(name: &str) -> Option<(&str, &str, &str)> {
    let stem = name.strip_suffix(".ndjson")?;
    let mut parts = stem.split('-');
    let (role, pid, start) = (parts.next()?, parts.next()?, parts.next()?);
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (parts.next().is_none() && matches!(role, "coordinator" | "worker") && digits(pid) && digits(start))
        .then_some((role, pid, start))
}

/// Why a line does not fit the vocabulary.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LineError {
    #[error("no event")]
    NoEvent,
    #[error("unknown event {0:?}")]
    UnknownEvent(String),
    #[error("{event} without job")]
    NoJob { event: String },
    #[error("{event} without {field}")]
    Missing { event: String, field: String },
    #[error("{event} has a field {field} the vocabulary does not list")]
    Unlisted { event: String, field: String },
    /// `expected` is the field's type, `None` for a field of no known type.
    #[error("field {field} is {value}, not a {expected:?}")]
    WrongType { field: String, value: Json, expected: Option<FieldType> },
}

fn check_value(field: &str, v: &Json) -> Result<(), LineError> {
    let ok = match field_type(field) {
        Some(FieldType::Number) => v.as_u64().is_some(),
        Some(FieldType::Text) => v.is_string(),
        Some(FieldType::Bool) => v.is_boolean(),
        None => false,
    };
    if ok {
        Ok(())
    } else {
        Err(LineError::WrongType { field: field.to_string(), value: v.clone(), expected: field_type(field) })
    }
}

/// Checks one line against the vocabulary: a known event with every field it
/// must carry, no field it may not, each of its type.
pub fn check_line(vocabulary: &Vocabulary, fields: &Map<String, Json>) -> Result<(), LineError> {
    let event = fields.get("event").and_then(Json::as_str).ok_or(LineError::NoEvent)?;
    let spec = vocabulary.events.get(event).ok_or_else(|| LineError::UnknownEvent(event.to_string()))?;
    if !fields.contains_key("job") {
        return Err(LineError::NoJob { event: event.to_string() });
    }
    for f in &spec.fields {
        if !spec.dropped.contains(f) && !fields.contains_key(f) {
            return Err(LineError::Missing { event: event.to_string(), field: f.clone() });
        }
    }
    for (k, v) in fields {
        if matches!(k.as_str(), "seq" | "ts" | "proc" | "event") {
            continue;
        }
        if !spec.fields.contains(k) && !spec.added.contains(k) {
            return Err(LineError::Unlisted { event: event.to_string(), field: k.clone() });
        }
        check_value(k, v)?;
    }
    Ok(())
}

/// Reads and checks one trace file's text.
pub fn read_file(vocabulary: &Vocabulary, name: &str, text: &str) -> Result<Vec<TraceLine>, Malformed> {
    let bad = |line: usize, why: String| Malformed(format!("{name}:{line}: {why}"));
    let (role, pid, start) = parse_file_name(name)
        .ok_or_else(|| Malformed(format!("{name}: not a trace file name (<role>-<pid>-<start>.ndjson)")))?;
    let proc = format!("{role}:{pid}");
    let mut lines = Vec::new();
    let mut last_ts = None;
    if !text.is_empty() && !text.ends_with('\n') {
        return Err(bad(text.lines().count(), "the last line is not terminated (a line cut short)".into()));
    }
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let v: Json = serde_json::from_str(line).map_err(|e| bad(n, format!("not JSON: {e}")))?;
        let Json::Object(fields) = v else {
            return Err(bad(n, "not a JSON object".into()));
        };
        let seq = fields.get("seq").and_then(Json::as_u64).ok_or_else(|| bad(n, "no seq".into()))?;
        let ts = fields.get("ts").and_then(Json::as_u64).ok_or_else(|| bad(n, "no ts".into()))?;
        if seq != n as u64 {
            return Err(bad(n, format!("seq {seq} where {n} is due: a line missing, added or moved")));
        }
        if last_ts.is_some_and(|t| ts <= t) {
            return Err(bad(n, format!("ts {ts} does not increase (the line before has {})", last_ts.unwrap_or(0))));
        }
        last_ts = Some(ts);
        if fields.get("proc").and_then(Json::as_str) != Some(proc.as_str()) {
            return Err(bad(n, format!("proc is {:?}, the file is {proc:?}'s", fields.get("proc"))));
        }
        check_line(vocabulary, &fields).map_err(|e| bad(n, e.to_string()))?;
        let event = fields.get("event").and_then(Json::as_str).unwrap_or("");
        if coordinator_event(event) != (role == "coordinator") {
            return Err(bad(n, format!("a {} event in a {role} file", fields["event"])));
        }
        lines.push(TraceLine { file: name.to_string(), seq, ts, process: format!("{pid}-{start}"), fields });
    }
    Ok(lines)
}

/// Whether an event is the coordinator's (otherwise a worker's).
pub fn coordinator_event(event: &str) -> bool {
    matches!(
        event,
        "Trigger"
            | "CoordComplete"
            | "WriteCompleted"
            | "Broadcast"
            | "CoordRecovers"
            | "Redeploy"
            | "RestartOnError"
            | "JobEnds"
    )
}

/// Reads every `*.ndjson` file directly in `dir` (and nothing else there).
pub fn read_run(vocabulary: &Vocabulary, dir: &Path) -> Result<Vec<TraceLine>, Malformed> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| Malformed(format!("{}: {e}", dir.display())))?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".ndjson"))
        .collect();
    names.sort();
    if names.is_empty() {
        return Err(Malformed(format!("{} holds no trace file (*.ndjson)", dir.display())));
    }
    let mut lines = Vec::new();
    for name in names {
        let text = std::fs::read_to_string(dir.join(&name)).map_err(|e| Malformed(format!("{name}: {e}")))?;
        lines.extend(read_file(vocabulary, &name, &text)?);
    }
    Ok(lines)
}

// ---------------------------------------------------------------------------
// Merging

/// A merged trace of one job.
#[derive(Debug, Clone)]
pub struct MergedTrace {
    pub job: u64,
    pub events: Vec<TraceLine>,
    /// Lines of different processes stamped with the same `ts`: their order
    /// (by file name) is not the clock's.
    pub ties: Vec<String>,
}

/// Keeps one job's events (`job`, or the only job present) and orders them by
/// timestamp. A process stamps strictly increasing timestamps across its
/// files, so two of its lines sharing one is malformed; lines of two
/// processes sharing one are put in file-name order and reported as a tie.
pub fn merge(mut lines: Vec<TraceLine>, job: Option<u64>) -> Result<MergedTrace, Malformed> {
    let jobs: BTreeSet<u64> = lines.iter().filter_map(|l| l.u64("job")).collect();
    let job = match job {
        Some(j) if jobs.contains(&j) => j,
        Some(j) => return Err(Malformed(format!("the trace holds no event of job {j} (jobs {jobs:?})"))),
        None => match jobs.iter().collect::<Vec<_>>().as_slice() {
            [only] => **only,
            [] => return Err(Malformed("the trace names no job".into())),
            many => return Err(Malformed(format!("the trace holds jobs {many:?}; name one"))),
        },
    };
    lines.sort_by(|a, b| (a.ts, &a.file, a.seq).cmp(&(b.ts, &b.file, b.seq)));
    let mut ties = Vec::new();
    for pair in lines.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        if a.ts == b.ts {
            if a.process == b.process {
                return Err(Malformed(format!(
                    "{}:{} and {}:{} share ts {}, but one process never stamps two lines alike",
                    a.file, a.seq, b.file, b.seq, a.ts
                )));
            }
            ties.push(format!("{}:{} and {}:{} share ts {}", a.file, a.seq, b.file, b.seq, a.ts));
        }
    }
    lines.retain(|l| l.u64("job") == Some(job));
    Ok(MergedTrace { job, events: lines, ties })
}

// ---------------------------------------------------------------------------
// Constants and modules

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
    })
}

fn tla_string(s: &str) -> String {
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

fn tla_value(field: &str, v: &Json) -> Result<String, LiteralError> {
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
/// fields and pending additions; never `seq`, `ts`, `proc` or a dropped one).
fn tla_record(vocabulary: &Vocabulary, e: &TraceLine) -> Result<String, LiteralError> {
    let spec = vocabulary.events.get(e.event()).ok_or_else(|| LiteralError::UnknownEvent(e.event().to_string()))?;
    let mut record = vec![format!("event |-> {}", tla_string(e.event()))];
    for (k, v) in &e.fields {
        let read = spec.read().any(|f| f == k) || spec.added.contains(k);
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
         TraceFamily == \"recoverable\"\n\
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

// ---------------------------------------------------------------------------
// Verdicts

/// What trace validation concluded.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Accepted {
        events: usize,
    },
    /// Event `k` (1-based in the merged trace) is the first no step could produce.
    Rejected {
        k: usize,
        event: String,
    },
    /// A state the trace reaches (after event `k`) breaks a correctness
    /// invariant of the specification (short traces only).
    Violated {
        invariant: String,
        k: usize,
    },
    /// TLC did not check (never a verdict).
    Error(String),
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Verdict::Accepted { events } => write!(f, "accepted ({events} events)"),
            Verdict::Rejected { k, event } => write!(f, "rejected at event {k}: {event}"),
            Verdict::Violated { invariant, k } => write!(f, "invariant {invariant} violated after event {k}"),
            Verdict::Error(e) => write!(f, "error: {e}"),
        }
    }
}

/// Reads TLC's output for a trace run.
pub fn judge(run: &TlcRun, trace: &[Json]) -> Verdict {
    if run.exit == Some(12) {
        let invariant = run.output.lines().find_map(|l| {
            l.trim().strip_prefix("Error: Invariant ")?.strip_suffix(" is violated.").map(str::to_string)
        });
        // The counterexample's last state names how many events it had produced.
        let k = run
            .output
            .lines()
            .rev()
            .find_map(|l| l.trim().strip_prefix("/\\ pos = ").and_then(|n| n.trim().parse().ok()));
        return match (invariant, k) {
            (Some(invariant), Some(k)) => Verdict::Violated { invariant, k },
            _ => Verdict::Error("TLC exit 12 without a named invariant and a state".into()),
        };
    }
    if run.exit != Some(0) {
        let first = run.output.lines().find(|l| l.contains("rror")).unwrap_or("").trim();
        return Verdict::Error(format!("TLC exit {:?}: {first}", run.exit));
    }
    let mut progress = 0usize;
    for line in run.output.lines() {
        let l = line.trim();
        if let Some(n) = l.strip_prefix("<<\"trace-accepted\", ").and_then(|r| r.strip_suffix(">>")) {
            return Verdict::Accepted { events: n.trim().parse().unwrap_or(trace.len()) };
        }
        if let Some(n) = l.strip_prefix("<<\"trace-progress\", ").and_then(|r| r.strip_suffix(">>")) {
            progress = progress.max(n.trim().parse().unwrap_or(0));
        }
    }
    let k = progress + 1;
    let event = trace.get(k - 1).map(|e| e.to_string()).unwrap_or_else(|| "(past the end)".into());
    Verdict::Rejected { k, event }
}

/// Validates already-generated modules in `modules_dir`; `checked` also checks
/// the correctness invariants on every state the trace reaches.
pub fn validate_modules(
    tools: &FormalTools,
    modules_dir: &Path,
    events: &[Json],
    checked: bool,
) -> Result<(Verdict, TlcRun), TlcError> {
    let trace_dir = tools.formal_dir.join("trace");
    let job = TlcJob {
        dir: &trace_dir,
        module: "TraceExactlyOnce.tla",
        config: if checked { "TraceExactlyOnceChecked.cfg" } else { "TraceExactlyOnce.cfg" },
        library: vec![modules_dir.to_path_buf(), tools.formal_dir.clone()],
        workers: 1,
        check_deadlock: false,
        timeout: tlc::timeout(),
    };
    let run = tlc::run(tools, &job)?;
    Ok((judge(&run, events), run))
}

/// Why a validation could not run: the trace is malformed (exit 2), or the
/// tools failed (exit 2 as well, with a different message).
#[derive(Debug, Error)]
pub enum ValidationError {
    #[error(transparent)]
    Malformed(Malformed),
    /// The vocabulary of the formal directory does not read.
    #[error(transparent)]
    Vocabulary(VocabularyError),
    /// TLC did not run to its end (it could not start, or timed out).
    #[error(transparent)]
    Tlc(TlcError),
    /// The scratch directory of the modules, or the kept TLC output.
    #[error("{what}: {error}")]
    Scratch { what: String, error: std::io::Error },
}

impl From<ValidationError> for String {
    fn from(e: ValidationError) -> String {
        e.to_string()
    }
}

/// Reads and merges a run's trace files (malformed is an error, never a skip).
pub fn read_and_merge(tools: &FormalTools, dir: &Path, job: Option<u64>) -> Result<MergedTrace, ValidationError> {
    let vocabulary = read_vocabulary(&tools.formal_dir).map_err(ValidationError::Vocabulary)?;
    let lines = read_run(&vocabulary, dir).map_err(ValidationError::Malformed)?;
    merge(lines, job).map_err(ValidationError::Malformed)
}

/// Merges a run's trace files, generates the modules and validates them.
pub fn validate_run(tools: &FormalTools, dir: &Path, job: Option<u64>) -> Result<Validation, ValidationError> {
    let trace = read_and_merge(tools, dir, job)?;
    validate_trace(tools, &trace)
}

/// The outcome of one validation, with where its modules were written (kept
/// when the trace is not accepted, so the TLC output can be read).
#[derive(Debug, Clone)]
pub struct Validation {
    pub verdict: Verdict,
    pub events: usize,
    /// Whether the correctness invariants were checked too.
    pub checked: bool,
    pub ties: Vec<String>,
    pub modules_dir: Option<PathBuf>,
    pub seconds: f64,
    pub tlc_output: String,
}

pub fn validate_trace(tools: &FormalTools, trace: &MergedTrace) -> Result<Validation, ValidationError> {
    let vocabulary = read_vocabulary(&tools.formal_dir).map_err(ValidationError::Vocabulary)?;
    let work = tempfile::Builder::new()
        .prefix("clink-trace-")
        .tempdir()
        .map_err(|error| ValidationError::Scratch { what: "a directory for the trace modules".into(), error })?;
    write_modules(&vocabulary, work.path(), trace).map_err(|e| match e {
        ModulesError::Write { path, error } => ValidationError::Scratch { what: path.display().to_string(), error },
        e => ValidationError::Malformed(Malformed(e.to_string())),
    })?;
    let events: Vec<Json> = trace.events.iter().map(|e| Json::Object(e.fields.clone())).collect();
    let checked = events.len() <= CHECKED_MAX_EVENTS;
    let (verdict, run) = validate_modules(tools, work.path(), &events, checked).map_err(ValidationError::Tlc)?;
    let keep = !matches!(verdict, Verdict::Accepted { .. });
    let modules_dir = if keep {
        let dir = work.keep();
        let out = dir.join("tlc.out");
        std::fs::write(&out, &run.output)
            .map_err(|error| ValidationError::Scratch { what: out.display().to_string(), error })?;
        Some(dir)
    } else {
        None
    };
    Ok(Validation {
        verdict,
        events: events.len(),
        checked,
        ties: trace.ties.clone(),
        modules_dir,
        seconds: run.elapsed.as_secs_f64(),
        tlc_output: run.output,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocabulary() -> Vocabulary {
        let text =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../formal/trace/events.txt")).unwrap();
        parse_vocabulary(&text).unwrap()
    }

    /// One file's text from (event JSON) lines, stamped as the engine does:
    /// seq from 1, ts increasing, proc matching the file name.
    fn file(proc: &str, first_ts: u64, events: &[Json]) -> String {
        let mut text = String::new();
        for (i, e) in events.iter().enumerate() {
            let mut line = Map::new();
            line.insert("seq".into(), Json::from(i as u64 + 1));
            line.insert("ts".into(), Json::from(first_ts + 10 * i as u64));
            line.insert("proc".into(), Json::from(proc));
            line.extend(e.as_object().unwrap().clone());
            text.push_str(&Json::Object(line).to_string());
            text.push('\n');
        }
        text
    }

    fn trigger(ckpt: u64) -> Json {
        serde_json::json!({"event": "Trigger", "job": 1, "ckpt": ckpt, "epoch": 1, "kind": "periodic"})
    }

    fn placement(sub: &str, role: &str) -> Json {
        serde_json::json!({"event": "Placement", "job": 1, "sub": sub, "worker": 1, "source": role == "source", "role": role})
    }

    fn read(name: &str, text: &str) -> Result<Vec<TraceLine>, Malformed> {
        read_file(&vocabulary(), name, text)
    }

    fn malformed(name: &str, text: &str, why: &str) {
        match read(name, text) {
            Err(Malformed(m)) => assert!(m.contains(why), "{m:?} should say {why:?}"),
            Ok(_) => panic!("accepted, should be malformed ({why}):\n{text}"),
        }
    }

    const C: &str = "coordinator-7-100.ndjson";

    #[test]
    fn a_well_formed_file_reads() {
        let lines = read(C, &file("coordinator:7", 10, &[trigger(1), trigger(2)])).unwrap();
        assert_eq!(lines.iter().map(|l| l.seq).collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(lines[0].process, "7-100");
    }

    #[test]
    fn seq_runs_from_one_without_a_gap_in_file_order() {
        let text = file("coordinator:7", 10, &[trigger(1), trigger(2), trigger(3)]);
        let lines: Vec<&str> = text.lines().collect();
        // A line dropped: seq 1, 3.
        malformed(C, &format!("{}\n{}\n", lines[0], lines[2]), "seq 3 where 2 is due");
        // Not from 1.
        malformed(C, &format!("{}\n", lines[1]), "seq 2 where 1 is due");
        // Two lines swapped, each keeping its own seq and ts.
        malformed(C, &format!("{}\n{}\n{}\n", lines[1], lines[0], lines[2]), "seq 2 where 1 is due");
    }

    #[test]
    fn ts_strictly_increases_with_seq() {
        let text = file("coordinator:7", 10, &[trigger(1), trigger(2)]).replace("\"ts\":20", "\"ts\":10");
        malformed(C, &text, "ts 10 does not increase");
        let text = file("coordinator:7", 10, &[trigger(1), trigger(2)]).replace("\"ts\":20", "\"ts\":5");
        malformed(C, &text, "ts 5 does not increase");
    }

    #[test]
    fn a_line_without_job_or_of_another_format_is_malformed_never_skipped() {
        let no_job = serde_json::json!({"event": "Trigger", "ckpt": 1, "epoch": 0, "kind": "periodic"});
        malformed(C, &file("coordinator:7", 10, &[trigger(1), no_job]), "Trigger without job");
        let unknown = serde_json::json!({"event": "Teleport", "job": 1});
        malformed(C, &file("coordinator:7", 10, &[unknown]), "unknown event \"Teleport\"");
        let missing = serde_json::json!({"event": "Trigger", "job": 1, "ckpt": 1, "epoch": 0});
        malformed(C, &file("coordinator:7", 10, &[missing]), "Trigger without kind");
        let extra = serde_json::json!({"event": "Trigger", "job": 1, "ckpt": 1, "epoch": 0, "kind": "final", "x": 1});
        malformed(C, &file("coordinator:7", 10, &[extra]), "field x the vocabulary does not list");
        let typed = serde_json::json!({"event": "Trigger", "job": 1, "ckpt": "1", "epoch": 0, "kind": "final"});
        malformed(C, &file("coordinator:7", 10, &[typed]), "field ckpt is \"1\"");
        malformed(C, "{\"seq\":1,\"ts\":1,\"proc\":\"coordinator:7\",\n", "not JSON");
        malformed(C, "[1]\n", "not a JSON object");
        let text = file("coordinator:7", 10, &[trigger(1)]);
        malformed(C, text.trim_end(), "not terminated");
    }

    #[test]
    fn the_file_name_and_proc_are_the_engines() {
        malformed("events.ndjson", &file("coordinator:7", 10, &[trigger(1)]), "not a trace file name");
        malformed(C, &file("coordinator:8", 10, &[trigger(1)]), "the file is \"coordinator:7\"'s");
        malformed("worker-7-100.ndjson", &file("worker:7", 10, &[trigger(1)]), "in a worker file");
    }

    /// A vocabulary with pending changes, as events.txt writes them while the
    /// engine has not made them yet (the real one has none today).
    const PENDING: &str = "Trigger | c | job ckpt epoch kind | Trigger\n\
        RestartOnError | c | job ckpt cause | RestartOnError\n\
        Placement | w | job sub worker source | none\n\
        #+ JobEnds | c | job outcome epoch | none\n\
        #+ Placement | role(source/transform/sink)\n\
        #- RestartOnError | cause\n";

    #[test]
    fn pending_changes_are_read_when_present() {
        let v = parse_vocabulary(PENDING).unwrap();
        assert_eq!(v.pending, vec!["add event JobEnds", "Placement: add role", "RestartOnError: drop cause"]);
        let read = |name: &str, text: &str| read_file(&v, name, text);
        let bare = serde_json::json!({"event": "Placement", "job": 1, "sub": "op-1-0", "worker": 1, "source": true});
        let role = serde_json::json!({"event": "Placement", "job": 1, "sub": "op-1-0", "worker": 1, "source": true, "role": "source"});
        let cause = serde_json::json!({"event": "RestartOnError", "job": 1, "ckpt": 0, "cause": "op-3-1 failed"});
        let no_cause = serde_json::json!({"event": "RestartOnError", "job": 1, "ckpt": 0});
        // A field to be added is optional until the engine writes it; one to be
        // dropped is tolerated until it stops.
        read("worker-7-100.ndjson", &file("worker:7", 10, &[bare, role.clone()])).unwrap();
        let lines = read(C, &file("coordinator:7", 10, &[cause, no_cause])).unwrap();
        // A field the engine is to drop is not written for TLC; one it is to add is.
        assert_eq!(tla_record(&v, &lines[0]).unwrap(), r#"[event |-> "RestartOnError", ckpt |-> 0, job |-> 1]"#);
        let placed = read("worker-7-100.ndjson", &file("worker:7", 10, &[role])).unwrap();
        assert!(tla_record(&v, &placed[0]).unwrap().contains(r#"role |-> "source""#));
    }

    #[test]
    fn the_real_vocabulary_requires_role_and_refuses_cause() {
        let role_missing =
            serde_json::json!({"event": "Placement", "job": 1, "sub": "op-1-0", "worker": 1, "source": true});
        malformed("worker-7-100.ndjson", &file("worker:7", 10, &[role_missing]), "Placement without role");
        let cause = serde_json::json!({"event": "RestartOnError", "job": 1, "ckpt": 0, "cause": "boom"});
        malformed(C, &file("coordinator:7", 10, &[cause]), "field cause the vocabulary does not list");
        let ends = serde_json::json!({"event": "JobEnds", "job": 1, "outcome": "finished", "epoch": 1});
        let lines = read(C, &file("coordinator:7", 10, &[ends])).unwrap();
        assert_eq!(
            tla_record(&vocabulary(), &lines[0]).unwrap(),
            r#"[event |-> "JobEnds", epoch |-> 1, job |-> 1, outcome |-> "finished"]"#
        );
    }

    fn lines(name: &str, proc: &str, first_ts: u64, events: &[Json]) -> Vec<TraceLine> {
        read(name, &file(proc, first_ts, events)).unwrap()
    }

    #[test]
    fn merging_orders_by_ts_and_reports_ties_between_processes() {
        let mut all = lines(C, "coordinator:7", 10, &[trigger(1), trigger(2)]); // ts 10, 20
        all.extend(lines("worker-7-100.ndjson", "worker:7", 15, &[placement("op-1-0", "source")])); // ts 15
        all.extend(lines("worker-9-200.ndjson", "worker:9", 20, &[placement("op-3-0", "sink")])); // ts 20: a tie
        let merged = merge(all.clone(), None).unwrap();
        let order: Vec<(u64, &str)> = merged.events.iter().map(|l| (l.ts, l.file.as_str())).collect();
        assert_eq!(
            order,
            vec![(10, C), (15, "worker-7-100.ndjson"), (20, C), (20, "worker-9-200.ndjson")],
            "by ts, a tie by file name"
        );
        assert_eq!(merged.ties.len(), 1, "{:?}", merged.ties);
        assert!(merged.ties[0].contains("share ts 20"));
        // Two files of one process never share a stamp: one clock.
        let mut same = lines(C, "coordinator:7", 10, &[trigger(1)]);
        same.extend(lines("worker-7-100.ndjson", "worker:7", 10, &[placement("op-1-0", "source")]));
        let err = merge(same, None).unwrap_err();
        assert!(err.0.contains("one process never stamps two lines alike"), "{err}");
    }

    #[test]
    fn merging_keeps_one_job_and_refuses_an_unknown_one() {
        let mut all = lines(C, "coordinator:7", 10, &[trigger(1)]);
        let other = serde_json::json!({"event": "Trigger", "job": 2, "ckpt": 1, "epoch": 0, "kind": "periodic"});
        all.extend(lines("coordinator-9-200.ndjson", "coordinator:9", 11, &[other]));
        assert!(merge(all.clone(), None).is_err(), "two jobs: one must be named");
        assert_eq!(merge(all.clone(), Some(2)).unwrap().events.len(), 1);
        assert!(merge(all, Some(3)).is_err());
    }

    fn merged(events: &[Json]) -> MergedTrace {
        let (coord, work): (Vec<Json>, Vec<Json>) =
            events.iter().cloned().partition(|e| coordinator_event(e["event"].as_str().unwrap()));
        let mut all = lines(C, "coordinator:7", 1, &coord);
        all.extend(lines("worker-7-100.ndjson", "worker:7", 5, &work));
        merge(all, None).unwrap()
    }

    #[test]
    fn the_sinks_come_from_the_placements_never_from_who_acted() {
        let opens = |sub: &str| serde_json::json!({"event": "SinkOpens", "job": 1, "sub": sub, "family": "recoverable", "restore": 0, "recommitted": 0});
        // op-3-1 is placed as a sink and never acts: it is a sink all the same;
        // op-2-0 is a transform whatever it does.
        let m = merged(&[
            placement("op-1-0", "source"),
            placement("op-2-0", "transform"),
            placement("op-3-0", "sink"),
            placement("op-3-1", "sink"),
            opens("op-3-0"),
            trigger(1),
        ]);
        let c = constants(&m).unwrap();
        assert_eq!(c.sinks.iter().map(String::as_str).collect::<Vec<_>>(), vec!["op-3-0", "op-3-1"]);
        assert_eq!(c.source, "op-1-0");
        assert_eq!(c.subtasks.len(), 4);
        // A sink that acted is not a sink unless its Placement says so.
        let m = merged(&[placement("op-1-0", "source"), placement("op-4-0", "sink"), opens("op-3-0"), trigger(1)]);
        assert_eq!(constants(&m).unwrap().sinks.into_iter().collect::<Vec<_>>(), vec!["op-4-0"]);
        // No Placement: nothing to validate.
        assert!(constants(&merged(&[trigger(1)])).is_err());
        // No sink placed: nothing to validate.
        assert!(constants(&merged(&[placement("op-1-0", "source"), placement("op-2-0", "transform")])).is_err());
        // Two sources: outside the model.
        let two = merged(&[placement("op-1-0", "source"), placement("op-1-1", "source"), placement("op-3-0", "sink")]);
        assert!(constants(&two).is_err());
    }

    #[test]
    fn restarts_failed_ends_and_the_first_epoch_are_read_off_the_trace() {
        let restart = serde_json::json!({"event": "RestartOnError", "job": 1, "ckpt": 0});
        let failed = serde_json::json!({"event": "JobEnds", "job": 1, "outcome": "failed", "epoch": 1});
        let recovers =
            serde_json::json!({"event": "CoordRecovers", "job": 1, "epoch": 2, "completed": 0, "confirmed": 0});
        let placed = [placement("op-1-0", "source"), placement("op-3-0", "sink")];
        let fresh = merged(&[placed[0].clone(), placed[1].clone(), trigger(1), restart, failed.clone()]);
        let c = constants(&fresh).unwrap();
        assert_eq!((c.restarts, c.task_errors, c.first_epoch), (1, 2, 1), "a fresh start claims epoch 1");
        let resumed = merged(&[recovers, placed[0].clone(), placed[1].clone(), trigger(1), failed]);
        let c = constants(&resumed).unwrap();
        assert_eq!((c.restarts, c.task_errors, c.first_epoch, c.deaths), (0, 1, 0, 1), "a recovery names its own");
    }

    #[test]
    fn the_modules_are_literals_of_what_the_module_reads() {
        let m = merged(&[
            placement("op-1-0", "source"),
            placement("op-5-0", "sink"),
            serde_json::json!({"event": "SinkOpens", "job": 1, "sub": "op-5-0", "family": "recoverable", "restore": 0, "recommitted": 0}),
            trigger(1),
        ]);
        let dir = tempfile::tempdir().unwrap();
        let c = write_modules(&vocabulary(), dir.path(), &m).unwrap();
        assert_eq!(c.sinks.into_iter().collect::<Vec<_>>(), vec!["op-5-0"]);
        let events = std::fs::read_to_string(dir.path().join("TraceEvents.tla")).unwrap();
        assert!(
            events.contains(r#"[event |-> "Trigger", ckpt |-> 1, epoch |-> 1, job |-> 1, kind |-> "periodic"]"#),
            "{events}"
        );
        assert!(!events.contains("ts |->") && !events.contains("seq |->") && !events.contains("proc |->"));
        let constants = std::fs::read_to_string(dir.path().join("TraceConstants.tla")).unwrap();
        assert!(constants.contains("TraceSinks == {\"op-5-0\"}") && constants.contains("TraceSource == \"op-1-0\""));
        assert!(constants.contains("TraceFirstEpoch == 1\n") && constants.contains("TraceTaskErrors == 0\n"));
        assert!(events.contains(r#"role |-> "sink""#), "the role is written for the module: {events}");
    }

    #[test]
    fn tlc_output_is_read_into_a_verdict() {
        let run =
            |exit: i32, output: &str| TlcRun { exit: Some(exit), output: output.into(), elapsed: Default::default() };
        let events = vec![trigger(1), trigger(2), trigger(3)];
        let accepted = "<<\"trace-progress\", 1>>\n<<\"trace-progress\", 3>>\n<<\"trace-accepted\", 3>>\n";
        assert_eq!(judge(&run(0, accepted), &events), Verdict::Accepted { events: 3 });
        let rejected = "<<\"trace-progress\", 1>>\n<<\"trace-progress\", 2>>\n";
        assert!(matches!(judge(&run(0, rejected), &events), Verdict::Rejected { k: 3, .. }));
        assert!(matches!(judge(&run(0, ""), &events), Verdict::Rejected { k: 1, .. }));
        let violated = "Error: Invariant NoLoss is violated.\nState 1:\n/\\ pos = 0\nState 2:\n/\\ pos = 2\n";
        assert_eq!(judge(&run(12, violated), &events), Verdict::Violated { invariant: "NoLoss".into(), k: 2 });
        assert!(matches!(judge(&run(12, "no invariant named"), &events), Verdict::Error(_)));
        assert!(matches!(judge(&run(10, "Assumption line 3 is false"), &events), Verdict::Error(_)));
    }

    #[test]
    fn strings_are_escaped_and_big_numbers_refused() {
        assert_eq!(tla_string(r#"a"b\c"#), r#""a\"b\\c""#);
        assert!(tla_value("ts", &Json::from(1u64 << 40)).is_err());
    }

    #[test]
    fn the_vocabulary_has_no_pending_change_left_and_parses_strictly() {
        let v = vocabulary();
        assert!(v.pending.is_empty(), "{:?}", v.pending);
        assert!(!v.events["JobEnds"].pending);
        assert_eq!(v.events["JobEnds"].fields, vec!["job", "outcome", "epoch"]);
        assert_eq!(v.events["Placement"].fields, vec!["job", "sub", "worker", "source", "role"]);
        assert_eq!(v.events["RestartOnError"].fields, vec!["job", "ckpt"]);
        assert!(parse_vocabulary("Trigger | c | ckpt job | s\n").is_err(), "job first");
        assert!(parse_vocabulary("Trigger | c | job nope | s\n").is_err(), "unknown field type");
        assert!(parse_vocabulary("#- Trigger | kind\n").is_err(), "no such event");
        assert!(parse_vocabulary("Trigger | c | job ckpt | s\n#- Trigger | kind\n").is_err(), "no such field");
    }
}
