//! Reading a scope's exact ranges from the Kafka log, with librdkafka.
//!
//! Before reading, the log must be the one the scope recorded: the cluster's
//! id and the topic's partition count (the topic's id where the client can
//! see it; this client cannot, and records it as unverified, never as the
//! same log), and a cleanup policy that does not compact. Where the scope
//! records no cluster id or partition count, or the broker does not name the
//! policy, the read is incomplete with that reason: a difference from the
//! job's rows could then be the log's, and is never blamed on the job. A range is complete only once
//! a record at or past its end was delivered, or the partition's end was
//! reached at or past it: under read_committed, transaction markers and
//! aborted records hold offsets that are never delivered, so a range's span
//! is never taken as its record count, and a quiet poll is never taken as
//! its end. History that expired, a log that ends early, an error, a bound
//! or the deadline leave the read incomplete, with the reason.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

/// One record as read: its offset and payload.
#[derive(Debug, Clone)]
pub struct Record {
    pub offset: i64,
    pub payload: Vec<u8>,
}

/// What the read established about the log.
#[derive(Debug, Default)]
pub struct ReadLog {
    /// Per partition, the records of `[from, to)` in offset order.
    pub records: BTreeMap<i32, Vec<Record>>,
    /// Why the read is incomplete, if it is.
    pub incomplete: Option<String>,
    /// What the reader checked.
    pub verified: Vec<String>,
    /// What it could not check, and why.
    pub unverified: Vec<String>,
}

pub struct Request<'a> {
    pub bootstrap: &'a str,
    pub topic: &'a str,
    pub isolation: &'a str,
    pub cluster_id: Option<&'a str>,
    pub partitions_in_log: Option<u64>,
    /// `(partition, from, to)`.
    pub ranges: Vec<(i32, i64, i64)>,
    pub deadline: Duration,
    pub max_records: u64,
}

const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

pub fn read(request: &Request<'_>) -> ReadLog {
    let mut out = ReadLog::default();
    match read_into(request, &mut out) {
        Ok(()) => {}
        Err(why) => {
            if out.incomplete.is_none() {
                out.incomplete = Some(why);
            }
        }
    }
    out
}

fn read_into(r: &Request<'_>, out: &mut ReadLog) -> Result<(), String> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", r.bootstrap)
        .set("group.id", "clink-reference-audit")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "true")
        .set("auto.offset.reset", "error")
        .set("allow.auto.create.topics", "false")
        .set("isolation.level", r.isolation)
        .set_log_level(RDKafkaLogLevel::Error)
        .create()
        .map_err(|e| format!("an error: the Kafka client could not start: {e}"))?;
    // The log must be the one the scope recorded.
    let cluster = consumer.client().fetch_cluster_id(REQUEST_TIMEOUT);
    match (r.cluster_id, cluster.as_deref()) {
        (Some(want), Some(got)) if want == got => {
            out.verified.push(format!("the cluster's id is the recorded {want:?}"))
        }
        (Some(want), Some(got)) => {
            return Err(format!("another cluster: its id is {got:?}, the scope recorded {want:?}"))
        }
        (Some(want), None) => {
            return Err(format!("an error: the broker named no cluster id (the scope recorded {want:?})"))
        }
        (None, _) => {
            return Err(
                "the log's identity cannot be read: the scope records no cluster id, so another cluster could not be told apart"
                    .into(),
            )
        }
    }
    let metadata = consumer
        .fetch_metadata(Some(r.topic), REQUEST_TIMEOUT)
        .map_err(|e| format!("an error: reading the topic's metadata: {e}"))?;
    let topic = metadata
        .topics()
        .iter()
        .find(|t| t.name() == r.topic)
        .filter(|t| t.error().is_none() && !t.partitions().is_empty())
        .ok_or_else(|| format!("the topic {:?} does not exist any more (deleted, or another cluster)", r.topic))?;
    let count = topic.partitions().len() as u64;
    match r.partitions_in_log {
        Some(n) if n != count => {
            return Err(format!("a recreated topic or another log: it has {count} partitions, the scope recorded {n}"))
        }
        Some(n) => out.verified.push(format!("the topic has the recorded {n} partitions")),
        None => {
            return Err("the log's identity cannot be read: the scope records no partition count for the log".into())
        }
    }
    out.unverified.push(
        "the topic's id: this client (the rdkafka crate) cannot see it, so a topic deleted and created again is told apart only by its offsets".into(),
    );
    match compaction(r) {
        Ok(Some(policy)) if policy.contains("compact") => {
            return Err(format!(
            "compacted history: the topic's cleanup.policy is {policy:?}, so offsets in the range may hold no record"
        ))
        }
        Ok(Some(policy)) => out.verified.push(format!("the topic does not compact (cleanup.policy {policy:?})")),
        // Without the policy, a compacted log's missing records would read as
        // the job's defect: the reference cannot vouch for the range.
        Ok(None) => {
            return Err(
                "the topic's cleanup policy cannot be read: the broker did not name its cleanup.policy, so compacted history could not be ruled out"
                    .into(),
            )
        }
        Err(why) => {
            return Err(format!(
                "the topic's cleanup policy cannot be read ({why}), so compacted history could not be ruled out"
            ))
        }
    }
    // Expired history and a log that ends early, before reading.
    let mut list = TopicPartitionList::new();
    let mut pending: BTreeMap<i32, (i64, i64)> = BTreeMap::new();
    for &(p, from, to) in &r.ranges {
        let (low, high) = consumer
            .fetch_watermarks(r.topic, p, REQUEST_TIMEOUT)
            .map_err(|e| format!("an error: partition {p}'s offsets: {e}"))?;
        if from < low && from < to {
            return Err(format!(
                "expired history: partition {p} now starts at offset {low}, after the range's start {from}"
            ));
        }
        if high < to {
            return Err(format!("a log that ends early: partition {p} ends at offset {high}, before the range's end {to} (recreated or truncated)"));
        }
        out.records.insert(p, Vec::new());
        if from < to {
            pending.insert(p, (from, to));
            list.add_partition_offset(r.topic, p, Offset::Offset(from)).map_err(|e| format!("an error: {e}"))?;
        }
    }
    out.verified.push("every range's start is still in the log and its end is not past the log's end".into());
    if pending.is_empty() {
        return Ok(());
    }
    consumer.assign(&list).map_err(|e| format!("an error: assigning the partitions: {e}"))?;
    let started = Instant::now();
    let mut read_total: u64 = 0;
    while !pending.is_empty() {
        if started.elapsed() > r.deadline {
            return Err(format!(
                "the deadline ({} ms) passed with partitions {:?} not read to their ends",
                r.deadline.as_millis(),
                pending.keys().collect::<Vec<_>>()
            ));
        }
        match consumer.poll(Duration::from_millis(200)) {
            None => continue,
            Some(Ok(m)) => {
                let p = m.partition();
                let Some(&(from, to)) = pending.get(&p) else { continue };
                let offset = m.offset();
                if offset < from {
                    continue;
                }
                if offset >= to {
                    // A record at or past the end was delivered: the range is whole.
                    pending.remove(&p);
                    continue;
                }
                read_total += 1;
                if read_total > r.max_records {
                    return Err(format!("a bound: more than {} records in the ranges", r.max_records));
                }
                if let Some(records) = out.records.get_mut(&p) {
                    if records.last().is_some_and(|last| last.offset >= offset) {
                        return Err(format!("an error: partition {p} delivered offset {offset} out of order"));
                    }
                    records.push(Record { offset, payload: m.payload().unwrap_or_default().to_vec() });
                }
                if offset + 1 >= to {
                    pending.remove(&p);
                }
            }
            Some(Err(KafkaError::PartitionEOF(p))) => {
                let Some(&(_, to)) = pending.get(&p) else { continue };
                let position = consumer
                    .position()
                    .ok()
                    .and_then(|l| l.find_partition(r.topic, p).and_then(|e| e.offset().to_raw()));
                match position {
                    Some(at) if at >= to => {
                        pending.remove(&p);
                    }
                    Some(at) => {
                        return Err(format!(
                            "a log that ends early: partition {p} ends at offset {at}, before the range's end {to}"
                        ))
                    }
                    None => {}
                }
            }
            Some(Err(e)) => return Err(format!("an error while reading: {e}")),
        }
    }
    out.verified.push(format!(
        "every range was read to its end ({read_total} records; a record at or past each end delivered, or the log's end reached at or past it)"
    ));
    Ok(())
}

/// The topic's cleanup.policy, as the broker describes it.
fn compaction(r: &Request<'_>) -> Result<Option<String>, String> {
    use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
    use rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", r.bootstrap)
        .set_log_level(RDKafkaLogLevel::Emerg)
        .create()
        .map_err(|e| format!("the admin client could not start: {e}"))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("a runtime for the admin client: {e}"))?;
    let options = AdminOptions::new().request_timeout(Some(REQUEST_TIMEOUT));
    let specifier = [ResourceSpecifier::Topic(r.topic)];
    let answer = runtime
        .block_on(async { tokio::time::timeout(REQUEST_TIMEOUT, admin.describe_configs(&specifier, &options)).await });
    let results = match answer {
        Err(_) => return Err("the broker did not describe the topic in time".into()),
        Ok(Err(e)) => return Err(format!("the broker did not describe the topic: {e}")),
        Ok(Ok(results)) => results,
    };
    for result in results {
        match result {
            Ok(resource) => {
                if let Some(entry) = resource.get("cleanup.policy") {
                    return Ok(entry.value.clone());
                }
            }
            Err(e) => return Err(format!("the broker did not describe the topic: {e}")),
        }
    }
    Ok(None)
}
