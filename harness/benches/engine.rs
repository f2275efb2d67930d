//! `cargo bench -p clink-harness --bench engine [-- FILTER] [--json]`: the hot
//! paths, each measured as whole `clink` processes against a baseline run in
//! the same process, and printed as one table of figures and ratios
//! (`gates/bench` runs it). Each figure is the median of `CLINK_BENCH_RUNS`
//! runs (default 3).
//!
//! - `throughput`: the example job over 1,000,000 events (capture off, a
//!   checkpoint every 10,000 records) against a plain single-threaded program
//!   that parses the same input and computes the same window counts; beside
//!   it, as a diagnosis, the same runs with checkpoints and output on a tmpfs
//!   (the data path without the disk's fsyncs and file creations).
//! - `recorder`: the example job over 1,000,000 events, capture off and on,
//!   in at least 7 interleaved pairs: the CPU (user + system, from wait4,
//!   never wall time) the flight recorder costs, the median of the pairs
//!   with their spread.
//! - `capture`: the 1,000,000-event run with capture on: bytes captured
//!   against the input's bytes.
//! - `verify`: `incident-verify --profile replay` over that run's bundle:
//!   peak memory, and its time against the run that produced the bundle.
//! - `hashing`: `incident-verify --profile integrity` (bundle.artifacts
//!   hashes every file) against `sha256sum` over the same files.
//! - `ab`: `replay ab` of this build against the `defect-window-end-inclusive`
//!   variant (built here, release, into `<target>/ab-defect`) over the
//!   1,000,000-event capture, against one build's `replay sweep` of the same
//!   epochs; every window epoch must be reported diverged with its first
//!   difference, every other operator's identical.
//! - `store`: that capture pushed to a `file://` store and fetched back (the
//!   fetched copy swept), and a second push of the same bytes (dedup).
//! - `tlc`: `incident-verify --profile full` on the example bundle (TLC's
//!   start dominates), and trace validation of a 10,000-event trace.
//! - `connectors`: both Kafka→ClickHouse jobs and the Kafka→Kafka exactly
//!   once job end to end over 200,000 events against the services `gates/services
//!   start` runs, each beside the broker's bound (Apache Kafka's
//!   ProducerPerformance on the same records) measured in the same run
//!   (`engine/kafka.rs`; skipped without the services).
//! - `audit`: `gates/audit-gate --no-kills` on both Kafka→ClickHouse jobs fed
//!   11,000 events/s by one paced `clink produce --rate` (so that at least
//!   10,000 are sustained), a checkpoint every 10 s: the delay from a
//!   checkpoint completing to its audit published (median, max), the
//!   polling runner's CPU and peak memory, how often status said `behind`,
//!   and the rate the job sustained by its audited offsets (one run, a few
//!   minutes; skipped without the services).
//! - `peers`: the same jobs on the engines a user would otherwise pick, in
//!   the same run on the same input (`bench/peers/`, `engine/peers.rs`):
//!   the example job at 1M and 10M events against Apache Flink (HashMap and
//!   RocksDB state; also on one core and two), the Kafka→Kafka job against
//!   Kafka Streams `exactly_once_v2`, the Kafka→ClickHouse job against
//!   Flink's JDBC sink; each peer's output checked against the reference
//!   first (a peer that differs gets no ratio). At least 5 interleaved runs
//!   (about 40 minutes on 2 cores, most of it Flink with RocksDB at 10M).
//! - `models` (only when named): each TLA+ model's TLC time.
//!
//! Under the table, for a `throughput` or `recorder` goal the run did not
//! meet, a profile of where the remaining time goes (`perf record -g`, and
//! `perf trace -s` for wall time; see `engine/profile.rs`), or why none
//! could be taken.

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

#[path = "engine/kafka.rs"]
mod kafka;
#[path = "engine/peers.rs"]
mod peers;
#[path = "engine/perf_output.rs"]
mod perf_output;
#[path = "engine/profile.rs"]
mod profile;

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
    code: i32,
}

/// Runs a command to completion and measures it with wait4(2), which reaps
/// the child (so `Child::wait` is not called). Exit codes other than `ok`
/// stop the benchmark.
#[allow(clippy::zombie_processes)]
fn measure_with(cmd: &mut Command, ok: &[i32]) -> Cost {
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
    assert!(libc::WIFEXITED(status), "the benchmark's command died: {status}");
    let code = libc::WEXITSTATUS(status);
    assert!(ok.contains(&code), "the benchmark's command exited {code}: {cmd:?}");
    let tv = |t: libc::timeval| Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64);
    Cost { wall, cpu: tv(usage.ru_utime) + tv(usage.ru_stime), peak_rss_kib: usage.ru_maxrss, code }
}

fn measure(cmd: &mut Command) -> Cost {
    measure_with(cmd, &[0])
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn runs() -> usize {
    std::env::var("CLINK_BENCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(3).max(1)
}

/// A goal a figure is held to.
#[derive(Debug, Clone, Copy)]
enum Goal {
    AtMost(f64),
    AtLeast(f64),
}

/// One line of the table.
#[derive(Debug, Clone)]
struct Figure {
    bench: &'static str,
    what: String,
    value: f64,
    unit: &'static str,
    /// What the value is measured against, and that baseline's value.
    baseline: Option<(String, f64)>,
    goal: Option<Goal>,
}

impl Figure {
    fn new(bench: &'static str, what: impl Into<String>, value: f64, unit: &'static str) -> Figure {
        Figure { bench, what: what.into(), value, unit, baseline: None, goal: None }
    }

    fn against(mut self, baseline: impl Into<String>, value: f64) -> Figure {
        self.baseline = Some((baseline.into(), value));
        self
    }

    fn goal(mut self, goal: Goal) -> Figure {
        self.goal = Some(goal);
        self
    }

    fn met(&self) -> Option<bool> {
        Some(match self.goal? {
            Goal::AtMost(g) => self.value <= g,
            Goal::AtLeast(g) => self.value >= g,
        })
    }
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
    measure(&mut example_command(input, work, every, extra))
}

/// The `clink run` of the example job that [`run_example`] measures (the
/// profiles run the same command under perf).
fn example_command(input: &Path, work: &Path, every: u64, extra: &[&str]) -> Command {
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
    cmd
}

/// The plain program the engine is measured against: one thread, the same
/// input parsed, the same 10 s window counts and sums fired by the same
/// watermarks, no checkpoints, no threads, no evidence. Returns the rows.
fn plain_windows(input: &Path) -> usize {
    use std::collections::BTreeMap;
    use std::io::BufRead;
    let mut names: Vec<PathBuf> = std::fs::read_dir(input).expect("input").map(|e| e.expect("entry").path()).collect();
    names.sort();
    let mut windows: BTreeMap<(i64, String), (u64, i128)> = BTreeMap::new();
    let mut rows = 0usize;
    let fire = |windows: &mut BTreeMap<(i64, String), (u64, i128)>, w: i64, rows: &mut usize| {
        while let Some(entry) = windows.first_entry() {
            if entry.key().0 + 10_000 > w {
                break;
            }
            let (count, cents) = entry.remove();
            *rows += usize::from(count > 0 && cents != i128::MIN);
        }
    };
    for path in names {
        let file = std::io::BufReader::new(std::fs::File::open(&path).expect("segment"));
        for line in file.lines() {
            let line = line.expect("line");
            let mut fields = line.split(',');
            match fields.next() {
                Some("E") => {
                    let t: i64 = fields.next().and_then(|t| t.parse().ok()).expect("time");
                    let account = fields.next().expect("account");
                    let amount = fields.next().expect("amount");
                    let (whole, frac) = amount.split_once('.').unwrap_or((amount, ""));
                    let negative = whole.starts_with('-');
                    let whole: i128 = whole.trim_start_matches('-').parse().expect("amount");
                    let frac: i128 = format!("{frac:0<2}").parse().expect("amount");
                    let cents = (whole * 100 + frac) * if negative { -1 } else { 1 };
                    let start = t - t.rem_euclid(10_000);
                    let w = windows.entry((start, account.to_string())).or_insert((0, 0));
                    w.0 += 1;
                    w.1 += cents;
                }
                Some("W") => {
                    let w: i64 = fields.next().and_then(|t| t.parse().ok()).expect("watermark");
                    fire(&mut windows, w, &mut rows);
                }
                _ => fire(&mut windows, i64::MAX, &mut rows),
            }
        }
    }
    rows
}

/// A new directory for one measured run, under `scratch/runs`. Runs never
/// delete an earlier run's files before they are measured: on a file system
/// that scans recently deleted inodes when it allocates one (ext4 without a
/// journal, as here), a run after a large deletion pays for it at every file
/// it creates. `main` moves the runs aside first and deletes them last.
fn fresh_run_dir(scratch: &Path, name: &str) -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    scratch.join(RUNS_DIR).join(format!("{name}-{}", NEXT.fetch_add(1, Ordering::Relaxed)))
}

const RUNS_DIR: &str = "runs";

/// Where the diagnostic runs put their checkpoints and output: a tmpfs,
/// where fsync and file creation cost almost nothing, so the run shows the
/// data path alone. `None` where there is no /dev/shm.
fn tmpfs_dir(name: &str) -> Option<PathBuf> {
    let shm = Path::new("/dev/shm");
    shm.is_dir().then(|| shm.join(format!("clink-bench-{}-{name}", std::process::id())))
}

fn throughput(scratch: &Path, figures: &mut Vec<Figure>) {
    let events = 1_000_000u64;
    let input = generate(scratch, events);
    let (mut engine, mut plain, mut in_memory) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..runs() {
        let cost = run_example(&input, &fresh_run_dir(scratch, "throughput"), 10_000, &[]);
        if let Some(dir) = tmpfs_dir("throughput") {
            in_memory.push(run_example(&input, &dir, 10_000, &[]));
            let _ = std::fs::remove_dir_all(&dir);
        }
        let start = Instant::now();
        let rows = plain_windows(&input);
        plain.push(start.elapsed().as_secs_f64());
        assert!(rows > 0);
        eprintln!(
            "  run {i}: engine {:.2}s wall {:.2}s cpu; plain program {:.2}s",
            cost.wall.as_secs_f64(),
            cost.cpu.as_secs_f64(),
            plain[i]
        );
        engine.push(cost);
    }
    let wall = median(engine.iter().map(|c| c.wall.as_secs_f64()).collect());
    let cpu = median(engine.iter().map(|c| c.cpu.as_secs_f64()).collect());
    let plain = median(plain);
    figures.push(
        Figure::new("throughput", "example job, 1M events, events/s", events as f64 / wall, "ev/s")
            .goal(Goal::AtLeast(1e6)),
    );
    figures.push(
        Figure::new("throughput", "example job wall / plain program wall", wall / plain, "x")
            .against(format!("plain single-threaded windows {plain:.2}s; engine {wall:.2}s, {cpu:.2}s cpu"), plain)
            .goal(Goal::AtMost(3.0)),
    );
    if !in_memory.is_empty() {
        // A diagnosis, not a goal: the same runs with nothing to wait for on
        // the disk (about 5,600 fsyncs and 2,500 files created per run at a
        // checkpoint every 10,000 records).
        let wall = median(in_memory.iter().map(|c| c.wall.as_secs_f64()).collect());
        let cpu = median(in_memory.iter().map(|c| c.cpu.as_secs_f64()).collect());
        figures.push(
            Figure::new(
                "throughput",
                "the same, checkpoints and output on tmpfs, events/s",
                events as f64 / wall,
                "ev/s",
            )
            .against(format!("engine {wall:.2}s, {cpu:.2}s cpu; wall / plain {:.2}x", wall / plain), wall),
        );
    }
}

/// The flight recorder's cost in CPU (user + system, from wait4's rusage of
/// each child, never wall time): the example job over 1M events, capture
/// off and on, in interleaved pairs (which of the two runs first alternates,
/// so neither is always the one after the other). The figure is the median
/// over the pairs of on / off - 1; the spread is printed beside it. Each pair
/// also runs capture on with the capture directory on a tmpfs (checkpoints
/// still on the disk): a diagnosis of what the capture's files cost here.
fn recorder(scratch: &Path, figures: &mut Vec<Figure>) {
    let events = 1_000_000u64;
    let input = generate(scratch, events);
    let pairs = runs().max(RECORDER_PAIRS);
    let (mut off, mut on) = (Vec::new(), Vec::new());
    let (mut costs, mut in_memory) = (Vec::new(), Vec::new());
    for i in 0..pairs {
        let run_off = || run_example(&input, &fresh_run_dir(scratch, "recorder-off"), 10_000, &[]);
        let run_on = || {
            let work = fresh_run_dir(scratch, "recorder-on");
            let capture = work.join("capture").to_string_lossy().into_owned();
            run_example(&input, &work, 10_000, &["--capture-dir", &capture])
        };
        let (a, b) = if i % 2 == 0 {
            let a = run_off();
            (a, run_on())
        } else {
            let b = run_on();
            (run_off(), b)
        };
        let cost = b.cpu.as_secs_f64() / a.cpu.as_secs_f64() - 1.0;
        let mut line = format!(
            "  pair {i}: cpu off {:.3}s, on {:.3}s: {:+.1}%",
            a.cpu.as_secs_f64(),
            b.cpu.as_secs_f64(),
            100.0 * cost
        );
        if let Some(dir) = tmpfs_dir("recorder-capture") {
            let capture = dir.to_string_lossy().into_owned();
            let c =
                run_example(&input, &fresh_run_dir(scratch, "recorder-tmpfs"), 10_000, &["--capture-dir", &capture]);
            let _ = std::fs::remove_dir_all(&dir);
            let cost = c.cpu.as_secs_f64() / a.cpu.as_secs_f64() - 1.0;
            line += &format!("; capture on tmpfs {:.3}s: {:+.1}%", c.cpu.as_secs_f64(), 100.0 * cost);
            in_memory.push(100.0 * cost);
        }
        eprintln!("{line}");
        off.push(a.cpu.as_secs_f64());
        on.push(b.cpu.as_secs_f64());
        costs.push(100.0 * cost);
    }
    let spread = Spread::of(&costs);
    figures.push(
        Figure::new(
            "recorder",
            format!("1M events, CPU with capture vs without, median of {pairs} pairs"),
            spread.median,
            "%",
        )
        .against(
            format!(
                "per pair {:+.1}% min, {:+.1}% q1, {:+.1}% q3, {:+.1}% max; cpu off {:.2}s, on {:.2}s (medians)",
                spread.min,
                spread.q1,
                spread.q3,
                spread.max,
                median(off.clone()),
                median(on.clone())
            ),
            median(off),
        )
        .goal(Goal::AtMost(5.0)),
    );
    if !in_memory.is_empty() {
        let spread = Spread::of(&in_memory);
        figures.push(
            Figure::new(
                "recorder",
                "the same, the capture on tmpfs (a diagnosis: no file-system cost)",
                spread.median,
                "%",
            )
            .against(
                format!(
                    "per pair {:+.1}% min, {:+.1}% q1, {:+.1}% q3, {:+.1}% max",
                    spread.min, spread.q1, spread.q3, spread.max
                ),
                spread.median,
            ),
        );
    }
}

/// At least this many off/on pairs measure the recorder (more with CLINK_BENCH_RUNS).
const RECORDER_PAIRS: usize = 7;

/// A sample's median and spread (quartiles by nearest rank).
struct Spread {
    min: f64,
    q1: f64,
    median: f64,
    q3: f64,
    max: f64,
}

impl Spread {
    fn of(values: &[f64]) -> Spread {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
        Spread { min: at(0.0), q1: at(0.25), median: median(values.to_vec()), q3: at(0.75), max: at(1.0) }
    }
}

fn dir_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            dir_files(&path, out);
        } else {
            out.push(path);
        }
    }
}

fn bytes_of(dir: &Path) -> u64 {
    let mut files = Vec::new();
    dir_files(dir, &mut files);
    files.iter().map(|f| f.metadata().map(|m| m.len()).unwrap_or(0)).sum()
}

/// The 1M-event run with capture on, its bundle, and what verifying it costs.
fn capture_and_verify(scratch: &Path, figures: &mut Vec<Figure>) {
    let events = 1_000_000u64;
    let input = generate(scratch, events);
    let work = scratch.join("capture");
    let capture = work.join("capture");
    let s = |p: &Path| p.to_string_lossy().into_owned();
    let run = run_example(
        &input,
        &work,
        10_000,
        &["--capture-dir", &s(&capture), "--capture-retain-epochs", "1000", "--retain-checkpoints", "1000"],
    );
    let (captured, input_bytes) = (bytes_of(&capture), bytes_of(&input));
    figures.push(
        Figure::new("capture", "1M events, bytes captured / input bytes", captured as f64 / input_bytes as f64, "x")
            .against(
                format!("input {:.1} MB, captures {:.1} MB", input_bytes as f64 / 1e6, captured as f64 / 1e6),
                input_bytes as f64,
            )
            .goal(Goal::AtMost(2.0)),
    );
    let bundle = work.join("bundle");
    let _ = std::fs::remove_dir_all(&bundle);
    measure(
        Command::new(clink())
            .arg("incident-collect")
            .arg("--checkpoint-dir")
            .arg(work.join("ck"))
            .arg("--capture-dir")
            .arg(&capture)
            .args(["--include-state", "--include-captures", "--commit-confirmation", "no", "--max-bytes", "4294967296"])
            .args([
                "--max-files",
                "100000",
                "--epochs",
                &(1..=101).map(|e| e.to_string()).collect::<Vec<_>>().join(","),
                "--out",
            ])
            .arg(&bundle)
            .stdout(std::process::Stdio::null()),
    );
    let mut verify = Vec::new();
    for _ in 0..runs() {
        verify.push(measure_with(
            Command::new(clink())
                // Every epoch replayed (the default checks 64 and is then
                // not established), so the figure is the whole bundle's.
                .args(["incident-verify", "--profile", "replay", "--max-replays", "1000000"])
                .arg(&bundle)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null()),
            &[0],
        ));
    }
    let wall = median(verify.iter().map(|c| c.wall.as_secs_f64()).collect());
    let rss = median(verify.iter().map(|c| c.peak_rss_kib as f64 / 1024.0).collect());
    figures.push(
        Figure::new("verify", "--profile replay over the 1M bundle, peak memory", rss, "MiB").goal(Goal::AtMost(128.0)),
    );
    figures.push(
        Figure::new("verify", "--profile replay wall / the run's wall", wall / run.wall.as_secs_f64(), "x")
            .against(
                format!("the run {:.2}s; verify {wall:.2}s (exit {})", run.wall.as_secs_f64(), verify[0].code),
                run.wall.as_secs_f64(),
            )
            .goal(Goal::AtMost(1.0)),
    );
    // bundle.artifacts at the disk's speed: the integrity profile hashes
    // every file the manifest lists; sha256sum hashes the same files.
    let mut files = Vec::new();
    for dir in ["checkpoint", "capture", "traces", "job"] {
        dir_files(&bundle.join(dir), &mut files);
    }
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..runs() {
        ours.push(
            measure_with(
                Command::new(clink())
                    .args(["incident-verify", "--profile", "integrity"])
                    .arg(&bundle)
                    .stdout(std::process::Stdio::null()),
                &[0, 3],
            )
            .wall
            .as_secs_f64(),
        );
        theirs.push(
            measure(Command::new("sha256sum").args(&files).stdout(std::process::Stdio::null())).wall.as_secs_f64(),
        );
    }
    let (ours, theirs) = (median(ours), median(theirs));
    figures.push(
        Figure::new("hashing", "--profile integrity wall / sha256sum wall", ours / theirs, "x")
            .against(
                format!("sha256sum over {} files, {:.1} MB: {theirs:.2}s", files.len(), bytes_of(&bundle) as f64 / 1e6),
                theirs,
            )
            .goal(Goal::AtMost(1.5)),
    );
}

/// The 1M-event run with captures on, made once and kept (the `capture`
/// bench makes the same one).
fn captured_run(scratch: &Path) -> PathBuf {
    let work = scratch.join("capture");
    if !work.join("ck").exists() || !work.join("capture").exists() {
        let input = generate(scratch, 1_000_000);
        let capture = work.join("capture");
        let s = capture.to_string_lossy().into_owned();
        let extra = ["--capture-dir", &s, "--capture-retain-epochs", "1000", "--retain-checkpoints", "1000"];
        run_example(&input, &work, 10_000, &extra);
    }
    work
}

/// The defect variant's release binary, built by cargo beside this one.
fn defect_build(feature: &str) -> PathBuf {
    let target = Path::new(clink()).parent().and_then(Path::parent).expect("the bench's clink is under a target dir");
    let dir = target.join("ab-defect");
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "--quiet", "--release", "-p", "clink-harness", "--bin", "clink", "--features"])
        .arg(format!("clink-engine/{feature}"))
        .env("CARGO_TARGET_DIR", &dir)
        .current_dir(workspace())
        .status()
        .expect("cargo runs");
    assert!(status.success(), "the {feature} build failed");
    dir.join("release/clink")
}

fn ab(scratch: &Path, figures: &mut Vec<Figure>) {
    let work = captured_run(scratch);
    let candidate = defect_build("defect-window-end-inclusive");
    let dirs = |cmd: &mut Command| {
        cmd.arg("--capture-dir").arg(work.join("capture")).arg("--checkpoint-dir").arg(work.join("ck"));
    };
    let (mut sweeps, mut abs) = (Vec::new(), Vec::new());
    let mut report = serde_json::Value::Null;
    for _ in 0..runs() {
        let mut sweep = Command::new(clink());
        sweep.args(["replay", "sweep", "--json"]).stdout(std::process::Stdio::null());
        dirs(&mut sweep);
        sweeps.push(measure(&mut sweep).wall.as_secs_f64());
        let out = work.join("ab.json");
        let mut run = Command::new(clink());
        run.args(["replay", "ab", "--json", "--candidate-clink"]).arg(&candidate);
        dirs(&mut run);
        run.stdout(std::fs::File::create(&out).expect("the report file"));
        abs.push(measure_with(&mut run, &[1]).wall.as_secs_f64());
        report = serde_json::from_slice(&std::fs::read(&out).expect("the report")).expect("a JSON report");
    }
    let epochs = report["epochs"].as_array().cloned().unwrap_or_default();
    let of_type = |t: &str| epochs.iter().filter(|e| e["operator_type"] == t).collect::<Vec<_>>();
    let windows = of_type("tumbling_window");
    let located =
        windows.iter().filter(|e| e["status"] == "diverged" && e["first_difference"]["index"].is_u64()).count();
    let others_identical =
        epochs.iter().filter(|e| e["operator_type"] != "tumbling_window" && e["status"] == "identical").count();
    assert!(located > 0, "no divergence located: {report}");
    let (sweep, ab) = (median(sweeps), median(abs));
    figures.push(
        Figure::new("ab", "replay ab (vs defect-window-end-inclusive) wall / replay sweep wall", ab / sweep, "x")
            .against(format!("sweep {sweep:.2}s, ab {ab:.2}s over {} epochs", epochs.len()), sweep)
            .goal(Goal::AtMost(2.0)),
    );
    figures.push(
        Figure::new("ab", "window epochs located at their first difference / window epochs", located as f64, "epochs")
            .against(
                format!("{} window epochs; {others_identical} other epochs identical", windows.len()),
                windows.len() as f64,
            )
            .goal(Goal::AtLeast(windows.len() as f64)),
    );
    store_round_trip(&work, figures);
}

/// The A/B run's capture through a file:// store and back: push, a second
/// push (dedup: nothing new), fetch, and the fetched copy swept.
fn store_round_trip(work: &Path, figures: &mut Vec<Figure>) {
    let store = work.join("store");
    let fetched = work.join("fetched");
    let _ = std::fs::remove_dir_all(&store);
    let _ = std::fs::remove_dir_all(&fetched);
    let url = format!("file://{}", store.display());
    let push = || {
        let out = Command::new(clink())
            .args(["capture", "push", "--json", "--capture-dir"])
            .arg(work.join("capture"))
            .arg("--checkpoint-dir")
            .arg(work.join("ck"))
            .arg(&url)
            .output()
            .expect("capture push runs");
        assert!(out.status.success(), "capture push: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("a JSON push report")
    };
    let started = Instant::now();
    let first = push();
    let push_s = started.elapsed().as_secs_f64();
    let second = push();
    let reference = first["reference"].as_str().expect("a REF").to_string();
    assert_eq!(second["reference"], first["reference"], "the same bytes, the same REF");
    let fetch = measure(
        Command::new(clink())
            .args(["capture", "fetch", &url, &reference])
            .arg(&fetched)
            .stdout(std::process::Stdio::null()),
    );
    let sweep = |capture: PathBuf, ck: PathBuf| {
        let out = Command::new(clink())
            .args(["replay", "sweep", "--json", "--capture-dir"])
            .arg(capture)
            .arg("--checkpoint-dir")
            .arg(ck)
            .output()
            .expect("replay sweep runs");
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a JSON sweep");
        (out.status.code(), doc["deterministic"].as_u64())
    };
    let original = sweep(work.join("capture"), work.join("ck"));
    let copy = sweep(fetched.join("capture"), fetched.join("checkpoint"));
    assert_eq!(copy, original, "the fetched capture sweeps as the original does");
    let mb = first["bytes"].as_f64().unwrap_or(0.0) / 1e6;
    figures.push(
        Figure::new("store", "capture push then fetch of the 1M capture, wall", push_s + fetch.wall.as_secs_f64(), "s")
            .against(
                format!(
                    "{} files, {mb:.1} MB: push {push_s:.2}s, fetch {:.2}s; swept after fetch: {} deterministic epochs",
                    first["files"],
                    fetch.wall.as_secs_f64(),
                    copy.1.unwrap_or(0)
                ),
                mb,
            ),
    );
    figures.push(
        Figure::new(
            "store",
            "second push of the same bytes: objects written",
            second["objects_written"].as_f64().unwrap_or(-1.0),
            "objects",
        )
        .against(
            format!("{} objects present", second["objects_present"]),
            first["objects_written"].as_f64().unwrap_or(0.0),
        )
        .goal(Goal::AtMost(0.0)),
    );
}

fn tlc(scratch: &Path, figures: &mut Vec<Figure>) {
    let tools = match clink_formal::locate(None, None) {
        Ok(t) => t,
        Err(why) => {
            eprintln!("  tlc: unavailable: {why}");
            return;
        }
    };
    tlc_start(scratch, &tools, figures);
    let mut full = Vec::new();
    for _ in 0..runs() {
        full.push(
            measure_with(
                Command::new(clink())
                    .args(["incident-verify", "--profile", "full"])
                    .arg(workspace().join("fixtures/bundles/good"))
                    .stdout(std::process::Stdio::null()),
                &[0],
            )
            .wall
            .as_secs_f64(),
        );
    }
    figures.push(
        Figure::new("tlc", "incident-verify --profile full, example bundle", median(full), "s").goal(Goal::AtMost(0.6)),
    );
    // A trace of about 10,000 events: a checkpoint every 60 records over 40,000.
    let input = generate(scratch, 40_000);
    let work = scratch.join("trace-10k");
    let traces = work.join("traces");
    let _ = std::fs::remove_dir_all(&work);
    let mut cmd = Command::new(clink());
    cmd.arg("run")
        .arg("--quiet")
        .arg("--job")
        .arg(workspace().join("fixtures/jobs/example/job.json"))
        .arg("--input-dir")
        .arg(&input)
        .arg("--output-dir")
        .arg(work.join("out"))
        .arg("--checkpoint-dir")
        .arg(work.join("ck"))
        .args(["--checkpoint-every-records", "60"])
        .env("CLINK_PROTOCOL_TRACE_DIR", &traces)
        .stdout(std::process::Stdio::null());
    measure(&mut cmd);
    let mut times = Vec::new();
    let mut events = 0;
    for _ in 0..runs() {
        let start = Instant::now();
        let v = clink_formal::trace::validate_run(&tools, &traces, None).expect("validation runs");
        assert!(matches!(v.verdict, clink_formal::trace::Verdict::Accepted { .. }), "{}", v.verdict);
        events = v.events;
        times.push(start.elapsed().as_secs_f64());
    }
    figures.push(
        Figure::new("tlc", format!("trace validation, {events} events, wall with the JVM"), median(times), "s")
            .goal(Goal::AtMost(10.0)),
    );
}

/// TLC's start on a trivial model (four states), with the verified CDS
/// archive `gates/fetch-tools` made and without it, through the same runner.
fn tlc_start(scratch: &Path, tools: &clink_formal::FormalTools, figures: &mut Vec<Figure>) {
    let Some(archive) = &tools.archive else {
        let why = tools.no_archive.as_ref().map_or("?".into(), |e| e.to_string());
        eprintln!("  tlc: start with / without the CDS archive: skipped: {why}");
        return;
    };
    let dir = scratch.join("tlc-start");
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    std::fs::write(
        dir.join("Trivial.tla"),
        "---- MODULE Trivial ----\nEXTENDS Naturals\nVARIABLE x\nInit == x = 0\nNext == x < 3 /\\ x' = x + 1\n====\n",
    )
    .expect("the model");
    std::fs::write(dir.join("Trivial.cfg"), "INIT Init\nNEXT Next\n").expect("its configuration");
    let job = clink_formal::tlc::TlcJob {
        dir: &dir,
        module: "Trivial.tla",
        config: "Trivial.cfg",
        library: Vec::new(),
        workers: 1,
        check_deadlock: false,
        timeout: clink_formal::tlc::timeout(),
    };
    let without = clink_formal::FormalTools { archive: None, ..tools.clone() };
    let (mut with_times, mut without_times) = (Vec::new(), Vec::new());
    for _ in 0..runs().max(5) {
        for (t, times) in [(tools, &mut with_times), (&without, &mut without_times)] {
            let run = clink_formal::tlc::run(t, &job).expect("TLC runs");
            assert!(
                matches!(clink_formal::tlc::judge(&run), clink_formal::tlc::Outcome::NoError { .. }),
                "{}",
                run.output
            );
            times.push(run.elapsed.as_secs_f64());
        }
    }
    let (with, without) = (median(with_times), median(without_times));
    figures.push(
        Figure::new("tlc", "TLC start, trivial model, with / without the CDS archive", with / without, "x")
            .against(format!("without {}: {without:.2}s (with: {with:.2}s)", archive.display()), without),
    );
}

fn models(_scratch: &Path, figures: &mut Vec<Figure>) {
    let Ok(tools) = clink_formal::locate(None, None) else {
        return;
    };
    for name in clink_formal::suite::configs(&tools.formal_dir.join("models")) {
        let start = Instant::now();
        let outcome =
            clink_formal::suite::check_model(&tools, &name).map(|o| o.to_string()).unwrap_or_else(|e| e.to_string());
        figures.push(Figure::new("models", format!("{name}: {outcome}"), start.elapsed().as_secs_f64(), "s"));
    }
}

/// The services' env file, as `gates/services start` wrote it.
fn services() -> Option<std::collections::BTreeMap<String, String>> {
    let path = std::env::var("CLINK_SERVICES_ENV").unwrap_or_else(|_| {
        format!("{}/clink-services.env", std::env::var("TMPDIR").unwrap_or_else(|_| "/tmp".into()))
    });
    let text = std::fs::read_to_string(path).ok()?;
    Some(text.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect())
}

/// One job's line of `gates/audit-gate --figures` (clink-audit-figures v1).
fn audit_figures(line: &serde_json::Value, figures: &mut Vec<Figure>) {
    let job = line["job"].as_str().unwrap_or("?");
    let number = |k: &str| line[k].as_f64();
    let asked = format!(
        "{} events/s asked, a checkpoint every {:.0} s",
        line["rate_asked"],
        number("checkpoint_interval_ms").unwrap_or(0.0) / 1000.0
    );
    if let (Some(median), Some(max)) = (number("delay_median_s"), number("delay_max_s")) {
        figures.push(
            Figure::new("audit", format!("{job}: checkpoint completed to audit published, median"), median, "s")
                .goal(Goal::AtMost(30.0)),
        );
        figures.push(
            Figure::new("audit", format!("{job}: checkpoint completed to audit published, max"), max, "s")
                .goal(Goal::AtMost(30.0)),
        );
    }
    if let (Some(cpu), Some(wall)) = (number("runner_cpu_s"), number("runner_wall_s")) {
        figures.push(
            Figure::new("audit", format!("{job}: the runner's own CPU"), cpu, "s")
                .against(format!("of {wall:.0} s polling ({:.1}% of a core)", 100.0 * cpu / wall.max(1.0)), wall),
        );
    }
    if let Some(rss) = number("runner_peak_rss_kib") {
        figures.push(Figure::new("audit", format!("{job}: the runner's peak memory"), rss / 1024.0, "MiB"));
    }
    // Every completed checkpoint verified is the gate's own verdict: the
    // delays above are of passed audits only.
    let verified = line["all_verified"].as_bool() == Some(true);
    figures.push(
        Figure::new("audit", format!("{job}: every completed checkpoint verified"), f64::from(u8::from(verified)), "")
            .against(format!("outcomes {}", line["outcomes"]), 1.0)
            .goal(Goal::AtLeast(1.0)),
    );
    // "Never behind" needs status reads that said something else; with none,
    // it was not measured, and no figure claims it.
    let states = &line["states"];
    let reads: f64 = states.as_object().map_or(0.0, |m| m.values().filter_map(|v| v.as_f64()).sum());
    if reads > 0.0 {
        let behind = states["behind"].as_f64().unwrap_or(0.0);
        figures.push(
            Figure::new("audit", format!("{job}: status said behind, times"), behind, "reads")
                .against(format!("of {reads:.0} reads, one a second: {states}"), reads)
                .goal(Goal::AtMost(0.0)),
        );
    } else {
        eprintln!("  audit: {job}: status was never read while it ran: whether it was behind is not measured");
    }
    if let Some(rate) = number("job_events_per_s") {
        figures.push(
            Figure::new("audit", format!("{job}: the job sustained (its audited offsets)"), rate, "ev/s")
                .against(asked, line["rate_asked"].as_f64().unwrap_or(0.0))
                .goal(Goal::AtLeast(10_000.0)),
        );
    }
}

fn audit(scratch: &Path, figures: &mut Vec<Figure>) {
    if services().is_none() {
        eprintln!("  audit: skipped: the services are not running (gates/services start)");
        return;
    }
    let file = scratch.join("audit-figures.ndjson");
    let _ = std::fs::remove_file(&file);
    let target = Path::new(clink()).parent().and_then(Path::parent).expect("the bench's clink is under a target dir");
    // The gate's own account goes to stderr: stdout is the table (or --json).
    let to_stderr = std::io::stderr().as_fd().try_clone_to_owned().expect("stderr");
    let status = Command::new(workspace().join("gates/audit-gate"))
        .args(["--no-kills", "--rate", "11000", "--interval-ms", "10000", "--cycles", "10", "--checkpoints", "10"])
        .arg("--figures")
        .arg(&file)
        .env("CARGO_TARGET_DIR", target)
        .env_remove("CLINK_BIN")
        .env_remove("CLINK_REFERENCE_AUDIT_BIN")
        .current_dir(workspace())
        .stdout(std::process::Stdio::from(to_stderr))
        .status()
        .expect("gates/audit-gate runs");
    if !status.success() {
        eprintln!("  audit: gates/audit-gate ended {status}: its figures below are of the jobs it finished");
    }
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    for line in text.lines() {
        match serde_json::from_str(line) {
            Ok(doc) => audit_figures(&doc, figures),
            Err(e) => eprintln!("  audit: a figures line that is not JSON ({e}): {line}"),
        }
    }
}

type Bench = fn(&Path, &mut Vec<Figure>);

fn print_table(figures: &[Figure]) {
    println!("{:<11} {:<62} {:>14} {:>10}  against", "bench", "figure", "value", "goal");
    for f in figures {
        let value =
            if f.unit == "ev/s" { format!("{:.0} {}", f.value, f.unit) } else { format!("{:.3} {}", f.value, f.unit) };
        let goal = match (f.goal, f.met()) {
            (Some(Goal::AtMost(g)), Some(met)) => format!("<= {g} {}", if met { "met" } else { "NOT" }),
            (Some(Goal::AtLeast(g)), Some(met)) => format!(">= {g} {}", if met { "met" } else { "NOT" }),
            _ => String::new(),
        };
        let against = f.baseline.as_ref().map(|(b, _)| b.as_str()).unwrap_or("");
        println!("{:<11} {:<62} {:>14} {:>10}  {}", f.bench, f.what, value, goal, against);
    }
}

fn print_profiles(profiles: &[profile::Profile]) {
    for p in profiles {
        println!("\nwhere the time goes: {}\n  ({})", p.figure, p.method);
        for line in &p.lines {
            println!("  {line}");
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let json = args.iter().any(|a| a == "--json");
    let filter: Option<&String> = args.iter().find(|a| !a.starts_with('-'));
    let scratch = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bench");
    std::fs::create_dir_all(&scratch).expect("scratch directory");
    // An earlier bench's runs are moved aside (a rename frees nothing) and
    // deleted once this one has measured everything (see fresh_run_dir).
    let aside = scratch.join(format!("{RUNS_DIR}-old-{}", std::process::id()));
    let _ = std::fs::rename(scratch.join(RUNS_DIR), &aside);
    let benches: &[(&str, Bench, bool)] = &[
        ("throughput", throughput, true),
        ("recorder", recorder, true),
        ("capture", capture_and_verify, true),
        ("ab", ab, true),
        ("tlc", tlc, true),
        ("connectors", kafka::connectors, true),
        ("audit", audit, true),
        ("peers", peers::peers, true),
        ("models", models, false),
    ];
    let mut figures = Vec::new();
    let started = Instant::now();
    for &(name, bench, by_default) in benches {
        let chosen = match filter {
            Some(f) => name.contains(f.as_str()),
            None => by_default,
        };
        if chosen {
            eprintln!("bench {name}");
            bench(&scratch, &mut figures);
        }
    }
    // Under a throughput or recorder goal the run missed: where the time goes.
    let profiles = profile::shortfalls(&scratch, &figures);
    let _ = std::fs::remove_dir_all(&aside);
    let _ = std::fs::remove_dir_all(scratch.join(RUNS_DIR));
    if json {
        let doc = json!({
            "format": "clink-bench",
            "version": 1,
            "seconds": started.elapsed().as_secs_f64(),
            "runs": runs(),
            "figures": figures.iter().map(|f| json!({
                "bench": f.bench,
                "figure": f.what,
                "value": f.value,
                "unit": f.unit,
                "baseline": f.baseline.as_ref().map(|(what, value)| json!({"what": what, "value": value})),
                "goal": f.goal.map(|g| match g { Goal::AtMost(v) => json!({"at_most": v}), Goal::AtLeast(v) => json!({"at_least": v}) }),
                "met": f.met(),
            })).collect::<Vec<_>>(),
            "profiles": profiles.iter().map(|p| json!({
                "figure": p.figure,
                "method": p.method,
                "lines": p.lines,
            })).collect::<Vec<_>>(),
        });
        println!("{doc}");
    } else {
        print_table(&figures);
        print_profiles(&profiles);
        println!("({} runs per figure, {:.0} s in all)", runs(), started.elapsed().as_secs_f64());
    }
}
