//! Reading the destination: read-only and bounded. Every statement is a
//! SELECT under `readonly = 2` (the server refuses any write in it), with
//! `max_execution_time` and `max_result_rows` set to throw, and this client
//! waits no longer than the same limit for a whole answer. Only names from
//! the bundle, quoted as identifiers, and key values, rendered as typed
//! literals from canonical cells, reach SQL. A bound reached is an error,
//! never a partial answer.
//!
//! Values are read as values on every server version: a `DateTime64(3)`
//! column is selected as its instant (`toUnixTimestamp64Milli`) and selected
//! by one (`fromUnixTimestamp64Milli`: ClickHouse reads a bare integer
//! compared with a DateTime64 as seconds), and a decimal is read at its
//! column's scale whether the server prints `12.50` or `12.5`.

use std::collections::BTreeMap;
use std::time::Duration;

use clink_connectors::clickhouse::destination::{describe_with, DescribeError, Destination};
use clink_connectors::clickhouse::types::ChType;
use clink_connectors::clickhouse::{sql, ClickHouseError, Connection};
use serde::Serialize;

use crate::cells::{self, is_canonical_int, Cell, CellKind};

/// The bounds every read runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Bounds {
    pub query_timeout_ms: u64,
    pub max_rows_per_query: u64,
    pub keys_per_query: usize,
    pub settle_ms: u64,
    pub max_table_rows: u64,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            query_timeout_ms: 30_000,
            max_rows_per_query: 100_000,
            keys_per_query: 1000,
            settle_ms: 1000,
            max_table_rows: 1_000_000,
        }
    }
}

/// The settings of every read: read only, and bounded with errors on overflow.
pub fn read_settings(bounds: &Bounds, max_rows: u64) -> Vec<(&'static str, String)> {
    vec![
        ("readonly", "2".into()),
        ("max_execution_time", bounds.query_timeout_ms.div_ceil(1000).max(1).to_string()),
        ("timeout_overflow_mode", "throw".into()),
        ("max_result_rows", max_rows.to_string()),
        ("result_overflow_mode", "throw".into()),
    ]
}

/// Why a read gave no answer to decide on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReadFailure {
    /// `bound` (a row or time limit reached), `refused`, `unreachable` or `malformed`.
    pub kind: String,
    pub message: String,
}

impl std::fmt::Display for ReadFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)
    }
}

/// The server's error codes for a limit reached (rows, bytes, time).
const BOUND_CODES: [&str; 5] = ["Code: 158", "Code: 159", "Code: 396", "Code: 160", "Code: 307"];

fn failure(e: ClickHouseError) -> ReadFailure {
    let message = e.to_string();
    let kind = match &e {
        ClickHouseError::TimedOut { .. } => "bound",
        ClickHouseError::Refused { message: m, .. } if BOUND_CODES.iter().any(|c| m.contains(c)) => "bound",
        ClickHouseError::Refused { .. } => "refused",
        ClickHouseError::Unreachable { .. } | ClickHouseError::InDoubt { .. } | ClickHouseError::Runtime(_) => {
            "unreachable"
        }
        ClickHouseError::Malformed { .. } => "malformed",
    };
    ReadFailure { kind: kind.into(), message }
}

/// A reader of one table on one connection, within bounds.
pub struct Reader<'a> {
    pub conn: &'a Connection,
    pub bounds: Bounds,
    pub database: String,
    pub table: String,
    /// Statements sent, for the report.
    pub statements: u64,
}

/// One column the reads select, and how its text is read.
#[derive(Debug, Clone)]
pub struct ReadColumn {
    pub name: String,
    pub table_type: ChType,
    pub kind: CellKind,
}

/// A mutation of the table, as `system.mutations` lists it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Mutation {
    pub id: String,
    pub command: String,
    pub created: String,
    pub done: bool,
}

impl Reader<'_> {
    fn limit(&self) -> Duration {
        Duration::from_millis(self.bounds.query_timeout_ms.max(1) + 2000)
    }

    fn select(&mut self, what: &str, statement: &str, max_rows: u64) -> Result<Vec<Vec<Cell>>, ReadFailure> {
        self.statements += 1;
        let settings = read_settings(&self.bounds, max_rows);
        self.conn.select_within(what, statement, &settings, self.limit()).map_err(failure)
    }

    /// The destination as the server defines it now.
    pub fn describe(&mut self) -> Result<Destination, DescribeError> {
        self.statements += 1;
        let settings = read_settings(&self.bounds, 100_000);
        describe_with(self.conn, &self.database, &self.table, &settings, Some(self.limit()))
    }

    /// The server's clock, as epoch seconds.
    pub fn server_time(&mut self) -> Result<i64, ReadFailure> {
        let rows = self.select("the server's clock", "SELECT toUnixTimestamp(now())", 1)?;
        rows.first()
            .and_then(|r| r.first())
            .cloned()
            .flatten()
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| ReadFailure { kind: "malformed".into(), message: "now() did not read as a number".into() })
    }

    /// The table's mutations.
    pub fn mutations(&mut self) -> Result<Vec<Mutation>, ReadFailure> {
        let statement = format!(
            "SELECT mutation_id, command, toString(create_time), is_done FROM system.mutations WHERE database = {} AND table = {} ORDER BY mutation_id",
            sql::string(&self.database),
            sql::string(&self.table)
        );
        let rows = self.select("the table's mutations", &statement, self.bounds.max_rows_per_query)?;
        let mut out = Vec::new();
        for row in rows {
            match row.as_slice() {
                [Some(id), Some(command), Some(created), Some(done)] => out.push(Mutation {
                    id: id.clone(),
                    command: command.clone(),
                    created: created.clone(),
                    done: done == "1",
                }),
                _ => {
                    return Err(ReadFailure {
                        kind: "malformed".into(),
                        message: "a row of system.mutations is not (id, command, time, done)".into(),
                    })
                }
            }
        }
        Ok(out)
    }

    /// The table's active parts, by name.
    pub fn active_parts(&mut self) -> Result<Vec<String>, ReadFailure> {
        let statement = format!(
            "SELECT name FROM system.parts WHERE database = {} AND table = {} AND active ORDER BY name",
            sql::string(&self.database),
            sql::string(&self.table)
        );
        let rows = self.select("the table's active parts", &statement, self.bounds.max_rows_per_query)?;
        Ok(rows.into_iter().filter_map(|r| r.into_iter().next().flatten()).collect())
    }

    fn select_list(columns: &[ReadColumn]) -> String {
        columns.iter().map(selected).collect::<Vec<_>>().join(", ")
    }

    fn cells_of(columns: &[ReadColumn], rows: Vec<Vec<Cell>>) -> Result<Vec<Vec<Cell>>, ReadFailure> {
        rows.into_iter()
            .map(|row| {
                if row.len() != columns.len() {
                    return Err(ReadFailure {
                        kind: "malformed".into(),
                        message: format!("a row of {} cells, {} columns selected", row.len(), columns.len()),
                    });
                }
                row.iter()
                    .zip(columns)
                    .map(|(cell, c)| {
                        cells::from_text(cell.as_deref(), &c.table_type, c.kind).map_err(|e| ReadFailure {
                            kind: "malformed".into(),
                            message: format!("column {}: {e}", c.name),
                        })
                    })
                    .collect()
            })
            .collect()
    }

    /// The rows of the given keys, `keys_per_query` keys per statement.
    /// `key` indexes `columns`; every key cell must be canonical for its
    /// column (it is rendered as a literal of that type).
    pub fn rows_of_keys(
        &mut self,
        columns: &[ReadColumn],
        key: &[usize],
        keys: &[Vec<Cell>],
    ) -> Result<Vec<Vec<Cell>>, ReadFailure> {
        let mut out = Vec::new();
        let key_list = key.iter().map(|&i| sql::identifier(&columns[i].name)).collect::<Vec<_>>().join(", ");
        for chunk in keys.chunks(self.bounds.keys_per_query.max(1)) {
            let mut tuples = Vec::with_capacity(chunk.len());
            for k in chunk {
                let literals: Result<Vec<String>, ReadFailure> =
                    k.iter().zip(key).map(|(cell, &i)| literal(cell, &columns[i])).collect();
                let literals = literals?;
                tuples.push(if literals.len() == 1 {
                    literals[0].clone()
                } else {
                    format!("({})", literals.join(", "))
                });
            }
            let statement = format!(
                "SELECT {} FROM {} WHERE ({key_list}) IN ({})",
                Self::select_list(columns),
                sql::qualified(&self.database, &self.table),
                tuples.join(", ")
            );
            let rows = self.select("the rows of the scope's keys", &statement, self.bounds.max_rows_per_query)?;
            out.extend(Self::cells_of(columns, rows)?);
        }
        Ok(out)
    }

    /// The whole table, at most `max_table_rows` rows.
    pub fn whole_table(&mut self, columns: &[ReadColumn]) -> Result<Vec<Vec<Cell>>, ReadFailure> {
        let statement =
            format!("SELECT {} FROM {}", Self::select_list(columns), sql::qualified(&self.database, &self.table));
        let rows = self.select("the whole table", &statement, self.bounds.max_table_rows)?;
        Self::cells_of(columns, rows)
    }
}

/// Whether a column of this type is a `DateTime64`, under any wrapper.
fn is_datetime64(table_type: &ChType) -> bool {
    match table_type {
        ChType::Nullable(inner) | ChType::LowCardinality(inner) => is_datetime64(inner),
        ChType::DateTime64 { .. } => true,
        _ => false,
    }
}

/// What a read selects for a column: the column, or a `DateTime64`'s instant
/// in milliseconds, which no time zone or output format changes.
fn selected(column: &ReadColumn) -> String {
    let name = sql::identifier(&column.name);
    if is_datetime64(&column.table_type) {
        format!("toUnixTimestamp64Milli({name})")
    } else {
        name
    }
}

/// A key cell as a typed literal of its column: an integer's canonical
/// digits, a `DateTime64` instant from its milliseconds, or a string
/// literal. Nothing else is rendered.
pub fn literal(cell: &Cell, column: &ReadColumn) -> Result<String, ReadFailure> {
    let refuse = |why: String| ReadFailure { kind: "refused".into(), message: why };
    let Some(text) = cell else {
        return Err(refuse("a NULL key cannot be selected".into()));
    };
    match column.kind {
        CellKind::TimestampMs if is_canonical_int(text) && is_datetime64(&column.table_type) => {
            Ok(format!("fromUnixTimestamp64Milli(toInt64({text}))"))
        }
        CellKind::Int | CellKind::TimestampMs if is_canonical_int(text) => Ok(text.clone()),
        CellKind::String => Ok(sql::string(text)),
        other => Err(refuse(format!("a {other} key {text:?} is not rendered as a literal"))),
    }
}

/// Why a key column of this table type cannot be selected by the literals
/// [`literal`] renders, if it cannot. A `DateTime64(3)` is selected by its
/// instant (shown against ClickHouse 26 in `tests/clickhouse26.rs`); one of
/// another precision is not read exactly, so it is no key.
pub fn key_column_unsupported(name: &str, table_type: &ChType) -> Option<String> {
    match table_type {
        ChType::Nullable(inner) | ChType::LowCardinality(inner) => key_column_unsupported(name, inner),
        ChType::DateTime64 { precision: 3, .. } => None,
        ChType::DateTime64 { .. } => Some(format!(
            "key column {name:?} is {table_type} in the table: only a DateTime64(3) is selected by its instant exactly, so the key is unsupported"
        )),
        _ => None,
    }
}

/// Rows grouped by key.
pub fn by_key(rows: Vec<Vec<Cell>>, key: &[usize]) -> BTreeMap<Vec<Cell>, Vec<Vec<Cell>>> {
    let mut map: BTreeMap<Vec<Cell>, Vec<Vec<Cell>>> = BTreeMap::new();
    for row in rows {
        let k: Vec<Cell> = key.iter().map(|&i| row.get(i).cloned().flatten()).collect();
        map.entry(k).or_default().push(row);
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_read_is_read_only_and_bounded_with_errors() {
        let s = read_settings(&Bounds::default(), 7);
        let get = |n: &str| s.iter().find(|(k, _)| *k == n).map(|(_, v)| v.as_str());
        assert_eq!(get("readonly"), Some("2"));
        assert_eq!(get("max_result_rows"), Some("7"));
        assert_eq!(get("result_overflow_mode"), Some("throw"));
        assert_eq!(get("timeout_overflow_mode"), Some("throw"));
        assert_eq!(get("max_execution_time"), Some("30"));
        let short = Bounds { query_timeout_ms: 1, ..Bounds::default() };
        assert_eq!(
            read_settings(&short, 1).iter().find(|(k, _)| *k == "max_execution_time").map(|(_, v)| v.as_str()),
            Some("1")
        );
    }

    fn column(ty: &str, kind: CellKind) -> ReadColumn {
        ReadColumn { name: "k".into(), table_type: ChType::parse(ty), kind }
    }

    #[test]
    fn key_literals_are_typed_and_quoted() {
        assert_eq!(literal(&Some("-42".into()), &column("Int64", CellKind::Int)).unwrap(), "-42");
        assert_eq!(
            literal(&Some("a') OR 1=1 --".into()), &column("String", CellKind::String)).unwrap(),
            "'a\\') OR 1=1 --'"
        );
        // A bare integer against a DateTime64 is read as seconds: the instant is built from milliseconds.
        assert_eq!(
            literal(&Some("-1".into()), &column("DateTime64(3, 'UTC')", CellKind::TimestampMs)).unwrap(),
            "fromUnixTimestamp64Milli(toInt64(-1))"
        );
        assert_eq!(literal(&Some("5".into()), &column("Int64", CellKind::TimestampMs)).unwrap(), "5");
        for (cell, c) in [
            (Some("1 OR 1=1".to_string()), column("Int64", CellKind::Int)),
            (Some("1); DROP TABLE t; --".to_string()), column("Int64", CellKind::TimestampMs)),
            (Some("1)); DROP TABLE t; --".to_string()), column("DateTime64(3)", CellKind::TimestampMs)),
            (None, column("Int64", CellKind::Int)),
            (Some("1.5".to_string()), column("Float64", CellKind::Float)),
        ] {
            assert!(literal(&cell, &c).is_err(), "{cell:?} as {} must not be rendered", c.kind);
        }
    }

    #[test]
    fn a_date_time_64_is_read_and_selected_by_its_instant() {
        assert_eq!(
            selected(&column("Nullable(DateTime64(3, 'UTC'))", CellKind::TimestampMs)),
            "toUnixTimestamp64Milli(`k`)"
        );
        assert_eq!(selected(&column("Int64", CellKind::TimestampMs)), "`k`");
        for ty in ["DateTime64(3)", "DateTime64(3, 'UTC')", "Nullable(DateTime64(3))", "Int64", "String", "Date"] {
            assert_eq!(key_column_unsupported("t", &ChType::parse(ty)), None, "{ty}");
        }
        for ty in ["DateTime64(6)", "LowCardinality(DateTime64(6))"] {
            let why = key_column_unsupported("t", &ChType::parse(ty)).unwrap_or_default();
            assert!(why.contains("key column \"t\"") && why.contains("unsupported"), "{ty}: {why}");
        }
    }

    #[test]
    fn only_limit_errors_count_as_bounds() {
        let refused = |m: &str| ClickHouseError::Refused { url: "u".into(), what: "w".into(), message: m.into() };
        assert_eq!(
            failure(refused("Code: 396, e.displayText() = DB::Exception: Limit for result exceeded")).kind,
            "bound"
        );
        assert_eq!(failure(refused("Code: 159, Timeout exceeded")).kind, "bound");
        assert_eq!(failure(refused("Code: 60, Table default.t doesn't exist")).kind, "refused");
        assert_eq!(failure(ClickHouseError::TimedOut { url: "u".into(), what: "w".into(), ms: 5 }).kind, "bound");
    }
}
