//! What the `formal` suite and `gates/formal-check` run: every model, every
//! mutant judged against `mutants/expected.txt`, every trace example and
//! recorded trace against its `expected.txt`.

use std::collections::{BTreeMap, BTreeSet};
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

/// The configuration of a mutant with one guard taken out: `Unguarded` names
/// it (the specification then drops the rule that establishes it), and the
/// guard's own invariant is no longer checked. `Err` when the configuration
/// does not check the guard or has no `Unguarded = {}` to change.
pub fn unguarded_config(cfg: &str, guard: &str) -> Result<String, String> {
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
        (false, _) => Err("the configuration has no `Unguarded = {}` line".into()),
        (_, false) => Err(format!(
            "the configuration does not check the guard {guard}: it cannot be what makes the mutant harmless"
        )),
    }
}

/// The other way of an accepted mutant: with its guard taken out, TLC must
/// refute it (a violated invariant, a deadlock or a temporal property), which
/// shows that the guard, and nothing else, made it harmless.
pub fn check_mutant_unguarded(
    tools: &FormalTools,
    mutants_dir: &Path,
    name: &str,
    guard: &str,
) -> Result<Outcome, String> {
    let cfg_text =
        std::fs::read_to_string(mutants_dir.join(format!("{name}.cfg"))).map_err(|e| format!("{name}.cfg: {e}"))?;
    let cfg = unguarded_config(&cfg_text, guard).map_err(|e| format!("mutant {name}: {e}"))?;
    let work = tempfile::Builder::new().prefix("clink-unguarded-").tempdir().map_err(|e| e.to_string())?;
    std::fs::write(work.path().join(format!("{name}.cfg")), cfg).map_err(|e| e.to_string())?;
    std::fs::copy(mutants_dir.join(format!("{name}.tla")), work.path().join(format!("{name}.tla")))
        .map_err(|e| format!("{name}.tla: {e}"))?;
    let (outcome, seconds) = run_config(tools, work.path(), name)?;
    match &outcome {
        Outcome::InvariantViolated(_) | Outcome::Deadlock | Outcome::LivenessViolated => Ok(outcome),
        Outcome::NoError { .. } => Err(format!(
            "mutant {name} without its guard {guard} is still accepted ({outcome}, {seconds:.1}s): the guard is not what makes it harmless"
        )),
        Outcome::Error { .. } => Err(format!("mutant {name} without its guard {guard}: TLC did not check: {outcome}")),
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
        ["violated", inv] => Ok(TraceExpectation::Violated { invariant: inv.to_string() }),
        _ => Err(format!(
            "{}: expected `accepted`, `rejected <k> [<event>]` or `violated <Invariant>`, found {line:?}",
            path.display()
        )),
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
        (TraceExpectation::Violated { invariant }, Verdict::Violated { invariant: got, .. }) if invariant == got => {
            Ok(())
        }
        _ => Err(format!("expected {expected:?}, got {verdict}")),
    }
}

/// A hand-written example (`formal/trace/examples/<name>/`: trace files and
/// `expected.txt`), validated exactly as a recorded run is.
pub fn check_example(tools: &FormalTools, dir: &Path) -> Result<Verdict, String> {
    check_recorded(tools, dir)
}

/// A recorded run (per-process `*.ndjson` files) and its `expected.txt`.
pub fn check_recorded(tools: &FormalTools, dir: &Path) -> Result<Verdict, String> {
    let expected = read_trace_expectation(&dir.join("expected.txt"))?;
    let validation = trace::validate_run(tools, dir, None)?;
    let ties = if validation.ties.is_empty() {
        String::new()
    } else {
        format!(" (timestamp ties: {})", validation.ties.join("; "))
    };
    judge_trace(&expected, &validation.verdict).map(|()| validation.verdict.clone()).map_err(|e| {
        match &validation.modules_dir {
            Some(kept) => format!("{e}{ties} (modules and TLC output kept in {})", kept.display()),
            None => format!("{e}{ties}"),
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
