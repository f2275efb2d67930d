//! The page of `clink trace-validate --html`: one check (the validator's
//! verdict) and the timeline of the trace it judged.

use clink_formal::trace::{MergedTrace, Validation, Verdict as TraceVerdict};

use crate::page::{Check, Outcome, Page, Status, Verdict};
use crate::timeline::Timeline;

/// What became of the validation.
pub enum TraceOutcome<'a> {
    /// TLC ran (accepted, rejected, or did not check).
    Validated(&'a Validation),
    /// It could not run (no Java, no pinned jar): the trace is still drawn.
    Unavailable(String),
}

const CHECK: &str = "trace.validation";

/// The page for one run's merged trace and its validation.
pub fn trace_validation_page(trace_dir: &str, trace: &MergedTrace, outcome: TraceOutcome<'_>) -> Page {
    let timeline = Timeline::from_trace(trace);
    let base = |status, reason: String| Check {
        name: CHECK.into(),
        status,
        reason,
        evidence: Vec::new(),
        details: Vec::new(),
        next_action: String::new(),
        counts: Vec::new(),
    };
    let (check, verdict, timeline) = match outcome {
        TraceOutcome::Validated(v) => {
            let evidence = format!("{} events of job {} checked by TLC in {:.2}s", v.events, trace.job, v.seconds);
            let kept =
                v.modules_dir.as_ref().map(|d| format!("the generated modules and TLC's output: {}", d.display()));
            match &v.verdict {
                TraceVerdict::Accepted { events } => (
                    Check {
                        evidence: vec![evidence],
                        ..base(
                            Status::Passed,
                            format!("{events} events are a behaviour of the specification (formal/ExactlyOnce.tla)"),
                        )
                    },
                    Verdict {
                        outcome: Outcome::Passed,
                        summary: "the trace is a behaviour of the specification".into(),
                        exit_code: 0,
                    },
                    timeline,
                ),
                TraceVerdict::Rejected { k, event } => {
                    let reason = format!("event {k} is the first no step of the specification can produce: {event}");
                    (
                        Check {
                            evidence: vec![evidence],
                            details: kept.into_iter().collect(),
                            next_action: "the engine took a step the protocol does not allow, or the model lacks one; read the TLC output".into(),
                            ..base(Status::Failed, reason.clone())
                        },
                        Verdict {
                            outcome: Outcome::Failed,
                            summary: format!("REJECTED at event {k} of {}", v.events),
                            exit_code: 1,
                        },
                        timeline.diverging_at(*k, reason),
                    )
                }
                TraceVerdict::Violated { invariant, k } => {
                    let reason = format!("the state after event {k} breaks the specification's invariant {invariant}");
                    (
                        Check {
                            evidence: vec![evidence],
                            details: kept.into_iter().collect(),
                            next_action:
                                "read the TLC counterexample: the run reached a state the protocol must never reach"
                                    .into(),
                            ..base(Status::Failed, reason.clone())
                        },
                        Verdict {
                            outcome: Outcome::Failed,
                            summary: format!("VIOLATED: invariant {invariant} after event {k} of {}", v.events),
                            exit_code: 1,
                        },
                        timeline.diverging_at(*k, reason),
                    )
                }
                TraceVerdict::Error(e) => (
                    Check {
                        details: kept.into_iter().collect(),
                        next_action: "read TLC's output; fix the tools or the generated modules and validate again"
                            .into(),
                        ..base(Status::Unavailable, format!("TLC did not check the trace: {e}"))
                    },
                    not_established(),
                    timeline,
                ),
            }
        }
        TraceOutcome::Unavailable(why) => (
            Check {
                next_action: "run gates/fetch-tools, or pass --formal-dir and --formal-tools-dir".into(),
                ..base(Status::Unavailable, format!("trace validation unavailable: {why}"))
            },
            not_established(),
            timeline,
        ),
    };
    Page {
        command: "clink trace-validate".into(),
        subject: trace_dir.to_string(),
        facts: vec![
            ("trace".into(), trace_dir.to_string()),
            ("job".into(), trace.job.to_string()),
            ("events".into(), trace.events.len().to_string()),
        ],
        verdict,
        checks: vec![check],
        timeline: Some(timeline),
        sections: Vec::new(),
    }
}

fn not_established() -> Verdict {
    Verdict {
        outcome: Outcome::Partial,
        summary: "the trace was not validated; this is not a pass".into(),
        exit_code: 3,
    }
}
