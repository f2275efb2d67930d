//! The protocol checks: protocol.trace_structure and protocol.conformance.

use std::collections::BTreeSet;

use serde_json::Value as Json;

use super::{CheckResult, Status};
use crate::bundle::paths::resolve;
use crate::bundle::Bundle;
use crate::formal::FormalTools;

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
        Some(tools) => crate::formal::validate_bundle_traces(bundle, tools),
    }
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
