//! reconcile.destination: whether the table read is the one the evidence
//! names (the server's and the table's UUIDs where they identify something,
//! else where the server keeps the table, when its definition was written
//! and the server's host), and whether it is still as the sink wrote it: a
//! plain MergeTree without TTL, every column the sink wrote of the type it
//! had, each readable exactly as its cell, and no key column of a type whose
//! selection is unproven here.

use clink_connectors::clickhouse::destination::Destination;
use clink_connectors::clickhouse::types::ChType;
use clink_connectors::Known;
use clink_engine::value::Column;
use clink_verify::{CheckResult, Status};

use crate::cells::{self, CellKind};
use crate::read::{key_column_unsupported, ReadColumn};
use crate::scope::Scope;

/// Whether the observed table is the one the evidence names: UUIDs where
/// the server has them, otherwise what it has. A mismatch refuses the run.
pub(super) fn identify(recorded: &Destination, observed: &Destination) -> Result<String, String> {
    let differs = |what: &str, a: &dyn std::fmt::Debug, b: &dyn std::fmt::Debug| {
        format!("the destination is not the one the evidence names: its {what} was {a:?}, the server now says {b:?}")
    };
    if recorded.database != observed.database || recorded.table != observed.table {
        return Err(differs("table", &(&recorded.database, &recorded.table), &(&observed.database, &observed.table)));
    }
    let mut by = Vec::new();
    // An empty or nil UUID is unknown, whichever side holds it: it never
    // establishes the identity, and the check falls through to what else
    // the server has.
    for (what, r, o) in [
        ("server UUID", &recorded.server.uuid, &observed.server.uuid),
        ("table UUID", &recorded.table_uuid, &observed.table_uuid),
    ] {
        match (r.identity(), o.identity()) {
            (Some(a), Some(b)) if a != b => return Err(differs(what, &a, &b)),
            (Some(_), Some(_)) => by.push(what),
            (Some(a), None) => {
                return Err(format!(
                    "the evidence records the {what} {a:?}, and the server cannot say its own ({})",
                    unknown_why(o)
                ))
            }
            (None, _) => {}
        }
    }
    if by.len() == 2 {
        return Ok("by the server's and the table's UUIDs".into());
    }
    // Without UUIDs: where the server keeps the table, when its definition
    // was written, and the server's host.
    let mut fallback = Vec::new();
    for (what, r, o) in [
        ("data path", &recorded.data_path, &observed.data_path),
        ("metadata modification time", &recorded.metadata_modification_time, &observed.metadata_modification_time),
        ("host name", &recorded.server.host_name, &observed.server.host_name),
    ] {
        match (r, o) {
            (Known::Value(a), Known::Value(b)) if a != b => return Err(differs(what, a, b)),
            (Known::Value(_), Known::Value(_)) => fallback.push(what),
            _ => {}
        }
    }
    if fallback.is_empty() && by.is_empty() {
        return Err("neither the evidence nor the server give anything that identifies the table (no UUIDs, no data path): the destination cannot be shown to be the evidence's".into());
    }
    let mut said: Vec<&str> = by;
    said.extend(fallback);
    let missing: Vec<&str> = [("server", &recorded.server.uuid), ("table", &recorded.table_uuid)]
        .into_iter()
        .filter(|(_, uuid)| uuid.identity().is_none())
        .map(|(what, _)| what)
        .collect();
    Ok(format!(
        "by {} (the evidence holds no {} UUID; a table dropped and created again within the same second would not be told apart)",
        said.join(", "),
        missing.join(" or ")
    ))
}

/// Why a UUID is not known: the server's reason, or that it names nothing.
fn unknown_why(k: &Known) -> String {
    match k {
        Known::Unavailable(why) => why.clone(),
        Known::Value(v) => format!("it reports {v:?}, which identifies nothing"),
    }
}

/// What the sink wrote, as the scope says: its columns and their cells, the
/// audit's key among them, and every destination the scope's intervals record.
pub(super) struct Written<'a> {
    pub columns: &'a [Column],
    pub kinds: &'a [CellKind],
    pub key: &'a [usize],
    pub destinations: &'a [Destination],
}

impl<'a> Written<'a> {
    pub fn of(scope: &'a Scope, key: &'a [usize]) -> Self {
        Written { columns: &scope.shape.columns, kinds: &scope.kinds, key, destinations: &scope.destinations }
    }
}

pub(super) fn destination_check(
    written: &Written<'_>,
    recorded: Option<&Destination>,
    observed: Option<&Destination>,
    identity: &str,
) -> (CheckResult, Vec<ReadColumn>) {
    let name = "reconcile.destination";
    let (Some(recorded), Some(observed)) = (recorded, observed) else {
        return (
            CheckResult::new(name, Status::Unavailable, "the evidence records no destination for the audited interval")
                .next("collect the sink's interval evidence (--include-captures)"),
            Vec::new(),
        );
    };
    let mut problems = Vec::new();
    let mut unsupported = Vec::new();
    if observed.engine != "MergeTree" {
        unsupported
            .push(format!("the table is a {} table; reconciliation supports a plain MergeTree", observed.engine));
    }
    if observed.has_ttl() {
        unsupported.push("the table has a TTL: rows may vanish by themselves".to_string());
    }
    if observed.engine != recorded.engine {
        problems.push(format!("its engine was {}, it is now {}", recorded.engine, observed.engine));
    }
    for other in written.destinations {
        if other.table_uuid != recorded.table_uuid
            || other.data_path != recorded.data_path
            || other.database != recorded.database
            || other.table != recorded.table
        {
            problems.push("the scope's intervals record different destinations".to_string());
            break;
        }
    }
    let mut columns = Vec::new();
    for (at, (c, kind)) in written.columns.iter().zip(written.kinds).enumerate() {
        let was = recorded.column(&c.name);
        let is = observed.column(&c.name);
        match (was, is) {
            (_, None) => problems.push(format!("column {:?}, which the sink wrote, is gone", c.name)),
            (Some(w), Some(i)) if w.type_name != i.type_name => {
                problems.push(format!("column {:?} was {}, it is now {}", c.name, w.type_name, i.type_name))
            }
            (None, Some(_)) => problems.push(format!("the evidence does not record column {:?}", c.name)),
            (Some(_), Some(i)) => {
                let table_type = ChType::parse(&i.type_name);
                if !cells::reads_exactly(&table_type, *kind) {
                    unsupported.push(format!(
                        "column {:?} is {}, which does not read back as {kind} exactly",
                        c.name, i.type_name
                    ));
                }
                if written.key.contains(&at) {
                    unsupported.extend(key_column_unsupported(&c.name, &table_type));
                }
                columns.push(ReadColumn { name: c.name.clone(), table_type, kind: *kind });
            }
        }
    }
    let evidence = vec![
        format!(
            "{}.{}: {} ({}), server {}",
            observed.database,
            observed.table,
            observed.engine,
            observed.engine_full.value().unwrap_or("definition not available"),
            observed.server.version
        ),
        format!("identity {identity}"),
    ];
    let check = if !problems.is_empty() {
        CheckResult::new(
            name,
            Status::Failed,
            format!("the destination is not as the sink wrote it: {}", problems.join("; ")),
        )
        .evidence(evidence)
    } else if !unsupported.is_empty() {
        CheckResult::new(name, Status::Unsupported, unsupported.join("; ")).evidence(evidence)
    } else {
        CheckResult::new(
            name,
            Status::Passed,
            "the destination is the one the evidence names, a plain MergeTree without TTL, with every column the sink wrote as it was",
        )
        .evidence(evidence)
    };
    (check, columns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clink_connectors::clickhouse::destination::Server;

    fn destination(uuid: Known, data_path: &str, modified: &str) -> Destination {
        Destination {
            server: Server {
                version: "18.16.1".into(),
                uuid: uuid.clone(),
                timezone: Known::Value("UTC".into()),
                host_name: Known::Value("h".into()),
            },
            database: "default".into(),
            table: "t".into(),
            table_uuid: uuid,
            engine: "MergeTree".into(),
            engine_full: Known::Value("MergeTree ORDER BY id".into()),
            create_table_query: Known::Unavailable("old".into()),
            data_path: Known::Value(data_path.into()),
            partition_key: Known::Value(String::new()),
            dependent_views: Known::Value(String::new()),
            metadata_modification_time: Known::Value(modified.into()),
            columns: Vec::new(),
            settings: Vec::new(),
            merge_tree_settings: Vec::new(),
        }
    }

    #[test]
    fn identity_by_uuids_where_the_server_has_them_otherwise_by_what_it_has() {
        let old = Known::Unavailable("no UUIDs".into());
        let a = destination(old.clone(), "/a/data/default/t/", "2024-01-01 00:00:00");
        assert!(identify(&a, &a).unwrap().contains("data path"));
        let other_server = destination(old.clone(), "/b/data/default/t/", "2024-01-01 00:00:00");
        assert!(identify(&a, &other_server).unwrap_err().contains("data path"));
        let recreated = destination(old, "/a/data/default/t/", "2024-01-01 00:00:09");
        assert!(identify(&a, &recreated).unwrap_err().contains("metadata modification time"));
        let u1 = destination(Known::Value("u1".into()), "/a/", "t");
        let u2 = destination(Known::Value("u2".into()), "/a/", "t");
        assert!(identify(&u1, &u1).unwrap().contains("UUIDs"));
        assert!(identify(&u1, &u2).unwrap_err().contains("UUID"));
    }

    #[test]
    fn an_empty_or_nil_uuid_never_identifies_the_table_and_the_check_falls_through() {
        for nil in ["", "00000000-0000-0000-0000-000000000000"] {
            let nil = Known::Value(nil.into());
            let here = destination(nil.clone(), "/a/data/default/t/", "2024-01-01 00:00:00");
            let elsewhere = destination(nil.clone(), "/b/data/default/t/", "2024-01-01 00:00:00");
            let why = identify(&here, &elsewhere).unwrap_err();
            assert!(why.contains("data path"), "two nil UUIDs must not make two tables one: {why}");
            let recreated = destination(nil.clone(), "/a/data/default/t/", "2024-01-01 00:00:09");
            assert!(identify(&here, &recreated).unwrap_err().contains("metadata modification time"));
            let same = identify(&here, &here).unwrap();
            assert!(same.contains("data path") && !same.starts_with("by the server's and the table's UUIDs"), "{same}");
            // A real UUID recorded, a nil one observed: the server cannot say its own.
            let recorded = destination(Known::Value("3f1c0a52-8d1e-4f6b-9a57-1c2d3e4f5a6b".into()), "/a/", "t");
            let observed = destination(nil, "/a/", "t");
            assert!(identify(&recorded, &observed).unwrap_err().contains("cannot say its own"));
        }
    }

    fn column(name: &str, ty: &str) -> clink_connectors::clickhouse::destination::TableColumn {
        clink_connectors::clickhouse::destination::TableColumn {
            name: name.into(),
            type_name: ty.into(),
            default_kind: String::new(),
        }
    }

    #[test]
    fn a_date_time_64_key_column_is_supported_at_millisecond_precision_only() {
        use clink_engine::value::ColumnType;
        let mut table = destination(Known::Unavailable("old".into()), "/a/", "t");
        table.columns = vec![column("id", "Int64"), column("time", "DateTime64(3)")];
        let columns = vec![
            Column { name: "id".into(), ty: ColumnType::Int },
            Column { name: "time".into(), ty: ColumnType::Timestamp },
        ];
        let kinds = vec![CellKind::Int, CellKind::TimestampMs];
        let as_key = |table: &Destination, key: &[usize]| {
            let written = Written { columns: &columns, kinds: &kinds, key, destinations: &[] };
            destination_check(&written, Some(table), Some(table), "by data path").0
        };
        assert_eq!(as_key(&table, &[0]).status, Status::Passed, "a DateTime64 column beside the key reads as before");
        let keyed = as_key(&table, &[0, 1]);
        assert_eq!(keyed.status, Status::Passed, "selected by its instant: {}", keyed.reason);
        table.columns[1] = column("time", "DateTime64(6)");
        let finer = as_key(&table, &[0, 1]);
        assert_eq!(finer.status, Status::Unsupported, "{}", finer.reason);
        assert!(finer.reason.contains("key column \"time\" is DateTime64(6)"), "{}", finer.reason);
    }
}
