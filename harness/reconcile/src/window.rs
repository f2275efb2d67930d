//! The windowed audit's own checks: the job's window rules against the
//! reference's (reference.semantics), the watermark the sink recorded
//! against what the source's records allow (reference.watermark), and
//! whether every window the reference computed is decided at the audited
//! checkpoint (reference.finality).

use clink_verify::{CheckResult, Status};
use serde_json::Value as Json;

use crate::artifact::{first_difference, Artifact, Bound};
use crate::cells::{show_row, Cell};
use crate::scope::{Scope, ScopeKind};

fn end_of(cells: &[Cell], at: usize) -> Option<i64> {
    cells.get(at).cloned().flatten().and_then(|t| t.parse().ok())
}

fn show_watermark(w: Option<i64>) -> String {
    match w {
        None => "none yet".into(),
        Some(i64::MAX) => "the end of input".into(),
        Some(w) => w.to_string(),
    }
}

/// The job's window rules (the scope's `transform`) against the rules the
/// reference declares (its header's `semantics`).
pub fn semantics(scope_doc: &Json, artifact: &Artifact) -> CheckResult {
    let name = "reference.semantics";
    let Some(job) = scope_doc.get("transform") else {
        return CheckResult::new(name, Status::Unsupported, "the scope holds no window rules");
    };
    let Some(theirs) = artifact.semantics() else {
        return CheckResult::new(name, Status::Failed, "the reference declares no window semantics")
            .next("give the reference's window rules in its artifact's header (semantics)");
    };
    match first_difference(job, theirs, "transform") {
        None => CheckResult::new(name, Status::Passed, "the job's window rules are the reference's")
            .evidence([format!("rules: {job}")]),
        Some((path, a, b)) => CheckResult::new(
            name,
            Status::Failed,
            format!(
                "the job's window rules are not the reference's: {path} is {} in the job, {} in the reference",
                a.map_or("absent".into(), |v| v.to_string()),
                b.map_or("absent".into(), |v| v.to_string())
            ),
        )
        .next("audit with a reference written for this job's rules, or find why the job declares other rules"),
    }
}

/// The recorded watermark at every completed checkpoint of the lineage
/// against the source's bound there, and every window row the sink received
/// against the bound at the checkpoint after it.
pub fn watermark(scope: &Scope, artifact: &Artifact, end_at: usize, lateness: i64) -> CheckResult {
    let name = "reference.watermark";
    if !artifact.complete {
        return CheckResult::new(
            name,
            Status::Unavailable,
            "the reference is incomplete: its bounds are not established",
        );
    }
    let start = match scope.request.kind {
        ScopeKind::Increment { base } => Some(base),
        _ => None,
    };
    let checkpoints: Vec<u64> = scope.checkpoints.iter().copied().filter(|c| Some(*c) != start && *c > 0).collect();
    let checkpoints: Vec<u64> = match scope.start {
        crate::scope::Start::Checkpoint(c) if scope.request.kind == ScopeKind::Interval => {
            checkpoints.into_iter().filter(|x| *x != c).collect()
        }
        _ => checkpoints,
    };
    let mut failures = Vec::new();
    let mut gaps = Vec::new();
    for &c in &checkpoints {
        let Some(recorded) = scope.recorded_watermark(c) else {
            gaps.push(format!("checkpoint {c}: the sink's evidence records no watermark"));
            continue;
        };
        let Some(bound) = artifact.bound_at(c) else {
            gaps.push(format!("checkpoint {c}: the reference gives no source bound"));
            continue;
        };
        if !bound.allows(recorded) {
            failures.push(format!(
                "checkpoint {c}: the sink recorded watermark {}, ahead of {bound}, the most the source's records allow",
                show_watermark(recorded)
            ));
        }
    }
    let mut rows_checked = 0;
    for interval in &scope.intervals {
        let Some(&after) = checkpoints.iter().find(|c| **c >= interval.epoch) else { continue };
        let Some(bound) = artifact.bound_at(after) else { continue };
        for s in &interval.subtasks {
            for row in s.rows.iter().flatten() {
                rows_checked += 1;
                let Some(end) = end_of(row, end_at) else {
                    gaps.push(format!("interval {}: a window row without a readable end", interval.epoch));
                    continue;
                };
                if !bound.may_close(end.saturating_add(lateness)) {
                    failures.push(format!(
                        "window {} was received in interval {} but had not closed by the source's bound {bound} at checkpoint {after}: it closed early",
                        show_row(row),
                        interval.epoch
                    ));
                }
            }
        }
    }
    let evidence = [format!(
        "{} checkpoints of the lineage, {rows_checked} window rows received; bounds {}",
        checkpoints.len(),
        artifact.source_bounds.iter().map(|(c, b)| format!("{c}:{b}")).collect::<Vec<_>>().join(" ")
    )];
    if !failures.is_empty() {
        return CheckResult::new(
            name,
            Status::Failed,
            format!("the watermark ran ahead of what the source's records allow ({} findings)", failures.len()),
        )
        .evidence(evidence)
        .details(failures.into_iter().take(20))
        .next("the job's watermark or window closing is wrong: find where it runs ahead of its inputs");
    }
    if !gaps.is_empty() {
        return CheckResult::new(name, Status::Unavailable, "some checkpoint's watermark or bound is not known")
            .evidence(evidence)
            .details(gaps.into_iter().take(20))
            .next("collect the lineage whole (--include-state --include-captures, --epochs all or reaching back)");
    }
    if checkpoints.is_empty() {
        return CheckResult::new(name, Status::Unavailable, "the scope passes no completed checkpoint to check");
    }
    CheckResult::new(
        name,
        Status::Passed,
        "at every completed checkpoint the recorded watermark is no further on than the source allows, and every window row received had closed by the bound after it",
    )
    .evidence(evidence)
}

/// Every window the reference computed is decided at the audited checkpoint.
pub fn finality(scope: &Scope, artifact: &Artifact, end_at: usize, lateness: i64) -> CheckResult {
    let name = "reference.finality";
    if !artifact.complete {
        return CheckResult::new(name, Status::Unavailable, "the reference is incomplete");
    }
    let n = scope.request.checkpoint;
    let Some(recorded) = scope.recorded_watermark(n) else {
        return CheckResult::new(
            name,
            Status::Unavailable,
            format!("the sink's evidence records no watermark at checkpoint {n}"),
        );
    };
    let closed = |end: i64| recorded.is_some_and(|w| end.saturating_add(lateness) <= w);
    let base = match scope.request.kind {
        ScopeKind::Increment { base } => Some((base, scope.base_watermark.flatten())),
        _ => None,
    };
    let mut failures = Vec::new();
    for row in &artifact.rows {
        let Some(end) = end_of(row, end_at) else {
            failures.push(format!("reference row {} has no readable window end", show_row(row)));
            continue;
        };
        if !closed(end) {
            failures.push(format!(
                "the reference gives window {}, which the recorded watermark {} at checkpoint {n} had not closed",
                show_row(row),
                show_watermark(recorded)
            ));
        }
        if let Some((m, wm)) = base {
            if wm.is_some_and(|w| end.saturating_add(lateness) <= w) {
                failures.push(format!(
                    "the reference gives window {}, which had closed by checkpoint {m} (watermark {}): an earlier increment owed it",
                    show_row(row),
                    show_watermark(wm)
                ));
            }
        }
    }
    let mut undetermined = Vec::new();
    for w in &artifact.left_out {
        let end = w.identity.last().cloned().flatten().and_then(|t| t.parse::<i64>().ok());
        match (w.status.as_str(), end) {
            ("open", Some(end)) if closed(end) => failures.push(format!(
                "the reference leaves window {} out as open, but the recorded watermark {} had closed it",
                show_row(&w.identity),
                show_watermark(recorded)
            )),
            ("open", Some(_)) => {}
            ("undetermined", _) => {
                undetermined.push(format!("window {} is undetermined: {}", show_row(&w.identity), w.why))
            }
            (_, None) => failures.push(format!("window {} has no readable end", show_row(&w.identity))),
            _ => {}
        }
    }
    let open = artifact.left_out.iter().filter(|w| w.status == "open").count();
    let evidence = [format!(
        "checkpoint {n}, recorded watermark {}: {} windows given, {open} left out as open, {} undetermined",
        show_watermark(recorded),
        artifact.rows.len(),
        undetermined.len()
    )];
    if !failures.is_empty() {
        return CheckResult::new(
            name,
            Status::Failed,
            format!("{} windows are not where finality puts them", failures.len()),
        )
        .evidence(evidence)
        .details(failures.into_iter().take(20))
        .next("the reference (or the job) decides finality otherwise than the recorded watermark does: find which");
    }
    if !undetermined.is_empty() {
        return CheckResult::new(
            name,
            Status::Unavailable,
            format!(
                "{} windows are undetermined: the evidence cannot say whether they are final or what they hold",
                undetermined.len()
            ),
        )
        .evidence(evidence)
        .details(undetermined.into_iter().take(20));
    }
    CheckResult::new(
        name,
        Status::Passed,
        "every window the reference computed is decided: each it gives had closed by the recorded watermark, each it leaves open had not",
    )
    .evidence(evidence)
}

/// The bound a reference gives at a checkpoint, for a report.
pub fn describe_bounds(artifact: &Artifact) -> Vec<(u64, Bound)> {
    artifact.source_bounds.clone()
}
