//! Selection: which of the job's completed checkpoints this cycle audits
//! (sequential or latest-only, `start_at`, retries after their backoff),
//! what identifies each (a job directory that was reset retires what it
//! replaced), and collection ahead of the audits, before the job's
//! retention purges what bounds them.
//!
//! It never runs a step's child itself: collecting is an audit cut short
//! ([`Runner::audit`] with `whole` false).

use std::collections::BTreeSet;
use std::path::Path;

use clink_upgrade::runner::dir_bytes;
use serde_json::json;

use super::{audit_id, Completed, RunError, RunProgress, Runner, MAX_COLLECTED_EARLY, MAX_REACH_BACK};
use crate::config::{Selection, StartAt};
use crate::ledger::{AuditRecord, Chain, CheckpointIdentity, FirstSeen, Shape, Step};
use crate::outcome::{may_attempt, Outcome};

impl Runner<'_> {
    /// The job's completed checkpoints now, recorded as observed.
    /// At a cycle's start: when the job directory records another lineage,
    /// or was reset, the audits of the checkpoints it replaced are retired first.
    pub(super) fn look(&mut self, progress: &mut dyn RunProgress) -> Result<Completed, RunError> {
        let lineage = crate::job::lineage(Path::new(&self.config.job.checkpoint_dir), &self.config.job.id)?;
        let completed = self.completed_now()?;
        if let Some(why) = self.other_lineage(lineage.as_deref(), &completed).or_else(|| self.replaced(&completed)) {
            self.retire_all(&why, progress)?;
        }
        self.adopt_lineage(lineage);
        self.observe(&completed);
        Ok(completed)
    }

    /// Why the lineage the job directory records now is not the one the
    /// ledger's audits are of, if it is not. A ledger that knew no lineage
    /// (an engine or a runner from before lineages) takes the first one it
    /// sees only when a checkpoint it audited is still there, as it was:
    /// otherwise nothing says its audits are of that lineage.
    fn other_lineage(&self, now: Option<&str>, completed: &Completed) -> Option<String> {
        match (self.ledger.lineage.as_deref(), now) {
            (Some(was), Some(now)) if was == now => None,
            (Some(was), now) => Some(format!(
                "the job directory records lineage {}, not lineage {was} the audits were of",
                now.unwrap_or("none (its LINEAGE is gone)")
            )),
            (None, None) => None,
            (None, Some(now)) => {
                let still_there =
                    completed.iter().any(|(ck, seen)| self.ledger.audits.get(ck).is_some_and(|r| r.is_of(seen)));
                (!self.ledger.audits.is_empty() && !still_there).then(|| {
                    format!("the job directory now records lineage {now}, and no checkpoint the runner audited is there as it was")
                })
            }
        }
    }

    /// The lineage seen is the ledger's, and every current audit's.
    fn adopt_lineage(&mut self, lineage: Option<String>) {
        for rec in self.ledger.audits.values_mut().filter(|r| r.lineage.is_none()) {
            rec.lineage.clone_from(&lineage);
        }
        self.ledger.lineage = lineage;
    }

    pub(super) fn completed_now(&self) -> Result<Completed, RunError> {
        let dir = Path::new(&self.config.job.checkpoint_dir);
        crate::job::completed(dir, &self.config.job.id).map_err(|source| RunError::Io { path: dir.into(), source })
    }

    /// Records what was seen; a version 1 record takes its marker's hash
    /// once its write time matched ([`AuditRecord::is_of`]).
    pub(super) fn observe(&mut self, completed: &Completed) {
        self.ledger.observed = completed.iter().map(|(ck, seen)| (*ck, seen.completed_ms)).collect();
        for (ck, seen) in completed {
            if let Some(rec) = self.ledger.audits.get_mut(ck).filter(|r| r.marker_sha256.is_none() && r.is_of(seen)) {
                rec.marker_sha256 = Some(seen.marker_sha256.clone());
            }
        }
    }

    /// Why the checkpoints the job shows now are not the ones the ledger
    /// knows under their ids (a reset job directory), if they are not.
    pub(super) fn replaced(&self, completed: &Completed) -> Option<String> {
        let cursor = self.ledger.cursor;
        completed.iter().find_map(|(ck, seen)| {
            if let Some(rec) = self.ledger.audits.get(ck) {
                return (!rec.is_of(seen)).then(|| {
                    format!(
                        "checkpoint {ck}'s COMPLETED marker (written at {} ms, SHA-256 {}) is not the one audit {} \
                         was made of (written at {} ms, SHA-256 {})",
                        seen.completed_ms,
                        seen.marker_sha256,
                        rec.id,
                        rec.completed_ms,
                        rec.marker_sha256.as_deref().unwrap_or("not recorded")
                    )
                });
            }
            if let Some(ms) = self.ledger.observed.get(ck) {
                return (*ms != seen.completed_ms).then(|| {
                    format!(
                        "checkpoint {ck}'s COMPLETED marker was written again (at {} ms, seen at {ms} ms)",
                        seen.completed_ms
                    )
                });
            }
            cursor.filter(|c| ck <= c).map(|c| {
                format!(
                    "checkpoint {ck} completed after the runner had taken checkpoints up to {c}: its ids started again"
                )
            })
        })
    }

    /// The job directory was reset: the audits of the checkpoints it
    /// replaced are retired (an unfinished one ends `expired`), the held
    /// states are dropped, and selection starts again by `start_at`.
    pub(super) fn retire_all(&mut self, why: &str, progress: &mut dyn RunProgress) -> Result<(), RunError> {
        let reason = format!("the job directory was reset: {why}");
        let open: Vec<u64> =
            self.ledger.audits.iter().filter(|(_, r)| r.open_attempt().is_some()).map(|(ck, _)| *ck).collect();
        for ck in open {
            self.finish(ck, Outcome::Expired, reason.clone(), Vec::new(), progress)?;
        }
        let retired = std::mem::take(&mut self.ledger.audits);
        self.event("job-reset", json!({"why": reason, "retired": retired.values().map(|r| &r.id).collect::<Vec<_>>()}));
        self.ledger.retired.extend(retired.into_values());
        self.ledger.cursor = None;
        self.ledger.observed.clear();
        self.ledger.chain = Chain::default();
        // Staleness is measured within the new lineage.
        self.ledger.first_seen = None;
        self.save()?;
        self.prune_states()
    }

    pub(super) fn new_record(&self, seen: &CheckpointIdentity) -> AuditRecord {
        AuditRecord {
            id: audit_id(&self.config.job.id, &self.ledger.fingerprint, seen),
            checkpoint: seen.checkpoint,
            completed_ms: seen.completed_ms,
            marker_sha256: Some(seen.marker_sha256.clone()),
            lineage: self.ledger.lineage.clone(),
            outcome: None,
            attempts: Vec::new(),
            next_due_s: None,
            published: false,
            ranges: Vec::new(),
            findings: Vec::new(),
            evidence_deleted: false,
        }
    }

    /// What this cycle audits, in order; latest-only records what it passes over.
    pub(super) fn select(
        &mut self,
        completed: &Completed,
        now_s: u64,
        progress: &mut dyn RunProgress,
    ) -> Result<Vec<u64>, RunError> {
        if self.ledger.cursor.is_none() {
            if let Some(newest) = completed.keys().next_back() {
                self.ledger.cursor = Some(match self.config.start_at {
                    StartAt::Earliest => 0,
                    StartAt::Latest => newest - 1,
                });
            }
        }
        self.first_seen(completed);
        let cursor = self.ledger.cursor.unwrap_or(u64::MAX);
        let fresh: Vec<u64> = completed.keys().copied().filter(|ck| *ck > cursor).collect();
        let mut list: BTreeSet<u64> = BTreeSet::new();
        match (self.config.selection, fresh.last()) {
            (_, None) => {}
            (Selection::Sequential, Some(_)) => list.extend(fresh.iter().copied()),
            (Selection::LatestOnly, Some(newest)) => {
                list.insert(*newest);
                for ck in fresh.iter().copied().filter(|ck| ck != newest) {
                    // Passed over already (a runner killed before the cursor moved): once is enough.
                    if self.ledger.audits.get(&ck).is_some_and(|r| r.outcome.is_some() && r.open_attempt().is_none()) {
                        continue;
                    }
                    let rec = self.ledger.audits.get(&ck).cloned().unwrap_or_else(|| self.new_record(&completed[&ck]));
                    self.ledger.audits.insert(ck, rec);
                    self.begin_attempt(ck);
                    self.finish(ck, Outcome::Skipped, format!("latest-only selected {newest}"), Vec::new(), progress)?;
                }
            }
        }
        if let Some(newest) = fresh.last() {
            self.ledger.cursor = Some(*newest);
        }
        for (ck, rec) in &self.ledger.audits {
            // Selected before but never started (a cycle interrupted, or the
            // disk budget reached): still owed its first attempt.
            let open = rec.open_attempt().is_some() || rec.attempts.is_empty();
            let due = rec.outcome.is_some_and(Outcome::is_retried)
                && rec.open_attempt().is_none()
                && may_attempt(rec.next_due_s, now_s, rec.attempted_in(self.cycle));
            if open || due {
                list.insert(*ck);
            }
        }
        for ck in &list {
            if let (false, Some(seen)) = (self.ledger.audits.contains_key(ck), completed.get(ck)) {
                let rec = self.new_record(seen);
                self.ledger.audits.insert(*ck, rec);
            }
        }
        list.retain(|ck| self.ledger.audits.contains_key(ck));
        self.save()?;
        Ok(list.into_iter().collect())
    }

    /// The first checkpoint selection took, kept once: staleness is measured
    /// from it until something is verified (a version 1 ledger: the oldest
    /// audited, else the first taken now).
    pub(super) fn first_seen(&mut self, completed: &Completed) {
        if self.ledger.first_seen.is_some() {
            return;
        }
        let cursor = self.ledger.cursor.unwrap_or(u64::MAX);
        let oldest = self.ledger.audits.values().min_by_key(|r| r.completed_ms);
        self.ledger.first_seen = match oldest {
            Some(r) => Some(FirstSeen { checkpoint: r.checkpoint, completed_ms: r.completed_ms }),
            None => completed
                .range(cursor.saturating_add(1)..)
                .next()
                .map(|(ck, seen)| FirstSeen { checkpoint: *ck, completed_ms: seen.completed_ms }),
        };
    }

    pub(super) fn over_budget(&self, ck: u64) -> Option<String> {
        if self.ledger.audits.get(&ck).and_then(|r| r.open_attempt()).is_some_and(|a| a.done(Step::Collect).is_some()) {
            return None; // its bundle is already on disk
        }
        let used = dir_bytes(&self.state);
        let need = used.saturating_add(self.config.bounds.bundle_bytes);
        (need > self.config.disk_budget_bytes).then(|| {
            format!(
                "the state directory holds {used} bytes; one more bundle of up to {} would pass disk_budget_bytes {}: \
                 no audit is started and nothing is deleted",
                self.config.bounds.bundle_bytes, self.config.disk_budget_bytes
            )
        })
    }

    /// Collects, before auditing any, the checkpoints this cycle audits: the
    /// job's retention does not wait for the audits ahead of one (a cycle of
    /// slow references once let the captures of its last checkpoints be
    /// purged). A windowed audit is collected when its turn comes, since its
    /// increment starts from the state the audit before it leaves; before
    /// the shape is known, only checkpoints whose whole lineage is within
    /// reach are collected ahead (a windowed one's first audits are whole
    /// lineages). Stops at the disk budget (the cycle then says so); false
    /// when interrupted.
    pub(super) fn collect_ahead(&mut self, list: &[u64], progress: &mut dyn RunProgress) -> Result<bool, RunError> {
        let ahead: Vec<u64> = match self.ledger.shape {
            Shape::RecordWise => list.to_vec(),
            Shape::Unknown => list.iter().copied().filter(|ck| *ck as usize <= MAX_REACH_BACK).collect(),
            Shape::Windowed => Vec::new(),
        };
        for ck in ahead {
            if self.over_budget(ck).is_some() {
                break;
            }
            let collected = self.ledger.audits[&ck].open_attempt().is_some_and(|a| a.done(Step::Collect).is_some());
            if collected {
                continue;
            }
            self.event("collected-ahead", json!({"checkpoint": ck}));
            if !self.audit(ck, false, progress)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// A checkpoint completed since the cycle began: collect it now, before
    /// the job's retention purges what bounds it; it is audited next cycle.
    pub(super) fn collect_new_checkpoints(&mut self, progress: &mut dyn RunProgress) -> Result<(), RunError> {
        let completed = self.completed_now()?;
        if self.replaced(&completed).is_some() {
            // A reset mid-cycle: the next cycle retires what it replaced.
            return Ok(());
        }
        self.observe(&completed);
        let cursor = self.ledger.cursor.unwrap_or(u64::MAX);
        let new: Vec<CheckpointIdentity> = completed
            .into_values()
            .filter(|seen| {
                let ck = seen.checkpoint;
                ck > cursor && !self.eligible.contains(&ck) && !self.ledger.audits.contains_key(&ck)
            })
            .collect();
        for seen in new {
            let ck = seen.checkpoint;
            // Waiting from an earlier cycle, or collected early in this one,
            // whether that collection held or not: a collection that fails
            // (the job moving faster than it copies) frees no place, or a
            // cycle would never end while the job runs.
            let cycle = self.cycle;
            let early = self
                .ledger
                .audits
                .values()
                .filter(|r| !self.listed.contains(&r.checkpoint))
                .filter(|r| {
                    r.attempted_in(cycle)
                        || r.open_attempt().is_some_and(|a| a.steps.len() == 1 && a.done(Step::Collect).is_some())
                })
                .count();
            if early >= MAX_COLLECTED_EARLY {
                return Ok(());
            }
            self.eligible.insert(ck);
            if self.over_budget(ck).is_some() {
                continue;
            }
            let rec = self.new_record(&seen);
            self.ledger.audits.insert(ck, rec);
            self.event("collected-early", json!({"checkpoint": ck}));
            if !self.audit(ck, false, progress)? {
                return Ok(());
            }
        }
        Ok(())
    }
}
