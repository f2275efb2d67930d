//! One sink subtask's interval as the bundle holds it: its evidence, its
//! recorded input as cells, and whether the two account for each other.

use clink_bundle::Bundle;
use clink_engine::event::Event;
use serde_json::Value as Json;

use super::{ScopeError, SubtaskInterval};
use crate::cells::{self, Cell, CellKind};
use crate::evidence::{self, SinkPlace, Unread};

/// One sink subtask's interval from the bundle, and what is not whole in
/// it; evidence or a capture that names another place refuses the scope.
pub(super) fn read_subtask_interval(
    bundle: &Bundle,
    place: &SinkPlace<'_>,
    kinds: &[CellKind],
) -> Result<(SubtaskInterval, Option<String>), ScopeError> {
    let mut s = SubtaskInterval {
        subtask: place.subtask,
        evidence: None,
        rows: None,
        inserts: Vec::new(),
        rows_without_evidence: None,
    };
    let label = format!("interval {} of sink subtask {}", place.epoch, place.subtask);
    let evidence = match evidence::sink_evidence(bundle, place) {
        Ok(e) => e,
        Err(Unread::Absent(_)) => {
            // A run killed between its INSERT and its evidence leaves the
            // recorded input alone: enough to say what it may have sent.
            match read_rows(bundle, place, kinds, &label) {
                Ok(rows) => s.rows_without_evidence = Some(rows),
                Err(Unread::Refused(why)) => return Err(ScopeError::Refused(why)),
                Err(_) => {}
            }
            let why = format!("{label}: its evidence ({}) is not in the bundle", place.evidence_path());
            return Ok((s, Some(why)));
        }
        Err(Unread::Refused(why)) => return Err(ScopeError::Refused(why)),
        Err(Unread::Unreadable(why)) => return Ok((s, Some(format!("{label}: {why}")))),
    };
    let interval = evidence.sink.get("interval").cloned().unwrap_or(Json::Null);
    s.inserts = interval.get("inserts").and_then(Json::as_array).cloned().unwrap_or_default();
    let recorded_rows = interval.get("rows").and_then(Json::as_u64);
    s.evidence = Some(evidence.clone());
    if evidence.capture.truncated {
        return Ok((s, Some(format!("{label}: the sink's recorded input was truncated (raise --capture-records)"))));
    }
    let (rows, true_records) = match read_rows(bundle, place, kinds, &label) {
        Ok(r) => r,
        Err(Unread::Refused(why)) => return Err(ScopeError::Refused(why)),
        Err(problem) => return Ok((s, Some(problem.message().to_string()))),
    };
    let n = rows.len() as u64;
    if true_records != n || evidence.capture.records != n {
        return Ok((
            s,
            Some(format!(
                "{label}: the recorded input holds {n} rows, its header counts {true_records} and the evidence {}",
                evidence.capture.records
            )),
        ));
    }
    let ledger: u64 = s.inserts.iter().filter_map(|i| i.get("rows").and_then(Json::as_u64)).sum();
    if recorded_rows != Some(n) || ledger != n {
        return Ok((s, Some(format!(
            "{label}: the sink's ledger does not account for exactly the {n} rows its recorded input holds (interval rows {}, INSERTs {ledger})",
            recorded_rows.map_or("absent".to_string(), |r| r.to_string())
        ))));
    }
    s.rows = Some(rows);
    Ok((s, None))
}

/// The rows of a sink's recorded input, whole, as cells, and the count its header gives.
fn read_rows(
    bundle: &Bundle,
    place: &SinkPlace<'_>,
    kinds: &[CellKind],
    label: &str,
) -> Result<(Vec<Vec<Cell>>, u64), Unread> {
    let path = place.capture_path();
    let capture = evidence::sink_capture(bundle, place).map_err(|e| match e {
        Unread::Absent(_) => Unread::Absent(format!("{label}: its recorded input ({path}) is not in the bundle")),
        Unread::Unreadable(why) => Unread::Unreadable(format!("{label}: {why}")),
        refused => refused,
    })?;
    let unreadable = |why: String| Unread::Unreadable(format!("{label}: {why}"));
    if !capture.is_whole() {
        return Err(unreadable(format!("{path} is not whole (truncated or cut short)")));
    }
    let mut rows = Vec::new();
    for event in &capture.events {
        if let Event::Record(row) = event {
            if row.len() != kinds.len() {
                return Err(unreadable(format!(
                    "a recorded row has {} values, the sink writes {} columns",
                    row.len(),
                    kinds.len()
                )));
            }
            let cells: Result<Vec<Cell>, _> = row.iter().zip(kinds).map(|(v, k)| cells::from_value(v, *k)).collect();
            rows.push(cells.map_err(|e| unreadable(format!("a recorded row: {e}")))?);
        }
    }
    Ok((rows, capture.header.true_records))
}
