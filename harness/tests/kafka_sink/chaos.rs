//! Random kills from outside: the Kafka→Kafka job and its broker (a broker
//! of the trial's own) SIGKILLed at times a seeded generator picks, while the
//! job runs with slowed sinks; the job resumed after every kill, the broker
//! started again on its data; at the end the output is read `read_committed`
//! by Apache Kafka's own console consumer (a client that shares no code with
//! ours) and compared with the reference as a multiset.
//!
//! The seed is printed; `CLINK_CHAOS_SEED` replays one. A run that never
//! ends within the bound its clean run sets fails the trial, so a hang is a
//! failure here, not a wait.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clink_basics::multiset::{describe, multiset_diff};
use libtest_mimic::Failed;

use super::services::{services, PrivateKafka};
use super::{reference, Scenario};

/// Kills of the job (and of the broker, at most [`BROKER_KILLS`] of them).
const ROUNDS: u32 = 6;
/// A broker takes about 13 s to come back (it waits out its old session).
const BROKER_KILLS: u32 = 2;
/// Every sink slowed at each prepare, so a run lasts long enough to be hit.
const SLOW: &str = "sink.before_prepare@*=slow:15";

/// SplitMix64: a seeded sequence, the same for a seed on every machine.
struct Dice(u64);

impl Dice {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A duration from `low` to `high` milliseconds.
    fn millis(&mut self, low: u64, high: u64) -> Duration {
        Duration::from_millis(low + self.next() % (high - low + 1))
    }
}

fn seed() -> Result<u64, Failed> {
    match std::env::var("CLINK_CHAOS_SEED") {
        Ok(text) => Ok(text.trim().parse().map_err(|_| format!("CLINK_CHAOS_SEED={text:?} is not a number"))?),
        Err(_) => Ok(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_nanos() as u64),
    }
}

pub fn random_kills_of_job_and_broker(_: &str) -> Result<(), Failed> {
    let seed = seed()?;
    println!("chaos: seed {seed} (CLINK_CHAOS_SEED={seed} replays it)");
    let mut dice = Dice(seed);
    let dir = tempfile::tempdir_in(super::scratch())?;
    let broker = PrivateKafka::start(&dir.path().join("broker"))?;
    let s = Scenario::new("chaos", &broker.bootstrap)?.with_every("30");
    let bound = clean_bound(&s)?;
    let mut log = Vec::new();
    let mut broker_kills = 0;
    let mut finished = false;
    for round in 1..=ROUNDS {
        let mut job = spawn(&s, round)?;
        std::thread::sleep(dice.millis(300, 2_500));
        if let Some(status) = job.try_wait()? {
            log.push(format!("round {round}: the job ended ({status}) before its kill"));
            finished = status.success();
            if finished {
                break;
            }
            continue;
        }
        if broker_kills < BROKER_KILLS && dice.next().is_multiple_of(3) {
            broker.kill()?;
            broker_kills += 1;
            let down = dice.millis(0, 2_000);
            std::thread::sleep(down);
            broker.restart()?;
            // The job may have failed for want of its broker, or ridden it out.
            let outcome = wait_bounded(&mut job, bound)?;
            log.push(format!("round {round}: broker killed, down {} ms; the job then {outcome}", down.as_millis()));
            finished = outcome == "finished";
            if finished {
                break;
            }
        } else {
            job.kill()?;
            job.wait()?;
            log.push(format!("round {round}: the job killed"));
        }
    }
    if !finished {
        let mut last = spawn(&s, ROUNDS + 1)?;
        let outcome = wait_bounded(&mut last, bound)?;
        log.push(format!("the last run {outcome}"));
        if outcome != "finished" {
            return Err(format!("seed {seed}: the last run did not finish: {outcome}\n{}", log.join("\n")).into());
        }
    }
    let committed = read_committed_by_kafka(&broker.bootstrap, &s.output)?;
    let diff = multiset_diff(reference().iter().cloned(), committed.iter().cloned());
    if !diff.is_equal() {
        return Err(format!("seed {seed}: {}\n{}", describe(&diff, 3), log.join("\n")).into());
    }
    println!("{}", log.join("\n"));
    println!(
        "chaos: seed {seed}: {} rounds, {broker_kills} broker kills; Kafka's console consumer reads exactly the {} reference rows",
        log.len(),
        committed.len()
    );
    Ok(())
}

/// The job run (or resumed) as a child, its logs under the scenario's directory.
fn spawn(s: &Scenario, round: u32) -> Result<Child, Failed> {
    let log = |what: &str| std::fs::File::create(s.dir.path().join(format!("round-{round}.{what}")));
    Ok(s.command("ck", Some(SLOW), &[]).stdout(log("stdout")?).stderr(log("stderr")?).spawn()?)
}

/// How long a run may take: a clean run of the same job on the shared broker,
/// timed, times a margin (the restarts, the broker's return, a loaded machine).
fn clean_bound(s: &Scenario) -> Result<Duration, Failed> {
    let env = services(&["CLINK_KAFKA_BOOTSTRAP"])?;
    let clean = Scenario::private(&env["CLINK_KAFKA_BOOTSTRAP"])?.with_every(&s.every);
    let started = Instant::now();
    let out = clean.run(Some(SLOW));
    if !out.status.success() {
        return Err(format!("the clean run that times the bound failed:\n{}", super::stderr(&out)).into());
    }
    Ok((started.elapsed() * 10).max(Duration::from_secs(90)))
}

/// Waits for the child within `bound`: "finished", "failed (<status>)", or
/// an error when it is still running past the bound (it is killed).
fn wait_bounded(child: &mut Child, bound: Duration) -> Result<String, Failed> {
    let deadline = Instant::now() + bound;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(if status.success() { "finished".into() } else { format!("failed ({status})") });
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("a run was still going after {bound:?}, the bound its clean run sets").into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The topic read `read_committed` from its beginning by Apache Kafka's
/// ConsoleConsumer (the kafka-tools jar of the services' Kafka), until it has
/// been idle for 10 s. Its count of messages (on standard error) must equal
/// the rows read, so a consumer that stopped early is not taken for an
/// empty topic.
fn read_committed_by_kafka(bootstrap: &str, topic: &str) -> Result<Vec<String>, Failed> {
    let env: BTreeMap<String, String> = services(&["CLINK_KAFKA_LIBS"])?;
    let out = Command::new("java")
        .arg("-Dlog4j2.configurationFile=/nonexistent")
        .arg("-cp")
        .arg(format!("{}/*", env["CLINK_KAFKA_LIBS"]))
        .arg("org.apache.kafka.tools.consumer.ConsoleConsumer")
        .args(["--bootstrap-server", bootstrap, "--topic", topic, "--from-beginning"])
        .args(["--isolation-level", "read_committed", "--timeout-ms", "10000"])
        .stdin(Stdio::null())
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    // It ends on its idle timeout, which it reports on standard output.
    let rows: Vec<String> =
        text.lines().take_while(|l| !l.contains(" ERROR Error processing message")).map(str::to_string).collect();
    let said = String::from_utf8_lossy(&out.stderr);
    let processed = said
        .lines()
        .find_map(|l| l.strip_prefix("Processed a total of ")?.strip_suffix(" messages")?.parse::<usize>().ok())
        .ok_or_else(|| format!("the console consumer did not say how many messages it read:\n{said}"))?;
    if processed != rows.len() {
        return Err(format!("the console consumer read {processed} messages, printed {}", rows.len()).into());
    }
    Ok(rows)
}
