//! The audit suite: `clink-audit` against running Kafka→ClickHouse jobs on
//! the real services `gates/services start` runs on 127.0.0.1. One trial
//! per scenario; each starts its own job (a fresh topic and table, the
//! flight recorder on, checkpoints on a timer, the source never ending),
//! feeds it with `clink produce` between the runner's cycles, and asserts
//! what the runner recorded, published and reported.
//!
//! Where a scenario needs the runner inside a given step (to kill it there,
//! or to let the job's retention outrun it), the runner is given a `clink`
//! that is a two-line wrapper: it sleeps before exec'ing the real binary for
//! that one subcommand, so the step is a real process, killed for real.
//!
//! Without the services every trial is ignored with the reason `service`,
//! never passed; `.ci/run` starts them and fails on any ignored trial.

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clink_connectors::clickhouse::{sql, Connection, Endpoint};
use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::{json, Value as Json};

const SECRET_DEST: &str = "dest-s3cr3t-7f2b9c";
const SECRET_REF: &str = "ref-s3cr3t-4c1d8e";

fn bin(name: &str) -> PathBuf {
    match name {
        "clink" => PathBuf::from(env!("CARGO_BIN_EXE_clink")),
        _ => PathBuf::from(env!("CARGO_BIN_EXE_clink-audit")),
    }
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn scratch() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

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

fn unique(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
    format!("{prefix}_{stamp}_{}_{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst))
}

fn fail(why: impl std::fmt::Display) -> Failed {
    why.to_string().into()
}

/// The reference audit binary, built once beside the suite's target.
fn reference_bin() -> Result<PathBuf, Failed> {
    static BUILT: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let target = scratch().parent().map(Path::to_path_buf).ok_or("no target directory")?;
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let out = Command::new(cargo)
                .args(["build", "--quiet", "--offline", "-p", "clink-reference-audit"])
                .env("CARGO_TARGET_DIR", target.join("audit-reference"))
                .current_dir(workspace())
                .output()
                .map_err(|e| e.to_string())?;
            if !out.status.success() {
                return Err(String::from_utf8_lossy(&out.stderr).into_owned());
            }
            Ok(target.join("audit-reference/debug/clink-reference-audit"))
        })
        .clone()
        .map_err(fail)
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Records,
    Windows,
}

impl Kind {
    fn fixture(self) -> PathBuf {
        workspace().join(match self {
            Kind::Records => "fixtures/jobs/kafka-clickhouse",
            Kind::Windows => "fixtures/jobs/kafka-windows",
        })
    }
    fn id(self) -> &'static str {
        match self {
            Kind::Records => "21",
            Kind::Windows => "22",
        }
    }
    fn transform(self) -> &'static str {
        match self {
            Kind::Records => "credits",
            Kind::Windows => "windows",
        }
    }
}

/// A running job and everything the runner is configured with.
struct Live {
    kind: Kind,
    dir: PathBuf,
    topic: String,
    table: String,
    bootstrap: String,
    clickhouse: String,
    child: Option<Child>,
    produced: u64,
    retain: u32,
    interval_ms: u64,
    capture_retain: u32,
}

impl Live {
    fn start(kind: Kind, services: &BTreeMap<String, String>, retain: u32, interval_ms: u64) -> Result<Live, Failed> {
        let mut live = Live::prepare(kind, services, retain, interval_ms)?;
        live.run(None)?;
        Ok(live)
    }

    /// The topic (with its first events), the table and the job's file; the job not started.
    fn prepare(kind: Kind, services: &BTreeMap<String, String>, retain: u32, interval_ms: u64) -> Result<Live, Failed> {
        let name = unique("audit");
        let dir = scratch().join(&name);
        std::fs::create_dir_all(dir.join("trace")).map_err(fail)?;
        let mut live = Live {
            kind,
            topic: name.replace('_', "-"),
            table: name.clone(),
            dir,
            bootstrap: services["CLINK_KAFKA_BOOTSTRAP"].clone(),
            clickhouse: services["CLINK_CLICKHOUSE_HTTP"].clone(),
            child: None,
            produced: 0,
            retain,
            interval_ms,
            capture_retain: 40,
        };
        let ddl = std::fs::read_to_string(kind.fixture().join("table.sql")).map_err(fail)?;
        live.conn()?
            .execute("the table", &ddl.replace("{table}", &sql::qualified("default", &live.table)))
            .map_err(fail)?;
        let mut job: Json =
            serde_json::from_slice(&std::fs::read(kind.fixture().join("job.json")).map_err(fail)?).map_err(fail)?;
        for op in job["operators"].as_array_mut().unwrap() {
            if op["type"] == "kafka_source" {
                op["params"]["topic"] = json!(live.topic);
                op["params"]["end"] = json!("none");
            }
            if op["type"] == "clickhouse_sink" {
                op["params"]["table"] = json!(live.table);
            }
        }
        std::fs::write(live.dir.join("job.json"), serde_json::to_vec_pretty(&job).unwrap()).map_err(fail)?;
        live.produce(400)?;
        Ok(live)
    }

    fn conn(&self) -> Result<Connection, Failed> {
        Connection::open(&Endpoint::parse(&self.clickhouse).map_err(fail)?).map_err(fail)
    }

    fn produce(&mut self, events: u64) -> Result<(), Failed> {
        let out = Command::new(bin("clink"))
            .args(["produce", "--topic", &self.topic, "--partitions", "3", "--accounts", "12", "--seed", "4"])
            .args(["--events", &events.to_string(), "--skip", &self.produced.to_string()])
            .args(["--bootstrap", &self.bootstrap])
            .output()
            .map_err(fail)?;
        if !out.status.success() {
            return Err(fail(format!("produce: {}", String::from_utf8_lossy(&out.stderr))));
        }
        self.produced += events;
        Ok(())
    }

    /// Starts (or resumes) the job; `fault` kills it at a protocol step.
    fn run(&mut self, fault: Option<&str>) -> Result<(), Failed> {
        let d = &self.dir;
        let mut cmd = Command::new(bin("clink"));
        cmd.args(["run", "--quiet", "--job"])
            .arg(d.join("job.json"))
            .arg("--output-dir")
            .arg(d.join("out"))
            .arg("--checkpoint-dir")
            .arg(d.join("ck"))
            .arg("--ha-dir")
            .arg(d.join("ha"))
            .arg("--capture-dir")
            .arg(d.join("capture"))
            .args(["--checkpoint-interval-ms", &self.interval_ms.to_string()])
            .args([
                "--retain-checkpoints",
                &self.retain.to_string(),
                "--capture-retain-epochs",
                &self.capture_retain.to_string(),
            ])
            .args(["--kafka-bootstrap", &self.bootstrap, "--clickhouse", &self.clickhouse])
            .env("CLINK_PROTOCOL_TRACE_DIR", d.join("trace"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(d.join(format!("job-{}.log", self.completed().len()))).map_err(fail)?);
        if let Some(f) = fault {
            cmd.env("CLINK_FAULT", f);
        }
        self.child = Some(cmd.spawn().map_err(fail)?);
        Ok(())
    }

    fn completed(&self) -> Vec<u64> {
        let dir = self.dir.join("ck/_jobs").join(self.kind.id());
        let mut ids: Vec<u64> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.strip_prefix("COMPLETED-")?.parse().ok())
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Waits until at least `n` more checkpoints than now have completed.
    fn wait_checkpoints(&self, n: usize) -> Result<(), Failed> {
        let start = self.completed().len();
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.completed().len() < start + n {
            if Instant::now() > deadline {
                return Err(fail(format!("no {n} new checkpoints within 60 s ({start} so far)")));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    /// Ends the job (SIGKILL): what it completed is what the runner audits.
    fn stop(&mut self) -> Result<(), Failed> {
        if let Some(mut child) = self.child.take() {
            child.kill().map_err(fail)?;
            child.wait().map_err(fail)?;
        }
        Ok(())
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A child killed when the trial ends, however it ends.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One runner setup: its configuration file and state directory.
struct Audit {
    config: PathBuf,
    state: PathBuf,
    clink: PathBuf,
    env: Vec<(String, String)>,
}

struct Overrides {
    selection: &'static str,
    bundle_bytes: u64,
    disk_budget: u64,
    retain_passed: u32,
    reference_extra: Vec<String>,
    reference_program: Option<PathBuf>,
    /// `backoff.initial_s` and `backoff.max_s`.
    backoff: (u64, u64),
}

impl Default for Overrides {
    fn default() -> Self {
        Overrides {
            selection: "sequential",
            bundle_bytes: 1 << 30,
            disk_budget: 10 << 30,
            retain_passed: 50,
            reference_extra: Vec::new(),
            reference_program: None,
            backoff: (1, 4),
        }
    }
}

impl Audit {
    fn new(live: &Live, o: Overrides) -> Result<Audit, Failed> {
        let dir = live.dir.join("audit");
        std::fs::create_dir_all(&dir).map_err(fail)?;
        let state = dir.join("state");
        let program = match o.reference_program {
            Some(p) => p,
            None => reference_bin()?,
        };
        let mut argv = vec![
            program.display().to_string(),
            "--scope={scope}".into(),
            "--out={out}".into(),
            "--transform".into(),
            live.kind.transform().into(),
            "--bootstrap".into(),
            live.bootstrap.clone(),
        ];
        let mut with_state_in: Vec<String> = Vec::new();
        if live.kind == Kind::Windows {
            argv.push("--state-out={state_out}".into());
            with_state_in.push("--state-in={state_in}".into());
        }
        argv.extend(o.reference_extra);
        let key: Vec<&str> = if live.kind == Kind::Records { vec!["id"] } else { vec![] };
        let config = json!({
            "format": "clink-audit-config",
            "version": 1,
            "job": {
                "id": live.kind.id(),
                "checkpoint_dir": live.dir.join("ck"),
                "ha_dir": live.dir.join("ha"),
                "capture_dir": live.dir.join("capture"),
                "trace_dir": live.dir.join("trace"),
            },
            "destination": {
                "endpoint_env": "CLINK_AUDIT_TEST_CLICKHOUSE",
                "table": format!("default.{}", live.table),
                "key": key,
                "credential_env": ["CLINK_AUDIT_TEST_DEST_SECRET"],
                "user_env": null,
                "password_env": null,
            },
            "reference": {"argv": argv, "with_state_in": with_state_in, "from_run_start": ["--run-start-offset=ALL=0"],
                          "credential_env": ["CLINK_AUDIT_TEST_REF_SECRET"]},
            "selection": o.selection,
            "start_at": "earliest",
            "bounds": {"child_timeout_s": 120, "bundle_bytes": o.bundle_bytes, "bundle_files": 100000,
                       "rows": 1000000, "query_timeout_s": 30},
            "backoff": {"initial_s": o.backoff.0, "max_s": o.backoff.1},
            "max_attempts": 3,
            "retain_passed": o.retain_passed,
            "retain_states": 3,
            "disk_budget_bytes": o.disk_budget,
            "state_dir": state,
        });
        let path = dir.join("audit.json");
        std::fs::write(&path, serde_json::to_vec_pretty(&config).unwrap()).map_err(fail)?;
        Ok(Audit {
            config: path,
            state,
            clink: bin("clink"),
            env: vec![
                ("CLINK_AUDIT_TEST_CLICKHOUSE".into(), live.clickhouse.clone()),
                ("CLINK_AUDIT_TEST_DEST_SECRET".into(), SECRET_DEST.into()),
                ("CLINK_AUDIT_TEST_REF_SECRET".into(), SECRET_REF.into()),
            ],
        })
    }

    fn command(&self, sub: &str) -> Command {
        let mut c = Command::new(bin("clink-audit"));
        c.arg(sub).arg("--config").arg(&self.config);
        if matches!(sub, "run" | "poll") {
            c.arg("--clink").arg(&self.clink);
        }
        c.envs(self.env.iter().map(|(k, v)| (k, v)));
        c
    }

    fn run(&self) -> Result<Output, Failed> {
        self.command("run").output().map_err(fail)
    }

    fn status(&self) -> Result<(i32, Json), Failed> {
        let out = self
            .command("status")
            .args(["--json", "--cycle-within-s", "3600", "--stale-after-s", "3600"])
            .output()
            .map_err(fail)?;
        let doc: Json = serde_json::from_slice(&out.stdout)
            .map_err(|e| fail(format!("status --json: {e}: {}", String::from_utf8_lossy(&out.stderr))))?;
        Ok((out.status.code().unwrap_or(-1), doc))
    }

    fn ledger(&self) -> Result<Json, Failed> {
        serde_json::from_slice(&std::fs::read(self.state.join("ledger.json")).map_err(fail)?).map_err(fail)
    }

    /// checkpoint -> (outcome, attempts)
    fn outcomes(&self) -> Result<BTreeMap<u64, (String, usize)>, Failed> {
        let ledger = self.ledger()?;
        Ok(ledger["audits"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(ck, r)| {
                (
                    ck.parse().unwrap_or(0),
                    (
                        r["outcome"].as_str().unwrap_or("unfinished").to_string(),
                        r["attempts"].as_array().map_or(0, Vec::len),
                    ),
                )
            })
            .collect())
    }

    /// A clink that sleeps `seconds` before `subcommand`, then is the real one.
    fn slow(&mut self, subcommand: &str, seconds: u32) -> Result<(), Failed> {
        let path = self.state.parent().unwrap().join(format!("clink-slow-{subcommand}"));
        let script = format!(
            "#!/bin/sh\nif [ \"$1\" = \"{subcommand}\" ]; then sleep {seconds}; fi\nexec {} \"$@\"\n",
            bin("clink").display()
        );
        std::fs::write(&path, script).map_err(fail)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).map_err(fail)?;
        self.clink = path;
        Ok(())
    }
}

fn expect_code(out: &Output, codes: &[i32], what: &str) -> Result<(), Failed> {
    let code = out.status.code().unwrap_or(-1);
    if codes.contains(&code) {
        return Ok(());
    }
    Err(fail(format!(
        "{what}: exit {code}, expected {codes:?}\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )))
}

/// Cycles until the runner has audited every checkpoint completed so far.
fn catch_up(audit: &Audit, live: &Live) -> Result<(), Failed> {
    let newest = live.completed().last().copied().unwrap_or(0);
    for _ in 0..30 {
        let out = audit.run()?;
        expect_code(&out, &[0, 1], "clink-audit run")?;
        let outcomes = audit.outcomes()?;
        // Up to the newest at the call: a live job goes on completing
        // checkpoints, and on a loaded machine the runner is always one
        // cycle behind the latest.
        if outcomes.get(&newest).is_some_and(|(o, _)| o != "unfinished")
            && outcomes.range(..=newest).all(|(_, (o, _))| o != "unfinished")
        {
            return Ok(());
        }
    }
    Err(fail(format!("the runner did not catch up with checkpoint {newest}: {:?}", audit.outcomes()?)))
}

fn verified_everything(audit: &Audit) -> Result<(), Failed> {
    let outcomes = audit.outcomes()?;
    let bad: Vec<_> = outcomes.iter().filter(|(_, (o, _))| o != "passed" && o != "empty").collect();
    if !bad.is_empty() {
        let ledger = audit.ledger()?;
        let reasons: Vec<String> =
            bad.iter().map(|(ck, _)| format!("{ck}: {}", ledger["audits"][ck.to_string()]["attempts"])).collect();
        return Err(fail(format!("not every checkpoint verified: {bad:?}\n{}", reasons.join("\n"))));
    }
    if !outcomes.values().any(|(o, _)| o == "passed") {
        return Err(fail(format!("no audit saw a row: {outcomes:?}")));
    }
    let (code, status) = audit.status()?;
    // Positive evidence: every partition verified as one range from the
    // run's first offset (0 here) to the end of what the audits spanned.
    let partitions = status["coverage"].as_array().cloned().unwrap_or_default();
    if partitions.is_empty() {
        return Err(fail(format!("no partition is covered: {status}")));
    }
    for p in &partitions {
        let whole = json!([{"start": 0, "end": p["extent"]["end"]}]);
        if !p["gaps"].as_array().is_some_and(Vec::is_empty) || p["verified"] != whole || p["extent"]["end"] == 0 {
            return Err(fail(format!("coverage is not one verified range from the run's start: {p}")));
        }
    }
    if code != 0 {
        return Err(fail(format!("status exit {code}, expected 0 (healthy): {status}")));
    }
    Ok(())
}

fn healthy(kind: Kind, services: &BTreeMap<String, String>) -> Result<(), Failed> {
    let mut live = Live::start(kind, services, 20, 1500)?;
    let audit = Audit::new(&live, Overrides::default())?;
    live.wait_checkpoints(1)?;
    // The runner polls while the job runs and the producer feeds it.
    let mut poll = Reaped(
        audit
            .command("poll")
            .args(["--interval-s", "1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(fail)?,
    );
    for _ in 0..4 {
        live.produce(300)?;
        std::thread::sleep(Duration::from_millis(1500));
    }
    live.wait_checkpoints(2)?;
    live.stop()?;
    // SAFETY: a plain kill(2) of the poll process this test started.
    unsafe { libc::kill(poll.0.id() as i32, libc::SIGTERM) };
    let status = poll.0.wait().map_err(fail)?;
    if status.code() != Some(3) {
        return Err(fail(format!("poll ended {status:?}, expected exit 3 (interrupted)")));
    }
    catch_up(&audit, &live)?;
    verified_everything(&audit)?;
    let reports = std::fs::read_dir(audit.state.join("reports")).map_err(fail)?.count();
    if reports != audit.outcomes()?.len() {
        return Err(fail(format!("{reports} reports for {} audits", audit.outcomes()?.len())));
    }
    if kind == Kind::Windows {
        let ledger = audit.ledger()?;
        let increments = ledger["audits"]
            .as_object()
            .unwrap()
            .values()
            .filter(|r| r["attempts"].as_array().and_then(|a| a.last()).is_some_and(|a| a["since"].is_u64()))
            .count();
        if ledger["chain"]["held"].as_array().is_none_or(Vec::is_empty) || increments == 0 {
            return Err(fail(format!(
                "the windowed chain was not used: {} increments, {}",
                increments, ledger["chain"]
            )));
        }
    }
    Ok(())
}

fn discrepancy(services: &BTreeMap<String, String>) -> Result<(), Failed> {
    let mut live = Live::start(Kind::Records, services, 20, 1500)?;
    let audit = Audit::new(&live, Overrides::default())?;
    live.wait_checkpoints(2)?;
    catch_up(&audit, &live)?;
    live.produce(300)?;
    live.wait_checkpoints(2)?;
    // A second copy of the newest row, behind the job's back.
    let t = sql::qualified("default", &live.table);
    live.conn()?
        .execute("a second copy", &format!("INSERT INTO {t} SELECT * FROM {t} WHERE id = (SELECT max(id) FROM {t})"))
        .map_err(fail)?;
    live.stop()?;
    catch_up(&audit, &live)?;
    let outcomes = audit.outcomes()?;
    let found: Vec<u64> = outcomes.iter().filter(|(_, (o, _))| o == "discrepancy").map(|(ck, _)| *ck).collect();
    let [ck] = found[..] else { return Err(fail(format!("expected one discrepancy: {outcomes:?}"))) };
    let ledger = audit.ledger()?;
    let rec = &ledger["audits"][ck.to_string()];
    let findings = rec["findings"].to_string();
    if !findings.contains("reference-destination") || !findings.contains("duplicated") {
        return Err(fail(format!("the finding does not name the relationship and the copy: {findings}")));
    }
    // Never tried again, whatever more cycles run.
    audit.run()?;
    audit.run()?;
    if audit.outcomes()?[&ck].1 != 1 {
        return Err(fail(format!("a discrepancy was tried again: {:?}", audit.outcomes()?[&ck])));
    }
    let (code, status) = audit.status()?;
    if code != 1 || status["state"] != "discrepancy" {
        return Err(fail(format!("status {code}, expected 1 (discrepancy): {}", status["state"])));
    }
    let id = rec["id"].as_str().unwrap();
    let ack = audit
        .command("acknowledge")
        .args(["--audit", id, "--note", "a test inserted the copy"])
        .output()
        .map_err(fail)?;
    expect_code(&ack, &[0], "acknowledge")?;
    let (code, status) = audit.status()?;
    let listed = status["discrepancies"].as_array().map_or(0, Vec::len);
    if code == 1
        || listed != 1
        || !status["discrepancies"][0]["acknowledgements"].to_string().contains("a test inserted")
    {
        return Err(fail(format!(
            "after the acknowledgement: exit {code}, listed {listed}: {}",
            status["discrepancies"]
        )));
    }
    let unknown = audit.command("acknowledge").args(["--audit", "ck1-nope", "--note", "x"]).output().map_err(fail)?;
    expect_code(&unknown, &[2], "acknowledge of an unknown audit")?;
    // Only a discrepancy is acknowledged: a passed audit's acknowledgement is refused, naming it and its outcome.
    let passed = outcomes.iter().find(|(_, (o, _))| o == "passed").map(|(ck, _)| *ck).ok_or("no audit passed")?;
    let passed_id = ledger["audits"][passed.to_string()]["id"].as_str().unwrap_or_default().to_string();
    let refused = audit.command("acknowledge").args(["--audit", &passed_id, "--note", "x"]).output().map_err(fail)?;
    expect_code(&refused, &[2], "acknowledge of a passed audit")?;
    let why = String::from_utf8_lossy(&refused.stderr);
    if !why.contains(&passed_id) || !why.contains("its outcome is passed") {
        return Err(fail(format!("the refusal does not name the audit and its outcome: {why}")));
    }
    Ok(())
}

/// The one value a query answers.
fn scalar(conn: &Connection, statement: &str) -> Result<String, Failed> {
    let rows = conn.select("a test's query", statement, &[]).map_err(fail)?;
    rows.first().and_then(|r| r.first()).cloned().flatten().ok_or_else(|| fail(format!("no value: {statement}")))
}

/// A row deleted from the table behind the job's back: the audit of the
/// checkpoint that owed it is a discrepancy naming the key as missing, and
/// status says so until it is acknowledged.
fn row_deleted(services: &BTreeMap<String, String>) -> Result<(), Failed> {
    let mut live = Live::start(Kind::Records, services, 20, 1500)?;
    let audit = Audit::new(&live, Overrides::default())?;
    live.wait_checkpoints(2)?;
    catch_up(&audit, &live)?;
    live.produce(300)?;
    live.wait_checkpoints(2)?;
    live.stop()?;
    let t = sql::qualified("default", &live.table);
    let conn = live.conn()?;
    let newest = scalar(&conn, &format!("SELECT max(id) FROM {t}"))?;
    conn.execute("a deletion", &format!("ALTER TABLE {t} DELETE WHERE id = {newest}")).map_err(fail)?;
    // A ClickHouse mutation finishes in the background.
    let deadline = Instant::now() + Duration::from_secs(30);
    while scalar(&conn, &format!("SELECT count() FROM {t} WHERE id = {newest}"))? != "0" {
        if Instant::now() > deadline {
            return Err(fail(format!("row {newest} was still there 30 s after its deletion")));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    catch_up(&audit, &live)?;
    let outcomes = audit.outcomes()?;
    let found: Vec<u64> = outcomes.iter().filter(|(_, (o, _))| o == "discrepancy").map(|(ck, _)| *ck).collect();
    let [ck] = found[..] else { return Err(fail(format!("expected one discrepancy: {outcomes:?}"))) };
    let findings = audit.ledger()?["audits"][ck.to_string()]["findings"].to_string();
    if !findings.contains("reference-destination") || !findings.contains("missing") || !findings.contains(&newest) {
        return Err(fail(format!(
            "the finding does not name the relationship and the missing key {newest}: {findings}"
        )));
    }
    let (code, status) = audit.status()?;
    if code != 1 || status["state"] != "discrepancy" {
        return Err(fail(format!("status {code}, expected 1 (discrepancy): {}", status["state"])));
    }
    Ok(())
}

fn second_runner(services: &BTreeMap<String, String>) -> Result<(), Failed> {
    let mut live = Live::start(Kind::Records, services, 20, 1500)?;
    let audit = Audit::new(&live, Overrides::default())?;
    live.wait_checkpoints(1)?;
    let poll = Reaped(
        audit
            .command("poll")
            .args(["--interval-s", "1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(fail)?,
    );
    let holder = poll.0.id();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !audit.state.join("ledger.json").exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let second = audit.run()?;
    drop(poll);
    live.stop()?;
    expect_code(&second, &[2], "a second runner")?;
    let stderr = String::from_utf8_lossy(&second.stderr);
    if !stderr.contains("another runner holds") || !stderr.contains(&holder.to_string()) {
        return Err(fail(format!("the refusal does not name the holder {holder}: {stderr}")));
    }
    Ok(())
}

fn group_alive(pgid: u32) -> bool {
    std::fs::read_dir("/proc").into_iter().flatten().flatten().any(|e| {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { return false };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
        let fields: Vec<&str> = stat.rsplit_once(')').map_or("", |p| p.1).split_whitespace().collect();
        fields.first() != Some(&"Z") && fields.get(2) == Some(&pgid.to_string().as_str())
    })
}

fn killed_in_each_step(services: &BTreeMap<String, String>) -> Result<(), Failed> {
    let mut live = Live::start(Kind::Records, services, 30, 5000)?;
    let reference_slow = live.dir.join("reference-slow");
    let mark = live.dir.join("reference-slow.on");
    std::fs::write(
        &reference_slow,
        format!(
            "#!/bin/sh\nif [ -e {} ]; then sleep 3; fi\nexec {} \"$@\"\n",
            mark.display(),
            reference_bin()?.display()
        ),
    )
    .map_err(fail)?;
    std::fs::set_permissions(&reference_slow, std::fs::Permissions::from_mode(0o755)).map_err(fail)?;
    let mut audit = Audit::new(&live, Overrides { reference_program: Some(reference_slow), ..Overrides::default() })?;
    let steps = [
        ("collect", Some("incident-collect")),
        ("scope", Some("incident-scope")),
        ("reference", None),
        ("verify", Some("incident-verify")),
        ("reconcile", Some("incident-reconcile")),
    ];
    for (step, sub) in steps {
        live.produce(200)?;
        live.wait_checkpoints(1)?;
        match sub {
            Some(s) => audit.slow(s, 3)?,
            None => audit.slow("none", 0)?,
        }
        if sub.is_none() {
            std::fs::write(&mark, b"").map_err(fail)?;
        } else if mark.exists() {
            std::fs::remove_file(&mark).map_err(fail)?;
        }
        let mut runner =
            Reaped(audit.command("run").stdout(Stdio::null()).stderr(Stdio::null()).spawn().map_err(fail)?);
        let deadline = Instant::now() + Duration::from_secs(60);
        let running = loop {
            let ledger = audit.ledger().unwrap_or(Json::Null);
            if ledger["running"]["step"] == step {
                break ledger["running"].clone();
            }
            if Instant::now() > deadline || runner.0.try_wait().map_err(fail)?.is_some() {
                return Err(fail(format!("the runner was never seen in {step}: {}", ledger["running"])));
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        runner.0.kill().map_err(fail)?;
        runner.0.wait().map_err(fail)?;
        let pgid = running["child"]["pid"].as_u64().unwrap() as u32;
        let ck = running["checkpoint"].as_u64().unwrap();
        // Nothing unfinished is counted verified while it is orphaned.
        let (_, status) = audit.status()?;
        let counted = status["last_verified"]["checkpoint"].as_u64() == Some(ck);
        if counted {
            return Err(fail(format!("checkpoint {ck} counted verified with its {step} unfinished")));
        }
        let orphaned = group_alive(pgid);
        let again = audit.run()?;
        expect_code(&again, &[0], "the runner after a crash")?;
        if group_alive(pgid) {
            return Err(fail(format!("the orphan of {step} (group {pgid}) is still running")));
        }
        let events = std::fs::read_to_string(audit.state.join("events.ndjson")).map_err(fail)?;
        let stopped = events.lines().any(|l| l.contains("\"orphan\"") && l.contains(&format!("\"pid\":{pgid}")));
        if orphaned && !stopped {
            return Err(fail(format!("the orphan of {step} was not recorded as stopped: {events}")));
        }
        let outcomes = audit.outcomes()?;
        if outcomes[&ck].1 != 1 || !["passed", "empty"].contains(&outcomes[&ck].0.as_str()) {
            return Err(fail(format!(
                "after a kill in {step}, checkpoint {ck}: {:?} (one attempt, verified expected)",
                outcomes[&ck]
            )));
        }
        let steps = &audit.ledger()?["audits"][ck.to_string()]["attempts"][0]["steps"];
        let names: Vec<&str> = steps.as_array().unwrap().iter().filter_map(|s| s["step"].as_str()).collect();
        if names != ["collect", "scope", "reference", "verify", "reconcile"] {
            return Err(fail(format!("steps recorded twice or missing after a kill in {step}: {names:?}")));
        }
    }
    live.stop()?;
    audit.slow("none", 0)?;
    catch_up(&audit, &live)?;
    let reports = std::fs::read_dir(audit.state.join("reports")).map_err(fail)?.count();
    if reports != audit.outcomes()?.len() {
        return Err(fail(format!("{reports} reports for {} audits", audit.outcomes()?.len())));
    }
    Ok(())
}

fn latest_only(services: &BTreeMap<String, String>) -> Result<(), Failed> {
    let mut live = Live::start(Kind::Records, services, 20, 1000)?;
    let audit = Audit::new(&live, Overrides { selection: "latest-only", ..Overrides::default() })?;
    live.wait_checkpoints(4)?;
    live.stop()?;
    expect_code(&audit.run()?, &[0], "run")?;
    let outcomes = audit.outcomes()?;
    let newest = *outcomes.keys().next_back().unwrap();
    let skipped = outcomes.iter().filter(|(_, (o, _))| o == "skipped").count();
    if skipped < 3 || !["passed", "empty"].contains(&outcomes[&newest].0.as_str()) {
        return Err(fail(format!("latest-only: {outcomes:?}")));
    }
    let (_, status) = audit.status()?;
    if !status["gaps"].to_string().contains("skipped") {
        return Err(fail(format!("skipped checkpoints are not listed as gaps: {}", status["gaps"])));
    }
    Ok(())
}

fn expired(services: &BTreeMap<String, String>) -> Result<(), Failed> {
    // The job keeps a snapshot for every captured epoch's starting state
    // (the capture window plus one), so the window is the retention here.
    let mut live = Live::prepare(Kind::Records, services, 1, 700)?;
    live.capture_retain = 1;
    live.run(None)?;
    let mut audit = Audit::new(&live, Overrides::default())?;
    live.wait_checkpoints(2)?;
    // Collection waits long enough for the job's retention of one to purge it.
    audit.slow("incident-collect", 3)?;
    let out = audit.run()?;
    live.stop()?;
    expect_code(&out, &[0], "run")?;
    let outcomes = audit.outcomes()?;
    if !outcomes.values().any(|(o, _)| o == "expired") {
        return Err(fail(format!("retention outran the runner but nothing is expired: {outcomes:?}")));
    }
    Ok(())
}

fn disk_budget(services: &BTreeMap<String, String>) -> Result<(), Failed> {
    let mut live = Live::start(Kind::Records, services, 20, 1000)?;
    live.wait_checkpoints(3)?;
    live.stop()?;
    // Room for one bundle and nothing more; retention would delete every passed audit.
    let one = 8 << 20;
    let audit = Audit::new(
        &live,
        Overrides { bundle_bytes: one, disk_budget: one + 20_000, retain_passed: 0, ..Overrides::default() },
    )?;
    let out = audit.run()?;
    expect_code(&out, &[3], "run at the disk budget")?;
    let outcomes = audit.outcomes()?;
    let done: Vec<_> = outcomes.iter().filter(|(_, (o, _))| o != "unfinished").collect();
    let not_started = outcomes.values().filter(|(_, n)| *n == 0).count();
    if done.len() != 1 || not_started == 0 {
        return Err(fail(format!("expected one audit and the rest not started: {outcomes:?}")));
    }
    let dirs = std::fs::read_dir(audit.state.join("audits")).map_err(fail)?.count();
    if dirs != 1 {
        return Err(fail(format!("the budget deleted evidence: {dirs} audit directories left")));
    }
    let (code, status) = audit.status()?;
    if code != 3 || status["runner"]["budget_blocked"].is_null() {
        return Err(fail(format!("status {code}: {}", status["runner"])));
    }
    Ok(())
}

fn credentials_and_arguments(services: &BTreeMap<String, String>) -> Result<(), Failed> {
    let mut live = Live::start(Kind::Records, services, 20, 1500)?;
    // The reference records its environment and arguments, then is the real one.
    let seen = live.dir.join("reference-saw");
    let wrapper = live.dir.join("reference-recording");
    let hostile = "--label=$(touch PWNED); `touch PWNED2` | rm -rf x && echo '\"";
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nenv > {seen}.env\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done > {seen}.args\n\
             last=''; for a in \"$@\"; do shift; [ \"$a\" = {hostile_quoted} ] || set -- \"$@\" \"$a\"; done\n\
             exec {real} \"$@\"\n",
            seen = seen.display(),
            hostile_quoted = shell_quote(hostile),
            real = reference_bin()?.display()
        ),
    )
    .map_err(fail)?;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).map_err(fail)?;
    let audit = Audit::new(
        &live,
        Overrides { reference_program: Some(wrapper), reference_extra: vec![hostile.into()], ..Overrides::default() },
    )?;
    live.produce(200)?;
    live.wait_checkpoints(2)?;
    live.stop()?;
    catch_up(&audit, &live)?;
    verified_everything(&audit)?;
    let env = std::fs::read_to_string(seen.with_extension("env")).map_err(fail)?;
    if !env.contains(SECRET_REF) || env.contains(SECRET_DEST) || env.contains("CLINK_AUDIT_TEST_CLICKHOUSE") {
        return Err(fail(format!("the reference's environment is not its own alone:\n{env}")));
    }
    let args = std::fs::read_to_string(seen.with_extension("args")).map_err(fail)?;
    if !args.lines().any(|l| l == hostile) {
        return Err(fail(format!("the hostile argument was not passed as one: {args}")));
    }
    for pwned in ["PWNED", "PWNED2"] {
        if audit.state.join(pwned).exists() || live.dir.join(pwned).exists() || Path::new(pwned).exists() {
            return Err(fail("an argument was interpreted by a shell"));
        }
    }
    let page = audit.state.parent().unwrap().join("status.html");
    audit.command("status").arg("--html").arg(&page).output().map_err(fail)?;
    for path in files_under(&audit.state).into_iter().chain([page]) {
        let bytes = std::fs::read(&path).map_err(fail)?;
        let text = String::from_utf8_lossy(&bytes);
        if text.contains(SECRET_DEST) || text.contains(SECRET_REF) {
            return Err(fail(format!("a credential's value is in {}", path.display())));
        }
    }
    Ok(())
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else if p.is_file() && !p.components().any(|c| c.as_os_str() == "bundle") {
            out.push(p);
        }
    }
    out
}

/// A clink-reference-audit that sleeps 3 s first while `mark` exists, then is the real one.
fn slow_reference(live: &Live, mark: &Path) -> Result<PathBuf, Failed> {
    let path = live.dir.join("reference-slow");
    let script = format!(
        "#!/bin/sh\nif [ -e {} ]; then sleep 3; fi\nexec {} \"$@\"\n",
        mark.display(),
        reference_bin()?.display()
    );
    std::fs::write(&path, script).map_err(fail)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).map_err(fail)?;
    Ok(path)
}

/// Starts `clink-audit run` and waits until the ledger shows it inside `step`.
fn run_until_in(audit: &Audit, step: &str) -> Result<(Reaped, Json), Failed> {
    let mut runner = Reaped(audit.command("run").stdout(Stdio::null()).stderr(Stdio::piped()).spawn().map_err(fail)?);
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let ledger = audit.ledger().unwrap_or(Json::Null);
        if ledger["running"]["step"] == step {
            return Ok((runner, ledger["running"].clone()));
        }
        if Instant::now() > deadline || runner.0.try_wait().map_err(fail)?.is_some() {
            return Err(fail(format!("the runner was never seen in {step}: {}", ledger["running"])));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The last attempt's reason of checkpoint `ck`.
fn last_reason(audit: &Audit, ck: u64) -> Result<String, Failed> {
    let ledger = audit.ledger()?;
    let attempts = &ledger["audits"][ck.to_string()]["attempts"];
    Ok(attempts.as_array().and_then(|a| a.last()).map_or(String::new(), |a| a["reason"].to_string()))
}

/// Every audit's attempts' outcomes, oldest first.
fn attempt_outcomes(audit: &Audit) -> Result<BTreeMap<u64, Vec<String>>, Failed> {
    let ledger = audit.ledger()?;
    Ok(ledger["audits"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(ck, r)| {
            let outcomes = r["attempts"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|a| a["outcome"].as_str().unwrap_or("unfinished").to_string())
                .collect();
            (ck.parse().unwrap_or(0), outcomes)
        })
        .collect())
}

/// A variable the configuration names is not set: the audit is an error
/// naming it, its reference is never started, and once it is set the
/// retry after the backoff passes, with the failed attempt kept.
fn unset_credential(services: &BTreeMap<String, String>) -> Result<(), Failed> {
    let mut live = Live::start(Kind::Records, services, 20, 1500)?;
    live.wait_checkpoints(2)?;
    live.stop()?;
    let mut audit = Audit::new(&live, Overrides::default())?;
    let full = audit.env.clone();
    audit.env.retain(|(k, _)| k != "CLINK_AUDIT_TEST_REF_SECRET");
    let mut cmd = audit.command("run");
    cmd.env_remove("CLINK_AUDIT_TEST_REF_SECRET");
    expect_code(&cmd.output().map_err(fail)?, &[0], "run without the reference's variable")?;
    let outcomes = audit.outcomes()?;
    if outcomes.is_empty() || outcomes.values().any(|(o, _)| o != "error") {
        return Err(fail(format!("an unset variable did not make every audit an error: {outcomes:?}")));
    }
    let ck = *outcomes.keys().next().unwrap();
    let reason = last_reason(&audit, ck)?;
    if !reason.contains("CLINK_AUDIT_TEST_REF_SECRET") || !reason.contains("not set") {
        return Err(fail(format!("the error does not name the unset variable: {reason}")));
    }
    let ledger = audit.ledger()?;
    let steps = &ledger["audits"][ck.to_string()]["attempts"][0]["steps"];
    let reference = steps.as_array().and_then(|s| s.iter().find(|s| s["step"] == "reference"));
    if reference.is_none_or(|r| !r["exit_code"].is_null()) {
        return Err(fail(format!("the reference was started without its variable: {steps}")));
    }
    let (code, status) = audit.status()?;
    if code != 3 || status["state"] != "incomplete" {
        return Err(fail(format!("status {code} {}, expected 3 (incomplete)", status["state"])));
    }
    audit.env = full;
    std::thread::sleep(Duration::from_millis(1200));
    catch_up(&audit, &live)?;
    verified_everything(&audit)?;
    let attempts = attempt_outcomes(&audit)?;
    if attempts[&ck] != ["error", "passed"] && attempts[&ck] != ["error", "empty"] {
        return Err(fail(format!("checkpoint {ck}'s attempts: {:?}", attempts[&ck])));
    }
    Ok(())
}

/// Checkpoints that complete while a cycle runs are collected at once,
/// but at most four wait so; the rest are audited in a later cycle.
fn collected_early_bounded(services: &BTreeMap<String, String>) -> Result<(), Failed> {
    // Retention longer than the trial: what waits beyond the four is
    // audited later, never purged first (that is the retention trial's).
    // A checkpoint a second: a collection that takes longer than the gap
    // between two checkpoints is refused as racing one, and on a loaded
    // machine (CI's tests side by side) a copy took more than 300 ms, so
    // nothing was ever collected early. The slow reference's 3 s per audit
    // still lets more than four complete during the cycle.
    let mut live = Live::prepare(Kind::Records, services, 600, 1000)?;
    live.capture_retain = 600;
    live.run(None)?;
    let mark = live.dir.join("reference-slow.on");
    std::fs::write(&mark, b"").map_err(fail)?;
    let audit = Audit::new(
        &live,
        Overrides { reference_program: Some(slow_reference(&live, &mark)?), ..Overrides::default() },
    )?;
    live.wait_checkpoints(2)?;
    live.produce(200)?;
    let out = audit.run()?;
    expect_code(&out, &[0], "a cycle while the job checkpoints every 300 ms")?;
    let ledger = audit.ledger()?;
    let eligible: Vec<u64> =
        ledger["cycles"][0]["eligible"].as_array().map_or(Vec::new(), |a| a.iter().filter_map(Json::as_u64).collect());
    let newest_eligible = eligible.iter().max().copied().unwrap_or(0);
    let mid_cycle = live.completed().into_iter().filter(|ck| *ck > newest_eligible).count();
    let waiting: Vec<u64> = ledger["audits"]
        .as_object()
        .unwrap()
        .values()
        .filter(|r| {
            let a = r["attempts"].as_array().and_then(|a| a.last());
            a.is_some_and(|a| a["ended_ms"].is_null() && a["steps"].as_array().is_some_and(|s| s.len() == 1))
        })
        .filter_map(|r| r["checkpoint"].as_u64())
        .collect();
    if mid_cycle <= 4 || waiting.len() != 4 {
        return Err(fail(format!(
            "{mid_cycle} checkpoints completed during the cycle (more than 4 needed); {} wait collected early \
             (exactly 4 expected): {waiting:?}",
            waiting.len()
        )));
    }
    if waiting.iter().any(|ck| *ck <= newest_eligible) {
        return Err(fail(format!("an eligible checkpoint was only collected: {waiting:?} of {eligible:?}")));
    }
    // Every checkpoint the cycle audits was collected before the first audit
    // was published: slow references ahead of one do not leave its evidence
    // to the job's retention.
    let events = std::fs::read_to_string(audit.state.join("events.ndjson")).map_err(fail)?;
    let events: Vec<Json> = events.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let first_published = events.iter().position(|e| e["event"] == "audit-published").unwrap_or(events.len());
    let ahead: Vec<u64> = events[..first_published]
        .iter()
        .filter(|e| e["event"] == "collected-ahead")
        .filter_map(|e| e["checkpoint"].as_u64())
        .collect();
    if eligible.len() < 2 || eligible.iter().any(|ck| !ahead.contains(ck)) {
        return Err(fail(format!(
            "the cycle's checkpoints {eligible:?} were not all collected before its first audit was published: {ahead:?}"
        )));
    }
    live.stop()?;
    std::fs::remove_file(&mark).map_err(fail)?;
    catch_up(&audit, &live)?;
    verified_everything(&audit)
}

/// A held state the reference's artifact does not name by its hash: the
/// increment is an error (the runner cannot vouch for where it started),
/// and the retry from the real state passes.
fn state_in_mismatch(services: &BTreeMap<String, String>) -> Result<(), Failed> {
    let mut live = Live::start(Kind::Windows, services, 20, 1500)?;
    let mark = live.dir.join("tamper.on");
    // With the mark, the reference is handed a copy of the held state with
    // one more newline: the same windows, other bytes.
    let wrapper = live.dir.join("reference-tampering");
    let script = format!(
        "#!/bin/sh\nif [ -e {mark} ]; then\n  n=0; for a in \"$@\"; do shift; case \"$a\" in\n    \
         --state-in=*) f=\"${{a#--state-in=}}\"; {{ cat \"$f\"; echo; }} > \"$f.copy\"; set -- \"$@\" \
         \"--state-in=$f.copy\"; n=1;;\n    *) set -- \"$@\" \"$a\";;\n  esac; done\n  \
         [ $n = 1 ] && touch {mark}.used\nfi\nexec {real} \"$@\"\n",
        mark = mark.display(),
        real = reference_bin()?.display()
    );
    std::fs::write(&wrapper, script).map_err(fail)?;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).map_err(fail)?;
    let audit = Audit::new(&live, Overrides { reference_program: Some(wrapper), ..Overrides::default() })?;
    live.wait_checkpoints(2)?;
    catch_up(&audit, &live)?;
    live.produce(300)?;
    live.wait_checkpoints(2)?;
    live.stop()?;
    std::fs::write(&mark, b"").map_err(fail)?;
    let before: Vec<u64> = audit.outcomes()?.keys().copied().collect();
    expect_code(&audit.run()?, &[0], "run with a tampered state")?;
    if !mark.with_extension("on.used").exists() {
        return Err(fail("no increment was given a held state to tamper with"));
    }
    let outcomes = audit.outcomes()?;
    let new: Vec<(&u64, &(String, usize))> = outcomes.iter().filter(|(ck, _)| !before.contains(ck)).collect();
    let Some((ck, (outcome, _))) = new.first() else { return Err(fail("nothing new was audited")) };
    let reason = last_reason(&audit, **ck)?;
    if outcome != "error" || !reason.contains("does not say it started from the held state") {
        return Err(fail(format!("checkpoint {ck}: {outcome}: {reason} (an error naming the held state expected)")));
    }
    std::fs::remove_file(&mark).map_err(fail)?;
    std::thread::sleep(Duration::from_millis(1200));
    catch_up(&audit, &live)?;
    verified_everything(&audit)
}

/// The pid the ledger recorded for the orphaned child belongs to another
/// process now: it is left alone, said so, and the audit resumes.
fn reused_pid(services: &BTreeMap<String, String>) -> Result<(), Failed> {
    let mut live = Live::start(Kind::Records, services, 20, 1500)?;
    let mark = live.dir.join("reference-slow.on");
    std::fs::write(&mark, b"").map_err(fail)?;
    let audit = Audit::new(
        &live,
        Overrides { reference_program: Some(slow_reference(&live, &mark)?), ..Overrides::default() },
    )?;
    live.wait_checkpoints(2)?;
    live.stop()?;
    let (mut runner, running) = run_until_in(&audit, "reference")?;
    runner.0.kill().map_err(fail)?;
    runner.0.wait().map_err(fail)?;
    let pgid = running["child"]["pid"].as_u64().unwrap() as i32;
    // SAFETY: kill(2) of the process group this trial's runner started.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
    // A process of another program now holds the pid the ledger names; the
    // kernel will not hand out a chosen pid, so the ledger is pointed at it.
    // It leads a process group of its own, as a child of another runner or
    // a shell's job would: killing the recorded group would kill it. Start
    // times are in clock ticks (10 ms): the bystander starts ticks after the
    // recorded child, or it would be indistinguishable from it by design.
    std::thread::sleep(Duration::from_millis(50));
    let bystander = Reaped(
        std::os::unix::process::CommandExt::process_group(&mut Command::new("sleep"), 0)
            .arg("120")
            .spawn()
            .map_err(fail)?,
    );
    let path = audit.state.join("ledger.json");
    let mut ledger = audit.ledger()?;
    ledger["running"]["child"]["pid"] = json!(bystander.0.id());
    std::fs::write(&path, serde_json::to_vec(&ledger).unwrap()).map_err(fail)?;
    std::fs::remove_file(&mark).map_err(fail)?;
    expect_code(&audit.run()?, &[0], "the runner after a crash")?;
    if !alive(bystander.0.id()) {
        return Err(fail("the runner signalled a process that merely reuses the orphan's pid"));
    }
    let events = std::fs::read_to_string(audit.state.join("events.ndjson")).map_err(fail)?;
    let said = events.lines().any(|l| l.contains("\"orphan\"") && l.contains("another process"));
    if !said {
        return Err(fail(format!("the reused pid was not recorded: {events}")));
    }
    catch_up(&audit, &live)?;
    verified_everything(&audit)
}

/// The windowed job killed at a protocol step and resumed: the chain goes
/// on from the state held at the restore point.
fn windows_killed_and_resumed(services: &BTreeMap<String, String>) -> Result<(), Failed> {
    const AT: u64 = 4;
    let mut live = Live::prepare(Kind::Windows, services, 20, 1500)?;
    let audit = Audit::new(&live, Overrides::default())?;
    live.run(Some(&format!("coordinator.after_completed_marker@{AT}")))?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut job = live.child.take().ok_or("no job")?;
    while job.try_wait().map_err(fail)?.is_none() {
        if Instant::now() > deadline {
            let _ = job.kill();
            return Err(fail(format!("the job was not killed at checkpoint {AT} within 60 s")));
        }
        live.produce(100)?;
        std::thread::sleep(Duration::from_millis(500));
    }
    if live.completed().last() != Some(&AT) {
        return Err(fail(format!("killed at {AT}, the job completed {:?}", live.completed())));
    }
    catch_up(&audit, &live)?;
    let held = audit.ledger()?["chain"]["held"].clone();
    if !held.as_array().is_some_and(|h| h.contains(&json!(AT))) {
        return Err(fail(format!("the state at {AT} is not held: {held}")));
    }
    live.run(None)?;
    live.produce(300)?;
    live.wait_checkpoints(3)?;
    live.stop()?;
    let restored = std::fs::read_to_string(live.dir.join(format!("ck/_jobs/{}/RESTORED", live.kind.id())))
        .map_err(|e| fail(format!("the resumed job wrote no RESTORED record: {e}")))?;
    catch_up(&audit, &live)?;
    verified_everything(&audit)?;
    let ledger = audit.ledger()?;
    let after = ledger["audits"]
        .as_object()
        .unwrap()
        .values()
        .find(|r| r["checkpoint"].as_u64().is_some_and(|c| c > AT))
        .ok_or("nothing above the restore point was audited")?;
    let since = after["attempts"].as_array().and_then(|a| a.last()).map(|a| a["since"].clone());
    if since != Some(json!(AT)) {
        return Err(fail(format!(
            "the first audit after the restore ({}) did not start from the state held at {AT}: since {since:?}; \
             RESTORED {restored}",
            after["checkpoint"]
        )));
    }
    Ok(())
}

/// Latest-only over a windowed job left too far behind: no held state is
/// within reach, so the audit is partial and status says where the chain broke.
fn broken_chain(services: &BTreeMap<String, String>) -> Result<(), Failed> {
    let mut live = Live::prepare(Kind::Windows, services, 30, 500)?;
    live.capture_retain = 4;
    live.run(None)?;
    let audit = Audit::new(&live, Overrides { selection: "latest-only", ..Overrides::default() })?;
    live.wait_checkpoints(2)?;
    expect_code(&audit.run()?, &[0], "the first cycle")?;
    // Checkpoints completing during the cycle were collected and wait; the
    // one latest-only chose seeds the chain.
    let seeded = audit.outcomes()?;
    if !seeded.values().any(|(o, _)| o == "passed" || o == "empty") {
        return Err(fail(format!("the chain was not seeded: {seeded:?}")));
    }
    live.produce(300)?;
    live.wait_checkpoints(12)?;
    live.stop()?;
    expect_code(&audit.run()?, &[0], "the cycle after the job ran on")?;
    let outcomes = audit.outcomes()?;
    let newest = *outcomes.keys().next_back().unwrap();
    let ledger = audit.ledger()?;
    let broken = ledger["chain"]["broken"].as_str().unwrap_or("");
    if outcomes[&newest].0 != "partial" || !broken.contains(&format!("broken at checkpoint {newest}")) {
        return Err(fail(format!(
            "checkpoint {newest}: {:?}; chain {} (partial, broken at {newest} expected)",
            outcomes[&newest], ledger["chain"]
        )));
    }
    let (code, status) = audit.status()?;
    if code != 3 || status["chain"]["broken"].as_str() != Some(broken) || status["state"] != "incomplete" {
        return Err(fail(format!("status {code} {}: chain {}", status["state"], status["chain"])));
    }
    let text = audit.command("status").args(["--cycle-within-s", "3600"]).output().map_err(fail)?;
    if !String::from_utf8_lossy(&text.stdout).contains(&format!("broken at checkpoint {newest}")) {
        return Err(fail(format!(
            "status's text does not say where the chain broke: {}",
            String::from_utf8_lossy(&text.stdout)
        )));
    }
    Ok(())
}

/// Whether a process is running (present and not a zombie).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| !s.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')))
}

/// What starts a stopped server again: its argv, working directory and environment.
#[derive(Clone)]
struct Relaunch {
    argv: Vec<std::ffi::OsString>,
    cwd: PathBuf,
    env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
}

/// A service of this trial's own (`gates/services start --only NAME`),
/// stopped for real and started again on the same port with the same
/// command line, working directory, environment and data.
struct Dedicated {
    env_file: PathBuf,
    vars: BTreeMap<String, String>,
    pid: u32,
    relaunch: Option<Relaunch>,
    restarted: Option<Reaped>,
}

impl Dedicated {
    fn start(name: &str, dir: &Path) -> Result<Dedicated, Failed> {
        std::fs::create_dir_all(dir).map_err(fail)?;
        let env_file = dir.join(format!("{name}.env"));
        let out = Command::new(workspace().join("gates/services"))
            .args(["start", "--only", name, "--env"])
            .arg(&env_file)
            .output()
            .map_err(fail)?;
        expect_code(&out, &[0], &format!("gates/services start --only {name}"))?;
        let vars: BTreeMap<String, String> = std::fs::read_to_string(&env_file)
            .map_err(fail)?
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let key = if name == "clickhouse" { "CLINK_CLICKHOUSE_PID" } else { "CLINK_KAFKA_PID" };
        let pid = vars.get(key).and_then(|p| p.parse().ok()).ok_or_else(|| fail(format!("no {key}")))?;
        Ok(Dedicated { env_file, vars, pid, relaunch: None, restarted: None })
    }

    /// SIGTERM, as a service manager stops it; SIGKILL after 30 s.
    fn stop(&mut self) -> Result<(), Failed> {
        let argv: Vec<std::ffi::OsString> = std::fs::read(format!("/proc/{}/cmdline", self.pid))
            .map_err(fail)?
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| std::ffi::OsStr::from_bytes(a).to_os_string())
            .collect();
        let cwd = std::fs::read_link(format!("/proc/{}/cwd", self.pid)).map_err(fail)?;
        let env = std::fs::read(format!("/proc/{}/environ", self.pid))
            .map_err(fail)?
            .split(|b| *b == 0)
            .filter_map(|kv| {
                let i = kv.iter().position(|b| *b == b'=')?;
                Some((
                    std::ffi::OsStr::from_bytes(&kv[..i]).to_os_string(),
                    std::ffi::OsStr::from_bytes(&kv[i + 1..]).to_os_string(),
                ))
            })
            .collect();
        self.relaunch = Some(Relaunch { argv, cwd, env });
        // SAFETY: kill(2) of the server this trial started.
        unsafe { libc::kill(self.pid as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(30);
        while alive(self.pid) {
            if Instant::now() > deadline {
                // SAFETY: as above.
                unsafe { libc::kill(self.pid as i32, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// The same server again; waits until `answers` says it answers.
    fn restart(&mut self, answers: impl Fn(&Dedicated) -> bool) -> Result<(), Failed> {
        let Relaunch { argv, cwd, env } = self.relaunch.clone().ok_or("restart before stop")?;
        let log =
            std::fs::OpenOptions::new().create(true).append(true).open(cwd.join("restarted.log")).map_err(fail)?;
        let child = Command::new(&argv[0])
            .args(&argv[1..])
            .current_dir(&cwd)
            .env_clear()
            .envs(env)
            .stdout(log.try_clone().map_err(fail)?)
            .stderr(log)
            .spawn()
            .map_err(fail)?;
        self.pid = child.id();
        self.restarted = Some(Reaped(child));
        let deadline = Instant::now() + Duration::from_secs(90);
        while !answers(self) {
            if Instant::now() > deadline {
                return Err(fail(format!("{} did not answer within 90 s of its restart", argv[0].to_string_lossy())));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(())
    }
}

impl Drop for Dedicated {
    fn drop(&mut self) {
        drop(self.restarted.take());
        let _ = Command::new(workspace().join("gates/services")).arg("stop").arg("--env").arg(&self.env_file).output();
    }
}

fn clickhouse_answers(d: &Dedicated) -> bool {
    Endpoint::parse(&d.vars["CLINK_CLICKHOUSE_HTTP"])
        .ok()
        .and_then(|e| Connection::open(&e).ok())
        .is_some_and(|c| c.execute("a ping", "SELECT 1").is_ok())
}

fn kafka_answers(d: &Dedicated) -> bool {
    Command::new("python3")
        .arg(workspace().join("gates/services.d/kafka-probe.py"))
        .args([&d.vars["CLINK_KAFKA_BOOTSTRAP"], "--timeout", "2"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The dependency trials' backoff: long enough that a cycle started at once
/// finds a partial audit not yet due.
const BACKOFF: (u64, u64) = (8, 16);

/// Every audit's attempts are one per cycle, each after the backoff of the
/// one before (the ledger's clock is in seconds, as the runner's rule is).
fn backoff_respected(audit: &Audit, (initial, max): (u64, u64)) -> Result<(), Failed> {
    let ledger = audit.ledger()?;
    for (ck, record) in ledger["audits"].as_object().into_iter().flatten() {
        let attempts = record["attempts"].as_array().cloned().unwrap_or_default();
        for (n, pair) in attempts.windows(2).enumerate() {
            let (prev, next) = (&pair[0], &pair[1]);
            let delay = (initial << n).min(max);
            let ended = prev["ended_ms"].as_u64().ok_or_else(|| fail(format!("{ck}: an attempt never ended")))? / 1000;
            let started = next["started_ms"].as_u64().unwrap_or(0) / 1000;
            if started < ended + delay || next["cycle"].as_u64() <= prev["cycle"].as_u64() {
                return Err(fail(format!(
                    "checkpoint {ck}: attempt {} (cycle {}, at {started} s) came {} s after the one before \
                     (cycle {}, ended {ended} s); the backoff was {delay} s",
                    n + 2,
                    next["cycle"],
                    started.saturating_sub(ended),
                    prev["cycle"]
                )));
            }
        }
    }
    Ok(())
}

/// Sleeps until every audit waiting for a retry is due.
fn wait_until_due(audit: &Audit) -> Result<(), Failed> {
    let ledger = audit.ledger()?;
    let due = ledger["audits"].as_object().into_iter().flatten().filter_map(|(_, r)| r["next_due_s"].as_u64()).max();
    if let Some(due) = due {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_err(fail)?.as_secs();
        std::thread::sleep(Duration::from_secs(due.saturating_sub(now) + 1));
    }
    Ok(())
}

/// A dependency stopped while a cycle runs: the audits it fails are
/// partial, not tried again before their backoff, and pass once it is back.
fn dependency_stopped(services: &BTreeMap<String, String>, which: &str) -> Result<(), Failed> {
    let dir = scratch().join(unique(&format!("dedicated_{which}")));
    let mut dedicated = Dedicated::start(which, &dir)?;
    let mut mine = services.clone();
    for (k, v) in &dedicated.vars {
        if k.starts_with(if which == "clickhouse" { "CLINK_CLICKHOUSE_" } else { "CLINK_KAFKA_" }) {
            mine.insert(k.clone(), v.clone());
        }
    }
    let mut live = Live::start(Kind::Records, &mine, 20, 1500)?;
    live.wait_checkpoints(1)?;
    live.produce(300)?;
    live.wait_checkpoints(2)?;
    live.stop()?;
    let (step, sub) = if which == "clickhouse" { ("reconcile", "incident-reconcile") } else { ("reference", "") };
    let mark = live.dir.join("reference-slow.on");
    let mut audit = Audit::new(
        &live,
        Overrides {
            reference_program: Some(slow_reference(&live, &mark)?),
            reference_extra: vec!["--deadline-ms=8000".into()],
            backoff: BACKOFF,
            ..Overrides::default()
        },
    )?;
    if sub.is_empty() {
        std::fs::write(&mark, b"").map_err(fail)?;
    } else {
        audit.slow(sub, 3)?;
    }
    let (mut runner, running) = run_until_in(&audit, step)?;
    dedicated.stop()?;
    let ck = running["checkpoint"].as_u64().unwrap();
    let out = runner.0.wait().map_err(fail)?;
    if out.code() != Some(0) {
        return Err(fail(format!("the cycle with {which} stopped ended {out:?}")));
    }
    let outcomes = audit.outcomes()?;
    let reason = last_reason(&audit, ck)?;
    if outcomes[&ck].0 != "partial" {
        return Err(fail(format!("checkpoint {ck} with {which} stopped in its {step}: {:?}: {reason}", outcomes[&ck])));
    }
    // A cycle at once: what is not due yet is not tried again.
    let before = audit.outcomes()?;
    expect_code(&audit.run()?, &[0], "a cycle at once")?;
    let after = audit.outcomes()?;
    let held_back = before.iter().filter(|(_, (o, _))| o == "partial").any(|(c, (_, n))| after[c].1 == *n);
    if !held_back {
        return Err(fail(format!("the cycle right after tried every partial audit again: {before:?} then {after:?}")));
    }
    backoff_respected(&audit, BACKOFF)?;
    let (code, status) = audit.status()?;
    if code != 3 || status["state"] != "incomplete" {
        return Err(fail(format!("status {code} {} with {which} down, expected 3 (incomplete)", status["state"])));
    }
    dedicated.restart(if which == "clickhouse" { clickhouse_answers } else { kafka_answers })?;
    if mark.exists() {
        std::fs::remove_file(&mark).map_err(fail)?;
    }
    audit.slow("none", 0)?;
    wait_until_due(&audit)?;
    catch_up(&audit, &live)?;
    verified_everything(&audit)?;
    backoff_respected(&audit, BACKOFF)?;
    let attempts = &attempt_outcomes(&audit)?[&ck];
    let (first, rest) = attempts.split_first().ok_or("no attempt")?;
    let (_, between) = rest.split_last().ok_or("one attempt only")?;
    if first != "partial" || between.iter().any(|o| o != "partial") {
        return Err(fail(format!(
            "checkpoint {ck}'s attempts: {attempts:?} (partial until it is back, then verified)"
        )));
    }
    Ok(())
}

fn main() {
    let mut args = Arguments::from_args();
    // Most of a scenario's time is waiting (checkpoint intervals, backoffs, a
    // dedicated broker starting): four at once keep two cores busy.
    if args.test_threads.is_none() {
        args.test_threads = Some(4);
    }
    type Scenario = fn(&BTreeMap<String, String>) -> Result<(), Failed>;
    // The longest first (the two that stop a dedicated service, then the
    // runner's kills), so the suite does not end waiting on one of them.
    let scenarios: Vec<(&str, Scenario)> = vec![
        ("dependency::kafka-stopped-mid-cycle", |s| dependency_stopped(s, "kafka")),
        ("dependency::clickhouse-stopped-mid-cycle", |s| dependency_stopped(s, "clickhouse")),
        ("runner::at-most-four-collected-early", collected_early_bounded),
        ("runner::killed-in-each-step", killed_in_each_step),
        ("records::healthy-while-polling", |s| healthy(Kind::Records, s)),
        ("windows::healthy-chain", |s| healthy(Kind::Windows, s)),
        ("records::row-added-is-a-discrepancy-until-acknowledged", discrepancy),
        ("records::row-deleted-is-a-discrepancy-naming-its-key", row_deleted),
        ("runner::second-runner-refused", second_runner),
        ("selection::latest-only-skips", latest_only),
        ("selection::retention-outruns-expired", expired),
        ("bounds::disk-budget-starts-nothing-deletes-nothing", disk_budget),
        ("credentials-and-hostile-arguments", credentials_and_arguments),
        ("credentials::unset-variable-is-an-error-then-retried", unset_credential),
        ("runner::reused-pid-left-alone", reused_pid),
        ("windows::state-in-not-the-held-one-is-an-error", state_in_mismatch),
        ("windows::killed-at-a-fault-point-chain-resumes", windows_killed_and_resumed),
        ("windows::broken-chain-reported-where-it-broke", broken_chain),
    ];
    let services = services();
    // The reference is built before any job starts: a job's retention would
    // outrun a runner that waited for the build.
    let missing = services.is_err();
    let services = services.and_then(|s| reference_bin().map(|_| s).map_err(|e| format!("the reference: {e:?}")));
    let trials = scenarios
        .into_iter()
        .map(|(name, f)| {
            let services = services.clone();
            let trial = Trial::test(name, move || match &services {
                Ok(s) => f(s),
                Err(e) => Err(fail(e)),
            });
            if missing {
                trial.with_ignored_flag(true).with_kind("service")
            } else {
                trial
            }
        })
        .collect();
    libtest_mimic::run(&args, trials).exit();
}
