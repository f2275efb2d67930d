//! A table as the server defines it: the server's version and identity, the
//! table's engine, definition and identity, its columns, and the settings
//! that decide whether a resent INSERT can land twice.
//!
//! Capabilities are asked, never assumed: what `system.tables` holds, whether
//! `serverUUID()` exists, which settings the server knows. What a server does
//! not have is recorded as unavailable with the reason, so an old server and
//! a current one are described in the same shape. An empty or nil UUID is
//! recorded as unavailable too: it identifies no server and no table. Every statement here is a
//! read under `readonly = 2`.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::Known;

use super::sql;
use super::{ClickHouseError, Connection};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Server {
    pub version: String,
    pub uuid: Known,
    pub timezone: Known,
    /// `hostName()`: with the table's data path, what tells one server from
    /// another where the server has no UUID.
    #[serde(default = "not_recorded")]
    pub host_name: Known,
}

/// A field a description written before it existed does not hold.
fn not_recorded() -> Known {
    Known::Unavailable("not recorded (a description written before the field existed)".into())
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableColumn {
    pub name: String,
    #[serde(rename = "type")]
    pub type_name: String,
    /// `DEFAULT`, `MATERIALIZED`, `ALIAS`, or empty.
    pub default_kind: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Setting {
    pub name: String,
    pub value: Known,
}

/// The destination as one look at the server found it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Destination {
    pub server: Server,
    pub database: String,
    pub table: String,
    pub table_uuid: Known,
    pub engine: String,
    pub engine_full: Known,
    pub create_table_query: Known,
    /// Where the server keeps the table's data (`system.tables.data_path`):
    /// it names the server's data directory, so another server's table of
    /// the same name has another.
    #[serde(default = "not_recorded")]
    pub data_path: Known,
    /// When the table's definition was last written: a table dropped and
    /// created again under the same name has another.
    #[serde(default = "not_recorded")]
    pub metadata_modification_time: Known,
    pub columns: Vec<TableColumn>,
    /// Session settings that decide deduplication and asynchronous inserts.
    pub settings: Vec<Setting>,
    /// MergeTree settings (server defaults; a table may override them in its
    /// definition, which `engine_full` shows).
    pub merge_tree_settings: Vec<Setting>,
}

impl Destination {
    pub fn column(&self, name: &str) -> Option<&TableColumn> {
        self.columns.iter().find(|c| c.name == name)
    }

    pub fn setting(&self, name: &str) -> Option<&str> {
        self.settings.iter().chain(&self.merge_tree_settings).find(|s| s.name == name).and_then(|s| s.value.value())
    }

    /// Whether the table's definition has a TTL (rows may vanish by themselves).
    pub fn has_ttl(&self) -> bool {
        [&self.engine_full, &self.create_table_query]
            .iter()
            .filter_map(|k| k.value())
            .any(|text| text.split(|c: char| !c.is_ascii_alphanumeric() && c != '_').any(|w| w == "TTL"))
    }

    /// Whether this server deduplicates a resent INSERT into this table: a
    /// replicated table, or a MergeTree with a non-replicated deduplication
    /// window, with `insert_deduplicate` on.
    pub fn deduplicates_resends(&self) -> bool {
        let on = self.setting("insert_deduplicate") == Some("1");
        let replicated = self.engine.starts_with("Replicated");
        let window = self.setting("non_replicated_deduplication_window").is_some_and(|v| v != "0")
            || self.engine_full.value().is_some_and(|e| e.contains("non_replicated_deduplication_window"));
        on && (replicated || window)
    }
}

#[derive(Debug, Error)]
pub enum DescribeError {
    #[error(transparent)]
    ClickHouse(#[from] ClickHouseError),
    #[error("table {database}.{table} does not exist on the server at {url}")]
    NoSuchTable { url: String, database: String, table: String },
    #[error("the server at {url} answered {what} in an unexpected shape: {detail}")]
    Unexpected { url: String, what: String, detail: String },
}

/// Settings every read here runs under.
pub fn read_only() -> Vec<(&'static str, String)> {
    vec![("readonly", "2".into())]
}

const SESSION_SETTINGS: [&str; 4] =
    ["insert_deduplicate", "insert_deduplication_token", "async_insert", "wait_for_async_insert"];
const MERGE_TREE_SETTINGS: [&str; 1] = ["non_replicated_deduplication_window"];

pub fn describe(conn: &Connection, database: &str, table: &str) -> Result<Destination, DescribeError> {
    describe_with(conn, database, table, &read_only(), None)
}

/// [`describe`] with the caller's settings on every statement (which must
/// include `readonly`), and a limit on how long this client waits for each
/// answer.
pub fn describe_with(
    conn: &Connection,
    database: &str,
    table: &str,
    settings: &[(&str, String)],
    limit: Option<std::time::Duration>,
) -> Result<Destination, DescribeError> {
    let reader = Read { conn, settings, limit };
    describe_by(&reader, database, table)
}

/// One connection's reads, under fixed settings and an optional time limit.
struct Read<'a> {
    conn: &'a Connection,
    settings: &'a [(&'a str, String)],
    limit: Option<std::time::Duration>,
}

impl Read<'_> {
    fn select(&self, what: &str, statement: &str) -> Result<Vec<Vec<super::Cell>>, ClickHouseError> {
        match self.limit {
            Some(limit) => self.conn.select_within(what, statement, self.settings, limit),
            None => self.conn.select(what, statement, self.settings),
        }
    }
}

fn describe_by(read: &Read<'_>, database: &str, table: &str) -> Result<Destination, DescribeError> {
    let conn = read.conn;
    let one = |what: &str, statement: &str| -> Result<Option<String>, DescribeError> {
        let rows = read.select(what, statement)?;
        Ok(rows.into_iter().next().and_then(|r| r.into_iter().next()).flatten())
    };
    let unexpected = |what: &str, detail: &str| DescribeError::Unexpected {
        url: conn.url().to_string(),
        what: what.to_string(),
        detail: detail.to_string(),
    };
    let version = one("the server's version", "SELECT version()")?.ok_or_else(|| unexpected("version()", "no row"))?;
    let server = Server {
        version,
        uuid: server_uuid(read)?,
        timezone: match one("the server's time zone", "SELECT timezone()")? {
            Some(tz) => Known::Value(tz),
            None => Known::Unavailable("timezone() returned no row".into()),
        },
        host_name: match one("the server's host name", "SELECT hostName()")? {
            Some(host) => Known::Value(host),
            None => Known::Unavailable("hostName() returned no row".into()),
        },
    };

    let table_fields = column_names(read, "system", "tables")?;
    let optional = ["uuid", "engine_full", "create_table_query", "data_path", "metadata_modification_time"];
    let mut select = vec!["engine".to_string()];
    select.extend(optional.iter().filter(|f| table_fields.contains(**f)).map(|f| sql::identifier(f)));
    let statement = format!(
        "SELECT {} FROM system.tables WHERE database = {} AND name = {}",
        select.join(", "),
        sql::string(database),
        sql::string(table)
    );
    let rows = read.select("the table's definition", &statement)?;
    let Some(row) = rows.into_iter().next() else {
        return Err(DescribeError::NoSuchTable {
            url: conn.url().to_string(),
            database: database.to_string(),
            table: table.to_string(),
        });
    };
    let mut cells = row.into_iter();
    let engine = cells.next().flatten().ok_or_else(|| unexpected("system.tables", "no engine"))?;
    let mut field = |name: &str| {
        if table_fields.contains(name) {
            Known::Value(cells.next().flatten().unwrap_or_default())
        } else {
            Known::Unavailable(format!("this server's system.tables has no {name} column"))
        }
    };
    // A table of a database without UUIDs reports the nil UUID: that names no table.
    let table_uuid = match field("uuid") {
        Known::Value(uuid) => Known::identifier(Some(uuid), "table UUID"),
        unavailable => unavailable,
    };
    let engine_full = field("engine_full");
    let create_table_query = field("create_table_query");
    let data_path = field("data_path");
    let metadata_modification_time = field("metadata_modification_time");

    let statement = format!(
        "SELECT name, type, default_kind FROM system.columns WHERE database = {} AND table = {}",
        sql::string(database),
        sql::string(table)
    );
    let columns = read
        .select("the table's columns", &statement)?
        .into_iter()
        .map(|row| match row.as_slice() {
            [Some(name), Some(ty), kind] => Ok(TableColumn {
                name: name.clone(),
                type_name: ty.clone(),
                default_kind: kind.clone().unwrap_or_default(),
            }),
            _ => Err(unexpected("system.columns", "a row is not (name, type, default_kind)")),
        })
        .collect::<Result<Vec<_>, _>>()?;

    Ok(Destination {
        server,
        database: database.to_string(),
        table: table.to_string(),
        table_uuid,
        engine,
        engine_full,
        create_table_query,
        data_path,
        metadata_modification_time,
        columns,
        settings: named_settings(read, "system.settings", &SESSION_SETTINGS)?,
        merge_tree_settings: named_settings(read, "system.merge_tree_settings", &MERGE_TREE_SETTINGS)?,
    })
}

fn server_uuid(read: &Read<'_>) -> Result<Known, ClickHouseError> {
    let has = read.select(
        "whether the server has serverUUID()",
        "SELECT count() FROM system.functions WHERE name = 'serverUUID'",
    )?;
    if has.first().and_then(|r| r.first()).cloned().flatten().as_deref() != Some("1") {
        return Ok(Known::Unavailable("this server has no serverUUID() function".into()));
    }
    let rows = read.select("the server's UUID", "SELECT serverUUID()")?;
    let uuid = rows.into_iter().next().and_then(|r| r.into_iter().next()).flatten();
    Ok(Known::identifier(uuid, "server UUID (serverUUID())"))
}

fn column_names(read: &Read<'_>, database: &str, table: &str) -> Result<BTreeSet<String>, ClickHouseError> {
    let statement = format!(
        "SELECT name FROM system.columns WHERE database = {} AND table = {}",
        sql::string(database),
        sql::string(table)
    );
    let rows = read.select(&format!("the columns of {database}.{table}"), &statement)?;
    Ok(rows.into_iter().filter_map(|r| r.into_iter().next().flatten()).collect())
}

/// The named settings' values; one the server does not know is unavailable.
fn named_settings(read: &Read<'_>, source: &str, names: &[&str]) -> Result<Vec<Setting>, ClickHouseError> {
    let list: Vec<String> = names.iter().map(|n| sql::string(n)).collect();
    let statement = format!("SELECT name, value FROM {source} WHERE name IN ({})", list.join(", "));
    let rows = read.select(&format!("settings from {source}"), &statement)?;
    Ok(names
        .iter()
        .map(|name| {
            let value = rows.iter().find(|r| r.first().cloned().flatten().as_deref() == Some(*name));
            Setting {
                name: name.to_string(),
                value: match value.and_then(|r| r.get(1).cloned().flatten()) {
                    Some(v) => Known::Value(v),
                    None => Known::Unavailable(format!("this server has no setting {name} ({source})")),
                },
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn destination(engine: &str, engine_full: &str, settings: &[(&str, &str)]) -> Destination {
        Destination {
            server: Server {
                version: "18.16.1".into(),
                uuid: Known::Unavailable("old".into()),
                timezone: Known::Value("UTC".into()),
                host_name: Known::Value("h".into()),
            },
            database: "default".into(),
            table: "t".into(),
            table_uuid: Known::Unavailable("old".into()),
            engine: engine.into(),
            engine_full: Known::Value(engine_full.into()),
            create_table_query: Known::Unavailable("old".into()),
            data_path: Known::Value("/data/default/t/".into()),
            metadata_modification_time: Known::Value("2024-01-01 00:00:00".into()),
            columns: Vec::new(),
            settings: settings
                .iter()
                .map(|(n, v)| Setting { name: n.to_string(), value: Known::Value(v.to_string()) })
                .collect(),
            merge_tree_settings: Vec::new(),
        }
    }

    #[test]
    fn a_ttl_is_found_as_a_word_not_inside_a_name() {
        assert!(destination("MergeTree", "MergeTree ORDER BY id TTL t + INTERVAL 1 DAY", &[]).has_ttl());
        assert!(!destination("MergeTree", "MergeTree ORDER BY (TTL_days, id)", &[]).has_ttl());
    }

    #[test]
    fn a_plain_merge_tree_does_not_deduplicate_a_resend() {
        let on = [("insert_deduplicate", "1")];
        assert!(!destination("MergeTree", "MergeTree ORDER BY id", &on).deduplicates_resends());
        assert!(destination("ReplicatedMergeTree", "ReplicatedMergeTree('/t', 'r') ORDER BY id", &on)
            .deduplicates_resends());
        assert!(destination(
            "MergeTree",
            "MergeTree ORDER BY id SETTINGS non_replicated_deduplication_window = 100",
            &on
        )
        .deduplicates_resends());
        let off = [("insert_deduplicate", "0")];
        assert!(!destination("ReplicatedMergeTree", "ReplicatedMergeTree('/t', 'r') ORDER BY id", &off)
            .deduplicates_resends());
    }
}
