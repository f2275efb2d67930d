//! The protocol checks: protocol.trace_structure and protocol.conformance.
//!
//! Structure is judged file by file: every file reads whole (UTF-8, not
//! empty, its last line not cut), holds one process, numbers its lines from 1
//! without a gap and stamps them strictly increasing. Conformance is judged
//! only on evidence that is complete: a trace the collector excluded or could
//! not list, a process whose coordinator acted without its worker file (or
//! whose worker file has no coordinator's), a
//! trace switched on only for a resumed run, a run of another job or of a sink
//! family the specification does not model are each unavailable or
//! unsupported, never a failure. Only a complete trace of a modelled run can
//! fail, and then naming the first event no step of the specification can take.

use clink_basics::text;
use std::collections::{BTreeMap, BTreeSet};

use clink_bundle::model::{Evidence, Fact, TraceFile, MAX_TRACE_BYTES};
use clink_bundle::Bundle;
use clink_formal::{trace, FormalTools};
use serde_json::Value as Json;

use super::{CheckResult, Status, UsageError};

/// The trace files THE reader read whole and shaped, or every file that did
/// not read (named, with why).
fn read_traces(evidence: &Evidence) -> Result<&[TraceFile], Vec<String>> {
    let unread: Vec<String> =
        evidence.about(Fact::Unread).filter(|f| f.detail.starts_with("traces/")).map(|f| f.detail.clone()).collect();
    if unread.is_empty() {
        Ok(&evidence.traces)
    } else {
        Err(unread)
    }
}

fn role_and_process(f: &TraceFile) -> (&str, String) {
    (f.role.as_str(), f.stamp())
}

/// Two trace files that claim one process: the same role and pid, alive at
/// once. One process writes one file per role, so the bundle would hold two
/// accounts of one history, and which one a check read would decide the
/// verdict: a malformed bundle, refused with both named.
pub fn refuse_shared_processes(evidence: &Evidence) -> Result<(), UsageError> {
    // The files that read; one that does not is a finding of its own.
    let files = &evidence.traces;
    for (i, a) in files.iter().enumerate() {
        for b in &files[i + 1..] {
            let ((role_a, pid_a), (role_b, pid_b)) = ((&a.role, a.pid), (&b.role, b.pid));
            let ((a0, a1), (b0, b1)) = (a.span(), b.span());
            if (role_a, pid_a) == (role_b, pid_b) && a0 <= b1 && b0 <= a1 {
                return Err(UsageError(format!(
                    "the bundle is malformed: {} and {} both claim {role_a} process {pid_a} over the same time; one process writes one trace file per role",
                    a.path, b.path
                )));
            }
        }
    }
    Ok(())
}

pub fn trace_structure(bundle: &Bundle, evidence: &Evidence) -> CheckResult {
    let name = "protocol.trace_structure";
    let count = bundle.trace_artifacts().len();
    if count == 0 {
        return CheckResult::new(name, Status::Unavailable, "the bundle holds no protocol trace")
            .next("run the job with CLINK_PROTOCOL_TRACE_DIR and collect with --trace-dir");
    }
    let files = match read_traces(evidence) {
        Ok(files) => files,
        Err(problems) => {
            return CheckResult::new(
                name,
                Status::Failed,
                format!("{} malformed", text::count(problems.len(), "trace file is", "trace files are")),
            )
            .details(problems)
        }
    };
    if let Some(why) = trace_notes(bundle) {
        return CheckResult::new(
            name,
            Status::Unavailable,
            format!("the files the bundle holds are well formed, but {why}"),
        )
        .next("collect again with bounds that keep every trace file");
    }
    let lines: usize = files.iter().map(|f| f.lines.len()).sum();
    CheckResult::new(
        name,
        Status::Passed,
        "every trace file reads whole, holds one process, numbers its lines from 1 without a gap and stamps them strictly increasing",
    )
    .evidence([format!("{count} files, {lines} events")])
}

/// What the collector noted about trace files it did not bring: excluded by
/// a bound, or present and not listable.
fn trace_notes(bundle: &Bundle) -> Option<String> {
    let m = &bundle.manifest;
    let about_traces = |what: &str| what.starts_with("traces/") || what.starts_with("trace file");
    let excluded: Vec<String> =
        m.excluded.iter().filter(|n| about_traces(&n.what)).map(|n| format!("{} ({})", n.what, n.why)).collect();
    let absent: Vec<String> =
        m.absent.iter().filter(|n| about_traces(&n.what)).map(|n| format!("{} ({})", n.what, n.why)).collect();
    match (excluded.is_empty(), absent.is_empty()) {
        (true, true) => None,
        _ => Some(format!(
            "the collection left trace files out: {}",
            excluded.into_iter().chain(absent).collect::<Vec<_>>().join("; ")
        )),
    }
}

pub fn conformance(bundle: &Bundle, evidence: &Evidence, tools: Option<&FormalTools>) -> CheckResult {
    let name = "protocol.conformance";
    let unavailable = |why: String| CheckResult::new(name, Status::Unavailable, why);
    if bundle.trace_artifacts().is_empty() {
        return unavailable("the bundle holds no protocol trace".into())
            .next("run the job with CLINK_PROTOCOL_TRACE_DIR and collect with --trace-dir");
    }
    let files = match read_traces(evidence) {
        Ok(files) => files,
        Err(problems) => {
            return unavailable(format!(
                "the traces do not read ({}), so nothing can be said of the run they record",
                problems.join("; ")
            ))
            .next("see protocol.trace_structure")
        }
    };
    if let Some(why) = trace_notes(bundle) {
        return unavailable(format!("the trace is incomplete: {why}"))
            .next("collect again with bounds that keep every trace file");
    }
    if let Some(why) = incomplete(files, bundle.job_id()) {
        return unavailable(format!("the trace is incomplete: {why}"))
            .next("validate a trace recorded from the job's first start, with every process's files");
    }
    if let Some(why) = unmodelled(files, bundle.job_id()) {
        return CheckResult::new(name, Status::Unsupported, why)
            .next("the specification models the recoverable and commit-confirmed sink families only; nothing can be concluded for this run");
    }
    match tools {
        None => unavailable("the formal tools (Java and the pinned TLA+ jar) are not available".into())
            .next("run gates/fetch-tools, or pass --formal-dir and --formal-tools-dir"),
        Some(tools) => validate_bundle_traces(bundle, evidence, tools),
    }
}

/// Why the bundle's trace is not the whole of the job's history, if it is not.
fn incomplete(files: &[TraceFile], job: u64) -> Option<String> {
    let of_job = |f: &TraceFile| f.lines.iter().any(|(_, v)| v.get("job").and_then(Json::as_u64) == Some(job));
    if !files.iter().any(of_job) {
        let jobs: BTreeSet<u64> =
            files.iter().flat_map(|f| f.lines.iter().filter_map(|(_, v)| v.get("job")?.as_u64())).collect();
        return Some(format!("it holds no event of job {job}, only of jobs {jobs:?}"));
    }
    // Every process that deployed (a Redeploy) or triggered has a worker file.
    let mut roles: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
    for f in files {
        let (role, process) = role_and_process(f);
        roles.entry(process).or_default().insert(role);
    }
    for f in files {
        let ("coordinator", process) = role_and_process(f) else { continue };
        let deployed = f.events().any(|(e, _)| matches!(e, "Redeploy" | "Trigger"));
        if deployed && !roles.get(&process).is_some_and(|r| r.contains("worker")) {
            return Some(format!("process {process}'s coordinator deployed subtasks, but its worker file is missing"));
        }
    }
    // And every process with a worker file has its coordinator's: in this
    // engine one process is both, so a worker file alone is a process whose
    // coordinator's history the bundle lacks.
    for f in files {
        let ("worker", process) = role_and_process(f) else { continue };
        if !roles.get(&process).is_some_and(|r| r.contains("coordinator")) {
            return Some(format!("process {process}'s worker file is there, but its coordinator file is missing"));
        }
    }
    // The first event of the job is not a recovery: tracing was on from the start.
    let first = files
        .iter()
        .flat_map(|f| f.lines.iter())
        .filter(|(_, v)| v.get("job").and_then(Json::as_u64) == Some(job))
        .min_by_key(|(_, v)| v.get("ts").and_then(Json::as_u64).unwrap_or(u64::MAX));
    if let Some((_, v)) = first {
        if v.get("event").and_then(Json::as_str) == Some("CoordRecovers") {
            return Some(
                "its first event is a recovery (CoordRecovers): tracing was switched on for a resumed run, so the history before it is unknown"
                    .into(),
            );
        }
    }
    None
}

/// The sink families the specification models (`Family` in ExactlyOnce.tla).
const MODELLED_FAMILIES: [&str; 2] = ["recoverable", "confirmed"];

/// A run the specification does not model: a sink of another family.
fn unmodelled(files: &[TraceFile], job: u64) -> Option<String> {
    let families: BTreeSet<(&str, &str)> = files
        .iter()
        .flat_map(|f| f.events())
        .filter(|(e, v)| *e == "SinkOpens" && v.get("job").and_then(Json::as_u64) == Some(job))
        .filter_map(|(_, v)| Some((v.get("sub")?.as_str()?, v.get("family")?.as_str()?)))
        .filter(|(_, family)| !MODELLED_FAMILIES.contains(family))
        .collect();
    let (sub, family) = families.first()?;
    Some(format!(
        "sink subtask {sub} is of the {family} family; the specification models the recoverable and commit-confirmed families only"
    ))
}

/// protocol.conformance on a complete trace: this job's events, merged from
/// a copy of the trace files in a fresh temporary directory, validated by TLC
/// against the specification. A rejection keeps the validator's directory so
/// its TLC output can be read.
fn validate_bundle_traces(bundle: &Bundle, evidence: &Evidence, tools: &FormalTools) -> CheckResult {
    let name = "protocol.conformance";
    let unavailable = |why: String| CheckResult::new(name, Status::Unavailable, why);
    let copy = match tempfile::Builder::new().prefix("clink-conformance-").tempdir() {
        Ok(d) => d,
        Err(e) => return unavailable(format!("no temporary directory: {e}")),
    };
    // Each file's vouched bytes, under its own name: trace paths are
    // `traces/<file>` (the reader refuses any other), so names are unique.
    for a in bundle.trace_artifacts() {
        let file = match a.path.strip_prefix("traces/") {
            Some(file) if !file.contains('/') => file,
            _ => return unavailable(format!("{} is not directly under traces/", a.path)),
        };
        let bytes = match bundle.read_vouched(&a.path, MAX_TRACE_BYTES) {
            Ok(bytes) => bytes,
            Err(e) => {
                return unavailable(format!("{e}: nothing is validated on bytes the manifest does not vouch for"))
            }
        };
        if let Err(e) = std::fs::write(copy.path().join(file), bytes) {
            return unavailable(format!("copying {}: {e}", a.path));
        }
    }
    // The traces already read whole (protocol.trace_structure's reader): a
    // merge that fails here is evidence that does not hold together, which
    // says nothing of the protocol, so it is unavailable, not a violation.
    let merged = match trace::read_and_merge(tools, copy.path(), Some(bundle.job_id())) {
        Ok(m) => m,
        Err(trace::ValidationError::Malformed(e)) => return unavailable(format!("the traces cannot be merged: {e}")),
        Err(e) => return unavailable(format!("trace validation could not run: {e}")),
    };
    if let Some(why) = outside_the_model(&merged) {
        return CheckResult::new(name, Status::Unsupported, why)
            .next("validate a trace recorded from the job's first start (CLINK_PROTOCOL_TRACE_DIR set before it)");
    }
    // The markers against the traces' triggers, completions and restores:
    // THE reader compared them (checkpoint.marker reports them).
    if let Some(problem) = evidence.about(Fact::Marker).find(|f| f.detail.contains("Trigger")) {
        return CheckResult::new(name, Status::Failed, problem.detail.clone())
            .next("the marker and the trace name the same checkpoint and must agree on what triggered it: one was altered, or is another run's");
    }
    let validation = match validate_once(tools, &merged) {
        Ok(v) => v,
        Err(e) => return unavailable(format!("trace validation could not run: {e}")),
    };
    let mut evidence =
        vec![format!("{} events of job {} validated in {:.2}s", validation.events, merged.job, validation.seconds)];
    evidence.extend(validation.ties.iter().map(|t| format!("timestamp tie: {t}")));
    match &validation.verdict {
        trace::Verdict::Accepted { .. } => CheckResult::new(
            name,
            Status::Passed,
            "the TLC trace validator accepts this job's events: they are a behaviour of formal/ExactlyOnce.tla",
        )
        .evidence(evidence),
        trace::Verdict::Rejected { k, event } => CheckResult {
            diverged_at: Some(*k),
            ..CheckResult::new(
                name,
                Status::Failed,
                format!("event {k} is the first no step of the specification can produce: {event}"),
            )
        }
        .evidence(evidence)
        .details(validation.modules_dir.map(|d| format!("the validator's modules and TLC output: {}", d.display())))
        .next("the engine took a step the protocol does not allow, or the model lacks one; read the TLC output"),
        trace::Verdict::Violated { invariant, k } => CheckResult {
            diverged_at: Some(*k),
            ..CheckResult::new(
                name,
                Status::Failed,
                format!("the state after event {k} breaks the specification's invariant {invariant}"),
            )
        }
        .evidence(evidence)
        .details(validation.modules_dir.map(|d| format!("the validator's modules and TLC output: {}", d.display())))
        .next("read the TLC counterexample: the run reached a state the protocol must never reach"),
        trace::Verdict::Error(e) => unavailable(format!("TLC did not check the trace: {e}")),
    }
}

/// TLC's verdict on a merged trace, validated once per process: the same
/// trace and tools validated again (a suite verifying many copies of one
/// bundle) get the verdict TLC gave, never a guess. Keyed by the merged
/// trace's whole content and the tools' paths.
fn validate_once(
    tools: &FormalTools,
    merged: &trace::MergedTrace,
) -> Result<trace::Validation, trace::ValidationError> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static DONE: OnceLock<Mutex<HashMap<String, trace::Validation>>> = OnceLock::new();
    let key = clink_basics::digest::sha256_hex(format!("{tools:?}\n{merged:?}").as_bytes());
    let done = DONE.get_or_init(Default::default);
    if let Some(v) = done.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&key) {
        return Ok(v.clone());
    }
    let validation = trace::validate_trace(tools, merged)?;
    done.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(key, validation.clone());
    Ok(validation)
}

/// A run the specification does not model, so the validator would check nothing.
fn outside_the_model(trace: &trace::MergedTrace) -> Option<String> {
    if let Some(scope) = trace::out_of_scope(trace) {
        return Some(scope.to_string());
    }
    let mut opened = BTreeSet::new();
    for e in &trace.events {
        let sub = e.fields.get("sub").and_then(|s| s.as_str());
        match (e.event(), sub) {
            ("SinkOpens", Some(s)) => {
                opened.insert(s.to_string());
            }
            ("SinkPrepare" | "DeliverCommit" | "SinkCommit", Some(s)) if !opened.contains(s) => {
                return Some(format!("the trace starts mid-run: {s} acts before any open of it is recorded"));
            }
            _ => {}
        }
    }
    None
}
