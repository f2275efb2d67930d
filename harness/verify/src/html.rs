//! `incident-verify --html`: the report as a page of the shared frame
//! (clink-html), with the protocol timeline drawn from the bundle's trace
//! files and protocol.conformance's first diverging event highlighted.
//!
//! The timeline is drawn from whatever of the traces reads: it is a picture
//! for a person, never a verdict. Files that do not read are named in a note;
//! a bundle whose artifacts failed their hashes says so above the timeline.

use clink_basics::ndjson::parse_objects;
use clink_bundle::Bundle;
use clink_formal::trace::{merge, TraceLine};
use clink_html::{Check, Outcome, Page, Timeline, Verdict};
use serde_json::Value as Json;

use super::{CheckResult, Conclusion, Report, Status};

/// A trace file larger than this is not drawn (protocol.rs reads no larger).
const MAX_TRACE_BYTES: u64 = 256 << 20;

/// The page of a report on `bundle`.
pub fn page(report: &Report, bundle: &Bundle) -> Page {
    let (outcome, summary) = match report.result {
        Conclusion::Passed => (Outcome::Passed, "every required check passed"),
        Conclusion::Failed => (Outcome::Failed, "a required check failed"),
        Conclusion::Partial => {
            (Outcome::Partial, "nothing failed, but a required check is unavailable or unsupported; this is not a pass")
        }
    };
    let mut facts = vec![
        ("bundle".to_string(), report.bundle.clone()),
        ("job".to_string(), report.job.clone()),
        ("checkpoint".to_string(), report.checkpoint.to_string()),
        ("profile".to_string(), report.profile.as_str().to_string()),
        ("verifier".to_string(), report.verifier.clone()),
    ];
    let timeline = timeline(report, bundle);
    if timeline.is_none() {
        facts.push(("protocol trace".into(), "none drawn (see the notes of protocol.trace_structure)".into()));
    }
    Page {
        command: "clink incident-verify".into(),
        subject: format!("bundle {}", report.bundle),
        facts,
        verdict: Verdict { outcome, summary: summary.into(), exit_code: report.exit_code },
        checks: report.checks.iter().map(check).collect(),
        timeline,
        sections: Vec::new(),
    }
}

/// One check as the shared frame shows it (incident-reconcile's page uses it too).
pub fn check(c: &CheckResult) -> Check {
    let status = c.status;
    let counts = c
        .counts
        .map(|n| {
            [
                ("selected", n.selected),
                ("checked", n.checked),
                ("passed", n.passed),
                ("failed", n.failed),
                ("unavailable", n.unavailable),
                ("unsupported", n.unsupported),
                ("omitted", n.omitted),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v as u64))
            .collect()
        })
        .unwrap_or_default();
    Check {
        name: c.name.to_string(),
        status,
        reason: c.reason.clone(),
        evidence: c.evidence.clone(),
        details: c.details.clone(),
        next_action: c.next_action.clone(),
        counts,
    }
}

/// The timeline of the bundle's job, from every trace file that reads.
fn timeline(report: &Report, bundle: &Bundle) -> Option<Timeline> {
    let mut lines = Vec::new();
    let mut notes = Vec::new();
    let traces = bundle.trace_artifacts();
    if traces.is_empty() {
        return None;
    }
    for a in traces {
        // The validator merges copies named by their last component; so does this.
        let file = a.path.rsplit('/').next().unwrap_or(&a.path).to_string();
        // `<role>-<pid>-<start>.ndjson`: the process is `<pid>-<start>`, as the validator reads it.
        let process = file.trim_end_matches(".ndjson").split_once('-').map_or(file.as_str(), |(_, p)| p).to_string();
        let read = bundle.read_vouched(&a.path, MAX_TRACE_BYTES).map_err(|e| e.to_string());
        match read.and_then(|bytes| parse_objects(&bytes).map_err(|e| e.to_string())) {
            Ok(objects) => {
                let mut skipped = 0;
                for (_, fields) in objects {
                    match (fields.get("seq").and_then(Json::as_u64), fields.get("ts").and_then(Json::as_u64)) {
                        (Some(seq), Some(ts)) => {
                            lines.push(TraceLine { file: file.clone(), seq, ts, process: process.clone(), fields })
                        }
                        _ => skipped += 1,
                    }
                }
                if skipped > 0 {
                    notes.push(format!("{}: {skipped} lines without a numeric seq and ts are not drawn", a.path));
                }
            }
            Err(e) => notes.push(format!("{}: not drawn: {e}", a.path)),
        }
    }
    let merged = match merge(lines, Some(bundle.job_id())) {
        Ok(m) if !m.events.is_empty() => m,
        Ok(_) => {
            notes.push(format!("no event of job {} reads", bundle.job_id()));
            return Some(empty_timeline(bundle.job_id(), notes));
        }
        Err(e) => {
            notes.push(e.to_string());
            return Some(empty_timeline(bundle.job_id(), notes));
        }
    };
    let mut t = Timeline::from_trace(&merged);
    if report.checks.iter().any(|c| c.name == "bundle.artifacts" && c.status != Status::Passed) {
        t = t.note("bundle.artifacts did not pass: the traces drawn here may not be the ones collected");
    }
    for n in notes {
        t = t.note(n);
    }
    let conformance = report.checks.iter().find(|c| c.name == "protocol.conformance" && c.status == Status::Failed);
    if let Some((k, c)) = conformance.and_then(|c| Some((c.diverged_at?, c))) {
        t = t.diverging_at(k, c.reason.clone());
    }
    Some(t)
}

fn empty_timeline(job: u64, notes: Vec<String>) -> Timeline {
    let empty = clink_formal::trace::MergedTrace { job, events: Vec::new(), ties: Vec::new() };
    notes.into_iter().fold(Timeline::from_trace(&empty), Timeline::note)
}
