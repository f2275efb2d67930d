//! The Kafka sink job (Kafka in, Kafka out: `fixtures/jobs/kafka-kafka`)
//! against the Apache Kafka broker `gates/services start` runs on 127.0.0.1
//! (CLINK_KAFKA_BOOTSTRAP; ARCHITECTURE.md, "A broker that speaks
//! transactions", has what it was measured to do).
//!
//! For every fault point of the protocol and of the commit-confirmed
//! family, the job is killed there (or its snapshot fails), resumed, and run
//! to its END. Two trials per point share those runs: `fault` (each run
//! ended as armed, the resume finished, and every row the independent
//! reference computes from the same seeded input was sent at least once:
//! this test's own rdkafka consumer reads it `read_uncommitted`), and
//! `exactly_once` (the output topic read `read_committed` holds exactly the
//! reference's rows). Every run leaves its protocol trace under
//! `fault-matrix-traces/kafka-<point>/`, which trace validation judges.
//!
//! What the broker cannot show is never passed: before any trial, one
//! transaction is aborted on a fresh topic and read back `read_committed`,
//! and the broker's ApiVersions must offer DescribeTransactions. A broker
//! that shows the aborted records (which could hide a loss as well as fake
//! a duplicate) or cannot describe an orphan fails every `exactly_once`
//! trial with that reason; none is ignored.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use clink_basics::multiset::{describe, multiset_diff};
use clink_connectors::kafka::{Isolation, LogReader};
use clink_engine::fault::FaultPoint;
use libtest_mimic::{Arguments, Failed, Trial};
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use serde_json::Value as Json;

mod services;
use services::{killed, run_bounded, services, stderr};
#[path = "kafka_sink/broker.rs"]
mod broker;
#[path = "kafka_sink/chaos.rs"]
mod chaos;
#[path = "support/in_flight.rs"]
mod in_flight;
#[path = "kafka_sink/incarnations.rs"]
mod incarnations;
#[path = "kafka_sink/steer.rs"]
mod steer;

const SEED: &str = "23";
const EVENTS: &str = "3000";
const ACCOUNTS: &str = "20";
const EVERY: &str = "300";
/// Where the fault matrix arms its points. The windows of the seeded input
/// first fire in the sixth interval (the source's watermark waits for every
/// partition), so a kill at checkpoint 7 catches a transaction that holds
/// rows: a duplicate or a loss there shows in the output.
const AT: u64 = 7;
/// The input topic's partitions (`clink produce` makes it), and the output's
/// (made by the scenario: the broker makes no topic on first use).
const PARTITIONS: &str = "4";

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
    format!("{prefix}-{}-{}-{n}", std::process::id(), nanos % 1_000_000)
}

/// The reference windows of the seeded input, computed once.
fn reference() -> &'static [String] {
    static WINDOWS: OnceLock<(Vec<String>, tempfile::TempDir)> = OnceLock::new();
    &WINDOWS
        .get_or_init(|| {
            let dir = tempfile::tempdir_in(scratch()).expect("scratch directory");
            let input = dir.path().join("input");
            let out = Command::new(clink())
                .args(["gen-input", "--seed", SEED, "--events", EVENTS, "--accounts", ACCOUNTS, "--out"])
                .arg(&input)
                .output()
                .expect("clink gen-input runs");
            assert!(out.status.success(), "gen-input: {}", String::from_utf8_lossy(&out.stderr));
            let params = clink_reference::example::ReferenceParams::default();
            let windows = clink_reference::example::compute(&input, params).expect("reference windows").windows;
            assert!(!windows.is_empty());
            (windows, dir)
        })
        .0
}

/// Every payload of `topic` a reader at `isolation` sees, all partitions,
/// up to each partition's end.
fn read_topic(bootstrap: &str, topic: &str, isolation: &str) -> Result<Vec<String>, Failed> {
    let isolation = Isolation::parse(isolation).ok_or_else(|| format!("no isolation level {isolation:?}"))?;
    let reader = LogReader::connect(bootstrap, topic, isolation, "clink-kafka-sink-test")?;
    Ok(reader.read_to_end(Duration::from_secs(30))?.iter().map(|p| String::from_utf8_lossy(p).into_owned()).collect())
}

/// Whether the broker hides an aborted transaction's records from a
/// `read_committed` reader: measured, on a fresh topic, with one aborted
/// transaction between two committed ones.
fn hides_aborted(bootstrap: &str) -> Result<bool, Failed> {
    let topic = unique("abort-probe");
    clink_connectors::kafka::LogWriter::connect(bootstrap)?.ensure_topic(&topic, 1)?;
    let producer: ThreadedProducer<rdkafka::producer::DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("transactional.id", unique("abort-probe-id"))
        .create()?;
    let timeout = Duration::from_secs(10);
    producer.init_transactions(timeout)?;
    for (payload, commit) in [("committed-1", true), ("aborted", false), ("committed-2", true)] {
        producer.begin_transaction()?;
        producer.send(BaseRecord::to(&topic).partition(0).key("k").payload(payload)).map_err(|(e, _)| e)?;
        producer.flush(timeout)?;
        if commit {
            producer.commit_transaction(timeout)?
        } else {
            producer.abort_transaction(timeout)?
        }
    }
    let seen = read_topic(bootstrap, &topic, "read_committed")?;
    if !seen.iter().any(|s| s == "committed-2") {
        return Err(format!("the abort probe read {seen:?}: not even its committed records").into());
    }
    Ok(!seen.iter().any(|s| s == "aborted"))
}

/// One scenario: its topics, job file and directories.
struct Scenario {
    dir: tempfile::TempDir,
    bootstrap: String,
    /// Records between periodic checkpoints.
    every: String,
    input: String,
    output: String,
    traces: PathBuf,
}

impl Scenario {
    /// A scenario of the matrix: its trace is kept for trace validation.
    fn new(name: &str, bootstrap: &str) -> Result<Scenario, Failed> {
        let traces = scratch().join("fault-matrix-traces").join(format!("kafka-{name}"));
        let _ = std::fs::remove_dir_all(&traces);
        Scenario::with_traces(traces, bootstrap)
    }

    /// A scenario whose trace stays in its own directory: a run restored
    /// from another directory's dataset, or one with a defect switched on.
    fn private(bootstrap: &str) -> Result<Scenario, Failed> {
        let dir = tempfile::tempdir_in(scratch())?;
        let traces = dir.path().join("traces");
        Scenario::in_dir(dir, traces, bootstrap)
    }

    /// A private scenario whose job has one window and one sink subtask, so
    /// that a fault point names one sink thread.
    fn single_sink(bootstrap: &str) -> Result<Scenario, Failed> {
        let s = Scenario::private(bootstrap)?;
        let mut job: Json = serde_json::from_slice(&std::fs::read(s.job_file())?)?;
        for op in job["operators"].as_array_mut().ok_or("the job has no operators")? {
            if matches!(op["type"].as_str(), Some("tumbling_window" | "kafka_sink")) {
                op["parallelism"] = 1.into();
            }
        }
        std::fs::write(s.job_file(), serde_json::to_vec_pretty(&job)?)?;
        Ok(s)
    }

    fn with_traces(traces: PathBuf, bootstrap: &str) -> Result<Scenario, Failed> {
        Scenario::in_dir(tempfile::tempdir_in(scratch())?, traces, bootstrap)
    }

    fn in_dir(dir: tempfile::TempDir, traces: PathBuf, bootstrap: &str) -> Result<Scenario, Failed> {
        let s = Scenario {
            dir,
            bootstrap: bootstrap.to_string(),
            every: EVERY.to_string(),
            input: unique("events"),
            output: unique("windows-out"),
            traces,
        };
        let mut job: Json =
            serde_json::from_slice(&std::fs::read(workspace().join("fixtures/jobs/kafka-kafka/job.json"))?)?;
        for op in job["operators"].as_array_mut().ok_or("the fixture has no operators")? {
            match op["type"].as_str() {
                Some("kafka_source") => op["params"]["topic"] = s.input.clone().into(),
                Some("kafka_sink") => {
                    op["params"]["topic"] = s.output.clone().into();
                    // Scenarios run side by side on one broker: ids of their own,
                    // or each would fence the others' transactions.
                    op["params"]["transactional_id_prefix"] = s.output.clone().into();
                }
                _ => {}
            }
        }
        std::fs::write(s.job_file(), serde_json::to_vec_pretty(&job)?)?;
        clink_connectors::kafka::LogWriter::connect(&s.bootstrap)?.ensure_topic(&s.output, PARTITIONS.parse()?)?;
        let out = Command::new(clink())
            .args(["produce", "--seed", SEED, "--events", EVENTS, "--accounts", ACCOUNTS, "--partitions", PARTITIONS])
            .args(["--topic", &s.input, "--bootstrap", &s.bootstrap])
            .output()?;
        if !out.status.success() {
            return Err(format!("clink produce: {}", String::from_utf8_lossy(&out.stderr)).into());
        }
        Ok(s)
    }

    /// The scenario with checkpoints every `records` records.
    fn with_every(mut self, records: &str) -> Scenario {
        self.every = records.to_string();
        self
    }

    fn job_file(&self) -> PathBuf {
        self.dir.path().join("job.json")
    }

    /// Changes the Kafka sink's params in the scenario's job file.
    fn edit_sink_params(&self, edit: impl Fn(&mut Json)) -> Result<(), Failed> {
        let mut job: Json = serde_json::from_slice(&std::fs::read(self.job_file())?)?;
        for op in job["operators"].as_array_mut().ok_or("the job has no operators")? {
            if op["type"] == "kafka_sink" {
                edit(&mut op["params"]);
            }
        }
        std::fs::write(self.job_file(), serde_json::to_vec_pretty(&job)?)?;
        Ok(())
    }

    /// One run, bounded, with `fault` armed.
    fn run(&self, fault: Option<&str>) -> Output {
        self.run_in("ck", fault, &[])
    }

    /// One run over checkpoint directory `ck` (under the scenario's).
    fn run_in(&self, ck: &str, fault: Option<&str>, extra: &[&str]) -> Output {
        run_bounded(&mut self.command(ck, fault, extra), self.dir.path())
    }

    fn command(&self, ck: &str, fault: Option<&str>, extra: &[&str]) -> Command {
        let mut cmd = Command::new(clink());
        cmd.args(["run", "--quiet", "--job"])
            .arg(self.job_file())
            .arg("--output-dir")
            .arg(self.dir.path().join("out"))
            .arg("--checkpoint-dir")
            .arg(self.dir.path().join(ck))
            .args(extra)
            .args(["--checkpoint-every-records", &self.every, "--kafka-bootstrap", &self.bootstrap])
            // A stall fails the run, naming each subtask's wait, long before
            // the suite's bound; longer than a broker's restart (about 13 s).
            .args(["--stall-after-s", "60"])
            .env("CLINK_PROTOCOL_TRACE_DIR", &self.traces)
            .env_remove("CLINK_FAULT")
            .env_remove("CLINK_TEST_DEFECT")
            .env_remove("CLINK_KAFKA_BOOTSTRAP");
        if let Some(fault) = fault {
            cmd.env("CLINK_FAULT", fault);
        }
        cmd
    }
}

/// How a scenario is driven: the faults armed on each run but the last,
/// which runs to END with nothing armed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Drive {
    FaultFree,
    /// One run killed at the point, then the resume.
    Kill(FaultPoint),
    /// A snapshot failure: the one run restarts in process.
    Fails(FaultPoint),
    /// A first kill that leaves a restart something to do, then the point
    /// (which only a restart reaches), then the resume.
    After(&'static str, FaultPoint),
}

impl Drive {
    fn of(point: FaultPoint) -> Drive {
        match point {
            FaultPoint::CheckpointSnapshotFails | FaultPoint::SourceSnapshotFails => Drive::Fails(point),
            FaultPoint::CoordinatorBeforeRestoredRecord => Drive::After("sink.before_commit@7", point),
            // The walk starts above the confirmed point: 2, once 3's commit was cut short.
            FaultPoint::CoordinatorBeforeInDoubtWalk => Drive::After("sink.before_commit@7", point),
            // An orphan only exists once a walk stopped early and marked it.
            FaultPoint::SinkOrphanDescribed => Drive::After("sink.before_commit@7", point),
            _ => Drive::Kill(point),
        }
    }

    fn name(self) -> String {
        match self {
            Drive::FaultFree => "fault_free".into(),
            Drive::Kill(p) | Drive::Fails(p) | Drive::After(_, p) => p.name().to_string(),
        }
    }

    /// Where the point is armed: checkpoint AT for the protocol's points (the
    /// run has confirmed the ones below by then); the walk's start and the
    /// orphan for the ones a restart reaches.
    fn armed(self) -> Option<String> {
        match self {
            Drive::FaultFree => None,
            Drive::After(_, FaultPoint::CoordinatorBeforeInDoubtWalk) => {
                Some(format!("{}@{}", FaultPoint::CoordinatorBeforeInDoubtWalk.name(), AT - 1))
            }
            Drive::After(_, FaultPoint::CoordinatorBeforeRestoredRecord) => {
                Some(format!("{}@{}", FaultPoint::CoordinatorBeforeRestoredRecord.name(), AT - 1))
            }
            Drive::Kill(p) | Drive::Fails(p) | Drive::After(_, p) => Some(format!("{}@{AT}", p.name())),
        }
    }
}

/// The broker under test and what it was measured to do.
#[derive(Clone)]
struct Broker {
    bootstrap: String,
    /// read_committed readers do not see an aborted transaction's records.
    hides_aborted: bool,
    /// Its ApiVersions offers DescribeTransactions.
    describes: bool,
}

impl Broker {
    fn measure(bootstrap: &str) -> Result<Broker, String> {
        let hides_aborted = hides_aborted(bootstrap).map_err(|e| format!("the abort probe failed: {e:?}"))?;
        let apis = clink_connectors::kafka_txn::orphan::broker_apis(bootstrap, Duration::from_secs(10))
            .map_err(|e| format!("ApiVersions: {e}"))?;
        let describes =
            apis.version_within(clink_connectors::kafka_txn::wire::api::DESCRIBE_TRANSACTIONS, 0, 0).is_some();
        Ok(Broker { bootstrap: bootstrap.to_string(), hides_aborted, describes })
    }

    /// Exactly once is judged by what a read_committed reader sees, and the
    /// in-doubt walk needs the broker's word on an orphan: a broker without
    /// either cannot judge it, and the trial fails saying so.
    fn can_judge_exactly_once(&self) -> Result<(), Failed> {
        if !self.hides_aborted {
            return Err(format!(
                "the broker at {} showed an aborted transaction's records to read_committed: exactly once cannot be judged on it",
                self.bootstrap
            )
            .into());
        }
        if !self.describes {
            return Err(format!(
                "the broker at {} does not offer DescribeTransactions: the in-doubt walk cannot ask it about an orphan",
                self.bootstrap
            )
            .into());
        }
        Ok(())
    }
}

/// What one scenario's runs left in the output topic, at both isolation levels.
#[derive(Clone)]
struct Runs {
    name: String,
    sent: Vec<String>,
    committed: Vec<String>,
}

/// The scenario's runs, or why they did not end as armed.
type Outcome = Result<Runs, String>;

fn drive(drive: Drive, broker: &Broker) -> Outcome {
    let s = Scenario::new(&drive.name(), &broker.bootstrap).map_err(|e| format!("{e:?}"))?;
    let armed = drive.armed();
    let check_killed = |out: &Output, what: &str| {
        if killed(out) {
            Ok(())
        } else {
            Err(format!("the run armed with {what} was not killed there: {:?}\n{}", out.status, stderr(out)))
        }
    };
    let last = match drive {
        Drive::FaultFree => s.run(None),
        Drive::Fails(_) => {
            let out = s.run(armed.as_deref());
            if !stderr(&out).contains("injected") {
                return Err(format!("{armed:?} did not fire as armed:\n{}", stderr(&out)));
            }
            out
        }
        Drive::Kill(_) => {
            let armed = armed.unwrap_or_default();
            check_killed(&s.run(Some(&armed)), &armed)?;
            s.run(None)
        }
        Drive::After(first, _) => {
            check_killed(&s.run(Some(first)), first)?;
            let armed = armed.unwrap_or_default();
            check_killed(&s.run(Some(&armed)), &armed)?;
            s.run(None)
        }
    };
    if !last.status.success() {
        return Err(format!("the last run failed: {:?}\n{}", last.status, stderr(&last)));
    }
    let read =
        |isolation| read_topic(&s.bootstrap, &s.output, isolation).map_err(|e| format!("reading {}: {e:?}", s.output));
    Ok(Runs { name: drive.name(), sent: read("read_uncommitted")?, committed: read("read_committed")? })
}

/// The outcome of each scenario, run once for both of its trials.
fn outcome(drive_: Drive, broker: &Broker) -> Outcome {
    type Memo = Mutex<BTreeMap<String, Arc<OnceLock<Outcome>>>>;
    static MEMO: OnceLock<Memo> = OnceLock::new();
    let cell = {
        let mut memo = MEMO.get_or_init(Memo::default).lock().unwrap_or_else(|e| e.into_inner());
        memo.entry(drive_.name()).or_default().clone()
    };
    cell.get_or_init(|| drive(drive_, broker)).clone()
}

/// The runs ended as armed (checked by [`drive`]), and every reference row
/// was sent at least once.
fn fault(drive: Drive, broker: &Broker) -> Result<(), Failed> {
    let Runs { name, sent, .. } = outcome(drive, broker)?;
    let diff = multiset_diff(reference().iter().cloned(), sent.iter().cloned());
    if !diff.missing.is_empty() {
        return Err(format!("{name}: rows never sent: {}", describe(&diff, 3)).into());
    }
    println!("{name}: the runs ended as armed; every reference row sent ({} records sent)", sent.len());
    Ok(())
}

/// The scenario's output topic, read `read_committed`, holds exactly the
/// reference's rows; what it found, said.
fn committed_exactly(s: &Scenario) -> Result<String, Failed> {
    let committed = read_topic(&s.bootstrap, &s.output, "read_committed")?;
    let diff = multiset_diff(reference().iter().cloned(), committed.iter().cloned());
    if !diff.is_equal() {
        return Err(format!("{}: read_committed is not the reference: {}", s.output, describe(&diff, 3)).into());
    }
    Ok(format!("read_committed holds exactly the {} reference rows", reference().len()))
}

fn exactly_once(drive: Drive, broker: &Broker) -> Result<(), Failed> {
    broker.can_judge_exactly_once()?;
    let Runs { name, committed, sent } = outcome(drive, broker)?;
    let diff = multiset_diff(reference().iter().cloned(), committed.iter().cloned());
    if !diff.is_equal() {
        return Err(format!("{name}: {}", describe(&diff, 3)).into());
    }
    // Records sent and never committed: a transaction the fault cut short
    // held them, and its interval was replayed.
    let replayed = sent.len() - committed.len().min(sent.len());
    println!(
        "{name}: read_committed holds exactly the {} reference rows ({replayed} records sent in transactions that were aborted)",
        reference().len()
    );
    Ok(())
}

/// A sink slower than its source (every sink's prepare slowed by 40 ms, on
/// top of the broker's commit), 100 checkpoints, more than six times the
/// in-flight bound: the run reaches the bound (its trace shows 16 in
/// flight), is never stalled, and its output read `read_committed` is the
/// reference. With the source's request dropped at the bound (today's main
/// before the fix), the same run stalled after about 16 checkpoints.
fn slow_sink_past_the_in_flight_bound(bootstrap: &str) -> Result<(), Failed> {
    let s = Scenario::new("liveness-slow_sink", bootstrap)?.with_every("30");
    let out = s.run(Some("sink.before_prepare@*=slow:40"));
    if !out.status.success() {
        return Err(format!("the run with a slow sink did not finish: {:?}\n{}", out.status, stderr(&out)).into());
    }
    let most = in_flight::most_in_flight(&s.traces)?;
    if most < clink_engine::runtime::protocol::MAX_IN_FLIGHT {
        return Err(format!("the run never reached the bound: at most {most} checkpoints in flight").into());
    }
    let said = committed_exactly(&s)?;
    println!("{}: {most} checkpoints in flight at most; {said}", s.output);
    Ok(())
}

/// The same job file run again over a fresh checkpoint directory: its sinks'
/// transactional ids committed the first run's transactions, so the new
/// lineage is refused before it writes anything (exit 2), naming the lineage
/// it found; with --allow-other-lineage it runs, and the output then holds
/// every row twice, which is what the refusal kept from happening unnoticed.
fn a_new_lineage_into_another_lineages_output_is_refused(bootstrap: &str) -> Result<(), Failed> {
    let s = Scenario::private(bootstrap)?;
    let first = s.run(None);
    if !first.status.success() {
        return Err(format!("the first run failed:\n{}", stderr(&first)).into());
    }
    let lineage = std::fs::read_to_string(s.dir.path().join("ck/_jobs/23/LINEAGE"))?;
    let again = s.run_in("ck-again", None, &[]);
    let said = stderr(&again);
    let named = said.contains("already holds transactions committed under transactional id")
        && said.contains(&format!("by lineage {}", lineage.trim()))
        && said.contains("--allow-other-lineage");
    if again.status.code() != Some(2) || !named {
        return Err(
            format!("a new lineage into the first run's output was not refused: {:?}\n{said}", again.status).into()
        );
    }
    let exact = committed_exactly(&s)?;
    let forced = s.run_in("ck-forced", None, &["--allow-other-lineage"]);
    if !forced.status.success() {
        return Err(format!("the run with --allow-other-lineage failed:\n{}", stderr(&forced)).into());
    }
    let committed = read_topic(&s.bootstrap, &s.output, "read_committed")?;
    let twice: Vec<String> = reference().iter().chain(reference()).cloned().collect();
    let diff = multiset_diff(twice.iter().cloned(), committed.iter().cloned());
    if !diff.is_equal() {
        return Err(
            format!("with --allow-other-lineage the output is not every row twice: {}", describe(&diff, 3)).into()
        );
    }
    println!("refused with exit 2 ({exact} after the refusal); allowed, every row twice");
    Ok(())
}

/// A run restored from a dataset of another run's checkpoint continues
/// that run: the imported checkpoint is its confirmed point (CONFIRMED,
/// confirmed by the import), so it restores from there, not from nothing.
fn restore_from_dataset(bootstrap: &str) -> Result<(), Failed> {
    let s = Scenario::private(bootstrap)?;
    let first = s.run(Some("sink.before_prepare@4"));
    if !killed(&first) {
        return Err(format!("the first run was not killed at sink.before_prepare@4:\n{}", stderr(&first)).into());
    }
    let dataset = s.dir.path().join("dataset");
    let export = Command::new(clink())
        .args(["checkpoint", "export", "--job-id", "23", "--checkpoint", "3", "--checkpoint-dir"])
        .arg(s.dir.path().join("ck"))
        .arg("--out")
        .arg(&dataset)
        .output()?;
    if !export.status.success() {
        return Err(format!("checkpoint export: {}", stderr(&export)).into());
    }
    let dataset = dataset.to_string_lossy().into_owned();
    let restored = s.run_in("restored", None, &["--restore-from-dir", &dataset, "--restore-from-checkpoint-id", "3"]);
    if !restored.status.success() {
        return Err(format!("the restored run failed: {:?}\n{}", restored.status, stderr(&restored)).into());
    }
    let layout = clink_engine::checkpoint::CheckpointLayout::new(s.dir.path().join("restored"), 23);
    let record = clink_engine::checkpoint::markers::read_restored(&layout)?
        .ok_or("the restored run wrote no RESTORED record")?;
    if record.restored_from != 3 {
        return Err(format!("the run restored from checkpoint {}, not the imported 3", record.restored_from).into());
    }
    let marker = clink_engine::checkpoint::commits::read_confirmed(&layout, 3)?;
    if marker.confirmed_by != "import" {
        return Err(format!("CONFIRMED-3 was confirmed by {:?}, not the import", marker.confirmed_by).into());
    }
    println!("restored from the imported checkpoint 3; CONFIRMED-3 by the import");
    Ok(())
}

/// A run restored from another run's dataset, killed before it confirms a
/// checkpoint of its own: its newest CONFIRMED marker is the imported one,
/// confirmed by the import. Its bundle carries the IMPORTED record the engine
/// wrote, and checkpoint.restore_rule passes on it; without that record (the
/// marker's own word alone) it fails.
fn imported_confirmation_is_vouched(bootstrap: &str) -> Result<(), Failed> {
    let s = Scenario::private(bootstrap)?;
    let first = s.run(Some("sink.before_prepare@4"));
    if !killed(&first) {
        return Err(format!("the first run was not killed at sink.before_prepare@4:\n{}", stderr(&first)).into());
    }
    let dataset = s.dir.path().join("dataset");
    let export = Command::new(clink())
        .args(["checkpoint", "export", "--job-id", "23", "--checkpoint", "3", "--checkpoint-dir"])
        .arg(s.dir.path().join("ck"))
        .arg("--out")
        .arg(&dataset)
        .output()?;
    if !export.status.success() {
        return Err(format!("checkpoint export: {}", stderr(&export)).into());
    }
    let dataset = dataset.to_string_lossy().into_owned();
    // The restored run numbers from 4: killed before its first commit.
    let restored = s.run_in(
        "restored",
        Some("sink.before_commit@4"),
        &["--restore-from-dir", &dataset, "--restore-from-checkpoint-id", "3"],
    );
    if !killed(&restored) {
        return Err(format!("the restored run was not killed at sink.before_commit@4:\n{}", stderr(&restored)).into());
    }
    let bundle = s.dir.path().join("bundle-imported");
    let collect = Command::new(clink())
        .args(["incident-collect", "--job", "23", "--include-state", "--checkpoint-dir"])
        .arg(s.dir.path().join("restored"))
        .arg("--out")
        .arg(&bundle)
        .output()?;
    if !collect.status.success() {
        return Err(format!("incident-collect: {}", stderr(&collect)).into());
    }
    let verify_rule = |b: &Path| -> Result<(Option<i32>, Json), Failed> {
        let out = Command::new(clink())
            .arg("incident-verify")
            .arg(b)
            .args(["--profile", "consistency", "--json"])
            .output()?;
        let report: Json = serde_json::from_slice(&out.stdout).map_err(|e| format!("{e}: {}", stderr(&out)))?;
        let rule =
            report["checks"].as_array().into_iter().flatten().find(|c| c["name"] == "checkpoint.restore_rule").cloned();
        Ok((out.status.code(), rule.unwrap_or_default()))
    };
    let (code, rule) = verify_rule(&bundle)?;
    if code != Some(0) || !rule["evidence"].to_string().contains("as the bundle's IMPORTED record says") {
        return Err(format!("the imported confirmation must verify, vouched by IMPORTED: exit {code:?}, {rule}").into());
    }
    let copy = bundle.with_file_name("bundle-imported-without-its-record");
    let out = Command::new("cp").arg("-a").arg(&bundle).arg(&copy).output()?;
    if !out.status.success() {
        return Err(format!("cp: {}", stderr(&out)).into());
    }
    unlist_file(&copy, "checkpoint/_jobs/23/IMPORTED")?;
    // Without the record, the imported checkpoint's files (written by the
    // exporting run, another lineage) are another lineage's evidence mixed in.
    let out = Command::new(clink())
        .arg("incident-verify")
        .arg(&copy)
        .args(["--profile", "consistency", "--json"])
        .output()?;
    let said = String::from_utf8_lossy(&out.stdout);
    if out.status.code() != Some(2) || !said.contains("mixes evidence of two lineages") {
        return Err(format!(
            "without its IMPORTED record the import's word must be refused: exit {:?}, {said}",
            out.status.code()
        )
        .into());
    }
    println!("CONFIRMED-3 by the import verifies with its IMPORTED record, and is refused without it: {said}");
    Ok(())
}

/// An incident bundle of the Kafka sink job, killed after every sink
/// confirmed checkpoint 3 and resumed: collected by the CONFIRMED rule with
/// the sinks' receipts, and verified under the full profile, TLC's
/// protocol.conformance included: the run is a behaviour of the
/// specification's commit-confirmed family.
fn bundle_verifies(bootstrap: &str) -> Result<(), Failed> {
    let s = Scenario::private(bootstrap)?;
    let capture = s.dir.path().join("capture");
    let capture_arg = ["--capture-dir", capture.to_str().ok_or("path")?];
    let fault = "coordinator.before_confirmed_marker@3";
    let first = s.run_in("ck", Some(fault), &capture_arg);
    if !killed(&first) {
        return Err(format!("the run armed with {fault} was not killed there:\n{}", stderr(&first)).into());
    }
    let last = s.run_in("ck", None, &capture_arg);
    if !last.status.success() {
        return Err(format!("the resume failed:\n{}", stderr(&last)).into());
    }
    let bundle = s.dir.path().join("bundle");
    let collect = Command::new(clink())
        .args(["incident-collect", "--job", "23", "--include-state", "--include-captures", "--checkpoint-dir"])
        .arg(s.dir.path().join("ck"))
        .arg("--capture-dir")
        .arg(&capture)
        .arg("--trace-dir")
        .arg(&s.traces)
        .arg("--out")
        .arg(&bundle)
        .output()?;
    if !collect.status.success() {
        return Err(format!("incident-collect: {}", stderr(&collect)).into());
    }
    let manifest: Json = serde_json::from_slice(&std::fs::read(bundle.join("manifest.json"))?)?;
    if manifest["selection"]["rule"] != "newest_confirmed" {
        return Err(format!("selected by {}, not the CONFIRMED rule", manifest["selection"]["rule"]).into());
    }
    let receipts = manifest["artifacts"]
        .as_array()
        .ok_or("no artifacts")?
        .iter()
        .filter(|a| a["role"] == "commit_receipt")
        .count();
    let confirmed = std::fs::read_dir(s.dir.path().join("ck/_jobs/23"))?
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("CONFIRMED-"))
        .count();
    if receipts < 2 * confirmed {
        return Err(format!("{receipts} receipts collected for {confirmed} checkpoints confirmed by 2 sinks").into());
    }
    let verify =
        Command::new(clink()).arg("incident-verify").arg(&bundle).args(["--profile", "full", "--json"]).output()?;
    let report: Json = serde_json::from_slice(&verify.stdout)
        .map_err(|e| format!("incident-verify --json: {e}: {}", stderr(&verify)))?;
    let status = |name: &str| {
        report["checks"].as_array().into_iter().flatten().find(|c| c["name"] == name).map(|c| c["status"].clone())
    };
    if status("protocol.conformance") != Some(Json::from("passed")) || verify.status.code() != Some(0) {
        return Err(format!(
            "incident-verify exit {:?}: {}",
            verify.status.code(),
            String::from_utf8_lossy(&verify.stdout)
        )
        .into());
    }
    println!("bundle: {receipts} receipts, {confirmed} CONFIRMED markers; incident-verify --profile full passed, protocol.conformance included");
    family_flip_refused(&bundle)?;
    let selected = manifest["selection"]["checkpoint"].as_u64().ok_or("no selected checkpoint")?;
    confirmation_doctored_fails(&bundle, selected)?;
    receipt_dropped_fails(&bundle, selected)
}

/// Copies of the bundle whose evidence was edited and re-vouched for (file
/// and manifest line both): a CONFIRMED marker that leaves one sink out
/// (with that sink's receipt gone too), and a receipt that names another
/// transaction than the sink's snapshot holds. checkpoint.restore_rule fails
/// each, saying why.
fn confirmation_doctored_fails(bundle: &Path, selected: u64) -> Result<(), Failed> {
    let confirmed = format!("checkpoint/_jobs/23/CONFIRMED-{selected}");
    let receipt = format!("checkpoint/_jobs/23/receipts/op-4-0/receipt-{selected}");
    type Doctor<'a> = Box<dyn Fn(&Path) -> Result<(), Failed> + 'a>;
    let variants: Vec<(&str, &str, Doctor)> = vec![
        (
            "a-sink-left-out",
            "the job graph's commit-confirmed sink subtasks are",
            Box::new(|b: &Path| {
                edit_json(b, &confirmed, |m| m["sinks"] = serde_json::json!(["op-4-1"]))?;
                unlist_file(b, &receipt)
            }),
        ),
        (
            "confirmed-by-an-import-that-never-happened",
            "the bundle's IMPORTED record names nothing",
            Box::new(|b: &Path| edit_json(b, &confirmed, |m| m["confirmed_by"] = "import".into())),
        ),
        (
            "a-receipt-of-another-transaction",
            "another transaction",
            Box::new(|b: &Path| {
                edit_json(b, &receipt, |r| {
                    r["handle"]["epoch"] = (r["handle"]["epoch"].as_i64().unwrap_or(0) + 1).into()
                })
            }),
        ),
    ];
    for (name, said, doctor) in variants {
        let copy = bundle.with_file_name(format!("bundle-{name}"));
        let out = Command::new("cp").arg("-a").arg(bundle).arg(&copy).output()?;
        if !out.status.success() {
            return Err(format!("cp: {}", stderr(&out)).into());
        }
        doctor(&copy)?;
        let verify = Command::new(clink()).arg("incident-verify").arg(&copy).arg("--json").output()?;
        let report: Json =
            serde_json::from_slice(&verify.stdout).map_err(|e| format!("{name}: {e}: {}", stderr(&verify)))?;
        let rule = report["checks"].as_array().into_iter().flatten().find(|c| c["name"] == "checkpoint.restore_rule");
        let reason = rule.map(|c| c["reason"].as_str().unwrap_or_default().to_string()).unwrap_or_default();
        if !rule.is_some_and(|c| c["status"] == "failed") || !reason.contains(said) || verify.status.code() != Some(1) {
            return Err(format!(
                "{name}: checkpoint.restore_rule must fail saying {said:?}: exit {:?}, {rule:?}",
                verify.status.code()
            )
            .into());
        }
        println!("{name}: checkpoint.restore_rule fails: {reason}");
    }
    Ok(())
}

/// Sets fields of a JSON evidence file of a bundle and re-vouches for it.
fn edit_json(bundle: &Path, rel: &str, edit: impl Fn(&mut Json)) -> Result<(), Failed> {
    let mut doc: Json = serde_json::from_slice(&std::fs::read(bundle.join(rel))?)?;
    edit(&mut doc);
    let bytes = serde_json::to_vec_pretty(&doc)?;
    std::fs::write(bundle.join(rel), &bytes)?;
    let mut manifest: Json = serde_json::from_slice(&std::fs::read(bundle.join("manifest.json"))?)?;
    let artifact = manifest["artifacts"]
        .as_array_mut()
        .ok_or("no artifacts")?
        .iter_mut()
        .find(|a| a["path"] == rel)
        .ok_or_else(|| format!("the manifest does not list {rel}"))?;
    artifact["size"] = bytes.len().into();
    artifact["sha256"] = clink_basics::digest::sha256_hex(&bytes).into();
    std::fs::write(bundle.join("manifest.json"), serde_json::to_vec_pretty(&manifest)?)?;
    Ok(())
}

/// Removes an evidence file of a bundle, file and manifest line both.
fn unlist_file(bundle: &Path, rel: &str) -> Result<(), Failed> {
    std::fs::remove_file(bundle.join(rel))?;
    let mut manifest: Json = serde_json::from_slice(&std::fs::read(bundle.join("manifest.json"))?)?;
    manifest["artifacts"].as_array_mut().ok_or("no artifacts")?.retain(|a| a["path"] != rel);
    std::fs::write(bundle.join("manifest.json"), serde_json::to_vec_pretty(&manifest)?)?;
    Ok(())
}

/// The same bundle with its manifest saying the job's sinks need no commit
/// confirmation (and naming the recoverable family's rule): judged by that
/// rule, a missing receipt and an unconfirmed restore point would pass. The
/// family is a fact of the job graph's sinks and the job manifest: the
/// bundle is refused (exit 2), naming the field.
fn family_flip_refused(bundle: &Path) -> Result<(), Failed> {
    let copy = bundle.with_file_name("bundle-family-flipped");
    let out = Command::new("cp").arg("-a").arg(bundle).arg(&copy).output()?;
    if !out.status.success() {
        return Err(format!("cp: {}", stderr(&out)).into());
    }
    let mut manifest: Json = serde_json::from_slice(&std::fs::read(copy.join("manifest.json"))?)?;
    manifest["job"]["requires_commit_confirmation"] = false.into();
    manifest["selection"]["rule"] = "newest_completed_not_passed_over".into();
    std::fs::write(copy.join("manifest.json"), serde_json::to_vec_pretty(&manifest)?)?;
    for profile in ["consistency", "replay", "full"] {
        let verify = Command::new(clink()).arg("incident-verify").arg(&copy).args(["--profile", profile]).output()?;
        let said = stderr(&verify);
        if verify.status.code() != Some(2) || !said.contains("/job/requires_commit_confirmation") {
            return Err(format!(
                "a bundle whose manifest flips the family must be refused under --profile {profile} (exit 2, naming the field): {:?}\n{said}",
                verify.status
            )
            .into());
        }
    }
    println!(
        "with its manifest claiming the recoverable family, the bundle is refused under every profile that reads it"
    );
    Ok(())
}

/// The same bundle with one sink's receipt of the selected checkpoint taken
/// out, file and manifest line both (so the bundle's integrity holds): the
/// CONFIRMED marker it chose now vouches for a commit nothing proves, and
/// checkpoint.restore_rule fails.
fn receipt_dropped_fails(bundle: &Path, selected: u64) -> Result<(), Failed> {
    let copy = bundle.with_file_name("bundle-without-a-receipt");
    let out = Command::new("cp").arg("-a").arg(bundle).arg(&copy).output()?;
    if !out.status.success() {
        return Err(format!("cp: {}", stderr(&out)).into());
    }
    let dropped = format!("checkpoint/_jobs/23/receipts/op-4-0/receipt-{selected}");
    std::fs::remove_file(copy.join(&dropped))?;
    let mut manifest: Json = serde_json::from_slice(&std::fs::read(copy.join("manifest.json"))?)?;
    let artifacts = manifest["artifacts"].as_array_mut().ok_or("no artifacts")?;
    let before = artifacts.len();
    artifacts.retain(|a| a["path"] != dropped.as_str());
    if artifacts.len() + 1 != before {
        return Err(format!("the manifest did not list {dropped}").into());
    }
    std::fs::write(copy.join("manifest.json"), serde_json::to_vec_pretty(&manifest)?)?;
    let verify = Command::new(clink()).arg("incident-verify").arg(&copy).arg("--json").output()?;
    let report: Json = serde_json::from_slice(&verify.stdout).map_err(|e| format!("{e}: {}", stderr(&verify)))?;
    let rule = report["checks"].as_array().into_iter().flatten().find(|c| c["name"] == "checkpoint.restore_rule");
    let said = rule.map(|c| c["reason"].as_str().unwrap_or_default().to_string()).unwrap_or_default();
    let failed = rule.is_some_and(|c| c["status"] == "failed");
    if !failed || !said.contains("not there to vouch") || verify.status.code() != Some(1) {
        return Err(format!(
            "without op-4-0's receipt of {selected}, checkpoint.restore_rule must fail (exit 1): exit {:?}, {rule:?}",
            verify.status.code()
        )
        .into());
    }
    println!("without a receipt it vouches for, CONFIRMED-{selected} fails checkpoint.restore_rule: {said}");
    Ok(())
}

/// DEFECT advance_before_confirmed_put: with the confirmed point moved (and
/// snapshots pruned below it) before its CONFIRMED marker is durable, a kill
/// between the two leaves the disk's confirmed point without its snapshots,
/// and the resume cannot restore. The same runs without the defect resume.
fn advance_before_confirmed_put(bootstrap: &str) -> Result<(), Failed> {
    let fault = "coordinator.before_confirmed_marker@3";
    let retain = ["--retain-checkpoints", "1"];
    let resume = |defect: bool| -> Result<Output, Failed> {
        let s = Scenario::private(bootstrap)?;
        let mut first = s.command("ck", Some(fault), &retain);
        if defect {
            first.env("CLINK_TEST_DEFECT", "advance_before_confirmed_put");
        }
        let killed_run = run_bounded(&mut first, s.dir.path());
        if !killed(&killed_run) {
            return Err(format!("the run armed with {fault} was not killed there:\n{}", stderr(&killed_run)).into());
        }
        Ok(s.run_in("ck", None, &retain))
    };
    let control = resume(false)?;
    if !control.status.success() {
        return Err(format!("without the defect the resume failed:\n{}", stderr(&control)).into());
    }
    let broken = resume(true)?;
    if broken.status.success() || !stderr(&broken).contains("restoring checkpoint 2") {
        return Err(format!(
            "with the defect the resume must fail to restore checkpoint 2, whose snapshots the early advance pruned: {:?}\n{}",
            broken.status,
            stderr(&broken)
        )
        .into());
    }
    println!("the defect's resume fails to restore checkpoint 2; without it the resume finishes");
    Ok(())
}

fn main() {
    let args = Arguments::from_args();
    let drives: Vec<Drive> = std::iter::once(Drive::FaultFree)
        .chain(FaultPoint::ALL.into_iter().chain(FaultPoint::CONFIRMED).map(Drive::of))
        .collect();
    let broker = services(&["CLINK_KAFKA_BOOTSTRAP"]).and_then(|env| Broker::measure(&env["CLINK_KAFKA_BOOTSTRAP"]));
    let mut trials = Vec::new();
    let ignored = |name: String, why: &str| {
        Trial::test(name, || Ok(())).with_ignored_flag(true).with_kind(format!("service: {why}"))
    };
    for d in drives {
        let names = [format!("kafka_sink::fault::{}", d.name()), format!("kafka_sink::exactly_once::{}", d.name())];
        let broker = match &broker {
            Ok(b) => b.clone(),
            Err(why) => {
                trials.extend(names.into_iter().map(|n| ignored(n, why)));
                continue;
            }
        };
        let b = broker.clone();
        trials.push(Trial::test(names[0].clone(), move || fault(d, &b)));
        trials.push(Trial::test(names[1].clone(), move || exactly_once(d, &broker)));
    }
    type Check = fn(&str) -> Result<(), Failed>;
    let more: [(&str, Check); 17] = [
        (
            "kafka_sink::lineage::a_new_lineage_into_another_lineages_output_is_refused",
            a_new_lineage_into_another_lineages_output_is_refused,
        ),
        ("kafka_sink::chaos::random_kills_of_job_and_broker", chaos::random_kills_of_job_and_broker),
        ("kafka_sink::liveness::slow_sink_past_the_in_flight_bound", slow_sink_past_the_in_flight_bound),
        ("kafka_sink::restore_from_dataset", restore_from_dataset),
        ("kafka_sink::imported_confirmation_is_vouched", imported_confirmation_is_vouched),
        ("kafka_sink::bundle_verifies", bundle_verifies),
        ("kafka_sink::defect::advance_before_confirmed_put", advance_before_confirmed_put),
        ("kafka_sink::broker::killed_during_an_open_transaction", broker::killed_during_an_open_transaction),
        (
            "kafka_sink::broker::killed_between_a_commit_request_and_its_answer",
            broker::killed_between_a_commit_request_and_its_answer,
        ),
        ("kafka_sink::broker::killed_during_the_in_doubt_walk", broker::killed_during_the_in_doubt_walk),
        (
            "kafka_sink::broker::expired_transaction_takes_the_refused_commit_path",
            broker::an_expired_transaction_takes_the_refused_commit_path,
        ),
        (
            "kafka_sink::incarnations::orphan_committed_during_the_open_receipted_before_the_fence",
            incarnations::an_orphan_committed_during_the_open_is_receipted_before_the_fence,
        ),
        (
            "kafka_sink::incarnations::orphan_committed_before_the_open_receipted_before_the_fence",
            incarnations::an_orphan_committed_before_the_open_is_receipted_before_the_fence,
        ),
        (
            "kafka_sink::incarnations::orphan_aborted_by_the_open_refuses_the_old_commit",
            incarnations::an_orphan_aborted_by_the_open_refuses_the_old_commit_and_is_replayed_once,
        ),
        (
            "kafka_sink::incarnations::commit_without_receipt_receipted_at_a_restart_from_nothing",
            incarnations::a_commit_without_its_receipt_is_receipted_at_a_restart_from_nothing,
        ),
        (
            "kafka_sink::incarnations::orphan_raced_at_a_restart_from_nothing_settled_before_the_fence",
            incarnations::an_orphan_raced_at_a_restart_from_nothing_is_settled_before_the_fence,
        ),
        (
            "kafka_sink::incarnations::zombie_refused_by_the_broker",
            incarnations::a_zombies_late_produce_and_commit_are_refused_by_the_broker,
        ),
    ];
    for (name, check) in more {
        trials.push(match &broker {
            Ok(b) => {
                let bootstrap = b.bootstrap.clone();
                Trial::test(name, move || check(&bootstrap))
            }
            Err(why) => ignored(name.to_string(), why),
        });
    }
    libtest_mimic::run(&args, trials).exit();
}
