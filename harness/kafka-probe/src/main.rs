//! kafka-txn-probe: measures what a Kafka-protocol server implements of
//! transactions, with the client the sink uses (clink_connectors::kafka_txn)
//! and the engine's log reader at both isolation levels. Each row is one request
//! or one observable consequence, and says what was seen.
//!
//! It owns the measurement only: it creates fresh topics named
//! `probe-<pid>-<n>-<what>` (one partition, by CreateTopics: a broker that
//! makes topics on first use is not needed) on the broker it is given,
//! which must be on 127.0.0.1, and writes only to them.
//!
//! usage: kafka-txn-probe BOOTSTRAP [--json] [--expiry-wait SECONDS]
//!        kafka-txn-probe --hold BOOTSTRAP TRANSACTIONAL_ID TOPIC
//!   --hold (used by the probe itself): opens a transaction, sends three
//!   records, prepares, prints `identity=ID/EPOCH` and `prepared`, and waits
//!   to be killed.
//! Exit: 0 every row measured; 1 a row could not be measured; 2 bad usage;
//! 3 the broker did not answer ApiVersions.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use clink_connectors::kafka::{Isolation, LogReader, LogWriter};
use clink_connectors::kafka_txn::orphan::{self, Settlement};
use clink_connectors::kafka_txn::wire::{api, code};
use clink_connectors::kafka_txn::{ProducerIdentity, TxnConfig, TxnError, TxnErrorClass, TxnProducer};

const SHORT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Yes,
    No,
    Unmeasured,
}

struct Row {
    check: String,
    verdict: Verdict,
    measured: String,
}

struct Probe {
    bootstrap: String,
    topics: u32,
    rows: Vec<Row>,
}

impl Probe {
    fn row(&mut self, check: &str, verdict: Verdict, measured: impl Into<String>) {
        self.rows.push(Row { check: check.to_string(), verdict, measured: measured.into() });
    }

    /// A new topic of one partition; a broker that cannot make one leaves
    /// the rows that need it unmeasured, with the reason.
    fn fresh(&mut self, what: &str) -> Result<String, String> {
        self.topics += 1;
        let topic = format!("probe-{}-{}-{what}", std::process::id(), self.topics);
        LogWriter::connect(&self.bootstrap)
            .and_then(|w| w.ensure_topic(&topic, 1))
            .map_err(|e| format!("creating topic {topic}: {e}"))?;
        Ok(topic)
    }

    fn config(&self, id: &str) -> TxnConfig {
        let mut c = TxnConfig::new(&self.bootstrap, id);
        c.request_timeout = SHORT;
        c
    }
}

/// Every record of partition 0 a reader at `isolation` sees, as text.
fn read_all(bootstrap: &str, topic: &str, isolation: &str) -> Result<Vec<String>, String> {
    let isolation = Isolation::parse(isolation).ok_or_else(|| format!("no isolation level {isolation:?}"))?;
    let reader = LogReader::connect(bootstrap, topic, isolation, "clink-kafka-txn-probe").map_err(|e| e.to_string())?;
    let payloads = reader.read_to_end(SHORT).map_err(|e| e.to_string())?;
    Ok(payloads.iter().map(|p| String::from_utf8_lossy(p).into_owned()).collect())
}

/// One transaction of `records` payloads, committed or aborted; its identity.
fn transaction(p: &TxnProducer, topic: &str, records: &[&str], commit: bool) -> Result<(), TxnError> {
    p.begin()?;
    for r in records {
        p.send(topic, Some(0), b"k", r.as_bytes())?;
    }
    p.prepare()?;
    if commit {
        p.commit()
    } else {
        p.abort()
    }
}

fn short(e: &TxnError) -> String {
    let text = e.to_string();
    format!("{:?}: {}", e.class(), text.chars().take(160).collect::<String>())
}

fn identity_text(p: &TxnProducer) -> String {
    match p.identity(Duration::from_millis(500)) {
        Some((id, state)) => format!("producer {}/{} ({state})", id.producer_id, id.epoch),
        None => "no identity reported".into(),
    }
}

fn advertised(probe: &mut Probe) -> bool {
    let apis = match orphan::broker_apis(&probe.bootstrap, SHORT) {
        Ok(a) => a,
        Err(e) => {
            probe.row("ApiVersions", Verdict::No, short(&e));
            return false;
        }
    };
    for (name, key) in [
        ("InitProducerId", api::INIT_PRODUCER_ID),
        ("AddPartitionsToTxn", api::ADD_PARTITIONS_TO_TXN),
        ("EndTxn", api::END_TXN),
        ("DescribeTransactions", api::DESCRIBE_TRANSACTIONS),
        ("ListTransactions", api::LIST_TRANSACTIONS),
        ("DescribeProducers", api::DESCRIBE_PRODUCERS),
        ("CreateTopics", api::CREATE_TOPICS),
    ] {
        match apis.range(key) {
            Some(r) => probe.row(&format!("advertises {name}"), Verdict::Yes, format!("v{}..v{}", r.min, r.max)),
            None => probe.row(&format!("advertises {name}"), Verdict::No, "absent from ApiVersions"),
        }
    }
    true
}

fn commit_abort_and_isolation(probe: &mut Probe) {
    let topic = match probe.fresh("isolation") {
        Ok(t) => t,
        Err(e) => return probe.row("init_transactions", Verdict::Unmeasured, e),
    };
    let id = format!("{topic}-txn");
    let p = match TxnProducer::open(probe.config(&id)) {
        Ok(p) => {
            probe.row("init_transactions", Verdict::Yes, identity_text(&p));
            p
        }
        Err(e) => {
            probe.row("init_transactions", Verdict::No, short(&e));
            return;
        }
    };
    match transaction(&p, &topic, &["c0", "c1", "c2"], true) {
        Ok(()) => probe.row("commit (AddPartitionsToTxn, EndTxn commit)", Verdict::Yes, identity_text(&p)),
        Err(e) => return probe.row("commit (AddPartitionsToTxn, EndTxn commit)", Verdict::No, short(&e)),
    }
    match transaction(&p, &topic, &["a0", "a1", "a2"], false) {
        Ok(()) => probe.row("abort (EndTxn abort)", Verdict::Yes, identity_text(&p)),
        Err(e) => return probe.row("abort (EndTxn abort)", Verdict::No, short(&e)),
    }
    // An open transaction: prepared, neither committed nor aborted yet.
    let open = p.begin().and_then(|()| p.send(&topic, Some(0), b"k", b"o0")).and_then(|()| p.prepare().map(|_| ()));
    let committed = read_all(&probe.bootstrap, &topic, "read_committed");
    let uncommitted = read_all(&probe.bootstrap, &topic, "read_uncommitted");
    match (&committed, &uncommitted) {
        (Ok(c), Ok(u)) => {
            let has = |v: &[String], x: &str| v.iter().any(|s| s == x);
            let hides = has(c, "c0") && !has(c, "a0");
            probe.row("read_committed hides aborted records", verdict(hides), format!("read_committed saw {c:?}"));
            let shows = has(u, "a0") && has(u, "c0");
            probe.row("read_uncommitted shows aborted records", verdict(shows), format!("read_uncommitted saw {u:?}"));
            if open.is_ok() {
                probe.row(
                    "read_committed hides an open transaction",
                    verdict(!has(c, "o0")),
                    format!("o0 seen: {}", has(c, "o0")),
                );
            } else if let Err(e) = &open {
                probe.row("read_committed hides an open transaction", Verdict::Unmeasured, short(e));
            }
        }
        (c, u) => probe.row("read_committed / read_uncommitted", Verdict::Unmeasured, format!("{c:?} / {u:?}")),
    }
    let _ = p.abort();
}

fn verdict(yes: bool) -> Verdict {
    if yes {
        Verdict::Yes
    } else {
        Verdict::No
    }
}

fn fencing(probe: &mut Probe) {
    let topic = match probe.fresh("fence") {
        Ok(t) => t,
        Err(e) => return probe.row("a second init fences the first producer", Verdict::Unmeasured, e),
    };
    let id = format!("{topic}-txn");
    let (old, new) = match (TxnProducer::open(probe.config(&id)), TxnProducer::open(probe.config(&id))) {
        (Ok(a), Ok(b)) => (a, b),
        (a, b) => {
            let why = format!("{:?} / {:?}", a.err().map(|e| short(&e)), b.err().map(|e| short(&e)));
            return probe.row("a second init fences the first producer", Verdict::Unmeasured, why);
        }
    };
    let (a, b) = (identity_text(&old), identity_text(&new));
    match transaction(&old, &topic, &["zombie"], true) {
        Err(e) if e.class() == TxnErrorClass::Fenced => probe.row(
            "a second init fences the first producer",
            Verdict::Yes,
            format!("first {a}, second {b}; {}", short(&e)),
        ),
        Err(e) => probe.row(
            "a second init fences the first producer",
            Verdict::No,
            format!("first {a}, second {b}; {}", short(&e)),
        ),
        Ok(()) => probe.row(
            "a second init fences the first producer",
            Verdict::No,
            format!("first {a}, second {b}; the first still committed"),
        ),
    }
}

fn expiry(probe: &mut Probe, wait: Duration) {
    let check = "a transaction open past its timeout is aborted";
    let topic = match probe.fresh("expiry") {
        Ok(t) => t,
        Err(e) => return probe.row(check, Verdict::Unmeasured, e),
    };
    let id = format!("{topic}-txn");
    let mut config = probe.config(&id);
    config.transaction_timeout = Duration::from_secs(2);
    let p = match TxnProducer::open(config) {
        Ok(p) => p,
        Err(e) => return probe.row(check, Verdict::Unmeasured, short(&e)),
    };
    let prepared = p.begin().and_then(|()| p.send(&topic, Some(0), b"k", b"late")).and_then(|()| p.prepare());
    if let Err(e) = prepared {
        return probe.row(check, Verdict::Unmeasured, short(&e));
    }
    std::thread::sleep(wait);
    let commit = p.commit();
    let seen = read_all(&probe.bootstrap, &topic, "read_committed");
    let visible = seen.as_ref().is_ok_and(|s| s.iter().any(|x| x == "late"));
    let said = format!(
        "transaction.timeout.ms 2000, commit {} s later: {}; read_committed {seen:?}",
        wait.as_secs(),
        commit.as_ref().map_or_else(short, |()| "accepted".into())
    );
    probe.row(check, verdict(commit.is_err() && !visible), said);
}

/// Starts `--hold` in a child process and waits for its identity.
fn hold(probe: &Probe, id: &str, topic: &str) -> Result<(Child, ProducerIdentity), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = Command::new(exe)
        .args(["--hold", &probe.bootstrap, id, topic])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let out = child.stdout.take().ok_or("no stdout")?;
    let mut identity = None;
    for line in BufReader::new(out).lines() {
        let line = line.map_err(|e| e.to_string())?;
        if let Some(rest) = line.strip_prefix("identity=") {
            identity = parse_identity(rest);
        }
        if line == "prepared" {
            break;
        }
        if line.starts_with("error=") {
            let _ = child.kill();
            return Err(line);
        }
    }
    match identity {
        Some(i) => Ok((child, i)),
        None => {
            let _ = child.kill();
            Err("the holder printed no identity".into())
        }
    }
}

fn parse_identity(text: &str) -> Option<ProducerIdentity> {
    let (id, epoch) = text.split_once('/')?;
    Some(ProducerIdentity { producer_id: id.parse().ok()?, epoch: epoch.parse().ok()? })
}

fn killed(mut child: Child) {
    let _ = child.kill(); // SIGKILL
    let _ = child.wait();
}

fn kill_then_reopen(probe: &mut Probe) {
    let topic = match probe.fresh("kill") {
        Ok(t) => t,
        Err(e) => return probe.row("SIGKILL mid-transaction, then init", Verdict::Unmeasured, e),
    };
    let id = format!("{topic}-txn");
    let (child, orphan) = match hold(probe, &id, &topic) {
        Ok(h) => h,
        Err(e) => return probe.row("SIGKILL mid-transaction, then init", Verdict::Unmeasured, e),
    };
    killed(child);
    let t0 = Instant::now();
    let reopened = TxnProducer::open(probe.config(&id));
    let took = t0.elapsed().as_millis();
    let p = match reopened {
        Ok(p) => p,
        Err(e) => {
            return probe.row(
                "SIGKILL mid-transaction, then init",
                Verdict::No,
                format!("after {took} ms: {}", short(&e)),
            )
        }
    };
    let new = identity_text(&p);
    probe.row(
        "SIGKILL mid-transaction, then init",
        Verdict::Yes,
        format!("orphan {}/{}, new {new}, init took {took} ms", orphan.producer_id, orphan.epoch),
    );
    let seen = read_all(&probe.bootstrap, &topic, "read_committed");
    let hidden = seen.as_ref().is_ok_and(|s| s.is_empty());
    probe.row(
        "the killed producer's records are aborted by the new init",
        verdict(hidden),
        format!("read_committed {seen:?}"),
    );
    match orphan::end_txn_as(&probe.bootstrap, &id, orphan, true, SHORT) {
        Ok(c) if c == code::PRODUCER_FENCED || c == code::INVALID_PRODUCER_EPOCH => probe.row(
            "the orphan's epoch is refused after the new init",
            Verdict::Yes,
            format!("EndTxn(commit) as the orphan: error {c}"),
        ),
        Ok(c) => probe.row(
            "the orphan's epoch is refused after the new init",
            Verdict::No,
            format!("EndTxn(commit) as the orphan: error {c}"),
        ),
        Err(e) => probe.row("the orphan's epoch is refused after the new init", Verdict::Unmeasured, short(&e)),
    }
}

fn settle_before_init(probe: &mut Probe) {
    let topic = match probe.fresh("settle") {
        Ok(t) => t,
        Err(e) => return probe.row("abort under the orphan's identity (EndTxn)", Verdict::Unmeasured, e),
    };
    let id = format!("{topic}-txn");
    let (child, orphan) = match hold(probe, &id, &topic) {
        Ok(h) => h,
        Err(e) => return probe.row("abort under the orphan's identity (EndTxn)", Verdict::Unmeasured, e),
    };
    killed(child);
    match orphan::describe(&probe.bootstrap, &id, SHORT) {
        Ok(d) => probe.row("DescribeTransactions of the orphan", Verdict::Yes, format!("{d:?}")),
        Err(e) => probe.row("DescribeTransactions of the orphan", Verdict::No, short(&e)),
    }
    match orphan::settle(&probe.bootstrap, &id, orphan, SHORT) {
        Ok(s) => {
            let aborted = matches!(s.settlement, Settlement::Aborted { by_this_call: true });
            probe.row("abort under the orphan's identity (EndTxn)", verdict(aborted), format!("{:?}", s.settlement));
        }
        Err(e) => probe.row("abort under the orphan's identity (EndTxn)", Verdict::No, short(&e)),
    }
    let seen = read_all(&probe.bootstrap, &topic, "read_committed");
    let hidden = seen.as_ref().is_ok_and(|s| s.is_empty());
    probe.row("the orphan's records are hidden after that abort", verdict(hidden), format!("read_committed {seen:?}"));
    let again = orphan::end_txn_as(&probe.bootstrap, &id, orphan, true, SHORT);
    let refused = matches!(again, Ok(c) if c != code::NONE);
    probe.row(
        "the orphan's commit is refused after that abort",
        verdict(refused),
        format!("EndTxn(commit) as the orphan: {again:?}").chars().take(200).collect::<String>(),
    );
}

fn hold_main(bootstrap: &str, id: &str, topic: &str) -> ExitCode {
    let mut config = TxnConfig::new(bootstrap, id);
    config.request_timeout = SHORT;
    let step = || -> Result<(TxnProducer, ProducerIdentity), TxnError> {
        let p = TxnProducer::open(config)?;
        p.begin()?;
        for r in ["h0", "h1", "h2"] {
            p.send(topic, Some(0), b"k", r.as_bytes())?;
        }
        p.prepare()?;
        let identity = p.identity(Duration::from_secs(2)).map(|(i, _)| i);
        let identity = identity.ok_or_else(|| TxnError::Config { message: "no identity reported".into() })?;
        Ok((p, identity))
    };
    let mut out = std::io::stdout();
    match step() {
        Ok((_p, identity)) => {
            let _ = writeln!(out, "identity={}/{}\nprepared", identity.producer_id, identity.epoch);
            let _ = out.flush();
            loop {
                std::thread::sleep(Duration::from_secs(60));
            }
        }
        Err(e) => {
            let _ = writeln!(out, "error={e}");
            ExitCode::from(1)
        }
    }
}

fn print(probe: &Probe, json: bool) {
    for r in &probe.rows {
        let v = match r.verdict {
            Verdict::Yes => "yes",
            Verdict::No => "no",
            Verdict::Unmeasured => "unmeasured",
        };
        if json {
            let line = serde_json::json!({"check": r.check, "result": v, "measured": r.measured});
            println!("{line}");
        } else {
            println!("| {} | {v} | {} |", r.check, r.measured.replace('|', "/"));
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, bootstrap, id, topic] = args.as_slice() {
        if flag == "--hold" {
            return hold_main(bootstrap, id, topic);
        }
    }
    let Some(bootstrap) = args.first().filter(|b| b.starts_with("127.")) else {
        eprintln!("usage: kafka-txn-probe BOOTSTRAP (on 127.0.0.0/8) [--json] [--expiry-wait SECONDS]");
        return ExitCode::from(2);
    };
    let json = args.iter().any(|a| a == "--json");
    let wait = args
        .iter()
        .position(|a| a == "--expiry-wait")
        .and_then(|i| args.get(i + 1))
        .and_then(|s| s.parse().ok())
        .map_or(Duration::from_secs(14), Duration::from_secs);
    let mut probe = Probe { bootstrap: bootstrap.clone(), topics: 0, rows: Vec::new() };
    if !advertised(&mut probe) {
        print(&probe, json);
        return ExitCode::from(3);
    }
    commit_abort_and_isolation(&mut probe);
    fencing(&mut probe);
    kill_then_reopen(&mut probe);
    settle_before_init(&mut probe);
    expiry(&mut probe, wait);
    print(&probe, json);
    if probe.rows.iter().any(|r| r.verdict == Verdict::Unmeasured) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
