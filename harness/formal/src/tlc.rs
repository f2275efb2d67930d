//! Running TLC and reading what it said.
//!
//! A run is judged by its exit status and its message together: 0 with
//! "No error has been found", 11 with "Deadlock reached", 12 with the named
//! invariant violated, 13 with "Temporal properties were violated". Every
//! other status (10, 75, 150, 151, 255, ...) is an error of the run, never a
//! verdict: a crash or a parse error never counts as a refuted mutant.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::FormalTools;

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
}

pub fn run(tools: &FormalTools, job: &TlcJob<'_>) -> Result<TlcRun, String> {
    let metadir =
        tempfile::Builder::new().prefix("clink-tlc-").tempdir().map_err(|e| format!("a TLC work directory: {e}"))?;
    // TLC unpacks its standard modules (TLC.tla, Naturals.tla, ...) into
    // java.io.tmpdir; two runs sharing one race on those files, and one parses
    // a module the other is still writing. Each run gets its own.
    let tmpdir = tempfile::Builder::new()
        .prefix("clink-tlc-tmp-")
        .tempdir()
        .map_err(|e| format!("a TLC temporary directory: {e}"))?;
    let library: Vec<String> = job.library.iter().map(|p| p.display().to_string()).collect();
    let mut cmd = Command::new(&tools.java);
    // The client compiler and the serial collector: these runs are short (a
    // trace, or a model of at most a few hundred thousand states), and the
    // server compiler's warm-up costs more than it wins there.
    cmd.current_dir(job.dir)
        .args(["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"])
        .arg(format!("-Djava.io.tmpdir={}", tmpdir.path().display()))
        .arg(format!("-DTLA-Library={}", library.join(":")))
        .arg("-cp")
        .arg(&tools.jar)
        .arg("tlc2.TLC")
        .args(["-workers", &job.workers.max(1).to_string(), "-cleanup", "-metadir"])
        .arg(metadir.path());
    if !job.check_deadlock {
        // TLC 2.15's -deadlock means: do not check for deadlock.
        cmd.arg("-deadlock");
    }
    cmd.args(["-config", job.config, job.module]);
    let started = Instant::now();
    let out = cmd.output().map_err(|e| format!("starting {}: {e}", tools.java.display()))?;
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

/// Parses `mutants/expected.txt`: `<name> <verdict> [<argument>] [# comment]`.
pub fn parse_expected(text: &str) -> Result<Vec<(String, Expectation)>, String> {
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
            _ => return Err(format!("mutants/expected.txt:{}: {line:?} is not <name> <verdict> [<argument>]", i + 1)),
        };
        out.push((words[0].to_string(), expectation));
    }
    Ok(out)
}

/// Whether an outcome is the expected verdict; `Err` says why not.
pub fn matches(expected: &Expectation, outcome: &Outcome) -> Result<(), String> {
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
    Err(match (expected, outcome) {
        (_, Outcome::Error { .. }) => {
            format!("expected {expected:?}, but TLC did not check: {outcome} (never a verdict)")
        }
        (Expectation::Accepted(guard), _) => {
            format!("expected accepted (guarded by {guard}), but TLC refuted it: {outcome}; the guard is gone")
        }
        (_, Outcome::NoError { .. }) => {
            format!("expected {expected:?}, but TLC found no error: the model no longer sees this defect")
        }
        _ => format!("expected {expected:?}, TLC reported {outcome}"),
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
}
