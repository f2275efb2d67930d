//! The reconcile suite: `clink incident-reconcile`, `clink incident-scope`
//! and the independent reference (`clink-reference-audit`) against the real
//! services `gates/services start` runs on 127.0.0.1. One trial per
//! scenario; each runs a job, collects its bundle, writes the scope and the
//! reference where it needs them, changes the table or the request the way
//! the scenario says, reconciles, and asserts the exit code and the status
//! of every check in the report (a check whose outcome depends on the order
//! the job happened to read its partitions in may take any of the statuses
//! listed for it, and says so).
//!
//! The two defect scenarios run a build of `clink` with the engine's
//! `defect-project-wrong-value` and `defect-watermark-ahead` features, which
//! the suite builds once into `<target>/reconcile-defects` (never the default
//! build).
//!
//! Without the services every trial is ignored with the reason `service`,
//! never passed; `.ci/run` starts them and fails on any ignored trial.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use clink_connectors::clickhouse::{sql, Connection, Endpoint};
use clink_connectors::kafka::LogWriter;
use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::{json, Value as Json};

const SEED: &str = "4";
const EVENTS: &str = "3000";
const ACCOUNTS: &str = "12";
const PARTITIONS: &str = "3";
const EVERY: &str = "500";
/// The record-wise scenarios audit this checkpoint's interval.
const AUDITED: u64 = 3;

fn clink() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_clink"))
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn scratch() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

/// The services' env file, as `gates/services start` wrote it.
fn services() -> Result<BTreeMap<String, String>, String> {
    let path = std::env::var("CLINK_SERVICES_ENV").unwrap_or_else(|_| {
        format!("{}/clink-services.env", std::env::var("TMPDIR").unwrap_or_else(|_| "/tmp".into()))
    });
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e} (run gates/services start)"))?;
    let env: BTreeMap<String, String> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    for key in ["CLINK_KAFKA_BOOTSTRAP", "CLINK_CLICKHOUSE_HTTP"] {
        if !env.contains_key(key) {
            return Err(format!("{path} names no {key}"));
        }
    }
    Ok(env)
}

/// The clink with both reconcile defects, built once for the suite.
fn defect_clink() -> Result<PathBuf, String> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let target = scratch().parent().map(|t| t.join("reconcile-defects")).ok_or("no target directory")?;
            seed_from_the_test_build(&target);
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let out = Command::new(cargo)
                .args(["build", "--quiet", "--offline", "-p", "clink-harness", "--bin", "clink", "--features"])
                .arg("clink-engine/defect-project-wrong-value,clink-engine/defect-watermark-ahead")
                .env("CARGO_TARGET_DIR", &target)
                .current_dir(workspace())
                .output()
                .map_err(|e| format!("cargo build of the defect clink: {e}"))?;
            if !out.status.success() {
                return Err(format!("cargo build of the defect clink: {}", String::from_utf8_lossy(&out.stderr)));
            }
            Ok(target.join("debug").join("clink"))
        })
        .clone()
}

/// Starts the defect build's target directory from the libraries the test
/// build compiled (gates/seed-target), so that it compiles only the crates
/// the defect features change. Only a speed-up: when seeding cannot be done
/// (the directory exists, another process seeds it, nothing to seed from),
/// cargo builds what it lacks.
fn seed_from_the_test_build(defects_target: &Path) {
    let Some(test_build) = scratch().parent().map(|t| t.join("debug")) else { return };
    let to = defects_target.join("debug");
    if to.exists() {
        return;
    }
    let _ = Command::new(workspace().join("gates/seed-target"))
        .arg(&test_build)
        .arg(&to)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

fn unique(prefix: &str) -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{prefix}_{}_{}_{n}", std::process::id(), nanos % 1_000_000)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Job {
    Records,
    Windows,
}

impl Job {
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

    fn transform(self) -> &'static str {
        match self {
            Job::Records => "credits",
            Job::Windows => "windows",
        }
    }
}

/// One trial's topic, table, job and directories.
struct Scenario {
    job: Job,
    dir: tempfile::TempDir,
    bootstrap: String,
    clickhouse: String,
    topic: String,
    table: String,
    binary: PathBuf,
}

/// A reconciliation's exit code, its report (or refusal) and what it said.
struct Reconciled {
    code: i32,
    report: Json,
    stderr: String,
}

impl Reconciled {
    fn checks(&self) -> BTreeMap<String, String> {
        self.report["checks"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| (c["name"].as_str().unwrap_or("?").to_string(), c["status"].as_str().unwrap_or("?").to_string()))
            .collect()
    }

    fn check(&self, name: &str) -> Json {
        self.report["checks"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["name"] == name)
            .cloned()
            .unwrap_or(Json::Null)
    }

    fn findings(&self, relationship: &str) -> Json {
        self.report["findings"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|f| f["relationship"] == relationship)
            .cloned()
            .unwrap_or(Json::Null)
    }

    fn show(&self) -> String {
        format!(
            "exit {}\nchecks {:?}\n{}\nreason: {}\nstderr: {}",
            self.code,
            self.checks(),
            serde_json::to_string_pretty(&self.report["checks"]).unwrap_or_default(),
            self.report["reason"],
            self.stderr
        )
    }

    /// The exit code, and the status of every check (each one a status or
    /// any of several, for an outcome the partitions' read order decides).
    fn expect(&self, code: i32, checks: &[(&str, &[&str])]) -> Result<(), Failed> {
        if self.code != code {
            return Err(format!("expected exit {code}\n{}", self.show()).into());
        }
        let got = self.checks();
        let want: BTreeMap<&str, &[&str]> = checks.iter().copied().collect();
        for (name, status) in &got {
            match want.get(name.as_str()) {
                None => return Err(format!("an unexpected check {name} ({status})\n{}", self.show()).into()),
                Some(allowed) if !allowed.contains(&status.as_str()) => {
                    return Err(format!("{name} is {status}, expected {allowed:?}\n{}", self.show()).into())
                }
                Some(_) => {}
            }
        }
        if let Some(missing) = want.keys().find(|n| !got.contains_key(**n)) {
            return Err(format!("the report has no {missing}\n{}", self.show()).into());
        }
        Ok(())
    }

    /// A refusal (exit 2) whose reason says `why`.
    fn refused(&self, why: &str) -> Result<(), Failed> {
        let reason = self.report["reason"].as_str().unwrap_or_default();
        if self.code != 2 || !reason.contains(why) {
            return Err(format!("expected a refusal (exit 2) saying {why:?}\n{}\n{}", self.show(), self.report).into());
        }
        Ok(())
    }
}

const P: &[&str] = &["passed"];
const F: &[&str] = &["failed"];
const U: &[&str] = &["unavailable"];
const BUNDLE: [(&str, &[&str]); 3] = [("bundle.manifest", P), ("bundle.artifacts", P), ("bundle.completeness", P)];

fn with_bundle(rest: &[(&'static str, &'static [&'static str])]) -> Vec<(&'static str, &'static [&'static str])> {
    BUNDLE.iter().copied().chain(rest.iter().copied()).collect()
}

impl Scenario {
    fn new(job: Job, env: &BTreeMap<String, String>) -> Result<Scenario, Failed> {
        let s = Scenario {
            job,
            dir: tempfile::tempdir_in(scratch())?,
            bootstrap: env["CLINK_KAFKA_BOOTSTRAP"].clone(),
            clickhouse: env["CLINK_CLICKHOUSE_HTTP"].clone(),
            topic: unique("reconcile-topic"),
            table: unique(&format!("reconcile_{}", job.transform())),
            binary: clink(),
        };
        s.create_table(&std::fs::read_to_string(job.fixture().join("table.sql"))?)?;
        s.write_job(|_| {})?;
        Ok(s)
    }

    fn connection(&self) -> Connection {
        Connection::open(&Endpoint::parse(&self.clickhouse).expect("the services' address")).expect("a client")
    }

    fn qualified(&self) -> String {
        sql::qualified("default", &self.table)
    }

    fn execute(&self, what: &str, statement: &str) -> Result<(), Failed> {
        self.connection().execute(what, statement)?;
        Ok(())
    }

    fn count(&self, condition: &str) -> Result<u64, Failed> {
        let rows = self.connection().select(
            "counting",
            &format!("SELECT count() FROM {} WHERE {condition}", self.qualified()),
            &[("readonly", "2".into())],
        )?;
        Ok(rows.first().and_then(|r| r.first()).cloned().flatten().and_then(|c| c.parse().ok()).unwrap_or(0))
    }

    fn create_table(&self, template: &str) -> Result<(), Failed> {
        self.execute("creating the table", &template.trim().replace("{table}", &self.qualified()))
    }

    fn job_file(&self) -> PathBuf {
        self.dir.path().join("job.json")
    }

    fn write_job(&self, change: impl Fn(&mut Json)) -> Result<(), Failed> {
        let mut job: Json = serde_json::from_slice(&std::fs::read(self.job.fixture().join("job.json"))?)?;
        for op in job["operators"].as_array_mut().ok_or("the fixture has no operators")? {
            match op["type"].as_str() {
                Some("kafka_source") => {
                    op["params"]["topic"] = self.topic.clone().into();
                    // Small fetches interleave the partitions as a busy
                    // broker would: with the default 1 MiB one fetch reads a
                    // partition whole, and a watermark that runs ahead shows
                    // only at the end of input, where no check can see it.
                    op["params"]["fetch_kbytes"] = 4.into();
                }
                Some("clickhouse_sink") => op["params"]["table"] = self.table.clone().into(),
                _ => {}
            }
        }
        change(&mut job);
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

    fn run(&self, fault: Option<&str>) -> Result<Output, Failed> {
        let mut cmd = Command::new(&self.binary);
        cmd.args(["run", "--quiet", "--job"])
            .arg(self.job_file())
            .arg("--output-dir")
            .arg(self.dir.path().join("out"))
            .arg("--checkpoint-dir")
            .arg(self.checkpoint_dir())
            .arg("--capture-dir")
            .arg(self.dir.path().join("capture"))
            .args([
                "--checkpoint-every-records",
                EVERY,
                "--retain-checkpoints",
                "1000",
                "--capture-retain-epochs",
                "1000",
            ])
            .args(["--kafka-bootstrap", &self.bootstrap, "--clickhouse", &self.clickhouse])
            .env_remove("CLINK_FAULT")
            .env_remove("CLINK_TEST_DEFECT");
        if let Some(f) = fault {
            cmd.env("CLINK_FAULT", f);
        }
        let out = bounded(&mut cmd, Duration::from_secs(240))?;
        Ok(out)
    }

    /// A run to its end, with no fault.
    fn run_clean(&self) -> Result<(), Failed> {
        let out = self.run(None)?;
        if !out.status.success() {
            return Err(format!("the run failed: {:?}\n{}", out.status, String::from_utf8_lossy(&out.stderr)).into());
        }
        Ok(())
    }

    /// The completed checkpoints, ascending.
    fn completed(&self) -> Result<Vec<u64>, Failed> {
        let dir = self.checkpoint_dir().join("_jobs").join(self.job.id());
        let mut ids: Vec<u64> = std::fs::read_dir(&dir)?
            .filter_map(|e| e.ok()?.file_name().to_str()?.strip_prefix("COMPLETED-")?.parse().ok())
            .collect();
        ids.sort_unstable();
        Ok(ids)
    }

    /// A bundle of `checkpoint` (its default epochs, or every epoch up to it).
    fn collect(&self, checkpoint: u64, every_epoch: bool) -> Result<PathBuf, Failed> {
        let out_dir =
            self.dir.path().join(format!("bundle-{checkpoint}-{}", if every_epoch { "all" } else { "scope" }));
        if out_dir.exists() {
            return Ok(out_dir);
        }
        let mut cmd = Command::new(clink());
        cmd.args(["incident-collect", "--job", self.job.id(), "--include-state", "--include-captures"])
            .args(["--commit-confirmation", "no", "--checkpoint", &checkpoint.to_string()])
            .arg("--checkpoint-dir")
            .arg(self.checkpoint_dir())
            .arg("--capture-dir")
            .arg(self.dir.path().join("capture"))
            .arg("--out")
            .arg(&out_dir);
        if every_epoch {
            let epochs: Vec<String> = (1..=checkpoint + 2).map(|e| e.to_string()).collect();
            cmd.arg("--epochs").arg(epochs.join(","));
        }
        let out = cmd.output()?;
        if !out.status.success() {
            return Err(format!("incident-collect: {}", String::from_utf8_lossy(&out.stderr)).into());
        }
        Ok(out_dir)
    }

    /// `incident-scope`: its exit code and the document's path.
    fn scope(&self, bundle: &Path, checkpoint: u64, extra: &[&str]) -> Result<(i32, PathBuf), Failed> {
        let path = self.dir.path().join(unique("scope") + ".json");
        let out = Command::new(clink())
            .args(["incident-scope", "--checkpoint", &checkpoint.to_string()])
            .arg(bundle)
            .arg("--out")
            .arg(&path)
            .args(extra)
            .output()?;
        Ok((out.status.code().unwrap_or(-1), path))
    }

    /// The independent reference over a scope: its exit code and artifact.
    fn reference(&self, scope: &Path, extra: &[&str]) -> Result<(u8, PathBuf), Failed> {
        let out = self.dir.path().join(unique("reference") + ".ndjson");
        let mut args: Vec<std::ffi::OsString> = vec!["--scope".into(), scope.into(), "--bootstrap".into()];
        args.push(self.bootstrap.clone().into());
        args.extend(["--transform".into(), self.job.transform().into(), "--out".into(), out.clone().into_os_string()]);
        args.extend(extra.iter().map(Into::into));
        Ok((clink_reference_audit::main_with(args), out))
    }

    /// A whole record-wise audit's inputs at `checkpoint`: bundle, scope, reference.
    fn audit_inputs(&self, checkpoint: u64) -> Result<(PathBuf, PathBuf), Failed> {
        let bundle = self.collect(checkpoint, false)?;
        let (code, scope) = self.scope(&bundle, checkpoint, &[])?;
        if code != 0 {
            return Err(format!("incident-scope exited {code}").into());
        }
        let (code, reference) = self.reference(&scope, &[])?;
        if code != 0 {
            return Err(format!("the reference exited {code}").into());
        }
        Ok((bundle, reference))
    }

    fn reconcile_command(&self, bundle: &Path, checkpoint: u64, extra: &[&str]) -> Command {
        let mut cmd = Command::new(clink());
        cmd.args(["incident-reconcile", "--json", "--checkpoint", &checkpoint.to_string()])
            .arg(bundle)
            .args(["--host", &self.clickhouse])
            .args(extra);
        if !extra.contains(&"--settle-ms") {
            cmd.args(["--settle-ms", "200"]);
        }
        if self.job == Job::Records && !extra.contains(&"--key") {
            cmd.args(["--key", "id"]);
        }
        cmd
    }

    fn reconcile(&self, bundle: &Path, checkpoint: u64, extra: &[&str]) -> Result<Reconciled, Failed> {
        let out = bounded(&mut self.reconcile_command(bundle, checkpoint, extra), Duration::from_secs(300))?;
        reconciled(out)
    }

    fn reconcile_with_reference(&self, bundle: &Path, reference: &Path, checkpoint: u64) -> Result<Reconciled, Failed> {
        let r = reference.to_string_lossy().into_owned();
        self.reconcile(bundle, checkpoint, &["--reference", &r])
    }
}

fn reconciled(out: Output) -> Result<Reconciled, Failed> {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let report: Json = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("incident-reconcile printed no JSON ({e}): {stderr}"))?;
    Ok(Reconciled { code: out.status.code().unwrap_or(-1), report, stderr })
}

/// A child may not hang the suite.
fn bounded(cmd: &mut Command, limit: Duration) -> Result<Output, Failed> {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
    let (mut out, mut err) = (child.stdout.take(), child.stderr.take());
    let reader = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(o) = out.as_mut() {
            let _ = std::io::Read::read_to_end(o, &mut bytes);
        }
        bytes
    });
    let err_reader = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(e) = err.as_mut() {
            let _ = std::io::Read::read_to_end(e, &mut bytes);
        }
        bytes
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("{cmd:?} did not finish within {limit:?}").into());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ok(Output { status, stdout: reader.join().unwrap_or_default(), stderr: err_reader.join().unwrap_or_default() })
}

/// The first cell of the reference's first row (a key of the audited scope).
fn a_key(reference: &Path) -> Result<String, Failed> {
    let text = std::fs::read_to_string(reference)?;
    let row: Json = serde_json::from_str(text.lines().nth(1).ok_or("the reference holds no row")?)?;
    Ok(row["cells"][0].as_str().ok_or("the row's first cell is not a string")?.to_string())
}

/// Waits until the table's mutations are done.
fn mutations_done(s: &Scenario) -> Result<(), Failed> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let rows = s.connection().select(
            "mutations",
            &format!(
                "SELECT count() FROM system.mutations WHERE database = 'default' AND table = {} AND NOT is_done",
                sql::string(&s.table)
            ),
            &[("readonly", "2".into())],
        )?;
        if rows.first().and_then(|r| r.first()).cloned().flatten().as_deref() == Some("0") {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err("the table's mutation did not finish".into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

const RECORD_AUDIT: [(&str, &[&str]); 6] = [
    ("reconcile.scope", P),
    ("reconcile.destination", P),
    ("reconcile.rows", P),
    ("reference.scope", P),
    ("reference.capture", P),
    ("reference.destination", P),
];

fn clean_record_audit(env: &BTreeMap<String, String>) -> Result<(), Failed> {
    let s = Scenario::new(Job::Records, env)?;
    s.produce()?;
    s.run_clean()?;
    let (bundle, reference) = s.audit_inputs(AUDITED)?;
    let r = s.reconcile_with_reference(&bundle, &reference, AUDITED)?;
    r.expect(0, &with_bundle(&RECORD_AUDIT))?;
    // The client cannot show the topic's id: whether both ends are one log is
    // not known, and is never said to be.
    let source = &r.report["scope"]["document"]["sources"][0];
    let reason = source["same_log_reason"].as_str().unwrap_or_default();
    if source["same_log"] != Json::Null || !reason.contains("topic id") {
        return Err(format!("a log whose topic id is unknown was called the same log: {source}").into());
    }
    let checked = last_line(&reference)?["verified"].to_string();
    if !checked.contains("does not compact") {
        return Err(format!("the reference did not rule out compaction: {checked}").into());
    }
    println!("records clean: exit {}, {}; {reason}", r.code, r.check("reconcile.rows")["evidence"][0]);
    Ok(())
}

/// The whole table against the reference, over the run from its start.
fn complete_table(env: &BTreeMap<String, String>, intruder: bool) -> Result<(), Failed> {
    let s = Scenario::new(Job::Records, env)?;
    s.produce()?;
    s.run_clean()?;
    let last = *s.completed()?.last().ok_or("no completed checkpoint")?;
    let bundle = s.collect(last, true)?;
    let (code, scope) = s.scope(&bundle, last, &["--from-run-start"])?;
    if code != 0 {
        return Err(format!("incident-scope --from-run-start exited {code}").into());
    }
    let (code, reference) = s.reference(&scope, &["--run-start-offset", "ALL=0"])?;
    if code != 0 {
        return Err(format!("the reference exited {code}").into());
    }
    if intruder {
        // A row of a key neither side names: only a whole-table read finds it.
        s.execute("an intruder", &format!("INSERT INTO {} VALUES (999999999, 'intruder', 1.00, 0)", s.qualified()))?;
    }
    let r = s.reconcile(
        &bundle,
        last,
        &[
            "--from-run-start",
            "--reference",
            &reference.to_string_lossy(),
            "--coverage",
            "complete-table",
            "--assume-table-holds-only-this-run",
        ],
    )?;
    let mut checks = with_bundle(&RECORD_AUDIT);
    if intruder {
        checks.push(("destination.coverage", F));
        r.expect(1, &checks)?;
        let coverage = r.findings("coverage");
        if !coverage["first"].to_string().contains("unexpected key [\\\"999999999\\\"]") {
            return Err(format!("the coverage findings do not name the intruder: {coverage}").into());
        }
    } else {
        checks.push(("destination.coverage", P));
        r.expect(0, &checks)?;
    }
    println!(
        "records complete-table (intruder {intruder}): exit {}, {}",
        r.code,
        r.check("destination.coverage")["evidence"]
    );
    Ok(())
}

/// A clean run whose table is then changed by `change` (given a key of the
/// scope); the delivery fails with `kind`, the transformation passes.
fn table_changed(
    env: &BTreeMap<String, String>,
    kind: &str,
    change: impl Fn(&Scenario, &str) -> Result<(), Failed>,
) -> Result<(), Failed> {
    let s = Scenario::new(Job::Records, env)?;
    s.produce()?;
    s.run_clean()?;
    let (bundle, reference) = s.audit_inputs(AUDITED)?;
    let key = a_key(&reference)?;
    change(&s, &key)?;
    let r = s.reconcile_with_reference(&bundle, &reference, AUDITED)?;
    r.expect(
        1,
        &with_bundle(&[
            ("reconcile.scope", P),
            ("reconcile.destination", P),
            ("reconcile.rows", F),
            ("reference.scope", P),
            ("reference.capture", P),
            ("reference.destination", F),
        ]),
    )?;
    let delivery = r.findings("delivery");
    let first = delivery["first"].to_string();
    if delivery["count"] != 1 || !first.contains(&format!("{kind} key [\\\"{key}\\\"]")) {
        return Err(format!("expected one {kind} finding of key {key} (delivery): {delivery}").into());
    }
    if r.findings("transformation")["count"] != 0 {
        return Err(format!("a delivery fault read as a transformation fault: {}", r.findings("transformation")).into());
    }
    if kind == "duplicated" && first.contains("explained by") {
        return Err(format!("a row inserted twice by hand was explained by the evidence: {first}").into());
    }
    if kind == "missing" && r.report["mutations"]["before"].as_array().is_none_or(Vec::is_empty) {
        return Err(format!("the report lists no mutation done before the read: {}", r.report["mutations"]).into());
    }
    println!("records {kind}: exit 1, delivery {}", delivery["first"]);
    Ok(())
}

fn transformation_defect(env: &BTreeMap<String, String>) -> Result<(), Failed> {
    let mut s = Scenario::new(Job::Records, env)?;
    s.binary = defect_clink()?;
    s.produce()?;
    s.run_clean()?;
    let (bundle, reference) = s.audit_inputs(AUDITED)?;
    let r = s.reconcile_with_reference(&bundle, &reference, AUDITED)?;
    r.expect(
        1,
        &with_bundle(&[
            ("reconcile.scope", P),
            ("reconcile.destination", P),
            ("reconcile.rows", P),
            ("reference.scope", P),
            ("reference.capture", F),
            ("reference.destination", F),
        ]),
    )?;
    let t = r.findings("transformation");
    if t["count"].as_u64().unwrap_or(0) == 0 || !t["first"].to_string().contains("changed key") {
        return Err(format!("the transformation findings do not name changed rows: {t}").into());
    }
    if r.findings("delivery")["count"] != 0 {
        return Err("a transformation written faithfully read as a delivery fault".into());
    }
    println!("records transformation defect: exit 1, transformation {}", t["summary"]);
    Ok(())
}

fn restore_duplicates(env: &BTreeMap<String, String>) -> Result<(), Failed> {
    let s = Scenario::new(Job::Records, env)?;
    s.produce()?;
    let first = s.run(Some("clickhouse.after_insert@2"))?;
    if first.status.code().is_some() {
        return Err(format!("the run armed to die after interval 2's INSERT was not killed: {:?}", first.status).into());
    }
    s.run_clean()?;
    let restored: Json =
        serde_json::from_slice(&std::fs::read(s.checkpoint_dir().join("_jobs").join(s.job.id()).join("RESTORED"))?)?;
    // How far the killed run got before interval 2's INSERT (checkpoint 1
    // completed or not, how many were triggered) depends on scheduling, and
    // so does which interval of the resumed run re-sends those rows. The
    // scope from the run's start holds them whatever the timing: every row
    // the killed run inserted was re-sent, since no checkpoint covering its
    // INSERT completed. The fresh topic starts at offset 0.
    let from = restored["restored_from"].as_u64().ok_or("no RESTORED restored_from")?;
    let restore = format!("the restore to checkpoint {from}");
    let audited = *s.completed()?.last().ok_or("no completed checkpoint")?;
    let bundle = s.collect(audited, true)?;
    let (code, scope) = s.scope(&bundle, audited, &["--from-run-start"])?;
    if code != 0 {
        return Err(format!("incident-scope --from-run-start exited {code}").into());
    }
    let (code, reference) = s.reference(&scope, &["--run-start-offset", "ALL=0"])?;
    if code != 0 {
        return Err(format!("the reference exited {code}").into());
    }
    let reference = reference.to_string_lossy().into_owned();
    let html = s.dir.path().join("report.html");
    let html_arg = html.to_string_lossy().into_owned();
    let r = s.reconcile(&bundle, audited, &["--from-run-start", "--reference", &reference, "--html", &html_arg])?;
    // The HTML report: the same checks, and the duplicates key by key.
    let page = std::fs::read_to_string(&html).map_err(|e| format!("--html {}: {e}", html.display()))?;
    if !page.contains("reconcile.rows") || !page.contains("Discrepancies: ") || !page.contains("duplicated key") {
        return Err("the HTML report lacks the checks or the discrepancies".into());
    }
    r.expect(
        1,
        &with_bundle(&[
            ("reconcile.scope", P),
            ("reconcile.destination", P),
            ("reconcile.rows", F),
            ("reference.scope", P),
            ("reference.capture", P),
            ("reference.destination", F),
        ]),
    )?;
    let rows = r.check("reconcile.rows");
    let details = rows["details"].as_array().cloned().unwrap_or_default();
    if details.is_empty()
        || !details.iter().all(|d| d.as_str().is_some_and(|d| d.starts_with("duplicated") && d.contains(&restore)))
    {
        return Err(format!("every finding must be a duplicate explained by the restore: {rows}").into());
    }
    println!("records restore: exit 1, {} ({})", rows["reason"], r.findings("delivery")["summary"]);
    Ok(())
}

/// A check that cannot decide leaves the run partial (exit 3).
fn not_established(env: &BTreeMap<String, String>, what: &str) -> Result<(), Failed> {
    let s = Scenario::new(Job::Records, env)?;
    s.produce()?;
    s.run_clean()?;
    let bundle = s.collect(AUDITED, false)?;
    let checks = with_bundle(&[("reconcile.scope", P), ("reconcile.destination", P), ("reconcile.rows", U)]);
    let (r, said) = match what {
        "mutation" => {
            // A mutation that never finishes: every part it meets throws.
            s.execute("a stuck mutation", &format!("ALTER TABLE {} DELETE WHERE throwIf(id >= 0) = 1", s.qualified()))?;
            std::thread::sleep(Duration::from_millis(500));
            (s.reconcile(&bundle, AUDITED, &[])?, "a mutation of the table is in progress")
        }
        "bound" => (s.reconcile(&bundle, AUDITED, &["--max-rows-per-query", "10"])?, "reached a bound"),
        "twice" => {
            let (_, reference) = s.audit_inputs(AUDITED)?;
            let key = a_key(&reference)?;
            let mut cmd = s.reconcile_command(&bundle, AUDITED, &["--settle-ms", "5000"]);
            let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
            let stderr = child.stderr.take().ok_or("no stderr")?;
            let mut lines = std::io::BufReader::new(stderr).lines();
            let mut seen = String::new();
            loop {
                let line =
                    lines.next().ok_or_else(|| format!("incident-reconcile ended before its first read: {seen}"))??;
                seen.push_str(&line);
                if line.contains("read 1 of 2 done") {
                    break;
                }
            }
            // Between the two reads, a row of a scope key lands again.
            s.execute(
                "a row written during the read",
                &format!("INSERT INTO {t} SELECT * FROM {t} WHERE id = {key}", t = s.qualified()),
            )?;
            let rest: Vec<String> = lines.map_while(Result::ok).collect();
            let out = child.wait_with_output()?;
            let mut r = reconciled(out)?;
            r.stderr = format!("{seen}\n{}", rest.join("\n"));
            (r, "read differently twice")
        }
        other => return Err(format!("no scenario {other}").into()),
    };
    if what == "mutation" {
        let _ = s.execute("dropping the table", &format!("DROP TABLE {}", s.qualified()));
    }
    r.expect(3, &checks)?;
    let reason = r.check("reconcile.rows")["reason"].as_str().unwrap_or_default().to_string();
    if !reason.contains(said) {
        return Err(format!("reconcile.rows should say {said:?}: {reason}").into());
    }
    println!("records {what}: exit 3, {reason}");
    Ok(())
}

/// Requests the evidence does not fit are refused (exit 2), naming why.
fn refused(env: &BTreeMap<String, String>, what: &str) -> Result<(), Failed> {
    let s = Scenario::new(Job::Records, env)?;
    s.produce()?;
    s.run_clean()?;
    let bundle = s.collect(AUDITED, false)?;
    match what {
        "another-table" => {
            s.reconcile(&bundle, AUDITED, &["--table", "some_other_table"])?.refused("--table \"some_other_table\"")?;
            // The same name, another table: dropped and created again.
            let copy = sql::qualified("default", &format!("{}_copy", s.table));
            s.execute("copying", &format!("CREATE TABLE {copy} AS {}", s.qualified()))?;
            s.execute("copying", &format!("INSERT INTO {copy} SELECT * FROM {}", s.qualified()))?;
            s.execute("dropping", &format!("DROP TABLE {}", s.qualified()))?;
            std::thread::sleep(Duration::from_millis(1100));
            s.create_table(&std::fs::read_to_string(s.job.fixture().join("table.sql"))?)?;
            s.execute("refilling", &format!("INSERT INTO {} SELECT * FROM {copy}", s.qualified()))?;
            let r = s.reconcile(&bundle, AUDITED, &[])?;
            r.refused("metadata modification time")?;
            println!("records another table: exit 2, {}", r.report["reason"]);
        }
        "another-server" => {
            let other = PrivateServices::start(&s.dir.path().join("other.env"))?;
            let conn = Connection::open(&Endpoint::parse(&other.clickhouse)?)?;
            conn.execute(
                "the same table on another server",
                &std::fs::read_to_string(s.job.fixture().join("table.sql"))?.trim().replace("{table}", &s.qualified()),
            )?;
            let mut cmd = s.reconcile_command(&bundle, AUDITED, &[]);
            let mut args: Vec<String> = cmd.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
            let at = args.iter().position(|a| a == "--host").ok_or("no --host")?;
            args[at + 1] = other.clickhouse.clone();
            cmd = Command::new(clink());
            cmd.args(&args);
            let r = reconciled(bounded(&mut cmd, Duration::from_secs(120))?)?;
            drop(other);
            r.refused("data path")?;
            println!("records another server: exit 2, {}", r.report["reason"]);
        }
        "not-completed" => {
            let r = s.reconcile(&bundle, 99, &[])?;
            r.refused("checkpoint 99 is not completed")?;
            let (code, _) = s.scope(&bundle, 99, &["--json"])?;
            if code != 2 {
                return Err(format!("incident-scope of a checkpoint not completed exited {code}, not 2").into());
            }
            println!("records checkpoint not completed: exit 2, {}", r.report["reason"]);
        }
        "another-job" => {
            s.reconcile(&bundle, AUDITED, &["--job", "22"])?.refused("--job 22")?;
        }
        "two-starts" => {
            let r = s.reconcile(&bundle, AUDITED, &["--since", "2", "--from-run-start"])?;
            r.refused("--since 2 and --from-run-start name different starts")?;
            let (code, _) = s.scope(&bundle, AUDITED, &["--since", "2", "--from-run-start"])?;
            if code != 2 {
                return Err(format!("incident-scope --since with --from-run-start exited {code}, not 2").into());
            }
            println!("records two starts: exit 2, {}", r.report["reason"]);
        }
        "artifact" => {
            // A reference of another checkpoint, and a tampered one, are refused by name.
            let (_, scope4) = s.scope(&bundle, AUDITED, &[])?;
            let (_, reference) = s.reference(&scope4, &[])?;
            let other_bundle = s.collect(AUDITED + 1, false)?;
            let r = s.reconcile_with_reference(&other_bundle, &reference, AUDITED + 1)?;
            r.refused("scope.checkpoint is 3 in the artifact, 4 in the audit's scope")?;
            let text = std::fs::read_to_string(&reference)?;
            let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
            lines[1] = lines[1].replacen("\"cells\":[\"", "\"cells\":[\"1", 1);
            let tampered = s.dir.path().join("tampered.ndjson");
            std::fs::write(&tampered, lines.join("\n") + "\n")?;
            s.reconcile_with_reference(&bundle, &tampered, AUDITED)?.refused("do not hash")?;
            let cut = s.dir.path().join("cut.ndjson");
            std::fs::write(&cut, lines[..lines.len() - 1].join("\n") + "\n")?;
            s.reconcile_with_reference(&bundle, &cut, AUDITED)?.refused("no end line")?;
            println!("records artifact refusals: another scope, tampered, cut: exit 2 each");
        }
        other => return Err(format!("no scenario {other}").into()),
    }
    Ok(())
}

/// The delivery checked, the reference bound but never compared.
const INCOMPLETE_REFERENCE: [(&str, &[&str]); 6] = [
    ("reconcile.scope", P),
    ("reconcile.destination", P),
    ("reconcile.rows", P),
    ("reference.scope", U),
    ("reference.capture", U),
    ("reference.destination", U),
];

/// An incomplete reference is bound and never compared: partial.
fn incomplete_reference(env: &BTreeMap<String, String>) -> Result<(), Failed> {
    let s = Scenario::new(Job::Records, env)?;
    s.produce()?;
    s.run_clean()?;
    let bundle = s.collect(AUDITED, false)?;
    let (_, scope) = s.scope(&bundle, AUDITED, &[])?;
    let (code, reference) = s.reference(&scope, &["--deadline-ms", "0"])?;
    if code != 3 {
        return Err(format!("a reference past its deadline exited {code}, not 3").into());
    }
    let r = s.reconcile_with_reference(&bundle, &reference, AUDITED)?;
    r.expect(3, &with_bundle(&INCOMPLETE_REFERENCE))?;
    println!("records incomplete reference: exit 3, {}", r.check("reference.capture")["reason"]);
    Ok(())
}

/// A write under the reconciler's settings is refused by the server.
fn write_refused(env: &BTreeMap<String, String>) -> Result<(), Failed> {
    let s = Scenario::new(Job::Records, env)?;
    s.execute("a row", &format!("INSERT INTO {} VALUES (1, 'a', 1.00, 0)", s.qualified()))?;
    let settings = clink_reconcile::read::read_settings(&clink_reconcile::read::Bounds::default(), 10);
    let conn = s.connection();
    for statement in [
        format!("INSERT INTO {} VALUES (2, 'b', 2.00, 0)", s.qualified()),
        format!("ALTER TABLE {} DELETE WHERE 1 = 1", s.qualified()),
        format!("DROP TABLE {}", s.qualified()),
        format!("CREATE TABLE {} (a Int8) ENGINE = Memory", sql::qualified("default", &format!("{}_x", s.table))),
    ] {
        match conn.select_within("a write", &statement, &settings, Duration::from_secs(10)) {
            Err(clink_connectors::clickhouse::ClickHouseError::Refused { message, .. })
                if message.contains("readonly") => {}
            other => return Err(format!("{statement}: expected a refusal naming readonly, got {other:?}").into()),
        }
    }
    if s.count("1 = 1")? != 1 {
        return Err("the table changed under the reconciler's settings".into());
    }
    println!("records write refused: INSERT, ALTER DELETE, DROP and CREATE refused under readonly = 2");
    Ok(())
}

/// Names and key values that try to break out of their quoting reach SQL
/// as names and values only.
fn injection(env: &BTreeMap<String, String>, through: &str) -> Result<(), Failed> {
    let mut s = Scenario::new(Job::Records, env)?;
    let canary = unique("reconcile_canary");
    let canary_q = sql::qualified("default", &canary);
    s.execute("the canary", &format!("CREATE TABLE {canary_q} (a Int8) ENGINE = MergeTree ORDER BY a"))?;
    s.execute("the canary", &format!("INSERT INTO {canary_q} VALUES (7)"))?;
    let drop = format!("DROP TABLE default.{canary}");
    let mut key = "id".to_string();
    let mut with_reference = true;
    match through {
        "table-name" => {
            let _ = s.execute("the fixture's table", &format!("DROP TABLE {}", s.qualified()));
            s.table = format!("{}`; {drop}; --", s.table);
            s.create_table(&std::fs::read_to_string(s.job.fixture().join("table.sql"))?)?;
            s.write_job(|_| {})?;
            s.produce()?;
        }
        "column-name" => {
            let column = format!("v`) FROM system.one; {drop}; --");
            let _ = s.execute("the fixture's table", &format!("DROP TABLE {}", s.qualified()));
            s.execute(
                "a table with a hostile column",
                &format!(
                    "CREATE TABLE {} (id Int64, {} String, time Int64) ENGINE = MergeTree ORDER BY id",
                    s.qualified(),
                    sql::identifier(&column)
                ),
            )?;
            let column2 = column.clone();
            s.write_job(move |job| {
                job["operators"] = json!([
                    {"id": "1", "uid": "events", "type": "kafka_source", "parallelism": 1, "params": job["operators"][0]["params"].clone()},
                    {"id": "4", "uid": "out", "type": "clickhouse_sink", "parallelism": 1, "params": job["operators"][3]["params"].clone()}
                ]);
                job["operators"][0]["params"]["columns"] = json!([{"name": "id", "type": "int"}, {"name": column2, "type": "string"}, {"name": "time", "type": "timestamp"}]);
                job["edges"] = json!([{"from": "1", "to": "4", "partition": "forward"}]);
            })?;
            let writer = LogWriter::connect(&s.bootstrap)?;
            writer.ensure_topic(&s.topic, 1)?;
            for i in 0..1200i64 {
                let message =
                    json!({"id": i, (column.clone()): format!("value '{i}`\\"), "time": 1_700_000_000_000i64 + i});
                writer.send(&s.topic, 0, b"k", message.to_string().as_bytes())?;
            }
            writer.flush(Duration::from_secs(30))?;
            with_reference = false;
        }
        "string-key" => {
            key = "account".into();
            let writer = LogWriter::connect(&s.bootstrap)?;
            writer.ensure_topic(&s.topic, 3)?;
            let hostile = ["a' OR 1=1) --", "b'); ", "c\\'; --", "d`) --", "e\\", "f\n\t'"];
            for i in 0..1200i64 {
                let account = format!("{}{drop}; -- {i}", hostile[(i % 6) as usize]);
                let message = json!({"id": i, "time": 1_700_000_000_000i64 + i * 10, "account": account, "amount": format!("{}.25", i % 50)});
                writer.send(&s.topic, (i % 3) as i32, account.as_bytes(), message.to_string().as_bytes())?;
            }
            writer.flush(Duration::from_secs(30))?;
        }
        other => return Err(format!("no scenario {other}").into()),
    }
    s.run_clean()?;
    let bundle = s.collect(AUDITED, false)?;
    let mut checks = vec![("reconcile.scope", P), ("reconcile.destination", P), ("reconcile.rows", P)];
    let r = if with_reference {
        let (code, scope) = s.scope(&bundle, AUDITED, &[])?;
        let (rcode, reference) = s.reference(&scope, &[])?;
        if code != 0 || rcode != 0 {
            return Err(format!("scope exited {code}, the reference {rcode}").into());
        }
        checks.extend(RECORD_AUDIT[3..].iter().copied());
        s.reconcile(&bundle, AUDITED, &["--key", &key, "--reference", &reference.to_string_lossy()])?
    } else {
        s.reconcile(&bundle, AUDITED, &["--key", &key])?
    };
    r.expect(0, &with_bundle(&checks))?;
    let alive =
        s.connection().select("the canary", &format!("SELECT a FROM {canary_q}"), &[("readonly", "2".into())])?;
    if alive != vec![vec![Some("7".to_string())]] {
        return Err(format!("the canary table changed: {alive:?}").into());
    }
    println!("injection through a {through}: exit 0, the canary holds; {}", r.check("reconcile.rows")["evidence"][0]);
    Ok(())
}

/// A windowed run's whole lineage, or one increment of it, audited.
fn windows_audit(env: &BTreeMap<String, String>, increment: bool, defect: bool) -> Result<(), Failed> {
    let mut s = Scenario::new(Job::Windows, env)?;
    if defect {
        s.binary = defect_clink()?;
    }
    s.produce()?;
    // A kill after checkpoint 2 completed, and a resume: the lineage passes a restore.
    let first = s.run(Some("coordinator.after_completed_marker@2"))?;
    if first.status.code().is_some() {
        return Err(format!("the run was not killed: {:?}", first.status).into());
    }
    s.run_clean()?;
    let last = *s.completed()?.last().ok_or("no completed checkpoint")?;
    let bundle = s.collect(last, true)?;
    let r = if increment {
        let base = last - 2;
        let (code, scope_base) = s.scope(&bundle, base, &[])?;
        let state = s.dir.path().join("state-base.json");
        let state_s = state.to_string_lossy().into_owned();
        let (rcode, _) = s.reference(&scope_base, &["--run-start-offset", "ALL=0", "--state-out", &state_s])?;
        if code != 0 || rcode != 0 {
            return Err(format!("the base's scope exited {code}, its reference {rcode}").into());
        }
        let since = base.to_string();
        let (code, scope) = s.scope(&bundle, last, &["--since", &since])?;
        let doc: Json = serde_json::from_slice(&std::fs::read(&scope)?)?;
        if code != 0 || doc["version"] != 3 {
            return Err(format!("incident-scope --since exited {code}, version {}", doc["version"]).into());
        }
        let (rcode, reference) = s.reference(&scope, &["--state-in", &state_s])?;
        if rcode != 0 {
            return Err(format!("the increment's reference exited {rcode}").into());
        }
        s.reconcile(&bundle, last, &["--since", &since, "--reference", &reference.to_string_lossy()])?
    } else {
        let (code, scope) = s.scope(&bundle, last, &[])?;
        let (rcode, reference) = s.reference(&scope, &["--run-start-offset", "ALL=0"])?;
        if code != 0 || rcode != 0 {
            return Err(format!("scope exited {code}, the reference {rcode}").into());
        }
        s.reconcile(
            &bundle,
            last,
            &[
                "--reference",
                &reference.to_string_lossy(),
                "--coverage",
                "complete-table",
                "--assume-table-holds-only-this-run",
            ],
        )?
    };
    let mut checks = with_bundle(&[
        ("reconcile.scope", P),
        ("reconcile.destination", P),
        ("reconcile.rows", P),
        ("reference.scope", P),
        ("reference.semantics", P),
        ("reference.finality", P),
    ]);
    if defect {
        // The watermark ran ahead: what else it changed (records the engine
        // dropped late) depends on the order it read its partitions in.
        checks.extend([
            ("reference.watermark", F),
            ("reference.capture", &["passed", "failed"][..]),
            ("reference.destination", &["passed", "failed"][..]),
            ("destination.coverage", &["passed", "failed"][..]),
        ]);
        checks.retain(|(n, _)| *n != "reference.finality");
        checks.push(("reference.finality", &["passed", "unavailable"][..]));
        // The kill may land after a sink sent the interval above the
        // restore point (at least once): copies then fail reconcile.rows,
        // each one explained by the restore, nothing missing or changed.
        checks.retain(|(n, _)| *n != "reconcile.rows");
        checks.push(("reconcile.rows", &["passed", "failed"][..]));
        r.expect(1, &checks)?;
        let rows = r.check("reconcile.rows");
        if rows["status"] == "failed" && !only_explained_copies(rows["evidence"][0].as_str().unwrap_or_default()) {
            return Err(format!("reconcile.rows failed on more than explained copies: {rows}").into());
        }
        let w = r.check("reference.watermark");
        if !w["details"].to_string().contains("ahead of") {
            return Err(
                format!("reference.watermark should name a checkpoint where the watermark ran ahead: {w}").into()
            );
        }
        println!("windows watermark ahead: exit 1, {}", w["reason"]);
        return Ok(());
    }
    checks.extend([("reference.watermark", P), ("reference.capture", P), ("reference.destination", P)]);
    if !increment {
        checks.push(("destination.coverage", P));
    }
    clean_or_explained_duplicates(&r, &checks)?;
    println!(
        "windows {}: exit {}, {}",
        if increment { "increment" } else { "lineage" },
        r.code,
        r.check("reference.finality")["evidence"][0]
    );
    Ok(())
}

/// A comparison's summary that found nothing but copies, every one of them
/// explained by the evidence: "..: 0 missing, 0 changed, N duplicated (N
/// explained), 0 unexpected".
fn only_explained_copies(summary: &str) -> bool {
    summary.contains("0 missing, 0 changed")
        && summary.contains("0 unexpected")
        && summary.split(" duplicated (").nth(1).is_some_and(|rest| {
            let before = summary.split(" duplicated (").next().unwrap_or_default();
            let copies = before.rsplit(", ").next().unwrap_or_default();
            rest.starts_with(&format!("{copies} explained"))
        })
}

/// The checks that compare the destination: at-least-once, they may find
/// copies of rows a killed run had sent.
const DELIVERY_CHECKS: [&str; 3] = ["reconcile.rows", "reference.destination", "destination.coverage"];

/// A run killed and resumed may have sent an interval again (how far the
/// killed run got before it died depends on scheduling): exit 0 with every
/// check as `checks` says, or exit 1 where only the destination's checks
/// failed and every finding is a copy the evidence explains.
fn clean_or_explained_duplicates(
    r: &Reconciled,
    checks: &[(&'static str, &'static [&'static str])],
) -> Result<(), Failed> {
    if r.code == 0 {
        return r.expect(0, checks);
    }
    let relaxed: Vec<(&str, &[&str])> = checks
        .iter()
        .map(
            |&(name, allowed)| {
                if DELIVERY_CHECKS.contains(&name) {
                    (name, &["passed", "failed"][..])
                } else {
                    (name, allowed)
                }
            },
        )
        .collect();
    r.expect(1, &relaxed)?;
    for f in r.report["findings"].as_array().into_iter().flatten() {
        if !only_explained_copies(f["summary"].as_str().unwrap_or_default()) {
            return Err(
                format!("exit 1 with a finding that is not a copy the evidence explains: {f}\n{}", r.show()).into()
            );
        }
    }
    Ok(())
}

/// The sink's subtask 0 at the audited interval, as a bundle holds it.
const SINK_CAPTURE: &str = "capture/op-4/subtask-0/epoch-3.cap";
const SINK_EVIDENCE: &str = "capture/op-4/subtask-0/epoch-3.sink.json";

/// A copy of a bundle to doctor.
fn copy_bundle(from: &Path, to: &Path) -> Result<(), Failed> {
    for entry in walk(from)? {
        let rel = entry.strip_prefix(from)?;
        let dest = to.join(rel);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::copy(&entry, &dest)?;
    }
    Ok(())
}

fn walk(dir: &Path) -> Result<Vec<PathBuf>, Failed> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            files.extend(walk(&path)?);
        } else {
            files.push(path);
        }
    }
    Ok(files)
}

/// Sets the manifest's size and SHA-256 of `rel` to what is on disk, so the
/// integrity checks pass over a doctored file.
fn revouch(bundle: &Path, rel: &str) -> Result<(), Failed> {
    let bytes = std::fs::read(bundle.join(rel))?;
    let path = bundle.join("manifest.json");
    let mut m: Json = serde_json::from_slice(&std::fs::read(&path)?)?;
    let entry = m["artifacts"]
        .as_array_mut()
        .ok_or("the manifest lists no artifacts")?
        .iter_mut()
        .find(|a| a["path"] == rel)
        .ok_or_else(|| format!("the manifest does not list {rel}"))?;
    entry["size"] = bytes.len().into();
    entry["sha256"] = clink_basics::digest::sha256_hex(&bytes).into();
    std::fs::write(path, serde_json::to_vec_pretty(&m)?)?;
    Ok(())
}

/// Rewrites a JSON artifact with `change` applied.
fn edit_json(file: &Path, change: impl Fn(&mut Json)) -> Result<(), Failed> {
    let mut doc: Json = serde_json::from_slice(&std::fs::read(file)?)?;
    change(&mut doc);
    std::fs::write(file, serde_json::to_vec_pretty(&doc)?)?;
    Ok(())
}

/// Rewrites a capture with `change` applied to its header and events.
fn edit_capture(
    file: &Path,
    change: impl Fn(&mut clink_engine::capture::CaptureHeader, &mut Vec<clink_engine::event::Event>),
) -> Result<(), Failed> {
    let mut capture = clink_engine::capture::read_capture(&std::fs::read(file)?)?;
    change(&mut capture.header, &mut capture.events);
    std::fs::write(file, clink_engine::capture::format::encode_capture(&capture.header, &capture.events))?;
    Ok(())
}

/// A run refused (exit 2) naming `said`, or, should the bundle's own checks
/// come to hold the same rule, a bundle.* check failing on it: either way
/// nothing is decided on the evidence.
fn refused_or_broken(r: &Reconciled, said: &str) -> Result<(), Failed> {
    let broken = r.report["checks"].as_array().into_iter().flatten().any(|c| {
        c["name"].as_str().is_some_and(|n| n.starts_with("bundle."))
            && c["status"] == "failed"
            && c.to_string().contains(said)
    });
    if broken && r.code != 0 {
        return Ok(());
    }
    r.refused(said)
}

/// Evidence that names another job or place than its path is refused by the
/// reconciliation and the scope alike, never read as this interval's.
fn another_place(env: &BTreeMap<String, String>) -> Result<(), Failed> {
    let s = Scenario::new(Job::Records, env)?;
    s.produce()?;
    s.run_clean()?;
    let bundle = s.collect(AUDITED, true)?;
    type Doctor = Box<dyn Fn(&Path) -> Result<(), Failed>>;
    let variants: Vec<(&str, &str, Doctor)> = vec![
        (
            "capture-of-another-job",
            "names job 23 operator 4 subtask 0 epoch 3",
            Box::new(|b| {
                edit_capture(&b.join(SINK_CAPTURE), |h, _| h.job = 23)?;
                revouch(b, SINK_CAPTURE)
            }),
        ),
        (
            "capture-of-another-epoch",
            "epoch 2; its place says job 21 operator 4 subtask 0 epoch 3",
            Box::new(|b| {
                std::fs::copy(b.join("capture/op-4/subtask-0/epoch-2.cap"), b.join(SINK_CAPTURE))?;
                revouch(b, SINK_CAPTURE)
            }),
        ),
        (
            "evidence-of-another-job",
            "the sink evidence names job 23",
            Box::new(|b| {
                edit_json(&b.join(SINK_EVIDENCE), |e| e["job"] = "23".into())?;
                revouch(b, SINK_EVIDENCE)
            }),
        ),
        (
            "evidence-of-another-uid",
            "names uid someone-else",
            Box::new(|b| {
                edit_json(&b.join(SINK_EVIDENCE), |e| e["uid"] = "someone-else".into())?;
                revouch(b, SINK_EVIDENCE)
            }),
        ),
    ];
    for (name, said, doctor) in variants {
        let copy = s.dir.path().join(format!("bundle-{name}"));
        copy_bundle(&bundle, &copy)?;
        doctor(&copy)?;
        let r = s.reconcile(&copy, AUDITED, &[]).map_err(|e| format!("{name}: {}", e.message().unwrap_or_default()))?;
        refused_or_broken(&r, said).map_err(|e| format!("{name}: {}", e.message().unwrap_or_default()))?;
        let (code, _) = s.scope(&copy, AUDITED, &[])?;
        if code == 0 {
            return Err(format!("{name}: incident-scope wrote a scope from evidence of another place").into());
        }
        println!("records {name}: exit {}, {}", r.code, r.report["reason"]);
    }
    Ok(())
}

/// Observes the integrity checks finishing and swaps a file then.
struct SwapAfterIntegrity<F: FnMut()>(Option<F>);

impl<F: FnMut()> clink_reconcile::ReconcileProgress for SwapAfterIntegrity<F> {
    fn integrity_checked(&mut self) {
        if let Some(mut swap) = self.0.take() {
            swap();
        }
    }
}

/// A file changed after the integrity checks vouched for the bundle is
/// refused, never decided on: between the library's public steps (the
/// integrity checks, then the scope), and inside one reconciliation.
fn changed_after_integrity(env: &BTreeMap<String, String>) -> Result<(), Failed> {
    let s = Scenario::new(Job::Records, env)?;
    s.produce()?;
    s.run_clean()?;
    let bundle = s.collect(AUDITED, true)?;
    let manifest: Json = serde_json::from_slice(&std::fs::read(bundle.join("manifest.json"))?)?;
    let listed = |suffix: &str| -> Result<String, Failed> {
        manifest["artifacts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a["path"].as_str())
            .find(|p| p.ends_with(suffix))
            .map(str::to_string)
            .ok_or_else(|| format!("the bundle lists no {suffix}").into())
    };
    let graph = manifest["artifacts"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| a["role"] == "job_graph")
        .and_then(|a| a["path"].as_str())
        .map(str::to_string)
        .ok_or("the bundle lists no job graph")?;
    // Each a change that leaves a file that reads: a recorded row's value, or
    // the same JSON written compactly.
    let compact = |file: &Path| -> Result<(), Failed> {
        let doc: Json = serde_json::from_slice(&std::fs::read(file)?)?;
        std::fs::write(file, serde_json::to_vec(&doc)?)?;
        Ok(())
    };
    let variants: Vec<String> = vec![
        SINK_CAPTURE.into(),
        SINK_EVIDENCE.into(),
        listed("_jobs/21/COMPLETED-3")?,
        listed("op-1-0/checkpoint-3.snap.meta")?,
        graph,
    ];
    let endpoint = clink_connectors::clickhouse::Endpoint::parse(&s.clickhouse)?;
    for rel in variants {
        let copy = s.dir.path().join(format!("bundle-changed-{}", rel.replace('/', "_")));
        copy_bundle(&bundle, &copy)?;
        let file = copy.join(&rel);
        let change = || -> Result<(), Failed> {
            if rel.ends_with(".cap") {
                edit_capture(&file, |_, events| {
                    if let Some(clink_engine::event::Event::Record(row)) =
                        events.iter_mut().find(|e| matches!(e, clink_engine::event::Event::Record(_)))
                    {
                        row[0] = clink_engine::value::Value::Int(-7);
                    }
                })
            } else {
                compact(&file)
            }
        };
        // Between the public steps: the integrity checks pass, then the file changes.
        let b = clink_bundle::read_bundle(&copy)?;
        let intact = clink_verify::integrity_checks(&b).iter().all(|c| c.status == clink_verify::Status::Passed);
        if !intact {
            return Err(format!("{rel}: the copy's integrity checks did not pass before the change").into());
        }
        change()?;
        let request = clink_reconcile::ScopeRequest { checkpoint: AUDITED, kind: clink_reconcile::ScopeKind::Interval };
        match clink_reconcile::Scope::compute(&b, request) {
            Err(clink_reconcile::ScopeError::Refused(why))
                if why.contains("changed since the manifest vouched for it") && why.contains(&rel) => {}
            Err(e) => return Err(format!("{rel}: the scope refused for another reason: {e}").into()),
            Ok(_) => {
                return Err(format!("{rel}: a scope was computed from a file changed after the integrity checks").into())
            }
        }
        // Inside one reconciliation: the change lands when the checks are done.
        copy_bundle(&bundle, &copy)?;
        let b = clink_bundle::read_bundle(&copy)?;
        let mut options = clink_reconcile::Options::new(AUDITED, endpoint.clone());
        options.key = Some(vec!["id".into()]);
        let mut swap = SwapAfterIntegrity(Some(|| {
            let _ = change();
        }));
        match clink_reconcile::reconcile(&b, &options, &mut swap) {
            Err(refusal) if refusal.0.contains("changed since the manifest vouched for it") => {
                println!("records {rel} changed after the integrity checks: refused, {}", refusal.0)
            }
            Err(refusal) => return Err(format!("{rel}: refused for another reason: {}", refusal.0).into()),
            Ok(report) => {
                return Err(
                    format!("{rel}: a reconciliation decided (exit {}) on a changed file", report.exit_code).into()
                )
            }
        }
    }
    Ok(())
}

/// A redeploy that changed the job: the scope of a checkpoint before it
/// reads the graph that checkpoint's marker names, not the bundle's newest.
fn graph_of_the_checkpoint(env: &BTreeMap<String, String>) -> Result<(), Failed> {
    let mut s = Scenario::new(Job::Records, env)?;
    s.produce()?;
    let first = s.run(Some("coordinator.after_completed_marker@2"))?;
    if first.status.code().is_some() {
        return Err(format!("the run was not killed: {:?}", first.status).into());
    }
    // The resumed run writes another table: its graph is another.
    let before = s.table.clone();
    s.table = unique("reconcile_redeployed");
    s.create_table(&std::fs::read_to_string(s.job.fixture().join("table.sql"))?)?;
    s.write_job(|_| {})?;
    s.run_clean()?;
    let last = *s.completed()?.last().ok_or("no completed checkpoint")?;
    let bundle = s.collect(last, true)?;
    let r = s.reconcile(&bundle, 2, &[])?;
    r.expect(0, &with_bundle(&[("reconcile.scope", P), ("reconcile.destination", P), ("reconcile.rows", P)]))?;
    let observed = r.report["destination"]["observed_table"].as_str().unwrap_or_default().to_string();
    if !observed.contains(&before) {
        return Err(format!(
            "checkpoint 2 was reconciled against {observed}, not the table its graph names ({before})"
        )
        .into());
    }
    let (code, scope) = s.scope(&bundle, 2, &[])?;
    let doc: Json = serde_json::from_slice(&std::fs::read(&scope)?)?;
    if code != 0 || doc["sink"]["table"] != before.as_str() {
        return Err(
            format!("incident-scope of checkpoint 2 exited {code} naming table {}", doc["sink"]["table"]).into()
        );
    }
    // The resumed run's first checkpoint is the redeployed graph's (3, or
    // later when the killed run had begun 3 before it died).
    let resumed = *s.completed()?.iter().find(|c| **c > 2).ok_or("no checkpoint after the restore")?;
    let r = s.reconcile(&bundle, resumed, &[])?;
    r.expect(0, &with_bundle(&[("reconcile.scope", P), ("reconcile.destination", P), ("reconcile.rows", P)]))?;
    let observed = r.report["destination"]["observed_table"].as_str().unwrap_or_default().to_string();
    if !observed.contains(&s.table) {
        return Err(
            format!("checkpoint {resumed} was reconciled against {observed}, not the redeployed {}", s.table).into()
        );
    }
    // The graph COMPLETED-2 names, changed and vouched for again: its hash is checked.
    let marker: Json = serde_json::from_slice(&std::fs::read(bundle.join("checkpoint/_jobs/21/COMPLETED-2"))?)?;
    let file = format!("checkpoint/_jobs/21/{}", marker["graph"]["file"].as_str().ok_or("COMPLETED-2 names no graph")?);
    let copy = s.dir.path().join("bundle-graph-changed");
    copy_bundle(&bundle, &copy)?;
    edit_json(&copy.join(&file), |g| g["name"] = "renamed".into())?;
    revouch(&copy, &file)?;
    let r = s.reconcile(&copy, 2, &[])?;
    refused_or_broken(&r, "the marker vouches for")?;
    println!(
        "records graph of the checkpoint: checkpoint 2 against {before}, {resumed} against {} (a bundle of {last}); its graph changed: exit {}, {}",
        s.table, r.code, r.report["reason"]
    );
    Ok(())
}

/// Two jobs that share one capture directory: the second overwrites the
/// first's captures, and the first's reconciliation never reads them as its own.
fn shared_capture_directory(env: &BTreeMap<String, String>) -> Result<(), Failed> {
    let s = Scenario::new(Job::Records, env)?;
    s.produce()?;
    s.run_clean()?;
    // The same job under another id, into the same capture directory (and table).
    let other = s.dir.path().join("job-23.json");
    let mut job: Json = serde_json::from_slice(&std::fs::read(s.job_file())?)?;
    job["job_id"] = "23".into();
    std::fs::write(&other, serde_json::to_vec_pretty(&job)?)?;
    let mut cmd = Command::new(clink());
    cmd.args(["run", "--quiet", "--job"])
        .arg(&other)
        .arg("--output-dir")
        .arg(s.dir.path().join("out-23"))
        .arg("--checkpoint-dir")
        .arg(s.dir.path().join("ck-23"))
        .arg("--capture-dir")
        .arg(s.dir.path().join("capture"))
        .args(["--checkpoint-every-records", EVERY, "--retain-checkpoints", "1000", "--capture-retain-epochs", "1000"])
        .args(["--kafka-bootstrap", &s.bootstrap, "--clickhouse", &s.clickhouse])
        .env_remove("CLINK_FAULT");
    let out = bounded(&mut cmd, Duration::from_secs(240))?;
    if !out.status.success() {
        return Err(format!("job 23's run failed: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    let out_dir = s.dir.path().join("bundle-shared");
    let collected = Command::new(clink())
        .args(["incident-collect", "--job", "21", "--include-state", "--include-captures"])
        .args(["--commit-confirmation", "no", "--checkpoint", &AUDITED.to_string()])
        .arg("--checkpoint-dir")
        .arg(s.checkpoint_dir())
        .arg("--capture-dir")
        .arg(s.dir.path().join("capture"))
        .arg("--out")
        .arg(&out_dir)
        .output()?;
    if !collected.status.success() {
        // The collector itself told the jobs apart.
        let said = String::from_utf8_lossy(&collected.stderr).into_owned();
        if collected.status.code() == Some(2) && said.contains("23") {
            println!("records shared capture directory: the collector refused, {said}");
            return Ok(());
        }
        return Err(format!("incident-collect: {said}").into());
    }
    let r = s.reconcile(&out_dir, AUDITED, &[])?;
    // The collector left the other job's captures out, saying whose they are
    // (an absence, never a claim), so the reconciliation has no sink evidence
    // and is not established (exit 3); or a check refuses the evidence.
    let check = |name: &str| r.report["checks"].as_array().into_iter().flatten().find(|c| c["name"] == name).cloned();
    let left_out = check("bundle.completeness").is_some_and(|c| c["details"].to_string().contains("names job 23"));
    let unread = check("reconcile.scope").is_some_and(|c| c["status"] == "unavailable");
    if !(r.code == 3 && left_out && unread) {
        refused_or_broken(&r, "names job 23")?;
    }
    let (code, _) = s.scope(&out_dir, AUDITED, &[])?;
    if code == 0 {
        return Err("incident-scope wrote a scope from another job's evidence".into());
    }
    println!("records shared capture directory: exit {}, {}", r.code, r.report["reason"]);
    Ok(())
}

/// Where the reference cannot rule out that the log lost records (its
/// topic compacts, so an offset in the range may hold nothing) or cannot
/// read the log's identity, it says so and is incomplete: the
/// transformation is not established rather than failed. (A broker that
/// names no cleanup policy at all is the third such case; Apache Kafka
/// always names one, its default `delete` included.)
fn log_identity_unread(env: &BTreeMap<String, String>) -> Result<(), Failed> {
    let s = Scenario::new(Job::Records, env)?;
    // A compacting topic: Kafka's log cleaner may drop a record of any key
    // whose later record it keeps, whenever it runs.
    LogWriter::connect(&s.bootstrap)?.ensure_topic_with(&s.topic, PARTITIONS.parse()?, Some("compact"))?;
    s.produce()?;
    s.run_clean()?;
    let bundle = s.collect(AUDITED, false)?;
    let (code, scope) = s.scope(&bundle, AUDITED, &[])?;
    if code != 0 {
        return Err(format!("incident-scope exited {code}").into());
    }
    let (rcode, reference) = s.reference(&scope, &[])?;
    let end = last_line(&reference)?;
    let why = end["incomplete_reason"].as_str().unwrap_or_default().to_string();
    if rcode != 3 || !why.contains("compacted history") {
        return Err(format!("the reference over a compacting log exited {rcode}: {end}").into());
    }
    let r = s.reconcile_with_reference(&bundle, &reference, AUDITED)?;
    r.expect(3, &with_bundle(&INCOMPLETE_REFERENCE))?;
    // A scope that records no cluster id: another cluster could not be told apart.
    let mut doc: Json = serde_json::from_slice(&std::fs::read(&scope)?)?;
    doc["sources"][0]["cluster_id"] = Json::Null;
    let no_cluster = s.dir.path().join("scope-no-cluster.json");
    std::fs::write(&no_cluster, serde_json::to_vec(&doc)?)?;
    let (rcode, reference) = s.reference(&no_cluster, &[])?;
    let end = last_line(&reference)?;
    if rcode != 3 || !end["incomplete_reason"].as_str().unwrap_or_default().contains("records no cluster id") {
        return Err(format!("the reference over a scope without a cluster id exited {rcode}: {end}").into());
    }
    println!("records log compacting or identity unread: reference exit 3 ({why}); reconcile exit 3");
    Ok(())
}

fn last_line(file: &Path) -> Result<Json, Failed> {
    let text = std::fs::read_to_string(file)?;
    Ok(serde_json::from_str(text.lines().last().ok_or("an empty artifact")?)?)
}

/// A second pair of services (`gates/services start --env FILE`), stopped when dropped.
struct PrivateServices {
    env: PathBuf,
    clickhouse: String,
}

impl PrivateServices {
    fn start(env: &Path) -> Result<PrivateServices, Failed> {
        // One at a time: starting services is heavy.
        static ONE: Mutex<()> = Mutex::new(());
        let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
        // The pair this trial needs, never the S3 server.
        let out = Command::new(workspace().join("gates/services"))
            .args(["start", "--only", "clickhouse,kafka", "--env"])
            .arg(env)
            .output()?;
        if !out.status.success() {
            return Err(
                format!("a second pair of services did not start: {}", String::from_utf8_lossy(&out.stderr)).into()
            );
        }
        let text = std::fs::read_to_string(env)?;
        let clickhouse = text
            .lines()
            .find_map(|l| l.strip_prefix("CLINK_CLICKHOUSE_HTTP="))
            .ok_or("the second env file names no ClickHouse")?
            .to_string();
        Ok(PrivateServices { env: env.to_path_buf(), clickhouse })
    }
}

impl Drop for PrivateServices {
    fn drop(&mut self) {
        let _ = Command::new(workspace().join("gates/services")).arg("stop").arg("--env").arg(&self.env).output();
    }
}

type Check = Box<dyn Fn(&BTreeMap<String, String>) -> Result<(), Failed> + Send + Sync>;

fn main() {
    let args = Arguments::from_args();
    let checks: Vec<(&str, Check)> = vec![
        ("records::clean", Box::new(clean_record_audit)),
        ("records::complete-table", Box::new(|e| complete_table(e, false))),
        (
            "records::row-deleted",
            Box::new(|e| {
                table_changed(e, "missing", |s, k| {
                    s.execute("a deletion", &format!("ALTER TABLE {} DELETE WHERE id = {k}", s.qualified()))?;
                    mutations_done(s)
                })
            }),
        ),
        (
            "records::row-inserted-twice",
            Box::new(|e| {
                table_changed(e, "duplicated", |s, k| {
                    s.execute(
                        "a second copy",
                        &format!("INSERT INTO {t} SELECT * FROM {t} WHERE id = {k}", t = s.qualified()),
                    )
                })
            }),
        ),
        (
            "records::value-changed",
            Box::new(|e| {
                table_changed(e, "changed", |s, k| {
                    s.execute(
                        "a change",
                        &format!("ALTER TABLE {} UPDATE amount = amount + 1 WHERE id = {k}", s.qualified()),
                    )?;
                    mutations_done(s)
                })
            }),
        ),
        (
            "records::unexpected-row",
            Box::new(|e| {
                table_changed(e, "unexpected", |s, k| {
                    s.execute(
                        "an unexpected row",
                        &format!("INSERT INTO {} VALUES ({k}, 'intruder', 0.01, 0)", s.qualified()),
                    )
                })
            }),
        ),
        ("records::unexpected-row-of-another-key", Box::new(|e| complete_table(e, true))),
        ("records::transformation-defect", Box::new(transformation_defect)),
        ("records::restore-duplicates", Box::new(restore_duplicates)),
        ("records::mutation-in-progress", Box::new(|e| not_established(e, "mutation"))),
        ("records::bound-reached", Box::new(|e| not_established(e, "bound"))),
        ("records::key-read-differently-twice", Box::new(|e| not_established(e, "twice"))),
        ("records::another-table", Box::new(|e| refused(e, "another-table"))),
        ("records::another-server", Box::new(|e| refused(e, "another-server"))),
        ("records::checkpoint-not-completed", Box::new(|e| refused(e, "not-completed"))),
        ("records::another-job", Box::new(|e| refused(e, "another-job"))),
        ("records::artifact-refused", Box::new(|e| refused(e, "artifact"))),
        ("records::reference-incomplete", Box::new(incomplete_reference)),
        ("records::write-refused", Box::new(write_refused)),
        ("records::two-starts", Box::new(|e| refused(e, "two-starts"))),
        ("records::evidence-names-another-place", Box::new(another_place)),
        ("records::changed-after-the-integrity-check", Box::new(changed_after_integrity)),
        ("records::graph-of-the-checkpoint", Box::new(graph_of_the_checkpoint)),
        ("records::shared-capture-directory", Box::new(shared_capture_directory)),
        ("records::log-identity-unread", Box::new(log_identity_unread)),
        ("injection::column-name", Box::new(|e| injection(e, "column-name"))),
        ("injection::table-name", Box::new(|e| injection(e, "table-name"))),
        ("injection::string-key", Box::new(|e| injection(e, "string-key"))),
        ("windows::lineage", Box::new(|e| windows_audit(e, false, false))),
        ("windows::increment", Box::new(|e| windows_audit(e, true, false))),
        ("windows::watermark-ahead", Box::new(|e| windows_audit(e, false, true))),
    ];
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
