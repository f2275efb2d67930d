//! What the `formal` suite and `gates/formal-check` run: every model, every
//! mutant judged against `mutants/expected.txt`, every trace example and
//! recorded trace against its `expected.txt`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use thiserror::Error;

use super::tlc::{self, Expectation, Mismatch, Outcome, TlcError, TlcJob};
use super::trace::{self, ValidationError, Verdict};
use super::FormalTools;

/// Why a model, a mutant or a trace of the suite did not come out as it must.
#[derive(Debug, Error)]
pub enum SuiteError {
    /// TLC did not run to its end (could not start, or timed out).
    #[error(transparent)]
    Tlc(#[from] TlcError),
    /// A model TLC did not pass.
    #[error("model {name}: {outcome} (after {seconds:.1}s)")]
    Model { name: String, outcome: Outcome, seconds: f64 },
    /// A model passed with another search than `formal/models/expected.txt` pins.
    #[error("model {name}: {mismatch}")]
    ModelPin { name: String, mismatch: super::pins::PinMismatch },
    /// A model has no line in `formal/models/expected.txt`.
    #[error("model {name} has no pinned search in formal/models/expected.txt")]
    ModelUnpinned { name: String },
    /// A mutant's outcome is not its expected verdict.
    #[error("mutant {name}: {mismatch}")]
    Mutant { name: String, mismatch: Mismatch },
    /// A file of a mutant (`file`, in the mutants directory) does not read.
    #[error("{file}: {error}")]
    MutantFile { file: String, error: std::io::Error },
    #[error("mutant {name}: {error}")]
    Unguardable { name: String, error: UnguardError },
    /// The scratch directory of an unguarded mutant.
    #[error("{0}")]
    Scratch(std::io::Error),
    /// Without its guard, the mutant is still accepted.
    #[error(
        "mutant {name} without its guard {guard} is still accepted ({outcome}, {seconds:.1}s): the guard is not what makes it harmless"
    )]
    StillAccepted { name: String, guard: String, outcome: Outcome, seconds: f64 },
    #[error("mutant {name} without its guard {guard}: TLC did not check: {outcome}")]
    UnguardedNotChecked { name: String, guard: String, outcome: Outcome },
    #[error(transparent)]
    TraceExpectation(#[from] TraceExpectationError),
    #[error(transparent)]
    Validation(#[from] ValidationError),
    /// A trace's verdict is not its `expected.txt`; `ties` and the kept
    /// modules' directory are said with it.
    #[error("{mismatch}{}{}", ties_note(.ties), kept_note(.kept))]
    Trace { mismatch: Box<TraceMismatch>, ties: Vec<String>, kept: Option<PathBuf> },
}

fn ties_note(ties: &[String]) -> String {
    if ties.is_empty() {
        String::new()
    } else {
        format!(" (timestamp ties: {})", ties.join("; "))
    }
}

fn kept_note(kept: &Option<PathBuf>) -> String {
    kept.as_ref().map(|k| format!(" (modules and TLC output kept in {})", k.display())).unwrap_or_default()
}

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

/// Runs TLC on `<dir>/<name>.tla` with `<name>.cfg`, checking for deadlock
/// when `check_deadlock`.
fn run_config(tools: &FormalTools, dir: &Path, name: &str, check_deadlock: bool) -> Result<(Outcome, f64), TlcError> {
    let (module, config) = (format!("{name}.tla"), format!("{name}.cfg"));
    let job = TlcJob {
        dir,
        module: &module,
        config: &config,
        library: vec![tools.formal_dir.clone()],
        workers: workers(),
        check_deadlock,
        timeout: tlc::timeout(),
    };
    let run = tlc::run(tools, &job)?;
    Ok((tlc::judge(&run), run.elapsed.as_secs_f64()))
}

/// Runs one model; passes only when TLC finds no error.
pub fn check_model(tools: &FormalTools, name: &str) -> Result<Outcome, SuiteError> {
    match run_config(tools, &tools.formal_dir.join("models"), name, true)? {
        (ok @ Outcome::NoError { .. }, _) => Ok(ok),
        (outcome, seconds) => Err(SuiteError::Model { name: name.to_string(), outcome, seconds }),
    }
}

/// Runs one model and holds its search to its pin: it passes only when TLC
/// finds no error with exactly the pinned distinct states and depth.
pub fn check_model_pinned(
    tools: &FormalTools,
    name: &str,
    pin: Option<&super::pins::ModelPin>,
) -> Result<Outcome, SuiteError> {
    let pin = pin.ok_or_else(|| SuiteError::ModelUnpinned { name: name.to_string() })?;
    let outcome = check_model(tools, name)?;
    super::pins::matches_pin(pin, &outcome)
        .map(|()| outcome)
        .map_err(|mismatch| SuiteError::ModelPin { name: name.to_string(), mismatch })
}

/// Runs one mutant and judges it against its expectation, both ways. A
/// mutant expected to break a temporal property runs without the deadlock
/// check, so that the property (not a deadlock the defect also leads to) is
/// what refutes it; every other mutant runs with it.
pub fn check_mutant(
    tools: &FormalTools,
    mutants_dir: &Path,
    name: &str,
    expected: &Expectation,
) -> Result<Outcome, SuiteError> {
    let check_deadlock = !matches!(expected, Expectation::Liveness(_));
    let (outcome, _) = run_config(tools, mutants_dir, name, check_deadlock)?;
    tlc::matches(expected, &outcome)
        .map(|()| outcome)
        .map_err(|mismatch| SuiteError::Mutant { name: name.to_string(), mismatch })
}

/// The configuration of a mutant with one guard taken out: `Unguarded` names
/// it (the specification then drops the rule that establishes it), and the
/// guard's own invariant is no longer checked. `Err` when the configuration
/// does not check the guard or has no `Unguarded = {}` to change.
pub fn unguarded_config(cfg: &str, guard: &str) -> Result<String, UnguardError> {
    let mut out = String::new();
    let (mut replaced, mut removed, mut in_invariants) = (false, false, false);
    for line in cfg.lines() {
        let t = line.trim();
        if t.starts_with("INVARIANT") {
            in_invariants = true;
        } else if !line.starts_with(' ') && !line.starts_with('\\') {
            in_invariants = false;
        }
        if t.replace(' ', "") == "Unguarded={}" {
            out.push_str(&format!("    Unguarded = {{\"{guard}\"}}\n"));
            replaced = true;
            continue;
        }
        if in_invariants && t == guard {
            removed = true;
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    match (replaced, removed) {
        (true, true) => Ok(out),
        (false, _) => Err(UnguardError::NoUnguardedLine),
        (_, false) => Err(UnguardError::GuardNotChecked { guard: guard.to_string() }),
    }
}

/// Why a mutant's guard cannot be taken out of its configuration.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum UnguardError {
    #[error("the configuration has no `Unguarded = {{}}` line")]
    NoUnguardedLine,
    #[error("the configuration does not check the guard {guard}: it cannot be what makes the mutant harmless")]
    GuardNotChecked { guard: String },
}

/// The other way of an accepted mutant: with its guard taken out, TLC must
/// refute it (a violated invariant, a deadlock or a temporal property), which
/// shows that the guard, and nothing else, made it harmless.
pub fn check_mutant_unguarded(
    tools: &FormalTools,
    mutants_dir: &Path,
    name: &str,
    guard: &str,
) -> Result<Outcome, SuiteError> {
    let file = |ext: &str| format!("{name}.{ext}");
    let cfg_text = std::fs::read_to_string(mutants_dir.join(file("cfg")))
        .map_err(|error| SuiteError::MutantFile { file: file("cfg"), error })?;
    let cfg = unguarded_config(&cfg_text, guard)
        .map_err(|error| SuiteError::Unguardable { name: name.to_string(), error })?;
    let work = tempfile::Builder::new().prefix("clink-unguarded-").tempdir().map_err(SuiteError::Scratch)?;
    std::fs::write(work.path().join(file("cfg")), cfg).map_err(SuiteError::Scratch)?;
    std::fs::copy(mutants_dir.join(file("tla")), work.path().join(file("tla")))
        .map_err(|error| SuiteError::MutantFile { file: file("tla"), error })?;
    let (outcome, seconds) = run_config(tools, work.path(), name, true)?;
    let (name, guard) = (name.to_string(), guard.to_string());
    match &outcome {
        Outcome::InvariantViolated(_) | Outcome::Deadlock | Outcome::LivenessViolated => Ok(outcome),
        Outcome::NoError { .. } => Err(SuiteError::StillAccepted { name, guard, outcome, seconds }),
        Outcome::Error { .. } => Err(SuiteError::UnguardedNotChecked { name, guard, outcome }),
    }
}

/// An `expected.txt` of a trace: comment lines, then `accepted`,
/// `rejected <k> [<event name>]` or `violated <Invariant>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceExpectation {
    Accepted,
    Rejected { k: usize, event: Option<String> },
    Violated { invariant: String },
}

/// Why a trace's `expected.txt` does not read.
#[derive(Debug, Error)]
pub enum TraceExpectationError {
    #[error("{}: {error}", path.display())]
    Read { path: PathBuf, error: std::io::Error },
    #[error("{}: {k:?} is not an event number", path.display())]
    NotAnEventNumber { path: PathBuf, k: String },
    /// `line` is the first line that is neither empty nor a comment.
    #[error(
        "{}: expected `accepted`, `rejected <k> [<event>]` or `violated <Invariant>`, found {line:?}",
        path.display()
    )]
    NotAVerdict { path: PathBuf, line: String },
}

pub fn read_trace_expectation(path: &Path) -> Result<TraceExpectation, TraceExpectationError> {
    let text = std::fs::read_to_string(path)
        .map_err(|error| TraceExpectationError::Read { path: path.to_path_buf(), error })?;
    let line = text.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with('#')).unwrap_or("");
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        ["accepted"] => Ok(TraceExpectation::Accepted),
        ["rejected", k] | ["rejected", k, _] => Ok(TraceExpectation::Rejected {
            k: k.parse()
                .map_err(|_| TraceExpectationError::NotAnEventNumber { path: path.to_path_buf(), k: k.to_string() })?,
            event: words.get(2).map(|s| s.to_string()),
        }),
        ["violated", inv] => Ok(TraceExpectation::Violated { invariant: inv.to_string() }),
        _ => Err(TraceExpectationError::NotAVerdict { path: path.to_path_buf(), line: line.to_string() }),
    }
}

/// How a trace's verdict missed its expectation.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum TraceMismatch {
    /// Rejected, but at another event (number or name) than expected.
    #[error("expected rejected at event {k} {event:?}, got {verdict}")]
    RejectedElsewhere { k: usize, event: Option<String>, verdict: Verdict },
    #[error("expected {expected:?}, got {verdict}")]
    Other { expected: TraceExpectation, verdict: Verdict },
}

/// Whether a verdict is the expected one.
pub fn judge_trace(expected: &TraceExpectation, verdict: &Verdict) -> Result<(), TraceMismatch> {
    match (expected, verdict) {
        (TraceExpectation::Accepted, Verdict::Accepted { .. }) => Ok(()),
        (TraceExpectation::Rejected { k, event }, Verdict::Rejected { k: got, event: at }) => {
            let name_ok = event.as_ref().is_none_or(|name| at.contains(&format!("\"event\":\"{name}\"")));
            if *k == *got && name_ok {
                Ok(())
            } else {
                Err(TraceMismatch::RejectedElsewhere { k: *k, event: event.clone(), verdict: verdict.clone() })
            }
        }
        (TraceExpectation::Violated { invariant }, Verdict::Violated { invariant: got, .. }) if invariant == got => {
            Ok(())
        }
        _ => Err(TraceMismatch::Other { expected: expected.clone(), verdict: verdict.clone() }),
    }
}

/// A hand-written example (`formal/trace/examples/<name>/`: trace files and
/// `expected.txt`), validated exactly as a recorded run is.
pub fn check_example(tools: &FormalTools, dir: &Path) -> Result<Verdict, SuiteError> {
    check_recorded(tools, dir)
}

/// A recorded run (per-process `*.ndjson` files) and its `expected.txt`.
pub fn check_recorded(tools: &FormalTools, dir: &Path) -> Result<Verdict, SuiteError> {
    let expected = read_trace_expectation(&dir.join("expected.txt"))?;
    let validation = trace::validate_run(tools, dir, None)?;
    judge_trace(&expected, &validation.verdict).map(|()| validation.verdict.clone()).map_err(|mismatch| {
        SuiteError::Trace {
            mismatch: Box::new(mismatch),
            ties: validation.ties.clone(),
            kept: validation.modules_dir.clone(),
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

/// A record literal of the trace module, `Name == [Event |-> {"f", ...}, ...]`,
/// as event -> fields: `EventFields` (the fields each event must carry) or
/// `OptionalFields` (pending additions).
pub fn module_record(trace_module: &str, name: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut out = BTreeMap::new();
    let Some(start) = trace_module.find(&format!("{name} ==")) else {
        return out;
    };
    let body = &trace_module[start..];
    let end = body.find("]\n").map_or(body.len(), |i| i + 1);
    for l in body[..end].lines() {
        let l = l.trim().trim_start_matches(&format!("{name} ==")).trim().trim_start_matches('[').trim();
        let Some((event, fields)) = l.split_once("|->") else {
            continue;
        };
        let event = event.trim();
        if event.is_empty() || !event.chars().all(|c| c.is_ascii_alphanumeric()) {
            continue;
        }
        let fields = fields.trim().trim_end_matches(',').trim_end_matches(']').trim();
        let fields = fields.trim_start_matches('{').trim_end_matches('}');
        let set = fields.split(',').map(|f| f.trim().trim_matches('"').to_string()).filter(|f| !f.is_empty()).collect();
        out.insert(event.to_string(), set);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guard_is_taken_out_only_where_the_configuration_checks_it() {
        let cfg = "CONSTANTS\n    Unguarded = {}\nINVARIANT\n    NoLoss\n    Guard\n";
        let out = unguarded_config(cfg, "Guard").unwrap();
        assert!(out.contains("Unguarded = {\"Guard\"}") && !out.contains("    Guard\n"), "{out}");
        assert_eq!(unguarded_config("INVARIANT\n    Guard\n", "Guard"), Err(UnguardError::NoUnguardedLine));
        let e = unguarded_config(cfg, "Other").unwrap_err();
        assert_eq!(e, UnguardError::GuardNotChecked { guard: "Other".into() });
        assert!(e.to_string().contains("does not check the guard Other"), "{e}");
    }

    #[test]
    fn trace_expectations_read_and_judge_with_reasons() {
        let scratch = tempfile::tempdir().unwrap();
        let path = scratch.path().join("expected.txt");
        assert!(matches!(read_trace_expectation(&path), Err(TraceExpectationError::Read { .. })));
        std::fs::write(&path, "# c\nrejected x\n").unwrap();
        assert!(
            matches!(read_trace_expectation(&path), Err(TraceExpectationError::NotAnEventNumber { k, .. }) if k == "x")
        );
        std::fs::write(&path, "refuted\n").unwrap();
        assert!(
            matches!(read_trace_expectation(&path), Err(TraceExpectationError::NotAVerdict { line, .. }) if line == "refuted")
        );
        std::fs::write(&path, "rejected 3 Broadcast\n").unwrap();
        let expected = read_trace_expectation(&path).unwrap();
        let at = |k: usize, name: &str| Verdict::Rejected { k, event: format!("{{\"event\":\"{name}\"}}") };
        assert_eq!(judge_trace(&expected, &at(3, "Broadcast")), Ok(()));
        let elsewhere = judge_trace(&expected, &at(4, "Broadcast")).unwrap_err();
        assert!(matches!(elsewhere, TraceMismatch::RejectedElsewhere { k: 3, .. }), "{elsewhere}");
        let accepted = judge_trace(&expected, &Verdict::Accepted { events: 9 }).unwrap_err();
        assert!(accepted.to_string().ends_with("got accepted (9 events)"), "{accepted}");
    }
}
