//! Running TLC and reading what it said.
//!
//! A run is judged by its exit status and its message together: 0 with
//! "No error has been found", 11 with "Deadlock reached", 12 with the named
//! invariant violated, 13 with "Temporal properties were violated". Every
//! other status (10, 75, 150, 151, 255, ...) is an error of the run, never a
//! verdict: a crash or a parse error never counts as a refuted mutant.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use thiserror::Error;

use super::FormalTools;

/// How long one TLC run may take unless its job says otherwise
/// (`CLINK_TLC_TIMEOUT_SECS` overrides it for the suite and trace
/// validation): ten minutes, far above the slowest model of the suite and a
/// trace of 10,000 events (seconds each), so only a run that hangs meets it.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// The bound on one TLC run: `CLINK_TLC_TIMEOUT_SECS` (whole seconds, at
/// least 1), else [`DEFAULT_TIMEOUT`].
pub fn timeout() -> Duration {
    std::env::var("CLINK_TLC_TIMEOUT_SECS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(DEFAULT_TIMEOUT, |s| Duration::from_secs(s.max(1)))
}

/// What one TLC run produced.
#[derive(Debug, Clone)]
pub struct TlcRun {
    pub exit: Option<i32>,
    pub output: String,
    pub elapsed: Duration,
}

/// How to run TLC on one module.
#[derive(Debug, Clone)]
pub struct TlcJob<'a> {
    /// The working directory, holding the module and its configuration.
    pub dir: &'a Path,
    pub module: &'a str,
    pub config: &'a str,
    /// Directories searched for modules after the working directory.
    pub library: Vec<PathBuf>,
    pub workers: u32,
    /// Check for deadlock (models and mutants); trace validation does not.
    pub check_deadlock: bool,
    /// How long the run may take: past it TLC is killed and the run is
    /// [`TlcError::TimedOut`], never a verdict.
    pub timeout: Duration,
}

/// Why TLC did not run to its end (never a verdict).
#[derive(Debug, Error)]
pub enum TlcError {
    #[error("a TLC work directory: {0}")]
    WorkDir(std::io::Error),
    #[error("a TLC temporary directory: {0}")]
    TempDir(std::io::Error),
    #[error("starting {}: {error}", java.display())]
    Start { java: PathBuf, error: std::io::Error },
    #[error("waiting for TLC on {module} ({config}) in {}: {error}", dir.display())]
    Wait { module: String, config: String, dir: PathBuf, error: std::io::Error },
    /// The run outlived its job's timeout and was killed.
    #[error("TLC on {module} ({config}) in {} did not finish within {}s: killed", dir.display(), after.as_secs_f64())]
    TimedOut { module: String, config: String, dir: PathBuf, after: Duration },
}

/// How a started child ended.
#[derive(Debug)]
pub enum Waited {
    Finished(Output),
    /// It outlived the limit and was killed (and reaped).
    Killed,
}

/// Waits for a started expression for at most `limit`, polling; kills it
/// (and reaps it) when the limit passes. It never returns with the child
/// still running.
pub fn wait_within(handle: duct::Handle, limit: Duration) -> std::io::Result<Waited> {
    let deadline = Instant::now() + limit;
    loop {
        let finished = match handle.try_wait() {
            Ok(done) => done.is_some(),
            Err(e) => {
                let _ = handle.kill();
                return Err(e);
            }
        };
        if finished {
            return handle.into_output().map(Waited::Finished);
        }
        let now = Instant::now();
        if now >= deadline {
            handle.kill()?;
            return Ok(Waited::Killed);
        }
        std::thread::sleep((deadline - now).min(Duration::from_millis(20)));
    }
}

pub fn run(tools: &FormalTools, job: &TlcJob<'_>) -> Result<TlcRun, TlcError> {
    let metadir = tempfile::Builder::new().prefix("clink-tlc-").tempdir().map_err(TlcError::WorkDir)?;
    // TLC unpacks its standard modules (TLC.tla, Naturals.tla, ...) into
    // java.io.tmpdir; two runs sharing one race on those files, and one parses
    // a module the other is still writing. Each run gets its own.
    let tmpdir = tempfile::Builder::new().prefix("clink-tlc-tmp-").tempdir().map_err(TlcError::TempDir)?;
    let library: Vec<String> = job.library.iter().map(|p| p.display().to_string()).collect();
    // The client compiler and the serial collector: these runs are short (a
    // trace, or a model of at most a few hundred thousand states), and the
    // server compiler's warm-up costs more than it wins there.
    let mut args: Vec<std::ffi::OsString> = vec![
        "-XX:+UseSerialGC".into(),
        "-XX:TieredStopAtLevel=1".into(),
        format!("-Djava.io.tmpdir={}", tmpdir.path().display()).into(),
        format!("-DTLA-Library={}", library.join(":")).into(),
        "-cp".into(),
        tools.jar.clone().into(),
        "tlc2.TLC".into(),
        "-workers".into(),
        job.workers.max(1).to_string().into(),
        "-cleanup".into(),
        "-metadir".into(),
        metadir.path().into(),
    ];
    if !job.check_deadlock {
        // TLC 2.15's -deadlock means: do not check for deadlock.
        args.push("-deadlock".into());
    }
    args.extend(["-config".into(), job.config.into(), job.module.into()]);
    let started = Instant::now();
    let handle = duct::cmd(&tools.java, args)
        .dir(job.dir)
        .stdin_null()
        .stdout_capture()
        .stderr_capture()
        .unchecked()
        .start()
        .map_err(|error| TlcError::Start { java: tools.java.clone(), error })?;
    let named = || (job.module.to_string(), job.config.to_string(), job.dir.to_path_buf());
    let out = match wait_within(handle, job.timeout) {
        Ok(Waited::Finished(out)) => out,
        Ok(Waited::Killed) => {
            let (module, config, dir) = named();
            return Err(TlcError::TimedOut { module, config, dir, after: job.timeout });
        }
        Err(error) => {
            let (module, config, dir) = named();
            return Err(TlcError::Wait { module, config, dir, error });
        }
    };
    let mut output = String::from_utf8_lossy(&out.stdout).into_owned();
    output.push_str(&String::from_utf8_lossy(&out.stderr));
    Ok(TlcRun { exit: out.status.code(), output, elapsed: started.elapsed() })
}

/// What a model check concluded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    NoError {
        distinct_states: Option<u64>,
        depth: Option<u64>,
    },
    InvariantViolated(String),
    Deadlock,
    LivenessViolated,
    /// Not a verdict: TLC failed to check.
    Error {
        exit: Option<i32>,
        message: String,
    },
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::NoError { distinct_states, depth } => write!(
                f,
                "no error ({} distinct states, depth {})",
                distinct_states.map_or("?".into(), |n| n.to_string()),
                depth.map_or("?".into(), |n| n.to_string())
            ),
            Outcome::InvariantViolated(i) => write!(f, "invariant {i} violated"),
            Outcome::Deadlock => write!(f, "deadlock"),
            Outcome::LivenessViolated => write!(f, "temporal properties violated"),
            Outcome::Error { exit, message } => write!(f, "TLC error (exit {exit:?}): {message}"),
        }
    }
}

/// The number before `suffix` on the last line that has it (TLC prints
/// progress lines before its final count).
fn number_before(text: &str, suffix: &str) -> Option<u64> {
    text.lines().rev().find_map(|l| {
        let l = l.trim();
        let head = l.strip_suffix(suffix).or_else(|| l.find(suffix).map(|i| &l[..i]))?;
        head.split_whitespace().last()?.replace(',', "").parse().ok()
    })
}

/// Reads a model run: exit status and message must agree.
pub fn judge(run: &TlcRun) -> Outcome {
    let out = &run.output;
    let first_error = || {
        out.lines()
            .find(|l| l.contains("Error") || l.contains("error"))
            .unwrap_or_else(|| out.lines().last().unwrap_or(""))
            .trim()
            .to_string()
    };
    match run.exit {
        Some(0) if out.contains("Model checking completed. No error has been found.") => Outcome::NoError {
            distinct_states: number_before(out, " distinct states found"),
            depth: out.lines().find_map(|l| {
                l.trim()
                    .strip_prefix("The depth of the complete state graph search is ")?
                    .trim_end_matches('.')
                    .parse()
                    .ok()
            }),
        },
        Some(12) => {
            let invariant = out.lines().find_map(|l| {
                l.trim().strip_prefix("Error: Invariant ")?.strip_suffix(" is violated.").map(str::to_string)
            });
            match invariant {
                Some(i) => Outcome::InvariantViolated(i),
                None => Outcome::Error { exit: run.exit, message: "exit 12 without a named invariant".into() },
            }
        }
        Some(11) if out.contains("Error: Deadlock reached.") => Outcome::Deadlock,
        Some(13) if out.contains("Temporal properties were violated") => Outcome::LivenessViolated,
        exit => Outcome::Error { exit, message: first_error() },
    }
}

/// What a mutant must come to, from `mutants/expected.txt`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expectation {
    Violated(String),
    Deadlock,
    Liveness(String),
    /// Not refuted: another rule (named) guards the defect.
    Accepted(String),
}

/// A line of `mutants/expected.txt` that is not `<name> <verdict> [<argument>]`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("mutants/expected.txt:{line}: {text:?} is not <name> <verdict> [<argument>]")]
pub struct ExpectedLineError {
    /// From 1.
    pub line: usize,
    /// The line without its comment.
    pub text: String,
}

/// Parses `mutants/expected.txt`: `<name> <verdict> [<argument>] [# comment]`.
pub fn parse_expected(text: &str) -> Result<Vec<(String, Expectation)>, ExpectedLineError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let expectation = match words.as_slice() {
            [_, "violated", inv] => Expectation::Violated(inv.to_string()),
            [_, "deadlock"] => Expectation::Deadlock,
            [_, "liveness", prop] => Expectation::Liveness(prop.to_string()),
            [_, "accepted", guard] => Expectation::Accepted(guard.to_string()),
            _ => return Err(ExpectedLineError { line: i + 1, text: line.to_string() }),
        };
        out.push((words[0].to_string(), expectation));
    }
    Ok(out)
}

/// How an outcome missed its expected verdict.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Mismatch {
    /// TLC failed to check: never a verdict, whatever was expected.
    #[error("expected {expected:?}, but TLC did not check: {outcome} (never a verdict)")]
    NotChecked { expected: Expectation, outcome: Outcome },
    /// An accepted mutant was refuted: its guard no longer holds it.
    #[error("expected accepted (guarded by {guard}), but TLC refuted it: {outcome}; the guard is gone")]
    GuardGone { guard: String, outcome: Outcome },
    /// A refutation was expected and TLC found no error.
    #[error("expected {expected:?}, but TLC found no error: the model no longer sees this defect")]
    NotRefuted { expected: Expectation },
    #[error("expected {expected:?}, TLC reported {outcome}")]
    Other { expected: Expectation, outcome: Outcome },
}

/// Whether an outcome is the expected verdict; `Err` says why not.
pub fn matches(expected: &Expectation, outcome: &Outcome) -> Result<(), Mismatch> {
    let ok = match (expected, outcome) {
        (Expectation::Violated(want), Outcome::InvariantViolated(got)) => want == got,
        (Expectation::Deadlock, Outcome::Deadlock) => true,
        (Expectation::Liveness(_), Outcome::LivenessViolated) => true,
        (Expectation::Accepted(_), Outcome::NoError { .. }) => true,
        _ => false,
    };
    if ok {
        return Ok(());
    }
    let (expected, outcome) = (expected.clone(), outcome.clone());
    Err(match (expected, outcome) {
        (expected, outcome @ Outcome::Error { .. }) => Mismatch::NotChecked { expected, outcome },
        (Expectation::Accepted(guard), outcome) => Mismatch::GuardGone { guard, outcome },
        (expected, Outcome::NoError { .. }) => Mismatch::NotRefuted { expected },
        (expected, outcome) => Mismatch::Other { expected, outcome },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(exit: i32, output: &str) -> TlcRun {
        TlcRun { exit: Some(exit), output: output.into(), elapsed: Duration::ZERO }
    }

    #[test]
    fn status_and_message_must_agree() {
        let ok = run(0, "Progress(3): 10 states generated, 7 distinct states found, 2 states left on queue.\n40 states generated, 1234 distinct states found, 0 states left on queue.\nThe depth of the complete state graph search is 17.\nModel checking completed. No error has been found.\n");
        assert_eq!(judge(&ok), Outcome::NoError { distinct_states: Some(1234), depth: Some(17) });
        assert_eq!(
            judge(&run(12, "Error: Invariant NoLoss is violated.\n")),
            Outcome::InvariantViolated("NoLoss".into())
        );
        assert!(matches!(judge(&run(12, "something else")), Outcome::Error { .. }));
        assert!(matches!(judge(&run(0, "crashed")), Outcome::Error { .. }));
        assert!(matches!(judge(&run(150, "Parse Error")), Outcome::Error { .. }));
        assert_eq!(judge(&run(11, "Error: Deadlock reached.")), Outcome::Deadlock);
    }

    #[test]
    fn a_crash_is_never_a_killed_mutant_and_the_judgement_holds_both_ways() {
        let crash = Outcome::Error { exit: Some(255), message: "File not found".into() };
        assert!(matches(&Expectation::Violated("NoLoss".into()), &crash).is_err());
        assert!(matches(&Expectation::Accepted("G".into()), &crash).is_err());
        let none = Outcome::NoError { distinct_states: None, depth: None };
        assert!(matches(&Expectation::Violated("NoLoss".into()), &none).is_err());
        assert!(matches(&Expectation::Accepted("G".into()), &Outcome::InvariantViolated("NoLoss".into())).is_err());
        assert!(matches(&Expectation::Violated("NoLoss".into()), &Outcome::InvariantViolated("NoDuplicate".into()))
            .is_err());
        assert!(matches(&Expectation::Violated("NoLoss".into()), &Outcome::InvariantViolated("NoLoss".into())).is_ok());
    }

    #[test]
    fn expected_lines_parse() {
        let parsed = parse_expected("# c\nm1 violated NoLoss # exit 12\nm2 accepted Guard\nm3 deadlock\n").unwrap();
        assert_eq!(parsed.len(), 3);
        assert!(parse_expected("m1 refuted").is_err());
    }

    #[test]
    fn a_child_past_its_deadline_is_killed_and_reaped() {
        let handle = duct::cmd("sleep", ["5"]).stdout_capture().stderr_capture().unchecked().start().unwrap();
        let pid = handle.pids()[0];
        let started = Instant::now();
        assert!(matches!(wait_within(handle, Duration::from_millis(200)).unwrap(), Waited::Killed));
        assert!(started.elapsed() < Duration::from_secs(4), "killed at the deadline, not waited for");
        if cfg!(target_os = "linux") {
            assert!(!Path::new(&format!("/proc/{pid}")).exists(), "sleep ({pid}) is still there");
        }
        let quick = duct::cmd("sh", ["-c", "echo out; exit 3"]).stdout_capture().unchecked().start().unwrap();
        match wait_within(quick, Duration::from_secs(60)).unwrap() {
            Waited::Finished(out) => assert_eq!((out.status.code(), out.stdout.as_slice()), (Some(3), &b"out\n"[..])),
            Waited::Killed => panic!("a quick child was killed"),
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_tlc_run_that_hangs_times_out_naming_its_module_and_leaves_nothing_running() {
        use std::os::unix::fs::PermissionsExt;
        let scratch = tempfile::tempdir().unwrap();
        let java = scratch.path().join("java");
        std::fs::write(&java, "#!/bin/sh\necho $$ > java.pid\nexec sleep 5\n").unwrap();
        std::fs::set_permissions(&java, std::fs::Permissions::from_mode(0o755)).unwrap();
        let tools = FormalTools { formal_dir: scratch.path().into(), java, jar: scratch.path().join("tla2tools.jar") };
        let job = TlcJob {
            dir: scratch.path(),
            module: "Hangs.tla",
            config: "Hangs.cfg",
            library: Vec::new(),
            workers: 1,
            check_deadlock: true,
            timeout: Duration::from_millis(300),
        };
        let result = loop {
            match super::run(&tools, &job) {
                // Another test thread forking while the script was open for
                // writing: the kernel says text file busy; try again.
                Err(TlcError::Start { error, .. }) if error.raw_os_error() == Some(26) => continue,
                other => break other,
            }
        };
        match result {
            Err(e @ TlcError::TimedOut { .. }) => {
                let TlcError::TimedOut { module, config, after, .. } = &e else { unreachable!() };
                assert_eq!((module.as_str(), config.as_str(), *after), ("Hangs.tla", "Hangs.cfg", job.timeout));
                assert!(
                    e.to_string().contains("Hangs.tla (Hangs.cfg)") && e.to_string().contains("within 0.3s"),
                    "{e}"
                );
            }
            other => panic!("not timed out: {other:?}"),
        }
        if let Ok(pid) = std::fs::read_to_string(scratch.path().join("java.pid")) {
            if cfg!(target_os = "linux") {
                assert!(!Path::new(&format!("/proc/{}", pid.trim())).exists(), "the fake java ({pid}) still runs");
            }
        }
    }
}
