//! What the `formal` suite and `gates/formal-check` run: every model, every
//! mutant judged against `mutants/expected.txt`, every trace example and
//! recorded trace against its `expected.txt`.

use std::path::{Path, PathBuf};

use super::tlc::{self, Expectation, Outcome, TlcJob};
use super::trace::{self, Verdict};
use super::FormalTools;

/// TLC workers per run (`CLINK_TLC_WORKERS`, default 1: the suite runs trials side by side).
pub fn workers() -> u32 {
    std::env::var("CLINK_TLC_WORKERS").ok().and_then(|v| v.parse().ok()).unwrap_or(1).max(1)
}

/// The `.cfg` names (without extension) of a directory, sorted.
pub fn configs(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.strip_suffix(".cfg").map(str::to_string))
        .collect();
    names.sort();
    names
}

/// Runs TLC on `<dir>/<name>.tla` with `<name>.cfg`, checking for deadlock.
fn run_config(tools: &FormalTools, dir: &Path, name: &str) -> Result<(Outcome, f64), String> {
    let (module, config) = (format!("{name}.tla"), format!("{name}.cfg"));
    let job = TlcJob {
        dir,
        module: &module,
        config: &config,
        library: vec![tools.formal_dir.clone()],
        workers: workers(),
        check_deadlock: true,
    };
    let run = tlc::run(tools, &job)?;
    Ok((tlc::judge(&run), run.elapsed.as_secs_f64()))
}

/// Runs one model; passes only when TLC finds no error.
pub fn check_model(tools: &FormalTools, name: &str) -> Result<Outcome, String> {
    match run_config(tools, &tools.formal_dir.join("models"), name)? {
        (ok @ Outcome::NoError { .. }, _) => Ok(ok),
        (other, seconds) => Err(format!("model {name}: {other} (after {seconds:.1}s)")),
    }
}

/// Runs one mutant and judges it against its expectation, both ways.
pub fn check_mutant(
    tools: &FormalTools,
    mutants_dir: &Path,
    name: &str,
    expected: &Expectation,
) -> Result<Outcome, String> {
    let (outcome, _) = run_config(tools, mutants_dir, name)?;
    tlc::matches(expected, &outcome).map(|()| outcome).map_err(|e| format!("mutant {name}: {e}"))
}

/// An `expected.txt` of a trace: a comment line, then `accepted` or
/// `rejected <k> [<event name>]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceExpectation {
    Accepted,
    Rejected { k: usize, event: Option<String> },
}

pub fn read_trace_expectation(path: &Path) -> Result<TraceExpectation, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let line = text.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with('#')).unwrap_or("");
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        ["accepted"] => Ok(TraceExpectation::Accepted),
        ["rejected", k] | ["rejected", k, _] => Ok(TraceExpectation::Rejected {
            k: k.parse().map_err(|_| format!("{}: {k:?} is not an event number", path.display()))?,
            event: words.get(2).map(|s| s.to_string()),
        }),
        _ => Err(format!("{}: expected `accepted` or `rejected <k> [<event>]`, found {line:?}", path.display())),
    }
}

/// Whether a verdict is the expected one.
pub fn judge_trace(expected: &TraceExpectation, verdict: &Verdict) -> Result<(), String> {
    match (expected, verdict) {
        (TraceExpectation::Accepted, Verdict::Accepted { .. }) => Ok(()),
        (TraceExpectation::Rejected { k, event }, Verdict::Rejected { k: got, event: at }) => {
            let name_ok = event.as_ref().is_none_or(|name| at.contains(&format!("\"event\":\"{name}\"")));
            if *k == *got && name_ok {
                Ok(())
            } else {
                Err(format!("expected rejected at event {k} {event:?}, got {verdict}"))
            }
        }
        _ => Err(format!("expected {expected:?}, got {verdict}")),
    }
}

/// A hand-written example: its generated modules are already in the directory.
pub fn check_example(tools: &FormalTools, dir: &Path) -> Result<Verdict, String> {
    let expected = read_trace_expectation(&dir.join("expected.txt"))?;
    // The events, for naming the diverging one.
    let events = example_events(&dir.join("TraceEvents.tla"));
    let (verdict, _) = trace::validate_modules(tools, dir, &events)?;
    judge_trace(&expected, &verdict).map(|()| verdict)
}

/// The records of a generated TraceEvents.tla, as text, for naming events.
fn example_events(path: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(str::trim)
        .filter(|l| l.starts_with('['))
        .map(|l| {
            let event = l.split("event |-> \"").nth(1).and_then(|r| r.split('"').next()).unwrap_or("?");
            serde_json::json!({ "event": event, "record": l.trim_end_matches(',') })
        })
        .collect()
}

/// A recorded run (per-process `*.ndjson` files) and its `expected.txt`.
pub fn check_recorded(tools: &FormalTools, dir: &Path) -> Result<Verdict, String> {
    let expected = read_trace_expectation(&dir.join("expected.txt"))?;
    let validation = trace::validate_run(tools, dir, None)?;
    judge_trace(&expected, &validation.verdict).map(|()| validation.verdict.clone()).map_err(|e| {
        match &validation.modules_dir {
            Some(kept) => format!("{e} (modules and TLC output kept in {})", kept.display()),
            None => e,
        }
    })
}

/// Directories directly under `root` (sorted).
pub fn subdirs(root: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs
}

/// The events the trace module handles: the keys of its `EventFields`.
pub fn module_events(trace_module: &str) -> Vec<String> {
    let Some(start) = trace_module.find("EventFields ==") else {
        return Vec::new();
    };
    let body = &trace_module[start..];
    let end = body.find(']').map_or(body.len(), |i| i + 1);
    body[..end]
        .lines()
        .filter_map(|l| {
            let l = l.trim().trim_start_matches('[').trim_start_matches(',').trim();
            let name = l.split("|->").next()?.trim();
            (!name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric())).then(|| name.to_string())
        })
        .collect()
}
