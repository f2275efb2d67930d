//! Trace validation: a run's per-process protocol trace files merged into one
//! job's sequence of events, written as generated TLA+ modules of literals
//! (`TraceConstants.tla`, `TraceEvents.tla`; the format is formal/README.md's
//! "Generated trace modules"), and checked by TLC with the trace module.
//!
//! The modules are literals so TLC evaluates each event once: validation time
//! grows linearly with the trace's length.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value as Json};

use super::tlc::{self, TlcJob, TlcRun};
use super::FormalTools;

/// One event of a trace file.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceLine {
    pub file: String,
    pub seq: u64,
    pub ts: u64,
    pub fields: Map<String, Json>,
}

impl TraceLine {
    pub fn event(&self) -> &str {
        self.fields.get("event").and_then(Json::as_str).unwrap_or("")
    }

    pub fn u64(&self, field: &str) -> Option<u64> {
        self.fields.get(field).and_then(Json::as_u64)
    }
}

/// Reads every `*.ndjson` file directly in `dir`.
pub fn read_run(dir: &Path) -> Result<Vec<TraceLine>, String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".ndjson") && !n.starts_with('.'))
        .collect();
    names.sort();
    if names.is_empty() {
        return Err(format!("{} holds no trace file (*.ndjson)", dir.display()));
    }
    let mut lines = Vec::new();
    for name in names {
        let text = std::fs::read_to_string(dir.join(&name)).map_err(|e| format!("{name}: {e}"))?;
        for (i, line) in text.lines().enumerate() {
            let v: Json = serde_json::from_str(line).map_err(|e| format!("{name}:{}: {e}", i + 1))?;
            let Json::Object(fields) = v else {
                return Err(format!("{name}:{}: not a JSON object", i + 1));
            };
            let ts = fields.get("ts").and_then(Json::as_u64).ok_or_else(|| format!("{name}:{}: no ts", i + 1))?;
            let seq = fields.get("seq").and_then(Json::as_u64).ok_or_else(|| format!("{name}:{}: no seq", i + 1))?;
            lines.push(TraceLine { file: name.clone(), seq, ts, fields });
        }
    }
    Ok(lines)
}

/// A merged trace of one job.
#[derive(Debug, Clone)]
pub struct MergedTrace {
    pub job: u64,
    pub events: Vec<TraceLine>,
}

/// Keeps one job's events (`job`, or the only job present) and orders them by
/// timestamp; a process stamps strictly increasing timestamps, so within a
/// process the order is the order the steps were taken.
pub fn merge(mut lines: Vec<TraceLine>, job: Option<u64>) -> Result<MergedTrace, String> {
    let jobs: BTreeSet<u64> = lines.iter().filter_map(|l| l.u64("job")).collect();
    let job = match job {
        Some(j) => j,
        None => match jobs.iter().collect::<Vec<_>>().as_slice() {
            [only] => **only,
            [] => return Err("the trace names no job".into()),
            many => return Err(format!("the trace holds jobs {many:?}; name one")),
        },
    };
    lines.retain(|l| l.u64("job") == Some(job));
    lines.sort_by(|a, b| (a.ts, &a.file, a.seq).cmp(&(b.ts, &b.file, b.seq)));
    Ok(MergedTrace { job, events: lines })
}

/// The constants the trace module is instantiated with, read off the trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceConstants {
    pub sinks: BTreeSet<String>,
    pub max_ckpt: u64,
    pub deaths: u64,
    pub snap_fails: u64,
    pub restarts: u64,
}

pub fn constants(trace: &MergedTrace) -> Result<TraceConstants, String> {
    let sink_events = ["SinkPrepare", "DeliverCommit", "SinkCommit", "SinkOpens"];
    let sinks: BTreeSet<String> = trace
        .events
        .iter()
        .filter(|e| sink_events.contains(&e.event()))
        .filter_map(|e| e.fields.get("sub").and_then(Json::as_str).map(str::to_string))
        .collect();
    if sinks.is_empty() {
        return Err("the trace has no sink event: there is nothing to validate".into());
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
    Ok(TraceConstants {
        sinks: sinks.clone(),
        max_ckpt,
        deaths: count(&|e| e.event() == "CoordRecovers"),
        snap_fails: count(&|e| {
            e.event() == "SubtaskAck"
                && e.fields.get("ok") == Some(&Json::Bool(false))
                && e.fields.get("sub").and_then(Json::as_str).is_some_and(|s| sinks.contains(s))
        }),
        restarts: count(&|e| e.event() == "RestartOnError"),
    })
}

fn tla_string(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

fn tla_value(field: &str, v: &Json) -> Result<String, String> {
    Ok(match v {
        Json::Bool(b) => if *b { "TRUE" } else { "FALSE" }.to_string(),
        Json::String(s) => tla_string(s),
        Json::Number(n) => match n.as_u64() {
            Some(n) if n < (1 << 31) => n.to_string(),
            _ => return Err(format!("field {field}: {n} is not an integer TLC can hold (0 to 2^31)")),
        },
        other => return Err(format!("field {field}: {other} is not a literal")),
    })
}

/// Writes `TraceConstants.tla` and `TraceEvents.tla` into `dir`.
pub fn write_modules(dir: &Path, trace: &MergedTrace) -> Result<TraceConstants, String> {
    let c = constants(trace)?;
    let sinks: Vec<String> = c.sinks.iter().map(|s| tla_string(s)).collect();
    let constants_module = format!(
        "---- MODULE TraceConstants ----\nTraceSinks == {{{}}}\nTraceMaxCkpt == {}\nTraceDeaths == {}\nTraceSnapFails == {}\nTraceRestarts == {}\nTraceFamily == \"recoverable\"\n====\n",
        sinks.join(", "),
        c.max_ckpt,
        c.deaths,
        c.snap_fails,
        c.restarts
    );
    let mut events = String::from("---- MODULE TraceEvents ----\nTrace == <<\n");
    for (i, e) in trace.events.iter().enumerate() {
        let mut record = Vec::new();
        for (k, v) in &e.fields {
            // Microsecond timestamps do not fit TLC's integers; the order is the sequence.
            if k == "ts" || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                continue;
            }
            record.push(format!("{k} |-> {}", tla_value(k, v).map_err(|err| format!("event {}: {err}", i + 1))?));
        }
        let sep = if i + 1 == trace.events.len() { "" } else { "," };
        let _ = writeln!(events, "    [{}]{sep}", record.join(", "));
    }
    events.push_str("  >>\n====\n");
    std::fs::write(dir.join("TraceConstants.tla"), constants_module).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("TraceEvents.tla"), events).map_err(|e| e.to_string())?;
    Ok(c)
}

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
    /// TLC did not check (never a verdict).
    Error(String),
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Verdict::Accepted { events } => write!(f, "accepted ({events} events)"),
            Verdict::Rejected { k, event } => write!(f, "rejected at event {k}: {event}"),
            Verdict::Error(e) => write!(f, "error: {e}"),
        }
    }
}

/// Reads TLC's output for a trace run.
pub fn judge(run: &TlcRun, trace: &[Json]) -> Verdict {
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

/// Validates already-generated modules in `modules_dir`.
pub fn validate_modules(tools: &FormalTools, modules_dir: &Path, events: &[Json]) -> Result<(Verdict, TlcRun), String> {
    let trace_dir = tools.formal_dir.join("trace");
    let job = TlcJob {
        dir: &trace_dir,
        module: "TraceExactlyOnce.tla",
        config: "TraceExactlyOnce.cfg",
        library: vec![modules_dir.to_path_buf(), tools.formal_dir.clone()],
        workers: 1,
        check_deadlock: false,
    };
    let run = tlc::run(tools, &job)?;
    Ok((judge(&run, events), run))
}

/// Merges a run's trace files, generates the modules and validates them.
pub fn validate_run(tools: &FormalTools, dir: &Path, job: Option<u64>) -> Result<Validation, String> {
    let trace = merge(read_run(dir)?, job)?;
    validate_trace(tools, &trace)
}

/// The outcome of one validation, with where its modules were written (kept
/// when the trace is rejected, so the TLC output can be read).
#[derive(Debug, Clone)]
pub struct Validation {
    pub verdict: Verdict,
    pub events: usize,
    pub modules_dir: Option<PathBuf>,
    pub seconds: f64,
    pub tlc_output: String,
}

pub fn validate_trace(tools: &FormalTools, trace: &MergedTrace) -> Result<Validation, String> {
    let work = tempfile::Builder::new().prefix("clink-trace-").tempdir().map_err(|e| e.to_string())?;
    write_modules(work.path(), trace)?;
    let events: Vec<Json> = trace.events.iter().map(|e| Json::Object(e.fields.clone())).collect();
    let (verdict, run) = validate_modules(tools, work.path(), &events)?;
    let keep = !matches!(verdict, Verdict::Accepted { .. });
    let modules_dir = if keep {
        let dir = work.keep();
        std::fs::write(dir.join("tlc.out"), &run.output).map_err(|e| e.to_string())?;
        Some(dir)
    } else {
        None
    };
    Ok(Validation {
        verdict,
        events: events.len(),
        modules_dir,
        seconds: run.elapsed.as_secs_f64(),
        tlc_output: run.output,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(file: &str, seq: u64, ts: u64, v: Json) -> TraceLine {
        let Json::Object(fields) = v else { panic!() };
        TraceLine { file: file.into(), seq, ts, fields }
    }

    #[test]
    fn merging_keeps_one_job_in_timestamp_order() {
        let lines = vec![
            line(
                "w",
                1,
                20,
                serde_json::json!({"event": "SinkPrepare", "job": 1, "sub": "op-5-0", "ckpt": 1, "staged": true}),
            ),
            line("c", 1, 10, serde_json::json!({"event": "Trigger", "job": 1, "ckpt": 1})),
            line("c", 2, 15, serde_json::json!({"event": "Trigger", "job": 2, "ckpt": 1})),
        ];
        assert!(merge(lines.clone(), None).is_err(), "two jobs: one must be named");
        let merged = merge(lines, Some(1)).unwrap();
        let names: Vec<&str> = merged.events.iter().map(TraceLine::event).collect();
        assert_eq!(names, vec!["Trigger", "SinkPrepare"]);
        let dir = tempfile::tempdir().unwrap();
        let c = write_modules(dir.path(), &merged).unwrap();
        assert_eq!(c.sinks.into_iter().collect::<Vec<_>>(), vec!["op-5-0"]);
        let events = std::fs::read_to_string(dir.path().join("TraceEvents.tla")).unwrap();
        assert!(events.contains(r#"[ckpt |-> 1, event |-> "Trigger", job |-> 1]"#), "{events}");
        assert!(!events.contains("ts |->"));
    }

    #[test]
    fn strings_are_escaped_and_big_numbers_refused() {
        assert_eq!(tla_string(r#"a"b\c"#), r#""a\"b\\c""#);
        assert!(tla_value("ts", &Json::from(1u64 << 40)).is_err());
    }
}
