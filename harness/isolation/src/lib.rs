//! clink-isolation: loopback-only network isolation, and THE proof that it
//! holds, for everything that must run with the network denied
//! (`clink isolation prove|run`, gates/network-isolation and the incident
//! gate's isolated steps, `clink upgrade record|check`, and later the A/B
//! replay of a candidate build and the audit runner's verification).
//!
//! A proof rests on positive evidence, never on the absence of an answer:
//! a control endpoint (a TCP listener on 127.0.0.1, a port the system
//! picks) must answer the probe run without isolation, and the same probe
//! run under the mechanism must leave its own report (carrying the proof's
//! nonce) saying that the connection was refused, that `lo` is its only
//! interface, and that loopback works. A wrapper that runs nothing, a probe
//! that crashes or prints nothing, or a report that is not this probe's is
//! [`Verdict::Inconclusive`]; only [`Verdict::Enforced`] lets a command run.
//!
//! The mechanism is `unshare -rn` (a new user and network namespace). Where
//! it cannot run but the environment's only interface is already `lo` (a
//! container started with `--network none`), the environment is the
//! isolation and the probe checks that instead.
//!
//! This crate never attempts a connection outside 127.0.0.0/8, never reads
//! what the command it isolates prints, and depends on nothing of ours but
//! clink-basics.
//!
//! ```no_run
//! use clink_isolation::prove::{isolate, Probe};
//! let probe = Probe::this_binary(&["isolation", "probe"]).unwrap();
//! let outcome = isolate(&probe, None);
//! println!("{}", outcome.proof().line());
//! ```

pub mod claim;
pub mod control;
pub mod probe;
pub mod probe_command;
pub mod prove;

use clink_basics::exit::Exit;
use serde::Serialize;
use serde_json::json;

pub use probe::{ProbeReport, Reach};

/// What a proof concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Positive evidence on both sides: the only state that lets a command run.
    Enforced,
    /// The network was reachable under the mechanism.
    NotEnforced,
    /// The mechanism is missing or cannot run here.
    Unavailable,
    /// Nothing could be decided: no report, a crash, a control endpoint
    /// that never answered even without isolation.
    Inconclusive,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Enforced => "enforced",
            Verdict::NotEnforced => "not-enforced",
            Verdict::Unavailable => "unavailable",
            Verdict::Inconclusive => "inconclusive",
        }
    }

    /// 0 enforced; 1 not enforced; 3 unavailable or inconclusive.
    pub fn exit(self) -> Exit {
        match self {
            Verdict::Enforced => Exit::Passed,
            Verdict::NotEnforced => Exit::Failed,
            Verdict::Unavailable | Verdict::Inconclusive => Exit::NotEstablished,
        }
    }
}

/// How the isolation is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Mechanism {
    /// `unshare -rn`: a new user and network namespace, `lo` brought up inside.
    #[serde(rename = "unshare -rn")]
    UnshareRn,
    /// The environment itself has only `lo` (no outside to compare with).
    #[serde(rename = "environment")]
    Environment,
}

impl Mechanism {
    pub fn as_str(self) -> &'static str {
        match self {
            Mechanism::UnshareRn => "unshare -rn",
            Mechanism::Environment => "environment",
        }
    }

    /// The probe's `--mechanism` value.
    pub fn as_arg(self) -> &'static str {
        match self {
            Mechanism::UnshareRn => "unshare-rn",
            Mechanism::Environment => "environment",
        }
    }

    pub fn from_arg(text: &str) -> Option<Mechanism> {
        match text {
            "unshare-rn" => Some(Mechanism::UnshareRn),
            "environment" => Some(Mechanism::Environment),
            _ => None,
        }
    }
}

pub const PROOF_FORMAT: &str = "clink-isolation-proof";
pub const PROOF_VERSION: u64 = 1;

/// A proof: the verdict, why, and the evidence it rests on.
#[derive(Debug, Clone, Serialize)]
pub struct Proof {
    pub verdict: Verdict,
    pub mechanism: Option<Mechanism>,
    pub reason: String,
    /// The control endpoint, `127.0.0.1:<port>`.
    pub control: Option<String>,
    /// The probe's report without isolation.
    pub outside: Option<ProbeReport>,
    /// The probe's report under the mechanism.
    pub inside: Option<ProbeReport>,
}

impl Proof {
    pub fn new(verdict: Verdict, reason: impl Into<String>) -> Proof {
        Proof { verdict, mechanism: None, reason: reason.into(), control: None, outside: None, inside: None }
    }

    pub fn enforced(&self) -> bool {
        self.verdict == Verdict::Enforced
    }

    /// The proof as one JSON document (`clink-isolation-proof` version 1).
    pub fn to_json(&self) -> serde_json::Value {
        let exit = self.verdict.exit();
        json!({
            "format": PROOF_FORMAT,
            "version": PROOF_VERSION,
            "result": self.verdict.as_str(),
            "exit_code": exit.code(),
            "mechanism": self.mechanism.map(Mechanism::as_str),
            "reason": self.reason,
            "control": self.control,
            "outside": self.outside,
            "inside": self.inside,
        })
    }

    /// One line a person reads.
    pub fn line(&self) -> String {
        format!("{}: {}", self.verdict.as_str(), self.reason)
    }

    /// The proof as a person reads it: the verdict, then the evidence.
    pub fn text(&self) -> String {
        let mut t = format!("clink isolation: {}\n  reason     {}\n", self.verdict.as_str(), self.reason);
        if let Some(m) = self.mechanism {
            t.push_str(&format!("  mechanism  {}\n", m.as_str()));
        }
        if let Some(c) = &self.control {
            t.push_str(&format!("  control    {c} (a TCP listener outside, its port chosen by the system)\n"));
        }
        for (side, report) in [("outside", &self.outside), ("inside", &self.inside)] {
            if let Some(r) = report {
                t.push_str(&format!(
                    "  {side:<10} {}; interfaces {}; loopback {}\n",
                    r.control.describe(),
                    if r.interfaces.is_empty() { "unread".to_string() } else { r.interfaces.join(", ") },
                    if r.loopback.ok { "works" } else { "does not work" }
                ));
            }
        }
        t
    }
}
