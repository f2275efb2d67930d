//! The runner: cycles of audits over a running job's completed checkpoints.
//!
//! It owns selection (sequential or latest-only, start_at, retries after
//! their backoff, at most one attempt per audit per cycle), the order of an
//! audit's steps and their recording (a step's result is recorded once its
//! output is in place, the child's process group before it is waited for),
//! recovery after a crash (the recorded orphan stopped, a written report
//! published, the rest resumed at the step that was running), the windowed
//! chain of reference states, retention and the disk budget. This file
//! holds the cycle and an audit's steps; the parts its seams name are
//! [`selection`], [`recovery`], [`chain`] and [`retention`], each a further
//! `impl Runner`.
//!
//! Rules it keeps, one place each:
//! - A checkpoint is its marker ([`crate::ledger::CheckpointIdentity`]) in a
//!   lineage (`_jobs/<job>/LINEAGE`): when the job directory was reset or
//!   records another lineage, the audits of the one before are retired and
//!   the new ones audited from the start ([`Runner::look`]).
//! - Every attempt starts with no ranges: an audit's coverage is its last
//!   attempt's alone ([`Runner::begin_attempt`]).
//! - The windowed chain holds only the states of audits that ended `passed`
//!   or `empty` ([`Runner::finish`]), and a held state is handed to the
//!   reference only when its bytes hash to the hash recorded when it was
//!   held, checked right before the reference starts.
//!
//! It must never decide a verdict itself (every outcome is one a child's
//! result gives, [`crate::steps`]), count unfinished work as verified, read
//! again a discrepancy already found, delete anything it did not create and
//! mark, or start an audit the disk budget cannot hold.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use clink_basics::digest::sha256_hex;
use clink_upgrade::runner::{self as procs_runner, Stopped};
use serde_json::{json, Map, Value as Json};
use thiserror::Error;

use crate::config::AuditConfig;
use crate::durable::{clear_temporaries, write_atomically, write_atomically_via, DurableError, TMP_DIR};
use crate::events::Events;
use crate::ledger::{
    Attempt, CheckpointIdentity, CycleAudit, CycleRecord, Finding, Ledger, LedgerError, Running, Shape, Step,
    StepRecord,
};
use crate::lock::{acquire, Holder, LockError, RunnerLock};
use crate::outcome::{next_attempt_due, Outcome};
use crate::procs::{identify, usage, ProcessId};
use crate::report;
use crate::steps::{self, AuditFiles, StepContext, Verdict};

mod chain;
mod recovery;
mod retention;
mod selection;

/// Collection is tried again at once when the job moved on mid-copy, at most this often.
const COLLECT_TRIES: usize = 3;
/// How far back an increment's collection reaches, in completed checkpoints.
pub const MAX_REACH_BACK: usize = 8;
/// At most this many checkpoints wait, collected early, for the next cycle:
/// a runner slower than the job must not spend its cycles only collecting.
pub const MAX_COLLECTED_EARLY: usize = 4;
/// The mark of a directory the runner made (retention deletes only these).
pub const OWNED_MARK: &str = ".clink-audit-owned";

#[derive(Debug, Error)]
pub enum RunError {
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error(transparent)]
    Durable(#[from] DurableError),
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("the job's lineage record is refused: {0}")]
    Lineage(#[from] crate::job::LineageError),
}

fn io_at(path: &Path) -> impl FnOnce(std::io::Error) -> RunError + '_ {
    move |source| RunError::Io { path: path.to_path_buf(), source }
}

/// The job's completed checkpoints, by id.
type Completed = BTreeMap<u64, CheckpointIdentity>;

pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// How a cycle ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CycleEnd {
    Done {
        attempted: usize,
        discrepancies: usize,
    },
    /// The disk budget would be passed: no audit was started.
    Blocked(String),
    /// SIGINT or SIGTERM: the step that was running is left to resume.
    Interrupted,
}

/// What the runner reports as it goes (the binary draws it).
pub trait RunProgress {
    fn step(&mut self, _cycle: u64, _checkpoint: u64, _step: Step) {}
    fn published(&mut self, _checkpoint: u64, _outcome: Outcome, _reason: &str) {}
}

pub struct NoProgress;
impl RunProgress for NoProgress {}

/// The audit id: the checkpoint, and a digest of the job, the
/// configuration's fingerprint and the checkpoint's identity (its marker's
/// hash and write time), so the checkpoint of the same id in a job
/// directory that was reset is another audit (the job id may hold any
/// character).
pub fn audit_id(job: &str, fingerprint: &str, seen: &CheckpointIdentity) -> String {
    let digest = sha256_hex(format!("{job}\n{fingerprint}\n{}\n{}", seen.marker_sha256, seen.completed_ms).as_bytes());
    format!("ck{}-{}", seen.checkpoint, &digest[..16])
}

enum StepEnd {
    Verdict(Verdict, StepRecord),
    Interrupted,
}

pub struct Runner<'a> {
    config: &'a AuditConfig,
    state: PathBuf,
    clink: PathBuf,
    ledger: Ledger,
    events: Events,
    cycle: u64,
    /// Checkpoints eligible when the current cycle began.
    eligible: BTreeSet<u64>,
    /// The checkpoints the current cycle audits.
    listed: BTreeSet<u64>,
    _lock: RunnerLock,
}

impl<'a> Runner<'a> {
    /// Takes the state directory (one runner at a time), reads the ledger
    /// and recovers from a crash.
    pub fn open(config: &'a AuditConfig, clink: &Path, command: &str) -> Result<Runner<'a>, RunError> {
        let state = PathBuf::from(&config.state_dir);
        std::fs::create_dir_all(state.join("audits")).map_err(io_at(&state))?;
        std::fs::create_dir_all(state.join("reports")).map_err(io_at(&state))?;
        std::fs::create_dir_all(state.join("states")).map_err(io_at(&state))?;
        let lock = acquire(&state, &Holder { command: command.into(), ..Holder::me(now_ms() / 1000) })?;
        // What a killed runner was writing (only a runner, holding the lock, writes there).
        clear_temporaries(&state.join(TMP_DIR))?;
        let ledger = Ledger::of_config(config)?;
        let cycle = ledger.cycles.last().map_or(0, |c| c.n);
        let mut runner = Runner {
            config,
            events: Events::new(&state),
            state,
            clink: clink.to_path_buf(),
            ledger,
            cycle,
            eligible: BTreeSet::new(),
            listed: BTreeSet::new(),
            _lock: lock,
        };
        runner.ledger.runner.pid = std::process::id();
        runner.ledger.runner.started_ms = now_ms();
        runner.ledger.runner.stopped = None;
        runner.event("runner-started", json!({"pid": std::process::id(), "command": command}));
        runner.recover()?;
        Ok(runner)
    }

    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    fn save(&mut self) -> Result<(), RunError> {
        self.ledger.runner.usage = usage();
        Ok(self.ledger.save(&self.state)?)
    }

    fn event(&self, name: &str, fields: Json) {
        let fields = match fields {
            Json::Object(m) => m,
            _ => Map::new(),
        };
        // The events file is for monitors: a write that fails is said on
        // standard error, and never stops an audit.
        if let Err(e) = self.events.append(now_ms(), name, fields) {
            eprintln!("clink-audit: events: {e}");
        }
    }

    fn files(&self, id: &str) -> AuditFiles {
        AuditFiles::new(self.state.join("audits").join(id))
    }

    /// One cycle.
    pub fn cycle(&mut self, progress: &mut dyn RunProgress) -> Result<CycleEnd, RunError> {
        self.cycle += 1;
        let started = now_ms();
        let completed = self.look(progress)?;
        let list = self.select(&completed, started / 1000, progress)?;
        self.eligible = completed.keys().copied().collect();
        self.event("cycle-started", json!({"cycle": self.cycle, "audits": list}));
        let mut record = CycleRecord {
            n: self.cycle,
            started_ms: started,
            ended_ms: None,
            eligible: list.clone(),
            audits: Vec::new(),
            note: None,
        };
        let mut end = CycleEnd::Done { attempted: 0, discrepancies: 0 };
        self.listed = list.iter().copied().collect();
        let list = match self.collect_ahead(&list, progress)? {
            true => list,
            false => {
                end = CycleEnd::Interrupted;
                Vec::new()
            }
        };
        for ck in list {
            if let Some(why) = self.over_budget(ck) {
                self.ledger.runner.budget_blocked = Some(why.clone());
                self.event("budget-reached", json!({"checkpoint": ck, "why": why}));
                end = CycleEnd::Blocked(why);
                break;
            }
            self.ledger.runner.budget_blocked = None;
            // Collection ahead may already have decided it (expired, a gap):
            // one attempt per cycle.
            let rec = &self.ledger.audits[&ck];
            let decided_ahead = rec.open_attempt().is_none() && rec.attempted_in(self.cycle);
            let interrupted = !decided_ahead && !self.audit(ck, true, progress)?;
            let rec = &self.ledger.audits[&ck];
            let last = rec.attempts.last();
            record.audits.push(CycleAudit {
                checkpoint: ck,
                outcome: last.and_then(|a| a.outcome),
                steps: last.map_or(Vec::new(), |a| a.steps.iter().map(|s| (s.step, s.seconds)).collect()),
            });
            if interrupted {
                end = CycleEnd::Interrupted;
                break;
            }
            if let CycleEnd::Done { attempted, discrepancies } = &mut end {
                *attempted += 1;
                *discrepancies +=
                    usize::from(rec.outcome == Some(Outcome::Discrepancy) && rec.attempted_in(self.cycle));
            }
        }
        if matches!(end, CycleEnd::Done { .. }) {
            self.ledger.runner.budget_blocked = None;
            self.retention()?;
        }
        record.ended_ms = Some(now_ms());
        record.note = match &end {
            CycleEnd::Blocked(why) => Some(why.clone()),
            CycleEnd::Interrupted => Some("interrupted".into()),
            CycleEnd::Done { .. } => None,
        };
        self.ledger.runner.last_cycle_end_ms = record.ended_ms;
        self.ledger.push_cycle(record);
        self.event("cycle-ended", json!({"cycle": self.cycle, "seconds": (now_ms() - started) as f64 / 1000.0}));
        self.save()?;
        Ok(end)
    }

    /// Records that the runner stopped (a signal), for status.
    pub fn stopped(&mut self, why: &str) -> Result<(), RunError> {
        self.ledger.runner.stopped = Some(why.into());
        self.event("runner-stopped", json!({"why": why}));
        self.save()
    }

    fn begin_attempt(&mut self, ck: u64) {
        let cycle = self.cycle;
        let rec = self.ledger.audits.get_mut(&ck).expect("selected audits have a record");
        if rec.open_attempt().is_some() {
            return;
        }
        let n = rec.attempts.len() as u32 + 1;
        // Every attempt starts with no ranges: an audit's coverage is the
        // offsets its passing attempt spanned, never an earlier one's.
        rec.ranges.clear();
        rec.attempts.push(Attempt {
            n,
            cycle,
            started_ms: now_ms(),
            ended_ms: None,
            outcome: None,
            reason: None,
            since: None,
            steps: Vec::new(),
        });
    }

    /// Runs (or resumes) one audit. `whole` false: collect only (a
    /// checkpoint completing mid-cycle). Returns false when interrupted.
    fn audit(&mut self, ck: u64, whole: bool, progress: &mut dyn RunProgress) -> Result<bool, RunError> {
        let fresh = self.ledger.audits[&ck].open_attempt().is_none();
        self.begin_attempt(ck);
        let id = self.ledger.audits[&ck].id.clone();
        let files = self.files(&id);
        if fresh {
            // A new attempt starts from nothing the last one left.
            for step in Step::ALL {
                for p in files.outputs(step) {
                    remove(p)?;
                }
            }
        }
        std::fs::create_dir_all(&files.dir).map_err(io_at(&files.dir))?;
        std::fs::write(files.dir.join(OWNED_MARK), id.as_bytes()).map_err(io_at(&files.dir))?;
        let mut procs = procs_runner::Runner::new(&files.dir, self.child_bounds()).map_err(io_at(&files.dir))?;
        let mut bases = self.bases(ck);
        if let Some(since) = self.attempt(ck).since {
            bases.retain(|b| *b <= since);
        }
        let clink = self.clink.clone();
        for step in Step::ALL {
            if self.attempt(ck).done(step).is_some() {
                continue;
            }
            if !whole && step != Step::Collect {
                return Ok(true);
            }
            progress.step(self.cycle, ck, step);
            let mut tries = 0;
            let verdict = loop {
                let since = bases.first().copied();
                let ctx = StepContext {
                    config: self.config,
                    clink: &clink,
                    checkpoint: ck,
                    files: &files,
                    epochs: self.epochs(ck, &bases),
                    since: since.map(|b| self.held(b)),
                    marker_sha256: self.ledger.audits[&ck].marker_sha256.clone(),
                };
                self.attempt_mut(ck).since = since;
                let (verdict, record) = match self.run_step(ck, step, &ctx, &mut procs)? {
                    StepEnd::Interrupted => return Ok(false),
                    StepEnd::Verdict(v, r) => (v, r),
                };
                tries += 1;
                match verdict {
                    Verdict::CollectAgain(why) if tries < COLLECT_TRIES => {
                        self.event("collect-again", json!({"checkpoint": ck, "why": why}));
                    }
                    Verdict::CollectAgain(why) => {
                        break (
                            Verdict::Decided(Outcome::Partial, format!("collect: the job kept moving: {why}"), vec![]),
                            record,
                        )
                    }
                    Verdict::OtherBase(why) => {
                        self.event("other-base", json!({"checkpoint": ck, "base": since, "why": why}));
                        bases.retain(|b| Some(*b) != since);
                        self.ledger.chain.broken = None;
                    }
                    v => break (v, record),
                }
            };
            let mut record = verdict.1;
            match verdict.0 {
                Verdict::Continue(note) => {
                    record.note = note;
                    self.after_step(ck, step, &files)?;
                    self.attempt_mut(ck).steps.push(record);
                    self.save()?;
                }
                Verdict::Decided(outcome, mut reason, findings) => {
                    let chain_tried = !self.ledger.chain.held.is_empty() && self.attempt(ck).since.is_none();
                    if step == Step::Scope
                        && outcome == Outcome::Partial
                        && self.ledger.shape == Shape::Windowed
                        && chain_tried
                    {
                        reason = self.chain_broken(ck, &reason);
                    }
                    record.note = reason.clone();
                    record.outcome = Some(outcome);
                    self.attempt_mut(ck).steps.push(record);
                    self.save()?;
                    self.finish(ck, outcome, reason, findings, progress)?;
                    return Ok(true);
                }
                Verdict::CollectAgain(why) | Verdict::OtherBase(why) => {
                    let reason = self.chain_broken(ck, &why);
                    record.outcome = Some(Outcome::Partial);
                    record.note = reason.clone();
                    self.attempt_mut(ck).steps.push(record);
                    self.save()?;
                    self.finish(ck, Outcome::Partial, reason, Vec::new(), progress)?;
                    return Ok(true);
                }
            }
            if whole {
                self.collect_new_checkpoints(progress)?;
            }
        }
        let (outcome, reason) = self.concluded(ck);
        self.finish(ck, outcome, reason, Vec::new(), progress)?;
        Ok(true)
    }

    fn attempt(&self, ck: u64) -> &Attempt {
        self.ledger.audits[&ck].attempts.last().expect("an attempt was begun")
    }

    fn attempt_mut(&mut self, ck: u64) -> &mut Attempt {
        self.ledger.audits.get_mut(&ck).and_then(|r| r.attempts.last_mut()).expect("an attempt was begun")
    }

    fn child_bounds(&self) -> clink_upgrade::Bounds {
        let b = &self.config.bounds;
        clink_upgrade::Bounds {
            run_timeout_s: b.child_timeout_s,
            max_rss_mib: 1 << 20,
            // The bundle, the reference's artifact and the reports, each bounded on its own.
            max_output_mib: (b.bundle_bytes >> 20).saturating_mul(3).saturating_add(256),
            timeout_s: 30 * 86_400,
        }
    }

    fn run_step(
        &mut self,
        ck: u64,
        step: Step,
        ctx: &StepContext,
        procs: &mut procs_runner::Runner,
    ) -> Result<StepEnd, RunError> {
        for p in ctx.files.outputs(step) {
            remove(p)?;
        }
        let child = steps::child(step, ctx);
        let n = self.attempt(ck).n;
        let mut record = StepRecord { step, exit_code: None, seconds: 0.0, note: String::new(), outcome: None };
        if let (Step::Reference, Some(held)) = (step, &ctx.since) {
            if let Some(refused) = self.refuse_unheld(held)? {
                return Ok(StepEnd::Verdict(refused, record));
            }
        }
        if !child.unset.is_empty() {
            let why = format!(
                "{}: the configuration names variables that are not set: {}",
                step.as_str(),
                child.unset.join(", ")
            );
            return Ok(StepEnd::Verdict(Verdict::Decided(Outcome::Error, why, Vec::new()), record));
        }
        let started = std::time::Instant::now();
        let name = format!("a{n}-{}", step.as_str());
        let running = match procs.spawn_with_env(&name, &child.program, &child.args, Some(&child.env)) {
            Ok(r) => r,
            Err(Stopped::Interrupted { .. }) => return Ok(StepEnd::Interrupted),
            Err(why) => return Ok(StepEnd::Verdict(steps::stopped(step, &why), record)),
        };
        let pid = running.pid();
        let id = identify(pid).unwrap_or(ProcessId { pid, start_ticks: 0 });
        self.ledger.running = Some(Running { checkpoint: ck, attempt: n, step, child: id, started_ms: now_ms() });
        self.save()?;
        let result = procs.wait(running, None);
        self.ledger.running = None;
        record.seconds = started.elapsed().as_secs_f64();
        let verdict = match result {
            Ok(done) => {
                record.exit_code = done.code;
                if step == Step::Verify {
                    // The report is the step's output; it is in place before the result is recorded.
                    write_atomically(&ctx.files.verify, done.stdout.as_bytes())?;
                }
                steps::judge(step, &done, ctx)
            }
            Err(Stopped::Interrupted { .. }) => {
                self.save()?;
                return Ok(StepEnd::Interrupted);
            }
            Err(why) => steps::stopped(step, &why),
        };
        Ok(StepEnd::Verdict(verdict, record))
    }

    /// What a step that did its part leaves the runner knowing.
    fn after_step(&mut self, ck: u64, step: Step, files: &AuditFiles) -> Result<(), RunError> {
        match step {
            Step::Scope => {
                if let Ok(facts) = steps::scope_facts(&files.scope) {
                    if self.ledger.shape == Shape::Unknown {
                        self.ledger.shape = facts.shape;
                        self.event("shape", json!({"shape": facts.shape, "checkpoint": ck}));
                    }
                }
            }
            Step::Reference => {
                // Coverage is recorded only once it is known whole; an audit without it counts nothing.
                let spanned = steps::spanned(&files.scope, &files.reference);
                if let Err(why) = &spanned {
                    self.event("coverage-unknown", json!({"checkpoint": ck, "why": why}));
                }
                if let Some(rec) = self.ledger.audits.get_mut(&ck) {
                    rec.ranges = spanned.unwrap_or_default();
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Every step did its part (`empty` is decided by the reconcile step).
    fn concluded(&self, _ck: u64) -> (Outcome, String) {
        (Outcome::Passed, "every required check passed, for the selected keys".into())
    }

    /// Ends the open attempt with `outcome`, writes the report, then
    /// publishes it.
    fn finish(
        &mut self,
        ck: u64,
        outcome: Outcome,
        reason: String,
        findings: Vec<Finding>,
        progress: &mut dyn RunProgress,
    ) -> Result<(), RunError> {
        let max_attempts = self.config.max_attempts;
        let backoff = self.config.backoff.clone();
        let rec = self.ledger.audits.get_mut(&ck).expect("a finished audit has a record");
        let Some(attempt) = rec.attempts.last_mut().filter(|a| a.ended_ms.is_none()) else { return Ok(()) };
        let now = now_ms();
        attempt.ended_ms = Some(now);
        attempt.outcome = Some(outcome);
        attempt.reason = Some(reason);
        rec.outcome = Some(outcome);
        if outcome == Outcome::Discrepancy && !findings.is_empty() {
            rec.findings = findings;
        }
        rec.next_due_s = next_attempt_due(outcome, rec.attempts.len() as u32, max_attempts, now / 1000, &backoff);
        rec.published = false;
        let id = rec.id.clone();
        let files = self.files(&id);
        // The chain goes on only from a state whose audit was verified.
        if outcome.counts_toward_coverage() && self.ledger.shape == Shape::Windowed && files.state_out.is_file() {
            self.hold_state(ck, &files.state_out)?;
        }
        let document = report::document(self.config, &self.ledger, &self.ledger.audits[&ck], &files);
        std::fs::create_dir_all(&files.dir).map_err(io_at(&files.dir))?;
        write_atomically(&files.report, document.as_bytes())?;
        self.save()?;
        self.prune_states()?;
        self.publish(ck, progress)
    }

    fn publish(&mut self, ck: u64, progress: &mut dyn RunProgress) -> Result<(), RunError> {
        let rec = &self.ledger.audits[&ck];
        let files = self.files(&rec.id);
        let document = match std::fs::read(&files.report) {
            Ok(d) => d,
            // Retention deleted its evidence, or it was never written: write it again.
            Err(_) => report::document(self.config, &self.ledger, rec, &files).into_bytes(),
        };
        let published = self.state.join("reports").join(format!("{}.json", rec.id));
        write_atomically_via(&self.state.join(TMP_DIR), &published, &document)?;
        let outcome = rec.outcome.unwrap_or(Outcome::Error);
        let reason = rec.attempts.last().and_then(|a| a.reason.clone()).unwrap_or_default();
        let id = rec.id.clone();
        if let Some(rec) = self.ledger.audits.get_mut(&ck) {
            rec.published = true;
        }
        self.save()?;
        self.event("audit-published", json!({"audit": id, "checkpoint": ck, "outcome": outcome.as_str()}));
        progress.published(ck, outcome, &reason);
        Ok(())
    }
}

fn remove(path: &Path) -> Result<(), RunError> {
    let result = if path.is_dir() { std::fs::remove_dir_all(path) } else { std::fs::remove_file(path) };
    match result {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(RunError::Io { path: path.to_path_buf(), source: e }),
        _ => Ok(()),
    }
}
