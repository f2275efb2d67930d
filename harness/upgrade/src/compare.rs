//! How the upgrade check compares: output rows parsed into typed tuples and
//! compared as multisets (clink-basics' one multiset comparison, so a
//! repeated row and a missing one both count and no two spellings of one
//! value differ), and state compared logically from the tools build's
//! listing (`clink state-cat --json`), row by row in the reference's form.
//!
//! A row in no documented encoding is kept (as unreadable, or listed as
//! undocumented), never dropped; keyed rows held by a subtask that does not
//! own them are counted and reported, never compared. Order is not compared:
//! neither the job nor the engine documents one across keys or windows.

use std::collections::BTreeSet;
use std::fmt;
use std::path::Path;

use clink_basics::multiset::{describe, multiset_diff, MultisetDiff};
use clink_reference::upgrade::normal_decimal;
use serde_json::Value as Json;

use crate::definition::Definition;

/// One output row, typed.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Row {
    Window {
        account: String,
        start: i64,
        end: i64,
        count: i64,
        sum: String,
    },
    Idle {
        account: String,
        last_seen: i64,
        count: i64,
    },
    /// A line that reads as neither: kept, so it counts.
    Unreadable {
        sink: String,
        line: String,
    },
}

impl fmt::Display for Row {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Row::Window { account, start, end, count, sum } => {
                write!(f, "window {account},{start},{end},{count},{sum}")
            }
            Row::Idle { account, last_seen, count } => write!(f, "idle {account},{last_seen},{count}"),
            Row::Unreadable { sink, line } => write!(f, "unreadable in {sink}: {line:?}"),
        }
    }
}

fn decimal(text: &str) -> Option<String> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    let ok = !digits.is_empty()
        && digits.split('.').count() <= 2
        && digits.chars().all(|c| c.is_ascii_digit() || c == '.')
        && !digits.starts_with('.')
        && !digits.ends_with('.');
    ok.then(|| normal_decimal(text))
}

/// Parses a windows line (`account,start,end,count,sum`).
pub fn window_row(line: &str) -> Row {
    let f: Vec<&str> = line.split(',').collect();
    let parsed = match f[..] {
        [account, start, end, count, sum] => (|| {
            Some(Row::Window {
                account: account.to_string(),
                start: start.parse().ok()?,
                end: end.parse().ok()?,
                count: count.parse().ok()?,
                sum: decimal(sum)?,
            })
        })(),
        _ => None,
    };
    parsed.unwrap_or_else(|| Row::Unreadable { sink: "windows".into(), line: line.into() })
}

/// Parses an idle line (`account,last_seen,idle_count`).
pub fn idle_row(line: &str) -> Row {
    let f: Vec<&str> = line.split(',').collect();
    let parsed = match f[..] {
        [account, seen, count] => (|| {
            Some(Row::Idle { account: account.to_string(), last_seen: seen.parse().ok()?, count: count.parse().ok()? })
        })(),
        _ => None,
    };
    parsed.unwrap_or_else(|| Row::Unreadable { sink: "idle".into(), line: line.into() })
}

/// Both sinks' lines as typed rows.
pub fn rows(windows: &[String], idle: &[String]) -> Vec<Row> {
    windows.iter().map(|l| window_row(l)).chain(idle.iter().map(|l| idle_row(l))).collect()
}

/// The rows a job's sinks committed under `output_dir` (a sink that wrote
/// nothing has no directory and no rows).
pub fn committed_rows(output_dir: &Path, def: &Definition) -> Result<Vec<Row>, String> {
    let read = |sink: &str| -> Result<Vec<String>, String> {
        let dir = output_dir.join(sink);
        if !dir.exists() {
            return Ok(Vec::new());
        }
        clink_reference::output::read_output_lines(&dir).map_err(|e| format!("{}: {e}", dir.display()))
    };
    Ok(rows(&read(&def.sinks["windows"])?, &read(&def.sinks["idle"])?))
}

pub fn diff_rows(expected: &[Row], actual: &[Row]) -> MultisetDiff<Row> {
    multiset_diff(expected.iter().cloned(), actual.iter().cloned())
}

/// A state row in the reference's form, displayed as one line.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct StateRow(pub Vec<String>);

impl fmt::Display for StateRow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join(" "))
    }
}

/// An operator of a listing.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Operator {
    pub uid: String,
    pub id: String,
    pub parallelism: u64,
    pub holds_state: bool,
}

/// A dataset's state as the check compares it.
#[derive(Debug, Clone, Default)]
pub struct LogicalState {
    pub checkpoint: u64,
    pub rows: Vec<StateRow>,
    pub misplaced: usize,
    pub undocumented: Vec<String>,
    pub operators: Vec<Operator>,
    /// The keyed operators' watermark rows (listed, not compared).
    pub watermarks: Vec<Option<i64>>,
}

/// The kinds of row compared as state.
const COMPARED: [&str; 5] = ["source.position", "window", "last_seen", "idle_count", "timer"];

fn typed(v: &Json) -> String {
    match v.as_object().and_then(|o| o.iter().next()) {
        Some((t, Json::String(s))) if t == "decimal" => format!("decimal:{}", normal_decimal(s)),
        Some((t, Json::String(s))) => format!("{t}:{s}"),
        Some((t, Json::Bool(b))) => format!("{t}:{b}"),
        Some((t, Json::Null)) if t == "null" => "null".into(),
        _ => format!("unknown:{v}"),
    }
}

/// Reads a `clink state-cat --json` listing.
pub fn logical_state(listing: &Json, def: &Definition) -> Result<LogicalState, String> {
    if listing.get("format").and_then(Json::as_str) != Some("clink-state-listing")
        || listing.get("version").and_then(Json::as_u64) != Some(1)
    {
        return Err("the tools build's listing is not clink-state-listing version 1".into());
    }
    // A listing missing a field is refused, never read as holding nothing:
    // two empty listings would agree with each other.
    let field = |v: &Json, name: &str, what: &str| format!("the listing's {what} has no {name} of the right type: {v}");
    let list = |name: &str| -> Result<Vec<Json>, String> {
        listing.get(name).and_then(Json::as_array).cloned().ok_or_else(|| format!("the listing has no {name} list"))
    };
    let mut state = LogicalState {
        checkpoint: listing.get("checkpoint").and_then(Json::as_u64).ok_or("the listing names no checkpoint")?,
        ..LogicalState::default()
    };
    for op in list("operators")? {
        let text = |name: &str| {
            op.get(name).and_then(Json::as_str).map(str::to_string).ok_or_else(|| field(&op, name, "operator"))
        };
        state.operators.push(Operator {
            uid: text("uid")?,
            id: text("id")?,
            parallelism: op
                .get("parallelism")
                .and_then(Json::as_u64)
                .ok_or_else(|| field(&op, "parallelism", "operator"))?,
            holds_state: op
                .get("holds_state")
                .and_then(Json::as_bool)
                .ok_or_else(|| field(&op, "holds_state", "operator"))?,
        });
    }
    for row in list("rows")? {
        let uid = row.get("uid").and_then(Json::as_str).ok_or_else(|| field(&row, "uid", "row"))?;
        let kind = row.get("kind").and_then(Json::as_str).ok_or_else(|| field(&row, "kind", "row"))?;
        let values: Vec<String> = row
            .get("values")
            .and_then(Json::as_array)
            .ok_or_else(|| field(&row, "values", "row"))?
            .iter()
            .map(typed)
            .collect();
        let Some(role) = def.role_of(uid) else { continue };
        if kind == "watermark" && role != "source" {
            state
                .watermarks
                .push(values.first().and_then(|v| v.strip_prefix("timestamp:")).and_then(|t| t.parse().ok()));
            continue;
        }
        if !COMPARED.contains(&kind) {
            continue;
        }
        let mut r = vec![role.to_string(), kind.to_string()];
        r.extend(values);
        state.rows.push(StateRow(r));
    }
    state.rows.sort();
    state.misplaced = list("misplaced")?.len();
    state.undocumented = list("undocumented")?
        .iter()
        .map(|u| {
            format!(
                "{}[{}] slot {}: {}",
                u.get("uid").and_then(Json::as_str).unwrap_or("?"),
                u.get("subtask").and_then(Json::as_u64).unwrap_or(0),
                u.get("slot").and_then(Json::as_str).unwrap_or("?"),
                u.get("reason").and_then(Json::as_str).unwrap_or("")
            )
        })
        .collect();
    Ok(state)
}

pub fn diff_state(expected: &[StateRow], actual: &[StateRow]) -> MultisetDiff<StateRow> {
    multiset_diff(expected.iter().cloned(), actual.iter().cloned())
}

/// The reference's rows (`reference.json`'s `windows` and `idle`) and state.
pub fn reference_part(reference: &Json, at: &str) -> Result<(Vec<Row>, Vec<StateRow>), String> {
    let part = reference.get(at).ok_or_else(|| format!("reference.json has no {at}"))?;
    // Every list is there and holds only text: a missing or mistyped one is
    // refused, never read as expecting nothing.
    let strings = |v: &Json, what: &str| -> Result<Vec<String>, String> {
        v.as_array()
            .ok_or_else(|| format!("reference.json {what} is not a list"))?
            .iter()
            .map(|s| {
                s.as_str().map(str::to_string).ok_or_else(|| format!("reference.json {what} holds a non-text item"))
            })
            .collect()
    };
    let lines = |f: &str| strings(part.get(f).unwrap_or(&Json::Null), &format!("{at}.{f}"));
    let state: Vec<StateRow> = part
        .get("state")
        .and_then(Json::as_array)
        .ok_or_else(|| format!("reference.json {at}.state is not a list"))?
        .iter()
        .map(|r| strings(r, &format!("{at}.state row")).map(StateRow))
        .collect::<Result<_, _>>()?;
    Ok((rows(&lines("windows")?, &lines("idle")?), state))
}

/// A short account of a multiset difference ("equal" when there is none).
pub fn account<T: fmt::Display>(diff: &MultisetDiff<T>) -> String {
    if diff.is_equal() {
        format!("equal ({} items)", diff.actual_total)
    } else {
        describe(diff, 3)
    }
}

/// The operators that hold state, by (id, uid).
pub fn stateful(ops: &[Operator]) -> BTreeSet<(String, String)> {
    ops.iter().filter(|o| o.holds_state).map(|o| (o.id.clone(), o.uid.clone())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_typed_so_spellings_of_one_value_are_equal() {
        assert_eq!(window_row("a,0,10000,2,3.50"), window_row("a,0,10000,2,3.5"));
        assert_ne!(window_row("a,0,10000,2,3.50"), window_row("a,0,10000,2,3.51"));
        assert!(matches!(window_row("a,0,x,2,3"), Row::Unreadable { .. }));
        assert!(matches!(idle_row("a,1"), Row::Unreadable { .. }));
        let d = diff_rows(&[idle_row("a,1,1"), idle_row("a,1,1")], &[idle_row("a,1,1")]);
        assert_eq!(d.missing_copies(), 1, "a missing copy counts");
    }

    #[test]
    fn a_listing_becomes_reference_rows() {
        let def = Definition::parse(include_bytes!("../../../fixtures/upgrade/test.json").to_vec()).unwrap();
        let listing = serde_json::json!({
            "format": "clink-state-listing", "version": 1, "checkpoint": 4,
            "operators": [{"id": "3", "uid": "windows", "parallelism": 2, "holds_state": true}],
            "rows": [
                {"uid": "windows", "subtask": 0, "kind": "window",
                 "values": [{"string": "a"}, {"timestamp": "0"}, {"int": "1"}, {"decimal": "1.50"}]},
                {"uid": "windows", "subtask": 0, "kind": "watermark", "values": [{"timestamp": "5"}]},
                {"uid": "by-account", "subtask": 0, "kind": "watermark", "values": [{"timestamp": "5"}]}
            ],
            "misplaced": [{"uid": "windows"}],
            "undocumented": []
        });
        let s = logical_state(&listing, &def).unwrap();
        assert_eq!(
            s.rows,
            vec![StateRow(vec![
                "windows".into(),
                "window".into(),
                "string:a".into(),
                "timestamp:0".into(),
                "int:1".into(),
                "decimal:1.5".into()
            ])]
        );
        assert_eq!(s.watermarks, vec![Some(5)]);
        assert_eq!(s.misplaced, 1);
    }

    #[test]
    fn a_listing_or_reference_missing_a_field_is_refused_not_read_as_empty() {
        let def = Definition::parse(include_bytes!("../../../fixtures/upgrade/test.json").to_vec()).unwrap();
        let whole = serde_json::json!({
            "format": "clink-state-listing", "version": 1, "checkpoint": 4,
            "operators": [], "rows": [], "misplaced": [], "undocumented": []
        });
        assert!(logical_state(&whole, &def).is_ok());
        for field in ["checkpoint", "operators", "rows", "misplaced", "undocumented"] {
            let mut cut = whole.clone();
            cut.as_object_mut().unwrap().remove(field);
            assert!(logical_state(&cut, &def).is_err(), "a listing without {field} was read");
        }
        let mut row_without_kind = whole.clone();
        row_without_kind["rows"] = serde_json::json!([{"uid": "windows", "values": []}]);
        assert!(logical_state(&row_without_kind, &def).is_err());
        let reference = serde_json::json!({"at_end": {"windows": [], "idle": [], "state": []}});
        assert!(reference_part(&reference, "at_end").is_ok());
        for field in ["windows", "idle", "state"] {
            let mut cut = reference.clone();
            cut["at_end"].as_object_mut().unwrap().remove(field);
            assert!(reference_part(&cut, "at_end").is_err(), "a reference without {field} was read");
        }
        let mistyped = serde_json::json!({"at_end": {"windows": [1], "idle": [], "state": []}});
        assert!(reference_part(&mistyped, "at_end").is_err());
    }
}
