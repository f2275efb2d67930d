//! reconcile.scope and reconcile.rows: whether the sink's input for the
//! scope is in the bundle whole and keyed one row per key, and whether the
//! destination holds exactly it, each row once and value for value.

use std::collections::BTreeSet;

use clink_verify::{CheckResult, Status};

use super::reads::Reads;
use crate::cells::{self, CellKind};
use crate::compare::{compare, explain_duplicates, Comparison, Key, Keyed, Row};
use crate::read::by_key;
use crate::scope::Scope;

pub(super) fn scope_check(scope: &Scope, expected: &[Row], key: &[usize], key_kinds: &[CellKind]) -> CheckResult {
    let name = "reconcile.scope";
    let evidence = vec![format!(
        "{} intervals ({}), {} rows of the sink's recorded input",
        scope.intervals.len(),
        scope.intervals.iter().map(|i| i.epoch.to_string()).collect::<Vec<_>>().join(", "),
        expected.len()
    )];
    if !scope.whole() {
        return CheckResult::new(
            name,
            Status::Unavailable,
            "the sink's evidence for the scope is not in the bundle whole",
        )
        .evidence(evidence)
        .details(scope.problems.iter().take(20).cloned())
        .next("collect with --include-state --include-captures (and --epochs all, or --epochs reaching back over the scope)");
    }
    if let Some((i, kind)) = key.iter().zip(key_kinds).find(|(_, k)| !k.can_key()) {
        return CheckResult::new(
            name,
            Status::Unsupported,
            format!(
                "key column {:?} is a {kind} column; a key must be integer or string",
                scope.shape.columns[*i].name
            ),
        );
    }
    if expected.is_empty() {
        return CheckResult::new(
            name,
            Status::Unavailable,
            "the scope's intervals held no rows, which establishes nothing",
        )
        .evidence(evidence)
        .next("reconcile a checkpoint whose intervals wrote rows");
    }
    let grouped = by_key(expected.to_vec(), key);
    if let Some((k, rows)) = grouped.iter().find(|(_, rows)| rows.len() > 1) {
        return CheckResult::new(
            name,
            Status::Unsupported,
            format!(
                "the key does not identify one row of the scope: key {} has {} rows",
                cells::show_row(k),
                rows.len()
            ),
        )
        .evidence(evidence)
        .next("name the columns that identify one row with --key");
    }
    if let Some(k) = grouped.keys().find(|k| k.iter().any(Option::is_none)) {
        return CheckResult::new(
            name,
            Status::Unsupported,
            format!("key {} holds a NULL, which selects nothing", cells::show_row(k)),
        );
    }
    CheckResult::new(
        name,
        Status::Passed,
        "the sink's input for the scope is in the bundle whole, and the key identifies one row of it",
    )
    .evidence(evidence)
}

/// reconcile.rows: the sink's recorded input against the table, over its own keys.
pub(super) fn rows_check(
    scope: &Scope,
    reads: &Reads,
    expected: &Keyed,
    keys: &BTreeSet<Key>,
    key: &[usize],
    list: usize,
) -> (CheckResult, Option<Comparison>) {
    let name = "reconcile.rows";
    if let Some(f) = &reads.failure {
        let why = if f.kind == "bound" {
            format!("a read reached a bound, so nothing is decided on part of an answer: {}", f.message)
        } else {
            format!("a read did not complete: {f}")
        };
        return (
            CheckResult::new(name, Status::Unavailable, why).next(
                "raise --query-timeout-ms or --max-rows-per-query, or lower --keys-per-query, and reconcile again",
            ),
            None,
        );
    }
    if let Some(why) = &reads.unstable {
        return (
            CheckResult::new(name, Status::Unavailable, why.clone()).next("reconcile again once the table is still"),
            None,
        );
    }
    let observed = by_key(reads.first.clone(), key);
    let mut c = compare(expected, &observed, keys);
    explain_duplicates(&mut c, &scope.duplicate_sources());
    let evidence = vec![c.summary(), format!("mutations done before the read: {}", reads.mutations_before.len())];
    if c.equal() {
        return (
            CheckResult::new(
                name,
                Status::Passed,
                "the table holds exactly the scope's rows, each once and value for value, and two reads agreed",
            )
            .evidence(evidence),
            Some(c),
        );
    }
    let broken = c.missing + c.changed + c.unexpected;
    let reason = if broken > 0 {
        format!("the table does not hold what the sink received (at least once is broken): {}", c.summary())
    } else {
        format!(
            "the table holds some of the scope's rows more than once ({} copies, {} explained by the evidence): at least once holds, exactly once in the table does not",
            c.duplicated, c.duplicated_explained
        )
    };
    let details: Vec<String> = c.findings.iter().take(list).map(|f| f.describe()).collect();
    (
        CheckResult::new(name, Status::Failed, reason)
            .evidence(evidence)
            .details(details)
            .next("the delivery: look at the listed keys in the table and the sink's INSERT ledger"),
        Some(c),
    )
}
