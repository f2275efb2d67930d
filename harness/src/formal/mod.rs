//! The formal side: locating Java and the pinned TLA+ jar, and (trace
//! validation) following a run's protocol trace through the specification.
//!
//! Nothing here downloads: `gates/fetch-tools` is the only downloader. A check
//! or trial whose tools are missing is unavailable or ignored with the reason.

pub mod suite;
pub mod tlc;
pub mod tools;
pub mod trace;

pub use tools::{locate, FormalTools};

use crate::bundle::Bundle;
use crate::verify::{CheckResult, Status};

/// protocol.conformance on a bundle's traces: this job's events, merged from
/// a copy of the trace files in a fresh temporary directory, validated by TLC
/// against the specification. A rejection keeps the validator's directory so
/// its TLC output can be read.
pub fn validate_bundle_traces(bundle: &Bundle, tools: &FormalTools) -> CheckResult {
    let name = "protocol.conformance";
    let unavailable = |why: String| CheckResult::new(name, Status::Unavailable, why);
    let copy = match tempfile::Builder::new().prefix("clink-conformance-").tempdir() {
        Ok(d) => d,
        Err(e) => return unavailable(format!("no temporary directory: {e}")),
    };
    for a in bundle.manifest.artifacts.iter().filter(|a| a.role == "trace") {
        let file = a.path.rsplit('/').next().unwrap_or("trace.ndjson");
        if let Err(e) = std::fs::copy(crate::bundle::paths::resolve(&bundle.root, &a.path), copy.path().join(file)) {
            return unavailable(format!("copying {}: {e}", a.path));
        }
    }
    let merged = match trace::read_and_merge(tools, copy.path(), Some(bundle.job_id())) {
        Ok(m) => m,
        Err(trace::ValidationError::Setup(e)) => return unavailable(format!("trace validation could not run: {e}")),
        Err(e) => return CheckResult::new(name, Status::Failed, format!("the traces cannot be merged: {e}")),
    };
    if let Some(why) = outside_the_model(&merged) {
        return CheckResult::new(name, Status::Unsupported, why)
            .next("validate a trace recorded from the job's first start (CLINK_PROTOCOL_TRACE_DIR set before it)");
    }
    let validation = match trace::validate_trace(tools, &merged) {
        Ok(v) => v,
        Err(trace::ValidationError::Malformed(e)) => {
            return CheckResult::new(name, Status::Failed, format!("the traces cannot be validated: {e}"))
        }
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
        trace::Verdict::Rejected { k, event } => CheckResult::new(
            name,
            Status::Failed,
            format!("event {k} is the first no step of the specification can produce: {event}"),
        )
        .evidence(evidence)
        .details(validation.modules_dir.map(|d| format!("the validator's modules and TLC output: {}", d.display())))
        .next("the engine took a step the protocol does not allow, or the model lacks one; read the TLC output"),
        trace::Verdict::Violated { invariant, k } => CheckResult::new(
            name,
            Status::Failed,
            format!("the state after event {k} breaks the specification's invariant {invariant}"),
        )
        .evidence(evidence)
        .details(validation.modules_dir.map(|d| format!("the validator's modules and TLC output: {}", d.display())))
        .next("read the TLC counterexample: the run reached a state the protocol must never reach"),
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
