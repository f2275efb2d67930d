//! The runner's record of its own work: `ledger.json` in the state
//! directory (`clink-audit-ledger` version 1), and the operators'
//! acknowledgements under `acks/`.
//!
//! It owns the shape of those files and their atomic replacement: the
//! ledger is written whole to a temporary file, synced and renamed over the
//! old one, so a runner killed at any instant leaves either the previous
//! ledger or the new one, never a torn one. It never runs a step and never
//! judges one; the runner records here what a step concluded once the
//! step's output is in place.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use clink_basics::files::read_bounded;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::coverage::{OffsetRange, Partition};
use crate::outcome::{Outcome, Relationship};
use crate::procs::{ProcessId, Usage};

pub const LEDGER_FILE: &str = "ledger.json";
pub const LEDGER_FORMAT: &str = "clink-audit-ledger";
pub const ACKS_DIR: &str = "acks";
/// The largest ledger read (a ledger past it is refused, never truncated).
pub const MAX_LEDGER_BYTES: u64 = 256 << 20;
/// How many cycles the ledger keeps.
pub const KEPT_CYCLES: usize = 200;

#[derive(Debug, Error)]
pub enum LedgerError {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{}: not a {LEDGER_FORMAT} version 1 document: {why}", path.display())]
    Malformed { path: PathBuf, why: String },
    #[error(
        "{}: written for another configuration (fingerprint {found}, this one {expected}); \
         a state directory belongs to one configuration",
        path.display()
    )]
    OtherConfiguration { path: PathBuf, found: String, expected: String },
}

/// What the runner has learnt of the job's shape, from its first scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Shape {
    #[default]
    Unknown,
    RecordWise,
    Windowed,
}

/// The steps of one audit, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    Collect,
    Scope,
    Reference,
    Verify,
    Reconcile,
}

impl Step {
    pub const ALL: [Step; 5] = [Step::Collect, Step::Scope, Step::Reference, Step::Verify, Step::Reconcile];

    pub fn as_str(self) -> &'static str {
        match self {
            Step::Collect => "collect",
            Step::Scope => "scope",
            Step::Reference => "reference",
            Step::Verify => "verify",
            Step::Reconcile => "reconcile",
        }
    }
}

/// One step's result, recorded once its output was in place.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    pub step: Step,
    pub exit_code: Option<i32>,
    pub seconds: f64,
    /// What the step established, in a line.
    pub note: String,
    /// Set when the step ended the attempt: the outcome it decided.
    pub outcome: Option<Outcome>,
}

/// A finding of a discrepancy: the relationship, as the check named it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    pub relationship: Relationship,
    /// The checking command's own name for it (`reference-destination`, `replay.determinism`).
    pub named: String,
    pub summary: String,
    pub first: Vec<String>,
}

/// One attempt at an audit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    pub n: u32,
    pub cycle: u64,
    pub started_ms: u64,
    pub ended_ms: Option<u64>,
    pub outcome: Option<Outcome>,
    pub reason: Option<String>,
    /// The windowed base this attempt started from (`--since`).
    pub since: Option<u64>,
    pub steps: Vec<StepRecord>,
}

impl Attempt {
    pub fn done(&self, step: Step) -> Option<&StepRecord> {
        self.steps.iter().find(|s| s.step == step)
    }

    /// The outcome a recorded step decided, when one did.
    pub fn decided(&self) -> Option<(Outcome, String)> {
        self.steps.iter().find_map(|s| s.outcome.map(|o| (o, s.note.clone())))
    }
}

/// Everything the runner knows of one checkpoint's audit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    pub id: String,
    pub checkpoint: u64,
    /// When its COMPLETED marker was written (its modification time).
    pub completed_ms: u64,
    /// The latest finished attempt's outcome.
    pub outcome: Option<Outcome>,
    pub attempts: Vec<Attempt>,
    /// When it is next tried (unix seconds); none when it is not.
    pub next_due_s: Option<u64>,
    /// Its report is in `reports/` as the ledger records it.
    pub published: bool,
    /// Per topic and partition, the offsets its scope spans.
    pub ranges: Vec<(Partition, OffsetRange)>,
    pub findings: Vec<Finding>,
    /// Its evidence directory was deleted by retention.
    pub evidence_deleted: bool,
}

impl AuditRecord {
    pub fn open_attempt(&self) -> Option<&Attempt> {
        self.attempts.last().filter(|a| a.ended_ms.is_none())
    }

    pub fn attempted_in(&self, cycle: u64) -> bool {
        self.attempts.iter().any(|a| a.cycle == cycle)
    }
}

/// The child a step is waiting for, recorded before the wait.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Running {
    pub checkpoint: u64,
    pub attempt: u32,
    pub step: Step,
    pub child: ProcessId,
    pub started_ms: u64,
}

/// One cycle, for status and the page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CycleRecord {
    pub n: u64,
    pub started_ms: u64,
    pub ended_ms: Option<u64>,
    pub eligible: Vec<u64>,
    /// (checkpoint, outcome, per-step seconds) of each audit it attempted.
    pub audits: Vec<CycleAudit>,
    pub note: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CycleAudit {
    pub checkpoint: u64,
    pub outcome: Option<Outcome>,
    pub steps: Vec<(Step, f64)>,
}

/// The windowed chain: the reference states held, and where it broke.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chain {
    /// Checkpoints whose state `states/<checkpoint>.json` holds, ascending.
    pub held: Vec<u64>,
    /// The SHA-256 of each held state, as written.
    pub sha256: BTreeMap<u64, String>,
    /// Set when no held state was on an audit's lineage: which audit, and why.
    pub broken: Option<String>,
}

/// The runner process, as it last recorded itself.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunnerRecord {
    pub pid: u32,
    pub started_ms: u64,
    pub last_cycle_end_ms: Option<u64>,
    /// Why the runner stopped, when it did (a signal, the disk budget).
    pub stopped: Option<String>,
    /// Set while the disk budget keeps the runner from starting audits.
    pub budget_blocked: Option<String>,
    pub usage: Usage,
}

/// The whole ledger.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ledger {
    pub format: String,
    pub version: u64,
    pub fingerprint: String,
    pub shape: Shape,
    /// The highest checkpoint selection has considered.
    pub cursor: Option<u64>,
    /// Every completed checkpoint seen at the last look, with its completion time.
    pub observed: BTreeMap<u64, u64>,
    pub audits: BTreeMap<u64, AuditRecord>,
    pub running: Option<Running>,
    pub chain: Chain,
    pub cycles: Vec<CycleRecord>,
    pub runner: RunnerRecord,
}

impl Ledger {
    pub fn new(fingerprint: &str) -> Ledger {
        Ledger {
            format: LEDGER_FORMAT.into(),
            version: 1,
            fingerprint: fingerprint.into(),
            shape: Shape::Unknown,
            cursor: None,
            observed: BTreeMap::new(),
            audits: BTreeMap::new(),
            running: None,
            chain: Chain::default(),
            cycles: Vec::new(),
            runner: RunnerRecord::default(),
        }
    }

    /// The ledger of `state_dir`, or a new one when there is none yet.
    pub fn load(state_dir: &Path, fingerprint: &str) -> Result<Ledger, LedgerError> {
        let path = state_dir.join(LEDGER_FILE);
        if !path.exists() {
            return Ok(Ledger::new(fingerprint));
        }
        let ledger = Ledger::read(state_dir)?;
        if ledger.fingerprint != fingerprint {
            return Err(LedgerError::OtherConfiguration {
                path,
                found: ledger.fingerprint,
                expected: fingerprint.into(),
            });
        }
        Ok(ledger)
    }

    /// The ledger of `state_dir`, which must exist (status reads it alone).
    pub fn read(state_dir: &Path) -> Result<Ledger, LedgerError> {
        let path = state_dir.join(LEDGER_FILE);
        let bytes =
            read_bounded(&path, MAX_LEDGER_BYTES).map_err(|source| LedgerError::Io { path: path.clone(), source })?;
        let ledger: Ledger = serde_json::from_slice(&bytes)
            .map_err(|e| LedgerError::Malformed { path: path.clone(), why: e.to_string() })?;
        if ledger.format != LEDGER_FORMAT || ledger.version != 1 {
            let why = format!("format {:?} version {}", ledger.format, ledger.version);
            return Err(LedgerError::Malformed { path, why });
        }
        Ok(ledger)
    }

    /// Replaces the ledger atomically.
    pub fn save(&self, state_dir: &Path) -> Result<(), LedgerError> {
        let bytes = serde_json::to_vec_pretty(self).unwrap_or_default();
        write_atomically(&state_dir.join(LEDGER_FILE), &bytes)
    }

    pub fn push_cycle(&mut self, cycle: CycleRecord) {
        self.cycles.push(cycle);
        let excess = self.cycles.len().saturating_sub(KEPT_CYCLES);
        self.cycles.drain(..excess);
    }
}

/// Writes `bytes` to `path` through a synced temporary file and a rename.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), LedgerError> {
    let io = |source| LedgerError::Io { path: path.to_path_buf(), source };
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
        std::process::id()
    ));
    let mut file = std::fs::File::create(&tmp).map_err(io)?;
    file.write_all(bytes).and_then(|_| file.sync_all()).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)?;
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io)
}

/// An operator's acknowledgement of one audit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ack {
    pub audit: String,
    pub note: String,
    pub at_ms: u64,
    pub by: String,
}

/// Writes an acknowledgement as its own file (no lock is needed: the runner
/// never writes under `acks/`).
pub fn acknowledge(state_dir: &Path, ack: &Ack) -> Result<PathBuf, LedgerError> {
    let dir = state_dir.join(ACKS_DIR);
    std::fs::create_dir_all(&dir).map_err(|source| LedgerError::Io { path: dir.clone(), source })?;
    let path = dir.join(format!("{}-{}-{}.json", ack.audit, ack.at_ms, std::process::id()));
    write_atomically(&path, &serde_json::to_vec_pretty(ack).unwrap_or_default())?;
    Ok(path)
}

/// Every acknowledgement, by audit id; a file that does not read is reported, not skipped.
pub fn acknowledgements(state_dir: &Path) -> Result<BTreeMap<String, Vec<Ack>>, LedgerError> {
    let dir = state_dir.join(ACKS_DIR);
    let mut out: BTreeMap<String, Vec<Ack>> = BTreeMap::new();
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(source) => return Err(LedgerError::Io { path: dir, source }),
    };
    let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    paths.sort();
    for path in paths {
        if path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with('.')) {
            continue;
        }
        let bytes = read_bounded(&path, 1 << 20).map_err(|source| LedgerError::Io { path: path.clone(), source })?;
        let ack: Ack = serde_json::from_slice(&bytes)
            .map_err(|e| LedgerError::Malformed { path: path.clone(), why: e.to_string() })?;
        out.entry(ack.audit.clone()).or_default().push(ack);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ledger_round_trips_and_belongs_to_one_configuration() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = Ledger::new("fp1");
        l.cursor = Some(4);
        l.observed.insert(4, 1000);
        l.save(dir.path()).unwrap();
        assert_eq!(Ledger::load(dir.path(), "fp1").unwrap(), l);
        let other = Ledger::load(dir.path(), "fp2").unwrap_err();
        assert!(other.to_string().contains("another configuration"), "{other}");
        std::fs::write(dir.path().join(LEDGER_FILE), b"{\"format\":").unwrap();
        assert!(matches!(Ledger::load(dir.path(), "fp1"), Err(LedgerError::Malformed { .. })));
    }

    #[test]
    fn acknowledgements_are_files_and_a_bad_one_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let ack = Ack { audit: "a1".into(), note: "known".into(), at_ms: 5, by: "op".into() };
        acknowledge(dir.path(), &ack).unwrap();
        assert_eq!(acknowledgements(dir.path()).unwrap()["a1"], vec![ack]);
        std::fs::write(dir.path().join(ACKS_DIR).join("zz.json"), b"no").unwrap();
        assert!(acknowledgements(dir.path()).is_err());
    }
}
