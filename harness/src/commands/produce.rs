//! `clink produce`: publishes a seeded input to a Kafka topic, the events
//! `clink gen-input` writes for the same seed, in the same order, as JSON
//! messages a `kafka_source` reads.

use std::time::{Duration, Instant};

use clap::Args;
use clink_basics::exit::Exit;
use clink_connectors::kafka::LogWriter;
use clink_engine::gen::events;
use serde_json::json;

use super::Output;

/// Publish a seeded input to a Kafka topic.
///
/// Message i (from 0) is {"id": i, "time": <epoch ms>, "account": "acct-NNN",
/// "amount": "<decimal>"}, keyed by its account, into partition
/// fnv1a(account) mod --partitions, so one account's events stay in order.
/// The topic is created with --partitions partitions if it does not exist;
/// one with another partition count is refused.
#[derive(Args, Debug)]
pub struct ProduceArgs {
    /// The Kafka brokers (HOST:PORT[,HOST:PORT...]).
    #[arg(long, value_name = "HOSTS", env = "CLINK_KAFKA_BOOTSTRAP")]
    bootstrap: String,
    #[arg(long)]
    topic: String,
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=1000))]
    partitions: u32,
    /// The same seed and accounts always give the same events (gen-input's).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long, default_value_t = 24_000)]
    events: u64,
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    accounts: u32,
    /// Skip the first N events of the stream (publish a continuation).
    #[arg(long, default_value_t = 0)]
    skip: u64,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
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
        Err(e) => return out.refuse(e),
    };
    let mut per_partition = vec![0u64; args.partitions as usize];
    for (id, event) in (0..args.skip + args.events).zip(events(args.seed, args.accounts)).skip(args.skip as usize) {
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
    });
    let text = || {
        format!("published {} events to {} ({} partitions) in {seconds:.1} s", args.events, args.topic, args.partitions)
    };
    out.report(doc, text, Exit::Passed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_partitioner_is_fixed_by_its_definition() {
        assert_eq!(partition_of("", 7), (0x811c_9dc5u32 % 7) as i32);
        let spread: std::collections::BTreeSet<i32> =
            (0..50).map(|a| partition_of(&format!("acct-{a:03}"), 4)).collect();
        assert_eq!(spread.len(), 4, "fifty accounts reach every partition");
    }
}
