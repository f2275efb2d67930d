//! The processes a command starts: each a build's binary named on the
//! command line, in its own process group, its standard output and error
//! kept in a log under `--out`, its argv and exit status recorded for the
//! report. Every wait is bounded: the process's wall time, its resident
//! memory, the bytes under `--out`, the whole command's deadline, and SIGINT
//! or SIGTERM to the command. A bound reached kills the process group and
//! says which bound; it is never a crash and never a success.
//!
//! This module never interprets what a process printed beyond handing it
//! back, and never starts anything an evidence set names.

use std::fs::File;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::confine::Confinement;
use crate::Bounds;

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// SIGINT and SIGTERM stop the command's runs instead of killing it, so the
/// report is still written.
pub fn catch_interrupts() {
    let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGTERM, handler);
    }
}

pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Why a process was stopped by the command (its checks are unavailable).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Stopped {
    #[error("{name}: no exit within --run-timeout-s {seconds}")]
    RunTimeout { name: String, seconds: u64 },
    #[error("{name}: resident memory {mib} MiB passed --max-rss-mib {max}")]
    Rss { name: String, mib: u64, max: u64 },
    #[error("{name}: --out holds {mib} MiB, past --max-output-mib {max}")]
    Output { name: String, mib: u64, max: u64 },
    #[error("{name}: the command's --timeout-s {seconds} was reached")]
    Deadline { name: String, seconds: u64 },
    #[error("{name}: interrupted (SIGINT or SIGTERM to the command)")]
    Interrupted { name: String },
    #[error("{name}: could not be started: {reason}")]
    Spawn { name: String, reason: String },
    /// Its output cannot be handed back whole.
    #[error("{name}: its {stream} {why}")]
    Unreadable { name: String, stream: &'static str, why: String },
}

/// One command the run started, for the report.
#[derive(Debug, Clone, Serialize)]
pub struct CommandRecord {
    pub name: String,
    pub argv: Vec<String>,
    /// The exit code, or null when it died by a signal or was stopped.
    pub exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
    pub seconds: f64,
    pub stdout: String,
    pub stderr: String,
}

/// How a process ended on its own.
#[derive(Debug, Clone)]
pub struct Finished {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Finished {
    pub fn ok(&self) -> bool {
        self.code == Some(0)
    }

    /// The exit as a person reads it.
    pub fn describe(&self) -> String {
        match (self.code, self.signal) {
            (Some(c), _) => format!("exit {c}"),
            (None, Some(s)) => format!("killed by signal {s}"),
            _ => "no exit status".into(),
        }
    }

    /// The last non-empty line of standard error (a refusal's reason).
    pub fn last_error_line(&self) -> String {
        self.stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").to_string()
    }
}

/// How a process is started, beyond its program and arguments.
#[derive(Default, Clone, Copy)]
pub struct Launch<'a> {
    /// Its whole environment; `None` inherits this process's.
    pub env: Option<&'a [(String, std::ffi::OsString)]>,
    /// The filesystem it may touch; `None` leaves it unconfined.
    pub confinement: Option<&'a Confinement>,
}

/// A process started and not yet waited for.
pub struct Running {
    index: usize,
    child: Child,
    started: Instant,
}

impl Running {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            kill_group(&mut self.child);
        }
    }
}

fn kill_group(child: &mut Child) {
    // SAFETY: a plain kill(2) of the process group the child leads.
    unsafe {
        libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The wait between two looks at a running process: 1 ms at first, doubling
/// to 25 ms, so a short process (an A/B candidate's one epoch) is not kept
/// waiting a whole long poll after it exits.
fn poll_interval(polls: u64) -> Duration {
    Duration::from_millis(1u64 << polls.min(5)).min(Duration::from_millis(25))
}

/// Starts and waits for processes within the bounds.
pub struct Runner {
    out: PathBuf,
    logs: PathBuf,
    bounds: Bounds,
    deadline: Instant,
    /// The most bytes of one stream handed back.
    capture_cap: u64,
    pub commands: Vec<CommandRecord>,
}

const MAX_CAPTURED: u64 = 256 << 20;

fn rss_mib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024)
}

/// Bytes of the regular files under `dir` (links not followed).
pub fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    for entry in entries.flatten() {
        match entry.file_type() {
            Ok(t) if t.is_dir() => total += dir_bytes(&entry.path()),
            Ok(t) if t.is_file() => total += entry.metadata().map(|m| m.len()).unwrap_or(0),
            _ => {}
        }
    }
    total
}

/// A stream's log, whole and as text, or why it cannot be.
fn read_capped(path: &Path, cap: u64) -> Result<String, String> {
    let file = File::open(path).map_err(|e| format!("log could not be read: {e}"))?;
    let mut bytes = Vec::new();
    file.take(cap.saturating_add(1)).read_to_end(&mut bytes).map_err(|e| format!("log could not be read: {e}"))?;
    if bytes.len() as u64 > cap {
        return Err(format!("passed the capture cap of {cap} bytes"));
    }
    String::from_utf8(bytes).map_err(|e| format!("is not UTF-8 text (at byte {})", e.utf8_error().valid_up_to()))
}

impl Runner {
    /// `out` is the command's --out; logs go to `<out>/logs`.
    pub fn new(out: &Path, bounds: Bounds) -> std::io::Result<Runner> {
        let logs = out.join("logs");
        std::fs::create_dir_all(&logs)?;
        Ok(Runner {
            out: out.to_path_buf(),
            logs,
            bounds,
            deadline: Instant::now() + Duration::from_secs(bounds.timeout_s),
            capture_cap: MAX_CAPTURED,
            commands: Vec::new(),
        })
    }

    /// The most bytes of one stream handed back (256 MiB unless set).
    pub fn with_capture_cap(mut self, bytes: u64) -> Runner {
        self.capture_cap = bytes;
        self
    }

    /// Starts `program args` in its own process group, with this process's environment.
    pub fn spawn(&mut self, name: &str, program: &Path, args: &[String]) -> Result<Running, Stopped> {
        self.spawn_with_env(name, program, args, None)
    }

    /// Starts `program args` in its own process group; with `env`, that is
    /// its whole environment and nothing of this process's is inherited.
    pub fn spawn_with_env(
        &mut self,
        name: &str,
        program: &Path,
        args: &[String],
        env: Option<&[(String, std::ffi::OsString)]>,
    ) -> Result<Running, Stopped> {
        self.spawn_launch(name, program, args, &Launch { env, confinement: None })
    }

    /// Starts `program args` in its own process group, as `launch` says.
    pub fn spawn_launch(
        &mut self,
        name: &str,
        program: &Path,
        args: &[String],
        launch: &Launch<'_>,
    ) -> Result<Running, Stopped> {
        let env = launch.env;
        let index = self.commands.len();
        let stem = format!("{index:03}-{name}");
        let (stdout, stderr) = (self.logs.join(format!("{stem}.out")), self.logs.join(format!("{stem}.err")));
        let mut argv = vec![program.display().to_string()];
        argv.extend(args.iter().cloned());
        self.commands.push(CommandRecord {
            name: name.to_string(),
            argv,
            exit_code: None,
            signal: None,
            stopped: None,
            seconds: 0.0,
            stdout: format!("logs/{stem}.out"),
            stderr: format!("logs/{stem}.err"),
        });
        let spawn_err = |e: std::io::Error| Stopped::Spawn { name: name.to_string(), reason: e.to_string() };
        if interrupted() {
            return Err(self.stop(index, Stopped::Interrupted { name: name.into() }));
        }
        let (o, e) = match (File::create(&stdout), File::create(&stderr)) {
            (Ok(o), Ok(e)) => (o, e),
            (Err(err), _) | (_, Err(err)) => return Err(self.stop(index, spawn_err(err))),
        };
        let mut command = Command::new(program);
        if let Some(env) = env {
            command.env_clear().envs(env.iter().map(|(k, v)| (k, v)));
        }
        if let Some(confinement) = launch.confinement {
            // SAFETY: the hook makes two system calls and allocates nothing,
            // as is required between fork and exec.
            unsafe {
                command.pre_exec(confinement.child_hook());
            }
        }
        let child =
            command.args(args).stdin(Stdio::null()).stdout(o).stderr(e).process_group(0).spawn().map_err(spawn_err);
        match child {
            Ok(child) => Ok(Running { index, child, started: Instant::now() }),
            Err(e) => Err(self.stop(index, e)),
        }
    }

    fn stop(&mut self, index: usize, why: Stopped) -> Stopped {
        if let Some(c) = self.commands.get_mut(index) {
            c.stopped = Some(why.to_string());
        }
        why
    }

    /// Waits for a started process within the bounds (`run_timeout` when
    /// given replaces --run-timeout-s).
    pub fn wait(&mut self, mut running: Running, run_timeout: Option<Duration>) -> Result<Finished, Stopped> {
        let name = self.commands[running.index].name.clone();
        let limit = run_timeout.unwrap_or(Duration::from_secs(self.bounds.run_timeout_s));
        let mut polls = 0u64;
        loop {
            match running.child.try_wait() {
                Ok(Some(status)) => {
                    let rec = &mut self.commands[running.index];
                    rec.exit_code = status.code();
                    rec.signal = status.signal();
                    rec.seconds = running.started.elapsed().as_secs_f64();
                    // A process that wrote past the bound and exited between
                    // two looks has still passed it.
                    if let Some(over) = self.output_over(&name) {
                        return Err(self.stop(running.index, over));
                    }
                    let rec = &self.commands[running.index];
                    let stdout = read_capped(&self.out.join(&rec.stdout), self.capture_cap);
                    let stderr = read_capped(&self.out.join(&rec.stderr), self.capture_cap);
                    let unreadable = |stream, why| Stopped::Unreadable { name: name.clone(), stream, why };
                    return match (stdout, stderr) {
                        (Ok(stdout), Ok(stderr)) => {
                            Ok(Finished { code: status.code(), signal: status.signal(), stdout, stderr })
                        }
                        (Err(why), _) => Err(self.stop(running.index, unreadable("standard output", why))),
                        (_, Err(why)) => Err(self.stop(running.index, unreadable("standard error", why))),
                    };
                }
                Ok(None) => {}
                Err(e) => {
                    kill_group(&mut running.child);
                    return Err(self.stop(running.index, Stopped::Spawn { name, reason: e.to_string() }));
                }
            }
            let why = if interrupted() {
                Some(Stopped::Interrupted { name: name.clone() })
            } else if Instant::now() >= self.deadline {
                Some(Stopped::Deadline { name: name.clone(), seconds: self.bounds.timeout_s })
            } else if running.started.elapsed() >= limit {
                Some(Stopped::RunTimeout { name: name.clone(), seconds: limit.as_secs() })
            } else {
                let rss = rss_mib(running.pid()).unwrap_or(0);
                if rss > self.bounds.max_rss_mib {
                    Some(Stopped::Rss { name: name.clone(), mib: rss, max: self.bounds.max_rss_mib })
                } else if polls.is_multiple_of(10) {
                    self.output_over(&name)
                } else {
                    None
                }
            };
            if let Some(why) = why {
                kill_group(&mut running.child);
                self.commands[running.index].seconds = running.started.elapsed().as_secs_f64();
                return Err(self.stop(running.index, why));
            }
            polls += 1;
            std::thread::sleep(poll_interval(polls));
        }
    }

    /// The output bound, when the bytes under --out have passed it.
    fn output_over(&self, name: &str) -> Option<Stopped> {
        let bytes = dir_bytes(&self.out);
        (bytes > self.bounds.max_output_mib << 20).then(|| Stopped::Output {
            name: name.to_string(),
            mib: bytes.div_ceil(1 << 20),
            max: self.bounds.max_output_mib,
        })
    }

    /// Runs a process to its end within the bounds.
    pub fn run(&mut self, name: &str, program: &Path, args: &[String]) -> Result<Finished, Stopped> {
        let running = self.spawn(name, program, args)?;
        self.wait(running, None)
    }

    /// Whether a started process has exited (without waiting).
    pub fn exited(&mut self, running: &mut Running) -> bool {
        !matches!(running.child.try_wait(), Ok(None))
    }

    /// The command's own bounds: checked between steps.
    pub fn check_bounds(&self, step: &str) -> Result<(), Stopped> {
        if interrupted() {
            return Err(Stopped::Interrupted { name: step.into() });
        }
        if Instant::now() >= self.deadline {
            return Err(Stopped::Deadline { name: step.into(), seconds: self.bounds.timeout_s });
        }
        Ok(())
    }

    pub fn bounds(&self) -> Bounds {
        self.bounds
    }
}

/// `args!["a", path, ...]`: an argument array of displayable things.
#[macro_export]
macro_rules! args {
    ($($a:expr),* $(,)?) => { [$(format!("{}", $a)),*] };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_is_logged_and_a_timeout_stops_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = Runner::new(dir.path(), Bounds { run_timeout_s: 1, ..Bounds::default() }).unwrap();
        let ok = r.run("echo", Path::new("/bin/sh"), &args!["-c", "echo hi; echo err >&2; exit 3"]).unwrap();
        assert_eq!(ok.code, Some(3));
        assert_eq!(ok.stdout, "hi\n");
        assert_eq!(ok.last_error_line(), "err");
        let stopped = r.run("sleep", Path::new("/bin/sh"), &args!["-c", "sleep 30"]).unwrap_err();
        assert!(matches!(stopped, Stopped::RunTimeout { .. }), "{stopped}");
        assert_eq!(r.commands.len(), 2);
        assert!(r.commands[1].stopped.is_some());
        let missing = r.run("missing", Path::new("/nonexistent/clink"), &[]).unwrap_err();
        assert!(matches!(missing, Stopped::Spawn { .. }));
    }

    #[test]
    fn a_given_environment_is_the_whole_environment() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = Runner::new(dir.path(), Bounds::default()).unwrap();
        // SAFETY: set before the child starts; no other thread of this test reads it.
        unsafe { std::env::set_var("CLINK_RUNNER_TEST_SECRET", "s3cret") };
        let env = [("ONLY".to_string(), std::ffi::OsString::from("this"))];
        let running = r.spawn_with_env("env", Path::new("/usr/bin/env"), &[], Some(&env)).unwrap();
        let done = r.wait(running, None).unwrap();
        assert_eq!(done.stdout, "ONLY=this\n", "nothing inherited");
        let inherited = r.run("inherit", Path::new("/usr/bin/env"), &[]).unwrap();
        assert!(inherited.stdout.contains("CLINK_RUNNER_TEST_SECRET=s3cret"), "the control: spawn inherits");
    }

    #[test]
    fn output_that_cannot_be_handed_back_whole_is_a_bound_not_a_result() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = Runner::new(dir.path(), Bounds::default()).unwrap().with_capture_cap(16);
        let fits = r.run("fits", Path::new("/bin/sh"), &args!["-c", "printf 0123456789abcdef"]).unwrap();
        assert_eq!(fits.stdout, "0123456789abcdef", "exactly the cap is handed back");
        let over = r.run("over", Path::new("/bin/sh"), &args!["-c", "printf 0123456789abcdefX"]).unwrap_err();
        assert!(matches!(&over, Stopped::Unreadable { stream: "standard output", .. }), "{over}");
        assert!(over.to_string().contains("capture cap of 16 bytes"), "{over}");
        let binary = r.run("binary", Path::new("/bin/sh"), &args!["-c", "printf '{\\377}'"]).unwrap_err();
        assert!(binary.to_string().contains("standard output is not UTF-8"), "{binary}");
        let err = r.run("err", Path::new("/bin/sh"), &args!["-c", "printf '\\377' >&2"]).unwrap_err();
        assert!(err.to_string().contains("standard error is not UTF-8"), "{err}");
        assert!(r.commands[1].stopped.is_some(), "the report says why the step stopped");
        assert_eq!(r.commands[1].exit_code, Some(0), "and still how the process ended");
    }
}
