//! The runner's record of its own work: `ledger.json` in the state
//! directory (`clink-audit-ledger` version 3; versions 1 and 2 are read and
//! written back as 3), and the operators' acknowledgements under `acks/`
//! (`clink-audit-ack` version 2; a version 1 acknowledgement, with no
//! format, is read and silences nothing).
//!
//! It owns the shape of those files and their atomic replacement
//! ([`crate::durable`]): a runner killed at any instant leaves either the
//! previous ledger or the new one, never a torn one. It never runs a step
//! and never judges one; the runner records here what a step concluded once
//! the step's output is in place.
//!
//! Rules it keeps, one place each:
//! - An audit is of one checkpoint: the job's, by id, and by its COMPLETED
//!   marker's content hash and write time ([`CheckpointIdentity`]); a job
//!   directory that was reset gives a checkpoint of the same id another
//!   identity, never the audit of the one before.
//! - An acknowledgement is bound to the discrepancy's content: the SHA-256
//!   of the audit's published report the operator acknowledged. It silences
//!   that report alone ([`acknowledged`]); a report published after it (a
//!   later attempt, another finding) is unacknowledged.
//! - A state directory belongs to one configuration ([`Ledger::of_config`],
//!   the one check every command that reads it makes).
//! - The current lineage's audits are `audits`; a reset job directory or
//!   another lineage retires them to `retired`, which speak for nothing
//!   current (never "last verified").

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clink_basics::files::read_bounded;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::config::AuditConfig;
use crate::coverage::{OffsetRange, Partition};
use crate::durable::{write_atomically, write_atomically_via, DurableError, TMP_DIR};
use crate::outcome::{Outcome, Relationship};
use crate::procs::{ProcessId, Usage};

pub const LEDGER_FILE: &str = "ledger.json";
pub const LEDGER_FORMAT: &str = "clink-audit-ledger";
/// The version written; version 1 (no checkpoint identities, no first
/// checkpoint) and version 2 (no lineage) are still read.
pub const LEDGER_VERSION: u64 = 3;
pub const ACK_FORMAT: &str = "clink-audit-ack";
/// The acknowledgement version written (version 1 had no format and no report hash).
pub const ACK_VERSION: u64 = 2;
/// The largest published report hashed for an acknowledgement.
pub const MAX_REPORT_BYTES: u64 = 64 << 20;
pub const ACKS_DIR: &str = "acks";
/// The largest ledger read (a ledger past it is refused, never truncated).
pub const MAX_LEDGER_BYTES: u64 = 256 << 20;
/// How many cycles the ledger keeps.
pub const KEPT_CYCLES: usize = 200;

#[derive(Debug, Error)]
pub enum LedgerError {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{}: not a {LEDGER_FORMAT} document of version 1 to {LEDGER_VERSION}: {why}", path.display())]
    Malformed { path: PathBuf, why: String },
    #[error(transparent)]
    Durable(#[from] DurableError),
    #[error("{what}: cannot be written as JSON: {why}")]
    Unwritable { what: String, why: String },
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

/// What identifies a checkpoint beside its id: its COMPLETED marker's
/// content and when the marker was written. A job directory that was reset
/// numbers its checkpoints from 1 again, and its markers may hold the same
/// bytes as the old ones (a marker names the job, the id, the participants):
/// the write time tells them apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointIdentity {
    pub checkpoint: u64,
    /// The marker's modification time (unix ms).
    pub completed_ms: u64,
    /// The SHA-256 of the marker's bytes.
    pub marker_sha256: String,
}

/// Everything the runner knows of one checkpoint's audit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    pub id: String,
    pub checkpoint: u64,
    /// When its COMPLETED marker was written (its modification time).
    pub completed_ms: u64,
    /// The SHA-256 of its COMPLETED marker when it was selected (none in a
    /// version 1 ledger until the runner matched it by write time).
    #[serde(default)]
    pub marker_sha256: Option<String>,
    /// The lineage of the job directory it was selected from (none before
    /// the engine recorded lineages, or in a ledger before version 3).
    #[serde(default)]
    pub lineage: Option<String>,
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

    /// Whether this audit is of the checkpoint `seen` identifies. A record
    /// of a version 1 ledger (no marker hash) is matched by write time alone.
    pub fn is_of(&self, seen: &CheckpointIdentity) -> bool {
        self.checkpoint == seen.checkpoint
            && self.completed_ms == seen.completed_ms
            && self.marker_sha256.as_ref().is_none_or(|h| *h == seen.marker_sha256)
    }

    /// The attempt whose discrepancy stands: the finished last attempt, when
    /// it ended in a discrepancy.
    pub fn discrepancy_attempt(&self) -> Option<u32> {
        let last = self.attempts.last()?;
        (self.outcome == Some(Outcome::Discrepancy) && last.outcome == Some(Outcome::Discrepancy)).then_some(last.n)
    }
}

/// The first checkpoint the runner took: staleness is measured from it
/// until something is verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FirstSeen {
    pub checkpoint: u64,
    pub completed_ms: u64,
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
    /// The first checkpoint the runner took (version 1 ledgers: none, read
    /// as the oldest audited).
    #[serde(default)]
    pub first_seen: Option<FirstSeen>,
    /// Audits of checkpoints a reset of the job directory replaced: they stay
    /// listed (a discrepancy among them too) and are never selected again.
    #[serde(default)]
    pub retired: Vec<AuditRecord>,
    /// The lineage the job directory recorded at the runner's last look
    /// (`_jobs/<job>/LINEAGE`); `audits` are all of it.
    #[serde(default)]
    pub lineage: Option<String>,
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
            first_seen: None,
            retired: Vec::new(),
            lineage: None,
        }
    }

    /// Every audit the ledger holds: the current run's, then the retired.
    pub fn records(&self) -> impl Iterator<Item = &AuditRecord> {
        self.audits.values().chain(self.retired.iter())
    }

    /// The ledger of `state_dir`, or a new one when there is none yet.
    pub fn load(state_dir: &Path, fingerprint: &str) -> Result<Ledger, LedgerError> {
        let path = state_dir.join(LEDGER_FILE);
        if !path.exists() {
            return Ok(Ledger::new(fingerprint));
        }
        let ledger = Ledger::read(state_dir)?;
        ledger.belongs_to(&path, fingerprint)?;
        Ok(ledger)
    }

    /// THE check of a configuration against its state directory, made by
    /// every command that reads one (`run`, `poll`, `status`,
    /// `acknowledge`): the ledger there, if any, was written for this very
    /// configuration. Refused otherwise, never read as this one's.
    pub fn of_config(config: &AuditConfig) -> Result<Ledger, LedgerError> {
        Ledger::load(Path::new(&config.state_dir), &config.fingerprint())
    }

    fn belongs_to(&self, path: &Path, fingerprint: &str) -> Result<(), LedgerError> {
        if self.fingerprint != fingerprint {
            return Err(LedgerError::OtherConfiguration {
                path: path.to_path_buf(),
                found: self.fingerprint.clone(),
                expected: fingerprint.into(),
            });
        }
        Ok(())
    }

    /// The ledger of `state_dir`, which must exist (status reads it alone).
    pub fn read(state_dir: &Path) -> Result<Ledger, LedgerError> {
        let path = state_dir.join(LEDGER_FILE);
        let bytes =
            read_bounded(&path, MAX_LEDGER_BYTES).map_err(|source| LedgerError::Io { path: path.clone(), source })?;
        let ledger: Ledger = serde_json::from_slice(&bytes)
            .map_err(|e| LedgerError::Malformed { path: path.clone(), why: e.to_string() })?;
        if ledger.format != LEDGER_FORMAT || !(1..=LEDGER_VERSION).contains(&ledger.version) {
            let why = format!("format {:?} version {}", ledger.format, ledger.version);
            return Err(LedgerError::Malformed { path, why });
        }
        Ok(ledger)
    }

    /// Replaces the ledger atomically (written as the current version).
    pub fn save(&mut self, state_dir: &Path) -> Result<(), LedgerError> {
        self.version = LEDGER_VERSION;
        let bytes = to_json(self, LEDGER_FILE)?;
        Ok(write_atomically_via(&state_dir.join(TMP_DIR), &state_dir.join(LEDGER_FILE), &bytes)?)
    }

    pub fn push_cycle(&mut self, cycle: CycleRecord) {
        self.cycles.push(cycle);
        let excess = self.cycles.len().saturating_sub(KEPT_CYCLES);
        self.cycles.drain(..excess);
    }
}

/// `value` as pretty JSON; a value that cannot be is an error, never an empty file.
pub fn to_json<T: Serialize>(value: &T, what: &str) -> Result<Vec<u8>, LedgerError> {
    serde_json::to_vec_pretty(value).map_err(|e| LedgerError::Unwritable { what: what.into(), why: e.to_string() })
}

/// An operator's acknowledgement of one audit's discrepancy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ack {
    /// `clink-audit-ack` (absent in version 1).
    #[serde(default)]
    pub format: Option<String>,
    #[serde(default = "ack_version_1")]
    pub version: u64,
    pub audit: String,
    /// The attempt whose discrepancy it acknowledges, for people.
    #[serde(default)]
    pub attempt: Option<u32>,
    /// The SHA-256 of the audit's published report acknowledged: the
    /// discrepancy's content. Version 1 had none and silences nothing.
    #[serde(default)]
    pub report_sha256: Option<String>,
    pub note: String,
    pub at_ms: u64,
    pub by: String,
}

fn ack_version_1() -> u64 {
    1
}

impl Ack {
    /// A new acknowledgement of `audit`'s report with SHA-256 `report_sha256`.
    pub fn new(audit: &str, attempt: u32, report_sha256: &str, note: &str, at_ms: u64, by: &str) -> Ack {
        Ack {
            format: Some(ACK_FORMAT.into()),
            version: ACK_VERSION,
            audit: audit.into(),
            attempt: Some(attempt),
            report_sha256: Some(report_sha256.into()),
            note: note.into(),
            at_ms,
            by: by.into(),
        }
    }

    fn check(&self) -> Result<(), String> {
        match (&self.format, self.version) {
            (None, 1) => Ok(()),
            (Some(f), v) if f == ACK_FORMAT && (1..=ACK_VERSION).contains(&v) => Ok(()),
            (f, v) => Err(format!("format {f:?} version {v}, not {ACK_FORMAT} of version 1 to {ACK_VERSION}")),
        }
    }
}

/// Writes an acknowledgement as its own file (no lock is needed: the runner
/// never writes under `acks/`).
pub fn acknowledge(state_dir: &Path, ack: &Ack) -> Result<PathBuf, LedgerError> {
    let dir = state_dir.join(ACKS_DIR);
    std::fs::create_dir_all(&dir).map_err(|source| LedgerError::Io { path: dir.clone(), source })?;
    let path = dir.join(format!("{}-{}-{}.json", ack.audit, ack.at_ms, std::process::id()));
    write_atomically(&path, &to_json(ack, "an acknowledgement")?)?;
    Ok(path)
}

/// The SHA-256 of `audit`'s published report (`reports/<audit>.json`), or
/// `None` when none is published.
pub fn published_report_sha256(state_dir: &Path, audit: &str) -> Result<Option<String>, LedgerError> {
    let path = state_dir.join("reports").join(format!("{audit}.json"));
    match read_bounded(&path, MAX_REPORT_BYTES) {
        Ok(bytes) => Ok(Some(clink_basics::digest::sha256_hex(&bytes))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(LedgerError::Io { path, source }),
    }
}

/// Whether `rec`'s discrepancy is acknowledged: its discrepancy stands, its
/// report is published with SHA-256 `report_sha256`, and an acknowledgement
/// names this audit and that very hash. Anything else (another report,
/// none named, an audit that is no discrepancy) silences nothing.
pub fn acknowledged(rec: &AuditRecord, report_sha256: Option<&str>, acks: &BTreeMap<String, Vec<Ack>>) -> bool {
    let (Some(_), Some(sha)) = (rec.discrepancy_attempt(), report_sha256) else { return false };
    acks.get(&rec.id).is_some_and(|all| all.iter().any(|a| a.report_sha256.as_deref() == Some(sha)))
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
        ack.check().map_err(|why| LedgerError::Malformed { path: path.clone(), why })?;
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
        l.version = 1;
        l.cursor = Some(4);
        l.observed.insert(4, 1000);
        l.save(dir.path()).unwrap();
        assert_eq!(l.version, LEDGER_VERSION);
        assert_eq!(Ledger::load(dir.path(), "fp1").unwrap(), l);
        let other = Ledger::load(dir.path(), "fp2").unwrap_err();
        assert!(other.to_string().contains("another configuration"), "{other}");
        std::fs::write(dir.path().join(LEDGER_FILE), b"{\"format\":").unwrap();
        assert!(matches!(Ledger::load(dir.path(), "fp1"), Err(LedgerError::Malformed { .. })));
    }

    #[test]
    fn acknowledgements_are_files_and_a_bad_one_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let ack = Ack::new("a1", 1, "h", "known", 5, "op");
        acknowledge(dir.path(), &ack).unwrap();
        assert_eq!(acknowledgements(dir.path()).unwrap()["a1"], vec![ack]);
        let newer = br#"{"format":"clink-audit-ack","version":3,"audit":"a1","note":"n","at_ms":1,"by":"op"}"#;
        std::fs::write(dir.path().join(ACKS_DIR).join("newer.json"), newer).unwrap();
        assert!(acknowledgements(dir.path()).unwrap_err().to_string().contains("version 3"));
        std::fs::write(dir.path().join(ACKS_DIR).join("newer.json"), b"no").unwrap();
        assert!(acknowledgements(dir.path()).is_err());
    }

    fn record(outcomes: &[Outcome]) -> AuditRecord {
        let attempt = |i: usize, o: &Outcome| Attempt {
            n: i as u32 + 1,
            cycle: i as u64 + 1,
            started_ms: 1,
            ended_ms: Some(2),
            outcome: Some(*o),
            reason: None,
            since: None,
            steps: Vec::new(),
        };
        AuditRecord {
            id: "a1".into(),
            checkpoint: 3,
            completed_ms: 10,
            marker_sha256: Some("h".into()),
            lineage: None,
            outcome: outcomes.last().copied(),
            attempts: outcomes.iter().enumerate().map(|(i, o)| attempt(i, o)).collect(),
            next_due_s: None,
            published: true,
            ranges: Vec::new(),
            findings: Vec::new(),
            evidence_deleted: false,
        }
    }

    fn acks(report: Option<&str>) -> BTreeMap<String, Vec<Ack>> {
        let mut ack = Ack::new("a1", 1, "", "n", 1, "op");
        ack.report_sha256 = report.map(str::to_string);
        BTreeMap::from([("a1".to_string(), vec![ack])])
    }

    #[test]
    fn an_acknowledgement_silences_the_report_it_was_made_for_alone() {
        let found = record(&[Outcome::Discrepancy]);
        assert!(acknowledged(&found, Some("r1"), &acks(Some("r1"))));
        // Made for another report (an earlier attempt's, another finding's),
        // or naming none, or of a report not published: the discrepancy stands.
        assert!(!acknowledged(&found, Some("r2"), &acks(Some("r1"))));
        assert!(!acknowledged(&found, Some("r1"), &acks(None)));
        assert!(!acknowledged(&found, None, &acks(Some("r1"))));
        let later = record(&[Outcome::Error, Outcome::Discrepancy]);
        assert!(acknowledged(&later, Some("r2"), &acks(Some("r2"))));
        // Nothing but a discrepancy is acknowledged.
        assert!(!acknowledged(&record(&[Outcome::Passed]), Some("r1"), &acks(Some("r1"))));
    }

    #[test]
    fn a_checkpoint_is_its_marker_not_its_id() {
        let rec = record(&[Outcome::Passed]);
        let seen = |ms, sha: &str| CheckpointIdentity { checkpoint: 3, completed_ms: ms, marker_sha256: sha.into() };
        assert!(rec.is_of(&seen(10, "h")));
        assert!(!rec.is_of(&seen(11, "h")), "the same bytes written again are another checkpoint");
        assert!(!rec.is_of(&seen(10, "other")));
        let v1 = AuditRecord { marker_sha256: None, ..rec };
        assert!(v1.is_of(&seen(10, "h")) && !v1.is_of(&seen(12, "h")));
    }
}
