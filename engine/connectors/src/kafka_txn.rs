//! A Kafka transactional producer for one transactional id, through
//! librdkafka: open (init_transactions, which fences every older epoch of
//! the id), begin, send, prepare (flush inside the open transaction, every
//! record acknowledged), commit and abort; and, for an orphan transaction a
//! dead incarnation left open, the describe and the abort under the orphan's
//! own producer id and epoch ([`orphan`]), which librdkafka has no call for.
//!
//! This module owns the conversation with the broker and the classification
//! of what went wrong: [`TxnError::Fenced`] (a later producer of the id took
//! over; this one can do nothing more), [`TxnError::InDoubt`] (a commit or
//! abort got no definite answer: it may have taken effect),
//! [`TxnError::Refused`] (the broker said no: nothing took effect),
//! [`TxnError::Unreachable`] (nothing reached the broker) and
//! [`TxnError::Unsupported`] (the broker does not implement the request).
//! It never decides what a sink does with an outcome: receipts, markers and
//! the order of the open belong to the engine's sink. A broker that does not
//! implement a request is reported as such, never as an empty answer.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, Consumer as _, ConsumerGroupMetadata};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer as _, ProducerContext, ThreadedProducer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use serde::Serialize;
use thiserror::Error;

pub mod orphan;
pub mod wire;

/// A producer's identity at the transaction coordinator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ProducerIdentity {
    pub producer_id: i64,
    pub epoch: i16,
}

/// What went wrong, by what it means for the transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TxnErrorClass {
    Fenced,
    InDoubt,
    Refused,
    Unreachable,
    Unsupported,
    Malformed,
    Config,
}

/// Where an error happened: the broker, the transactional id, the call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site {
    pub bootstrap: String,
    pub transactional_id: String,
    pub what: String,
}

impl std::fmt::Display for Site {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "kafka at {}: {:?}: {}", self.bootstrap, self.transactional_id, self.what)
    }
}

pub fn site(bootstrap: &str, transactional_id: &str, what: &str) -> Box<Site> {
    Box::new(Site { bootstrap: bootstrap.into(), transactional_id: transactional_id.into(), what: what.into() })
}

#[derive(Debug, Error)]
pub enum TxnError {
    /// A later producer of the same transactional id took over.
    #[error("{at}: fenced by a later producer: {message}")]
    Fenced { at: Box<Site>, message: String },
    /// No definite answer to a commit or an abort: it may have taken effect.
    #[error("{at}: {message} (the outcome is unknown)")]
    InDoubt { at: Box<Site>, message: String },
    /// The broker answered no; `abortable` when the open transaction must now be aborted.
    #[error("{at}: refused ({code}): {message}")]
    Refused { at: Box<Site>, code: String, message: String, abortable: bool },
    /// The broker could not be reached: nothing took effect.
    #[error("{at}: unreachable: {message}")]
    Unreachable { at: Box<Site>, message: String },
    /// The broker does not implement the request (`api`) at a version this client speaks.
    #[error("{at}: the broker does not implement {api}: {message}")]
    Unsupported { at: Box<Site>, api: &'static str, message: String },
    #[error("{at}: {message}")]
    Malformed { at: Box<Site>, message: String },
    #[error("transactional producer: {message}")]
    Config { message: String },
}

impl TxnError {
    pub fn class(&self) -> TxnErrorClass {
        match self {
            TxnError::Fenced { .. } => TxnErrorClass::Fenced,
            TxnError::InDoubt { .. } => TxnErrorClass::InDoubt,
            TxnError::Refused { .. } => TxnErrorClass::Refused,
            TxnError::Unreachable { .. } => TxnErrorClass::Unreachable,
            TxnError::Unsupported { .. } => TxnErrorClass::Unsupported,
            TxnError::Malformed { .. } => TxnErrorClass::Malformed,
            TxnError::Config { .. } => TxnErrorClass::Config,
        }
    }
}

/// Whether a failed call can have changed what the broker keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Effect {
    /// init, begin, send, prepare: a failure ends nothing.
    None,
    /// commit, abort: a failure without an answer may have ended the transaction.
    Decides,
}

/// The names a transactional id may use: ours are built from job, sink uid and subtask.
pub fn check_transactional_id(id: &str) -> Result<(), TxnError> {
    let fine = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':');
    if id.is_empty() || id.len() > 249 || !id.chars().all(fine) {
        return Err(TxnError::Config {
            message: format!("transactional id {id:?} is not 1 to 249 of [A-Za-z0-9._:-]"),
        });
    }
    Ok(())
}

/// How to open a producer.
#[derive(Debug, Clone)]
pub struct TxnConfig {
    pub bootstrap: String,
    pub transactional_id: String,
    /// The broker aborts a transaction left open longer than this.
    pub transaction_timeout: Duration,
    /// The bound on each blocking call (init, prepare, commit, abort).
    pub request_timeout: Duration,
}

impl TxnConfig {
    pub fn new(bootstrap: &str, transactional_id: &str) -> TxnConfig {
        TxnConfig {
            bootstrap: bootstrap.to_string(),
            transactional_id: transactional_id.to_string(),
            transaction_timeout: Duration::from_secs(60),
            request_timeout: Duration::from_secs(30),
        }
    }
}

#[derive(Debug, Default)]
struct Deliveries {
    sent: u64,
    acked: u64,
    failed: u64,
    first_error: Option<String>,
    /// A delivery the broker refused because a later producer of the id
    /// took over (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH): the whole
    /// producer is fenced, not one record refused.
    fenced: Option<String>,
}

/// The identity librdkafka last reported in its statistics, and its state.
#[derive(Debug, Clone)]
struct Reported {
    identity: ProducerIdentity,
    txn_state: String,
    at: Instant,
}

/// librdkafka's callbacks: delivery reports counted, identity read from
/// the statistics' `eos` section (the only place librdkafka shows it).
pub struct TxnContext {
    deliveries: Mutex<Deliveries>,
    reported: Mutex<Option<Reported>>,
}

impl ClientContext for TxnContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        if (level as i32) <= (RDKafkaLogLevel::Error as i32) {
            eprintln!("librdkafka (transactional producer) {fac}: {message}");
        }
    }

    fn stats_raw(&self, statistics: &[u8]) {
        let Ok(doc) = serde_json::from_slice::<serde_json::Value>(statistics) else { return };
        let eos = &doc["eos"];
        let (Some(id), Some(epoch)) = (eos["producer_id"].as_i64(), eos["producer_epoch"].as_i64()) else { return };
        let Ok(epoch) = i16::try_from(epoch) else { return };
        if id < 0 || epoch < 0 {
            return;
        }
        let txn_state = eos["txn_state"].as_str().unwrap_or_default().to_string();
        if let Ok(mut r) = self.reported.lock() {
            *r =
                Some(Reported { identity: ProducerIdentity { producer_id: id, epoch }, txn_state, at: Instant::now() });
        }
    }
}

impl ProducerContext for TxnContext {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        let Ok(mut d) = self.deliveries.lock() else { return };
        match result {
            Ok(_) => d.acked += 1,
            Err((e, _)) => {
                d.failed += 1;
                d.first_error.get_or_insert_with(|| e.to_string());
                if e.rdkafka_error_code().is_some_and(is_fencing) {
                    d.fenced.get_or_insert_with(|| e.to_string());
                }
            }
        }
    }
}

/// What a prepare flushed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Prepared {
    pub records: u64,
}

/// A transactional producer, initialised: every older epoch of its id is fenced.
pub struct TxnProducer {
    config: TxnConfig,
    producer: ThreadedProducer<TxnContext>,
    context: Arc<TxnContext>,
    /// The consumer group [`TxnProducer::mark`] commits an offset for: the
    /// transactional id's own name.
    group: ConsumerGroupMetadata,
}

impl TxnProducer {
    /// Creates the producer and runs init_transactions: the coordinator
    /// fences every older epoch of the id and ends what it left open (how it
    /// ends it is the broker's: Kafka aborts it).
    pub fn open(config: TxnConfig) -> Result<TxnProducer, TxnError> {
        check_transactional_id(&config.transactional_id)?;
        let ms = |d: Duration| d.as_millis().clamp(1, i32::MAX as u128).to_string();
        let producer: ThreadedProducer<TxnContext> = ClientConfig::new()
            .set("bootstrap.servers", &config.bootstrap)
            .set("transactional.id", &config.transactional_id)
            .set("transaction.timeout.ms", ms(config.transaction_timeout))
            // librdkafka requires a record's delivery bound within the transaction's.
            .set("message.timeout.ms", ms(config.transaction_timeout))
            // ... and its socket timeout within the transaction's (plus 100 ms).
            .set("socket.timeout.ms", ms(config.request_timeout.min(config.transaction_timeout)))
            .set("acks", "all")
            .set("linger.ms", "5")
            .set("statistics.interval.ms", "100")
            .create_with_context(TxnContext { deliveries: Mutex::default(), reported: Mutex::new(None) })
            .map_err(|e| TxnError::Config { message: format!("creating the producer: {e}") })?;
        let context = producer.context().clone();
        let group = group_metadata(&config)?;
        let me = TxnProducer { config, producer, context, group };
        me.producer
            .init_transactions(me.config.request_timeout)
            .map_err(|e| me.classify("init_transactions", e, Effect::None))?;
        Ok(me)
    }

    pub fn transactional_id(&self) -> &str {
        &self.config.transactional_id
    }

    pub fn bootstrap(&self) -> &str {
        &self.config.bootstrap
    }

    /// The producer id and epoch librdkafka last reported, and its
    /// transaction state, waiting up to `wait` for a report made after this
    /// call began (the statistics come every 100 ms).
    pub fn identity(&self, wait: Duration) -> Option<(ProducerIdentity, String)> {
        let asked = Instant::now();
        let deadline = asked + wait;
        loop {
            let last = self.context.reported.lock().ok().and_then(|r| r.clone());
            match last {
                Some(r) if r.at >= asked => return Some((r.identity, r.txn_state)),
                Some(r) if Instant::now() >= deadline => return Some((r.identity, r.txn_state)),
                None if Instant::now() >= deadline => return None,
                _ => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    pub fn begin(&self) -> Result<(), TxnError> {
        if let Ok(mut d) = self.context.deliveries.lock() {
            *d = Deliveries::default();
        }
        self.producer.begin_transaction().map_err(|e| self.classify("begin_transaction", e, Effect::None))
    }

    /// Queues one record in the open transaction (to `partition`, or by key).
    pub fn send(&self, topic: &str, partition: Option<i32>, key: &[u8], payload: &[u8]) -> Result<(), TxnError> {
        let deadline = Instant::now() + self.config.request_timeout;
        let mut record = BaseRecord::to(topic).key(key).payload(payload);
        if let Some(p) = partition {
            record = record.partition(p);
        }
        loop {
            match self.producer.send(record) {
                Ok(()) => {
                    if let Ok(mut d) = self.context.deliveries.lock() {
                        d.sent += 1;
                    }
                    return Ok(());
                }
                Err((e, back))
                    if e.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) && Instant::now() < deadline =>
                {
                    record = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err((e, _)) => return Err(self.classify("send", e, Effect::None)),
            }
        }
    }

    /// Puts the open transaction on the broker's books whatever it carries:
    /// commits, inside it, offset `mark` of `topic`'s partition 0 for the
    /// consumer group named as the transactional id (AddOffsetsToTxn, then
    /// TxnOffsetCommit). librdkafka tells the transaction coordinator of a
    /// transaction only when a record or an offset joins it, so a
    /// transaction with no records would otherwise not exist there: it
    /// could be neither described nor aborted, and a describe would report
    /// the transaction before it. Kafka's own exactly-once stream
    /// processors commit offsets in every transaction the same way. The
    /// group is used for nothing else; its committed offset is the mark of
    /// the newest transaction the broker committed, and the offset's
    /// metadata is `note` (who wrote it: [`last_mark`] reads it back).
    pub fn mark(&self, topic: &str, mark: u64, note: &str) -> Result<(), TxnError> {
        let offset =
            i64::try_from(mark).map_err(|_| TxnError::Config { message: format!("mark {mark} is not an offset") })?;
        let mut offsets = TopicPartitionList::new();
        let mut entry = offsets.add_partition(topic, 0);
        entry
            .set_offset(Offset::Offset(offset))
            .map_err(|e| TxnError::Config { message: format!("the mark's offset for {topic:?}: {e}") })?;
        entry.set_metadata(note);
        self.producer
            .send_offsets_to_transaction(&offsets, &self.group, self.config.request_timeout)
            .map_err(|e| self.classify("send_offsets_to_transaction (the mark)", e, Effect::None))
    }

    /// Flushes the open transaction: every record sent since begin is
    /// acknowledged by the broker, or the prepare fails and the transaction
    /// must be aborted. Nothing is visible to read_committed readers yet.
    pub fn prepare(&self) -> Result<Prepared, TxnError> {
        self.producer
            .flush(self.config.request_timeout)
            .map_err(|e| self.classify("prepare (flush)", e, Effect::None))?;
        let d = self.context.deliveries.lock().map_err(|_| TxnError::Config { message: "poisoned".into() })?;
        // librdkafka purges the records of a fenced producer: their
        // deliveries fail as purged, and the fencing is its fatal error.
        let fatal = self.producer.client().fatal_error().filter(|(code, _)| is_fencing(*code));
        if let Some(message) = d.fenced.clone().or_else(|| fatal.map(|(_, m)| m)) {
            return Err(TxnError::Fenced {
                at: site(&self.config.bootstrap, &self.config.transactional_id, "prepare (flush)"),
                message: format!("{} of {} records refused: {message}", d.failed, d.sent),
            });
        }
        if d.failed > 0 || d.acked != d.sent {
            return Err(TxnError::Refused {
                at: site(&self.config.bootstrap, &self.config.transactional_id, "prepare (flush)"),
                code: "delivery".into(),
                message: format!(
                    "{} of {} records acknowledged, {} failed (first: {})",
                    d.acked,
                    d.sent,
                    d.failed,
                    d.first_error.as_deref().unwrap_or("none")
                ),
                abortable: true,
            });
        }
        Ok(Prepared { records: d.sent })
    }

    pub fn commit(&self) -> Result<(), TxnError> {
        self.producer
            .commit_transaction(self.config.request_timeout)
            .map_err(|e| self.classify("commit_transaction", e, Effect::Decides))
    }

    pub fn abort(&self) -> Result<(), TxnError> {
        self.producer
            .abort_transaction(self.config.request_timeout)
            .map_err(|e| self.classify("abort_transaction", e, Effect::Decides))
    }

    fn classify(&self, what: &str, e: KafkaError, effect: Effect) -> TxnError {
        classify(&self.config.bootstrap, &self.config.transactional_id, what, &e, effect)
    }
}

/// The newest committed mark of a transactional id on `topic` (see
/// [`TxnProducer::mark`]): its offset (a checkpoint id) and its note, or
/// `None` when no transaction of the id ever committed one. Read with
/// OffsetFetch by a consumer that joins nothing, without asking for stable
/// offsets: a transaction left open (its process killed) holds a pending
/// mark the broker would otherwise make the reader wait on until the
/// transaction ends; the committed mark is what is asked for.
pub fn last_mark(
    bootstrap: &str,
    transactional_id: &str,
    topic: &str,
    timeout: Duration,
) -> Result<Option<(i64, String)>, TxnError> {
    let at = || site(bootstrap, transactional_id, "reading the committed mark (OffsetFetch)");
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", transactional_id)
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_uncommitted")
        .create()
        .map_err(|e| TxnError::Config { message: format!("creating the mark's reader: {e}") })?;
    let mut asked = TopicPartitionList::new();
    asked.add_partition(topic, 0);
    // A broker that just started (or the group's coordinator moving) answers
    // NotCoordinator or CoordinatorLoadInProgress for a while: asked again
    // until `timeout`, then unreachable.
    let deadline = std::time::Instant::now() + timeout;
    let committed = loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match consumer.committed_offsets(asked.clone(), left.max(Duration::from_millis(100))) {
            Ok(committed) => break committed,
            Err(e) if e.rdkafka_error_code().is_some_and(is_passing) && std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => return Err(TxnError::Unreachable { at: at(), message: e.to_string() }),
        }
    };
    let entry = committed
        .find_partition(topic, 0)
        .ok_or_else(|| TxnError::Malformed { at: at(), message: format!("no answer for {topic:?} partition 0") })?;
    match entry.offset() {
        Offset::Offset(offset) => Ok(Some((offset, entry.metadata().to_string()))),
        Offset::Invalid => Ok(None),
        other => Err(TxnError::Malformed { at: at(), message: format!("the committed mark is {other:?}") }),
    }
}

/// The group metadata of the consumer group named as the transactional id,
/// taken from a consumer that joins nothing and is dropped at once.
fn group_metadata(config: &TxnConfig) -> Result<ConsumerGroupMetadata, TxnError> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &config.bootstrap)
        .set("group.id", &config.transactional_id)
        .set("enable.auto.commit", "false")
        .create()
        .map_err(|e| TxnError::Config { message: format!("creating the mark's group handle: {e}") })?;
    consumer.group_metadata().ok_or_else(|| TxnError::Config {
        message: format!("librdkafka gave no group metadata for {:?}", config.transactional_id),
    })
}

fn is_fencing(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::ProducerFenced
            | RDKafkaErrorCode::InvalidProducerEpoch
            | RDKafkaErrorCode::Fenced
            | RDKafkaErrorCode::TransactionCoordinatorFenced
    )
}

/// An answer that says "not yet" rather than "no": worth asking again.
fn is_passing(code: RDKafkaErrorCode) -> bool {
    is_transport(code) || matches!(code, RDKafkaErrorCode::CoordinatorLoadInProgress)
}

fn is_transport(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::AllBrokersDown
            | RDKafkaErrorCode::BrokerTransportFailure
            | RDKafkaErrorCode::Resolve
            | RDKafkaErrorCode::NetworkException
            | RDKafkaErrorCode::RequestTimedOut
            | RDKafkaErrorCode::OperationTimedOut
            | RDKafkaErrorCode::MessageTimedOut
            | RDKafkaErrorCode::TimedOutQueue
            | RDKafkaErrorCode::CoordinatorNotAvailable
            | RDKafkaErrorCode::NotCoordinator
    )
}

/// One rule for every call: fencing first, then transport (in doubt where
/// the call decides the transaction), then the broker's refusal.
fn classify(bootstrap: &str, transactional_id: &str, what: &str, e: &KafkaError, effect: Effect) -> TxnError {
    let (at, message) = (site(bootstrap, transactional_id, what), e.to_string());
    let (retriable, abortable) = match e {
        KafkaError::Transaction(t) => (t.is_retriable(), t.txn_requires_abort()),
        _ => (false, false),
    };
    let code = e.rdkafka_error_code();
    match code {
        Some(c) if is_fencing(c) => TxnError::Fenced { at, message },
        Some(c) if (is_transport(c) || retriable) && effect == Effect::Decides => TxnError::InDoubt { at, message },
        Some(c) if is_transport(c) && !abortable => TxnError::Unreachable { at, message },
        Some(RDKafkaErrorCode::UnsupportedVersion | RDKafkaErrorCode::UnsupportedFeature) => {
            TxnError::Unsupported { at, api: "transactions", message }
        }
        _ if effect == Effect::Decides && retriable => TxnError::InDoubt { at, message },
        _ => TxnError::Refused {
            at,
            code: code.map_or_else(|| "client".to_string(), |c| format!("{c:?}")),
            message,
            abortable,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(code: RDKafkaErrorCode, effect: Effect) -> TxnErrorClass {
        classify("127.0.0.1:1", "t", "x", &KafkaError::Flush(code), effect).class()
    }

    #[test]
    fn fencing_wins_over_everything() {
        for c in [RDKafkaErrorCode::ProducerFenced, RDKafkaErrorCode::InvalidProducerEpoch, RDKafkaErrorCode::Fenced] {
            assert_eq!(class(c, Effect::None), TxnErrorClass::Fenced);
            assert_eq!(class(c, Effect::Decides), TxnErrorClass::Fenced);
        }
    }

    #[test]
    fn a_lost_commit_is_in_doubt_and_a_lost_init_unreachable() {
        for c in [RDKafkaErrorCode::OperationTimedOut, RDKafkaErrorCode::AllBrokersDown] {
            assert_eq!(class(c, Effect::Decides), TxnErrorClass::InDoubt, "{c:?}");
            assert_eq!(class(c, Effect::None), TxnErrorClass::Unreachable, "{c:?}");
        }
        assert_eq!(class(RDKafkaErrorCode::InvalidTransactionalState, Effect::Decides), TxnErrorClass::Refused);
        assert_eq!(class(RDKafkaErrorCode::UnsupportedVersion, Effect::None), TxnErrorClass::Unsupported);
    }

    #[test]
    fn transactional_ids_are_checked() {
        assert!(check_transactional_id("clink-job-1.sink_a-0").is_ok());
        for bad in ["", "a b", "é", &"x".repeat(250)] {
            assert!(check_transactional_id(bad).is_err(), "{bad:?}");
        }
    }
}
