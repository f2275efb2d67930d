//! The profiles printed under a goal the run did not meet: where the
//! remaining time goes, taken in the same `gates/bench` run as the figure.
//!
//! - A throughput goal (wall time): `perf record -g` over one run of the
//!   example job (on-CPU samples, by area and by symbol), and `perf trace -s`
//!   over another (the system calls its threads waited in: time a CPU
//!   profile cannot see).
//! - The recorder's goal (CPU): `perf record -g` over one run with capture
//!   off and one with it on; the samples the capture added, by area and by
//!   symbol.
//!
//! A profile is evidence beside a figure, never a figure: it changes no
//! verdict, and one that could not be taken (no perf, no permission) says so
//! and why instead of printing nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::perf_output::{area_of, parse_inclusive, parse_trace_summary, short, Samples, TraceCall, FILE_PATHS};
use crate::{example_command, fresh_run_dir, generate, Figure};

/// One profile: the figure it explains, how it was taken, what it found.
pub struct Profile {
    pub figure: String,
    pub method: String,
    pub lines: Vec<String>,
}

/// The profiles of the throughput and recorder figures that missed their goal.
pub fn shortfalls(scratch: &Path, figures: &[Figure]) -> Vec<Profile> {
    let missed = |bench: &str| figures.iter().find(|f| f.bench == bench && f.met() == Some(false));
    let mut profiles = Vec::new();
    let wanted: Vec<&Figure> = ["throughput", "recorder"].into_iter().filter_map(missed).collect();
    if wanted.is_empty() {
        return profiles;
    }
    if let Err(why) = perf_works(scratch) {
        for figure in wanted {
            profiles.push(Profile {
                figure: figure.what.clone(),
                method: "perf".into(),
                lines: vec![format!("unavailable: {why}")],
            });
        }
        return profiles;
    }
    let input = generate(scratch, 1_000_000);
    for figure in wanted {
        eprintln!("profile {}", figure.bench);
        profiles.extend(match figure.bench {
            "throughput" => throughput(scratch, &input, figure),
            _ => recorder(scratch, &input, figure),
        });
    }
    profiles
}

/// Whether `perf record` runs here at all, and if not, what it said.
fn perf_works(scratch: &Path) -> Result<(), String> {
    let data = scratch.join("profile-probe.data");
    let out = Command::new("perf")
        .args(["record", "-q", "-o"])
        .arg(&data)
        .args(["--", "true"])
        .output()
        .map_err(|e| format!("perf does not start: {e}"))?;
    let _ = std::fs::remove_file(&data);
    if out.status.success() {
        Ok(())
    } else {
        let said = String::from_utf8_lossy(&out.stderr);
        Err(format!("perf record failed: {}", said.lines().find(|l| !l.trim().is_empty()).unwrap_or("no message")))
    }
}

/// The example job's run over 1M events, checkpoints on the disk, under `wrapper`.
fn wrapped_run(scratch: &Path, name: &str, input: &Path, extra: &[&str], wrapper: &[&str]) -> Result<(), String> {
    let work = fresh_run_dir(scratch, name);
    let capture = work.join("capture").to_string_lossy().into_owned();
    let mut extra = extra.to_vec();
    if extra.contains(&"--capture-dir") {
        extra.push(&capture);
    }
    let run = example_command(input, &work, 10_000, &extra);
    let out = Command::new("perf")
        .args(wrapper)
        .arg("--")
        .arg(run.get_program())
        .args(run.get_args())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("perf does not start: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("perf {} exited {}: {}", wrapper[0], out.status, String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// `perf record -g` of one run; the samples by symbol.
fn sampled(scratch: &Path, name: &str, input: &Path, extra: &[&str]) -> Result<Samples, String> {
    let data = scratch.join(format!("profile-{name}.data"));
    let data_arg = data.to_string_lossy().into_owned();
    wrapped_run(scratch, name, input, extra, &["record", "-g", "-F", "1999", "-q", "-o", &data_arg])?;
    let samples = read_samples(&data);
    let _ = std::fs::remove_file(&data);
    samples
}

fn throughput(scratch: &Path, input: &Path, figure: &Figure) -> Vec<Profile> {
    let mut profiles = Vec::new();
    let method = "perf record -g -F 1999, one run of the example job (1M events, checkpoints on the disk)";
    let lines = match sampled(scratch, "throughput", input, &[]) {
        Ok(samples) => samples.describe("on-CPU samples"),
        Err(why) => vec![format!("unavailable: {why}")],
    };
    profiles.push(Profile { figure: figure.what.clone(), method: method.into(), lines });
    let method = "perf trace -s, one run: the system calls the threads spent longest in (tracing slows them)";
    profiles.push(Profile { figure: figure.what.clone(), method: method.into(), lines: waits(scratch, input) });
    profiles
}

fn recorder(scratch: &Path, input: &Path, figure: &Figure) -> Vec<Profile> {
    let method = "perf record -g -F 1999, one run with capture off and one with it on: the samples capture added";
    let lines = match (
        sampled(scratch, "recorder-off", input, &[]),
        sampled(scratch, "recorder-on", input, &["--capture-dir"]),
    ) {
        (Ok(off), Ok(on)) => {
            let mut lines = added_by(&off, &on);
            lines.extend(file_paths(&off, &on));
            lines
        }
        (Err(why), _) | (_, Err(why)) => vec![format!("unavailable: {why}")],
    };
    vec![Profile { figure: figure.what.clone(), method: method.into(), lines }]
}

/// What the samples of `on` have beyond those of `off`, by area and symbol.
fn added_by(off: &Samples, on: &Samples) -> Vec<String> {
    let added = on.total as i64 - off.total as i64;
    let mut lines = vec![format!(
        "{} samples without capture, {} with: {:+} ({:+.1}%)",
        off.total,
        on.total,
        added,
        100.0 * added as f64 / off.total.max(1) as f64
    )];
    if added <= 0 {
        lines.push("capture added no samples in this pair (the figure's pairs are the measure)".into());
        return lines;
    }
    let mut grown: Vec<(i64, String)> = on
        .by_symbol
        .iter()
        .map(|(symbol, &n)| (n as i64 - off.by_symbol.get(symbol).copied().unwrap_or(0) as i64, symbol.clone()))
        .filter(|(d, _)| *d > 0)
        .collect();
    let mut areas: BTreeMap<&'static str, i64> = BTreeMap::new();
    for (d, symbol) in &grown {
        *areas.entry(area_of(symbol)).or_default() += d;
    }
    let mut areas: Vec<(i64, &str)> = areas.into_iter().map(|(a, d)| (d, a)).collect();
    areas.sort_by(|a, b| b.cmp(a));
    let shrank: i64 = on
        .by_symbol
        .iter()
        .map(|(symbol, &n)| n as i64 - off.by_symbol.get(symbol).copied().unwrap_or(0) as i64)
        .filter(|d| *d < 0)
        .sum::<i64>()
        - off.by_symbol.keys().filter(|s| !on.by_symbol.contains_key(*s)).map(|s| off.by_symbol[s] as i64).sum::<i64>();
    lines.push(format!(
        "where the added samples are (symbols that grew; those that shrank, {shrank}, are the runs' noise): {}",
        areas.iter().take(6).map(|(d, a)| format!("{a} {d}")).collect::<Vec<_>>().join("; ")
    ));
    grown.sort_by(|a, b| b.cmp(a));
    for (d, symbol) in grown.iter().take(8) {
        lines.push(format!("{d:>+7} samples  {}", short(symbol)));
    }
    lines
}

/// The samples under the kernel's file paths (creation, removal, fsync),
/// counting what they call, without capture and with it: what the capture's
/// files cost beyond their bytes.
fn file_paths(off: &Samples, on: &Samples) -> Vec<String> {
    let parts: Vec<String> = FILE_PATHS
        .iter()
        .filter_map(|(symbol, what)| match (off.inclusive_samples(symbol), on.inclusive_samples(symbol)) {
            (None, None) => None,
            (a, b) => {
                let (a, b) = (a.unwrap_or(0.0), b.unwrap_or(0.0));
                Some(format!("{what} {a:.0} without, {b:.0} with ({:+.0})", b - a))
            }
        })
        .collect();
    if parts.is_empty() {
        return vec!["the kernel's file paths: none sampled (no call graphs, or another file system)".into()];
    }
    vec![format!("samples under the kernel's file paths, with all they call: {}", parts.join("; "))]
}

/// The samples `perf report` reads from `data`, by symbol.
fn read_samples(data: &Path) -> Result<Samples, String> {
    let mut samples = Samples::parse(&report(data, "sym", "--no-children")?);
    if samples.total == 0 {
        return Err("perf recorded no samples".into());
    }
    samples.by_thread = Samples::parse(&report(data, "comm", "--no-children")?).by_symbol;
    samples.inclusive = parse_inclusive(&report(data, "sym", "--children")?);
    Ok(samples)
}

/// `perf report`'s rows of `data` sorted by `key`, tab-separated, with
/// counts; `children` is `--no-children` (each symbol's own samples) or
/// `--children` (with all it calls: the recording needs call graphs).
fn report(data: &Path, key: &str, children: &str) -> Result<String, String> {
    let out = Command::new("perf")
        .args(["report", "--stdio", children, "-g", "none", "-n", "--sort", key, "-t", "\t", "-i"])
        .arg(data)
        .output()
        .map_err(|e| format!("perf report does not start: {e}"))?;
    if !out.status.success() {
        return Err(format!("perf report {children} --sort {key} exited {}", out.status));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `perf trace -s` over one run: the (thread, system call) pairs that took
/// the most time, and the totals per call over all threads.
fn waits(scratch: &Path, input: &Path) -> Vec<String> {
    let file: PathBuf = scratch.join("profile-trace.txt");
    let file_arg = file.to_string_lossy().into_owned();
    if let Err(why) = wrapped_run(scratch, "trace", input, &[], &["trace", "-s", "-o", &file_arg]) {
        return vec![format!("unavailable: {why}")];
    }
    let text = std::fs::read_to_string(&file);
    let _ = std::fs::remove_file(&file);
    let text = match text {
        Ok(text) => text,
        Err(e) => return vec![format!("unavailable: perf trace's summary {} could not be read: {e}", file.display())],
    };
    let calls = parse_trace_summary(&text);
    if calls.is_empty() {
        return vec!["unavailable: perf trace printed no summary".into()];
    }
    let mut per_call: BTreeMap<&str, (u64, f64)> = BTreeMap::new();
    for c in &calls {
        let e = per_call.entry(&c.syscall).or_default();
        e.0 += c.calls;
        e.1 += c.ms;
    }
    let mut totals: Vec<(f64, &str, u64)> = per_call.into_iter().map(|(s, (n, ms))| (ms, s, n)).collect();
    totals.sort_by(|a, b| b.0.total_cmp(&a.0));
    let mut lines = vec![format!(
        "over all threads: {}",
        totals.iter().take(6).map(|(ms, s, n)| format!("{s} {n} calls {ms:.0} ms")).collect::<Vec<_>>().join("; ")
    )];
    // Threads waiting for one another (an empty channel, a full one) are
    // the consequence; the calls that block on the kernel are the cause.
    let waiting = |c: &&TraceCall| WAITING_ON_THREADS.contains(&c.syscall.as_str());
    let waited: f64 = calls.iter().filter(waiting).map(|c| c.ms).sum();
    lines.push(format!(
        "waiting on one another ({}): {waited:.0} ms over all threads; the longest other calls:",
        WAITING_ON_THREADS.join(", ")
    ));
    let mut longest: Vec<&TraceCall> = calls.iter().filter(|c| !waiting(c)).collect();
    longest.sort_by(|a, b| b.ms.total_cmp(&a.ms));
    for c in longest.into_iter().take(8) {
        lines.push(format!("{:>8.0} ms  {:<22} {} ({} calls)", c.ms, c.thread, c.syscall, c.calls));
    }
    lines
}

/// System calls in which a thread waits for another thread, not the kernel.
const WAITING_ON_THREADS: [&str; 3] = ["futex", "sched_yield", "nanosleep"];
