//! Recovery after a crash: the recorded child's process group stopped,
//! what was decided but not published published, the rest left to resume
//! at the step that was running.
//!
//! It never starts a step and never decides an outcome a child did not give.

use std::time::Duration;

use serde_json::json;

use super::{NoProgress, RunError, Runner};
use crate::ledger::Step;
use crate::procs::{stop_orphan, Orphan};

impl Runner<'_> {
    /// After a crash: stop the recorded child's group, publish what was
    /// decided but not published, leave the rest to resume.
    pub(super) fn recover(&mut self) -> Result<(), RunError> {
        if let Some(r) = self.ledger.running.take() {
            let found = stop_orphan(&r.child, Duration::from_secs(10));
            let said = match &found {
                Orphan::Gone => "gone".to_string(),
                Orphan::Reused => "its pid belongs to another process now; nothing signalled".to_string(),
                Orphan::Stopped(n) => format!("stopped ({n} processes)"),
                Orphan::Survived(left) => format!("still running after SIGKILL: {left:?}"),
            };
            self.event(
                "orphan",
                json!({"checkpoint": r.checkpoint, "step": r.step.as_str(), "pid": r.child.pid, "found": said}),
            );
            self.save()?;
        }
        let ids: Vec<u64> = self.ledger.audits.keys().copied().collect();
        for ck in ids {
            let rec = &self.ledger.audits[&ck];
            if let Some(a) = rec.open_attempt() {
                if let Some((outcome, reason)) = a.decided() {
                    self.finish(ck, outcome, reason, Vec::new(), &mut NoProgress)?;
                } else if Step::ALL.iter().all(|s| a.done(*s).is_some()) {
                    let (outcome, reason) = self.concluded(ck);
                    self.finish(ck, outcome, reason, Vec::new(), &mut NoProgress)?;
                }
            } else if rec.outcome.is_some() && !rec.published {
                self.publish(ck, &mut NoProgress)?;
            }
        }
        Ok(())
    }
}
