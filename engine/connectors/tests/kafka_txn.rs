//! The transactional client against the Apache Kafka broker that
//! `gates/services start` runs on 127.0.0.1 (CLINK_KAFKA_BOOTSTRAP in its env
//! file). Without it every trial that needs it is ignored with the reason
//! `service`, never passed. Each trial makes its own topics (CreateTopics;
//! the broker makes none on first use).
//!
//! One trial kills a real process mid-transaction: this test binary runs
//! itself as the holder (CLINK_KAFKA_TXN_HOLD set), which opens a
//! transaction, sends, prepares, prints its producer identity and waits to
//! be SIGKILLed.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use clink_connectors::kafka::{Isolation, LogReader, LogWriter};
use clink_connectors::kafka_txn::orphan::{self, AbortAnswer, Settlement, TxnState};
use clink_connectors::kafka_txn::wire::{api, code};
use clink_connectors::kafka_txn::{ProducerIdentity, TxnConfig, TxnError, TxnErrorClass, TxnProducer};
use libtest_mimic::{Arguments, Failed, Trial};

const HOLD: &str = "CLINK_KAFKA_TXN_HOLD";
const SHORT: Duration = Duration::from_secs(10);

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
    if !env.contains_key("CLINK_KAFKA_BOOTSTRAP") {
        return Err(format!("{path} names no CLINK_KAFKA_BOOTSTRAP (gates/services start --only kafka)"));
    }
    Ok(env)
}

fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{prefix}-{}-{}", std::process::id(), nanos % 1_000_000_000)
}

/// A new topic of one partition.
fn fresh_topic(bootstrap: &str, prefix: &str) -> Result<String, Failed> {
    let topic = unique(prefix);
    if !LogWriter::connect(bootstrap)?.ensure_topic(&topic, 1)? {
        return Err(format!("{topic} existed before this trial made it").into());
    }
    Ok(topic)
}

fn config(bootstrap: &str, id: &str) -> TxnConfig {
    let mut c = TxnConfig::new(bootstrap, id);
    c.request_timeout = SHORT;
    c
}

/// Every payload of partition 0 a reader at `isolation` sees, up to the end.
fn read_all(bootstrap: &str, topic: &str, isolation: &str) -> Result<Vec<String>, Failed> {
    let isolation = Isolation::parse(isolation).ok_or_else(|| format!("no isolation level {isolation:?}"))?;
    let reader = LogReader::connect(bootstrap, topic, isolation, "clink-kafka-txn-test")?;
    Ok(reader.read_to_end(SHORT)?.iter().map(|p| String::from_utf8_lossy(p).into_owned()).collect())
}

fn one_transaction(p: &TxnProducer, topic: &str, payloads: &[&str]) -> Result<u64, TxnError> {
    p.begin()?;
    for x in payloads {
        p.send(topic, Some(0), b"k", x.as_bytes())?;
    }
    Ok(p.prepare()?.records)
}

fn a_transaction_is_opened_prepared_committed_and_aborted(env: &BTreeMap<String, String>) -> Result<(), Failed> {
    let bootstrap = &env["CLINK_KAFKA_BOOTSTRAP"];
    let topic = fresh_topic(bootstrap, "txn-commit")?;
    let p = TxnProducer::open(config(bootstrap, &format!("{topic}-id")))?;
    let (identity, state) = p.identity(Duration::from_secs(2)).ok_or("the producer reported no identity")?;
    assert!(identity.producer_id >= 0 && identity.epoch >= 0, "{identity:?}");
    assert_eq!(state, "Ready", "after init_transactions");
    assert_eq!(one_transaction(&p, &topic, &["c0", "c1", "c2"])?, 3, "prepare counts what it flushed");
    p.commit()?;
    assert_eq!(one_transaction(&p, &topic, &["a0"])?, 1);
    p.abort()?;
    assert_eq!(one_transaction(&p, &topic, &[])?, 0, "a transaction sealed with no records");
    p.commit()?;
    let seen = read_all(bootstrap, &topic, "read_uncommitted")?;
    assert_eq!(seen, ["c0", "c1", "c2", "a0"], "every record the broker acknowledged, in order");
    Ok(())
}

fn a_record_the_broker_did_not_take_fails_the_prepare(env: &BTreeMap<String, String>) -> Result<(), Failed> {
    let bootstrap = &env["CLINK_KAFKA_BOOTSTRAP"];
    let topic = fresh_topic(bootstrap, "txn-undeliverable")?;
    let p = TxnProducer::open(config(bootstrap, &format!("{topic}-id")))?;
    one_transaction(&p, &topic, &["fine"])?;
    p.commit()?;
    // A topic that does not exist yet: the send is queued while librdkafka
    // asks for its metadata. The topic is then made with one partition, so
    // the record, addressed to partition 999, fails only once the broker
    // has said the topic has no such partition. librdkafka sometimes refuses
    // the send itself; that attempt proves nothing of the prepare, so
    // another is made.
    for _ in 0..5 {
        let unknown = unique("txn-unknown");
        p.begin()?;
        p.send(&topic, Some(0), b"k", b"kept")?;
        if p.send(&unknown, Some(999), b"k", b"nowhere").is_err() {
            p.abort()?;
            continue;
        }
        LogWriter::connect(bootstrap)?.ensure_topic(&unknown, 1)?;
        match p.prepare() {
            Err(TxnError::Refused { abortable: true, .. }) => {}
            other => return Err(format!("a record the broker never took must fail the prepare, got {other:?}").into()),
        }
        p.abort()?;
        return Ok(());
    }
    Err("five sends to an unknown topic were all refused at once: the prepare was never tried".into())
}

/// Starts this binary as a holder of an open transaction; its identity.
fn hold(bootstrap: &str, id: &str, topic: &str) -> Result<(Child, ProducerIdentity), Failed> {
    let mut child = Command::new(std::env::current_exe()?)
        .env(HOLD, format!("{bootstrap} {id} {topic}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let out = child.stdout.take().ok_or("the holder has no stdout")?;
    let mut identity = None;
    for line in BufReader::new(out).lines() {
        let line = line?;
        if let Some((pid, epoch)) = line.strip_prefix("identity=").and_then(|r| r.split_once('/')) {
            identity = Some(ProducerIdentity { producer_id: pid.parse()?, epoch: epoch.parse()? });
        }
        if line == "prepared" {
            break;
        }
    }
    match identity {
        Some(i) => Ok((child, i)),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            Err("the holder printed no identity before it ended".into())
        }
    }
}

fn sigkill(mut child: Child) -> Result<(), Failed> {
    child.kill()?; // SIGKILL: no destructor, no abort, no close of the producer
    let status = child.wait()?;
    assert!(!status.success(), "the holder must have been killed, not have exited: {status}");
    Ok(())
}

fn a_process_killed_mid_transaction_leaves_an_orphan_the_next_open_settles(
    env: &BTreeMap<String, String>,
) -> Result<(), Failed> {
    let bootstrap = &env["CLINK_KAFKA_BOOTSTRAP"];
    let topic = fresh_topic(bootstrap, "txn-killed")?;
    let id = format!("{topic}-id");
    let (child, orphan) = hold(bootstrap, &id, &topic)?;
    sigkill(child)?;
    // The orphan's records reached the broker before the kill.
    assert_eq!(read_all(bootstrap, &topic, "read_uncommitted")?, ["h0", "h1", "h2"]);
    let settled = orphan::settle(bootstrap, &id, orphan, SHORT)?;
    let described = settled.steps.iter().find(|s| s.starts_with("DescribeTransactions:"));
    let ongoing =
        format!("identity: ProducerIdentity {{ producer_id: {}, epoch: {} }}", orphan.producer_id, orphan.epoch);
    if !described.is_some_and(|d| d.contains("state: Ongoing") && d.contains(&ongoing)) {
        return Err(format!(
            "the settle must describe the orphan as Ongoing under its own identity first: {:?}",
            settled.steps
        )
        .into());
    }
    match &settled.settlement {
        Settlement::Aborted { by_this_call: true } => {}
        other => return Err(format!("an orphan left Ongoing must be aborted by the settle, got {other:?}").into()),
    }
    // The next incarnation opens on the same id, with an identity of its own.
    let next = TxnProducer::open(config(bootstrap, &id))?;
    let (mine, _) = next.identity(Duration::from_secs(2)).ok_or("the new producer reported no identity")?;
    assert_ne!(mine, orphan, "a new incarnation must not reuse the orphan's producer id and epoch");
    one_transaction(&next, &topic, &["n0"])?;
    next.commit()?;
    assert_eq!(read_all(bootstrap, &topic, "read_uncommitted")?, ["h0", "h1", "h2", "n0"]);
    Ok(())
}

fn an_abort_under_an_unknown_identity_is_refused_by_name(env: &BTreeMap<String, String>) -> Result<(), Failed> {
    let bootstrap = &env["CLINK_KAFKA_BOOTSTRAP"];
    let id = unique("txn-stranger");
    let p = TxnProducer::open(config(bootstrap, &id))?;
    let (mine, _) = p.identity(Duration::from_secs(2)).ok_or("no identity")?;
    let stranger = ProducerIdentity { producer_id: mine.producer_id + 1, epoch: 0 };
    let answer = orphan::abort_orphan(bootstrap, &id, stranger, SHORT)?;
    assert!(
        matches!(answer, AbortAnswer::UnknownProducer | AbortAnswer::Superseded | AbortAnswer::NotOngoing),
        "an identity the id never had cannot abort anything: {answer:?}"
    );
    Ok(())
}

/// DescribeTransactions names each state a transaction passes through, with
/// the identity of the producer that holds it: nothing for an unused id,
/// Empty after the init, Ongoing with its partitions while open, then
/// CompleteCommit or CompleteAbort.
fn describe_follows_a_transaction_through_its_states(env: &BTreeMap<String, String>) -> Result<(), Failed> {
    let bootstrap = &env["CLINK_KAFKA_BOOTSTRAP"];
    if orphan::broker_apis(bootstrap, SHORT)?.range(api::DESCRIBE_TRANSACTIONS).is_none() {
        return Err("the broker does not advertise DescribeTransactions".into());
    }
    let topic = fresh_topic(bootstrap, "txn-describe")?;
    let id = format!("{topic}-id");
    assert_eq!(orphan::describe(bootstrap, &id, SHORT)?, None, "an id nothing used is not found");
    let p = TxnProducer::open(config(bootstrap, &id))?;
    let (me, _) = p.identity(Duration::from_secs(2)).ok_or("no identity")?;
    // EndTxn is answered once the decision (PrepareCommit, PrepareAbort) is
    // logged; the markers, then the Complete state, follow: a describe in
    // between sees the decision, so it is asked again, for a bounded time.
    let state = |want: TxnState| -> Result<(), Failed> {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let d = orphan::describe(bootstrap, &id, SHORT)?.ok_or("the initialised id is not found")?;
            let deciding = matches!(
                (&want, &d.state),
                (TxnState::CompleteCommit, TxnState::PrepareCommit) | (TxnState::CompleteAbort, TxnState::PrepareAbort)
            );
            if deciding && d.identity == me && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            if d.state != want || d.identity != me {
                return Err(format!("want {want:?} under {me:?}, described {d:?}").into());
            }
            return Ok(());
        }
    };
    state(TxnState::Empty)?;
    one_transaction(&p, &topic, &["d0"])?;
    state(TxnState::Ongoing)?;
    let d = orphan::describe(bootstrap, &id, SHORT)?.ok_or("not found")?;
    assert_eq!(d.partitions, [(topic.clone(), vec![0])], "the open transaction's partitions");
    p.commit()?;
    state(TxnState::CompleteCommit)?;
    one_transaction(&p, &topic, &["d1"])?;
    p.abort()?;
    state(TxnState::CompleteAbort)?;
    Ok(())
}

/// What the commit-confirmed family stands on, held against this broker: a
/// second init on an id fences the first producer (its next prepare or
/// commit is Fenced, and its epoch is refused at the coordinator), and
/// read_committed readers see neither an aborted transaction nor the
/// zombie's records.
fn fencing_and_isolation_hold(env: &BTreeMap<String, String>) -> Result<(), Failed> {
    let bootstrap = &env["CLINK_KAFKA_BOOTSTRAP"];
    let topic = fresh_topic(bootstrap, "txn-fence")?;
    let id = format!("{topic}-id");
    let first = TxnProducer::open(config(bootstrap, &id))?;
    let (old, _) = first.identity(Duration::from_secs(2)).ok_or("no identity")?;
    one_transaction(&first, &topic, &["aborted"])?;
    first.abort()?;
    let second = TxnProducer::open(config(bootstrap, &id))?;
    let (new, _) = second.identity(Duration::from_secs(2)).ok_or("no identity")?;
    if new.producer_id != old.producer_id || new.epoch <= old.epoch {
        return Err(format!("the second init must bump the id's epoch: {old:?} then {new:?}").into());
    }
    let zombie = one_transaction(&first, &topic, &["zombie"]).and_then(|_| first.commit());
    match zombie {
        Err(e) if e.class() == TxnErrorClass::Fenced => {}
        other => return Err(format!("the first producer must be fenced, got {other:?}").into()),
    }
    let late = orphan::end_txn_as(bootstrap, &id, old, true, SHORT)?;
    if late != code::PRODUCER_FENCED && late != code::INVALID_PRODUCER_EPOCH {
        return Err(format!("EndTxn(commit) under the fenced epoch answered {late}, not fenced").into());
    }
    one_transaction(&second, &topic, &["second"])?;
    second.commit()?;
    assert_eq!(read_all(bootstrap, &topic, "read_committed")?, ["second"]);
    Ok(())
}

/// A transaction left open past its timeout is aborted by the coordinator:
/// the late commit fails, nothing of it is visible to read_committed, and
/// its records are in the log (aborted, not lost in transit).
fn an_expired_transaction_is_aborted_by_the_broker(env: &BTreeMap<String, String>) -> Result<(), Failed> {
    let bootstrap = &env["CLINK_KAFKA_BOOTSTRAP"];
    let topic = fresh_topic(bootstrap, "txn-expiry")?;
    let mut c = config(bootstrap, &format!("{topic}-id"));
    c.transaction_timeout = Duration::from_secs(2);
    let p = TxnProducer::open(c)?;
    one_transaction(&p, &topic, &["late"])?;
    std::thread::sleep(Duration::from_secs(5));
    match p.commit() {
        Err(e) if matches!(e.class(), TxnErrorClass::Fenced | TxnErrorClass::Refused) => {}
        other => return Err(format!("a commit past the transaction's timeout must fail, got {other:?}").into()),
    }
    assert_eq!(read_all(bootstrap, &topic, "read_committed")?, Vec::<String>::new());
    assert_eq!(read_all(bootstrap, &topic, "read_uncommitted")?, ["late"]);
    Ok(())
}

fn an_unreachable_broker_is_unreachable_not_in_doubt(_: &BTreeMap<String, String>) -> Result<(), Failed> {
    // A port that was just free: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let bootstrap = format!("127.0.0.1:{port}");
    let mut c = config(&bootstrap, "txn-nowhere");
    c.request_timeout = Duration::from_secs(2);
    match TxnProducer::open(c) {
        Err(e) => assert_eq!(e.class(), TxnErrorClass::Unreachable, "{e}"),
        Ok(_) => return Err("init_transactions succeeded with no broker".into()),
    }
    let e = orphan::broker_apis(&bootstrap, Duration::from_secs(2)).expect_err("no broker answers");
    assert_eq!(e.class(), TxnErrorClass::Unreachable, "{e}");
    let e = TxnProducer::open(config(&bootstrap, "not an id")).err().ok_or("a bad id was accepted")?;
    assert_eq!(e.class(), TxnErrorClass::Config, "{e}");
    Ok(())
}

/// The holder: runs when this binary is started with CLINK_KAFKA_TXN_HOLD.
fn hold_and_wait(spec: &str) -> ! {
    let parts: Vec<&str> = spec.split(' ').collect();
    let result = match parts.as_slice() {
        [bootstrap, id, topic] => TxnProducer::open(config(bootstrap, id)).and_then(|p| {
            one_transaction(&p, topic, &["h0", "h1", "h2"])?;
            let identity = p.identity(Duration::from_secs(2)).map(|(i, _)| i);
            Ok((p, identity))
        }),
        _ => Err(TxnError::Config { message: format!("{HOLD}={spec:?}: want BOOTSTRAP ID TOPIC") }),
    };
    let mut out = std::io::stdout();
    match result {
        Ok((_producer, Some(i))) => {
            let _ = writeln!(out, "identity={}/{}\nprepared", i.producer_id, i.epoch);
            let _ = out.flush();
            loop {
                std::thread::sleep(Duration::from_secs(60));
            }
        }
        Ok((_, None)) => {
            let _ = writeln!(out, "error=no identity reported");
            std::process::exit(1)
        }
        Err(e) => {
            let _ = writeln!(out, "error={e}");
            std::process::exit(1)
        }
    }
}

type Check = fn(&BTreeMap<String, String>) -> Result<(), Failed>;

fn main() {
    if let Ok(spec) = std::env::var(HOLD) {
        hold_and_wait(&spec);
    }
    let args = Arguments::from_args();
    let needs_service: [(&str, Check); 7] = [
        ("kafka_txn::open_prepare_commit_abort", a_transaction_is_opened_prepared_committed_and_aborted),
        ("kafka_txn::undelivered_record_fails_prepare", a_record_the_broker_did_not_take_fails_the_prepare),
        (
            "kafka_txn::killed_mid_transaction_then_settled_and_reopened",
            a_process_killed_mid_transaction_leaves_an_orphan_the_next_open_settles,
        ),
        ("kafka_txn::abort_under_unknown_identity_refused", an_abort_under_an_unknown_identity_is_refused_by_name),
        ("kafka_txn::describe_follows_the_states", describe_follows_a_transaction_through_its_states),
        ("kafka_txn::fencing_and_isolation_hold", fencing_and_isolation_hold),
        ("kafka_txn::expired_transaction_aborted_by_the_broker", an_expired_transaction_is_aborted_by_the_broker),
    ];
    let env = services();
    let mut trials: Vec<Trial> = needs_service
        .into_iter()
        .map(|(name, check)| match &env {
            Ok(env) => {
                let env = env.clone();
                Trial::test(name, move || check(&env))
            }
            Err(why) => Trial::test(name, || Ok(())).with_ignored_flag(true).with_kind(format!("service: {why}")),
        })
        .collect();
    trials.push(Trial::test("kafka_txn::unreachable_is_unreachable", || {
        an_unreachable_broker_is_unreachable_not_in_doubt(&BTreeMap::new())
    }));
    libtest_mimic::run(&args, trials).exit();
}
