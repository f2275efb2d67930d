//! The connectors against the real services `gates/services start` runs on
//! 127.0.0.1: both Kafka→ClickHouse jobs, fault-free and killed at every
//! fault point then resumed, must leave the table holding exactly the rows
//! the independent reference computes, as multisets: nothing missing,
//! nothing changed, nothing unexpected. Duplicates are allowed only where the
//! evidence explains them: rows the sink's recorded input shows were sent in
//! an interval a restore passed over (the RESTORED record's range), or in an
//! INSERT whose ledger says a resend may have landed twice. Each trial counts
//! them and prints the explanation.
//!
//! Bad input is tried on purpose: a malformed message, a topic that does not
//! exist, a table whose schema differs from the job's, a broker that goes
//! away mid-run (the job fails cleanly, and resumes once the broker is back).
//!
//! Without the services every trial is ignored with the reason `service`,
//! never passed; `.ci/run` starts them and fails on any ignored trial.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use clink_basics::multiset::multiset_diff;
use clink_connectors::clickhouse::{sql, Connection, Endpoint};
use clink_engine::capture::format::read_capture;
use clink_engine::checkpoint::markers::read_restored;
use clink_engine::checkpoint::CheckpointLayout;
use clink_engine::event::Event;
use clink_engine::fault::FaultPoint;
use clink_engine::value::render_line;
use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::Value as Json;

mod services;
use services::{killed, run_bounded, stderr, PrivateKafka};

const SEED: &str = "4";
const EVENTS: &str = "3000";
const ACCOUNTS: &str = "12";
const PARTITIONS: &str = "3";
const EVERY: &str = "500";
/// The sink operator's id in both jobs.
const SINK_OPERATOR: &str = "op-4";

fn clink() -> &'static str {
    env!("CARGO_BIN_EXE_clink")
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn scratch() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

fn services() -> Result<BTreeMap<String, String>, String> {
    services::services(&["CLINK_KAFKA_BOOTSTRAP", "CLINK_CLICKHOUSE_HTTP"])
}

/// The two jobs, each with its table and its reference rows.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Job {
    Records,
    Windows,
}

impl Job {
    const BOTH: [Job; 2] = [Job::Records, Job::Windows];

    fn name(self) -> &'static str {
        match self {
            Job::Records => "records",
            Job::Windows => "windows",
        }
    }

    fn fixture(self) -> PathBuf {
        workspace().join(match self {
            Job::Records => "fixtures/jobs/kafka-clickhouse",
            Job::Windows => "fixtures/jobs/kafka-windows",
        })
    }

    fn id(self) -> &'static str {
        match self {
            Job::Records => "21",
            Job::Windows => "22",
        }
    }

    fn columns(self) -> &'static [&'static str] {
        match self {
            Job::Records => &["id", "account", "amount", "time"],
            Job::Windows => &["account", "window_start", "window_end", "count", "sum"],
        }
    }

    fn expected(self) -> &'static [String] {
        let shared = shared();
        match self {
            Job::Records => &shared.credits,
            Job::Windows => &shared.windows,
        }
    }
}

/// The seeded input as segment files, and the reference rows of both jobs.
struct Shared {
    credits: Vec<String>,
    windows: Vec<String>,
    _dir: tempfile::TempDir,
}

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| {
        let dir = tempfile::tempdir_in(scratch()).expect("scratch directory");
        let input = dir.path().join("input");
        let out = Command::new(clink())
            .args(["gen-input", "--seed", SEED, "--events", EVENTS, "--accounts", ACCOUNTS, "--out"])
            .arg(&input)
            .output()
            .expect("clink gen-input runs");
        assert!(out.status.success(), "gen-input: {}", String::from_utf8_lossy(&out.stderr));
        let credits = clink_reference::records::credits(&input).expect("reference credits");
        let windows = clink_reference::example::compute(&input, clink_reference::example::ReferenceParams::default())
            .expect("reference windows")
            .windows;
        assert!(!credits.is_empty() && !windows.is_empty());
        Shared { credits, windows, _dir: dir }
    })
}

fn unique(prefix: &str) -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{prefix}_{}_{}_{n}", std::process::id(), nanos % 1_000_000)
}

/// One trial's topic, table, job file and directories.
struct Scenario {
    job: Job,
    dir: tempfile::TempDir,
    bootstrap: String,
    clickhouse: String,
    topic: String,
    table: String,
    /// Every (restored_from, next) a run of this scenario recorded.
    restores: Vec<(u64, u64)>,
}

impl Scenario {
    fn new(job: Job, env: &BTreeMap<String, String>) -> Result<Scenario, Failed> {
        Scenario::on(job, env["CLINK_KAFKA_BOOTSTRAP"].clone(), env, &[])
    }

    /// Small fetches, so the partitions' records arrive interleaved and the
    /// windows fire during the run, not all at its end (3,000 events are
    /// 240 KB: one default fetch would read a partition whole).
    fn small_fetches() -> Vec<(&'static str, Json)> {
        vec![("fetch_kbytes", Json::from(16))]
    }

    /// A scenario reading from `bootstrap`, its job's source params changed by `source_params`.
    fn on(
        job: Job,
        bootstrap: String,
        env: &BTreeMap<String, String>,
        source_params: &[(&str, Json)],
    ) -> Result<Scenario, Failed> {
        let mut params = Scenario::small_fetches();
        params.extend(source_params.iter().cloned());
        let s = Scenario {
            job,
            dir: tempfile::tempdir_in(scratch())?,
            bootstrap,
            clickhouse: env["CLINK_CLICKHOUSE_HTTP"].clone(),
            topic: unique(&format!("{}-topic", job.name())),
            table: unique(job.name()),
            restores: Vec::new(),
        };
        s.create_table(&std::fs::read_to_string(job.fixture().join("table.sql"))?)?;
        s.write_job(&params)?;
        Ok(s)
    }

    fn connection(&self) -> Connection {
        Connection::open(&Endpoint::parse(&self.clickhouse).expect("the services' address")).expect("a client")
    }

    fn create_table(&self, template: &str) -> Result<(), Failed> {
        let ddl = template.trim().replace("{table}", &sql::qualified("default", &self.table));
        self.connection().execute("creating the table", &ddl)?;
        Ok(())
    }

    fn job_file(&self) -> PathBuf {
        self.dir.path().join("job.json")
    }

    fn write_job(&self, source_params: &[(&str, Json)]) -> Result<(), Failed> {
        let mut job: Json = serde_json::from_slice(&std::fs::read(self.job.fixture().join("job.json"))?)?;
        let operators = job["operators"].as_array_mut().ok_or("the fixture has no operators")?;
        for op in operators {
            match op["type"].as_str() {
                Some("kafka_source") => {
                    op["params"]["topic"] = self.topic.clone().into();
                    for (k, v) in source_params {
                        op["params"][*k] = v.clone();
                    }
                }
                Some("clickhouse_sink") => op["params"]["table"] = self.table.clone().into(),
                _ => {}
            }
        }
        std::fs::write(self.job_file(), serde_json::to_vec_pretty(&job)?)?;
        Ok(())
    }

    fn produce(&self) -> Result<(), Failed> {
        let out = Command::new(clink())
            .args(["produce", "--seed", SEED, "--events", EVENTS, "--accounts", ACCOUNTS, "--partitions", PARTITIONS])
            .args(["--topic", &self.topic, "--bootstrap", &self.bootstrap])
            .output()?;
        if !out.status.success() {
            return Err(format!("clink produce: {}", String::from_utf8_lossy(&out.stderr)).into());
        }
        Ok(())
    }

    fn checkpoint_dir(&self) -> PathBuf {
        self.dir.path().join("ck")
    }

    fn capture_dir(&self) -> PathBuf {
        self.dir.path().join("capture")
    }

    fn command(&self, extra: &[&str]) -> Command {
        let mut cmd = Command::new(clink());
        cmd.args(["run", "--quiet", "--job"])
            .arg(self.job_file())
            .arg("--output-dir")
            .arg(self.dir.path().join("out"))
            .arg("--checkpoint-dir")
            .arg(self.checkpoint_dir())
            .arg("--capture-dir")
            .arg(self.capture_dir())
            // Every sink epoch stays captured: duplicates are explained
            // from the captures of the intervals a restore replayed, however
            // far back (the default keeps only the retained checkpoints').
            .args(["--capture-retain-epochs", "1000"])
            .args(["--checkpoint-every-records", EVERY, "--kafka-bootstrap", &self.bootstrap])
            .args(["--clickhouse", &self.clickhouse])
            .args(extra)
            .env_remove("CLINK_FAULT")
            .env_remove("CLINK_TEST_DEFECT")
            .env_remove("CLINK_KAFKA_BOOTSTRAP")
            .env_remove("CLINK_CLICKHOUSE_HTTP");
        cmd
    }

    /// One run, bounded; the restore it recorded is kept for the explanation.
    fn run(&mut self, fault: Option<&str>, extra: &[&str]) -> Output {
        let mut cmd = self.command(extra);
        if let Some(fault) = fault {
            cmd.env("CLINK_FAULT", fault);
        }
        let out = run_bounded(&mut cmd, self.dir.path());
        self.note_restore();
        out
    }

    fn note_restore(&mut self) {
        let layout = CheckpointLayout::new(self.checkpoint_dir(), self.job.id().parse().unwrap_or(0));
        if let Ok(Some(r)) = read_restored(&layout) {
            if !self.restores.contains(&(r.restored_from, r.next)) {
                self.restores.push((r.restored_from, r.next));
            }
        }
    }

    /// The table's rows as the reference writes its lines, read as values
    /// (a server that prints `12.5` for the `12.50` written holds the same
    /// decimal: `cells::engine_text`).
    fn table_rows(&self) -> Result<Vec<String>, Failed> {
        let connection = self.connection();
        let described = clink_connectors::clickhouse::destination::describe(&connection, "default", &self.table)?;
        let mut types = Vec::new();
        for c in self.job.columns() {
            let column = described.column(c).ok_or_else(|| format!("the table has no column {c}"))?;
            types.push(clink_connectors::clickhouse::types::ChType::parse(&column.type_name));
        }
        let columns: Vec<String> = self.job.columns().iter().map(|c| sql::identifier(c)).collect();
        let statement = format!("SELECT {} FROM {}", columns.join(", "), sql::qualified("default", &self.table));
        let rows = connection.select("reading the table back", &statement, &[("readonly", "2".into())])?;
        rows.into_iter()
            .map(|r| {
                let cells: Result<Vec<String>, _> =
                    r.iter().zip(&types).map(|(c, ty)| clink_reconcile::cells::engine_text(c.as_deref(), ty)).collect();
                Ok(cells?.join(","))
            })
            .collect()
    }

    /// The sink's recorded input, per epoch (every subtask's), as lines.
    fn captured(&self) -> Result<BTreeMap<u64, Vec<String>>, Failed> {
        let mut epochs: BTreeMap<u64, Vec<String>> = BTreeMap::new();
        let root = self.capture_dir().join(SINK_OPERATOR);
        for subtask in std::fs::read_dir(&root).map_err(|e| format!("{}: {e}", root.display()))? {
            let subtask = subtask?.path();
            for entry in std::fs::read_dir(&subtask)? {
                let path = entry?.path();
                let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
                let Some(epoch) = clink_engine::capture::parse_epoch_file_name(&name) else {
                    continue;
                };
                let capture = read_capture(&std::fs::read(&path)?).map_err(|e| format!("{}: {e}", path.display()))?;
                if !capture.is_whole() {
                    return Err(
                        format!("{} is not whole: duplicates could not be explained from it", path.display()).into()
                    );
                }
                let rows = capture.events.iter().filter_map(|e| match e {
                    Event::Record(row) => Some(render_line(row)),
                    _ => None,
                });
                epochs.entry(epoch).or_default().extend(rows);
            }
        }
        Ok(epochs)
    }

    /// The intervals whose INSERT ledger says the rows may be in the table twice.
    fn in_doubt_epochs(&self) -> Result<Vec<u64>, Failed> {
        let mut epochs = Vec::new();
        let root = self.capture_dir().join(SINK_OPERATOR);
        for subtask in std::fs::read_dir(&root)? {
            for entry in std::fs::read_dir(subtask?.path())? {
                let path = entry?.path();
                if !path.to_string_lossy().ends_with(".sink.json") {
                    continue;
                }
                let evidence: Json = serde_json::from_slice(&std::fs::read(&path)?)?;
                let inserts = evidence["sink"]["interval"]["inserts"].as_array().cloned().unwrap_or_default();
                if inserts.iter().any(|i| i["may_land_twice"] == true) {
                    epochs.push(evidence["epoch"].as_u64().ok_or("an evidence file without its epoch")?);
                }
            }
        }
        Ok(epochs)
    }

    /// The table against the reference: nothing missing, changed or
    /// unexpected; every duplicate explained by the evidence. Returns the
    /// duplicates counted and what explained them.
    fn check_table(&self) -> Result<String, Failed> {
        let expected = self.job.expected();
        let actual = self.table_rows()?;
        let diff = multiset_diff(expected.iter().cloned(), actual.iter().cloned());
        if diff.missing_copies() > 0 {
            let shown: Vec<_> = diff.missing.iter().take(3).collect();
            return Err(format!("{} rows missing from the table, e.g. {shown:?}", diff.missing_copies()).into());
        }
        let expected_set: std::collections::BTreeSet<&String> = expected.iter().collect();
        let foreign: Vec<_> = diff.unexpected.iter().filter(|(row, _)| !expected_set.contains(row)).take(3).collect();
        if !foreign.is_empty() {
            return Err(format!("rows the reference does not hold (changed or unexpected): {foreign:?}").into());
        }
        let duplicates = diff.unexpected_copies();
        if duplicates == 0 {
            return Ok("no duplicates".into());
        }
        // Rows sent again: in an interval a restore passed over, or in doubt.
        let captured = self.captured()?;
        let doubt = self.in_doubt_epochs()?;
        let mut resendable: BTreeMap<&String, usize> = BTreeMap::new();
        let mut passed_over = Vec::new();
        for (&epoch, rows) in &captured {
            let restored = self.restores.iter().any(|&(from, next)| from < epoch && epoch < next);
            let in_doubt = doubt.contains(&epoch);
            if restored || in_doubt {
                passed_over.push(epoch);
                for row in rows {
                    *resendable.entry(row).or_default() += 1;
                }
            }
        }
        let unexplained: Vec<_> = diff
            .unexpected
            .iter()
            .filter(|(row, extra)| resendable.get(row).copied().unwrap_or(0) < *extra)
            .take(3)
            .collect();
        if !unexplained.is_empty() {
            return Err(format!(
                "{duplicates} duplicate rows, some not explained by the evidence (restores {:?}, in-doubt intervals {doubt:?}): {unexplained:?}",
                self.restores
            )
            .into());
        }
        Ok(format!(
            "{duplicates} duplicate rows, each sent in an interval a restore passed over or in doubt (restores {:?}, in-doubt intervals {doubt:?}, intervals {passed_over:?})",
            self.restores
        ))
    }
}

fn fault_free(job: Job, env: &BTreeMap<String, String>) -> Result<(), Failed> {
    let mut s = Scenario::new(job, env)?;
    s.produce()?;
    let out = s.run(None, &[]);
    if !out.status.success() {
        return Err(format!("the run failed: {:?}\n{}", out.status, stderr(&out)).into());
    }
    let said = s.check_table()?;
    if said != "no duplicates" {
        return Err(format!("a run with no fault left duplicates: {said}").into());
    }
    println!("{} fault-free: {} rows, {said}", job.name(), job.expected().len());
    Ok(())
}

fn fault(job: Job, point: FaultPoint, env: &BTreeMap<String, String>) -> Result<(), Failed> {
    let mut s = Scenario::new(job, env)?;
    s.produce()?;
    let fault = format!("{}@2", point.name());
    let last = match point {
        FaultPoint::CheckpointSnapshotFails | FaultPoint::SourceSnapshotFails | FaultPoint::ClickHouseResponseLost => {
            // Not a kill: the one run is the whole story.
            let out = s.run(Some(&fault), &[]);
            let armed_said = match point {
                FaultPoint::CheckpointSnapshotFails | FaultPoint::SourceSnapshotFails => "injected",
                _ => "",
            };
            if !stderr(&out).contains(armed_said) {
                return Err(format!("{fault} did not fire as armed:\n{}", stderr(&out)).into());
            }
            out
        }
        FaultPoint::CoordinatorBeforeRestoredRecord => {
            let first = s.run(Some("coordinator.after_completed_marker@2"), &[]);
            let second = s.run(Some(&fault), &[]);
            if !killed(&first) || !killed(&second) {
                return Err(
                    format!("the runs were not killed where armed:\n{}\n{}", stderr(&first), stderr(&second)).into()
                );
            }
            s.run(None, &[])
        }
        _ => {
            let first = s.run(Some(&fault), &[]);
            if !killed(&first) {
                return Err(format!(
                    "the run armed with {fault} was not killed there: {:?}\n{}",
                    first.status,
                    stderr(&first)
                )
                .into());
            }
            s.run(None, &[])
        }
    };
    if !last.status.success() {
        return Err(format!("the last run failed: {:?}\n{}", last.status, stderr(&last)).into());
    }
    let said = s.check_table()?;
    if point == FaultPoint::ClickHouseResponseLost && !said.contains("in-doubt intervals [2") {
        return Err(format!("a lost answer must be recorded as an in-doubt resend of interval 2: {said}").into());
    }
    println!("{} {fault}: {said}", job.name());
    Ok(())
}

/// A message that is not one of the declared rows fails the job, naming its
/// partition and offset; it is never skipped.
fn malformed_message(env: &BTreeMap<String, String>) -> Result<(), Failed> {
    let mut s = Scenario::new(Job::Records, env)?;
    s.produce()?;
    let writer = clink_connectors::kafka::LogWriter::connect(&s.bootstrap)?;
    writer.send(&s.topic, 1, b"bad", br#"{"id": 99999, "time": "soon", "account": "x", "amount": "1"}"#)?;
    writer.flush(Duration::from_secs(30))?;
    let out = s.run(None, &["--restart-budget", "0"]);
    let said = stderr(&out);
    if out.status.code() != Some(1) || !said.contains("partition 1 offset") || !said.contains("\"time\"") {
        return Err(
            format!("expected exit 1 naming partition 1's offset and the field: {:?}\n{said}", out.status).into()
        );
    }
    Ok(())
}

/// A topic the broker does not hold refuses the run before anything is written.
fn missing_topic(env: &BTreeMap<String, String>) -> Result<(), Failed> {
    let mut s = Scenario::new(Job::Records, env)?;
    let out = s.run(None, &[]);
    let said = stderr(&out);
    if out.status.code() != Some(2) || !said.contains("does not exist") || !said.contains(&s.topic) {
        return Err(format!("expected exit 2 naming the missing topic: {:?}\n{said}", out.status).into());
    }
    if s.checkpoint_dir().exists() {
        return Err("a refused run wrote its checkpoint directory".into());
    }
    Ok(())
}

/// `clink produce` into a topic an earlier run made with another partition
/// count is refused, saying what to do; with its count it appends, and says so.
fn topic_with_other_partitions(env: &BTreeMap<String, String>) -> Result<(), Failed> {
    let topic = unique("produce-partitions");
    let produce = |partitions: &str| {
        Command::new(clink())
            .args(["produce", "--topic", &topic, "--partitions", partitions, "--events", "10", "--bootstrap"])
            .arg(&env["CLINK_KAFKA_BOOTSTRAP"])
            .output()
    };
    let first = produce("3")?;
    if !first.status.success() || String::from_utf8_lossy(&first.stdout).contains("existed") {
        return Err(format!("the first publish: {:?}\n{}", first.status, stderr(&first)).into());
    }
    let other = produce("4")?;
    let said = stderr(&other);
    if other.status.code() != Some(2)
        || !said.contains("exists with 3 partitions, not 4")
        || !said.contains("a topic of its own (--topic)")
        || !said.contains("--partitions 3")
    {
        return Err(format!("expected exit 2 saying what to do: {:?}\n{said}", other.status).into());
    }
    let again = produce("3")?;
    let printed = String::from_utf8_lossy(&again.stdout);
    if !again.status.success() || !printed.contains("the topic existed: they follow what it held") {
        return Err(format!("appending says so: {:?}\n{printed}{}", again.status, stderr(&again)).into());
    }
    Ok(())
}

/// A table whose columns do not hold the job's rows exactly refuses the run
/// before anything is written, naming the column.
fn table_schema_differs(env: &BTreeMap<String, String>) -> Result<(), Failed> {
    let mut s = Scenario::new(Job::Records, env)?;
    s.produce()?;
    s.connection().execute("dropping the table", &format!("DROP TABLE {}", sql::qualified("default", &s.table)))?;
    s.create_table(
        "CREATE TABLE {table} (id Int64, account String, amount Float64, time Int64) ENGINE = MergeTree ORDER BY id",
    )?;
    let out = s.run(None, &[]);
    let said = stderr(&out);
    if out.status.code() != Some(2) || !said.contains(".amount: column type Float64") {
        return Err(format!("expected exit 2 naming the amount column: {:?}\n{said}", out.status).into());
    }
    if s.checkpoint_dir().exists() {
        return Err("a refused run wrote its checkpoint directory".into());
    }
    Ok(())
}

/// The broker dies mid-run: the job fails cleanly (exit 1, the broker named),
/// and once the broker is back a resume finishes with the table exact.
fn broker_goes_away(env: &BTreeMap<String, String>) -> Result<(), Failed> {
    let dir = tempfile::tempdir_in(scratch())?;
    let broker = PrivateKafka::start(&dir.path().join("broker"))?;
    // Read ahead little, so the broker's death is met before the input ends.
    let timeout = [("broker_timeout_ms", Json::from(2000)), ("prefetch_kbytes", Json::from(16))];
    let mut s = Scenario::on(Job::Records, broker.bootstrap.clone(), env, &timeout)?;
    s.produce()?;
    let mut child =
        s.command(&["--restart-budget", "0", "--source-rate", "1000"]).stderr(std::process::Stdio::piped()).spawn()?;
    std::thread::sleep(Duration::from_millis(1200));
    broker.kill()?;
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            return Err("the job did not notice the broker was gone".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut said = String::new();
    if let Some(mut err) = child.stderr.take() {
        use std::io::Read;
        err.read_to_string(&mut said)?;
    }
    if status.code() != Some(1) || !said.contains(&broker.bootstrap) {
        return Err(format!("expected exit 1 naming the broker: {status:?}\n{said}").into());
    }
    broker.restart()?;
    let out = s.run(None, &[]);
    if !out.status.success() {
        return Err(format!("the resume after the broker came back failed: {:?}\n{}", out.status, stderr(&out)).into());
    }
    let explained = s.check_table()?;
    println!("records broker-goes-away: {explained}");
    Ok(())
}

/// A Kafka→ClickHouse run's bundle: protocol.conformance is unsupported, by
/// name (the specification models the recoverable and commit-confirmed sink
/// families, not the at-least-once one), never passed or failed.
fn conformance_unsupported(env: &BTreeMap<String, String>) -> Result<(), Failed> {
    let mut s = Scenario::new(Job::Records, env)?;
    s.produce()?;
    let traces = s.dir.path().join("traces");
    let ha = s.dir.path().join("ha");
    let out = run_bounded(
        s.command(&["--ha-dir", ha.to_str().ok_or("path")?]).env("CLINK_PROTOCOL_TRACE_DIR", &traces),
        s.dir.path(),
    );
    s.note_restore();
    if !out.status.success() {
        return Err(format!("the run failed: {}", stderr(&out)).into());
    }
    let bundle = s.dir.path().join("bundle");
    let collected = Command::new(clink())
        .args([
            "incident-collect",
            "--job",
            s.job.id(),
            "--include-state",
            "--include-captures",
            "--commit-confirmation",
            "no",
        ])
        .arg("--checkpoint-dir")
        .arg(s.checkpoint_dir())
        .arg("--capture-dir")
        .arg(s.capture_dir())
        .arg("--trace-dir")
        .arg(&traces)
        .arg("--out")
        .arg(&bundle)
        .output()?;
    if !collected.status.success() {
        return Err(format!("collect: {}", String::from_utf8_lossy(&collected.stderr)).into());
    }
    let verified =
        Command::new(clink()).args(["incident-verify", "--profile", "full", "--json"]).arg(&bundle).output()?;
    let report: Json = serde_json::from_slice(&verified.stdout)
        .map_err(|e| format!("{e}: {}", String::from_utf8_lossy(&verified.stderr)))?;
    let check = report["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == "protocol.conformance"))
        .ok_or("no protocol.conformance in the report")?;
    let reason = check["reason"].as_str().unwrap_or_default();
    if check["status"] != "unsupported" || !reason.contains("at_least_once") {
        return Err(format!("protocol.conformance: {check}").into());
    }
    if verified.status.code() == Some(0) {
        return Err("a report with an unsupported required check exited 0".into());
    }
    Ok(())
}

type Check = Box<dyn Fn(&BTreeMap<String, String>) -> Result<(), Failed> + Send + Sync>;

fn main() {
    let args = Arguments::from_args();
    let mut checks: Vec<(String, Check)> = Vec::new();
    for job in Job::BOTH {
        checks.push((format!("{}::fault-free", job.name()), Box::new(move |env| fault_free(job, env))));
        for point in FaultPoint::ALL.into_iter().chain(FaultPoint::CONNECTORS) {
            checks.push((
                format!("{}::fault::{}@2", job.name(), point.name()),
                Box::new(move |env| fault(job, point, env)),
            ));
        }
    }
    checks.push(("bad-input::malformed-message".into(), Box::new(malformed_message)));
    checks.push(("bad-input::missing-topic".into(), Box::new(missing_topic)));
    checks.push(("bad-input::table-schema-differs".into(), Box::new(table_schema_differs)));
    checks.push(("bad-input::topic-with-other-partitions".into(), Box::new(topic_with_other_partitions)));
    checks.push(("bad-input::broker-goes-away".into(), Box::new(broker_goes_away)));
    checks.push(("evidence::conformance-unsupported".into(), Box::new(conformance_unsupported)));
    let env = services();
    if let Err(why) = &env {
        eprintln!("every trial is ignored as `service`: {why}");
    }
    let trials = checks
        .into_iter()
        .map(|(name, check)| match &env {
            Ok(env) => {
                let env = env.clone();
                Trial::test(name, move || check(&env))
            }
            // A constant kind keeps trial names stable across machines.
            Err(_) => Trial::test(name, || Ok(())).with_ignored_flag(true).with_kind("service"),
        })
        .collect();
    libtest_mimic::run(&args, trials).exit();
}
