//! THE proof, made from outside, and a command run under it.
//!
//! 1. The mechanism: `unshare -rn true` must run; where it cannot, an
//!    environment whose only interface is `lo` is the isolation, and
//!    otherwise isolation is unavailable.
//! 2. The control endpoint starts on 127.0.0.1 (a port the system picks).
//! 3. The probe runs without isolation and must report that the endpoint
//!    answered it with this proof's nonce; otherwise nothing can be told
//!    apart and the proof is inconclusive.
//! 4. The same probe runs under the mechanism and must leave its own report
//!    (with the nonce) that [`judge_inside`] accepts. No report, a crash, or
//!    a report that is not this probe's is inconclusive: the absence of an
//!    answer is never taken for a refusal.
//!
//! With a command, step 4's probe execs it once it has judged the isolation
//! enforced from inside, so the command runs in the very namespace that was
//! proven, its exit status is the process's own, and SIGINT, SIGTERM and
//! SIGHUP to this process are passed on to it. A command is never run
//! without enforced isolation.

use std::ffi::OsString;
use std::fs::File;
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::control::{self, Control};
use crate::probe::{interfaces, judge_inside, judge_outside, only_loopback, read_report, ProbeReport};
use crate::{Mechanism, Proof, Verdict};

/// How long a probe (or `unshare -rn true`) may take before it is killed.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(20);

/// How to start the probe: a program and the arguments that name its
/// `probe` command (for clink: `clink isolation probe`).
#[derive(Debug, Clone)]
pub struct Probe {
    pub program: PathBuf,
    pub args: Vec<OsString>,
}

impl Probe {
    /// The running binary's own probe command.
    pub fn this_binary(command: &[&str]) -> Result<Probe, String> {
        let program = std::env::current_exe().map_err(|e| format!("this program's own path: {e}"))?;
        Ok(Probe { program, args: command.iter().map(OsString::from).collect() })
    }
}

/// What [`isolate`] did.
#[derive(Debug)]
pub enum Outcome {
    /// No command was given: the proof.
    Proved(Proof),
    /// The command ran under enforced isolation, with its own exit status
    /// (128 + the signal when a signal ended it).
    Ran { proof: Proof, status: i32 },
    /// The command was not run, and why.
    NotRun(Proof),
}

impl Outcome {
    pub fn proof(&self) -> &Proof {
        match self {
            Outcome::Proved(p) | Outcome::NotRun(p) | Outcome::Ran { proof: p, .. } => p,
        }
    }
}

/// How a bounded child ended.
enum Ended {
    Exited(ExitStatus),
    TimedOut,
    Lost(String),
}

fn wait_bounded(child: &mut Child, limit: Duration) -> Ended {
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ended::Exited(status),
            Ok(None) => {}
            Err(e) => return Ended::Lost(e.to_string()),
        }
        if started.elapsed() >= limit {
            let _ = child.kill();
            let _ = child.wait();
            return Ended::TimedOut;
        }
        std::thread::sleep(POLL);
    }
}

fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(s)) => format!("signal {s}"),
        _ => "no exit status".into(),
    }
}

/// The first line a child wrote to `path`, shortened, for a reason.
fn first_line(path: &Path) -> String {
    let mut text = String::new();
    if let Ok(f) = File::open(path) {
        let _ = f.take(4096).read_to_string(&mut text);
    }
    let line: String = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("").chars().take(200).collect();
    if line.is_empty() {
        "nothing".into()
    } else {
        format!("{line:?}")
    }
}

/// Step 1: the mechanism, or why there is none.
fn mechanism(dir: &Path) -> Result<Mechanism, (Verdict, String)> {
    let err = dir.join("unshare-true.err");
    let why = match File::create(&err).and_then(|e| {
        Command::new("unshare").args(["-rn", "true"]).stdin(Stdio::null()).stdout(Stdio::null()).stderr(e).spawn()
    }) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => "there is no unshare on PATH".to_string(),
        Err(e) => format!("unshare could not be started: {e}"),
        Ok(mut child) => match wait_bounded(&mut child, PROBE_TIMEOUT) {
            Ended::Exited(s) if s.success() => return Ok(Mechanism::UnshareRn),
            Ended::Exited(s) => format!("unshare -rn true ended with {} and said {}", describe(s), first_line(&err)),
            Ended::TimedOut => {
                return Err((
                    Verdict::Inconclusive,
                    format!("unshare -rn true did not end within {} s", PROBE_TIMEOUT.as_secs()),
                ))
            }
            Ended::Lost(e) => format!("waiting for unshare -rn true: {e}"),
        },
    };
    if interfaces().is_ok_and(|n| only_loopback(&n)) {
        return Ok(Mechanism::Environment);
    }
    Err((
        Verdict::Unavailable,
        format!("{why}: unshare -rn cannot run here (no unshare, or user namespaces denied), and this environment has interfaces besides lo"),
    ))
}

/// The probe's arguments for one run; `report` is where it writes.
fn probe_command(probe: &Probe, via: Option<Mechanism>, port: u16, nonce: &str, report: &Path) -> Command {
    let mut cmd = match via {
        Some(Mechanism::UnshareRn) => {
            let mut c = Command::new("unshare");
            c.arg("-rn").arg(&probe.program);
            c
        }
        _ => Command::new(&probe.program),
    };
    cmd.args(&probe.args)
        .arg("--control-port")
        .arg(port.to_string())
        .arg("--nonce")
        .arg(nonce)
        .arg("--report")
        .arg(report);
    if let Some(m) = via {
        cmd.arg("--mechanism").arg(m.as_arg());
    }
    cmd
}

/// Runs a probe that runs no command, bounded, its output kept in `dir`:
/// its report, or why there is none.
fn probe_once(mut cmd: Command, dir: &Path, name: &str, report: &Path, nonce: &str) -> Result<ProbeReport, String> {
    let (out, err) = (dir.join(format!("{name}.out")), dir.join(format!("{name}.err")));
    let files = File::create(&out).and_then(|o| Ok((o, File::create(&err)?)));
    let (o, e) = files.map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut child =
        cmd.stdin(Stdio::null()).stdout(o).stderr(e).spawn().map_err(|e| format!("it could not be started: {e}"))?;
    let ended = match wait_bounded(&mut child, PROBE_TIMEOUT) {
        Ended::Exited(s) => describe(s),
        Ended::TimedOut => format!("killed after {} s", PROBE_TIMEOUT.as_secs()),
        Ended::Lost(e) => format!("lost: {e}"),
    };
    read_report(report, nonce).map_err(|why| {
        format!("{why}; the process ended with {ended} and printed {} (stderr {})", first_line(&out), first_line(&err))
    })
}

/// Proves the isolation and, given a command, runs it under it.
pub fn isolate(probe: &Probe, command: Option<&[OsString]>) -> Outcome {
    let stop = |p: Proof| if command.is_some() { Outcome::NotRun(p) } else { Outcome::Proved(p) };
    let dir = match tempfile::Builder::new().prefix("clink-isolation-").tempdir() {
        Ok(d) => d,
        Err(e) => return stop(Proof::new(Verdict::Unavailable, format!("a temporary directory: {e}"))),
    };
    let mechanism = match mechanism(dir.path()) {
        Ok(m) => m,
        Err((verdict, why)) => return stop(Proof::new(verdict, why)),
    };
    let nonce = control::nonce();
    let control = match Control::start(&nonce) {
        Ok(c) => c,
        Err(e) => {
            return stop(Proof::new(
                Verdict::Unavailable,
                format!("the control endpoint cannot listen on 127.0.0.1: {e}"),
            ))
        }
    };
    let mut proof = Proof::new(Verdict::Inconclusive, "");
    proof.mechanism = Some(mechanism);
    proof.control = Some(control.address());
    if mechanism == Mechanism::UnshareRn {
        let report = dir.path().join("outside.json");
        let cmd = probe_command(probe, None, control.port(), &nonce, &report);
        match probe_once(cmd, dir.path(), "outside", &report, &nonce) {
            Ok(r) => {
                let answered = judge_outside(&r, &control.address());
                proof.outside = Some(r);
                if let Err(why) = answered {
                    proof.reason = why;
                    return stop(proof);
                }
            }
            Err(why) => {
                proof.reason = format!("the probe without isolation left no report: {why}");
                return stop(proof);
            }
        }
    }
    let report = dir.path().join("inside.json");
    let mut cmd = probe_command(probe, Some(mechanism), control.port(), &nonce, &report);
    let Some(command) = command else {
        let inside = probe_once(cmd, dir.path(), "inside", &report, &nonce);
        judge(&mut proof, mechanism, inside);
        return Outcome::Proved(proof);
    };
    cmd.arg("--").args(command);
    run_under(cmd, proof, mechanism, &report, &nonce)
}

/// The verdict from the isolated probe's report (or its absence).
fn judge(proof: &mut Proof, mechanism: Mechanism, inside: Result<ProbeReport, String>) {
    let control = proof.control.clone().unwrap_or_default();
    match inside {
        Ok(r) => {
            let (verdict, why) = judge_inside(mechanism, &r, &control);
            proof.verdict = verdict;
            proof.reason = match (&proof.outside, verdict) {
                (Some(_), Verdict::Enforced) => {
                    format!("{why}; the same probe without isolation was answered by {control}")
                }
                _ => why,
            };
            proof.inside = Some(r);
        }
        Err(why) => {
            proof.verdict = Verdict::Inconclusive;
            proof.reason = format!(
                "the isolated probe left no report of its own (a wrapper that runs nothing, or a probe that crashed): {why}"
            );
        }
    }
}

static SIGNALS: AtomicUsize = AtomicUsize::new(0);
static LAST_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    LAST_SIGNAL.store(sig, Ordering::SeqCst);
    SIGNALS.fetch_add(1, Ordering::SeqCst);
}

fn pass_signals_on() {
    let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to atomics, which is async-signal-safe.
    unsafe {
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::signal(sig, handler);
        }
    }
}

/// Starts the probe that execs the command, and waits for it: the probe
/// must report within the probe timeout; the command then takes its time.
fn run_under(mut cmd: Command, mut proof: Proof, mechanism: Mechanism, report: &Path, nonce: &str) -> Outcome {
    pass_signals_on();
    let mut child = match cmd.stdin(Stdio::inherit()).spawn() {
        Ok(c) => c,
        Err(e) => {
            proof.reason = format!("the isolated probe could not be started: {e}");
            return Outcome::NotRun(proof);
        }
    };
    let started = Instant::now();
    let mut forwarded = SIGNALS.load(Ordering::SeqCst);
    let mut reported = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) => {}
            Err(_) => break None,
        }
        let n = SIGNALS.load(Ordering::SeqCst);
        if n != forwarded {
            // SAFETY: a plain kill(2) of our own child.
            unsafe {
                libc::kill(child.id() as libc::pid_t, LAST_SIGNAL.load(Ordering::SeqCst));
            }
            forwarded = n;
        }
        reported = reported || report.exists();
        if !reported && started.elapsed() >= PROBE_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            proof.reason = format!("the isolated probe did not report within {} s", PROBE_TIMEOUT.as_secs());
            return Outcome::NotRun(proof);
        }
        std::thread::sleep(POLL);
    };
    let inside = read_report(report, nonce);
    let started_command = inside.as_ref().is_ok_and(|r| r.command == "started" || r.command.starts_with("not started"));
    judge(&mut proof, mechanism, inside);
    match status {
        Some(status) if started_command && proof.enforced() => {
            let status = status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
            Outcome::Ran { proof, status }
        }
        _ if proof.enforced() => {
            proof.verdict = Verdict::Inconclusive;
            proof.reason = format!("{}; but the probe did not start the command", proof.reason);
            Outcome::NotRun(proof)
        }
        _ => Outcome::NotRun(proof),
    }
}
