//! `clickhouse_sink`: writes its rows into a ClickHouse table, at least
//! once. The rows of a checkpoint interval are sent as one INSERT when the
//! barrier arrives, before the barrier is acknowledged, so a completed
//! checkpoint never owes the table a row it has not received; a restore
//! re-emits the rows after the restore point, and the table may then hold
//! some twice (the at-least-once family).
//!
//! At open it describes the destination as the server defines it (server
//! version and identity, table engine, definition, identity, columns,
//! partitions, dependent views, and the settings that decide deduplication
//! and blocks) and refuses, by name, what it cannot write exactly: a missing
//! table, a replicated, distributed, TTL or row-merging table, a column whose
//! type does not hold the job's values exactly, a column the job does not
//! write that has no default.
//!
//! Each INSERT carries a deduplication token unique to the run's lineage and
//! incarnation (`Environment::run`), its interval's checkpoint and the
//! subtask, so a resend within the process is recognisable and no other
//! run's INSERT ever is: a second run of the same job file over a fresh
//! checkpoint directory counts its checkpoints from 1 again, and a token
//! built from those alone would have the server drop its rows as
//! duplicates. Without a run identity it carries none, and deduplication is
//! off. What the server then does with the INSERT is decided by THE insert
//! rules ([`clink_connectors::clickhouse::inserts`]), recorded once per
//! interval: whether a resend is dropped, whether the INSERT is one block.
//!
//! Each interval's evidence holds the destination's description, those
//! rules, the rows' count and digest, and the ledger of its INSERTs: token,
//! rows, attempts, and whether a resend after an answer that never came (or
//! after a refusal of an INSERT that was not one block, which may have
//! partly landed) may have landed twice.

use std::time::Duration;

use serde_json::{json, Value as Json};
use sha2::{Digest, Sha256};

use clink_basics::fields::{FieldError, Fields};
use clink_connectors::clickhouse::destination::{describe, DescribeError, Destination};
use clink_connectors::clickhouse::inserts::{self, Claim};
use clink_connectors::clickhouse::types::ChType;
use clink_connectors::clickhouse::{sql, tsv, ClickHouseError, Connection, Endpoint, Insert};
use clink_connectors::Known;

use crate::checkpoint::lineage::RunIdentity;
use crate::checkpoint::StateSlots;
use crate::fault::{fails, kill_point, FaultPoint};
use crate::value::{row_bytes, ColumnType, Row, Schema, Value};

use super::{defaults, Build, Descriptor, OperatorError, Prepared, Setup, Sink, SinkFamily, StateDecoding};

pub const TYPE: &str = "clickhouse_sink";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub database: String,
    pub table: String,
    pub max_attempts: u32,
    pub insert_timeout_ms: u64,
}

pub fn plan(params: &Json) -> Result<Plan, FieldError> {
    let f = Fields::object(params, "$")?;
    f.only(&["database", "table", "max_attempts", "insert_timeout_ms"])?;
    let name = |field: &str, value: &str| {
        if value.is_empty() || value.len() > 255 || value.contains('\0') {
            Err(f.error(field, "a name of 1 to 255 bytes, without NUL"))
        } else {
            Ok(value.to_string())
        }
    };
    let table = name("table", f.str("table")?)?;
    let database = name("database", f.optional("database", Fields::str)?.unwrap_or("default"))?;
    let max_attempts = f.optional("max_attempts", Fields::u32)?.unwrap_or(3);
    if !(1..=10).contains(&max_attempts) {
        return Err(f.error("max_attempts", "1 to 10"));
    }
    let insert_timeout_ms = f.optional("insert_timeout_ms", Fields::u64)?.unwrap_or(30_000);
    if !(100..=600_000).contains(&insert_timeout_ms) {
        return Err(f.error("insert_timeout_ms", "100 to 600000"));
    }
    Ok(Plan { database, table, max_attempts, insert_timeout_ms })
}

/// How one of the job's columns is written into its table column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cell {
    Int,
    String,
    Decimal,
    Float,
    /// `UInt8` 0/1.
    BoolAsInt,
    Bool,
    /// Epoch milliseconds into an integer column.
    MillisAsInt,
    /// Epoch milliseconds into `DateTime64(3)` (UTC).
    DateTime64Millis,
}

/// Why a table cannot take the job's rows exactly; `table` is
/// `database.table`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CellPlanError {
    #[error("{table} is a {engine} table: replicated tables are not supported")]
    Replicated { table: String, engine: String },
    #[error("{table} is a Distributed table: write to its local tables")]
    Distributed { table: String },
    #[error(
        "{table} is a {engine} table: only a plain MergeTree keeps every row written (other engines merge, replace or lose rows)"
    )]
    NotMergeTree { table: String, engine: String },
    #[error("{table} has a TTL: rows may disappear by themselves")]
    Ttl { table: String },
    #[error("{table} has no column {column:?}, which the job writes")]
    NoColumn { table: String, column: String },
    /// The table column's type does not hold the job column's values exactly.
    #[error("{table}.{column}: column type {type_name} does not hold the job's {ty:?} values exactly")]
    Inexact { table: String, column: String, type_name: String, ty: ColumnType },
    /// A table column the job does not write and the server cannot fill.
    #[error("{table}.{column} has no default, and the job does not write it")]
    NoDefault { table: String, column: String },
}

/// Why a table cannot take the job's rows exactly.
pub fn cell_plan(input: &Schema, destination: &Destination) -> Result<Vec<Cell>, CellPlanError> {
    let engine = destination.engine.as_str();
    let table = format!("{}.{}", destination.database, destination.table);
    if engine.starts_with("Replicated") {
        return Err(CellPlanError::Replicated { table, engine: engine.to_string() });
    }
    if engine == "Distributed" {
        return Err(CellPlanError::Distributed { table });
    }
    if engine != "MergeTree" {
        return Err(CellPlanError::NotMergeTree { table, engine: engine.to_string() });
    }
    if destination.has_ttl() {
        return Err(CellPlanError::Ttl { table });
    }
    let server_utc = destination.server.timezone.value() == Some("UTC");
    let mut cells = Vec::new();
    for column in &input.0 {
        let Some(target) = destination.column(&column.name) else {
            return Err(CellPlanError::NoColumn { table, column: column.name.clone() });
        };
        let ty = ChType::parse(&target.type_name);
        let cell = match (column.ty, &ty) {
            (ColumnType::Int, ChType::Int { bits: 64, signed: true }) => Cell::Int,
            (ColumnType::String, ChType::String) => Cell::String,
            (ColumnType::String, ChType::LowCardinality(inner)) if **inner == ChType::String => Cell::String,
            (ColumnType::Decimal { scale }, ChType::Decimal { scale: s, .. }) if *s == scale => Cell::Decimal,
            (ColumnType::Float, ChType::Float { bits: 64 }) => Cell::Float,
            (ColumnType::Bool, ChType::Int { bits: 8, signed: false }) => Cell::BoolAsInt,
            (ColumnType::Bool, ChType::Bool) => Cell::Bool,
            (ColumnType::Timestamp, ChType::Int { bits: 64, .. }) => Cell::MillisAsInt,
            (ColumnType::Timestamp, ChType::DateTime64 { precision: 3, timezone })
                if timezone.as_deref() == Some("UTC") || (timezone.is_none() && server_utc) =>
            {
                Cell::DateTime64Millis
            }
            _ => {
                return Err(CellPlanError::Inexact {
                    table,
                    column: column.name.clone(),
                    type_name: target.type_name.clone(),
                    ty: column.ty,
                })
            }
        };
        cells.push(cell);
    }
    if let Some(extra) =
        destination.columns.iter().find(|c| input.index_of(&c.name).is_none() && c.default_kind.is_empty())
    {
        return Err(CellPlanError::NoDefault { table, column: extra.name.clone() });
    }
    Ok(cells)
}

/// Why a row cannot be rendered with a cell plan; `column` counts from 0.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("column {column} is NULL; the table's columns are not Nullable")]
    Null { column: usize },
    #[error("column {column}: {value:?} cannot be written as {cell:?}")]
    Mismatch { column: usize, value: Value, cell: Cell },
    #[error("a row of {values} values, the plan has {columns} columns")]
    Width { values: usize, columns: usize },
    #[error("{0}")]
    Write(std::io::Error),
}

/// Appends one row as a TabSeparated line.
pub fn render_row(out: &mut Vec<u8>, row: &Row, cells: &[Cell]) -> Result<(), RenderError> {
    use std::io::Write;
    for (i, (value, cell)) in row.iter().zip(cells).enumerate() {
        if i > 0 {
            out.push(b'\t');
        }
        let written = match (cell, value) {
            (Cell::Int, Value::Int(v)) | (Cell::MillisAsInt, Value::Timestamp(v)) => write!(out, "{v}"),
            (Cell::String, Value::Str(s)) => {
                tsv::escape_into(out, s);
                Ok(())
            }
            (Cell::Decimal, Value::Decimal(d)) => write!(out, "{d}"),
            (Cell::Float, Value::Float(f)) => write!(out, "{}", render_float(*f)),
            (Cell::BoolAsInt, Value::Bool(b)) => write!(out, "{}", u8::from(*b)),
            (Cell::Bool, Value::Bool(b)) => write!(out, "{b}"),
            (Cell::DateTime64Millis, Value::Timestamp(ms)) => write!(out, "{}", datetime64_millis(*ms)),
            (_, Value::Null) => return Err(RenderError::Null { column: i }),
            (cell, value) => return Err(RenderError::Mismatch { column: i, value: value.clone(), cell: cell.clone() }),
        };
        written.map_err(RenderError::Write)?;
    }
    if row.len() != cells.len() {
        return Err(RenderError::Width { values: row.len(), columns: cells.len() });
    }
    out.push(b'\n');
    Ok(())
}

/// A float as text the server reads back to the same bits.
fn render_float(f: f64) -> String {
    if f.is_nan() {
        "nan".into()
    } else if f.is_infinite() {
        if f > 0.0 { "inf" } else { "-inf" }.into()
    } else {
        format!("{f:?}")
    }
}

/// `YYYY-MM-DD hh:mm:ss.mmm` in UTC for epoch milliseconds.
pub fn datetime64_millis(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let in_day = ms.rem_euclid(86_400_000);
    let (y, m, d) = civil_from_days(days);
    let (h, min, s, milli) = (in_day / 3_600_000, in_day / 60_000 % 60, in_day / 1000 % 60, in_day % 1000);
    format!("{y:04}-{m:02}-{d:02} {h:02}:{min:02}:{s:02}.{milli:03}")
}

/// The proleptic Gregorian date of a day count from 1970-01-01 (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// How this sink's INSERTs are written on its destination, decided at open
/// by THE insert rules and recorded in every interval's evidence.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WriteRules {
    /// Which run the tokens name (`lineage L incarnation I`), or why the
    /// INSERTs carry none.
    pub tokens: Known,
    /// Whether a resend under the same token is dropped by the server.
    pub deduplication: Claim,
    /// Whether one INSERT lands whole or not at all.
    pub one_block: Claim,
}

impl WriteRules {
    fn of(destination: &Destination, run: Option<&RunIdentity>) -> WriteRules {
        let tokens = match run {
            _ if !inserts::takes_tokens(destination) => {
                Known::Unavailable("the server takes no insert_deduplication_token".into())
            }
            Some(run) => Known::Value(run.to_string()),
            None => Known::Unavailable("no run identity (no job runs)".into()),
        };
        WriteRules {
            deduplication: inserts::deduplication(destination, tokens.value().is_some()),
            one_block: inserts::one_block(destination),
            tokens,
        }
    }
}

/// The token of one subtask's INSERT of one interval: unique per lineage and
/// incarnation, so that only a resend within this process repeats it; what
/// its evidence's ledger names, and what a verifier recomputes.
pub fn insert_token(run: &RunIdentity, job: &str, uid: &str, subtask: u32, checkpoint: u64) -> String {
    format!("clink-{}-{}-{job}-{uid}-{subtask}-{checkpoint}", run.lineage, run.incarnation)
}

/// One INSERT of an interval, as the ledger records it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LedgerEntry {
    /// `None`: the INSERT carried no token (deduplication was off).
    pub token: Option<String>,
    pub rows: u64,
    pub bytes: u64,
    pub attempts: u32,
    /// What each failed attempt met.
    pub errors: Vec<String>,
    /// A later attempt was sent after one whose outcome was unknown: no
    /// answer came, or the server refused an INSERT that was not one block
    /// (some of its rows may have landed).
    pub resent_in_doubt: bool,
    /// The server drops such a resend (the interval's write rules'
    /// deduplication claim holds).
    pub resend_deduplicated: bool,
    /// The rows may be in the table twice.
    pub may_land_twice: bool,
}

pub struct ClickHouseSink {
    plan: Plan,
    endpoint: Endpoint,
    input: Schema,
    job: String,
    uid: String,
    subtask: u32,
    run: Option<RunIdentity>,
    connection: Option<Connection>,
    destination: Option<Destination>,
    rules: Option<WriteRules>,
    cells: Vec<Cell>,
    body: Vec<u8>,
    rows: u64,
    digest: Sha256,
    /// The interval evidence of the last prepared checkpoint.
    last: Option<(u64, Json)>,
}

impl ClickHouseSink {
    fn table(&self) -> String {
        sql::qualified(&self.plan.database, &self.plan.table)
    }

    fn columns(&self) -> String {
        self.input.0.iter().map(|c| sql::identifier(&c.name)).collect::<Vec<_>>().join(", ")
    }

    fn refuse(&self, why: impl std::fmt::Display) -> OperatorError {
        OperatorError::Input(format!("clickhouse_sink {:?}: {why}", self.uid))
    }

    /// Sends the interval's rows, retrying within the attempts allowed.
    fn insert(&mut self, checkpoint: u64, body: Vec<u8>, rows: u64) -> Result<LedgerEntry, OperatorError> {
        let destination = self.destination.as_ref().ok_or_else(|| self.refuse("written before it was opened"))?;
        let rules = self.rules.as_ref().ok_or_else(|| self.refuse("written before it was opened"))?;
        let token = match (&rules.tokens, &self.run) {
            (Known::Value(_), Some(run)) => Some(insert_token(run, &self.job, &self.uid, self.subtask, checkpoint)),
            _ => None,
        };
        let settings = inserts::insert_settings(destination, token.as_deref(), rows);
        let deduplicates = rules.deduplication.holds && token.is_some();
        let mut entry = LedgerEntry {
            token,
            rows,
            bytes: body.len() as u64,
            attempts: 0,
            errors: Vec::new(),
            resent_in_doubt: false,
            resend_deduplicated: false,
            may_land_twice: false,
        };
        let connection = self.connection.as_ref().ok_or_else(|| self.refuse("written before it was opened"))?;
        let table = self.table();
        let columns = self.columns();
        let request = Insert {
            what: "inserting an interval",
            table: &table,
            columns: &columns,
            settings: &settings,
            timeout: Duration::from_millis(self.plan.insert_timeout_ms),
            atomic: rules.one_block.holds,
        };
        let mut in_doubt = false;
        loop {
            entry.attempts += 1;
            let mut result = connection.insert_tsv(&request, body.clone());
            if result.is_ok() && fails(FaultPoint::ClickHouseResponseLost, checkpoint) {
                result = Err(ClickHouseError::InDoubt {
                    url: connection.url().to_string(),
                    what: request.what.to_string(),
                    message: "injected: the server's answer was lost".into(),
                });
            }
            match result {
                Ok(()) => {
                    entry.resent_in_doubt = in_doubt;
                    entry.resend_deduplicated = in_doubt && deduplicates;
                    entry.may_land_twice = in_doubt && !deduplicates;
                    return Ok(entry);
                }
                Err(e) => {
                    in_doubt |= e.in_doubt();
                    entry.errors.push(e.to_string());
                    if entry.attempts >= self.plan.max_attempts {
                        return Err(self.refuse(format!(
                            "the INSERT of checkpoint {checkpoint}'s interval failed {} times; last: {e}",
                            entry.attempts
                        )));
                    }
                    std::thread::sleep(Duration::from_millis(200 * u64::from(entry.attempts)));
                }
            }
        }
    }
}

impl Sink for ClickHouseSink {
    fn family(&self) -> SinkFamily {
        FAMILY
    }

    fn open(&mut self, _restored: Option<&StateSlots>) -> Result<u64, OperatorError> {
        let connection = Connection::open(&self.endpoint).map_err(|e| self.refuse(e))?;
        let destination = describe(&connection, &self.plan.database, &self.plan.table).map_err(|e| self.refuse(e))?;
        self.cells = cell_plan(&self.input, &destination).map_err(|e| self.refuse(e))?;
        self.rules = Some(WriteRules::of(&destination, self.run.as_ref()));
        self.connection = Some(connection);
        self.destination = Some(destination);
        Ok(0)
    }

    fn write(&mut self, row: &Row) -> Result<(), OperatorError> {
        render_row(&mut self.body, row, &self.cells).map_err(|e| self.refuse(e))?;
        let bytes = row_bytes(row);
        self.digest.update((bytes.len() as u64).to_le_bytes());
        self.digest.update(&bytes);
        self.rows += 1;
        Ok(())
    }

    fn prepare(&mut self, checkpoint: u64) -> Result<Prepared, OperatorError> {
        let body = std::mem::take(&mut self.body);
        let rows = std::mem::take(&mut self.rows);
        let digest = std::mem::replace(&mut self.digest, Sha256::new());
        let mut inserts = Vec::new();
        if rows > 0 {
            inserts.push(self.insert(checkpoint, body, rows)?);
            kill_point(FaultPoint::ClickHouseAfterInsert, checkpoint);
        }
        self.last = Some((
            checkpoint,
            json!({
                "rows": rows,
                "sha256": clink_basics::digest::hex(&digest.finalize()),
                "inserts": inserts,
            }),
        ));
        Ok(Prepared { staged: rows > 0, ..Prepared::SEALED })
    }

    fn snapshot(&self) -> Result<StateSlots, OperatorError> {
        Ok(StateSlots::new())
    }

    fn abort(&mut self, _checkpoint: u64) -> Result<(), OperatorError> {
        // Rows already sent stay in the table: at least once.
        Ok(())
    }

    fn commit(&mut self, _checkpoint: u64) -> Result<Vec<u64>, OperatorError> {
        Ok(Vec::new())
    }

    fn evidence(&self, checkpoint: u64) -> Json {
        let interval = match &self.last {
            Some((c, interval)) if *c == checkpoint => interval.clone(),
            _ => Json::Null,
        };
        json!({
            "type": TYPE,
            "family": FAMILY.as_str(),
            "destination": self.destination,
            "writes": self.rules,
            "columns": self.input.0,
            "interval": interval,
        })
    }
}

/// What an interval's evidence must say of itself, recomputed from what it
/// states with the sink's own rules (its plan, its cell plan, its rendering,
/// THE insert rules): the destination it describes is the table the plan
/// names and can take the job's columns; `rows` rendered make an INSERT body
/// of the returned size; and the write rules the run that wrote it decided
/// at open over that destination.
pub fn recompute_interval(
    params: &Json,
    columns: &Schema,
    destination: &Json,
    run: Option<&RunIdentity>,
    rows: &[&Row],
) -> Result<(u64, WriteRules), String> {
    let plan = plan(params).map_err(|e| e.to_string())?;
    let destination: Destination =
        serde_json::from_value(destination.clone()).map_err(|e| format!("the destination it describes: {e}"))?;
    if (destination.database.as_str(), destination.table.as_str()) != (plan.database.as_str(), plan.table.as_str()) {
        return Err(format!(
            "it describes table {}.{}; the sink writes {}.{}",
            destination.database, destination.table, plan.database, plan.table
        ));
    }
    let cells = cell_plan(columns, &destination)
        .map_err(|e| format!("the table it describes cannot take the job's columns: {e}"))?;
    let mut body = Vec::new();
    for row in rows {
        render_row(&mut body, row, &cells).map_err(|e| e.to_string())?;
    }
    Ok((body.len() as u64, WriteRules::of(&destination, run)))
}

/// Sends each interval once it is complete; a restore may send rows again.
const FAMILY: SinkFamily = SinkFamily::AtLeastOnce;

pub const DESCRIPTOR: Descriptor = Descriptor {
    type_name: TYPE,
    build: Build::Sink { family: FAMILY, build },
    plan: plan_schema,
    state: StateDecoding::Stateless,
    key_columns: defaults::no_key_columns,
    preflight,
    replays_as_live: true,
    confirmation: None,
    redivision: None,
};

fn plan_schema(params: &Json, _input: Option<&Schema>) -> Result<Schema, FieldError> {
    plan(params).map(|_| Schema::default())
}

fn endpoint(setup: &Setup<'_>) -> Result<Endpoint, OperatorError> {
    setup.env.connections.clickhouse.clone().ok_or_else(|| {
        OperatorError::Input(format!("operator {:?} writes ClickHouse: name the server with --clickhouse", setup.uid))
    })
}

fn build(setup: &Setup<'_>) -> Result<Box<dyn Sink>, OperatorError> {
    Ok(Box::new(ClickHouseSink {
        plan: plan(setup.params).map_err(setup.params_error())?,
        endpoint: endpoint(setup)?,
        input: setup.input()?.clone(),
        job: setup.env.job.to_string(),
        uid: setup.uid.to_string(),
        subtask: setup.subtask,
        run: setup.env.run.clone(),
        connection: None,
        destination: None,
        rules: None,
        cells: Vec::new(),
        body: Vec::new(),
        rows: 0,
        digest: Sha256::new(),
        last: None,
    }))
}

/// Before the job starts: the table exists and takes the job's rows exactly.
fn preflight(setup: &Setup<'_>) -> Result<(), OperatorError> {
    let plan = plan(setup.params).map_err(setup.params_error())?;
    let refuse = |why: String| OperatorError::Input(format!("clickhouse_sink {:?}: {why}", setup.uid));
    let connection = Connection::open(&endpoint(setup)?).map_err(|e| refuse(e.to_string()))?;
    let destination = describe(&connection, &plan.database, &plan.table).map_err(|e| match e {
        DescribeError::NoSuchTable { .. } => refuse(e.to_string()),
        other => refuse(other.to_string()),
    })?;
    cell_plan(setup.input()?, &destination).map(|_| ()).map_err(|e| refuse(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clink_connectors::clickhouse::destination::{Server, Setting, TableColumn};

    fn destination(engine: &str, columns: &[(&str, &str, &str)]) -> Destination {
        Destination {
            server: Server { version: "18.16.1".into(), uuid: Known::Unavailable("old".into()), timezone: Known::Value("UTC".into()), host_name: Known::Value("h".into()) },
            database: "default".into(),
            table: "t".into(),
            table_uuid: Known::Unavailable("old".into()),
            engine: engine.into(),
            engine_full: Known::Value(format!("{engine} ORDER BY id")),
            create_table_query: Known::Unavailable("old".into()),
            data_path: Known::Value("/data/default/t/".into()),
            partition_key: Known::Value(String::new()),
            dependent_views: Known::Value(String::new()),
            metadata_modification_time: Known::Value("2024-01-01 00:00:00".into()),
            columns: columns
                .iter()
                .map(|(n, t, d)| TableColumn { name: n.to_string(), type_name: t.to_string(), default_kind: d.to_string() })
                .collect(),
            settings: vec![Setting { name: "insert_deduplicate".into(), value: Known::Value("1".into()) }],
            merge_tree_settings: Vec::new(),
        }
    }

    fn input() -> Schema {
        Schema::of(&[("id", ColumnType::Int), ("account", ColumnType::String), ("amount", ColumnType::Decimal { scale: 2 }), ("time", ColumnType::Timestamp)])
    }

    #[test]
    fn a_table_that_holds_the_rows_exactly_is_planned() {
        let d = destination("MergeTree", &[("id", "Int64", ""), ("account", "String", ""), ("amount", "Decimal(18, 2)", ""), ("time", "DateTime64(3)", ""), ("note", "String", "DEFAULT")]);
        assert_eq!(cell_plan(&input(), &d).unwrap(), [Cell::Int, Cell::String, Cell::Decimal, Cell::DateTime64Millis]);
    }

    #[test]
    fn what_cannot_be_written_exactly_is_refused_by_name() {
        let good = [("id", "Int64", ""), ("account", "String", ""), ("amount", "Decimal(18, 2)", ""), ("time", "Int64", "")];
        for (engine, why) in [("ReplicatedMergeTree", "replicated"), ("Distributed", "Distributed"), ("ReplacingMergeTree", "plain MergeTree")] {
            let e = cell_plan(&input(), &destination(engine, &good)).unwrap_err().to_string();
            assert!(e.contains(why), "{engine}: {e}");
        }
        type Columns<'a> = &'a [(&'a str, &'a str, &'a str)];
        let cases: [(Columns<'_>, &str); 4] = [
            (&[("id", "Int32", ""), ("account", "String", ""), ("amount", "Decimal(18, 2)", ""), ("time", "Int64", "")], "t.id: column type Int32"),
            (&[("id", "Int64", ""), ("account", "String", ""), ("amount", "Decimal(18, 3)", ""), ("time", "Int64", "")], "amount"),
            (&[("id", "Int64", ""), ("account", "String", ""), ("time", "Int64", "")], "no column \"amount\""),
            (&[("id", "Int64", ""), ("account", "String", ""), ("amount", "Decimal(18, 2)", ""), ("time", "Int64", ""), ("x", "String", "")], "t.x has no default"),
        ];
        for (columns, why) in cases {
            let e = cell_plan(&input(), &destination("MergeTree", columns)).unwrap_err().to_string();
            assert!(e.contains(why), "{e} should say {why}");
        }
        let mut ttl = destination("MergeTree", &good);
        ttl.engine_full = Known::Value("MergeTree ORDER BY id TTL time + INTERVAL 1 DAY".into());
        assert_eq!(cell_plan(&input(), &ttl), Err(CellPlanError::Ttl { table: "default.t".into() }));
    }

    #[test]
    fn rows_render_as_tab_separated_text_the_server_reads_exactly() {
        let cells = [Cell::Int, Cell::String, Cell::Decimal, Cell::DateTime64Millis];
        let mut out = Vec::new();
        let row = vec![
            Value::Int(-7),
            Value::Str("a\tb\\c'".into()),
            Value::Decimal(crate::value::Decimal::new(-5, 2)),
            Value::Timestamp(1_700_000_000_123),
        ];
        render_row(&mut out, &row, &cells).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "-7\ta\\tb\\\\c\\'\t-0.05\t2023-11-14 22:13:20.123\n");
        let null = render_row(&mut Vec::new(), &vec![Value::Null, Value::Null, Value::Null, Value::Null], &cells);
        assert!(matches!(null, Err(RenderError::Null { column: 0 })));
        let short = render_row(&mut Vec::new(), &vec![Value::Int(1)], &cells);
        assert!(matches!(short, Err(RenderError::Width { values: 1, columns: 4 })));
    }

    #[test]
    fn a_token_is_the_same_only_within_one_incarnation_of_one_lineage() {
        use crate::checkpoint::lineage::LineageId;
        let run = |lineage: &str, incarnation| RunIdentity { lineage: LineageId::parse(lineage).unwrap(), incarnation };
        let first = run("0123456789abcdef0123456789abcdef", 1);
        let token = |r: &RunIdentity, checkpoint| insert_token(r, "21", "credits-out", 0, checkpoint);
        // A resend of an interval within the process repeats its token.
        assert_eq!(token(&first, 3), token(&first, 3));
        assert_ne!(token(&first, 3), token(&first, 4));
        // The same job file over a fresh directory: another lineage, checkpoints from 1 again.
        assert_ne!(token(&first, 1), token(&run("fedcba9876543210fedcba9876543210", 1), 1));
        // A restore continues the lineage in a new incarnation, whose intervals may hold other rows.
        assert_ne!(token(&first, 3), token(&run("0123456789abcdef0123456789abcdef", 2), 3));
        assert_ne!(insert_token(&first, "21", "credits-out", 0, 3), insert_token(&first, "21", "credits-out", 1, 3));
    }

    #[test]
    fn datetimes_render_in_utc_on_both_sides_of_the_epoch() {
        assert_eq!(datetime64_millis(0), "1970-01-01 00:00:00.000");
        assert_eq!(datetime64_millis(-1), "1969-12-31 23:59:59.999");
        assert_eq!(datetime64_millis(951_782_400_000), "2000-02-29 00:00:00.000");
    }
}
