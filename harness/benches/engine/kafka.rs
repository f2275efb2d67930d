//! The `connectors` bench: the jobs that read Kafka, end to end against the
//! services `gates/services start` runs, each beside the broker's own bound
//! measured in the same run: Apache Kafka's `ProducerPerformance` (from
//! kafka-tools, the class `kafka-producer-perf-test.sh` runs) writing as many
//! records of the input's mean size into a topic of the same partitions,
//! `acks=all`, `linger.ms=5`. A job cannot move events faster than the
//! broker takes them from a plain producer, so events/s ÷ that bound says
//! how much of the broker the job leaves unused.
//!
//! - Kafka→ClickHouse, both jobs (records at least once, windows);
//! - Kafka→Kafka exactly once (`fixtures/jobs/kafka-kafka`: a transaction
//!   per sink subtask per checkpoint, a checkpoint every 10,000 records).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use clink_connectors::clickhouse::{sql, Connection, Endpoint};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use super::{clink, measure, median, runs, services, workspace, Figure, Goal};

const EVENTS: u64 = 200_000;
const PARTITIONS: &str = "3";
const EVERY: &str = "10000";

pub fn connectors(scratch: &Path, figures: &mut Vec<Figure>) {
    let Some(env) = services() else {
        eprintln!("  connectors: skipped: the services are not running (gates/services start)");
        return;
    };
    let (bootstrap, clickhouse) = (&env["CLINK_KAFKA_BOOTSTRAP"], &env["CLINK_CLICKHOUSE_HTTP"]);
    let stamp = std::process::id();
    let topic = format!("bench-{stamp}");
    let produced = measure(
        Command::new(clink())
            .args(["produce", "--seed", "1", "--accounts", "200", "--partitions", PARTITIONS, "--topic", &topic])
            .args(["--bootstrap", bootstrap, "--events"])
            .arg(EVENTS.to_string())
            .stdout(Stdio::null()),
    );
    let bound = broker_bound(&env, bootstrap, &topic, stamp);
    if let Some((rate, size)) = bound {
        figures.push(Figure::new(
            "connectors",
            format!("broker bound: ProducerPerformance, {}k records of {size} B, acks=all", EVENTS / 1000),
            rate,
            "ev/s",
        ));
    }
    let mut job_rate = |name: &str, rate: f64, goal: Option<f64>| {
        figures.push(
            Figure::new("connectors", format!("{name}, {}k events, events/s", EVENTS / 1000), rate, "ev/s").against(
                format!("clink produce of the same events: {:.1}s", produced.wall.as_secs_f64()),
                produced.wall.as_secs_f64(),
            ),
        );
        if let Some((bound, _)) = bound {
            let mut ratio = Figure::new("connectors", format!("{name} ÷ the broker bound"), rate / bound, "x")
                .against(format!("ProducerPerformance {bound:.0} records/s"), bound);
            if let Some(g) = goal {
                ratio = ratio.goal(Goal::AtLeast(g));
            }
            figures.push(ratio);
        }
    };
    let ch = Connection::open(&Endpoint::parse(clickhouse).expect("address")).expect("client");
    for (name, fixture) in [("records", "fixtures/jobs/kafka-clickhouse"), ("windows", "fixtures/jobs/kafka-windows")] {
        let mut walls = Vec::new();
        for i in 0..runs() {
            let table = format!("bench_{name}_{stamp}_{i}");
            let ddl = std::fs::read_to_string(workspace().join(fixture).join("table.sql")).expect("table.sql");
            ch.execute("create", ddl.trim().replace("{table}", &sql::qualified("default", &table)).as_str())
                .expect("the bench table");
            let work = job_dir(scratch, &format!("connectors-{name}-{i}"), fixture, |op| match op["type"].as_str() {
                Some("kafka_source") => op["params"]["topic"] = topic.clone().into(),
                Some("clickhouse_sink") => op["params"]["table"] = table.clone().into(),
                _ => {}
            });
            walls.push(run_job(&work, bootstrap, &["--clickhouse", clickhouse]));
            let _ = ch.execute("drop", &format!("DROP TABLE {}", sql::qualified("default", &table)));
        }
        job_rate(&format!("{name} job, Kafka into ClickHouse"), EVENTS as f64 / median(walls), None);
    }
    let mut walls = Vec::new();
    for i in 0..runs() {
        let out = format!("bench-out-{stamp}-{i}");
        let created = Command::new(clink())
            .args(["produce", "--partitions", "4", "--events", "0", "--topic", &out, "--bootstrap", bootstrap])
            .stdout(Stdio::null())
            .status()
            .expect("clink produce");
        assert!(created.success(), "making the output topic {out}");
        let work = job_dir(scratch, &format!("connectors-kafka-{i}"), "fixtures/jobs/kafka-kafka", |op| {
            match op["type"].as_str() {
                Some("kafka_source") => op["params"]["topic"] = topic.clone().into(),
                Some("kafka_sink") => {
                    op["params"]["topic"] = out.clone().into();
                    op["params"]["transactional_id_prefix"] = out.clone().into();
                }
                _ => {}
            }
        });
        walls.push(run_job(&work, bootstrap, &[]));
    }
    job_rate("Kafka→Kafka exactly once", EVENTS as f64 / median(walls), Some(0.5));
}

/// A work directory holding the fixture's job with `edit` applied to each operator.
fn job_dir(scratch: &Path, name: &str, fixture: &str, edit: impl Fn(&mut serde_json::Value)) -> std::path::PathBuf {
    let mut job: serde_json::Value =
        serde_json::from_slice(&std::fs::read(workspace().join(fixture).join("job.json")).expect("job"))
            .expect("job json");
    for op in job["operators"].as_array_mut().expect("operators") {
        edit(op);
    }
    let work = scratch.join(name);
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).expect("work");
    std::fs::write(work.join("job.json"), job.to_string()).expect("job file");
    work
}

/// One job run to its END; its wall time in seconds.
fn run_job(work: &Path, bootstrap: &str, extra: &[&str]) -> f64 {
    let cost = measure(
        Command::new(clink())
            .args(["run", "--quiet", "--checkpoint-every-records", EVERY, "--job"])
            .arg(work.join("job.json"))
            .arg("--output-dir")
            .arg(work.join("out"))
            .arg("--checkpoint-dir")
            .arg(work.join("ck"))
            .args(["--kafka-bootstrap", bootstrap])
            .args(extra)
            .stdout(Stdio::null()),
    );
    cost.wall.as_secs_f64()
}

/// The broker's bound: ProducerPerformance's records/s (median of the
/// runs) for as many records as the input holds, of its mean size, into a
/// fresh topic of as many partitions; and that size. `None`, said why, when
/// it cannot be measured.
fn broker_bound(
    env: &std::collections::BTreeMap<String, String>,
    bootstrap: &str,
    input: &str,
    stamp: u32,
) -> Option<(f64, usize)> {
    let Some(libs) = env.get("CLINK_KAFKA_LIBS") else {
        eprintln!("  connectors: no broker bound: the env file names no CLINK_KAFKA_LIBS (Kafka's jars)");
        return None;
    };
    let size = match mean_record_size(bootstrap, input) {
        Ok(size) => size,
        Err(e) => {
            eprintln!("  connectors: no broker bound: the input's record size: {e}");
            return None;
        }
    };
    let mut rates = Vec::new();
    for i in 0..runs() {
        let topic = format!("bench-bound-{stamp}-{i}");
        let created = Command::new(clink())
            .args(["produce", "--partitions", PARTITIONS, "--events", "0", "--topic", &topic, "--bootstrap", bootstrap])
            .stdout(Stdio::null())
            .status();
        if !created.is_ok_and(|s| s.success()) {
            eprintln!("  connectors: no broker bound: cannot make topic {topic}");
            return None;
        }
        let out = Command::new("java")
            .args(["-Xmx256m", "-cp", &format!("{libs}/*")])
            .arg(format!(
                "-Dlog4j2.configurationFile={}",
                workspace().join("gates/services.d/kafka/log4j2.properties").display()
            ))
            .arg(format!("-Dkafka.logs.dir={}", std::env::temp_dir().display()))
            .args(["org.apache.kafka.tools.ProducerPerformance", "--topic", &topic])
            .args(["--num-records", &EVENTS.to_string(), "--record-size", &size.to_string(), "--throughput", "-1"])
            .args(["--command-property", &format!("bootstrap.servers={bootstrap}"), "acks=all", "linger.ms=5"])
            .output();
        let text = out.as_ref().map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
        match summary_rate(&text) {
            Some(rate) => rates.push(rate),
            None => {
                eprintln!("  connectors: no broker bound: ProducerPerformance printed no summary ({out:?})");
                return None;
            }
        }
    }
    Some((median(rates), size))
}

/// The records/s of ProducerPerformance's last line: "N records sent, R records/sec (...)".
fn summary_rate(text: &str) -> Option<f64> {
    let last = text.lines().rev().find(|l| l.contains(" records sent, "))?;
    let (_, rest) = last.split_once(" records sent, ")?;
    rest.split_once(" records/sec")?.0.trim().parse().ok()
}

/// The mean payload size of the first thousand records of `topic`'s partition 0.
fn mean_record_size(bootstrap: &str, topic: &str) -> Result<usize, String> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "clink-bench-size")
        .set("enable.auto.commit", "false")
        .create()
        .map_err(|e| e.to_string())?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning).map_err(|e| e.to_string())?;
    consumer.assign(&tpl).map_err(|e| e.to_string())?;
    let (mut n, mut bytes) = (0usize, 0usize);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while n < 1000 && std::time::Instant::now() < deadline {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            n += 1;
            bytes += m.payload().map_or(0, <[u8]>::len);
        }
    }
    if n == 0 {
        return Err(format!("no record of {topic} read in 20 s"));
    }
    Ok(bytes / n)
}
