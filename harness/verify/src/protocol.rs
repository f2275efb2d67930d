//! The protocol checks: protocol.trace_structure and protocol.conformance.

use std::collections::BTreeSet;

use serde_json::Value as Json;

use clink_bundle::paths::resolve;
use clink_bundle::Bundle;
use clink_formal::{trace, FormalTools};

use super::{CheckResult, Status};

pub fn trace_structure(bundle: &Bundle) -> CheckResult {
    let name = "protocol.trace_structure";
    let traces: Vec<_> = bundle.manifest.artifacts.iter().filter(|a| a.role == "trace").collect();
    if traces.is_empty() {
        return CheckResult::new(name, Status::Unavailable, "the bundle holds no protocol trace")
            .next("run the job with CLINK_PROTOCOL_TRACE_DIR and collect with --trace-dir");
    }
    let mut problems = Vec::new();
    let mut lines = 0;
    for a in &traces {
        match check_file(&std::fs::read_to_string(resolve(&bundle.root, &a.path)).unwrap_or_default()) {
            Ok(n) => lines += n,
            Err(e) => problems.push(format!("{}: {e}", a.path)),
        }
    }
    if problems.is_empty() {
        CheckResult::new(
            name,
            Status::Passed,
            "every trace file holds one process, its lines parse, and its sequence numbers run from 1 without a gap",
        )
        .evidence([format!("{} files, {lines} events", traces.len())])
    } else {
        CheckResult::new(name, Status::Failed, format!("{} trace files are malformed", problems.len()))
            .details(problems)
    }
}

/// Checks one trace file; returns its line count.
pub fn check_file(text: &str) -> Result<usize, String> {
    let mut procs = BTreeSet::new();
    let mut n = 0;
    for (i, line) in text.lines().enumerate() {
        let at = i + 1;
        let v: Json = serde_json::from_str(line).map_err(|e| format!("line {at}: not JSON: {e}"))?;
        let seq = v["seq"].as_u64().ok_or_else(|| format!("line {at}: no seq"))?;
        if seq != at as u64 {
            return Err(format!("line {at}: seq {seq}, expected {at} (sequence numbers run from 1 without gaps)"));
        }
        v["ts"].as_u64().ok_or_else(|| format!("line {at}: no ts"))?;
        v["event"].as_str().ok_or_else(|| format!("line {at}: no event"))?;
        procs.insert(v["proc"].as_str().ok_or_else(|| format!("line {at}: no proc"))?.to_string());
        n = at;
    }
    if procs.len() > 1 {
        return Err(format!("{} processes in one file: {procs:?}", procs.len()));
    }
    Ok(n)
}

pub fn conformance(bundle: &Bundle, tools: Option<&FormalTools>) -> CheckResult {
    let name = "protocol.conformance";
    if !bundle.manifest.artifacts.iter().any(|a| a.role == "trace") {
        return CheckResult::new(name, Status::Unavailable, "the bundle holds no protocol trace")
            .next("run the job with CLINK_PROTOCOL_TRACE_DIR and collect with --trace-dir");
    }
    match tools {
        None => CheckResult::new(
            name,
            Status::Unavailable,
            "the formal tools (Java and the pinned TLA+ jar) are not available",
        )
        .next("run gates/fetch-tools, or pass --formal-dir and --formal-tools-dir"),
        Some(tools) => validate_bundle_traces(bundle, tools),
    }
}

/// protocol.conformance on a bundle's traces: this job's events, merged from
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
    for a in bundle.manifest.artifacts.iter().filter(|a| a.role == "trace") {
        let file = a.path.rsplit('/').next().unwrap_or("trace.ndjson");
        if let Err(e) = std::fs::copy(resolve(&bundle.root, &a.path), copy.path().join(file)) {
            return unavailable(format!("copying {}: {e}", a.path));
        }
    }
    let merged = match trace::read_run(copy.path()).and_then(|lines| trace::merge(lines, Some(bundle.job_id()))) {
        Ok(m) => m,
        Err(e) => return CheckResult::new(name, Status::Failed, format!("the traces cannot be merged: {e}")),
    };
    if let Some(why) = outside_the_model(&merged) {
        return CheckResult::new(name, Status::Unsupported, why)
            .next("validate a trace recorded from the job's first start (CLINK_PROTOCOL_TRACE_DIR set before it)");
    }
    let validation = match trace::validate_trace(tools, &merged) {
        Ok(v) => v,
        Err(e) => return unavailable(format!("trace validation could not run: {e}")),
    };
    let evidence =
        vec![format!("{} events of job {} validated in {:.2}s", validation.events, merged.job, validation.seconds)];
    match &validation.verdict {
        trace::Verdict::Accepted { .. } => CheckResult::new(
            name,
            Status::Passed,
            "the TLC trace validator accepts this job's events: they are a behaviour of formal/ExactlyOnce.tla",
        )
        .evidence(evidence),
        trace::Verdict::Rejected { k, event } => CheckResult::new(
            name,
            Status::Failed,
            format!("event {k} is the first no step of the specification can produce: {event}"),
        )
        .evidence(evidence)
        .details(validation.modules_dir.map(|d| format!("the validator's modules and TLC output: {}", d.display())))
        .next("the engine took a step the protocol does not allow, or the model lacks one; read the TLC output"),
        trace::Verdict::Error(e) => unavailable(format!("TLC did not check the trace: {e}")),
    }
}

/// A run the specification does not model, so the validator would check nothing.
fn outside_the_model(trace: &trace::MergedTrace) -> Option<String> {
    let mut opened = std::collections::BTreeSet::new();
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_gap_or_a_second_process_is_refused() {
        let line =
            |seq: u64, proc_: &str| format!("{{\"seq\":{seq},\"ts\":1,\"proc\":\"{proc_}\",\"event\":\"Trigger\"}}\n");
        assert_eq!(check_file(&(line(1, "c:1") + &line(2, "c:1"))), Ok(2));
        assert!(check_file(&(line(1, "c:1") + &line(3, "c:1"))).unwrap_err().contains("seq 3"));
        assert!(check_file(&(line(1, "c:1") + &line(2, "w:1"))).unwrap_err().contains("2 processes"));
    }

    proptest! {
        #[test]
        fn arbitrary_text_never_panics(text in "\\PC{0,300}") {
            let _ = check_file(&text);
        }
    }
}
