//! The `peers` bench: our engine against the engines a user would otherwise
//! run the same jobs on, in the same run, on the same input, on this machine
//! (`bench/peers/`, built and checked by `bench/peers/build`):
//!
//! - the example job (segment files in, 10 s windows and the 30 s idle
//!   detector out, each through an exactly-once file sink) against Apache
//!   Flink 2.3 (DataStream API, MiniCluster in one JVM), HashMap state and
//!   RocksDB state, at 1M and 10M events; the same at 1M on one core
//!   (`taskset -c 0`) and on two;
//! - the Kafka→Kafka exactly-once job against Kafka Streams 4.4 with
//!   `exactly_once_v2` (needs the services);
//! - the Kafka→ClickHouse records job against Flink's KafkaSource and JDBC
//!   sink with ClickHouse's JDBC driver (needs the services).
//!
//! Correct first: every peer's (and our) first run of each configuration is
//! compared with the reference before any figure of it counts: `clink
//! reference` and `clink compare` for the file job; the Kafka→Kafka output
//! topic read `read_committed` against the reference's windows; the
//! ClickHouse table against the reference's credits. A peer that
//! differs gets no ratio, and its rows say so. The checks are printed first.
//!
//! Checkpoints: ours every 100,000 records of the file job (11 over 1M
//! events, the last at the end). Flink's are time-based: a first 1M run of
//! each state backend (its correctness run) gives its steady span, and the
//! interval is that span over our count less one, for both sizes; each row
//! prints both sides' counts. Kafka→Kafka: both commit every 1,000 ms
//! (ours `--checkpoint-interval-ms`, Kafka Streams `commit.interval.ms`).
//! Kafka→ClickHouse: ours every 50,000 records, Flink's interval from its
//! first run, as for the file job.
//!
//! Every figure is the median over the runs of the ratio within one run
//! (ours and the peer one after the other, the order alternating), at least
//! 5 runs (`CLINK_PEERS_RUNS` sets it; `CLINK_BENCH_RUNS` above 5 too). Each
//! peer's side shows its whole-process wall time (the JVM and cluster start
//! are part of what a user waits for) and, beside it, its steady-state rate
//! by its own count: events over the time from its first record to its last.
//! `CLINK_PEERS_QUICK=1` runs the same at 100k/200k (file) and 50k (Kafka)
//! events, to try the bench out; its figures are not the table's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clink_connectors::clickhouse::{sql, Connection, Endpoint};
use clink_connectors::kafka::{Isolation, LogReader};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use serde_json::Value as Json;

use super::{clink, example_command, fresh_run_dir, generate, measure_with, median, runs, services, workspace};
use super::{Cost, Figure, Goal};

const BENCH: &str = "peers";
/// Our file job's checkpoint: every this many source records.
const FILE_EVERY: u64 = 100_000;
/// The Kafka→Kafka job's commit interval, ours and Kafka Streams' alike.
const KAFKA_COMMIT_MS: u64 = 1_000;
/// Our Kafka→ClickHouse job's checkpoint: every this many source records.
const CLICKHOUSE_EVERY: u64 = 50_000;
const PARTITIONS: &str = "3";
const OUTPUT_PARTITIONS: i32 = 4;

/// The sizes: the file job's two inputs and the Kafka jobs' topic.
struct Sizes {
    file: [u64; 2],
    kafka: u64,
}

fn sizes() -> Sizes {
    if std::env::var("CLINK_PEERS_QUICK").is_ok_and(|v| v == "1") {
        Sizes { file: [100_000, 200_000], kafka: 50_000 }
    } else {
        Sizes { file: [1_000_000, 10_000_000], kafka: 500_000 }
    }
}

fn peer_runs() -> usize {
    std::env::var("CLINK_PEERS_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or_else(|| runs().max(5)).max(1)
}

/// The built peers: each one's class path.
struct Peers {
    flink: String,
    kafka_streams: String,
}

impl Peers {
    fn build() -> Result<Peers, String> {
        let dir = workspace().join("bench/peers");
        let status = Command::new(dir.join("build"))
            .stdout(Stdio::null())
            .status()
            .map_err(|e| format!("bench/peers/build did not start: {e}"))?;
        if !status.success() {
            return Err(format!("bench/peers/build ended {status} (its lines above)"));
        }
        let cp = |peer: &str| {
            let target = dir.join(peer).join("target");
            format!("{}/*:{}", target.join("libs").display(), target.join(format!("clink-{peer}-peer.jar")).display())
        };
        Ok(Peers { flink: cp("flink"), kafka_streams: cp("kafka-streams") })
    }
}

/// What one measured run of one side gave.
#[derive(Debug, Clone)]
struct Run {
    cost: Cost,
    /// Checkpoints (ours: completed; Flink: the highest completed id; Kafka
    /// Streams: commits, both threads).
    checkpoints: f64,
    /// The peer's own steady-state rate (events over its first to last record).
    steady: Option<(f64, f64)>,
}

impl Run {
    fn rate(&self, events: u64) -> f64 {
        events as f64 / self.cost.wall.as_secs_f64()
    }
}

/// Runs `cmd` with its stdout into `work/stdout` and its stderr into
/// `work/stderr`, measured; its last JSON line read. An exit other than 0
/// is an error naming the end of its stderr.
fn run_measured(cmd: &mut Command, work: &Path) -> Result<(Cost, Json), String> {
    std::fs::create_dir_all(work).map_err(|e| format!("{}: {e}", work.display()))?;
    let (out, err) = (work.join("stdout"), work.join("stderr"));
    cmd.stdout(std::fs::File::create(&out).map_err(|e| e.to_string())?);
    cmd.stderr(std::fs::File::create(&err).map_err(|e| e.to_string())?);
    let every: Vec<i32> = (0..256).collect();
    let cost = measure_with(cmd, &every);
    if cost.code != 0 {
        let text = std::fs::read_to_string(&err).unwrap_or_default();
        let tail: Vec<&str> = text.lines().filter(|l| !l.contains("SLF4J")).collect();
        return Err(format!("exit {}: {}", cost.code, tail[tail.len().saturating_sub(6)..].join(" | ")));
    }
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    let doc = text
        .lines()
        .rev()
        .find_map(|l| l.trim().starts_with('{').then(|| serde_json::from_str(l.trim()).ok()).flatten())
        .ok_or_else(|| format!("no JSON line on its stdout ({})", out.display()))?;
    Ok((cost, doc))
}

fn ours(cmd: &mut Command, work: &Path) -> Result<Run, String> {
    let (cost, doc) = run_measured(cmd, work)?;
    Ok(Run { cost, checkpoints: doc["completed"].as_f64().unwrap_or(f64::NAN), steady: None })
}

fn peer(cmd: &mut Command, work: &Path) -> Result<Run, String> {
    let (cost, doc) = run_measured(cmd, work)?;
    let steady = doc["steady_events_per_s"].as_f64().zip(doc["steady_seconds"].as_f64());
    Ok(Run { cost, checkpoints: doc["checkpoints"].as_f64().unwrap_or(f64::NAN), steady })
}

/// `java -cp CP MAIN`, under `taskset -c CPUS` when given.
fn java(cp: &str, main: &str, cpus: Option<&str>) -> Command {
    let mut cmd = match cpus {
        Some(c) => {
            let mut cmd = Command::new("taskset");
            cmd.args(["-c", c, "java"]);
            cmd
        }
        None => Command::new("java"),
    };
    // A Kafka jar's logging configuration names ${sys:kafka.logs.dir}:
    // unset, log4j makes a directory of that literal name in the working
    // directory (the checkout).
    cmd.arg(format!("-Dkafka.logs.dir={}", std::env::temp_dir().display()));
    cmd.args(["-cp", cp, main]);
    cmd
}

/// `cmd` under `taskset -c CPUS` when given (its program, arguments,
/// environment and directory; the caller sets stdout and stderr after).
fn with_cpus(cmd: Command, cpus: Option<&str>) -> Command {
    let Some(c) = cpus else { return cmd };
    let mut wrapped = Command::new("taskset");
    wrapped.args(["-c", c]).arg(cmd.get_program()).args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => wrapped.env(k, v),
            None => wrapped.env_remove(k),
        };
    }
    if let Some(dir) = cmd.get_current_dir() {
        wrapped.current_dir(dir);
    }
    wrapped
}

/// `clink compare` of a sink's folder against the expected lines: the number
/// of lines when equal, else what differs.
fn compare(expected: &Path, actual: &Path) -> Result<u64, String> {
    let out = Command::new(clink())
        .args(["compare", "--json", "--expected"])
        .arg(expected)
        .arg("--actual")
        .arg(actual)
        .output()
        .map_err(|e| e.to_string())?;
    let doc: Json = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("clink compare: {e}: {}", String::from_utf8_lossy(&out.stderr)))?;
    if doc["equal"] == true {
        // Two empty outputs are equal and prove nothing: a check needs rows.
        return match doc["expected"].as_u64() {
            Some(rows) if rows > 0 => Ok(rows),
            _ => Err(format!("nothing to compare: clink compare says equal over {} expected lines", doc["expected"])),
        };
    }
    let few = |k: &str| {
        let list = doc[k].as_array().cloned().unwrap_or_default();
        let shown: Vec<String> = list.iter().take(2).map(|v| v.to_string()).collect();
        format!("{} {k} (e.g. {})", list.len(), shown.join(", "))
    };
    Err(format!("{} expected, {} found: {}; {}", doc["expected"], doc["actual"], few("missing"), few("unexpected")))
}

/// One correctness verdict: a figure (1 when equal) printed before every other.
fn check(checks: &mut Vec<Figure>, what: String, verdict: &Result<String, String>) {
    let (value, text) = match verdict {
        Ok(t) => (1.0, t.clone()),
        Err(e) => (0.0, format!("DIFFERS: {e}")),
    };
    checks.push(Figure::new(BENCH, what, value, "equal").against(text, 1.0).goal(Goal::AtLeast(1.0)));
}

/// The ratios of one peer against ours over paired runs: throughput (whole
/// process, and against the peer's steady state), CPU, peak memory.
struct Pairing<'a> {
    job: String,
    peer: &'a str,
    events: u64,
    ours: &'a [Run],
    theirs: &'a [Run],
    /// Goals: throughput at least, CPU at most, memory at most (None: printed beside).
    goals: (Option<f64>, Option<f64>, Option<f64>),
    setting: String,
}

fn pair_figures(p: &Pairing<'_>, rows: &mut Vec<Figure>) {
    let n = p.ours.len().min(p.theirs.len());
    if n == 0 {
        return;
    }
    let (ours, theirs) = (&p.ours[..n], &p.theirs[..n]);
    let med = |f: &dyn Fn(&Run) -> f64, runs: &[Run]| median(runs.iter().map(f).collect());
    let wall = |r: &Run| r.cost.wall.as_secs_f64();
    let cpu = |r: &Run| r.cost.cpu.as_secs_f64();
    let rss = |r: &Run| r.cost.peak_rss_kib as f64 / 1024.0;
    let ck = |r: &Run| r.checkpoints;
    let per_m = 1e6 / p.events as f64;
    let ratio = |f: &dyn Fn(usize) -> f64| median((0..n).map(f).collect());
    let goal_at_least = |f: Figure, g: Option<f64>| if let Some(g) = g { f.goal(Goal::AtLeast(g)) } else { f };
    let goal_at_most = |f: Figure, g: Option<f64>| if let Some(g) = g { f.goal(Goal::AtMost(g)) } else { f };
    let our_rate = p.events as f64 / med(&wall, ours);
    let their_rate = p.events as f64 / med(&wall, theirs);
    rows.push(goal_at_least(
        Figure::new(
            BENCH,
            format!("{}: ours ÷ {}, events/s, whole process", p.job, p.peer),
            ratio(&|i| theirs[i].cost.wall.as_secs_f64() / ours[i].cost.wall.as_secs_f64()),
            "x",
        )
        .against(
            format!(
                "ours {our_rate:.0} ev/s ({:.2} s, {:.0} checkpoints); {} {their_rate:.0} ev/s ({:.2} s, {:.0} {}); {}",
                med(&wall, ours),
                med(&ck, ours),
                p.peer,
                med(&wall, theirs),
                med(&ck, theirs),
                if p.peer.starts_with("Kafka Streams") { "commits" } else { "checkpoints" },
                p.setting
            ),
            their_rate,
        ),
        p.goals.0,
    ));
    if theirs.iter().all(|r| r.steady.is_some()) {
        let steady = |r: &Run| r.steady.map_or(f64::NAN, |s| s.0);
        let span = |r: &Run| r.steady.map_or(f64::NAN, |s| s.1);
        rows.push(goal_at_least(
            Figure::new(
                BENCH,
                format!("{}: ours ÷ {} at its steady state", p.job, p.peer),
                ratio(&|i| ours[i].rate(p.events) / steady(&theirs[i])),
                "x",
            )
            .against(
                format!(
                    "{} {:.0} ev/s from its first record to its last ({:.2} s of its {:.2} s); ours {our_rate:.0} ev/s whole process",
                    p.peer,
                    med(&steady, theirs),
                    med(&span, theirs),
                    med(&wall, theirs)
                ),
                med(&steady, theirs),
            ),
            p.goals.0,
        ));
    }
    rows.push(goal_at_most(
        Figure::new(
            BENCH,
            format!("{}: CPU s per million events, ours ÷ {}", p.job, p.peer),
            ratio(&|i| cpu(&ours[i]) / cpu(&theirs[i])),
            "x",
        )
        .against(
            format!(
                "ours {:.2} s/M, {} {:.2} s/M (user + system, whole process)",
                med(&cpu, ours) * per_m,
                p.peer,
                med(&cpu, theirs) * per_m
            ),
            med(&cpu, theirs) * per_m,
        ),
        p.goals.1,
    ));
    rows.push(goal_at_most(
        Figure::new(
            BENCH,
            format!("{}: peak RSS, ours ÷ {}", p.job, p.peer),
            ratio(&|i| rss(&ours[i]) / rss(&theirs[i])),
            "x",
        )
        .against(
            format!("ours {:.0} MiB, {} {:.0} MiB", med(&rss, ours), p.peer, med(&rss, theirs)),
            med(&rss, theirs),
        ),
        p.goals.2,
    ));
}

pub fn peers(scratch: &Path, figures: &mut Vec<Figure>) {
    let started = Instant::now();
    let peers = match Peers::build() {
        Ok(p) => p,
        Err(why) => {
            eprintln!("  peers: no peers: {why}");
            return;
        }
    };
    let n = peer_runs();
    let (mut checks, mut rows) = (Vec::new(), Vec::new());
    file_job(scratch, &peers, n, &mut checks, &mut rows);
    match services() {
        None => eprintln!("  peers: the Kafka jobs skipped: the services are not running (gates/services start)"),
        Some(env) => kafka_jobs(scratch, &peers, &env, n, &mut checks, &mut rows),
    }
    figures.extend(checks);
    figures.extend(rows);
    eprintln!("  peers: {n} runs per figure, {:.0} s in all", started.elapsed().as_secs_f64());
}

/// The file job's Flink side: its state backend and checkpoint interval.
#[derive(Clone, Copy)]
struct FlinkSetting {
    backend: &'static str,
    label: &'static str,
    interval_ms: u64,
    /// Whether its first run matched the reference.
    correct: bool,
}

fn flink_example(peers: &Peers, input: &Path, work: &Path, s: &FlinkSetting, cpus: Option<&str>) -> Command {
    let mut cmd = java(&peers.flink, "dev.clink.peers.flink.ExampleJob", cpus);
    cmd.arg("--input")
        .arg(input)
        .arg("--output")
        .arg(work.join("out"))
        .arg("--checkpoint-dir")
        .arg(work.join("ck"))
        .args(["--checkpoint-interval-ms", &s.interval_ms.to_string(), "--state-backend", s.backend]);
    cmd
}

fn our_example(input: &Path, work: &Path, cpus: Option<&str>) -> Command {
    with_cpus(example_command(input, work, FILE_EVERY, &["--json"]), cpus)
}

/// `clink reference` of an input, made once.
fn reference(scratch: &Path, input: &Path, events: u64) -> PathBuf {
    let out = scratch.join(format!("reference-{events}"));
    if !out.join("windows.txt").exists() || !out.join("idle.txt").exists() {
        let status = Command::new(clink())
            .args(["reference", "--input-dir"])
            .arg(input)
            .arg("--out")
            .arg(&out)
            .stdout(Stdio::null())
            .status()
            .expect("clink reference runs");
        assert!(status.success(), "clink reference failed");
    }
    out
}

/// Both sinks of one example-job run against the reference.
fn example_correct(reference: &Path, out: &Path) -> Result<String, String> {
    let windows =
        compare(&reference.join("windows.txt"), &out.join("windows-out")).map_err(|e| format!("windows: {e}"))?;
    let idle = compare(&reference.join("idle.txt"), &out.join("idle-out")).map_err(|e| format!("idle: {e}"))?;
    Ok(format!("clink compare: {windows} window rows and {idle} idle rows, as clink reference"))
}

fn count(n: u64) -> String {
    if n >= 1_000_000 && n.is_multiple_of(1_000_000) {
        format!("{}M", n / 1_000_000)
    } else {
        format!("{}k", n / 1000)
    }
}

fn file_job(scratch: &Path, peers: &Peers, n: usize, checks: &mut Vec<Figure>, rows: &mut Vec<Figure>) {
    let [small, large] = sizes().file;
    let mut settings = [
        FlinkSetting { backend: "hashmap", label: "Flink (HashMap state)", interval_ms: 0, correct: false },
        FlinkSetting { backend: "rocksdb", label: "Flink (RocksDB state)", interval_ms: 0, correct: false },
    ];
    // Ours first: its checkpoint count is what Flink's interval is set to give.
    let input = generate(scratch, small);
    let refs = reference(scratch, &input, small);
    let work = fresh_run_dir(scratch, "peers-ours-check");
    let our_checkpoints = match ours(&mut our_example(&input, &work, None), &work) {
        Ok(run) => {
            check(
                checks,
                format!("ours, example job {}: output = clink reference", count(small)),
                &example_correct(&refs, &work.join("out")),
            );
            run.checkpoints
        }
        Err(e) => {
            eprintln!("  peers: our example job failed: {e}");
            return;
        }
    };
    // Each Flink backend's first run: correctness, and the interval that
    // gives its runs as many checkpoints as ours.
    for s in &mut settings {
        let work = fresh_run_dir(scratch, &format!("peers-flink-{}-check", s.backend));
        let calibration = FlinkSetting { interval_ms: 1_000, ..*s };
        let verdict = peer(&mut flink_example(peers, &input, &work, &calibration, None), &work)
            .and_then(|run| example_correct(&refs, &work.join("out")).map(|ok| (run, ok)));
        let shown = verdict.as_ref().map(|(_, ok)| ok.clone()).map_err(Clone::clone);
        check(checks, format!("{}, example job {}: output = clink reference", s.label, count(small)), &shown);
        if let Ok((run, _)) = verdict {
            let span = run.steady.map_or(run.cost.wall.as_secs_f64(), |s| s.1);
            s.interval_ms = ((span * 1000.0) / (our_checkpoints - 1.0).max(1.0)).round().max(50.0) as u64;
            s.correct = true;
            eprintln!("  peers: {}: checkpoint every {} ms (steady span {span:.2} s)", s.label, s.interval_ms);
        }
    }
    let mut our_rates = Vec::new();
    let mut flink_hashmap_2_cores = Vec::new();
    let mut our_2_cores = Vec::new();
    for (size, events) in [small, large].into_iter().enumerate() {
        let input = generate(scratch, events);
        let refs = reference(scratch, &input, events);
        let mut our_runs = Vec::new();
        let mut flink_runs: [Vec<Run>; 2] = [Vec::new(), Vec::new()];
        for i in 0..n {
            let run_ours = |runs: &mut Vec<Run>| {
                let work = fresh_run_dir(scratch, "peers-ours");
                match ours(&mut our_example(&input, &work, None), &work) {
                    Ok(run) => runs.push(run),
                    Err(e) => eprintln!("  peers: ours failed: {e}"),
                }
            };
            if i % 2 == 0 {
                run_ours(&mut our_runs);
            }
            for (k, s) in settings.iter().enumerate() {
                if !s.correct {
                    continue;
                }
                let work = fresh_run_dir(scratch, &format!("peers-flink-{}", s.backend));
                match peer(&mut flink_example(peers, &input, &work, s, None), &work) {
                    Ok(run) => {
                        // The larger input's first run is its correctness run.
                        if size == 1 && i == 0 {
                            check(
                                checks,
                                format!("{}, example job {}: output = clink reference", s.label, count(events)),
                                &example_correct(&refs, &work.join("out")),
                            );
                        }
                        flink_runs[k].push(run);
                    }
                    Err(e) => eprintln!("  peers: {} failed: {e}", s.label),
                }
            }
            if i % 2 == 1 {
                run_ours(&mut our_runs);
            }
            let last = |r: &[Run]| r.last().map_or(f64::NAN, |r| r.cost.wall.as_secs_f64());
            eprintln!(
                "  run {i}, {}: ours {:.2}s; Flink HashMap {:.2}s, RocksDB {:.2}s",
                count(events),
                last(&our_runs),
                last(&flink_runs[0]),
                last(&flink_runs[1])
            );
        }
        for (k, s) in settings.iter().enumerate() {
            if !s.correct {
                rows.push(Figure::new(
                    BENCH,
                    format!("example job {}: {}: not a baseline (its output differs)", count(events), s.label),
                    f64::NAN,
                    "",
                ));
                continue;
            }
            let hashmap = k == 0;
            pair_figures(
                &Pairing {
                    job: format!("example job {}", count(events)),
                    peer: s.label,
                    events,
                    ours: &our_runs,
                    theirs: &flink_runs[k],
                    goals: if hashmap { (Some(2.0), Some(0.5), Some(0.25)) } else { (None, None, None) },
                    setting: format!(
                        "Flink checkpoints every {} ms, ours every {} records, parallelism 2",
                        s.interval_ms, FILE_EVERY
                    ),
                },
                rows,
            );
        }
        our_rates.push(our_runs.iter().map(|r| r.rate(events)).collect::<Vec<_>>());
        if size == 0 {
            our_2_cores = our_runs.clone();
            flink_hashmap_2_cores = flink_runs[0].clone();
        }
    }
    if our_rates.iter().all(|r| !r.is_empty()) {
        let (at_small, at_large) = (median(our_rates[0].clone()), median(our_rates[1].clone()));
        rows.push(
            Figure::new(
                BENCH,
                format!("example job: our events/s at {} ÷ at {}", count(large), count(small)),
                at_large / at_small,
                "x",
            )
            .against(
                format!("{at_large:.0} ev/s at {}, {at_small:.0} ev/s at {}", count(large), count(small)),
                at_small,
            )
            .goal(Goal::AtLeast(0.9)),
        );
    }
    cores(scratch, peers, n, &settings[0], small, &our_2_cores, &flink_hashmap_2_cores, rows);
}

/// The 1M example job on one core (`taskset -c 0`), ours and Flink's, beside
/// the two-core runs already measured.
#[allow(clippy::too_many_arguments)]
fn cores(
    scratch: &Path,
    peers: &Peers,
    n: usize,
    flink: &FlinkSetting,
    events: u64,
    our_2: &[Run],
    flink_2: &[Run],
    rows: &mut Vec<Figure>,
) {
    let input = generate(scratch, events);
    let (mut our_1, mut flink_1) = (Vec::new(), Vec::new());
    for i in 0..n {
        let work = fresh_run_dir(scratch, "peers-ours-1core");
        match ours(&mut our_example(&input, &work, Some("0")), &work) {
            Ok(run) => our_1.push(run),
            Err(e) => eprintln!("  peers: ours on one core failed: {e}"),
        }
        if flink.correct {
            let work = fresh_run_dir(scratch, "peers-flink-1core");
            match peer(&mut flink_example(peers, &input, &work, flink, Some("0")), &work) {
                Ok(run) => flink_1.push(run),
                Err(e) => eprintln!("  peers: Flink on one core failed: {e}"),
            }
        }
        let last = |r: &[Run]| r.last().map_or(f64::NAN, |r| r.cost.wall.as_secs_f64());
        eprintln!("  run {i}, 1 core: ours {:.2}s; Flink HashMap {:.2}s", last(&our_1), last(&flink_1));
    }
    let rate = |runs: &[Run]| {
        if runs.is_empty() {
            f64::NAN
        } else {
            median(runs.iter().map(|r| r.rate(events)).collect())
        }
    };
    let steady = |runs: &[Run]| {
        let v: Vec<f64> = runs.iter().filter_map(|r| r.steady.map(|s| s.0)).collect();
        if v.is_empty() {
            f64::NAN
        } else {
            median(v)
        }
    };
    let job = format!("example job {}", count(events));
    rows.push(
        Figure::new(BENCH, format!("{job}: ours on 1 core (taskset), events/s"), rate(&our_1), "ev/s")
            .against(format!("on 2 cores {:.0} ev/s", rate(our_2)), rate(our_2)),
    );
    if flink.correct {
        rows.push(
            Figure::new(BENCH, format!("{job}: {} on 1 core (taskset), events/s", flink.label), rate(&flink_1), "ev/s")
                .against(
                    format!(
                        "steady {:.0} ev/s; on 2 cores {:.0} ev/s, steady {:.0} ev/s",
                        steady(&flink_1),
                        rate(flink_2),
                        steady(flink_2)
                    ),
                    rate(flink_2),
                ),
        );
        let m = our_1.len().min(flink_1.len());
        if m > 0 {
            rows.push(
                Figure::new(
                    BENCH,
                    format!("{job} on 1 core: ours ÷ {}, events/s, whole process", flink.label),
                    median(
                        (0..m).map(|i| flink_1[i].cost.wall.as_secs_f64() / our_1[i].cost.wall.as_secs_f64()).collect(),
                    ),
                    "x",
                )
                .against(format!("ours ÷ its steady state: {:.2}x", rate(&our_1) / steady(&flink_1)), rate(&flink_1)),
            );
        }
    }
}

/// A fresh output topic of `partitions` partitions that keeps every record
/// (`retention.ms=-1`): the seeded events are from 2023, and a sink that
/// stamps its records with event time (Kafka Streams does) would otherwise
/// see the broker delete them by its 7-day retention before they are read.
fn make_topic(bootstrap: &str, topic: &str, partitions: i32) -> Result<(), String> {
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", bootstrap).create().map_err(|e| e.to_string())?;
    let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1)).set("retention.ms", "-1");
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let results = block_on(admin.create_topics(&[new], &options)).map_err(|e| format!("making topic {topic}: {e}"))?;
    for r in results {
        r.map_err(|(t, e)| format!("making topic {t}: {e}"))?;
    }
    Ok(())
}

/// Polls one future to its end on this thread (rdkafka's admin calls are
/// answered by its own background thread, which wakes this one).
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(std::sync::Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let std::task::Poll::Ready(v) = future.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park_timeout(Duration::from_millis(50));
    }
}

/// A work directory holding `fixture`'s job with `edit` applied to each operator.
fn job_in(work: &Path, fixture: &str, edit: impl Fn(&mut Json)) -> PathBuf {
    let mut job: Json =
        serde_json::from_slice(&std::fs::read(workspace().join(fixture).join("job.json")).expect("job"))
            .expect("job json");
    for op in job["operators"].as_array_mut().expect("operators") {
        edit(op);
    }
    std::fs::create_dir_all(work).expect("work");
    let path = work.join("job.json");
    std::fs::write(&path, job.to_string()).expect("job file");
    path
}

fn our_kafka_job(job: &Path, work: &Path, bootstrap: &str, extra: &[&str]) -> Command {
    let mut cmd = Command::new(clink());
    cmd.args(["run", "--quiet", "--json", "--job"])
        .arg(job)
        .arg("--output-dir")
        .arg(work.join("out"))
        .arg("--checkpoint-dir")
        .arg(work.join("ck"))
        .args(["--kafka-bootstrap", bootstrap])
        .args(extra);
    cmd
}

/// Every payload of `topic` a read_committed reader sees, all partitions, to each end.
fn read_topic(bootstrap: &str, topic: &str) -> Result<Vec<String>, String> {
    let reader = LogReader::connect(bootstrap, topic, Isolation::ReadCommitted, "clink-bench-peers")
        .map_err(|e| e.to_string())?;
    let payloads = reader.read_to_end(Duration::from_secs(120)).map_err(|e| e.to_string())?;
    Ok(payloads.iter().map(|p| String::from_utf8_lossy(p).into_owned()).collect())
}

/// `lines` written into `dir/lines` and compared with `expected` by `clink compare`.
fn compare_lines(expected: &Path, dir: &Path, lines: &[String]) -> Result<u64, String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let mut text = lines.join("\n");
    text.push('\n');
    std::fs::write(dir.join("lines"), text).map_err(|e| e.to_string())?;
    compare(expected, dir)
}

/// The Kafka→Kafka output topic, read read_committed, against the reference windows.
fn kafka_correct(bootstrap: &str, topic: &str, expected: &Path, dir: &Path) -> Result<String, String> {
    let lines = read_topic(bootstrap, topic)?;
    let n = compare_lines(expected, dir, &lines)?;
    Ok(format!("{topic} read read_committed: {n} window rows, as clink reference"))
}

/// The ClickHouse table's rows, `id,account,amount,time`, against the
/// reference's credits, read as values (a server that prints `12.5` for the
/// `12.50` written holds the same decimal: `cells::engine_text`).
fn clickhouse_correct(ch: &Connection, table: &str, expected: &Path, dir: &Path) -> Result<String, String> {
    let columns = ["id", "account", "amount", "time"];
    let described =
        clink_connectors::clickhouse::destination::describe(ch, "default", table).map_err(|e| e.to_string())?;
    let types = columns
        .iter()
        .map(|c| described.column(c).map(|c| clink_connectors::clickhouse::types::ChType::parse(&c.type_name)))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| format!("table {table} lacks one of {columns:?}"))?;
    let rows = ch
        .select(
            "read the table",
            &format!("SELECT id, account, amount, time FROM {}", sql::qualified("default", table)),
            &[],
        )
        .map_err(|e| e.to_string())?;
    let lines = rows
        .iter()
        .map(|r| {
            let cells: Result<Vec<String>, _> =
                r.iter().zip(&types).map(|(c, ty)| clink_reconcile::cells::engine_text(c.as_deref(), ty)).collect();
            cells.map(|c| c.join(",")).map_err(|e| e.to_string())
        })
        .collect::<Result<Vec<String>, String>>()?;
    let n = compare_lines(expected, dir, &lines)?;
    Ok(format!("table {table}: {n} rows, the reference's credits (clink_reference::records)"))
}

/// The records job's expected rows: the reference's credits of the seeded
/// input (`clink_reference::records`: every event with amount > 0, numbered
/// as `clink produce` numbers its messages), `id,account,amount,time`.
fn credits(scratch: &Path, input: &Path, events: u64) -> PathBuf {
    let path = scratch.join(format!("credits-{events}.txt"));
    let lines = clink_reference::records::credits(input).expect("the reference's credits");
    std::fs::write(&path, lines.join("\n") + "\n").expect("the expected credits");
    path
}

fn kafka_jobs(
    scratch: &Path,
    peers: &Peers,
    env: &BTreeMap<String, String>,
    n: usize,
    checks: &mut Vec<Figure>,
    rows: &mut Vec<Figure>,
) {
    let events = sizes().kafka;
    let (bootstrap, clickhouse) = (&env["CLINK_KAFKA_BOOTSTRAP"], &env["CLINK_CLICKHOUSE_HTTP"]);
    let stamp = std::process::id();
    let topic = format!("bench-peers-{stamp}");
    let produced = Command::new(clink())
        .args(["produce", "--seed", "1", "--accounts", "200", "--partitions", PARTITIONS, "--topic", &topic])
        .args(["--bootstrap", bootstrap, "--events", &events.to_string()])
        .stdout(Stdio::null())
        .status();
    if !produced.is_ok_and(|s| s.success()) {
        eprintln!("  peers: the Kafka jobs skipped: clink produce into {topic} failed");
        return;
    }
    // The seeded events gen-input writes are the ones produce publishes: the
    // reference of that input is the Kafka→Kafka job's expected windows.
    let input = generate(scratch, events);
    let windows = reference(scratch, &input, events).join("windows.txt");
    kafka_kafka(scratch, peers, bootstrap, &topic, &windows, events, n, checks, rows);
    match Endpoint::parse(clickhouse)
        .map_err(|e| e.to_string())
        .and_then(|e| Connection::open(&e).map_err(|e| e.to_string()))
    {
        Ok(ch) => {
            let expected = credits(scratch, &input, events);
            kafka_clickhouse(scratch, peers, &ch, bootstrap, clickhouse, &topic, &expected, events, n, checks, rows);
        }
        Err(e) => eprintln!("  peers: Kafka→ClickHouse skipped: {e}"),
    }
}

#[allow(clippy::too_many_arguments)]
fn kafka_kafka(
    scratch: &Path,
    peers: &Peers,
    bootstrap: &str,
    topic: &str,
    windows: &Path,
    events: u64,
    n: usize,
    checks: &mut Vec<Figure>,
    rows: &mut Vec<Figure>,
) {
    let stamp = std::process::id();
    let interval = KAFKA_COMMIT_MS.to_string();
    let (mut our_runs, mut their_runs) = (Vec::new(), Vec::new());
    let (mut our_ok, mut their_ok) = (true, true);
    for i in 0..n {
        let run_ours = |our_runs: &mut Vec<Run>, our_ok: &mut bool, checks: &mut Vec<Figure>| {
            let out = format!("bench-peers-ours-{stamp}-{i}");
            let work = fresh_run_dir(scratch, "peers-kafka-ours");
            let job = job_in(&work, "fixtures/jobs/kafka-kafka", |op| match op["type"].as_str() {
                Some("kafka_source") => op["params"]["topic"] = topic.into(),
                Some("kafka_sink") => {
                    op["params"]["topic"] = out.clone().into();
                    op["params"]["transactional_id_prefix"] = out.clone().into();
                }
                _ => {}
            });
            let run = make_topic(bootstrap, &out, OUTPUT_PARTITIONS).and_then(|()| {
                ours(&mut our_kafka_job(&job, &work, bootstrap, &["--checkpoint-interval-ms", &interval]), &work)
            });
            match run {
                Ok(run) => {
                    if i == 0 {
                        let verdict = kafka_correct(bootstrap, &out, windows, &work.join("read"));
                        *our_ok = verdict.is_ok();
                        check(
                            checks,
                            format!("ours, Kafka→Kafka {}: output = clink reference", count(events)),
                            &verdict,
                        );
                    }
                    our_runs.push(run);
                }
                Err(e) => eprintln!("  peers: our Kafka→Kafka job failed: {e}"),
            }
        };
        if i % 2 == 0 {
            run_ours(&mut our_runs, &mut our_ok, checks);
        }
        let out = format!("bench-peers-kstreams-{stamp}-{i}");
        let work = fresh_run_dir(scratch, "peers-kafka-streams");
        let run = make_topic(bootstrap, &out, OUTPUT_PARTITIONS).and_then(|()| {
            let mut cmd = java(&peers.kafka_streams, "dev.clink.peers.kstreams.KafkaKafkaJob", None);
            cmd.args(["--bootstrap", bootstrap, "--input", topic, "--output", &out])
                .args(["--application-id", &out, "--state-dir"])
                .arg(work.join("state"))
                .args(["--commit-interval-ms", &interval, "--threads", "2"]);
            peer(&mut cmd, &work)
        });
        match run {
            Ok(run) => {
                if i == 0 {
                    let verdict = kafka_correct(bootstrap, &out, windows, &work.join("read"));
                    their_ok = verdict.is_ok();
                    check(
                        checks,
                        format!(
                            "Kafka Streams (exactly_once_v2), Kafka→Kafka {}: output = clink reference",
                            count(events)
                        ),
                        &verdict,
                    );
                }
                their_runs.push(run);
            }
            Err(e) => eprintln!("  peers: Kafka Streams failed: {e}"),
        }
        if i % 2 == 1 {
            run_ours(&mut our_runs, &mut our_ok, checks);
        }
        let last = |r: &[Run]| r.last().map_or(f64::NAN, |r| r.cost.wall.as_secs_f64());
        eprintln!("  run {i}, Kafka→Kafka: ours {:.2}s; Kafka Streams {:.2}s", last(&our_runs), last(&their_runs));
    }
    let job = format!("Kafka→Kafka exactly once {}", count(events));
    if !their_ok || !our_ok {
        rows.push(Figure::new(BENCH, format!("{job}: no ratio (an output differs: see the checks)"), f64::NAN, ""));
        return;
    }
    pair_figures(
        &Pairing {
            job,
            peer: "Kafka Streams",
            events,
            ours: &our_runs,
            theirs: &their_runs,
            goals: (Some(1.5), None, None),
            setting: format!(
                "both commit every {KAFKA_COMMIT_MS} ms; input {PARTITIONS} partitions, output {OUTPUT_PARTITIONS}; 2 threads (ours: windows and sink parallelism 2)"
            ),
        },
        rows,
    );
}

#[allow(clippy::too_many_arguments)]
fn kafka_clickhouse(
    scratch: &Path,
    peers: &Peers,
    ch: &Connection,
    bootstrap: &str,
    clickhouse: &str,
    topic: &str,
    expected: &Path,
    events: u64,
    n: usize,
    checks: &mut Vec<Figure>,
    rows: &mut Vec<Figure>,
) {
    let stamp = std::process::id();
    let ddl = std::fs::read_to_string(workspace().join("fixtures/jobs/kafka-clickhouse/table.sql")).expect("table.sql");
    let make_table = |name: &str| {
        ch.execute("create", ddl.trim().replace("{table}", &sql::qualified("default", name)).as_str())
            .map_err(|e| e.to_string())
    };
    let drop_table = |name: &str| {
        let _ = ch.execute("drop", &format!("DROP TABLE {}", sql::qualified("default", name)));
    };
    let flink = |table: &str, work: &Path, interval_ms: u64| {
        let mut cmd = java(&peers.flink, "dev.clink.peers.flink.KafkaClickHouseJob", None);
        cmd.args(["--bootstrap", bootstrap, "--topic", topic, "--clickhouse", clickhouse, "--table", table])
            .arg("--checkpoint-dir")
            .arg(work.join("ck"))
            .args(["--checkpoint-interval-ms", &interval_ms.to_string(), "--state-backend", "hashmap"]);
        cmd
    };
    // Ours first: its checkpoint count sets Flink's interval.
    let ours_run = |name: &str, checks: Option<&mut Vec<Figure>>| -> Result<Run, String> {
        let table = format!("bench_peers_ours_{stamp}_{name}");
        let work = fresh_run_dir(scratch, "peers-clickhouse-ours");
        make_table(&table)?;
        let job = job_in(&work, "fixtures/jobs/kafka-clickhouse", |op| match op["type"].as_str() {
            Some("kafka_source") => op["params"]["topic"] = topic.into(),
            Some("clickhouse_sink") => op["params"]["table"] = table.clone().into(),
            _ => {}
        });
        let every = CLICKHOUSE_EVERY.to_string();
        let run = ours(
            &mut our_kafka_job(
                &job,
                &work,
                bootstrap,
                &["--checkpoint-every-records", &every, "--clickhouse", clickhouse],
            ),
            &work,
        );
        if let (Ok(_), Some(checks)) = (&run, checks) {
            let verdict = clickhouse_correct(ch, &table, expected, &work.join("read"));
            check(
                checks,
                format!("ours, Kafka→ClickHouse {}: table = the reference's credits", count(events)),
                &verdict,
            );
        }
        drop_table(&table);
        run
    };
    let our_checkpoints = match ours_run("check", Some(checks)) {
        Ok(run) => run.checkpoints,
        Err(e) => {
            eprintln!("  peers: our Kafka→ClickHouse job failed: {e}");
            return;
        }
    };
    let table = format!("bench_peers_flink_{stamp}_check");
    let work = fresh_run_dir(scratch, "peers-clickhouse-flink-check");
    let verdict = make_table(&table)
        .and_then(|()| peer(&mut flink(&table, &work, 1_000), &work))
        .and_then(|run| clickhouse_correct(ch, &table, expected, &work.join("read")).map(|ok| (run, ok)));
    drop_table(&table);
    let shown = verdict.as_ref().map(|(_, ok)| ok.clone()).map_err(Clone::clone);
    let label = "Flink (JDBC sink, ClickHouse JDBC 0.10.0)";
    check(checks, format!("{label}, Kafka→ClickHouse {}: table = the reference's credits", count(events)), &shown);
    let Ok((calibration, _)) = verdict else {
        rows.push(Figure::new(BENCH, "Kafka→ClickHouse: Flink is not a baseline (see the checks)", f64::NAN, ""));
        return;
    };
    let span = calibration.steady.map_or(calibration.cost.wall.as_secs_f64(), |s| s.1);
    let interval_ms = ((span * 1000.0) / (our_checkpoints - 1.0).max(1.0)).round().max(50.0) as u64;
    let (mut our_runs, mut their_runs) = (Vec::new(), Vec::new());
    for i in 0..n {
        if i % 2 == 0 {
            match ours_run(&i.to_string(), None) {
                Ok(r) => our_runs.push(r),
                Err(e) => eprintln!("  peers: our Kafka→ClickHouse job failed: {e}"),
            }
        }
        let table = format!("bench_peers_flink_{stamp}_{i}");
        let work = fresh_run_dir(scratch, "peers-clickhouse-flink");
        match make_table(&table).and_then(|()| peer(&mut flink(&table, &work, interval_ms), &work)) {
            Ok(r) => their_runs.push(r),
            Err(e) => eprintln!("  peers: Flink's Kafka→ClickHouse job failed: {e}"),
        }
        drop_table(&table);
        if i % 2 == 1 {
            match ours_run(&i.to_string(), None) {
                Ok(r) => our_runs.push(r),
                Err(e) => eprintln!("  peers: our Kafka→ClickHouse job failed: {e}"),
            }
        }
        let last = |r: &[Run]| r.last().map_or(f64::NAN, |r| r.cost.wall.as_secs_f64());
        eprintln!("  run {i}, Kafka→ClickHouse: ours {:.2}s; Flink {:.2}s", last(&our_runs), last(&their_runs));
    }
    pair_figures(
        &Pairing {
            job: format!("Kafka→ClickHouse records {}", count(events)),
            peer: "Flink",
            events,
            ours: &our_runs,
            theirs: &their_runs,
            goals: (Some(1.0), None, None),
            setting: format!(
                "{label}, batches of 10,000 rows; Flink checkpoints every {interval_ms} ms, ours every {CLICKHOUSE_EVERY} records"
            ),
        },
        rows,
    );
}
