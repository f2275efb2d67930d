//! `clink produce`: publishes a seeded input to a Kafka topic, the events
//! `clink gen-input` writes for the same seed, in the same order, as JSON
//! messages a `kafka_source` reads.

use std::time::{Duration, Instant};

use clap::Args;
use clink_basics::exit::Exit;
use clink_connectors::kafka::{KafkaClientError, LogWriter};
use clink_engine::gen::events;
use serde_json::json;

use super::Output;

/// Publish a seeded input to a Kafka topic.
///
/// Message i (from 0) is {"id": i, "time": <epoch ms>, "account": "acct-NNN",
/// "amount": "<decimal>"}, keyed by its account, into partition
/// fnv1a(account) mod --partitions, so one account's events stay in order.
/// The topic is created with --partitions partitions if it does not exist;
/// one with another partition count is refused, and into one that exists
/// the events are appended (the summary says so).
#[derive(Args, Debug)]
pub struct ProduceArgs {
    /// The Kafka brokers (HOST:PORT[,HOST:PORT...]).
    #[arg(long, value_name = "HOSTS", env = "CLINK_KAFKA_BOOTSTRAP")]
    bootstrap: String,
    /// The topic to publish to (created when it does not exist).
    #[arg(long)]
    topic: String,
    /// The topic's partition count: a new topic is created with it, an
    /// existing one must have it.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=1000))]
    partitions: u32,
    /// The same seed and accounts always give the same events (gen-input's).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// How many events to publish.
    #[arg(long, default_value_t = 24_000)]
    events: u64,
    /// How many accounts the events are spread over (acct-001 ...).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    accounts: u32,
    /// Skip the first N events of the stream (publish a continuation).
    #[arg(long, default_value_t = 0)]
    skip: u64,
    /// Publish at most this many events per second, paced evenly (0: as
    /// fast as the broker takes them). A load generator for a running job.
    #[arg(long, default_value_t = 0, value_name = "EVENTS_PER_S")]
    rate: u64,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

/// Paces a stream of sends to `rate` per second from `start`.
struct Pace {
    start: Instant,
    rate: u64,
}

impl Pace {
    /// Waits until the `sent`th event is due (checked every 100 events, so
    /// the wait is one sleep per batch rather than one per message).
    fn wait_for(&self, sent: u64) {
        if self.rate == 0 || !sent.is_multiple_of(100) {
            return;
        }
        let due = self.start + Duration::from_secs_f64(sent as f64 / self.rate as f64);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
}

/// FNV-1a over the key: a partitioner whose choice never changes with a
/// library version.
pub fn partition_of(key: &str, partitions: u32) -> i32 {
    let mut hash: u32 = 0x811c_9dc5;
    for b in key.bytes() {
        hash ^= u32::from(b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    (hash % partitions.max(1)) as i32
}

pub fn main(args: ProduceArgs) -> Exit {
    let out = Output::new("produce", args.json);
    let started = Instant::now();
    let writer = match LogWriter::connect(&args.bootstrap) {
        Ok(w) => w,
        Err(e) => return out.refuse(e),
    };
    let created = match writer.ensure_topic(&args.topic, args.partitions) {
        Ok(created) => created,
        Err(e @ KafkaClientError::OtherPartitionCount { existing, .. }) => {
            return out.refuse(format!(
                "{e}: the broker keeps a topic an earlier run made, and its events with it; give this run a \
                 topic of its own (--topic), or publish after what it holds with --partitions {existing}"
            ))
        }
        Err(e) => return out.refuse(e),
    };
    let mut per_partition = vec![0u64; args.partitions as usize];
    let pace = Pace { start: Instant::now(), rate: args.rate };
    for (sent, (id, event)) in
        (0..args.skip + args.events).zip(events(args.seed, args.accounts)).skip(args.skip as usize).enumerate()
    {
        pace.wait_for(sent as u64);
        let partition = partition_of(&event.account, args.partitions);
        let message = json!({"id": id, "time": event.time, "account": event.account, "amount": event.amount});
        if let Err(e) = writer.send(&args.topic, partition, event.account.as_bytes(), message.to_string().as_bytes()) {
            return out.stop(Exit::Failed, e);
        }
        per_partition[partition as usize] += 1;
    }
    if let Err(e) = writer.flush(Duration::from_secs(60)) {
        return out.stop(Exit::Failed, e);
    }
    let seconds = started.elapsed().as_secs_f64();
    let doc = json!({
        "format": "clink-produce-summary",
        "version": 1,
        "topic": args.topic,
        "created": created,
        "partitions": args.partitions,
        "events": args.events,
        "first_id": args.skip,
        "per_partition": per_partition,
        "seconds": seconds,
        "rate": (args.rate > 0).then_some(args.rate),
    });
    let text = || {
        let existed = if created { "" } else { "; the topic existed: they follow what it held" };
        format!(
            "published {} events to {} ({} partitions{existed}) in {seconds:.1} s",
            args.events, args.topic, args.partitions
        )
    };
    out.report(doc, text, Exit::Passed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_paced_stream_waits_for_each_batch_and_an_unpaced_one_never() {
        let pace = Pace { start: Instant::now(), rate: 1000 };
        pace.wait_for(200);
        assert!(pace.start.elapsed() >= Duration::from_millis(200), "200 events at 1000/s take 0.2 s");
        let unpaced = Pace { start: Instant::now(), rate: 0 };
        unpaced.wait_for(1_000_000);
        assert!(unpaced.start.elapsed() < Duration::from_millis(100));
    }

    #[test]
    fn the_partitioner_is_fixed_by_its_definition() {
        assert_eq!(partition_of("", 7), (0x811c_9dc5u32 % 7) as i32);
        let spread: std::collections::BTreeSet<i32> =
            (0..50).map(|a| partition_of(&format!("acct-{a:03}"), 4)).collect();
        assert_eq!(spread.len(), 4, "fifty accounts reach every partition");
    }
}
