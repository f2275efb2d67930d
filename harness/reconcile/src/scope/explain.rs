//! What in a scope's evidence can explain a row the destination holds more
//! than once: the rows a run discarded by a restore the scope passes had
//! sent, and the intervals whose resend in doubt may have landed twice.

use std::collections::BTreeMap;

use super::Scope;
use crate::compare::Row;

impl Scope {
    /// What can explain a duplicate in the scope, each with the rows it
    /// accounts for: the rows a run discarded by a restore the scope passes
    /// had sent, and the intervals whose resend may have landed twice.
    pub fn duplicate_sources(&self) -> Vec<(String, BTreeMap<Row, usize>)> {
        let scope = self;
        let mut sources = Vec::new();
        for d in &scope.discarded {
            let mut rows: BTreeMap<Row, usize> = BTreeMap::new();
            for s in &d.subtasks {
                let sent = s.rows.as_ref().or(s.rows_without_evidence.as_ref().map(|(r, _)| r));
                for r in sent.into_iter().flatten() {
                    *rows.entry(r.clone()).or_default() += 1;
                }
            }
            let restore = scope
                .crossings
                .iter()
                .find(|c| c.restored_from < d.epoch && d.epoch < c.first_epoch)
                .map_or("a restore".to_string(), |c| format!("the restore to checkpoint {}", c.restored_from));
            sources.push((format!("{restore}: interval {} of the run it discarded sent them", d.epoch), rows));
        }
        for interval in scope.intervals.iter().chain(&scope.discarded) {
            for s in interval.subtasks.iter().filter(|s| s.may_land_twice()) {
                let mut rows: BTreeMap<Row, usize> = BTreeMap::new();
                for r in s.rows.iter().flatten() {
                    *rows.entry(r.clone()).or_default() += 1;
                }
                sources.push((
                format!("the INSERT of interval {} (sink subtask {}), resent in doubt: its ledger says it may have landed twice", interval.epoch, s.subtask),
                rows,
            ));
            }
        }
        if scope
            .crossings
            .iter()
            .any(|c| !scope.discarded.iter().any(|d| c.restored_from < d.epoch && d.epoch < c.first_epoch))
            && !scope.crossings.is_empty()
        {
            // A restore whose discarded intervals the bundle does not hold: say so, without counting.
            for c in &scope.crossings {
                sources.push((
                format!("the restore to checkpoint {} (the run it discarded is not in the bundle, so its rows are not counted)", c.restored_from),
                BTreeMap::new(),
            ));
            }
        }
        sources
    }
}
