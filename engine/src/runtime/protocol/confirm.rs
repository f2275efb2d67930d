//! The commit-confirmed family's count in the protocol core: a completed
//! checkpoint is confirmed once every commit-confirmed sink of the
//! deployment has confirmed its commit (CommitConfirmed, after the sink's
//! receipt), and only then is its CONFIRMED marker written; the confirmed
//! restore point in memory advances only after that marker is durable
//! ([`Protocol::advance_confirmed`], which the runtime calls after the put).
//!
//! Like the rest of the core it does no I/O, and a confirmation the protocol
//! cannot receive (of a checkpoint this deployment did not complete, twice
//! from one sink, from a task that is not a confirming sink) is an invariant
//! violation that fails the job by name.

use std::collections::{BTreeMap, BTreeSet};

use super::{Protocol, ProtocolError, Step};

/// Completed checkpoints waiting for their sinks' confirmations.
#[derive(Debug, Default)]
pub(super) struct Confirmations {
    awaiting: BTreeMap<u64, BTreeSet<usize>>,
}

impl Confirmations {
    /// A checkpoint completed: its sinks' confirmations are awaited.
    pub(super) fn completed(&mut self, checkpoint: u64) {
        self.awaiting.insert(checkpoint, BTreeSet::new());
    }

    /// A redeploy: the old deployment's confirmations no longer count.
    pub(super) fn redeployed(&mut self) {
        self.awaiting.clear();
    }
}

impl Protocol {
    /// A commit-confirmed sink confirmed its commit of `checkpoint`.
    pub fn confirmed(&mut self, task: usize, checkpoint: u64) -> Result<Vec<Step>, ProtocolError> {
        if !self.config.confirming.contains(&task) {
            return Err(ProtocolError::Invariant(format!(
                "task {task} confirmed checkpoint {checkpoint}, and it is not a commit-confirmed sink"
            )));
        }
        let sinks = self.config.confirming.len();
        let Some(confirmed) = self.confirm.awaiting.get_mut(&checkpoint) else {
            return Err(ProtocolError::Invariant(format!(
                "task {task} confirmed checkpoint {checkpoint}, which is not a completed checkpoint awaiting confirmation"
            )));
        };
        if !confirmed.insert(task) {
            return Err(ProtocolError::Invariant(format!("task {task} confirmed checkpoint {checkpoint} twice")));
        }
        if confirmed.len() < sinks {
            return Ok(Vec::new());
        }
        self.confirm.awaiting.remove(&checkpoint);
        Ok(vec![Step::WriteConfirmed { checkpoint }])
    }

    /// The CONFIRMED marker of `checkpoint` is durable (a confirmation's, or
    /// the in-doubt walk's): the confirmed point in memory may move to it.
    pub fn advance_confirmed(&mut self, checkpoint: u64) {
        self.progress.last_confirmed = self.progress.last_confirmed.max(checkpoint);
    }

    /// The confirmed point a recovery read from the disk.
    pub fn seed_confirmed(&mut self, checkpoint: u64) {
        self.progress.last_confirmed = checkpoint;
    }

    /// The confirmed restore point in memory.
    pub fn confirmed_point(&self) -> u64 {
        self.progress.last_confirmed
    }

    /// Whether this job's sinks confirm their commits.
    pub fn confirms(&self) -> bool {
        !self.config.confirming.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::super::{CheckpointKind, ProtocolConfig, ProtocolDefects, MAX_IN_FLIGHT};
    use super::*;

    /// Task 0 the source, tasks 1 and 2 the Kafka sinks.
    fn protocol() -> Protocol {
        Protocol::new(ProtocolConfig {
            job: 1,
            participants: 3,
            restart_budget: 3,
            max_in_flight: MAX_IN_FLIGHT,
            confirming: [1, 2].into_iter().collect(),
            defects: ProtocolDefects::default(),
        })
    }

    fn complete(p: &mut Protocol) -> u64 {
        let steps = p.request(CheckpointKind::Periodic);
        let Some(Step::Trigger { checkpoint, .. }) = steps.first().cloned() else { panic!("{steps:?}") };
        for task in 0..3 {
            p.ack(task, checkpoint, Ok(())).unwrap();
        }
        checkpoint
    }

    #[test]
    fn a_checkpoint_is_confirmed_once_every_sink_confirmed_it() {
        let mut p = protocol();
        let c = complete(&mut p);
        assert!(p.confirmed(2, c).unwrap().is_empty());
        assert_eq!(p.confirmed(1, c).unwrap(), [Step::WriteConfirmed { checkpoint: c }]);
        // Memory moves only when the runtime says the marker is durable.
        assert_eq!(p.confirmed_point(), 0);
        p.advance_confirmed(c);
        assert_eq!(p.confirmed_point(), c);
        p.advance_confirmed(c - 1);
        assert_eq!(p.confirmed_point(), c, "the confirmed point never moves back");
    }

    #[test]
    fn impossible_confirmations_are_named_violations() {
        let mut p = protocol();
        let never = p.confirmed(1, 5).unwrap_err().to_string();
        assert!(never.contains("not a completed checkpoint"), "{never}");
        let c = complete(&mut p);
        let source = p.confirmed(0, c).unwrap_err().to_string();
        assert!(source.contains("not a commit-confirmed sink"), "{source}");
        p.confirmed(1, c).unwrap();
        assert!(p.confirmed(1, c).unwrap_err().to_string().contains("twice"));
        p.confirmed(2, c).unwrap();
        assert!(p.confirmed(2, c).is_err(), "a confirmed checkpoint is out of tracking");
    }

    #[test]
    fn a_redeploy_drops_the_confirmations_of_the_old_deployment() {
        let mut p = protocol();
        let c = complete(&mut p);
        p.confirmed(1, c).unwrap();
        p.task_failed(2, "boom".into()).unwrap();
        p.redeployed(0, c + 1);
        assert!(p.confirmed(2, c).is_err(), "{c} is no longer awaited");
    }

    #[test]
    fn a_job_without_confirming_sinks_awaits_nothing() {
        let mut p = protocol();
        p.config.confirming.clear();
        let c = complete(&mut p);
        assert!(!p.confirms());
        assert!(p.confirmed(1, c).is_err());
    }
}
