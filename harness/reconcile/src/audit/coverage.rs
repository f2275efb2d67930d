//! destination.coverage (--coverage=complete-table): the whole table
//! against the expected rows, established only when every precondition
//! holds (the operator's declaration, a scope from a run that began with no
//! state, a run that had stopped writing, a still table, no mutation).

use std::collections::BTreeSet;

use clink_verify::{CheckResult, Status};

use super::options::Options;
use super::reads::{Reads, Whole};
use crate::artifact::LeftOut;
use crate::compare::{compare, explain_duplicates, Comparison, Key, Row};
use crate::read::by_key;
use crate::scope::{Interval, Scope, Start};

/// How the reference names a window it could not decide.
const UNDETERMINED: &str = "undetermined";

#[allow(clippy::too_many_arguments)]
pub(super) fn coverage_check(
    scope: &Scope,
    options: &Options,
    reads: Option<&Reads>,
    whole: Option<&Whole>,
    expected: &[Row],
    basis: &str,
    key: &[usize],
    left_out: &[LeftOut],
    basis_usable: bool,
) -> (CheckResult, Option<Comparison>) {
    let name = "destination.coverage";
    let mut unmet = Vec::new();
    if !options.table_holds_only_this_run {
        unmet.push("the operator has not declared that the table holds this one run's writes and nothing else (--assume-table-holds-only-this-run)".to_string());
    }
    if scope.start != Start::RunStart {
        unmet.push("the scope does not reach back to a run that began with no state".to_string());
    }
    if !basis_usable {
        unmet.push("the reference is incomplete".to_string());
    }
    let stopped = scope.final_checkpoint || {
        let whole_after = |i: &Interval| i.subtasks.iter().all(|s| s.rows.is_some());
        let empties = scope.after.iter().filter(|i| whole_after(i) && i.rows() == 0).count();
        empties >= 2 && !scope.after.iter().any(|i| i.rows() > 0 || !whole_after(i))
    };
    if !stopped {
        unmet.push(format!(
            "the bundle does not show the run had stopped writing: checkpoint {} is not its final one, and fewer than two empty intervals of every sink subtask follow it",
            scope.request.checkpoint
        ));
    }
    let Some(whole) = whole else {
        unmet.push("the table was not read".into());
        return (CheckResult::new(name, Status::Unavailable, "the whole table was not read").details(unmet), None);
    };
    match (&whole.parts_before, &whole.parts_after) {
        (Ok(a), Ok(b)) if a == b => {}
        (Ok(_), Ok(_)) => unmet.push("the table's active parts changed during the read".into()),
        (Err(e), _) | (_, Err(e)) => unmet.push(format!("the table's parts could not be read: {e}")),
    }
    match reads {
        Some(r) if r.unstable.is_some() => unmet.push(r.unstable.clone().unwrap_or_default()),
        Some(r) if r.mutations_before.iter().any(|m| !m.done) => unmet.push("a mutation is in progress".into()),
        None => unmet.push("the selected keys were not read".into()),
        _ => {}
    }
    let rows = match &whole.rows {
        Ok(rows) => rows.clone(),
        Err(e) => {
            unmet.push(if e.kind == "bound" {
                format!(
                    "the table has more rows than --max-table-rows {} allows, or its read reached a bound: {e}",
                    options.bounds.max_table_rows
                )
            } else {
                format!("the whole table could not be read: {e}")
            });
            Vec::new()
        }
    };
    if !unmet.is_empty() {
        return (
            CheckResult::new(
                name,
                Status::Unavailable,
                "the whole table's coverage is not established: a precondition does not hold",
            )
            .details(unmet),
            None,
        );
    }
    let (mut c, left) = compare_whole_table(rows, expected, key, left_out);
    explain_duplicates(&mut c, &scope.duplicate_sources());
    let evidence = vec![format!("against {basis}: {}; {left} rows of undetermined windows left out", c.summary())];
    if c.equal() {
        (
            CheckResult::new(name, Status::Passed, format!("the whole table holds exactly {basis}")).evidence(evidence),
            Some(c),
        )
    } else {
        let details: Vec<String> = c.findings.iter().take(options.list).map(|f| f.describe()).collect();
        (
            CheckResult::new(
                name,
                Status::Failed,
                format!("the table holds rows the scope does not account for, or lacks some: {}", c.summary()),
            )
            .evidence(evidence)
            .details(details),
            Some(c),
        )
    }
}

/// The whole table against the expected rows, key by key. Rows of windows
/// the reference left out as undetermined are counted and kept out; a row of
/// a window it left out as open, or of an identity neither side names, is
/// compared, and so fails as unexpected.
pub(super) fn compare_whole_table(
    table: Vec<Row>,
    expected: &[Row],
    key: &[usize],
    left_out: &[LeftOut],
) -> (Comparison, usize) {
    let undetermined: BTreeSet<&Key> =
        left_out.iter().filter(|w| w.status == UNDETERMINED).map(|w| &w.identity).collect();
    let (kept_out, compared): (Vec<Row>, Vec<Row>) = table.into_iter().partition(|r| {
        let k: Key = key.iter().map(|&i| r.get(i).cloned().flatten()).collect();
        undetermined.contains(&k)
    });
    let expected_keyed = by_key(expected.to_vec(), key);
    let table_keyed = by_key(compared, key);
    let keys: BTreeSet<Key> = expected_keyed.keys().chain(table_keyed.keys()).cloned().collect();
    (compare(&expected_keyed, &table_keyed, &keys), kept_out.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(account: &str, start: &str, count: &str) -> Row {
        vec![Some(account.into()), Some(start.into()), Some(count.into())]
    }

    fn window(account: &str, start: &str, status: &str) -> LeftOut {
        LeftOut { identity: vec![Some(account.into()), Some(start.into())], status: status.into(), why: "w".into() }
    }

    #[test]
    fn a_row_of_an_open_window_fails_and_one_of_an_undetermined_window_is_left_out() {
        let key = [0, 1];
        let expected = vec![row("a", "0", "3")];
        let left_out = vec![window("b", "10", "undetermined"), window("c", "10", "open")];
        let (c, left) = compare_whole_table(vec![row("a", "0", "3"), row("b", "10", "1")], &expected, &key, &left_out);
        assert!(c.equal(), "{}", c.summary());
        assert_eq!(left, 1, "the undetermined window's row is counted and kept out");
        let (c, left) = compare_whole_table(vec![row("a", "0", "3"), row("c", "10", "1")], &expected, &key, &left_out);
        assert_eq!((c.unexpected, left), (1, 0), "a row of a window the reference left open fails: {}", c.summary());
        let (c, _) = compare_whole_table(vec![row("a", "0", "3"), row("z", "0", "1")], &expected, &key, &left_out);
        assert_eq!(c.unexpected, 1, "a row of an identity neither side names fails");
    }
}
