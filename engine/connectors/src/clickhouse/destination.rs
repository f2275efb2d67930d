//! A table as the server defines it: the server's version and identity, the
//! table's engine, definition and identity, its columns, what else an INSERT
//! into it writes (its partitions, the views that read from it), and the
//! settings that decide how the server writes an INSERT: whether a resent
//! one can land twice, and in how many blocks (the insert rules read them).
//!
//! Capabilities are asked, never assumed: what `system.tables` holds, whether
//! `serverUUID()` exists, which settings the server knows. What a server does
//! not have is recorded as unavailable with the reason, so an old server and
//! a current one are described in the same shape: 18.16's `data_path` and
//! 26's `data_paths` are one field, read as values (an `ARRAY JOIN`), never
//! as an array's rendering. An empty or nil UUID is recorded as unavailable
//! too: it identifies no server and no table. Every statement here is a read
//! under `readonly = 2`.

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
    /// Where the server keeps the table's data (`system.tables.data_path`,
    /// or on a server that has `data_paths` instead, its one path, or its
    /// paths as a JSON array): it names the server's data directory, so
    /// another server's table of the same name has another.
    #[serde(default = "not_recorded")]
    pub data_path: Known,
    /// The table's partition key (`system.tables.partition_key`), empty when
    /// it has none: an INSERT whose rows fall in several partitions is
    /// written as several parts.
    #[serde(default = "not_recorded")]
    pub partition_key: Known,
    /// The views an INSERT into the table also writes through, as
    /// `database.table` lines (`system.tables.dependencies_*`), empty when
    /// none: a view that refuses the rows fails an INSERT whose rows the
    /// table already holds.
    #[serde(default = "not_recorded")]
    pub dependent_views: Known,
    /// When the table's definition was last written: a table dropped and
    /// created again under the same name has another.
    #[serde(default = "not_recorded")]
    pub metadata_modification_time: Known,
    pub columns: Vec<TableColumn>,
    /// Session settings that decide deduplication, asynchronous inserts and
    /// how an INSERT's rows are cut into blocks ([`SESSION_SETTINGS`]).
    pub settings: Vec<Setting>,
    /// MergeTree settings (server defaults; a table may override them in its
    /// definition's SETTINGS clause: [`Destination::table_setting`]).
    pub merge_tree_settings: Vec<Setting>,
}

impl Destination {
    pub fn column(&self, name: &str) -> Option<&TableColumn> {
        self.columns.iter().find(|c| c.name == name)
    }

    pub fn setting(&self, name: &str) -> Option<&str> {
        self.settings.iter().chain(&self.merge_tree_settings).find(|s| s.name == name).and_then(|s| s.value.value())
    }

    /// A setting the table's own definition gives (its `SETTINGS` clause in
    /// `engine_full`): `Ok(None)` when the definition does not name it,
    /// `Err` when the definition is not known, so nothing can be said.
    pub fn table_setting(&self, name: &str) -> Result<Option<String>, String> {
        let Some(definition) = self.engine_full.value() else {
            return Err("the table's definition (engine_full) is not known".into());
        };
        Ok(definition_settings(definition).into_iter().find(|(n, _)| n == name).map(|(_, v)| v))
    }

    /// Whether the table's definition has a TTL (rows may vanish by themselves).
    pub fn has_ttl(&self) -> bool {
        [&self.engine_full, &self.create_table_query]
            .iter()
            .filter_map(|k| k.value())
            .any(|text| text.split(|c: char| !c.is_ascii_alphanumeric() && c != '_').any(|w| w == "TTL"))
    }
}

/// The `name = value` pairs of a table definition's top-level `SETTINGS`
/// clause (the last one outside quotes and parentheses), a quoted value
/// unquoted.
fn definition_settings(definition: &str) -> Vec<(String, String)> {
    let Some(start) = last_top_level_word(definition, "SETTINGS") else {
        return Vec::new();
    };
    split_top_level(&definition[start + "SETTINGS".len()..], ',')
        .into_iter()
        .filter_map(|pair| {
            let (name, value) = pair.split_once('=')?;
            let value = value.trim();
            let value = match value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')) {
                Some(quoted) => quoted.replace("\\'", "'").replace("\\\\", "\\"),
                None => value.to_string(),
            };
            Some((name.trim().to_string(), value))
        })
        .collect()
}

/// Where `word` last stands alone outside quotes and parentheses.
fn last_top_level_word(text: &str, word: &str) -> Option<usize> {
    let mut found = None;
    let mut depth = 0i32;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        if let Some(q) = quote {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                c if c == q => quote = None,
                _ => {}
            }
            continue;
        }
        match c {
            '\'' | '`' | '"' => quote = Some(c),
            '(' => depth += 1,
            ')' => depth -= 1,
            _ if depth == 0 && text[i..].starts_with(word) => {
                let before = text[..i].chars().next_back().is_none_or(|b| !b.is_ascii_alphanumeric() && b != '_');
                let after =
                    text[i + word.len()..].chars().next().is_none_or(|a| !a.is_ascii_alphanumeric() && a != '_');
                if before && after {
                    found = Some(i);
                }
            }
            _ => {}
        }
    }
    found
}

/// `text` split at `sep` where it stands outside quotes and parentheses.
fn split_top_level(text: &str, sep: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        if let Some(q) = quote {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                c if c == q => quote = None,
                _ => {}
            }
            continue;
        }
        match c {
            '\'' | '`' | '"' => quote = Some(c),
            '(' => depth += 1,
            ')' => depth -= 1,
            c if c == sep && depth == 0 => {
                parts.push(&text[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
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

/// The session settings read: those that decide deduplication (26 has
/// `deduplicate_insert`, which overrides the two older switches), whether an
/// INSERT is asynchronous, and how its rows are cut into blocks.
pub const SESSION_SETTINGS: [&str; 11] = [
    "insert_deduplicate",
    "deduplicate_insert",
    "async_insert_deduplicate",
    "insert_deduplication_token",
    "async_insert",
    "wait_for_async_insert",
    "max_insert_block_size",
    "max_insert_block_size_bytes",
    "min_insert_block_size_rows",
    "min_insert_block_size_bytes",
    "use_strict_insert_block_limits",
];
/// The MergeTree settings read (server defaults a table's definition may
/// override).
pub const MERGE_TREE_SETTINGS: [&str; 2] = ["non_replicated_deduplication_window", "replicated_deduplication_window"];

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
    let optional =
        ["uuid", "engine_full", "create_table_query", "data_path", "metadata_modification_time", "partition_key"];
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
    let partition_key = field("partition_key");
    let data_path = match data_path {
        Known::Unavailable(_) if table_fields.contains("data_paths") => data_paths(read, database, table)?,
        known => known,
    };
    let dependent_views = if ["dependencies_database", "dependencies_table"].iter().all(|f| table_fields.contains(*f)) {
        dependent_views(read, database, table)?
    } else {
        Known::Unavailable("this server's system.tables does not list a table's dependent views".into())
    };

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
        partition_key,
        dependent_views,
        metadata_modification_time,
        columns,
        settings: named_settings(read, "system.settings", &SESSION_SETTINGS)?,
        merge_tree_settings: named_settings(read, "system.merge_tree_settings", &MERGE_TREE_SETTINGS)?,
    })
}

/// The table's data paths (`system.tables.data_paths`, read one row per
/// path): one path as itself, as 18.16's `data_path` gives it; several as a
/// JSON array.
fn data_paths(read: &Read<'_>, database: &str, table: &str) -> Result<Known, ClickHouseError> {
    let statement = format!(
        "SELECT path FROM system.tables ARRAY JOIN data_paths AS path WHERE database = {} AND name = {}",
        sql::string(database),
        sql::string(table)
    );
    let paths: Vec<String> = read
        .select("the table's data paths", &statement)?
        .into_iter()
        .filter_map(|r| r.into_iter().next().flatten())
        .collect();
    Ok(match paths.as_slice() {
        [] => Known::Unavailable("the server lists no data path for the table".into()),
        [one] => Known::Value(one.clone()),
        several => Known::Value(serde_json::to_string(several).unwrap_or_default()),
    })
}

/// The views that read from the table, one `database.table` per line.
fn dependent_views(read: &Read<'_>, database: &str, table: &str) -> Result<Known, ClickHouseError> {
    let statement = format!(
        "SELECT view_database, view_table FROM system.tables ARRAY JOIN dependencies_database AS view_database, dependencies_table AS view_table WHERE database = {} AND name = {}",
        sql::string(database),
        sql::string(table)
    );
    let views: Vec<String> = read
        .select("the table's dependent views", &statement)?
        .into_iter()
        .map(|r| r.into_iter().map(Option::unwrap_or_default).collect::<Vec<_>>().join("."))
        .collect();
    Ok(Known::Value(views.join("\n")))
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

    fn destination(engine_full: &str) -> Destination {
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
            engine: "MergeTree".into(),
            engine_full: Known::Value(engine_full.into()),
            create_table_query: Known::Unavailable("old".into()),
            data_path: Known::Value("/data/default/t/".into()),
            partition_key: Known::Value(String::new()),
            dependent_views: Known::Value(String::new()),
            metadata_modification_time: Known::Value("2024-01-01 00:00:00".into()),
            columns: Vec::new(),
            settings: Vec::new(),
            merge_tree_settings: Vec::new(),
        }
    }

    #[test]
    fn a_ttl_is_found_as_a_word_not_inside_a_name() {
        assert!(destination("MergeTree ORDER BY id TTL t + INTERVAL 1 DAY").has_ttl());
        assert!(!destination("MergeTree ORDER BY (TTL_days, id)").has_ttl());
    }

    #[test]
    fn a_definitions_settings_are_read_from_its_own_clause() {
        let d = destination(
            "MergeTree ORDER BY (`SETTINGS a`, id) SETTINGS non_replicated_deduplication_window = 100, storage_policy = 'it\\'s, odd', index_granularity = 8192",
        );
        assert_eq!(d.table_setting("non_replicated_deduplication_window"), Ok(Some("100".into())));
        assert_eq!(d.table_setting("storage_policy"), Ok(Some("it's, odd".into())));
        assert_eq!(d.table_setting("index_granularity"), Ok(Some("8192".into())));
        assert_eq!(destination("MergeTree ORDER BY id").table_setting("index_granularity"), Ok(None));
        let mut unknown = destination("");
        unknown.engine_full = Known::Unavailable("old".into());
        assert!(unknown.table_setting("index_granularity").is_err());
        // A name that ends in the word is not the clause.
        assert_eq!(destination("MergeTree ORDER BY MYSETTINGS").table_setting("x"), Ok(None));
    }
}
