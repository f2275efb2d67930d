//! The protocol trace: one NDJSON line per protocol step the engine takes,
//! written when `CLINK_PROTOCOL_TRACE_DIR` names a directory.
//!
//! Each process writes one file per role, `<role>-<pid>-<start µs>.ndjson`;
//! each line is `{"seq", "ts", "proc", "event", ...fields}` with `seq` from 1
//! without gaps in its file. A line is written with one `write` call before the
//! step's next action, so a kill never leaves a line half-written and never
//! loses a line for a step already taken. The vocabulary is
//! `formal/trace/events.txt`; [`TraceEvent`] must agree with it (a test holds
//! them together). Off, an emit site costs one relaxed atomic load.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value as Json};

pub const ENV_VAR: &str = "CLINK_PROTOCOL_TRACE_DIR";

/// Which part of the process emits an event; each role has its own file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Coordinator,
    Worker,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Coordinator => "coordinator",
            Role::Worker => "worker",
        }
    }

    fn index(self) -> usize {
        match self {
            Role::Coordinator => 0,
            Role::Worker => 1,
        }
    }
}

macro_rules! events {
    ($( $variant:ident => $role:ident [ $($field:literal),* ] $(optional [ $($opt:literal),* ])? ),* $(,)?) => {
        /// Every protocol event the engine emits.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum TraceEvent { $($variant),* }

        impl TraceEvent {
            pub const ALL: &'static [TraceEvent] = &[$(TraceEvent::$variant),*];

            pub fn name(self) -> &'static str {
                match self { $(TraceEvent::$variant => stringify!($variant)),* }
            }

            /// The event's own fields, in the order they are written.
            pub fn fields(self) -> &'static [&'static str] {
                match self { $(TraceEvent::$variant => &[$($field),*]),* }
            }

            /// Fields some lines of the event carry after its own, all
            /// together or none (the vocabulary writes them with `?`).
            pub fn optional_fields(self) -> &'static [&'static str] {
                match self { $(TraceEvent::$variant => &[$($($opt),*)?]),* }
            }

            pub fn role(self) -> Role {
                match self { $(TraceEvent::$variant => Role::$role),* }
            }
        }
    };
}

events! {
    Trigger => Coordinator ["job", "ckpt", "epoch", "kind"],
    DeliverBarrier => Worker ["job", "ckpt", "epoch", "worker", "fenced"],
    SinkPrepare => Worker ["job", "sub", "ckpt", "family", "staged"],
    SubtaskAck => Worker ["job", "sub", "ckpt", "ok"],
    CoordComplete => Coordinator ["job", "ckpt", "outcome", "epoch"],
    WriteCompleted => Coordinator ["job", "ckpt", "epoch"],
    Broadcast => Coordinator ["job", "ckpt", "withheld", "epoch"],
    DeliverCommit => Worker ["job", "sub", "ckpt", "accepted"],
    SinkCommit => Worker ["job", "sub", "ckpt"],
    SinkOpens => Worker ["job", "sub", "family", "restore", "recommitted"] optional ["orphan", "settled"],
    CoordRecovers => Coordinator ["job", "epoch", "completed", "confirmed"],
    Redeploy => Coordinator ["job", "restore", "next"],
    RestartOnError => Coordinator ["job", "ckpt"],
    Placement => Worker ["job", "sub", "worker", "source", "role"],
    JobEnds => Coordinator ["job", "outcome", "epoch"],
    SinkReceipt => Worker ["job", "sub", "ckpt"],
    SinkConfirm => Worker ["job", "sub", "ckpt"],
    WriteConfirmed => Coordinator ["job", "ckpt", "epoch"],
    RestartProceeds => Coordinator ["job", "resolving", "completed", "confirmed"],
    WalkSkips => Coordinator ["job", "ckpt"],
    WalkReadsReceipt => Coordinator ["job", "ckpt", "sub"],
    WalkProbes => Coordinator ["job", "ckpt", "sub", "verdict"],
    WalkRetries => Coordinator ["job", "ckpt", "sub"],
    WalkExhausted => Coordinator ["job", "ckpt"],
    WalkCancelled => Coordinator ["job", "ckpt"],
    WalkDecides => Coordinator ["job", "ckpt", "verdict"],
    WalkFinishes => Coordinator ["job", "confirmed"],
    Rescale => Coordinator ["job", "op", "from", "to", "mode"],
}

/// A field's value.
#[derive(Debug, Clone, PartialEq)]
pub enum TraceValue {
    U64(u64),
    Bool(bool),
    Str(String),
}

impl From<u64> for TraceValue {
    fn from(v: u64) -> Self {
        TraceValue::U64(v)
    }
}

impl From<u32> for TraceValue {
    fn from(v: u32) -> Self {
        TraceValue::U64(u64::from(v))
    }
}

impl From<bool> for TraceValue {
    fn from(v: bool) -> Self {
        TraceValue::Bool(v)
    }
}

impl From<&str> for TraceValue {
    fn from(v: &str) -> Self {
        TraceValue::Str(v.to_string())
    }
}

impl From<&String> for TraceValue {
    fn from(v: &String) -> Self {
        TraceValue::Str(v.clone())
    }
}

impl From<String> for TraceValue {
    fn from(v: String) -> Self {
        TraceValue::Str(v)
    }
}

impl From<TraceValue> for Json {
    fn from(v: TraceValue) -> Json {
        match v {
            TraceValue::U64(n) => Json::from(n),
            TraceValue::Bool(b) => Json::Bool(b),
            TraceValue::Str(s) => Json::String(s),
        }
    }
}

static ENABLED: AtomicBool = AtomicBool::new(false);
static TRACER: OnceLock<Tracer> = OnceLock::new();

struct RoleFile {
    path: PathBuf,
    file: Option<File>,
    seq: u64,
}

struct Tracer {
    pid: u32,
    /// The start stamp in this process's file names.
    start: u64,
    files: [Mutex<RoleFile>; 2],
}

/// Whether tracing is on; the only cost of an emit site when it is off.
#[inline]
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Turns tracing on when `CLINK_PROTOCOL_TRACE_DIR` is set.
pub fn init_from_env() -> io::Result<Option<PathBuf>> {
    match std::env::var_os(ENV_VAR) {
        Some(dir) if !dir.is_empty() => {
            let dir = PathBuf::from(dir);
            init(&dir)?;
            Ok(Some(dir))
        }
        _ => Ok(None),
    }
}

/// Turns tracing on, into `dir` (created if missing). Once per process.
pub fn init(dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let pid = std::process::id();
    let start = now_micros();
    let file = |role: Role| {
        Mutex::new(RoleFile { path: dir.join(format!("{}-{pid}-{start}.ndjson", role.name())), file: None, seq: 0 })
    };
    let tracer = Tracer { pid, start, files: [file(Role::Coordinator), file(Role::Worker)] };
    if TRACER.set(tracer).is_ok() {
        ENABLED.store(true, Ordering::Relaxed);
    }
    Ok(())
}

/// `<pid>-<start>`, the part of this process's trace file names after the
/// role, when tracing is on: what a run's record names, so the verifier can
/// tie trace files to the run that wrote them.
pub fn process_stamp() -> Option<String> {
    TRACER.get().map(|t| format!("{}-{}", t.pid, t.start))
}

fn now_micros() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0)
}

static LAST_TS: AtomicU64 = AtomicU64::new(0);

/// A timestamp strictly above every other this process has stamped: events of
/// one process never share a `ts`, and a step caused by another (a frame sent
/// after its line was written) always carries the larger one, so merging a
/// process's files by `ts` puts every cause before its effect.
fn next_ts() -> u64 {
    let mut last = LAST_TS.load(Ordering::Relaxed);
    loop {
        let ts = now_micros().max(last + 1);
        match LAST_TS.compare_exchange_weak(last, ts, Ordering::AcqRel, Ordering::Relaxed) {
            Ok(_) => return ts,
            Err(seen) => last = seen,
        }
    }
}

/// Writes one event line. Call through [`trace_event!`](crate::trace_event),
/// which skips building the fields when tracing is off.
pub fn emit(event: TraceEvent, fields: Vec<(&'static str, TraceValue)>) {
    let Some(tracer) = TRACER.get() else {
        return;
    };
    debug_assert!(
        {
            let names: Vec<&str> = fields.iter().map(|(k, _)| *k).collect();
            let own = event.fields();
            names == own
                || (names.len() > own.len()
                    && names[..own.len()] == *own
                    && names[own.len()..] == *event.optional_fields())
        },
        "fields of {} disagree with the vocabulary",
        event.name()
    );
    let role = event.role();
    let Ok(mut out) = tracer.files[role.index()].lock() else {
        return;
    };
    out.seq += 1;
    let mut line = Map::new();
    line.insert("seq".into(), Json::from(out.seq));
    line.insert("ts".into(), Json::from(next_ts()));
    line.insert("proc".into(), Json::String(format!("{}:{}", role.name(), tracer.pid)));
    line.insert("event".into(), Json::String(event.name().into()));
    for (k, v) in fields {
        line.insert(k.into(), v.into());
    }
    let mut text = Json::Object(line).to_string();
    text.push('\n');
    if out.file.is_none() {
        out.file = OpenOptions::new().create(true).append(true).open(&out.path).ok();
    }
    if let Some(file) = out.file.as_mut() {
        // One write per line: a kill leaves whole lines only. A trace that
        // cannot be written must not stop the job, so errors are dropped.
        let _ = file.write_all(text.as_bytes());
    }
}

/// Emits a protocol event: `trace_event!(Trigger, job = j, ckpt = c, ...)`.
#[macro_export]
macro_rules! trace_event {
    ($event:ident $(, $field:ident = $value:expr)* $(,)?) => {
        if $crate::trace::enabled() {
            $crate::trace::emit(
                $crate::trace::TraceEvent::$event,
                vec![$((stringify!($field), $crate::trace::TraceValue::from($value))),*],
            );
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An event's name, its own fields and its optional ones.
    type Entry = (String, Vec<String>, Vec<String>);

    /// `formal/trace/events.txt`'s entries, in file order; a field written
    /// with a trailing `?` is optional.
    fn vocabulary() -> Vec<Entry> {
        let text = include_str!("../../formal/trace/events.txt");
        text.lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .map(|l| {
                let parts: Vec<&str> = l.split('|').map(str::trim).collect();
                assert_eq!(parts.len(), 4, "events.txt: {l}");
                let (mut own, mut optional) = (Vec::new(), Vec::new());
                for field in parts[2].split_whitespace() {
                    let name = field.split('(').next().unwrap_or(field);
                    match name.strip_suffix('?') {
                        Some(name) => optional.push(name.to_string()),
                        None => own.push(name.to_string()),
                    }
                }
                (parts[0].to_string(), own, optional)
            })
            .collect()
    }

    fn strings(names: &[&str]) -> Vec<String> {
        names.iter().map(|f| f.to_string()).collect()
    }

    #[test]
    fn the_emitter_and_the_vocabulary_agree() {
        let vocabulary = vocabulary();
        let emitted: Vec<Entry> = TraceEvent::ALL
            .iter()
            .map(|e| (e.name().to_string(), strings(e.fields()), strings(e.optional_fields())))
            .collect();
        assert_eq!(emitted, vocabulary, "engine/src/trace.rs and formal/trace/events.txt disagree");
    }

    #[test]
    fn timestamps_strictly_increase_across_threads() {
        let stamps: Vec<u64> = std::thread::scope(|scope| {
            let handles: Vec<_> =
                (0..4).map(|_| scope.spawn(|| (0..500).map(|_| next_ts()).collect::<Vec<_>>())).collect();
            handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        let distinct: std::collections::BTreeSet<u64> = stamps.iter().copied().collect();
        assert_eq!(distinct.len(), stamps.len(), "two events of one process shared a timestamp");
        let mut last = 0;
        for _ in 0..1000 {
            let ts = next_ts();
            assert!(ts > last);
            last = ts;
        }
    }

    #[test]
    fn every_event_carries_the_job() {
        for e in TraceEvent::ALL {
            assert_eq!(e.fields().first(), Some(&"job"), "{}", e.name());
        }
    }
}
