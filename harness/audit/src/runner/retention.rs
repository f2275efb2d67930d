//! Retention: the evidence of passed audits past the newest
//! `retain_passed` deleted, and only in directories the runner marked as
//! its own.
//!
//! It never deletes a discrepancy's evidence or anything it did not create.

use serde_json::json;

use super::{io_at, RunError, Runner, OWNED_MARK};
use crate::outcome::Outcome;

impl Runner<'_> {
    /// Deletes the evidence of passed audits past the newest `retain_passed`,
    /// and only directories the runner marked as its own.
    pub(super) fn retention(&mut self) -> Result<(), RunError> {
        let passed: Vec<u64> = self
            .ledger
            .audits
            .values()
            .rev()
            .filter(|r| r.outcome.is_some_and(Outcome::counts_toward_coverage) && r.published && !r.evidence_deleted)
            .map(|r| r.checkpoint)
            .collect();
        for ck in passed.into_iter().skip(self.config.retain_passed as usize) {
            let id = self.ledger.audits[&ck].id.clone();
            let dir = self.state.join("audits").join(&id);
            let mark = std::fs::read(dir.join(OWNED_MARK)).unwrap_or_default();
            if mark != id.as_bytes() {
                self.event("retention-skipped", json!({"audit": id, "why": "not marked as the runner's own"}));
                continue;
            }
            std::fs::remove_dir_all(&dir).map_err(io_at(&dir))?;
            if let Some(rec) = self.ledger.audits.get_mut(&ck) {
                rec.evidence_deleted = true;
            }
            self.event("retention-deleted", json!({"audit": id}));
        }
        Ok(())
    }
}
