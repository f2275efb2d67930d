//! Walking back from the audited interval through the barriers the sink's
//! evidence names, and reading what the walk finds: each interval's evidence,
//! the source's positions at the bounding checkpoints, the destinations the
//! evidence records.

use std::collections::BTreeSet;

use clink_bundle::Bundle;
use clink_connectors::clickhouse::destination::Destination;
use clink_engine::checkpoint::participant_name;
use clink_engine::operators::kafka_source::decode_position;

use super::interval::read_subtask_interval;
use super::{list, problem_or_refusal, Crossing, Interval, Scope, ScopeError, ScopeKind, Start, MAX_INTERVALS};
use crate::evidence::{self, SinkPlace, Unread};

impl Scope {
    /// Walks back from the audited interval through the previous barriers.
    pub(super) fn walk(
        &mut self,
        bundle: &Bundle,
        completed: &BTreeSet<u64>,
        restored: Option<(u64, u64)>,
    ) -> Result<(), ScopeError> {
        let n = self.request.checkpoint;
        let mut epoch = n;
        let mut intervals = Vec::new();
        loop {
            if intervals.len() >= MAX_INTERVALS {
                self.problems.push(format!("the walk back from checkpoint {n} passed {MAX_INTERVALS} intervals"));
                break;
            }
            let (interval, problems) = self.interval(bundle, epoch)?;
            self.problems.extend(problems);
            let Some(previous) = self.previous_barrier(&interval) else {
                self.problems.push(format!(
                    "no sink subtask's evidence of interval {epoch} is in the bundle, so the intervals before it are not known (collect with --include-captures and --epochs all, or --epochs reaching back that far)"
                ));
                intervals.push(interval);
                self.start = Start::RunStart;
                break;
            };
            intervals.push(interval);
            if previous >= epoch {
                self.problems.push(format!(
                    "interval {epoch} names barrier {previous} before it, which is not earlier: the evidence is inconsistent"
                ));
                break;
            }
            if previous + 1 != epoch {
                self.crossings.push(Crossing {
                    restored_from: previous,
                    first_epoch: epoch,
                    recorded: restored == Some((previous, epoch)),
                });
            }
            let stop = match self.request.kind {
                ScopeKind::Interval => previous == 0 || completed.contains(&previous),
                ScopeKind::Lineage => previous == 0,
                ScopeKind::Increment { base } if previous == base => true,
                ScopeKind::Increment { base } if previous < base => {
                    return Err(ScopeError::Refused(format!(
                        "--since {base}: checkpoint {base} is not on the lineage of checkpoint {n}; a restore went back past it, to checkpoint {previous}"
                    )))
                }
                ScopeKind::Increment { .. } => false,
            };
            if stop {
                self.start = if previous == 0 { Start::RunStart } else { Start::Checkpoint(previous) };
                break;
            }
            epoch = previous;
        }
        intervals.reverse();
        self.crossings.reverse();
        let on_chain: BTreeSet<u64> = intervals.iter().map(|i| i.epoch).collect();
        let mut checkpoints: Vec<u64> = intervals.iter().map(|i| i.epoch).filter(|e| completed.contains(e)).collect();
        if let Start::Checkpoint(c) = self.start {
            checkpoints.insert(0, c);
        }
        self.checkpoints = checkpoints;
        self.intervals = intervals;
        // The base's own interval says what the sink had recorded there.
        if let ScopeKind::Increment { base } = self.request.kind {
            let (interval, _) = self.interval(bundle, base)?;
            self.base_watermark = interval.recorded_watermark();
            if self.base_watermark.is_none() {
                self.problems.push(format!(
                    "the sink's evidence of checkpoint {base} (the increment's base) is not in the bundle whole, so the watermark it recorded there is not known (collect with --epochs reaching back to {base})"
                ));
            }
        }
        // The run a restore at the scope's start discarded, and what came after.
        let mut sink_epochs: BTreeSet<u64> = BTreeSet::new();
        for e in bundle.manifest.epochs.iter().filter(|e| e.role == "sink" && e.operator_id() == self.shape.sink) {
            sink_epochs.insert(e.epoch);
        }
        for crossing in &self.crossings {
            for e in sink_epochs.range(crossing.restored_from + 1..crossing.first_epoch) {
                if !on_chain.contains(e) {
                    let (interval, _) = self.interval(bundle, *e)?;
                    self.discarded.push(interval);
                }
            }
        }
        for e in sink_epochs.range(n + 1..) {
            let (interval, _) = self.interval(bundle, *e)?;
            self.after.push(interval);
        }
        Ok(())
    }

    /// The previous barrier every subtask's evidence of `interval` names (they must agree).
    fn previous_barrier(&mut self, interval: &Interval) -> Option<u64> {
        let named: BTreeSet<u64> =
            interval.subtasks.iter().filter_map(|s| s.evidence.as_ref().map(|e| e.previous_barrier)).collect();
        if named.len() > 1 {
            self.problems.push(format!(
                "the sink's subtasks disagree on the barrier before interval {}: {}",
                interval.epoch,
                list(&named)
            ));
        }
        named.into_iter().next_back()
    }

    /// One interval's evidence and rows from the bundle, every sink
    /// subtask's, and what is not whole in it; evidence that names another
    /// place than its own refuses the scope.
    fn interval(&self, bundle: &Bundle, epoch: u64) -> Result<(Interval, Vec<String>), ScopeError> {
        let mut subtasks = Vec::new();
        let mut problems = Vec::new();
        for subtask in 0..self.shape.sink_parallelism {
            let place = SinkPlace { sink: self.shape.sink, uid: &self.shape.sink_uid, subtask, epoch };
            let (s, problem) = read_subtask_interval(bundle, &place, &self.kinds)?;
            problems.extend(problem);
            subtasks.push(s);
        }
        let previous_barrier =
            subtasks.iter().find_map(|s| s.evidence.as_ref().map(|e| e.previous_barrier)).unwrap_or(0);
        Ok((Interval { epoch, previous_barrier, subtasks }, problems))
    }

    /// The source's positions at the scope's checkpoints.
    pub(super) fn read_positions(&mut self, bundle: &Bundle) -> Result<(), ScopeError> {
        let participant = participant_name(self.shape.source, 0);
        let wanted: Vec<u64> = match self.request.kind {
            ScopeKind::Interval => {
                let mut w = vec![self.request.checkpoint];
                if let Start::Checkpoint(c) = self.start {
                    w.insert(0, c);
                }
                w
            }
            _ => self.checkpoints.clone(),
        };
        for c in wanted {
            let generation = match evidence::completed(bundle, c) {
                Ok(m) => m.generation,
                Err(e) => {
                    problem_or_refusal(e, &mut self.problems)?;
                    continue;
                }
            };
            match evidence::snapshot(bundle, generation, &participant, c) {
                Ok(v) => match decode_position(&v.slots) {
                    Ok(p) => {
                        self.positions.insert(c, p);
                    }
                    Err(e) => self.problems.push(format!("the source's position at checkpoint {c}: {e}")),
                },
                Err(Unread::Absent(why)) => self.problems.push(format!(
                    "the source's position at checkpoint {c} is not in the bundle ({why}; collect with --include-state --include-captures)"
                )),
                Err(e) => {
                    problem_or_refusal(e, &mut self.problems)?;
                }
            }
        }
        Ok(())
    }

    pub(super) fn read_destinations(&mut self) {
        let mut all: Vec<Destination> = Vec::new();
        for interval in &self.intervals {
            for s in &interval.subtasks {
                let Some(doc) = s.evidence.as_ref().and_then(|e| e.sink.get("destination")) else { continue };
                match serde_json::from_value::<Destination>(doc.clone()) {
                    Ok(d) => {
                        if !all.contains(&d) {
                            all.push(d);
                        }
                    }
                    Err(e) => self.problems.push(format!(
                        "interval {} of sink subtask {}: the recorded destination does not read: {e}",
                        interval.epoch, s.subtask
                    )),
                }
            }
        }
        let n = self.request.checkpoint;
        self.destination = self
            .intervals
            .iter()
            .filter(|i| i.epoch == n)
            .flat_map(|i| &i.subtasks)
            .find_map(|s| s.evidence.as_ref().and_then(|e| e.sink.get("destination")))
            .and_then(|d| serde_json::from_value(d.clone()).ok())
            .or_else(|| all.first().cloned());
        self.destinations = all;
    }
}
