//! `cargo bench -p clink-harness --bench engine [-- FILTER]`: the engine's hot
//! paths, measured as whole `clink` processes.
//!
//! - `throughput`: the example job over 1,000,000 events, a checkpoint every
//!   10,000 records: events per second (wall), CPU seconds, peak RSS.
//!
//! - `recorder`: the flight recorder's cost: the example job over 200,000
//!   events, unpaced, with capture off and on (runs interleaved).
//!
//! - `gate`: the incident gate's steps on the example job (24,000 events, a
//!   checkpoint every 1,000 records, killed in checkpoint 2 and resumed):
//!   collection time, bundle size and file count, verify time per profile.
//!
//! - `formal`: trace validation time for real traces of about 100, 1,000 and
//!   5,000 events, and each model's TLC time (2 workers).
//!
//! - `connectors`: both Kafka→ClickHouse jobs end to end over 200,000 events
//!   (3 partitions, a checkpoint every 10,000 records): events per second
//!   from the topic into the table, against the services `gates/services
//!   start` runs (skipped, and said so, without them).
//!
//! Each figure is the median of `CLINK_BENCH_RUNS` runs (default 3; the
//! recorder uses at least 5).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn clink() -> &'static str {
    env!("CARGO_BIN_EXE_clink")
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// What one child process cost.
#[derive(Debug, Clone, Copy)]
struct Cost {
    wall: Duration,
    cpu: Duration,
    peak_rss_kib: i64,
}

/// Runs a command to completion and measures it with wait4(2), which reaps
/// the child (so `Child::wait` is not called).
#[allow(clippy::zombie_processes)]
fn measure(cmd: &mut Command) -> Cost {
    let start = Instant::now();
    let child = cmd.spawn().expect("the benchmark's command starts");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value, and wait4 writes it for the
    // child spawned above, which nothing else waits for.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let wall = start.elapsed();
    assert_eq!(waited, pid, "wait4 failed");
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "the benchmark's command failed: {status}");
    let tv = |t: libc::timeval| Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64);
    Cost { wall, cpu: tv(usage.ru_utime) + tv(usage.ru_stime), peak_rss_kib: usage.ru_maxrss }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn runs() -> usize {
    std::env::var("CLINK_BENCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(3).max(1)
}

fn generate(dir: &Path, events: u64) -> PathBuf {
    let input = dir.join(format!("input-{events}"));
    if !input.exists() {
        let status = Command::new(clink())
            .args(["gen-input", "--seed", "1", "--accounts", "200", "--segment-events", "50000", "--events"])
            .arg(events.to_string())
            .arg("--out")
            .arg(&input)
            .stdout(std::process::Stdio::null())
            .status()
            .expect("gen-input runs");
        assert!(status.success());
    }
    input
}

fn run_example(input: &Path, work: &Path, every: u64, extra: &[&str]) -> Cost {
    let _ = std::fs::remove_dir_all(work);
    let mut cmd = Command::new(clink());
    cmd.arg("run")
        .arg("--quiet")
        .arg("--job")
        .arg(workspace().join("fixtures/jobs/example/job.json"))
        .arg("--input-dir")
        .arg(input)
        .arg("--output-dir")
        .arg(work.join("out"))
        .arg("--checkpoint-dir")
        .arg(work.join("ck"))
        .arg("--checkpoint-every-records")
        .arg(every.to_string())
        .args(extra)
        .stdout(std::process::Stdio::null());
    measure(&mut cmd)
}

fn throughput(scratch: &Path) {
    let events = 1_000_000u64;
    let input = generate(scratch, events);
    let mut costs = Vec::new();
    for i in 0..runs() {
        let cost = run_example(&input, &scratch.join(format!("throughput-{i}")), 10_000, &[]);
        eprintln!(
            "  run {i}: {:.2}s wall, {:.2}s cpu, {} KiB peak",
            cost.wall.as_secs_f64(),
            cost.cpu.as_secs_f64(),
            cost.peak_rss_kib
        );
        costs.push(cost);
    }
    let wall = median(costs.iter().map(|c| c.wall.as_secs_f64()).collect());
    let cpu = median(costs.iter().map(|c| c.cpu.as_secs_f64()).collect());
    let rss = median(costs.iter().map(|c| c.peak_rss_kib as f64).collect());
    println!(
        "throughput: {events} events, checkpoint every 10000 records: {:.0} events/s (median wall {wall:.2}s), cpu {cpu:.2}s, peak RSS {:.1} MiB",
        events as f64 / wall,
        rss / 1024.0
    );
}

fn recorder(scratch: &Path) {
    let events = 200_000u64;
    let input = generate(scratch, events);
    let (mut off, mut on) = (Vec::new(), Vec::new());
    for i in 0..runs().max(5) {
        off.push(run_example(&input, &scratch.join("recorder-off"), 10_000, &[]));
        let capture = scratch.join("recorder-capture");
        let _ = std::fs::remove_dir_all(&capture);
        let capture_arg = capture.to_string_lossy().into_owned();
        on.push(run_example(&input, &scratch.join("recorder-on"), 10_000, &["--capture-dir", &capture_arg]));
        eprintln!(
            "  pair {i}: off {:.3}s wall {:.3}s cpu, on {:.3}s wall {:.3}s cpu",
            off[i].wall.as_secs_f64(),
            off[i].cpu.as_secs_f64(),
            on[i].wall.as_secs_f64(),
            on[i].cpu.as_secs_f64()
        );
    }
    let med = |v: &[Cost], f: fn(&Cost) -> f64| median(v.iter().map(f).collect());
    let (off_wall, on_wall) = (med(&off, |c| c.wall.as_secs_f64()), med(&on, |c| c.wall.as_secs_f64()));
    let (off_cpu, on_cpu) = (med(&off, |c| c.cpu.as_secs_f64()), med(&on, |c| c.cpu.as_secs_f64()));
    println!(
        "recorder: {events} events: capture off {off_wall:.3}s wall {off_cpu:.3}s cpu; on {on_wall:.3}s wall {on_cpu:.3}s cpu; cost {:+.1}% cpu, {:+.1}% wall",
        (on_cpu / off_cpu - 1.0) * 100.0,
        (on_wall / off_wall - 1.0) * 100.0
    );
}

fn dir_size(dir: &Path) -> (u64, u64) {
    let mut files = 0;
    let mut bytes = 0;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            let (f, b) = dir_size(&path);
            files += f;
            bytes += b;
        } else {
            files += 1;
            bytes += entry.metadata().map(|m| m.len()).unwrap_or(0);
        }
    }
    (files, bytes)
}

fn gate(scratch: &Path) {
    let input = generate(scratch, 24_000);
    let work = scratch.join("gate");
    let _ = std::fs::remove_dir_all(&work);
    let s = |p: &Path| p.to_string_lossy().into_owned();
    let (capture, traces, ha) = (work.join("capture"), work.join("traces"), work.join("ha"));
    let extra = ["--capture-dir", &s(&capture), "--ha-dir", &s(&ha)];
    let mut killed = Command::new(clink());
    killed
        .arg("run")
        .arg("--quiet")
        .arg("--job")
        .arg(workspace().join("fixtures/jobs/example/job.json"))
        .arg("--input-dir")
        .arg(&input)
        .arg("--output-dir")
        .arg(work.join("out"))
        .arg("--checkpoint-dir")
        .arg(work.join("ck"))
        .args(["--checkpoint-every-records", "1000", "--retain-checkpoints", "100"])
        .args(extra)
        .env("CLINK_PROTOCOL_TRACE_DIR", &traces)
        .env("CLINK_FAULT", "sink.before_commit@2")
        .stderr(std::process::Stdio::null());
    assert!(!killed.status().expect("clink run").success());
    killed.env_remove("CLINK_FAULT");
    assert!(killed.status().expect("clink run").success());
    let mut collect_times = Vec::new();
    let mut bundle = PathBuf::new();
    for i in 0..runs().max(5) {
        bundle = work.join(format!("bundle-{i}"));
        let cost = measure(
            Command::new(clink())
                .arg("incident-collect")
                .arg("--checkpoint-dir")
                .arg(work.join("ck"))
                .arg("--capture-dir")
                .arg(&capture)
                .arg("--trace-dir")
                .arg(&traces)
                // A checkpoint mid-run, as the gate collects: its epochs are full.
                .args([
                    "--include-state",
                    "--include-captures",
                    "--commit-confirmation",
                    "no",
                    "--checkpoint",
                    "12",
                    "--out",
                ])
                .arg(&bundle)
                .stdout(std::process::Stdio::null()),
        );
        collect_times.push(cost.wall.as_secs_f64());
    }
    let (files, bytes) = dir_size(&bundle);
    println!(
        "gate: collection {:.3}s (median of {}), bundle {:.2} MiB in {files} files",
        median(collect_times.clone()),
        collect_times.len(),
        bytes as f64 / (1024.0 * 1024.0)
    );
    for profile in ["integrity", "consistency", "replay", "full"] {
        let mut times = Vec::new();
        for _ in 0..runs().max(5) {
            let start = Instant::now();
            let status = Command::new(clink())
                .args(["incident-verify", "--profile", profile])
                .arg(&bundle)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .expect("incident-verify");
            assert!(matches!(status.code(), Some(0) | Some(3)), "verify {profile}: {status}");
            times.push(start.elapsed().as_secs_f64());
        }
        println!("gate: verify --profile {profile}: {:.3}s (median of {})", median(times), runs().max(5));
    }
}

fn formal(scratch: &Path) {
    let tools = match clink_formal::locate(None, None) {
        Ok(t) => t,
        Err(why) => {
            println!("formal: unavailable: {why}");
            return;
        }
    };
    let input = generate(scratch, 36_000);
    for checkpoints in [3u64, 35, 180] {
        let work = scratch.join(format!("formal-{checkpoints}"));
        let _ = std::fs::remove_dir_all(&work);
        let traces = work.join("traces");
        let status = Command::new(clink())
            .arg("run")
            .arg("--quiet")
            .arg("--job")
            .arg(workspace().join("fixtures/jobs/example/job.json"))
            .arg("--input-dir")
            .arg(&input)
            .arg("--output-dir")
            .arg(work.join("out"))
            .arg("--checkpoint-dir")
            .arg(work.join("ck"))
            .arg("--checkpoint-every-records")
            .arg((36_000 / checkpoints).to_string())
            .env("CLINK_PROTOCOL_TRACE_DIR", &traces)
            .stdout(std::process::Stdio::null())
            .status()
            .expect("clink run");
        assert!(status.success());
        let mut times = Vec::new();
        let mut events = 0;
        for _ in 0..runs() {
            let v = clink_formal::trace::validate_run(&tools, &traces, None).expect("validation runs");
            assert!(matches!(v.verdict, clink_formal::trace::Verdict::Accepted { .. }), "{}", v.verdict);
            events = v.events;
            times.push(v.seconds);
        }
        println!("formal: trace of {events} events validated in {:.2}s (median of {})", median(times), runs());
    }
    for name in clink_formal::suite::configs(&tools.formal_dir.join("models")) {
        std::env::set_var("CLINK_TLC_WORKERS", "2");
        let start = Instant::now();
        match clink_formal::suite::check_model(&tools, &name) {
            Ok(outcome) => println!("formal: model {name}: {outcome} in {:.1}s", start.elapsed().as_secs_f64()),
            Err(e) => println!("formal: model {name}: FAILED: {e}"),
        }
    }
}

type Bench = fn(&Path);

/// The services' env file, as `gates/services start` wrote it.
fn services() -> Option<std::collections::BTreeMap<String, String>> {
    let path = std::env::var("CLINK_SERVICES_ENV").unwrap_or_else(|_| {
        format!("{}/clink-services.env", std::env::var("TMPDIR").unwrap_or_else(|_| "/tmp".into()))
    });
    let text = std::fs::read_to_string(path).ok()?;
    Some(text.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect())
}

fn connectors(scratch: &Path) {
    use clink_connectors::clickhouse::{sql, Connection, Endpoint};
    let Some(env) = services() else {
        println!("connectors: skipped: the services are not running (gates/services start)");
        return;
    };
    let (bootstrap, clickhouse) = (&env["CLINK_KAFKA_BOOTSTRAP"], &env["CLINK_CLICKHOUSE_HTTP"]);
    let events = 200_000u64;
    let stamp = std::process::id();
    let topic = format!("bench-{stamp}");
    let produced = Command::new(clink())
        .args(["produce", "--seed", "1", "--accounts", "200", "--partitions", "3", "--topic", &topic])
        .args(["--bootstrap", bootstrap, "--events"])
        .arg(events.to_string())
        .stdout(std::process::Stdio::null())
        .status()
        .expect("clink produce runs");
    assert!(produced.success());
    let ch = Connection::open(&Endpoint::parse(clickhouse).expect("address")).expect("client");
    for (name, fixture) in [("records", "fixtures/jobs/kafka-clickhouse"), ("windows", "fixtures/jobs/kafka-windows")] {
        let mut walls = Vec::new();
        for i in 0..runs() {
            let table = format!("bench_{name}_{stamp}_{i}");
            let ddl = std::fs::read_to_string(workspace().join(fixture).join("table.sql")).expect("table.sql");
            ch.execute("create", ddl.trim().replace("{table}", &sql::qualified("default", &table)).as_str())
                .expect("the bench table");
            let mut job: serde_json::Value =
                serde_json::from_slice(&std::fs::read(workspace().join(fixture).join("job.json")).expect("job"))
                    .expect("job json");
            for op in job["operators"].as_array_mut().expect("operators") {
                match op["type"].as_str() {
                    Some("kafka_source") => op["params"]["topic"] = topic.clone().into(),
                    Some("clickhouse_sink") => op["params"]["table"] = table.clone().into(),
                    _ => {}
                }
            }
            let work = scratch.join(format!("connectors-{name}-{i}"));
            let _ = std::fs::remove_dir_all(&work);
            std::fs::create_dir_all(&work).expect("work");
            std::fs::write(work.join("job.json"), job.to_string()).expect("job file");
            let cost = measure(
                Command::new(clink())
                    .args(["run", "--quiet", "--checkpoint-every-records", "10000", "--job"])
                    .arg(work.join("job.json"))
                    .arg("--output-dir")
                    .arg(work.join("out"))
                    .arg("--checkpoint-dir")
                    .arg(work.join("ck"))
                    .args(["--kafka-bootstrap", bootstrap, "--clickhouse", clickhouse])
                    .stdout(std::process::Stdio::null()),
            );
            eprintln!("  {name} run {i}: {:.2}s wall, {:.2}s cpu", cost.wall.as_secs_f64(), cost.cpu.as_secs_f64());
            walls.push(cost.wall.as_secs_f64());
            let _ = ch.execute("drop", &format!("DROP TABLE {}", sql::qualified("default", &table)));
        }
        let wall = median(walls);
        println!(
            "connectors: {name} job, {events} events from Kafka into ClickHouse: {:.0} events/s (median wall {wall:.2}s)",
            events as f64 / wall
        );
    }
}

fn main() {
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let scratch = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bench");
    std::fs::create_dir_all(&scratch).expect("scratch directory");
    let benches: &[(&str, Bench)] = &[
        ("throughput", throughput),
        ("recorder", recorder),
        ("gate", gate),
        ("formal", formal),
        ("connectors", connectors),
    ];
    for &(name, bench) in benches {
        if filter.as_deref().is_none_or(|f| name.contains(f)) {
            eprintln!("bench {name}");
            bench(&scratch);
        }
    }
}
