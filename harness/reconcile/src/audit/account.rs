//! The report's account of a reconciliation beside its checks: the scope
//! summarized, the findings of each relationship, and the expected rows
//! written out for an independent check of the expectation.

use std::path::PathBuf;

use serde_json::{json, Value as Json};

use crate::cells;
use crate::compare::{Comparison, Row};
use crate::report::Findings;
use crate::scope::{Scope, ScopeKind, Start};

/// The expected rows as canonical cells, one JSON object per line, written
/// beside the path and renamed into place.
pub(super) fn write_expected(path: &std::path::Path, scope: &Scope, rows: &[Row]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut tmp = tempfile::Builder::new().prefix(".clink-expected-").tempfile_in(&dir)?;
    {
        let mut w = std::io::BufWriter::new(tmp.as_file_mut());
        let names: Vec<&str> = scope.shape.columns.iter().map(|c| c.name.as_str()).collect();
        writeln!(
            w,
            "{}",
            json!({"type": "columns", "columns": names, "cells": scope.kinds.iter().map(|k| k.name()).collect::<Vec<_>>(), "semantics": cells::SEMANTICS, "scope_sha256": scope.document().get("scope_sha256")})
        )?;
        for row in rows {
            writeln!(w, "{}", json!({"type": "row", "cells": cells::row_json(row)}))?;
        }
        w.flush()?;
    }
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

pub(super) fn findings(relationship: &'static str, compares: &'static str, c: &Comparison, list: usize) -> Findings {
    Findings {
        relationship,
        compares,
        summary: c.summary(),
        count: c.findings.len(),
        first: c.findings.iter().take(list).map(|f| f.describe()).collect(),
    }
}

pub(super) fn scope_summary(scope: &Scope, doc: &Json, expected: &[Row]) -> Json {
    let start = match scope.start {
        Start::RunStart => "the run's start (no state)".to_string(),
        Start::Checkpoint(c) => format!("checkpoint {c}"),
    };
    let intervals: Vec<Json> = scope
        .intervals
        .iter()
        .map(|i| {
            json!({
                "epoch": i.epoch,
                "previous_barrier": i.previous_barrier,
                "rows": i.rows(),
                "watermark": i.recorded_watermark().map(crate::scope::watermark_json),
                "subtasks": i.subtasks.iter().map(|s| json!({
                    "subtask": s.subtask,
                    "rows": s.rows.as_ref().map(Vec::len),
                    "inserts": s.inserts,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let same_log = doc.pointer("/sources/0/same_log").cloned().unwrap_or(Json::Null);
    let reason = doc.pointer("/sources/0/same_log_reason").and_then(Json::as_str).unwrap_or_default();
    let log_note = match same_log {
        Json::Bool(false) => format!("the two ends name different logs ({reason}): the offsets are not a range of one log; the verdict compares the destination with the sink's own record and does not change"),
        _ => reason.to_string(),
    };
    json!({
        "summary": format!(
            "checkpoint {} back to {start}: {} intervals, {} rows{}",
            scope.request.checkpoint,
            scope.intervals.len(),
            expected.len(),
            if scope.crossings.is_empty() { String::new() } else { format!(", through {} restores", scope.crossings.len()) }
        ),
        "kind": match scope.request.kind { ScopeKind::Interval => "interval".to_string(), ScopeKind::Lineage => "lineage".to_string(), ScopeKind::Increment { base } => format!("increment since {base}") },
        "intervals": intervals,
        "discarded_intervals": scope.discarded.iter().map(|d| d.epoch).collect::<Vec<_>>(),
        "log": log_note,
        "problems": scope.problems,
    })
}
