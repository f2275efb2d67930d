//! ClickHouse as its users run it today. Every ClickHouse trial elsewhere
//! runs against Debian's server, 18.16 (2018); users run 24 to 26. No current
//! server installs here, but the current engine does: chdb-core 26.9
//! (`gates/install-services`), run by `support/chdb_http.py` behind the part
//! of ClickHouse's HTTP interface the `clickhouse` crate uses, so that the
//! project's own programs send it their statements and settings unchanged.
//! What chdb_http.py does is the transport only (one POST, one statement; URL
//! settings as a SETTINGS clause); every statement, setting, answer and
//! refusal is ClickHouse 26's.
//!
//! Trials named `18.16::` run against the services' server, `26.9::` against
//! the engine; a case that runs on both checks the same claim on each:
//!
//! - `insert-rules::*`: THE insert rules (`clickhouse::inserts`) against
//!   what the server does: a described table's identity and values; whether
//!   a resend under the sink's token and settings is dropped, for every table
//!   kind the rules distinguish, the ledger's claim compared with the rows the
//!   table then holds; whether the sink's INSERT is one part where the rules
//!   say so, and not where they say not (a partition key, a view that refuses
//!   rows the table already took). On 26, a user profile of the server's
//!   (session settings) that switches deduplication off and cuts small
//!   blocks does not change the claims.
//! - `sink::*` (26 only: 18.16 has no table that deduplicates a
//!   non-replicated INSERT, and no tokens): the same job file run twice over
//!   fresh checkpoint directories leaves both runs' rows (a token built from
//!   the job and the checkpoint alone had the second run's dropped); an
//!   answer lost within a run and the INSERT resent leaves every row once,
//!   and the ledger says the resend was deduplicated.
//! - `reconcile::*` (26; the same scenarios run on 18.16 in
//!   `tests/reconcile.rs`): the record-wise audit with the whole table read,
//!   and the windowed audit keyed by a `DateTime64(3)` column, pass; every
//!   statement the sink, the reconciler and the audit sent ran without a
//!   refusal, and the suite prints which.
//!
//! `CLINK_CH26_STATEMENTS=1` prints every statement shape 26 ran (literals
//! blanked) with the settings it carried, once the trials are done.
//!
//! Without the chdb venv the `26.9::` trials are ignored as `chdb`, without
//! the services every trial as `service`; `.ci/run` fails on any ignored.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use clink_connectors::clickhouse::destination::{describe, read_only, Destination};
use clink_connectors::clickhouse::inserts::{deduplication, insert_settings, one_block};
use clink_connectors::clickhouse::{sql, ClickHouseError, Connection, Endpoint, Insert};
use clink_connectors::Known;
use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::Value as Json;

#[allow(dead_code)]
mod services;
use services::{run_bounded, stderr};
#[path = "support/chdb.rs"]
mod chdb;

const SEED: &str = "4";
const EVENTS: &str = "3000";
const ACCOUNTS: &str = "12";
const PARTITIONS: &str = "3";
const EVERY: &str = "500";
/// The database the 26 trials write in: `Atomic`, as a server's default
/// database is (chdb's own default gives its tables no UUID).
const DATABASE_26: &str = "clink26";

fn clink() -> &'static str {
    env!("CARGO_BIN_EXE_clink")
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn scratch() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

fn unique(prefix: &str) -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{prefix}_{}_{}_{n}", std::process::id(), nanos % 1_000_000)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Version {
    V18,
    V26,
}

impl Version {
    fn name(self) -> &'static str {
        match self {
            Version::V18 => "18.16",
            Version::V26 => "26.9",
        }
    }
}

/// One server (or engine) a trial talks to, and the database it writes in.
#[derive(Clone)]
struct Target {
    version: Version,
    address: String,
    database: String,
}

impl Target {
    fn connection(&self) -> Connection {
        Connection::open(&Endpoint::parse(&self.address).expect("a loopback address")).expect("a client")
    }

    fn execute(&self, statement: &str) -> Result<(), Failed> {
        self.connection().execute("a trial's statement", statement)?;
        Ok(())
    }

    fn table(&self, name: &str) -> String {
        sql::qualified(&self.database, name)
    }

    fn create(&self, name: &str, columns_and_engine: &str) -> Result<(), Failed> {
        self.execute(&format!("CREATE TABLE {} {columns_and_engine}", self.table(name)))
    }

    fn one(&self, statement: &str) -> Result<String, Failed> {
        let rows = self.connection().select("a trial's read", statement, &read_only())?;
        Ok(rows.into_iter().next().and_then(|r| r.into_iter().next()).flatten().unwrap_or_default())
    }

    /// The table's active parts and rows.
    fn parts(&self, name: &str) -> Result<(u64, u64), Failed> {
        let statement = format!(
            "SELECT count(), sum(rows) FROM system.parts WHERE database = {} AND table = {} AND active",
            sql::string(&self.database),
            sql::string(name)
        );
        let rows = self.connection().select("the table's parts", &statement, &read_only())?;
        let cell = |i: usize| rows.first().and_then(|r| r.get(i)).cloned().flatten().and_then(|c| c.parse().ok());
        Ok((cell(0).unwrap_or(0), cell(1).unwrap_or(0)))
    }

    fn describe(&self, name: &str) -> Result<Destination, Failed> {
        Ok(describe(&self.connection(), &self.database, name)?)
    }
}

/// The engine every 26 trial shares (started once: the import is most of the cost).
static CHDB: OnceLock<Result<chdb::Chdb, String>> = OnceLock::new();

fn shared_chdb() -> Result<&'static chdb::Chdb, String> {
    CHDB.get_or_init(|| {
        let chdb = chdb::Chdb::start(&scratch())?;
        println!("chdb-core: ClickHouse {} answered {:?} after its start", chdb.version, chdb.started_in);
        let create = format!("CREATE DATABASE IF NOT EXISTS {} ENGINE = Atomic", sql::identifier(DATABASE_26));
        Connection::open(&Endpoint::parse(&chdb.address).map_err(|e| e.to_string())?)
            .and_then(|c| c.execute("the trials' database", &create))
            .map_err(|e| e.to_string())?;
        Ok(chdb)
    })
    .as_ref()
    .map_err(Clone::clone)
}

fn target(version: Version, env: &BTreeMap<String, String>) -> Result<Target, Failed> {
    Ok(match version {
        Version::V18 => Target { version, address: env["CLINK_CLICKHOUSE_HTTP"].clone(), database: "default".into() },
        Version::V26 => {
            let chdb = shared_chdb()?;
            Target { version, address: chdb.address.clone(), database: DATABASE_26.into() }
        }
    })
}

/// Rows `from..from + n` of `(id Int64, s String)` as TabSeparated text.
fn rows(from: u64, n: u64) -> Vec<u8> {
    (from..from + n).flat_map(|i| format!("{i}\trow {i}\n").into_bytes()).collect()
}

/// One INSERT as the sink sends it: THE insert rules' settings, and a
/// refusal in doubt unless the rules say the INSERT is one block.
fn sink_insert(
    t: &Target,
    name: &str,
    d: &Destination,
    token: Option<&str>,
    body: Vec<u8>,
) -> Result<(), ClickHouseError> {
    let n = body.iter().filter(|&&b| b == b'\n').count() as u64;
    let settings = insert_settings(d, token, n);
    let table = t.table(name);
    let columns = d.columns.iter().map(|c| sql::identifier(&c.name)).collect::<Vec<_>>().join(", ");
    let insert = Insert {
        what: "a sink's INSERT",
        table: &table,
        columns: &columns,
        settings: &settings,
        timeout: Duration::from_secs(30),
        atomic: one_block(d).holds,
    };
    t.connection().insert_tsv(&insert, body)
}

// ---- insert-rules ---------------------------------------------------------

/// A table described, written as the sink writes and read back: its
/// identity as this version gives it, and its values compared as values.
fn describe_write_read(t: &Target) -> Result<(), Failed> {
    let name = unique("described");
    let time_type = if t.version == Version::V26 { "DateTime64(3, 'UTC')" } else { "Int64" };
    t.create(
        &name,
        &format!("(id Int64, name String, amount Decimal(18, 2), at {time_type}) ENGINE = MergeTree ORDER BY id"),
    )?;
    let d = t.describe(&name)?;
    let path = d.data_path.value().ok_or(format!("no data path: {:?}", d.data_path))?;
    if path.starts_with('[') || !path.contains('/') {
        return Err(format!("the data path is a rendering, not a path: {path:?}").into());
    }
    match t.version {
        Version::V26 => {
            if d.table_uuid.identity().is_none() {
                return Err(format!("26 names its tables by UUID: {:?}", d.table_uuid).into());
            }
            // Dropped and created again, it is another table.
            t.execute(&format!("DROP TABLE {}", t.table(&name)))?;
            t.create(
                &name,
                &format!(
                    "(id Int64, name String, amount Decimal(18, 2), at {time_type}) ENGINE = MergeTree ORDER BY id"
                ),
            )?;
            let again = t.describe(&name)?;
            if again.table_uuid == d.table_uuid || again.data_path == d.data_path {
                return Err(format!(
                    "a table created again kept its identity: {:?} {:?}",
                    again.table_uuid, again.data_path
                )
                .into());
            }
        }
        Version::V18 => {
            if !matches!(d.table_uuid, Known::Unavailable(_)) {
                return Err(format!("18.16 has no table UUIDs: {:?}", d.table_uuid).into());
            }
        }
    }
    let d = t.describe(&name)?;
    if d.partition_key.value() != Some("") || d.dependent_views.value() != Some("") {
        return Err(format!("partition key {:?}, views {:?}", d.partition_key, d.dependent_views).into());
    }
    let at = |ms: &str, text: &str| if t.version == Version::V26 { text.to_string() } else { ms.to_string() };
    let body = format!(
        "1\ttab\\there\t12.50\t{}\n2\tit\\'s\t-0.05\t{}\n3\tseven\t7.00\t{}\n",
        at("1700000000123", "2023-11-14 22:13:20.123"),
        at("-1", "1969-12-31 23:59:59.999"),
        at("0", "1970-01-01 00:00:00.000")
    );
    sink_insert(t, &name, &d, Some(&unique("token")), body.into_bytes())?;
    let time = if t.version == Version::V26 { "toUnixTimestamp64Milli(at)" } else { "at" };
    let read = t.connection().select(
        "read back",
        &format!("SELECT id, name, amount, {time} FROM {} ORDER BY id", t.table(&name)),
        &read_only(),
    )?;
    // Compared as values: 26 prints 12.5 and 7 for the 12.50 and 7.00 written.
    let amount_type = clink_connectors::clickhouse::types::ChType::parse("Decimal(18, 2)");
    let kind = clink_reconcile::cells::CellKind::Decimal { scale: 2 };
    let amounts: Vec<_> = read
        .iter()
        .map(|r| clink_reconcile::cells::from_text(r[2].as_deref(), &amount_type, kind))
        .collect::<Result<_, _>>()?;
    let printed: Vec<_> = read.iter().map(|r| r[2].clone().unwrap_or_default()).collect();
    let want = |v: &[&str]| v.iter().map(|s| Some(s.to_string())).collect::<Vec<_>>();
    if amounts != want(&["1250", "-5", "700"]) {
        return Err(format!("the decimals read back as {amounts:?} (printed {printed:?})").into());
    }
    let names: Vec<_> = read.iter().map(|r| r[1].clone().unwrap_or_default()).collect();
    let times: Vec<_> = read.iter().map(|r| r[3].clone().unwrap_or_default()).collect();
    if names != ["tab\there", "it's", "seven"] || times != ["1700000000123", "-1", "0"] {
        return Err(format!("read back {names:?} {times:?}").into());
    }
    if t.version == Version::V26 {
        // A DateTime64 key selected by an integer literal is read as seconds;
        // fromUnixTimestamp64Milli is exact.
        let by = |literal: &str| t.one(&format!("SELECT count() FROM {} WHERE at = {literal}", t.table(&name)));
        if by("1700000000123")? != "0" || by("fromUnixTimestamp64Milli(toInt64(1700000000123))")? != "1" {
            return Err("a DateTime64 key compared with an integer literal is not read as seconds here".into());
        }
    }
    // readonly = 2 refuses a write, whatever the statement.
    let refused = t.connection().select(
        "a write under readonly",
        &format!("INSERT INTO {} (id) VALUES (3)", t.table(&name)),
        &read_only(),
    );
    match refused {
        Err(e) if e.server_message().is_some_and(|m| m.to_ascii_lowercase().contains("readonly")) => {}
        other => return Err(format!("a write under readonly = 2 was not refused: {other:?}").into()),
    }
    println!("{}: {} {}, data path {path}, decimals printed {printed:?}", t.version.name(), d.engine, d.server.version);
    Ok(())
}

/// The tables whose deduplication the rules tell apart.
fn dedup_tables(version: Version) -> Vec<(&'static str, &'static str)> {
    let mut tables = vec![("plain MergeTree", "ENGINE = MergeTree ORDER BY id")];
    if version == Version::V26 {
        tables.extend([
            (
                "a window of 0 named in the definition",
                "ENGINE = MergeTree ORDER BY id SETTINGS non_replicated_deduplication_window = 0",
            ),
            ("a window of 100", "ENGINE = MergeTree ORDER BY id SETTINGS non_replicated_deduplication_window = 100"),
        ]);
    }
    tables
}

/// For every table kind: the ledger's claim that a resend under the same
/// token is dropped, against the rows the table holds after one.
fn deduplication_claims(t: &Target) -> Result<(), Failed> {
    let mut said = Vec::new();
    for (kind, engine) in dedup_tables(t.version) {
        for token in [Some(unique("token")), None] {
            let name = unique("dedup");
            t.create(&name, &format!("(id Int64, s String) {engine}"))?;
            let d = t.describe(&name)?;
            let claim = deduplication(&d, token.is_some());
            sink_insert(t, &name, &d, token.as_deref(), rows(0, 5))?;
            sink_insert(t, &name, &d, token.as_deref(), rows(0, 5))?;
            let (_, held) = t.parts(&name)?;
            let dropped = held == 5;
            if dropped != claim.holds || (held != 5 && held != 10) {
                return Err(format!(
                    "{kind}, token {token:?}: the ledger claims a resend {} ({}), the table holds {held} of 5 rows sent twice",
                    if claim.holds { "is dropped" } else { "may land twice" },
                    claim.why
                )
                .into());
            }
            said.push(format!("{kind} {}: {}", if token.is_some() { "with token" } else { "no token" }, claim.holds));
        }
    }
    if t.version == Version::V26 {
        // Why tokens must be unique: the same token with other rows drops them.
        let name = unique("dedup_other_rows");
        t.create(
            &name,
            "(id Int64, s String) ENGINE = MergeTree ORDER BY id SETTINGS non_replicated_deduplication_window = 100",
        )?;
        let d = t.describe(&name)?;
        sink_insert(t, &name, &d, Some("one-token"), rows(0, 5))?;
        sink_insert(t, &name, &d, Some("one-token"), rows(100, 5))?;
        if t.parts(&name)?.1 != 5 {
            return Err("26 kept rows sent under a token it had seen: the re-run trial proves nothing here".into());
        }
    }
    println!("{}: resend dropped? {}", t.version.name(), said.join("; "));
    Ok(())
}

/// The sink's INSERT is one part where the rules say one block, under a
/// server that would cut it (a control INSERT without the sink's settings
/// shows the cut); and not where they say not: a partitioned table.
fn block_claims(t: &Target, profile: bool) -> Result<(), Failed> {
    let small = [
        ("max_insert_block_size", "1000"),
        ("min_insert_block_size_rows", "1000"),
        ("min_insert_block_size_bytes", "4096"),
    ];
    if profile {
        // A user profile of the server's: session defaults that cut small blocks.
        for (name, value) in small {
            t.execute(&format!("SET {name} = {value}"))?;
        }
    }
    let name = unique("blocks");
    t.create(&name, "(id Int64, s String) ENGINE = MergeTree ORDER BY id")?;
    let d = t.describe(&name)?;
    let claim = one_block(&d);
    if !claim.holds {
        return Err(format!("a plain table: {}", claim.why).into());
    }
    sink_insert(t, &name, &d, Some(&unique("token")), rows(0, 3000))?;
    let sink_parts = t.parts(&name)?;
    let control = unique("blocks_control");
    t.create(&control, "(id Int64, s String) ENGINE = MergeTree ORDER BY id")?;
    let cut: Vec<(&str, String)> = if profile {
        vec![("async_insert", "0".into())]
    } else {
        small.iter().map(|(n, v)| (*n, v.to_string())).collect()
    };
    let table = t.table(&control);
    let insert = Insert {
        what: "a control INSERT",
        table: &table,
        columns: "`id`, `s`",
        settings: &cut,
        timeout: Duration::from_secs(30),
        atomic: false,
    };
    t.connection().insert_tsv(&insert, rows(0, 3000))?;
    let control_parts = t.parts(&control)?;
    if sink_parts != (1, 3000) || control_parts.0 < 2 {
        return Err(format!(
            "the sink's INSERT became {sink_parts:?} (parts, rows); the control {control_parts:?} (which must be cut)"
        )
        .into());
    }
    let partitioned = unique("blocks_partitioned");
    t.create(&partitioned, "(id Int64, s String) ENGINE = MergeTree PARTITION BY id % 3 ORDER BY id")?;
    let p = t.describe(&partitioned)?;
    let claim = one_block(&p);
    sink_insert(t, &partitioned, &p, Some(&unique("token")), rows(0, 30))?;
    let parts = t.parts(&partitioned)?;
    if claim.holds || parts.0 != 3 {
        return Err(format!("a partitioned table: claim {claim:?}, parts {parts:?}").into());
    }
    println!(
        "{}{}: the sink's 3,000 rows one part; the control {} parts; partitioned: {}",
        t.version.name(),
        if profile { " under a profile cutting 1,000-row blocks" } else { "" },
        control_parts.0,
        claim.why
    );
    Ok(())
}

/// A view that refuses the rows fails an INSERT the table already took: the
/// rules say not one block, and the refusal reaches the sink as in doubt.
fn a_view_refuses(t: &Target) -> Result<(), Failed> {
    let name = unique("viewed");
    let target = unique("viewed_target");
    t.create(&name, "(id Int64, s String) ENGINE = MergeTree ORDER BY id")?;
    t.create(&target, "(id Int64) ENGINE = MergeTree ORDER BY id")?;
    let view = unique("viewed_view");
    t.execute(&format!(
        "CREATE MATERIALIZED VIEW {} TO {} AS SELECT id + throwIf(id = 3) AS id FROM {}",
        t.table(&view),
        t.table(&target),
        t.table(&name)
    ))?;
    let d = t.describe(&name)?;
    let claim = one_block(&d);
    if claim.holds || !claim.why.contains(&view) {
        return Err(format!("a table a view reads from: {claim:?}").into());
    }
    let result = sink_insert(t, &name, &d, Some(&unique("token")), rows(0, 5));
    let landed = t.parts(&name)?.1;
    match result {
        Err(e) if e.in_doubt() && e.to_string().contains("some of its rows may have landed") => {}
        other => return Err(format!("the view's refusal reached the sink as {other:?}").into()),
    }
    println!(
        "{}: a view refused the INSERT, the table took {landed} of its 5 rows; the sink was told it is in doubt",
        t.version.name()
    );
    Ok(())
}

/// On 26, a user profile that switches deduplication off and cuts small
/// blocks changes none of the claims: the sink sets what decides them.
fn a_profile_changes_no_claim(_env: &BTreeMap<String, String>) -> Result<(), Failed> {
    // Its own engine: the profile is session-wide.
    let chdb = chdb::Chdb::start(&scratch())?;
    let t = Target { version: Version::V26, address: chdb.address.clone(), database: DATABASE_26.into() };
    t.execute(&format!("CREATE DATABASE {} ENGINE = Atomic", sql::identifier(DATABASE_26)))?;
    for (name, value) in [("deduplicate_insert", "'disable'"), ("insert_deduplicate", "0"), ("async_insert", "1")] {
        t.execute(&format!("SET {name} = {value}"))?;
    }
    let name = unique("profiled");
    t.create(
        &name,
        "(id Int64, s String) ENGINE = MergeTree ORDER BY id SETTINGS non_replicated_deduplication_window = 100",
    )?;
    let d = t.describe(&name)?;
    let claim = deduplication(&d, true);
    let token = unique("token");
    sink_insert(&t, &name, &d, Some(&token), rows(0, 5))?;
    sink_insert(&t, &name, &d, Some(&token), rows(0, 5))?;
    let held = t.parts(&name)?.1;
    if !claim.holds || held != 5 {
        return Err(
            format!("under a profile without deduplication: claim {claim:?}, the table holds {held} of 5").into()
        );
    }
    // The profile does bite a writer that does not set the switch.
    let table = t.table(&name);
    let bare = [("insert_deduplication_token", token.clone()), ("async_insert", "0".to_string())];
    let insert = Insert {
        what: "control",
        table: &table,
        columns: "`id`, `s`",
        settings: &bare,
        timeout: Duration::from_secs(30),
        atomic: false,
    };
    t.connection().insert_tsv(&insert, rows(0, 5))?;
    if t.parts(&name)?.1 != 10 {
        return Err("the profile's deduplicate_insert = 'disable' did not take: this trial proves nothing".into());
    }
    block_claims(&t, true)
}

// ---- sink: the job, run against 26 -----------------------------------------

/// One record-wise job over its own topic into a 26 table.
struct Job {
    dir: tempfile::TempDir,
    bootstrap: String,
    t: Target,
    topic: String,
    table: String,
    fixture: &'static str,
}

impl Job {
    fn new(env: &BTreeMap<String, String>, fixture: &'static str, ddl: &str) -> Result<Job, Failed> {
        let t = target(Version::V26, env)?;
        let job = Job {
            dir: tempfile::tempdir_in(scratch())?,
            bootstrap: env["CLINK_KAFKA_BOOTSTRAP"].clone(),
            topic: unique("ch26-topic"),
            table: unique("ch26"),
            fixture,
            t,
        };
        job.t.create(&job.table, ddl)?;
        job.write_job()?;
        job.produce()?;
        Ok(job)
    }

    fn fixture(&self) -> PathBuf {
        workspace().join("fixtures/jobs").join(self.fixture)
    }

    fn write_job(&self) -> Result<(), Failed> {
        let mut job: Json = serde_json::from_slice(&std::fs::read(self.fixture().join("job.json"))?)?;
        for op in job["operators"].as_array_mut().ok_or("the fixture has no operators")? {
            match op["type"].as_str() {
                Some("kafka_source") => {
                    op["params"]["topic"] = self.topic.clone().into();
                    op["params"]["fetch_kbytes"] = 16.into();
                }
                Some("clickhouse_sink") => {
                    op["params"]["table"] = self.table.clone().into();
                    op["params"]["database"] = self.t.database.clone().into();
                }
                _ => {}
            }
        }
        std::fs::write(self.dir.path().join("job.json"), serde_json::to_vec_pretty(&job)?)?;
        Ok(())
    }

    fn produce(&self) -> Result<(), Failed> {
        let out = Command::new(clink())
            .args(["produce", "--seed", SEED, "--events", EVENTS, "--accounts", ACCOUNTS, "--partitions", PARTITIONS])
            .args(["--topic", &self.topic, "--bootstrap", &self.bootstrap])
            .output()?;
        if !out.status.success() {
            return Err(format!("clink produce: {}", stderr(&out)).into());
        }
        Ok(())
    }

    /// One run over the checkpoint directory `ck`, its captures beside it.
    fn run(&self, ck: &str, fault: Option<&str>) -> Result<Output, Failed> {
        let mut cmd = Command::new(clink());
        cmd.args(["run", "--quiet", "--job"])
            .arg(self.dir.path().join("job.json"))
            .arg("--output-dir")
            .arg(self.dir.path().join(format!("{ck}-out")))
            .arg("--checkpoint-dir")
            .arg(self.dir.path().join(ck))
            .arg("--capture-dir")
            .arg(self.dir.path().join(format!("{ck}-capture")))
            .args([
                "--checkpoint-every-records",
                EVERY,
                "--retain-checkpoints",
                "1000",
                "--capture-retain-epochs",
                "1000",
            ])
            .args(["--kafka-bootstrap", &self.bootstrap, "--clickhouse", &self.t.address])
            .env_remove("CLINK_FAULT")
            .env_remove("CLINK_TEST_DEFECT");
        if let Some(fault) = fault {
            cmd.env("CLINK_FAULT", fault);
        }
        let log_dir = self.dir.path().join(format!("{ck}-logs"));
        std::fs::create_dir_all(&log_dir)?;
        let out = run_bounded(&mut cmd, &log_dir);
        if !out.status.success() {
            return Err(format!("the run over {ck} failed: {:?}\n{}", out.status, stderr(&out)).into());
        }
        Ok(out)
    }

    /// The table's rows as THE canonical cells read them, one line each.
    fn table_rows(&self, columns: &[&str]) -> Result<Vec<String>, Failed> {
        let d = self.t.describe(&self.table)?;
        let select: Vec<String> = columns.iter().map(|c| sql::identifier(c)).collect();
        let statement = format!("SELECT {} FROM {}", select.join(", "), self.t.table(&self.table));
        let rows = self.t.connection().select("the table", &statement, &read_only())?;
        let types: Vec<_> = columns
            .iter()
            .map(|c| d.column(c).map(|c| clink_connectors::clickhouse::types::ChType::parse(&c.type_name)))
            .collect::<Option<_>>()
            .ok_or("a column is missing")?;
        rows.into_iter().map(|r| canonical_line(&r, &types)).collect()
    }

    /// The sink's ledgers, every subtask's interval of the run over `ck`.
    fn ledgers(&self, ck: &str) -> Result<BTreeMap<u64, Vec<Json>>, Failed> {
        let mut out: BTreeMap<u64, Vec<Json>> = BTreeMap::new();
        let root = self.dir.path().join(format!("{ck}-capture")).join("op-4");
        for subtask in std::fs::read_dir(&root).map_err(|e| format!("{}: {e}", root.display()))? {
            for entry in std::fs::read_dir(subtask?.path())? {
                let path = entry?.path();
                if path.to_string_lossy().ends_with(".sink.json") {
                    let evidence: Json = serde_json::from_slice(&std::fs::read(&path)?)?;
                    let epoch = evidence["epoch"].as_u64().ok_or("evidence without an epoch")?;
                    out.entry(epoch).or_default().push(evidence["sink"].clone());
                }
            }
        }
        Ok(out)
    }
}

impl Job {
    /// The run over `ck`'s last completed checkpoint.
    fn last_completed(&self, ck: &str, job_id: &str) -> Result<u64, Failed> {
        let dir = self.dir.path().join(ck).join("_jobs").join(job_id);
        std::fs::read_dir(&dir)?
            .filter_map(|e| e.ok()?.file_name().to_str()?.strip_prefix("COMPLETED-")?.parse().ok())
            .max()
            .ok_or_else(|| format!("no completed checkpoint in {}", dir.display()).into())
    }

    /// The run over `ck` audited from its start to its last checkpoint, the
    /// whole table read: collect, scope, the independent reference,
    /// reconcile. Returns the reconciliation's exit code and report.
    fn audit(&self, ck: &str, job_id: &str, transform: &str, key: Option<&str>) -> Result<(i32, Json), Failed> {
        let last = self.last_completed(ck, job_id)?;
        let bundle = self.dir.path().join(format!("{ck}-bundle"));
        let epochs: Vec<String> = (1..=last + 2).map(|e| e.to_string()).collect();
        let out = Command::new(clink())
            .args(["incident-collect", "--job", job_id, "--include-state", "--include-captures"])
            .args(["--commit-confirmation", "no", "--checkpoint", &last.to_string(), "--epochs", &epochs.join(",")])
            .arg("--checkpoint-dir")
            .arg(self.dir.path().join(ck))
            .arg("--capture-dir")
            .arg(self.dir.path().join(format!("{ck}-capture")))
            .arg("--out")
            .arg(&bundle)
            .output()?;
        if !out.status.success() {
            return Err(format!("incident-collect: {}", stderr(&out)).into());
        }
        let scope = self.dir.path().join(format!("{ck}-scope.json"));
        let out = Command::new(clink())
            .args(["incident-scope", "--checkpoint", &last.to_string(), "--from-run-start"])
            .arg(&bundle)
            .arg("--out")
            .arg(&scope)
            .output()?;
        if !out.status.success() {
            return Err(format!("incident-scope: {}", stderr(&out)).into());
        }
        let reference = self.dir.path().join(format!("{ck}-reference.ndjson"));
        let args: Vec<std::ffi::OsString> = vec![
            "--scope".into(),
            scope.into(),
            "--bootstrap".into(),
            self.bootstrap.clone().into(),
            "--transform".into(),
            transform.into(),
            "--run-start-offset".into(),
            "ALL=0".into(),
            "--out".into(),
            reference.clone().into(),
        ];
        let code = clink_reference_audit::main_with(args);
        if code != 0 {
            return Err(format!("the reference exited {code}").into());
        }
        let mut cmd = Command::new(clink());
        cmd.args(["incident-reconcile", "--json", "--checkpoint", &last.to_string(), "--from-run-start"])
            .arg(&bundle)
            .args(["--host", &self.t.address, "--settle-ms", "200", "--reference"])
            .arg(&reference)
            .args(["--coverage", "complete-table", "--assume-table-holds-only-this-run"]);
        if let Some(key) = key {
            cmd.args(["--key", key]);
        }
        let out = cmd.output()?;
        let report: Json = serde_json::from_slice(&out.stdout)
            .map_err(|e| format!("incident-reconcile printed no JSON ({e}): {}", stderr(&out)))?;
        Ok((out.status.code().unwrap_or(-1), report))
    }
}

/// Every check of a report passed, the ones named among them.
fn all_passed(code: i32, report: &Json, named: &[&str]) -> Result<(), Failed> {
    let checks: BTreeMap<String, String> = report["checks"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| (c["name"].as_str().unwrap_or("?").to_string(), c["status"].as_str().unwrap_or("?").to_string()))
        .collect();
    let missing: Vec<_> = named.iter().filter(|n| !checks.contains_key(**n)).collect();
    if code != 0 || checks.values().any(|s| s != "passed") || !missing.is_empty() {
        return Err(format!(
            "exit {code}, checks {checks:?}, missing {missing:?}\nreason: {}\n{}",
            report["reason"],
            serde_json::to_string_pretty(&report["checks"]).unwrap_or_default()
        )
        .into());
    }
    Ok(())
}

/// The record-wise audit of a run into a 26 table, the whole table read:
/// every statement of the sink, the reconciler and the audit ran on 26.
fn records_audit(env: &BTreeMap<String, String>) -> Result<(), Failed> {
    let job = Job::new(env, "kafka-clickhouse", RECORDS_TABLE)?;
    job.run("run", None)?;
    let (code, report) = job.audit("run", "21", "credits", Some("id"))?;
    all_passed(
        code,
        &report,
        &["reconcile.destination", "reconcile.rows", "reference.destination", "destination.coverage"],
    )?;
    let destination = report["checks"].as_array().into_iter().flatten().find(|c| c["name"] == "reconcile.destination");
    let ran = only_provoked_refusals(false)?;
    println!("26.9: {ran} statements so far, none refused but those trials provoked");
    println!(
        "26.9: record-wise audit, whole table: exit 0; {}; {}",
        destination.map(|c| c["evidence"].to_string()).unwrap_or_default(),
        statements_about(&job.table)?
    );
    Ok(())
}

/// The windowed audit of a run into a 26 table whose window bounds are
/// `DateTime64(3, 'UTC')`: the key (account, window_start) is selected by
/// its instants, and the windows read as values.
fn windows_audit_datetime64_keys(env: &BTreeMap<String, String>) -> Result<(), Failed> {
    let ddl = "(account String, window_start DateTime64(3, 'UTC'), window_end DateTime64(3, 'UTC'), count Int64, sum Decimal(38, 2)) ENGINE = MergeTree ORDER BY (account, window_start)";
    let job = Job::new(env, "kafka-windows", ddl)?;
    job.run("run", None)?;
    let (code, report) = job.audit("run", "22", "windows", None)?;
    all_passed(
        code,
        &report,
        &["reconcile.destination", "reconcile.rows", "reference.destination", "destination.coverage"],
    )?;
    let about = statements_about(&job.table)?;
    if !about.contains("SELECT toUnixTimestamp64Milli")
        && !shared_chdb()?.statements()?.iter().any(|s| {
            s["statement"]
                .as_str()
                .is_some_and(|t| t.contains(&job.table) && t.contains("fromUnixTimestamp64Milli(toInt64("))
        })
    {
        return Err("the audit did not select the windows by their instants".into());
    }
    println!("26.9: windowed audit keyed by DateTime64(3) window starts: exit 0; {about}");
    Ok(())
}

/// A row's cells as THE canonical cells (the values, whatever the spelling).
fn canonical_line(
    row: &[Option<String>],
    types: &[clink_connectors::clickhouse::types::ChType],
) -> Result<String, Failed> {
    use clink_connectors::clickhouse::types::ChType;
    use clink_reconcile::cells::{from_text, CellKind};
    let cells: Result<Vec<String>, Failed> = row
        .iter()
        .zip(types)
        .map(|(cell, ty)| {
            let kind = match ty {
                ChType::Decimal { scale, .. } => CellKind::Decimal { scale: *scale },
                ChType::String => CellKind::String,
                _ => CellKind::Int,
            };
            Ok(from_text(cell.as_deref(), ty, kind)?.unwrap_or_else(|| "NULL".into()))
        })
        .collect();
    Ok(cells?.join(","))
}

/// The reference's record-wise rows (`id,account,amount,time`) as canonical lines.
fn expected_credits() -> Result<&'static [String], Failed> {
    static CREDITS: OnceLock<Result<Vec<String>, String>> = OnceLock::new();
    let credits = CREDITS.get_or_init(|| {
        let dir = tempfile::tempdir_in(scratch()).map_err(|e| e.to_string())?;
        let input = dir.path().join("input");
        let out = Command::new(clink())
            .args(["gen-input", "--seed", SEED, "--events", EVENTS, "--accounts", ACCOUNTS, "--out"])
            .arg(&input)
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!("gen-input: {}", stderr(&out)));
        }
        let lines = clink_reference::records::credits(&input).map_err(|e| e.to_string())?;
        use clink_connectors::clickhouse::types::ChType;
        let types = ["Int64", "String", "Decimal(18, 2)", "Int64"].map(ChType::parse);
        lines
            .iter()
            .map(|l| {
                let cells: Vec<Option<String>> = l.split(',').map(|c| Some(c.to_string())).collect();
                canonical_line(&cells, &types).map_err(|e| format!("{l}: {e:?}"))
            })
            .collect()
    });
    credits.as_deref().map_err(|e| e.clone().into())
}

const RECORDS_TABLE: &str =
    "(id Int64, account String, amount Decimal(18, 2), time Int64) ENGINE = MergeTree ORDER BY id";
const CREDIT_COLUMNS: [&str; 4] = ["id", "account", "amount", "time"];

/// The rows each copy of the reference's rows the table holds, or what differs.
fn copies_of_reference(job: &Job) -> Result<usize, Failed> {
    let expected = expected_credits()?;
    let actual = job.table_rows(&CREDIT_COLUMNS)?;
    let mut counts: BTreeMap<&String, usize> = BTreeMap::new();
    for row in &actual {
        *counts.entry(row).or_default() += 1;
    }
    let copies = counts.get(&expected[0]).copied().unwrap_or(0);
    let want: BTreeMap<&String, usize> = expected.iter().map(|r| (r, copies)).collect();
    if counts != want || expected.len() * copies != actual.len() {
        let missing = expected.iter().filter(|r| counts.get(r).copied().unwrap_or(0) < copies.max(1)).count();
        return Err(format!(
            "the table holds {} rows, not {} copies of the reference's {} (e.g. {missing} rows fewer)",
            actual.len(),
            copies.max(1),
            expected.len()
        )
        .into());
    }
    Ok(copies)
}

/// Every statement the 26 engine ran that names `name`: each must have run
/// (a refusal fails the trial); returns the statements' first words and the
/// settings the INSERTs carried, for the trial's line.
fn statements_about(name: &str) -> Result<String, Failed> {
    let all = shared_chdb()?.statements()?;
    let about: Vec<&Json> = all.iter().filter(|s| s["statement"].as_str().is_some_and(|t| t.contains(name))).collect();
    if let Some(refused) = about.iter().find(|s| s["ok"] != true) {
        return Err(format!("ClickHouse 26 refused a statement: {refused}").into());
    }
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    let mut insert_settings: std::collections::BTreeSet<String> = Default::default();
    for s in &about {
        let text = s["statement"].as_str().unwrap_or_default();
        let kind: Vec<&str> = text.split_whitespace().take(2).collect();
        *kinds.entry(kind.join(" ")).or_default() += 1;
        if text.starts_with("INSERT") {
            for pair in s["settings"].as_array().into_iter().flatten() {
                insert_settings.insert(pair[0].as_str().unwrap_or_default().to_string());
            }
        }
    }
    Ok(format!("{} statements ran ({kinds:?}); the INSERTs' settings {insert_settings:?}", about.len()))
}

/// The refusals the 26 engine gave so far: each must belong to a trial that
/// provokes one (a write under readonly, a view that refuses its rows), or
/// the project sent 26 a statement it does not take.
fn only_provoked_refusals(print: bool) -> Result<usize, Failed> {
    let all = shared_chdb()?.statements()?;
    if print && std::env::var_os("CLINK_CH26_STATEMENTS").is_some() {
        // Every statement shape 26 ran (names and literals blanked), for a record of what was checked.
        let mut shapes: BTreeMap<String, usize> = BTreeMap::new();
        for s in &all {
            let text = s["statement"].as_str().unwrap_or_default();
            let blanked: String = text
                .split(['\'', '`'])
                .enumerate()
                .map(|(i, part)| if i % 2 == 1 { "_" } else { part })
                .collect::<Vec<_>>()
                .join("");
            let mut shape = String::new();
            for c in blanked.chars() {
                if c.is_ascii_digit() {
                    if !shape.ends_with('N') {
                        shape.push('N');
                    }
                } else {
                    shape.push(c);
                }
            }
            let blanked: String = shape.chars().take(150).collect();
            let mut settings: Vec<&str> =
                s["settings"].as_array().into_iter().flatten().filter_map(|p| p[0].as_str()).collect();
            settings.sort_unstable();
            *shapes.entry(format!("{blanked} [{}] ok={}", settings.join(","), s["ok"])).or_default() += 1;
        }
        for (shape, n) in shapes {
            eprintln!("{n:5} {shape}");
        }
    }
    let provoked = ["described_", "viewed_"];
    if let Some(s) = all
        .iter()
        .find(|s| s["ok"] != true && !provoked.iter().any(|p| s["statement"].as_str().unwrap_or_default().contains(p)))
    {
        return Err(format!("ClickHouse 26 refused a statement no trial provoked: {s}").into());
    }
    Ok(all.len())
}

/// The same job file run twice over fresh checkpoint directories, into a
/// table that keeps tokens: both runs' rows are there.
fn same_job_file_twice(env: &BTreeMap<String, String>) -> Result<(), Failed> {
    let job = Job::new(
        env,
        "kafka-clickhouse",
        &format!("{RECORDS_TABLE} SETTINGS non_replicated_deduplication_window = 1000"),
    )?;
    job.run("first", None)?;
    job.run("second", None)?;
    let copies = copies_of_reference(&job)?;
    let (first, second) = (job.ledgers("first")?, job.ledgers("second")?);
    let tokens = |l: &BTreeMap<u64, Vec<Json>>| -> Vec<String> {
        l.values()
            .flatten()
            .flat_map(|s| s["interval"]["inserts"].as_array().cloned().unwrap_or_default())
            .filter_map(|i| i["token"].as_str().map(String::from))
            .collect()
    };
    let shared: Vec<_> = tokens(&first).into_iter().filter(|t| tokens(&second).contains(t)).collect();
    if copies != 2 || !shared.is_empty() {
        return Err(format!("the table holds {copies} copies of each row; tokens both runs sent: {shared:?}").into());
    }
    let writes = &first.values().next().and_then(|v| v.first()).ok_or("no evidence")?["writes"];
    if writes["deduplication"]["holds"] != true {
        return Err(format!("a table with a window of 1000 should deduplicate a resend: {writes}").into());
    }
    println!(
        "26.9: the job file run twice: 2 copies of each of the {} rows; {}; {}",
        expected_credits()?.len(),
        writes["tokens"],
        statements_about(&job.table)?
    );
    Ok(())
}

/// An answer lost after checkpoint 2's INSERT, and the INSERT resent under
/// its token: every row once, and the ledger says the resend was dropped.
fn resend_within_a_run(env: &BTreeMap<String, String>) -> Result<(), Failed> {
    let job = Job::new(
        env,
        "kafka-clickhouse",
        &format!("{RECORDS_TABLE} SETTINGS non_replicated_deduplication_window = 100"),
    )?;
    job.run("only", Some("clickhouse.response_lost@2"))?;
    let copies = copies_of_reference(&job)?;
    let ledgers = job.ledgers("only")?;
    let resent: Vec<&Json> = ledgers
        .get(&2)
        .into_iter()
        .flatten()
        .flat_map(|s| s["interval"]["inserts"].as_array().into_iter().flatten())
        .filter(|i| i["resent_in_doubt"] == true)
        .collect();
    if copies != 1
        || resent.is_empty()
        || resent.iter().any(|i| i["resend_deduplicated"] != true || i["may_land_twice"] != false)
    {
        return Err(format!("{copies} copies of each row; interval 2's resent INSERTs: {resent:?}").into());
    }
    println!(
        "26.9: an answer lost at checkpoint 2: every row once, {} resend(s) deduplicated as the ledger says; {}",
        resent.len(),
        statements_about(&job.table)?
    );
    Ok(())
}

type Check = Box<dyn Fn(&BTreeMap<String, String>) -> Result<(), Failed> + Send + Sync>;

fn on(version: Version, check: fn(&Target) -> Result<(), Failed>) -> Check {
    Box::new(move |env| check(&target(version, env)?))
}

fn main() {
    let args = Arguments::from_args();
    let mut checks: Vec<(String, bool, Check)> = Vec::new();
    for version in [Version::V18, Version::V26] {
        let v = version.name();
        let needs_chdb = version == Version::V26;
        checks.push((format!("{v}::insert-rules::describe-write-read"), needs_chdb, on(version, describe_write_read)));
        checks.push((format!("{v}::insert-rules::deduplication"), needs_chdb, on(version, deduplication_claims)));
        checks.push((format!("{v}::insert-rules::blocks"), needs_chdb, on(version, |t| block_claims(t, false))));
        checks.push((format!("{v}::insert-rules::a-view-refuses"), needs_chdb, on(version, a_view_refuses)));
    }
    checks.push(("26.9::insert-rules::a-profile-changes-no-claim".into(), true, Box::new(a_profile_changes_no_claim)));
    checks.push(("26.9::sink::same-job-file-twice".into(), true, Box::new(same_job_file_twice)));
    checks.push(("26.9::sink::resend-within-a-run".into(), true, Box::new(resend_within_a_run)));
    checks.push(("26.9::reconcile::records-audit-whole-table".into(), true, Box::new(records_audit)));
    checks.push((
        "26.9::reconcile::windows-audit-datetime64-keys".into(),
        true,
        Box::new(windows_audit_datetime64_keys),
    ));
    let env = services::services(&["CLINK_KAFKA_BOOTSTRAP", "CLINK_CLICKHOUSE_HTTP"]);
    let chdb = chdb::python();
    if let Err(why) = &env {
        eprintln!("every trial is ignored as `service`: {why}");
    }
    if let Err(why) = &chdb {
        eprintln!("the 26.9 trials are ignored as `chdb`: {why}");
    }
    let started = Instant::now();
    let trials = checks
        .into_iter()
        .map(|(name, needs_chdb, check)| match (&env, &chdb) {
            (Err(_), _) => Trial::test(name, || Ok(())).with_ignored_flag(true).with_kind("service"),
            (Ok(_), Err(_)) if needs_chdb => Trial::test(name, || Ok(())).with_ignored_flag(true).with_kind("chdb"),
            (Ok(env), _) => {
                let env = env.clone();
                Trial::test(name, move || check(&env))
            }
        })
        .collect();
    let conclusion = libtest_mimic::run(&args, trials);
    eprintln!("clickhouse26: {:?}", started.elapsed());
    if let Some(Ok(chdb)) = CHDB.get() {
        // Whatever the trials ran, every statement 26 refused was one a trial provoked.
        match only_provoked_refusals(true) {
            Ok(n) => eprintln!("clickhouse26: ClickHouse {} ran {n} statements, none refused unprovoked", chdb.version),
            Err(e) => {
                eprintln!("clickhouse26: {}", e.message().unwrap_or("a statement was refused"));
                std::process::exit(101);
            }
        }
    }
    conclusion.exit();
}
