//! The transactional client against the transaction-speaking broker that
//! `gates/services start` runs on 127.0.0.1 (CLINK_KAFKA_TXN_BOOTSTRAP in its
//! env file; today librdkafka's mock cluster, see ARCHITECTURE.md). Without
//! it every trial that needs it is ignored with the reason `service`, never
//! passed.
//!
//! One trial kills a real process mid-transaction: this test binary runs
//! itself as the holder (CLINK_KAFKA_TXN_HOLD set), which opens a
//! transaction, sends, prepares, prints its producer identity and waits to
//! be SIGKILLed.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clink_connectors::kafka_txn::orphan::{self, AbortAnswer, Settlement};
use clink_connectors::kafka_txn::wire::api;
use clink_connectors::kafka_txn::{ProducerIdentity, TxnConfig, TxnError, TxnErrorClass, TxnProducer};
use libtest_mimic::{Arguments, Failed, Trial};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

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
    if !env.contains_key("CLINK_KAFKA_TXN_BOOTSTRAP") {
        return Err(format!("{path} names no CLINK_KAFKA_TXN_BOOTSTRAP (started by an older gates/services?)"));
    }
    Ok(env)
}

fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{prefix}-{}-{}", std::process::id(), nanos % 1_000_000_000)
}

fn config(bootstrap: &str, id: &str) -> TxnConfig {
    let mut c = TxnConfig::new(bootstrap, id);
    c.request_timeout = SHORT;
    c
}

/// Every payload of partition 0 a reader at `isolation` sees, up to the end.
fn read_all(bootstrap: &str, topic: &str, isolation: &str) -> Result<Vec<String>, Failed> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "clink-kafka-txn-test")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", isolation)
        .create()?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)?;
    consumer.assign(&tpl)?;
    let deadline = Instant::now() + SHORT;
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => seen.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned()),
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => return Ok(seen),
            Some(Err(e)) => return Err(e.into()),
            None => {}
        }
    }
    Err(format!("{topic}: no end of partition 0 within {} s (saw {seen:?})", SHORT.as_secs()).into())
}

fn one_transaction(p: &TxnProducer, topic: &str, payloads: &[&str]) -> Result<u64, TxnError> {
    p.begin()?;
    for x in payloads {
        p.send(topic, Some(0), b"k", x.as_bytes())?;
    }
    Ok(p.prepare()?.records)
}

fn a_transaction_is_opened_prepared_committed_and_aborted(env: &BTreeMap<String, String>) -> Result<(), Failed> {
    let bootstrap = &env["CLINK_KAFKA_TXN_BOOTSTRAP"];
    let topic = unique("txn-commit");
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
    let bootstrap = &env["CLINK_KAFKA_TXN_BOOTSTRAP"];
    let topic = unique("txn-undeliverable");
    let p = TxnProducer::open(config(bootstrap, &format!("{topic}-id")))?;
    one_transaction(&p, &topic, &["fine"])?;
    p.commit()?;
    // A topic this producer has no metadata for yet: the send is queued, and
    // the record fails only once the broker says the topic has no partition
    // 999. librdkafka sometimes knows the topic already and refuses the send
    // itself; that attempt proves nothing of the prepare, so another is made.
    for _ in 0..5 {
        let unknown = unique("txn-unknown");
        p.begin()?;
        p.send(&topic, Some(0), b"k", b"kept")?;
        if p.send(&unknown, Some(999), b"k", b"nowhere").is_err() {
            p.abort()?;
            continue;
        }
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
    let bootstrap = &env["CLINK_KAFKA_TXN_BOOTSTRAP"];
    let topic = unique("txn-killed");
    let id = format!("{topic}-id");
    let (child, orphan) = hold(bootstrap, &id, &topic)?;
    sigkill(child)?;
    // The orphan's records reached the broker before the kill.
    assert_eq!(read_all(bootstrap, &topic, "read_uncommitted")?, ["h0", "h1", "h2"]);
    let settled = orphan::settle(bootstrap, &id, orphan, SHORT)?;
    let apis = orphan::broker_apis(bootstrap, SHORT)?;
    if apis.range(api::DESCRIBE_TRANSACTIONS).is_none() {
        assert!(
            settled.steps.iter().any(|s| s.starts_with("DescribeTransactions: unsupported")),
            "a broker without DescribeTransactions is said to lack it: {:?}",
            settled.steps
        );
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
    let bootstrap = &env["CLINK_KAFKA_TXN_BOOTSTRAP"];
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

fn describe_is_unsupported_exactly_where_the_broker_lacks_it(env: &BTreeMap<String, String>) -> Result<(), Failed> {
    let bootstrap = &env["CLINK_KAFKA_TXN_BOOTSTRAP"];
    let id = unique("txn-describe");
    let advertised = orphan::broker_apis(bootstrap, SHORT)?.range(api::DESCRIBE_TRANSACTIONS).is_some();
    match orphan::describe(bootstrap, &id, SHORT) {
        Err(TxnError::Unsupported { api, .. }) if !advertised => {
            assert_eq!(api, "DescribeTransactions");
            Ok(())
        }
        Ok(found) if advertised => {
            assert_eq!(found, None, "an id nothing used is not found");
            Ok(())
        }
        other => Err(format!("advertised {advertised}, describe answered {other:?}").into()),
    }
}

/// The gaps ARCHITECTURE.md records for this broker, held here so that a
/// broker that changes them fails until the record is rewritten.
fn the_brokers_recorded_gaps_hold(env: &BTreeMap<String, String>) -> Result<(), Failed> {
    let bootstrap = &env["CLINK_KAFKA_TXN_BOOTSTRAP"];
    if env.get("CLINK_KAFKA_TXN_IMPL").map(String::as_str) != Some("librdkafka-mock") {
        return Err(
            format!("no recorded gaps for {:?}: probe it and record them", env.get("CLINK_KAFKA_TXN_IMPL")).into()
        );
    }
    let topic = unique("txn-gaps");
    let id = format!("{topic}-id");
    let first = TxnProducer::open(config(bootstrap, &id))?;
    let second = TxnProducer::open(config(bootstrap, &id))?;
    one_transaction(&first, &topic, &["aborted"])?;
    first.abort()?;
    // Recorded gap 1: a second init on the same id does not fence the first.
    one_transaction(&first, &topic, &["zombie"])?;
    first.commit()?;
    one_transaction(&second, &topic, &["second"])?;
    second.commit()?;
    // Recorded gap 2: read_committed shows the aborted record.
    let seen = read_all(bootstrap, &topic, "read_committed")?;
    assert_eq!(seen, ["aborted", "zombie", "second"], "ARCHITECTURE.md's table says so; if this changed, re-probe");
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
    let needs_service: [(&str, Check); 6] = [
        ("kafka_txn::open_prepare_commit_abort", a_transaction_is_opened_prepared_committed_and_aborted),
        ("kafka_txn::undelivered_record_fails_prepare", a_record_the_broker_did_not_take_fails_the_prepare),
        (
            "kafka_txn::killed_mid_transaction_then_settled_and_reopened",
            a_process_killed_mid_transaction_leaves_an_orphan_the_next_open_settles,
        ),
        ("kafka_txn::abort_under_unknown_identity_refused", an_abort_under_an_unknown_identity_is_refused_by_name),
        ("kafka_txn::describe_unsupported_where_lacking", describe_is_unsupported_exactly_where_the_broker_lacks_it),
        ("kafka_txn::recorded_broker_gaps_hold", the_brokers_recorded_gaps_hold),
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
