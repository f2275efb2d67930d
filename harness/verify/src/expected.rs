//! replay.expected_output: the replayed rows of one operator's selected
//! epochs against an expectation, compared as multisets, and the reader of
//! the expectation file (NDJSON arrays typed by the operator's output schema).

use std::collections::BTreeSet;
use std::path::Path;

use clink_basics::ids::OperatorId;
use clink_basics::multiset::multiset_diff;
use clink_bundle::EpochEntry;
use clink_engine::value::{row_bytes, value_from_json, Row};
use serde_json::Value as Json;

use super::{CheckResult, Counts, Status, UsageError};
use clink_replay::EpochRef;

/// An expectation file larger than this is refused unread.
const MAX_EXPECTED_BYTES: u64 = 256 << 20;

/// What one checked epoch's replay gave the expectation.
pub(crate) struct Replayed<'a> {
    pub at: &'a EpochRef,
    /// The whole epoch's replayed rows, when it was replayed whole.
    pub rows: Option<&'a Vec<Row>>,
    pub output_schema: Option<&'a clink_engine::value::Schema>,
}

/// Why an expectation (`--expected`) does not read; `line` counts from 1.
#[derive(Debug, thiserror::Error)]
pub enum ExpectedError {
    #[error("line {line}: not JSON: {error}")]
    NotJson { line: usize, error: serde_json::Error },
    #[error("line {line}: expected a JSON array of cells")]
    NotAnArray { line: usize },
    #[error("line {line}: {cells} cells, the operator emits {columns} columns")]
    Width { line: usize, cells: usize, columns: usize },
    #[error("line {line}: column {column}: {cell} is not a {ty:?}")]
    WrongType { line: usize, column: String, cell: Json, ty: clink_engine::value::ColumnType },
}

/// Parses an expectation: one JSON array per line, the operator's output
/// columns in order (decimals as strings, timestamps as epoch milliseconds).
pub fn parse_expected(text: &str, schema: &clink_engine::value::Schema) -> Result<Vec<Row>, ExpectedError> {
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let at = i + 1;
        let v: Json = serde_json::from_str(line).map_err(|error| ExpectedError::NotJson { line: at, error })?;
        let cells = v.as_array().ok_or(ExpectedError::NotAnArray { line: at })?;
        if cells.len() != schema.0.len() {
            return Err(ExpectedError::Width { line: at, cells: cells.len(), columns: schema.0.len() });
        }
        let row = cells
            .iter()
            .zip(&schema.0)
            .map(|(cell, col)| {
                value_from_json(cell, col.ty).ok_or_else(|| ExpectedError::WrongType {
                    line: at,
                    column: col.name.clone(),
                    cell: cell.clone(),
                    ty: col.ty,
                })
            })
            .collect::<Result<Row, ExpectedError>>()?;
        rows.push(row);
    }
    Ok(rows)
}

pub(crate) fn expected_output(
    path: &Path,
    selected: &[&EpochEntry],
    results: &[Replayed<'_>],
    mut counts: Counts,
    omitted: &[String],
    restores: &[(u64, u64)],
) -> Result<CheckResult, UsageError> {
    let name = "replay.expected_output";
    let ops: BTreeSet<OperatorId> = selected.iter().map(|e| e.operator_id()).collect();
    if ops.len() != 1 {
        return Err(UsageError(format!(
            "replay.expected_output compares one operator's epochs; the selection holds {} operators: narrow it with --op",
            ops.len()
        )));
    }
    let text = clink_basics::files::read_bounded_text(path, MAX_EXPECTED_BYTES)
        .map_err(|e| UsageError(format!("--expected {}: {e}", path.display())))?;
    let Some(schema) = results.iter().find_map(|r| r.output_schema.cloned()) else {
        return Ok(CheckResult::new(
            name,
            Status::Unavailable,
            "no selected epoch could be loaded to learn the operator's columns",
        ));
    };
    let expected =
        parse_expected(&text, &schema).map_err(|e| UsageError(format!("--expected {}: {e}", path.display())))?;
    // Epochs a RESTORED record passes over were processed again after the restore.
    let passed_over = |epoch: u64| restores.iter().any(|&(from, next)| from < epoch && epoch < next);
    let mut details = Vec::new();
    let mut replayed = Vec::new();
    let mut all_whole = counts.omitted == 0;
    for r in results {
        if passed_over(r.at.epoch) {
            details
                .push(format!("left out: {}: a restore passed over it; its events were processed again after", r.at));
            continue;
        }
        match r.rows {
            Some(rows) => {
                counts.passed += 1;
                replayed.extend(rows.iter().cloned());
            }
            None => {
                all_whole = false;
                counts.unavailable += 1;
                details.push(format!("not replayed whole: {}", r.at));
            }
        }
    }
    let diff = multiset_diff(expected.iter().map(|r| row_bytes(r)), replayed.iter().map(|r| row_bytes(r)));
    let show = |bytes: &Vec<u8>| {
        clink_engine::value::row_from_bytes(bytes).map(|r| format!("{r:?}")).unwrap_or_else(|_| "?".into())
    };
    let status = if diff.unexpected_copies() > 0 {
        for (row, n) in diff.unexpected.iter().take(10) {
            details.push(format!("emitted but not expected x{n}: {}", show(row)));
        }
        Status::Failed
    } else if diff.missing_copies() > 0 && all_whole {
        for (row, n) in diff.missing.iter().take(10) {
            details.push(format!("expected but not emitted x{n}: {}", show(row)));
        }
        Status::Failed
    } else if !all_whole || selected.is_empty() {
        Status::Unavailable
    } else {
        Status::Passed
    };
    counts.failed = usize::from(status == Status::Failed);
    if counts.omitted > 0 {
        details.push(format!("omitted by --max-replays: {}", omitted.join("; ")));
    }
    let reason = match status {
        Status::Passed => {
            "every selected epoch was replayed whole, and together they emit exactly the expected rows (as multisets)"
                .to_string()
        }
        Status::Failed => format!(
            "{} rows emitted that the expectation does not hold, {} expected rows not emitted",
            diff.unexpected_copies(),
            diff.missing_copies()
        ),
        _ => "not every selected epoch was replayed whole, so a missing row may belong to an epoch not replayed"
            .to_string(),
    };
    let mut result = CheckResult::new(name, status, reason)
        .evidence([format!("{} expected rows, {} replayed rows", expected.len(), replayed.len())])
        .details(details);
    result.counts = Some(counts);
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clink_engine::value::{ColumnType, Schema, Value};

    #[test]
    fn an_expectation_is_refused_by_line_with_what_was_expected() {
        let schema = Schema::of(&[("key", ColumnType::String), ("count", ColumnType::Int)]);
        assert_eq!(
            parse_expected("[\"a\", 1]\n\n[\"b\", 2]\n", &schema).unwrap()[1],
            vec![Value::Str("b".into()), Value::Int(2)]
        );
        assert!(matches!(parse_expected("[\"a\", 1]\n{", &schema), Err(ExpectedError::NotJson { line: 2, .. })));
        assert!(matches!(parse_expected("{}", &schema), Err(ExpectedError::NotAnArray { line: 1 })));
        let width = parse_expected("[\"a\"]", &schema).unwrap_err();
        assert_eq!(width.to_string(), "line 1: 1 cells, the operator emits 2 columns");
        let typed = parse_expected("[\"a\", \"one\"]", &schema).unwrap_err();
        assert!(matches!(&typed, ExpectedError::WrongType { line: 1, column, .. } if column == "count"), "{typed}");
        assert_eq!(typed.to_string(), "line 1: column count: \"one\" is not a Int");
    }
}
