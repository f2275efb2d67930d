//! The reference audit's relationships: the artifact bound to the audit's
//! own scope (reference.scope), the reference against the sink's recorded
//! input (reference.capture: the transformation) and against the
//! destination (reference.destination), and for a windowed job the window
//! rules, the recorded watermarks and finality (`crate::window`).
//!
//! The windows the reference leaves out are kept out of every comparison
//! with it. Two sides that hold no row establish nothing: such a comparison
//! is unavailable, never passed because two empty sets are equal.

use std::collections::BTreeSet;

use clink_verify::{CheckResult, Status};
use serde_json::Value as Json;

use super::reads::Reads;
use super::{behind, findings};
use crate::artifact::Artifact;
use crate::compare::{compare, explain_duplicates, Comparison, Key, Keyed};
use crate::read::by_key;
use crate::report::Findings;
use crate::scope::Scope;
use crate::window;

/// The reference checks a job's audit reports.
pub(super) fn names(windowed: bool) -> Vec<&'static str> {
    let mut names = vec!["reference.scope", "reference.capture", "reference.destination"];
    if windowed {
        names.extend(["reference.semantics", "reference.watermark", "reference.finality"]);
    }
    names
}

/// What the reference audit found: its checks and each relationship's findings.
#[derive(Default)]
pub(super) struct Audit {
    pub checks: Vec<CheckResult>,
    pub findings: Vec<Findings>,
}

/// The sides an audit compares, keyed, before the windows left out are removed.
pub(super) struct Sides<'a> {
    /// The sink's recorded input over the scope.
    pub captured: &'a Keyed,
    /// The reference's rows.
    pub reference: &'a Keyed,
    /// The identities of the windows the reference leaves out.
    pub left_out: &'a BTreeSet<Key>,
    pub key: &'a [usize],
}

/// Every reference check of one audit.
pub(super) fn audit(
    scope: &Scope,
    scope_doc: &Json,
    artifact: &Artifact,
    sides: &Sides<'_>,
    reads: Option<&Reads>,
    list: usize,
) -> Audit {
    let mut out = Audit::default();
    let windowed = scope.shape.windowed();
    if !artifact.complete {
        let why = format!(
            "the reference is incomplete ({}): it is bound to the scope and never compared",
            artifact.incomplete_reason.clone().unwrap_or_default()
        );
        for name in ["reference.scope", "reference.capture", "reference.destination"] {
            out.checks.push(behind(name, Status::Unavailable, &why));
        }
        if windowed.is_some() {
            out.checks.push(window::semantics(scope_doc, artifact));
            out.checks.push(behind("reference.watermark", Status::Unavailable, &why));
            out.checks.push(behind("reference.finality", Status::Unavailable, &why));
        }
        return out;
    }
    out.checks.push(bound_check(scope_doc, artifact));
    let without = |k: &Keyed| -> Keyed {
        k.iter().filter(|(key, _)| !sides.left_out.contains(*key)).map(|(k, v)| (k.clone(), v.clone())).collect()
    };
    let captured = without(sides.captured);
    let reference = without(sides.reference);
    let union: BTreeSet<Key> = captured.keys().chain(reference.keys()).cloned().collect();
    let mut transformation = compare(&reference, &captured, &union);
    explain_duplicates(&mut transformation, &scope.duplicate_sources());
    out.checks.push(capture_check(&transformation, &captured, &reference, list));
    out.findings.push(findings(
        "transformation",
        "the reference against the sink's recorded input",
        &transformation,
        list,
    ));
    let (check, compared) = destination_check(scope, &reference, &union, reads, &without, sides.key, list);
    out.checks.push(check);
    if let Some(c) = compared {
        out.findings.push(findings("reference-destination", "the reference against the destination", &c, list));
    }
    if let Some(rules) = windowed {
        let end_at = scope.shape.columns.iter().position(|c| c.name == "window_end").unwrap_or(usize::MAX);
        out.checks.push(window::semantics(scope_doc, artifact));
        out.checks.push(window::watermark(scope, artifact, end_at, rules.allowed_lateness_ms));
        out.checks.push(window::finality(scope, artifact, end_at, rules.allowed_lateness_ms));
    }
    out
}

fn bound_check(scope_doc: &Json, artifact: &Artifact) -> CheckResult {
    CheckResult::new(
        "reference.scope",
        Status::Passed,
        "the artifact is bound to the audit's own scope, whole by its hashes, its cells canonical",
    )
    .evidence([
        format!("scope_sha256 {}", scope_doc.get("scope_sha256").and_then(Json::as_str).unwrap_or_default()),
        format!("implementation {}", artifact.implementation()),
    ])
}

/// Whether a keyed side holds no row.
fn holds_no_row(side: &Keyed) -> bool {
    side.values().all(Vec::is_empty)
}

/// reference.capture: the transformation, from the comparison of the
/// reference with the captured input (both without the windows left out).
pub(super) fn capture_check(
    transformation: &Comparison,
    captured: &Keyed,
    reference: &Keyed,
    list: usize,
) -> CheckResult {
    let name = "reference.capture";
    if holds_no_row(captured) && holds_no_row(reference) {
        return CheckResult::new(name, Status::Unavailable, "neither side holds a row: nothing is established")
            .next("audit a checkpoint whose scope the job wrote rows in");
    }
    if transformation.equal() {
        return CheckResult::new(
            name,
            Status::Passed,
            "the sink received exactly the reference's rows, each once and value for value",
        )
        .evidence([transformation.summary()]);
    }
    CheckResult::new(
        name,
        Status::Failed,
        format!("the job computed other rows than the reference, before any write: {}", transformation.summary()),
    )
    .details(transformation.findings.iter().take(list).map(|f| f.describe()))
    .next("the transformation: compare the job's logic with its specification")
}

/// reference.destination: the reference against the destination over the
/// union of the reference's and the captured input's keys.
fn destination_check(
    scope: &Scope,
    reference: &Keyed,
    union: &BTreeSet<Key>,
    reads: Option<&Reads>,
    without: &dyn Fn(&Keyed) -> Keyed,
    key: &[usize],
    list: usize,
) -> (CheckResult, Option<Comparison>) {
    let name = "reference.destination";
    let Some(r) = reads else {
        return (behind(name, Status::Unavailable, "the destination was not read"), None);
    };
    if let Some(f) = &r.failure {
        return (behind(name, Status::Unavailable, &format!("a read did not complete: {f}")), None);
    }
    if let Some(why) = &r.unstable {
        return (behind(name, Status::Unavailable, why), None);
    }
    let observed = without(&by_key(r.first.clone(), key));
    let mut c = compare(reference, &observed, union);
    explain_duplicates(&mut c, &scope.duplicate_sources());
    (destination_verdict(&c, union, list), Some(c))
}

/// The verdict of the reference against the destination: no key selected
/// establishes nothing.
pub(super) fn destination_verdict(c: &Comparison, union: &BTreeSet<Key>, list: usize) -> CheckResult {
    let name = "reference.destination";
    if union.is_empty() {
        return CheckResult::new(
            name,
            Status::Unavailable,
            "no key is selected (neither the reference nor the captured input holds a row): nothing is established",
        );
    }
    if c.equal() {
        return CheckResult::new(
            name,
            Status::Passed,
            "the destination holds exactly the reference's rows for the keys read",
        )
        .evidence([c.summary()]);
    }
    CheckResult::new(
        name,
        Status::Failed,
        format!("the destination does not hold what the reference computes: {}", c.summary()),
    )
    .details(c.findings.iter().take(list).map(|f| f.describe()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn keyed(rows: &[(&str, &str)]) -> Keyed {
        let mut k: Keyed = BTreeMap::new();
        for (key, value) in rows {
            k.entry(vec![Some(key.to_string())])
                .or_default()
                .push(vec![Some(key.to_string()), Some(value.to_string())]);
        }
        k
    }

    fn compared(a: &Keyed, b: &Keyed) -> (Comparison, BTreeSet<Key>) {
        let union: BTreeSet<Key> = a.keys().chain(b.keys()).cloned().collect();
        (compare(a, b, &union), union)
    }

    #[test]
    fn two_sides_without_a_row_establish_nothing_rather_than_pass() {
        let empty = Keyed::new();
        let (c, union) = compared(&empty, &empty);
        assert!(c.equal(), "two empty sides compare equal, which is why emptiness is asked first");
        let capture = capture_check(&c, &empty, &empty, 5);
        assert_eq!(capture.status, Status::Unavailable, "{}", capture.reason);
        assert!(capture.reason.contains("neither side holds a row"));
        let destination = destination_verdict(&c, &union, 5);
        assert_eq!(destination.status, Status::Unavailable, "{}", destination.reason);
    }

    #[test]
    fn rows_on_either_side_are_compared() {
        let one = keyed(&[("1", "a")]);
        let other = keyed(&[("1", "b")]);
        let (same, union) = compared(&one, &one);
        assert_eq!(capture_check(&same, &one, &one, 5).status, Status::Passed);
        assert_eq!(destination_verdict(&same, &union, 5).status, Status::Passed);
        let (changed, union) = compared(&one, &other);
        assert_eq!(capture_check(&changed, &other, &one, 5).status, Status::Failed);
        assert_eq!(destination_verdict(&changed, &union, 5).status, Status::Failed);
        // The reference holds a row the job never wrote: a failure, not "nothing".
        let empty = Keyed::new();
        let (missing, _) = compared(&one, &empty);
        assert_eq!(capture_check(&missing, &empty, &one, 5).status, Status::Failed);
    }
}
