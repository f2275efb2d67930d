//! Validating a merged trace with TLC and the trace module, and reading
//! TLC's output into a verdict. A run TLC did not finish is never a verdict.

use std::path::{Path, PathBuf};

use serde_json::Value as Json;
use thiserror::Error;

use super::merge::{merge, MergedTrace};
use super::modules::{write_modules, ModulesError};
use super::read::read_run;
use super::vocabulary::{read_vocabulary, VocabularyError};
use super::{Malformed, CHECKED_MAX_EVENTS};
use crate::tlc::{self, TlcError, TlcJob, TlcRun};
use crate::FormalTools;

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

/// Why a validation could not run: the trace is malformed or the vocabulary
/// does not read (bad input: exit 2), or the tools did not finish (TLC, the
/// scratch space: nothing established, exit 3).
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
    /// The run is outside what the specification models: skipped and
    /// counted, never judged.
    #[error("{0}")]
    OutOfScope(OutOfScope),
}

/// A run the specification does not model, by its scope markers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutOfScope {
    /// The scope marker's event name (`Rescale`).
    pub marker: &'static str,
    /// How many lines of the run carry it.
    pub count: usize,
}

impl std::fmt::Display for OutOfScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "not judged: the run carries {} {} scope marker(s), a restore at another parallelism; the specification \
             keys a sink by its subtask index and fixes the set for a run (formal/RescaleParentMapping.tla models \
             the rescale's own rule)",
            self.count, self.marker
        )
    }
}

/// Whether a merged run is outside the specification's scope: THE test,
/// used by `trace-validate` and by incident-verify's protocol.conformance.
pub fn out_of_scope(trace: &MergedTrace) -> Option<OutOfScope> {
    let count = trace.events.iter().filter(|e| e.event() == "Rescale").count();
    (count > 0).then_some(OutOfScope { marker: "Rescale", count })
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
    if let Some(scope) = out_of_scope(trace) {
        return Err(ValidationError::OutOfScope(scope));
    }
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
