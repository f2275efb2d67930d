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

use clink_basics::ndjson::{parse_objects, Line};
use clink_bundle::paths::parse_trace_file_name;
use clink_bundle::Bundle;
use clink_formal::{trace, FormalTools};
use serde_json::Value as Json;

use super::{CheckResult, Status, UsageError};

/// A trace file larger than this is refused unread.
const MAX_TRACE_BYTES: u64 = 256 << 20;

/// One trace file of the bundle, read and checked line by line.
struct TraceFile {
    path: String,
    lines: Vec<Line>,
}

impl TraceFile {
    fn events(&self) -> impl Iterator<Item = (&str, &serde_json::Map<String, Json>)> {
        self.lines.iter().map(|(_, v)| (v.get("event").and_then(Json::as_str).unwrap_or(""), v))
    }

    /// `coordinator` or `worker`, its pid and its start stamp, from the file's name.
    fn name(&self) -> Option<(&str, u64, u64)> {
        parse_trace_file_name(self.path.strip_prefix("traces/")?)
    }

    /// `coordinator` or `worker`, and the process's key (`<pid>-<start>`).
    fn role_and_process(&self) -> Option<(&str, String)> {
        self.name().map(|(role, pid, start)| (role, format!("{pid}-{start}")))
    }

    /// The first and last stamp of the file: the span the process it claims was alive.
    fn span(&self) -> (u64, u64) {
        let ts = |l: Option<&Line>| l.and_then(|(_, v)| v.get("ts")?.as_u64()).unwrap_or(0);
        (ts(self.lines.first()), ts(self.lines.last()))
    }
}

/// Reads every trace file of the bundle, found by its path (`traces/<file>`),
/// from the bytes the manifest vouched for; `Err` lists every file that does
/// not read or is malformed, with the line.
fn read_traces(bundle: &Bundle) -> Result<Vec<TraceFile>, Vec<String>> {
    let mut files = Vec::new();
    let mut problems = Vec::new();
    for a in bundle.trace_artifacts() {
        let lines = bundle
            .read_vouched(&a.path, MAX_TRACE_BYTES)
            .map_err(|e| e.to_string())
            .and_then(|bytes| parse_objects(&bytes).map_err(|e| format!("{}: {e}", a.path)));
        match lines {
            Ok(lines) => match check_lines(&lines).and_then(|()| check_named_process(&a.path, &lines)) {
                Ok(()) => files.push(TraceFile { path: a.path.clone(), lines }),
                Err(e) => problems.push(format!("{}: {e}", a.path)),
            },
            Err(e) => problems.push(e),
        }
    }
    if problems.is_empty() {
        Ok(files)
    } else {
        Err(problems)
    }
}

/// A trace file's name and its lines both say which process wrote it
/// (`worker-<pid>-<start>.ndjson`, `"proc": "worker:<pid>"`): they must agree.
fn check_named_process(path: &str, lines: &[Line]) -> Result<(), String> {
    let name = path.strip_prefix("traces/").and_then(parse_trace_file_name);
    let Some((role, pid, _)) = name else {
        return Err("not named <coordinator|worker>-<pid>-<start>.ndjson".into());
    };
    let named = format!("{role}:{pid}");
    match lines.iter().find(|(_, v)| v.get("proc").and_then(Json::as_str) != Some(named.as_str())) {
        Some((at, v)) => Err(format!("line {at}: proc {:?}, but the file's name says {named:?}", v.get("proc"))),
        None => Ok(()),
    }
}

/// Two trace files that claim one process: the same role and pid, alive at
/// once. One process writes one file per role, so the bundle would hold two
/// accounts of one history, and which one a check read would decide the
/// verdict: a malformed bundle, refused with both named.
pub fn refuse_shared_processes(bundle: &Bundle) -> Result<(), UsageError> {
    let Ok(files) = read_traces(bundle) else {
        // A file that does not read is reported by the checks themselves.
        return Ok(());
    };
    for (i, a) in files.iter().enumerate() {
        for b in &files[i + 1..] {
            let (Some((role_a, pid_a, _)), Some((role_b, pid_b, _))) = (a.name(), b.name()) else { continue };
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

/// One file's lines: `seq` from 1 without a gap, `ts` strictly increasing,
/// one process, an event and a job on every line.
fn check_lines(lines: &[Line]) -> Result<(), String> {
    let mut procs = BTreeSet::new();
    let mut last_ts = None;
    for (at, v) in lines {
        let seq = v.get("seq").and_then(Json::as_u64).ok_or_else(|| format!("line {at}: no seq"))?;
        if seq != *at as u64 {
            return Err(format!("line {at}: seq {seq}, expected {at} (sequence numbers run from 1 without gaps)"));
        }
        let ts = v.get("ts").and_then(Json::as_u64).ok_or_else(|| format!("line {at}: no ts"))?;
        if last_ts.is_some_and(|last| ts <= last) {
            return Err(format!("line {at}: ts {ts} does not increase (a process stamps strictly increasing times)"));
        }
        last_ts = Some(ts);
        v.get("event").and_then(Json::as_str).ok_or_else(|| format!("line {at}: no event"))?;
        v.get("job").and_then(Json::as_u64).ok_or_else(|| format!("line {at}: no job"))?;
        procs.insert(v.get("proc").and_then(Json::as_str).ok_or_else(|| format!("line {at}: no proc"))?.to_string());
    }
    if procs.len() > 1 {
        return Err(format!("{} processes in one file: {procs:?}", procs.len()));
    }
    Ok(())
}

pub fn trace_structure(bundle: &Bundle) -> CheckResult {
    let name = "protocol.trace_structure";
    let count = bundle.trace_artifacts().len();
    if count == 0 {
        return CheckResult::new(name, Status::Unavailable, "the bundle holds no protocol trace")
            .next("run the job with CLINK_PROTOCOL_TRACE_DIR and collect with --trace-dir");
    }
    let files = match read_traces(bundle) {
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

pub fn conformance(bundle: &Bundle, tools: Option<&FormalTools>) -> CheckResult {
    let name = "protocol.conformance";
    let unavailable = |why: String| CheckResult::new(name, Status::Unavailable, why);
    if bundle.trace_artifacts().is_empty() {
        return unavailable("the bundle holds no protocol trace".into())
            .next("run the job with CLINK_PROTOCOL_TRACE_DIR and collect with --trace-dir");
    }
    let files = match read_traces(bundle) {
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
    if let Some(why) = incomplete(&files, bundle.job_id()) {
        return unavailable(format!("the trace is incomplete: {why}"))
            .next("validate a trace recorded from the job's first start, with every process's files");
    }
    if let Some(why) = unmodelled(&files, bundle.job_id()) {
        return CheckResult::new(name, Status::Unsupported, why)
            .next("the specification models the recoverable and commit-confirmed sink families only; nothing can be concluded for this run");
    }
    match tools {
        None => unavailable("the formal tools (Java and the pinned TLA+ jar) are not available".into())
            .next("run gates/fetch-tools, or pass --formal-dir and --formal-tools-dir"),
        Some(tools) => validate_bundle_traces(bundle, tools),
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
        match f.role_and_process() {
            Some((role, process)) => {
                roles.entry(process).or_default().insert(role);
            }
            None => return Some(format!("{} is not named <role>-<pid>-<start>.ndjson", f.path)),
        }
    }
    for f in files {
        let Some(("coordinator", process)) = f.role_and_process() else { continue };
        let deployed = f.events().any(|(e, _)| matches!(e, "Redeploy" | "Trigger"));
        if deployed && !roles.get(&process).is_some_and(|r| r.contains("worker")) {
            return Some(format!("process {process}'s coordinator deployed subtasks, but its worker file is missing"));
        }
    }
    // And every process with a worker file has its coordinator's: in this
    // engine one process is both, so a worker file alone is a process whose
    // coordinator's history the bundle lacks.
    for f in files {
        let Some(("worker", process)) = f.role_and_process() else { continue };
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
fn validate_bundle_traces(bundle: &Bundle, tools: &FormalTools) -> CheckResult {
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
    if let Some(problem) = markers_disagree_with_triggers(bundle, &merged) {
        return CheckResult::new(name, Status::Failed, problem)
            .next("the marker and the trace name the same checkpoint and must agree on what triggered it: one was altered, or is another run's");
    }
    let validation = match trace::validate_trace(tools, &merged) {
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

/// A run the specification does not model, so the validator would check nothing.
fn outside_the_model(trace: &trace::MergedTrace) -> Option<String> {
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

/// The first COMPLETED marker of the bundle whose kind (periodic, final,
/// savepoint) is not the kind its checkpoint's `Trigger` line gives: the two
/// name the same checkpoint. A marker the trace has no trigger of (a
/// checkpoint before tracing began) is left alone; one that does not read
/// fails this check too (it is compared, never skipped).
fn markers_disagree_with_triggers(bundle: &Bundle, merged: &trace::MergedTrace) -> Option<String> {
    let triggers: BTreeMap<u64, &str> = merged
        .events
        .iter()
        .filter(|l| l.event() == "Trigger")
        .filter_map(|l| Some((l.fields.get("ckpt")?.as_u64()?, l.fields.get("kind")?.as_str()?)))
        .collect();
    let completed = match bundle.markers() {
        Ok(m) => m.completed,
        Err(e) => return Some(format!("the markers the traces are compared with do not read: {e}")),
    };
    for c in completed {
        let marker = match bundle.completed_marker(c) {
            Ok(m) => m,
            Err(e) => return Some(format!("COMPLETED-{c} does not read: {e}")),
        };
        if let Some(kind) = triggers.get(&c) {
            if *kind != marker.kind.as_str() {
                return Some(format!(
                    "COMPLETED-{c} says the checkpoint was {}, the trace's Trigger of {c} says {kind}",
                    marker.kind.as_str()
                ));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn line(seq: u64, ts: u64, proc_: &str) -> String {
        format!("{{\"seq\":{seq},\"ts\":{ts},\"proc\":\"{proc_}\",\"event\":\"Trigger\",\"job\":1}}\n")
    }

    fn check(text: &str) -> Result<(), String> {
        check_lines(&parse_objects(text.as_bytes()).map_err(|e| e.to_string())?)
    }

    #[test]
    fn a_gap_a_second_process_or_a_stamp_that_does_not_increase_is_refused() {
        assert_eq!(check(&(line(1, 1, "c:1") + &line(2, 2, "c:1"))), Ok(()));
        assert!(check(&(line(1, 1, "c:1") + &line(3, 2, "c:1"))).unwrap_err().contains("seq 3"));
        assert!(check(&(line(1, 1, "c:1") + &line(2, 2, "w:1"))).unwrap_err().contains("2 processes"));
        assert!(check(&(line(1, 5, "c:1") + &line(2, 5, "c:1"))).unwrap_err().contains("does not increase"));
        let no_job = "{\"seq\":1,\"ts\":1,\"proc\":\"c\",\"event\":\"Trigger\"}\n";
        assert!(check(no_job).unwrap_err().contains("no job"));
        assert!(check("").is_err(), "an empty file is not a trace");
        assert!(check(line(1, 1, "c:1").trim_end()).unwrap_err().contains("cut short"));
    }

    proptest! {
        #[test]
        fn arbitrary_text_never_panics(text in "\\PC{0,300}") {
            let _ = check(&text);
        }
    }
}
