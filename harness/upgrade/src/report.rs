//! Checks, their statuses, the result and the report (`clink-upgrade-report`
//! version 1, JSON and text), written under `--out` whatever happened.
//!
//! The result is failed (exit 1) when any check that is not informational
//! failed, whatever else could not run; passed (exit 0) only when every
//! required check passed; otherwise not established (exit 3). A check that
//! could not run or could not decide is unavailable, never a success.

use std::path::Path;

use clink_basics::exit::Exit;
use serde::Serialize;
use serde_json::Value as Json;

use crate::runner::CommandRecord;

pub const FORMAT: &str = "clink-upgrade-report";
pub const VERSION: u64 = 1;

pub use clink_basics::status::Status;

/// The `isolation` check's status: only enforced isolation passes; a
/// network reachable under the mechanism fails; the rest is unavailable.
pub fn isolation_status(proof: &clink_isolation::Proof) -> Status {
    use clink_isolation::Verdict;
    match proof.verdict {
        Verdict::Enforced => Status::Passed,
        Verdict::NotEnforced => Status::Failed,
        Verdict::Unavailable | Verdict::Inconclusive => Status::Unavailable,
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub required: bool,
    pub status: Status,
    pub reason: String,
}

/// The checks of `upgrade check`, in report order, with whether each is required.
pub const CHECK_TABLE: &[(&str, bool)] = &[
    ("evidence.integrity", true),
    ("isolation", true),
    ("builds.identity", true),
    ("builds.capabilities", true),
    ("evidence.readable", true),
    ("schema.candidate", true),
    ("restore.baseline", true),
    ("restore.candidate", true),
    ("recovery.baseline", true),
    ("recovery.candidate", true),
    ("behaviour.output", true),
    ("behaviour.state", true),
    ("reference.candidate", true),
    ("evidence.unchanged", true),
    ("reference.baseline", false),
    ("state.raw", false),
    ("replay.determinism", false),
];

/// The checks of `upgrade record`.
pub const RECORD_TABLE: &[(&str, bool)] = &[
    ("isolation", true),
    ("builds.capabilities", true),
    ("record.savepoint", true),
    ("record.output", true),
    ("record.state", true),
];

/// Checks filled in as they are decided; the rest stay unavailable with a reason.
#[derive(Debug, Clone)]
pub struct Checks {
    pub checks: Vec<Check>,
}

impl Checks {
    pub fn new(table: &[(&'static str, bool)]) -> Checks {
        Checks {
            checks: table
                .iter()
                .map(|(name, required)| Check {
                    name,
                    required: *required,
                    status: Status::Unavailable,
                    reason: "not reached".into(),
                })
                .collect(),
        }
    }

    pub fn set(&mut self, name: &str, status: Status, reason: impl Into<String>) {
        if let Some(c) = self.checks.iter_mut().find(|c| c.name == name) {
            c.status = status;
            c.reason = reason.into();
        }
    }

    pub fn pass_or_fail(&mut self, name: &str, ok: bool, reason: impl Into<String>) {
        self.set(name, if ok { Status::Passed } else { Status::Failed }, reason);
    }

    pub fn status(&self, name: &str) -> Option<Status> {
        self.checks.iter().find(|c| c.name == name).map(|c| c.status)
    }

    /// Every check not decided yet becomes unavailable with this reason.
    pub fn undecided_unavailable(&mut self, reason: &str) {
        for c in &mut self.checks {
            if c.status == Status::Unavailable && c.reason == "not reached" {
                c.reason = reason.to_string();
            }
        }
    }

    pub fn result(&self) -> Exit {
        if self.checks.iter().any(|c| c.required && c.status == Status::Failed) {
            Exit::Failed
        } else if self.checks.iter().filter(|c| c.required).all(|c| c.status == Status::Passed) {
            Exit::Passed
        } else {
            Exit::NotEstablished
        }
    }
}

fn result_word(exit: Exit) -> &'static str {
    match exit {
        Exit::Passed => "passed",
        Exit::Failed => "failed",
        Exit::NotEstablished => "not established",
        Exit::Refused => "refused",
    }
}

/// Writes report.json and report.txt under `out` and returns the text.
pub fn write(
    out: &Path,
    command: &str,
    checks: &Checks,
    facts: Json,
    commands: &[CommandRecord],
    seconds: f64,
) -> Result<String, String> {
    let exit = checks.result();
    let doc = serde_json::json!({
        "format": FORMAT,
        "version": VERSION,
        "command": command,
        "result": exit.as_str(),
        "exit_code": exit.code(),
        "facts": facts,
        "checks": checks.checks,
        "commands": commands,
        "seconds": (seconds * 10.0).round() / 10.0,
    });
    let mut text = format!("clink upgrade {command}: {}\n", result_word(exit));
    for c in &checks.checks {
        let tag = if c.required { "" } else { " (informational)" };
        text.push_str(&format!("  {:<12} {}{tag}: {}\n", c.status.as_str(), c.name, c.reason));
    }
    text.push_str(&format!("  {} commands, logs under {}/logs\n", commands.len(), out.display()));
    let json = serde_json::to_vec_pretty(&doc).map_err(|e| e.to_string())?;
    std::fs::write(out.join("report.json"), json).map_err(|e| format!("report.json: {e}"))?;
    std::fs::write(out.join("report.txt"), &text).map_err(|e| format!("report.txt: {e}"))?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_result_follows_the_statuses() {
        let mut c = Checks::new(CHECK_TABLE);
        assert_eq!(c.result(), Exit::NotEstablished, "nothing decided is not a success");
        for (name, _) in CHECK_TABLE {
            c.set(name, Status::Passed, "");
        }
        c.set("replay.determinism", Status::Unsupported, "");
        assert_eq!(c.result(), Exit::Passed, "an informational check does not hold it back");
        c.set("state.raw", Status::Failed, "");
        assert_eq!(c.result(), Exit::Passed);
        c.set("isolation", Status::Unavailable, "");
        assert_eq!(c.result(), Exit::NotEstablished);
        c.set("behaviour.output", Status::Failed, "");
        assert_eq!(c.result(), Exit::Failed, "a failure wins over what could not run");
    }
}
