//! The clients against the real services `gates/services start` runs on
//! 127.0.0.1 (its env file names them). Without them every trial is ignored
//! with the reason `service`, never passed; `.ci/run` starts them and fails
//! on any ignored trial.

use std::collections::BTreeMap;
use std::time::Duration;

use clink_connectors::clickhouse::destination::{describe, read_only, DescribeError};
use clink_connectors::clickhouse::{sql, Connection, Endpoint, Insert};
use clink_connectors::kafka::{Isolation, KafkaClientError, LogReader, LogWriter, Polled};
use clink_connectors::Known;
use libtest_mimic::{Arguments, Failed, Trial};

/// The services' env file, read as `gates/services` wrote it.
fn services() -> Result<BTreeMap<String, String>, String> {
    let path = std::env::var("CLINK_SERVICES_ENV").unwrap_or_else(|_| {
        format!("{}/clink-services.env", std::env::var("TMPDIR").unwrap_or_else(|_| "/tmp".into()))
    });
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e} (run gates/services start)"))?;
    Ok(text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect())
}

fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{prefix}_{}_{}", std::process::id(), nanos % 1_000_000_000)
}

fn clickhouse(env: &BTreeMap<String, String>) -> Connection {
    Connection::open(&Endpoint::parse(&env["CLINK_CLICKHOUSE_HTTP"]).unwrap()).unwrap()
}

fn a_table_is_described_written_and_read_back(env: &BTreeMap<String, String>) -> Result<(), Failed> {
    let ch = clickhouse(env);
    let table = unique("connectors");
    ch.execute(
        "create",
        &format!(
            "CREATE TABLE {} (id Int64, name String, amount Decimal(18, 2)) ENGINE = MergeTree ORDER BY id",
            sql::qualified("default", &table)
        ),
    )?;
    let d = describe(&ch, "default", &table)?;
    assert_eq!(d.engine, "MergeTree");
    assert_eq!(
        d.columns.iter().map(|c| c.type_name.as_str()).collect::<Vec<_>>(),
        ["Int64", "String", "Decimal(18, 2)"]
    );
    assert!(d.server.version.starts_with(env["CLINK_CLICKHOUSE_VERSION"].split('.').next().unwrap()));
    assert!(!d.has_ttl());
    assert!(
        !clink_connectors::clickhouse::inserts::deduplication(&d, true).holds,
        "a plain MergeTree does not deduplicate"
    );
    if d.server.version.starts_with("18.") {
        assert!(matches!(d.table_uuid, Known::Unavailable(_)), "18.16 has no table UUIDs: {:?}", d.table_uuid);
    }
    let mut body = Vec::new();
    for (id, name, amount) in [(1, "tab\there", "12.50"), (2, "it's \\ odd\n", "-0.05")] {
        body.extend_from_slice(format!("{id}\t").as_bytes());
        clink_connectors::clickhouse::tsv::escape_into(&mut body, name);
        body.extend_from_slice(format!("\t{amount}\n").as_bytes());
    }
    let columns = "`id`, `name`, `amount`";
    let target = sql::qualified("default", &table);
    let insert = Insert {
        what: "insert",
        table: &target,
        columns,
        settings: &[],
        timeout: Duration::from_secs(10),
        atomic: true,
    };
    ch.insert_tsv(&insert, body)?;
    let rows = ch.select(
        "read back",
        &format!("SELECT id, name, amount FROM {} ORDER BY id", sql::qualified("default", &table)),
        &read_only(),
    )?;
    assert_eq!(rows[0], [Some("1".into()), Some("tab\there".into()), Some("12.50".into())]);
    assert_eq!(rows[1], [Some("2".into()), Some("it's \\ odd\n".into()), Some("-0.05".into())]);
    // readonly = 2 refuses a write, whatever the statement.
    let refused = ch.select(
        "a write under readonly",
        &format!("INSERT INTO {} (id) VALUES (3)", sql::qualified("default", &table)),
        &read_only(),
    );
    let e = refused.expect_err("a write under readonly = 2 must be refused");
    assert!(e.server_message().is_some_and(|m| m.contains("readonly")), "{e}");
    Ok(())
}

fn a_missing_table_is_refused_by_name(env: &BTreeMap<String, String>) -> Result<(), Failed> {
    let ch = clickhouse(env);
    match describe(&ch, "default", "no_such_table_here") {
        Err(DescribeError::NoSuchTable { table, .. }) => assert_eq!(table, "no_such_table_here"),
        other => return Err(format!("expected NoSuchTable, got {other:?}").into()),
    }
    // A hostile name is a name: it neither breaks the statement nor matches anything.
    match describe(&ch, "default", "x' OR 1=1 --") {
        Err(DescribeError::NoSuchTable { .. }) => Ok(()),
        other => Err(format!("expected NoSuchTable, got {other:?}").into()),
    }
}

fn a_topic_is_produced_and_read_from_given_offsets(env: &BTreeMap<String, String>) -> Result<(), Failed> {
    let bootstrap = &env["CLINK_KAFKA_BOOTSTRAP"];
    let topic = unique("connectors");
    let writer = LogWriter::connect(bootstrap)?;
    assert!(writer.ensure_topic(&topic, 2)?, "a new topic is created");
    assert!(!writer.ensure_topic(&topic, 2)?, "an existing one of that shape is kept");
    assert!(writer.ensure_topic(&topic, 3).is_err(), "another partition count is refused");
    for i in 0..10 {
        writer.send(&topic, i % 2, b"k", format!("m{i}").as_bytes())?;
    }
    writer.flush(Duration::from_secs(30))?;
    let reader = LogReader::connect(bootstrap, &topic, Isolation::ReadCommitted, "clink-test")?;
    let log = reader.describe(Isolation::ReadCommitted)?;
    assert_eq!(log.partitions, 2);
    assert_eq!(reader.watermarks(0)?, (0, 5));
    reader.assign(&[(0, 2), (1, 4)])?;
    let mut got = Vec::new();
    let mut ends = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while ends < 2 && std::time::Instant::now() < deadline {
        match reader.poll(Duration::from_millis(200))? {
            Polled::Message { partition, offset, payload } => {
                got.push((partition, offset, String::from_utf8(payload).unwrap()))
            }
            Polled::PartitionEnd { .. } => ends += 1,
            Polled::Nothing => {}
        }
    }
    got.sort();
    let want: Vec<(i32, i64, String)> =
        vec![(0, 2, "m4".into()), (0, 3, "m6".into()), (0, 4, "m8".into()), (1, 4, "m9".into())];
    assert_eq!(got, want);
    Ok(())
}

fn a_missing_topic_is_refused_not_read_as_empty(env: &BTreeMap<String, String>) -> Result<(), Failed> {
    let reader =
        LogReader::connect(&env["CLINK_KAFKA_BOOTSTRAP"], "no-such-topic-here", Isolation::ReadCommitted, "t")?;
    match reader.describe(Isolation::ReadCommitted) {
        Err(KafkaClientError::NoSuchTopic { topic, .. }) => {
            assert_eq!(topic, "no-such-topic-here");
            Ok(())
        }
        other => Err(format!("expected NoSuchTopic, got {other:?}").into()),
    }
}

type Check = fn(&BTreeMap<String, String>) -> Result<(), Failed>;

fn main() {
    let args = Arguments::from_args();
    let checks: [(&str, Check); 4] = [
        ("clickhouse::describe_write_read", a_table_is_described_written_and_read_back),
        ("clickhouse::missing_table_refused", a_missing_table_is_refused_by_name),
        ("kafka::produce_and_read_from_offsets", a_topic_is_produced_and_read_from_given_offsets),
        ("kafka::missing_topic_refused", a_missing_topic_is_refused_not_read_as_empty),
    ];
    let env = services();
    let trials = checks
        .into_iter()
        .map(|(name, check)| match &env {
            Ok(env) => {
                let env = env.clone();
                Trial::test(name, move || check(&env))
            }
            Err(why) => Trial::test(name, || Ok(())).with_ignored_flag(true).with_kind(format!("service: {why}")),
        })
        .collect();
    libtest_mimic::run(&args, trials).exit();
}
