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
}

impl Live {
    fn start(kind: Kind, services: &BTreeMap<String, String>, retain: u32, interval_ms: u64) -> Result<Live, Failed> {
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
        live.run(None)?;
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
            .args(["--retain-checkpoints", &self.retain.to_string(), "--capture-retain-epochs", "40"])
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
            "backoff": {"initial_s": 1, "max_s": 4},
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
        if outcomes.get(&newest).is_some_and(|(o, _)| o != "unfinished")
            && outcomes.values().all(|(o, _)| o != "unfinished")
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
    expect_code(&unknown, &[2], "acknowledge of an unknown audit")
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
    let mut live = Live::start(Kind::Records, services, 1, 700)?;
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

fn main() {
    let mut args = Arguments::from_args();
    if args.test_threads.is_none() {
        args.test_threads = Some(2);
    }
    type Scenario = fn(&BTreeMap<String, String>) -> Result<(), Failed>;
    let scenarios: Vec<(&str, Scenario)> = vec![
        ("records::healthy-while-polling", |s| healthy(Kind::Records, s)),
        ("windows::healthy-chain", |s| healthy(Kind::Windows, s)),
        ("records::row-added-is-a-discrepancy-until-acknowledged", discrepancy),
        ("runner::second-runner-refused", second_runner),
        ("runner::killed-in-each-step", killed_in_each_step),
        ("selection::latest-only-skips", latest_only),
        ("selection::retention-outruns-expired", expired),
        ("bounds::disk-budget-starts-nothing-deletes-nothing", disk_budget),
        ("credentials-and-hostile-arguments", credentials_and_arguments),
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
