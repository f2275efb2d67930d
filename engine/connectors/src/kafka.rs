//! A Kafka log, through librdkafka: reading a topic's partitions from given
//! offsets by manual assignment, describing the log (its partitions, the
//! cluster's id, the topic's id where the client library can see it), and
//! producing to it.
//!
//! Nothing here commits offsets to the broker: a reader's position is the
//! caller's state, kept in its checkpoints. A missing topic, a broker that
//! stopped answering and a partition read past its end are reported as such,
//! never as an empty log.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer as _, ProducerContext, ThreadedProducer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::Known;

#[derive(Debug, Error)]
pub enum KafkaClientError {
    #[error("kafka at {bootstrap}: {what}: {message}")]
    Client { bootstrap: String, what: String, message: String },
    #[error("topic {topic:?} does not exist on the broker at {bootstrap} ({why})")]
    NoSuchTopic { bootstrap: String, topic: String, why: String },
    #[error("kafka at {bootstrap}: no broker has answered for {seconds} s ({last_error})")]
    BrokerGone { bootstrap: String, seconds: u64, last_error: String },
    #[error("kafka at {bootstrap}: topic {topic:?} exists with {existing} partitions, not {asked}")]
    OtherPartitionCount { bootstrap: String, topic: String, existing: u32, asked: u32 },
}

/// How a reader sees transactional writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    ReadCommitted,
    ReadUncommitted,
}

impl Isolation {
    pub fn parse(text: &str) -> Option<Isolation> {
        match text {
            "read_committed" => Some(Isolation::ReadCommitted),
            "read_uncommitted" => Some(Isolation::ReadUncommitted),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Isolation::ReadCommitted => "read_committed",
            Isolation::ReadUncommitted => "read_uncommitted",
        }
    }
}

/// Which log a reader reads: enough to tell, later, whether offsets still
/// name the same records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogIdentity {
    pub topic: String,
    pub partitions: u32,
    pub cluster_id: Known,
    pub topic_id: Known,
    pub isolation: Isolation,
}

/// Whether two records of a log name one log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SameLog {
    /// The same topic, partitions, cluster id and topic id.
    Same,
    /// Another log: what differs.
    Different(String),
    /// Nothing differs, but what would show them one log is not known: why.
    Unknown(String),
}

impl LogIdentity {
    /// Whether `self` and `other` name one log. A topic deleted and created
    /// again keeps its name, its partition count and its cluster, and only
    /// its topic id tells the two apart; so without both ids (a client that
    /// cannot show them, an all-zero id) the answer is unknown, never "the
    /// same log".
    pub fn same_log(&self, other: &LogIdentity) -> SameLog {
        if self.topic != other.topic {
            return SameLog::Different(format!("the topic was {:?}, then {:?}", self.topic, other.topic));
        }
        if self.partitions != other.partitions {
            return SameLog::Different(format!("it had {} partitions, then {}", self.partitions, other.partitions));
        }
        let mut unknown = Vec::new();
        for (what, a, b) in
            [("cluster id", &self.cluster_id, &other.cluster_id), ("topic id", &self.topic_id, &other.topic_id)]
        {
            match (a.identity(), b.identity()) {
                (Some(x), Some(y)) if x != y => return SameLog::Different(format!("its {what} was {x:?}, then {y:?}")),
                (Some(_), Some(_)) => {}
                _ => unknown.push(format!("the {what} is not known at both ends ({})", unknown_why(a, b))),
            }
        }
        if unknown.is_empty() {
            SameLog::Same
        } else {
            SameLog::Unknown(unknown.join("; "))
        }
    }
}

/// Why an identifier is not known at one end or the other.
fn unknown_why(a: &Known, b: &Known) -> String {
    [a, b]
        .into_iter()
        .find(|k| k.identity().is_none())
        .map(|k| match k {
            Known::Unavailable(why) => why.clone(),
            Known::Value(v) => format!("{v:?} identifies nothing"),
        })
        .unwrap_or_default()
}

/// Why the topic's id is not recorded: librdkafka learns it only through
/// its DescribeTopics admin call, which the rdkafka crate does not wrap.
pub const TOPIC_ID_UNAVAILABLE: &str =
    "the rdkafka crate's metadata exposes no topic id (librdkafka reports it only to DescribeTopics, which the crate does not wrap)";

/// What librdkafka reported about the brokers, kept for the reader to ask.
#[derive(Default)]
pub struct BrokerHealth {
    /// Since when every broker has been down, and the last error said.
    down_since: Mutex<Option<(Instant, String)>>,
}

impl BrokerHealth {
    fn reported(&self, error: &KafkaError, reason: &str) {
        let all_down = matches!(error.rdkafka_error_code(), Some(RDKafkaErrorCode::AllBrokersDown));
        let transport = matches!(
            error.rdkafka_error_code(),
            Some(RDKafkaErrorCode::BrokerTransportFailure | RDKafkaErrorCode::AllBrokersDown)
        );
        if let Ok(mut down) = self.down_since.lock() {
            if all_down || (transport && down.is_some()) {
                let since = down.as_ref().map_or_else(Instant::now, |(t, _)| *t);
                *down = Some((since, format!("{error}: {reason}")));
            }
        }
    }

    /// The broker answered: whatever was down is up again.
    pub fn answered(&self) {
        if let Ok(mut down) = self.down_since.lock() {
            *down = None;
        }
    }

    /// How long every broker has been down, and why, if it is.
    pub fn down_for(&self) -> Option<(Duration, String)> {
        let down = self.down_since.lock().ok()?;
        down.as_ref().map(|(since, why)| (since.elapsed(), why.clone()))
    }
}

/// The client context: librdkafka's errors go to [`BrokerHealth`], its log
/// lines to standard error only when they are warnings or worse.
pub struct ReaderContext {
    pub health: Arc<BrokerHealth>,
}

impl ClientContext for ReaderContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        if (level as i32) <= (RDKafkaLogLevel::Error as i32) {
            eprintln!("clink: kafka: {fac}: {message}");
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.health.reported(&error, reason);
    }
}

impl ConsumerContext for ReaderContext {}

/// One thing a poll returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Polled {
    Message {
        partition: i32,
        offset: i64,
        payload: Vec<u8>,
    },
    /// The reader is at the end of what the partition holds now.
    PartitionEnd {
        partition: i32,
    },
    /// Nothing within the poll's wait.
    Nothing,
}

/// How far a reader fetches ahead of what it has handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefetch {
    /// At most this much in one fetch. Smaller fetches interleave the
    /// partitions more finely; larger ones read faster (a broker answers
    /// each fetch in tens of milliseconds: tansu took 60 ms for 16 KiB).
    pub fetch_bytes: u32,
    /// At most this much queued in the client, over all partitions.
    pub queued_kbytes: u32,
}

impl Default for Prefetch {
    fn default() -> Self {
        Prefetch { fetch_bytes: 1024 * 1024, queued_kbytes: 16 * 1024 }
    }
}

/// Reads one topic's partitions from offsets the caller keeps.
pub struct LogReader {
    bootstrap: String,
    topic: String,
    consumer: BaseConsumer<ReaderContext>,
    health: Arc<BrokerHealth>,
}

/// How long a metadata or offsets request may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

impl LogReader {
    /// A reader of `topic` (nothing is assigned yet). `group` names the
    /// consumer group librdkafka requires for assignment; no offset is ever
    /// committed to it.
    pub fn connect(bootstrap: &str, topic: &str, isolation: Isolation, group: &str) -> Result<Self, KafkaClientError> {
        Self::connect_with(bootstrap, topic, isolation, group, Prefetch::default())
    }

    /// As [`LogReader::connect`], reading ahead no more than `prefetch` says.
    pub fn connect_with(
        bootstrap: &str,
        topic: &str,
        isolation: Isolation,
        group: &str,
        prefetch: Prefetch,
    ) -> Result<Self, KafkaClientError> {
        let health = Arc::new(BrokerHealth::default());
        let consumer: BaseConsumer<ReaderContext> = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("enable.partition.eof", "true")
            .set("auto.offset.reset", "error")
            .set("isolation.level", isolation.as_str())
            .set("allow.auto.create.topics", "false")
            .set("topic.metadata.refresh.interval.ms", "5000")
            // A fetch returns at least one whole batch, however large, so a
            // small limit bounds the batches per fetch, not a message's size.
            .set("fetch.max.bytes", prefetch.fetch_bytes.to_string())
            .set("max.partition.fetch.bytes", prefetch.fetch_bytes.to_string())
            .set("message.max.bytes", prefetch.fetch_bytes.max(1000).to_string())
            .set("queued.max.messages.kbytes", prefetch.queued_kbytes.to_string())
            .set("queued.min.messages", "1000")
            // Refill the queue as soon as it drains below its thresholds
            // (librdkafka's default waits a second).
            .set("fetch.queue.backoff.ms", "5")
            // A broker may hold a fetch for this long even with data to send (tansu does).
            .set("fetch.wait.max.ms", "10")
            .set_log_level(RDKafkaLogLevel::Error)
            .create_with_context(ReaderContext { health: health.clone() })
            .map_err(|e| client_error(bootstrap, "creating the consumer", e))?;
        Ok(Self { bootstrap: bootstrap.to_string(), topic: topic.to_string(), consumer, health })
    }

    pub fn health(&self) -> &BrokerHealth {
        &self.health
    }

    /// The log as the broker describes it; a topic the broker does not
    /// hold is refused by name, never read as empty.
    pub fn describe(&self, isolation: Isolation) -> Result<LogIdentity, KafkaClientError> {
        let partitions = self.partitions()?;
        let cluster_id = match self.consumer.client().fetch_cluster_id(REQUEST_TIMEOUT) {
            Some(id) if !id.is_empty() => Known::Value(id),
            _ => Known::Unavailable("the broker's metadata response named no cluster id".into()),
        };
        Ok(LogIdentity {
            topic: self.topic.clone(),
            partitions: partitions.len() as u32,
            cluster_id,
            topic_id: Known::Unavailable(TOPIC_ID_UNAVAILABLE.into()),
            isolation,
        })
    }

    /// The topic's partition ids, ascending.
    pub fn partitions(&self) -> Result<Vec<i32>, KafkaClientError> {
        let metadata = self
            .consumer
            .fetch_metadata(Some(&self.topic), REQUEST_TIMEOUT)
            .map_err(|e| client_error(&self.bootstrap, "reading the topic's metadata", e))?;
        let no_such = |why: String| KafkaClientError::NoSuchTopic {
            bootstrap: self.bootstrap.clone(),
            topic: self.topic.clone(),
            why,
        };
        let topic = metadata
            .topics()
            .iter()
            .find(|t| t.name() == self.topic)
            .ok_or_else(|| no_such("the metadata response does not list it".into()))?;
        if let Some(error) = topic.error() {
            return Err(no_such(format!("the broker says {error:?}")));
        }
        let mut ids: Vec<i32> = topic.partitions().iter().map(|p| p.id()).collect();
        if ids.is_empty() {
            return Err(no_such("it has no partitions".into()));
        }
        ids.sort_unstable();
        self.health.answered();
        Ok(ids)
    }

    /// The partition's first and next-to-be-written offsets (low, high).
    pub fn watermarks(&self, partition: i32) -> Result<(i64, i64), KafkaClientError> {
        let marks = self
            .consumer
            .fetch_watermarks(&self.topic, partition, REQUEST_TIMEOUT)
            .map_err(|e| client_error(&self.bootstrap, &format!("reading partition {partition}'s offsets"), e))?;
        self.health.answered();
        Ok(marks)
    }

    /// Reads `(partition, next offset)` pairs from those offsets on.
    pub fn assign(&self, positions: &[(i32, i64)]) -> Result<(), KafkaClientError> {
        let mut list = TopicPartitionList::new();
        for &(partition, offset) in positions {
            list.add_partition_offset(&self.topic, partition, Offset::Offset(offset))
                .map_err(|e| client_error(&self.bootstrap, "assigning partitions", e))?;
        }
        self.consumer.assign(&list).map_err(|e| client_error(&self.bootstrap, "assigning partitions", e))
    }

    /// The next message, a partition's end, or nothing within `wait`.
    pub fn poll(&self, wait: Duration) -> Result<Polled, KafkaClientError> {
        match self.consumer.poll(wait) {
            None => Ok(Polled::Nothing),
            Some(Ok(message)) => {
                self.health.answered();
                Ok(Polled::Message {
                    partition: message.partition(),
                    offset: message.offset(),
                    payload: message.payload().unwrap_or_default().to_vec(),
                })
            }
            Some(Err(KafkaError::PartitionEOF(partition))) => {
                self.health.answered();
                Ok(Polled::PartitionEnd { partition })
            }
            Some(Err(e)) => Err(client_error(&self.bootstrap, "reading messages", e)),
        }
    }

    /// Every payload the topic holds now, each partition read from its
    /// first offset to its end, in the order the reader saw them. A
    /// partition that does not reach its end within `limit` fails the read:
    /// what was seen up to then is not the topic.
    pub fn read_to_end(&self, limit: Duration) -> Result<Vec<Vec<u8>>, KafkaClientError> {
        let partitions = self.partitions()?;
        let mut starts = Vec::with_capacity(partitions.len());
        for &p in &partitions {
            starts.push((p, self.watermarks(p)?.0));
        }
        self.assign(&starts)?;
        let deadline = Instant::now() + limit;
        let mut ended = std::collections::BTreeSet::new();
        let mut seen = Vec::new();
        while ended.len() < partitions.len() {
            if Instant::now() > deadline {
                return Err(KafkaClientError::Client {
                    bootstrap: self.bootstrap.clone(),
                    what: format!("reading topic {:?} to its end", self.topic),
                    message: format!(
                        "{} of {} partitions reached their end in {} s",
                        ended.len(),
                        partitions.len(),
                        limit.as_secs()
                    ),
                });
            }
            match self.poll(Duration::from_millis(200))? {
                Polled::Message { payload, .. } => seen.push(payload),
                Polled::PartitionEnd { partition } => {
                    ended.insert(partition);
                }
                Polled::Nothing => {}
            }
        }
        Ok(seen)
    }

    /// Where the reader stands in a partition (the next offset it returns).
    pub fn position(&self, partition: i32) -> Result<Option<i64>, KafkaClientError> {
        let list = self.consumer.position().map_err(|e| client_error(&self.bootstrap, "reading positions", e))?;
        Ok(list.find_partition(&self.topic, partition).and_then(|p| match p.offset() {
            Offset::Offset(o) => Some(o),
            _ => None,
        }))
    }

    /// Fails when no broker has answered for longer than `limit`.
    pub fn check_brokers(&self, limit: Duration) -> Result<(), KafkaClientError> {
        match self.health.down_for() {
            Some((down, last_error)) if down > limit => Err(KafkaClientError::BrokerGone {
                bootstrap: self.bootstrap.clone(),
                seconds: down.as_secs(),
                last_error,
            }),
            _ => Ok(()),
        }
    }
}

fn client_error(bootstrap: &str, what: &str, e: KafkaError) -> KafkaClientError {
    KafkaClientError::Client { bootstrap: bootstrap.to_string(), what: what.to_string(), message: e.to_string() }
}

/// Writes messages to a topic, each to a partition the caller chose.
pub struct LogWriter {
    bootstrap: String,
    producer: ThreadedProducer<Deliveries>,
}

/// Counts the messages the broker never acknowledged, so that a flush can
/// say so: a writer that reports everything sent as written is a load
/// generator whose input is not what it claims.
#[derive(Default)]
pub struct Deliveries {
    failed: std::sync::atomic::AtomicU64,
    first: Mutex<Option<String>>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            self.failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if let Ok(mut first) = self.first.lock() {
                first.get_or_insert_with(|| e.to_string());
            }
        }
    }
}

impl LogWriter {
    pub fn connect(bootstrap: &str) -> Result<Self, KafkaClientError> {
        let producer: ThreadedProducer<Deliveries> = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("acks", "all")
            // A retried batch is written once (the broker drops a repeated
            // sequence): under load, retries without it duplicated input.
            .set("enable.idempotence", "true")
            .set("linger.ms", "5")
            // Small batches: a reader then meets the partitions interleaved
            // (a fetch returns whole batches, whatever its byte limit).
            .set("batch.num.messages", "64")
            .set("message.timeout.ms", "30000")
            .set_log_level(RDKafkaLogLevel::Error)
            .create_with_context(Deliveries::default())
            .map_err(|e| client_error(bootstrap, "creating the producer", e))?;
        Ok(Self { bootstrap: bootstrap.to_string(), producer })
    }

    /// Queues one message; waits while librdkafka's queue is full.
    pub fn send(&self, topic: &str, partition: i32, key: &[u8], payload: &[u8]) -> Result<(), KafkaClientError> {
        let mut record = BaseRecord::to(topic).partition(partition).key(key).payload(payload);
        loop {
            match self.producer.send(record) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err((e, _)) => return Err(client_error(&self.bootstrap, "producing", e)),
            }
        }
    }

    /// Waits until every queued message is acknowledged (or `timeout`).
    pub fn flush(&self, timeout: Duration) -> Result<(), KafkaClientError> {
        self.producer.flush(timeout).map_err(|e| client_error(&self.bootstrap, "flushing", e))?;
        let deliveries = self.producer.context();
        let failed = deliveries.failed.load(std::sync::atomic::Ordering::Relaxed);
        if failed > 0 {
            let first = deliveries.first.lock().ok().and_then(|f| f.clone()).unwrap_or_default();
            return Err(KafkaClientError::Client {
                bootstrap: self.bootstrap.clone(),
                what: "producing".into(),
                message: format!("{failed} messages were not delivered (the first: {first})"),
            });
        }
        match self.producer.in_flight_count() {
            0 => Ok(()),
            n => Err(KafkaClientError::Client {
                bootstrap: self.bootstrap.clone(),
                what: "flushing".into(),
                message: format!("{n} messages were not acknowledged within {} s", timeout.as_secs()),
            }),
        }
    }

    /// Creates `topic` with `partitions` partitions and the cleanup policy
    /// `delete` named, unless it exists with exactly that many (another count
    /// is refused: offsets would not mean what the caller thinks).
    pub fn ensure_topic(&self, topic: &str, partitions: u32) -> Result<bool, KafkaClientError> {
        self.ensure_topic_with(topic, partitions, Some("delete"))
    }

    /// [`LogWriter::ensure_topic`] with the cleanup policy given, or left to
    /// the broker (`None`, as another producer may create a topic).
    pub fn ensure_topic_with(
        &self,
        topic: &str,
        partitions: u32,
        cleanup_policy: Option<&str>,
    ) -> Result<bool, KafkaClientError> {
        use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
        let admin: AdminClient<rdkafka::client::DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .create()
            .map_err(|e| client_error(&self.bootstrap, "creating the admin client", e))?;
        if let Some(existing) = existing_partitions(admin.inner(), topic)? {
            if existing == partitions {
                return Ok(false);
            }
            return Err(KafkaClientError::OtherPartitionCount {
                bootstrap: self.bootstrap.clone(),
                topic: topic.to_string(),
                existing,
                asked: partitions,
            });
        }
        // The policy is named, not left to the broker's default: a reader
        // that must rule out compacted history can then read it back.
        let mut new = NewTopic::new(topic, partitions as i32, TopicReplication::Fixed(1));
        if let Some(policy) = cleanup_policy {
            new = new.set("cleanup.policy", policy);
        }
        let options = AdminOptions::new().operation_timeout(Some(REQUEST_TIMEOUT));
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().map_err(|e| {
            KafkaClientError::Client {
                bootstrap: self.bootstrap.clone(),
                what: "starting a runtime".into(),
                message: e.to_string(),
            }
        })?;
        let results = runtime
            .block_on(admin.create_topics([&new], &options))
            .map_err(|e| client_error(&self.bootstrap, "creating the topic", e))?;
        for result in results {
            if let Err((name, code)) = result {
                return Err(KafkaClientError::Client {
                    bootstrap: self.bootstrap.clone(),
                    what: format!("creating topic {name:?}"),
                    message: format!("{code:?}"),
                });
            }
        }
        Ok(true)
    }
}

/// The partition count of `topic`, or `None` when the broker does not hold it.
fn existing_partitions<C: ClientContext>(
    client: &rdkafka::client::Client<C>,
    topic: &str,
) -> Result<Option<u32>, KafkaClientError> {
    let metadata = client.fetch_metadata(Some(topic), REQUEST_TIMEOUT).map_err(|e| KafkaClientError::Client {
        bootstrap: String::new(),
        what: "reading the topic's metadata".into(),
        message: e.to_string(),
    })?;
    Ok(metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty())
        .map(|t| t.partitions().len() as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn isolation_levels_round_trip_and_nothing_else_parses() {
        for level in [Isolation::ReadCommitted, Isolation::ReadUncommitted] {
            assert_eq!(Isolation::parse(level.as_str()), Some(level));
        }
        assert_eq!(Isolation::parse("READ_COMMITTED"), None);
        assert_eq!(Isolation::parse(""), None);
    }

    fn log(cluster: Known, topic_id: Known) -> LogIdentity {
        LogIdentity {
            topic: "t".into(),
            partitions: 3,
            cluster_id: cluster,
            topic_id,
            isolation: Isolation::ReadCommitted,
        }
    }

    #[test]
    fn a_topic_id_the_client_cannot_show_leaves_the_same_log_unknown() {
        let cluster = Known::Value("c1".into());
        let invisible = Known::Unavailable(TOPIC_ID_UNAVAILABLE.into());
        let a = log(cluster.clone(), invisible.clone());
        match a.same_log(&a) {
            SameLog::Unknown(why) => assert!(why.contains("topic id") && why.contains("DescribeTopics"), "{why}"),
            other => panic!("two logs whose topic ids are unknown were found {other:?}"),
        }
        let zero = log(cluster.clone(), Known::Value("AAAAAAAAAAAAAAAAAAAAAA".into()));
        assert!(matches!(zero.same_log(&zero), SameLog::Unknown(_)), "an all-zero topic id identifies nothing");
        let id1 = log(cluster.clone(), Known::Value("Vt0TBgEfS2q3mS2kDN7kYw".into()));
        let id2 = log(cluster.clone(), Known::Value("q3mS2kDN7kYwVt0TBgEfS2".into()));
        assert_eq!(id1.same_log(&id1), SameLog::Same);
        assert!(matches!(id1.same_log(&id2), SameLog::Different(why) if why.contains("topic id")));
        let elsewhere = log(Known::Value("c2".into()), invisible);
        assert!(matches!(a.same_log(&elsewhere), SameLog::Different(why) if why.contains("cluster id")));
        let round_trip: LogIdentity = serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
        assert_eq!(round_trip, a);
    }

    #[test]
    fn a_broker_is_down_only_after_every_broker_was_reported_down() {
        let health = BrokerHealth::default();
        health.reported(&KafkaError::Global(RDKafkaErrorCode::BrokerTransportFailure), "one connection");
        assert!(health.down_for().is_none(), "one broken connection is not every broker down");
        health.reported(&KafkaError::Global(RDKafkaErrorCode::AllBrokersDown), "all");
        assert!(health.down_for().is_some());
        health.answered();
        assert!(health.down_for().is_none());
    }
}
