//! Coverage: what the audits have verified, per (topic, partition), as
//! merged half-open offset ranges `[start, end)`, the gaps between, and the
//! discrepancies, which stay listed.
//!
//! It owns the arithmetic of ranges and the rule of what counts. It never
//! reads a report or a file: the caller builds a [`Coverage`] from each
//! audit's current record ([`AuditSpan`]: its id, its outcome, whether an
//! operator acknowledged it, and per topic and partition its scope's offset
//! range). Building is a union: the order in which audits are added does
//! not matter, and adding the same record twice changes nothing.
//!
//! What counts (the seed's table of outcomes, issue 20):
//! - Only `passed` and `empty` ranges are verified ([`Outcome::counts_toward_coverage`]).
//!   Every other outcome, and any offset between the lowest and highest
//!   offset seen that no audit covered (`unaudited`), is a gap.
//! - **A later pass never clears a discrepancy.** Two things follow, and they
//!   are different:
//!   - *The discrepancy list.* A discrepancy, once recorded, is listed by
//!     [`Coverage::discrepancies`] whatever else covers its offsets, whether
//!     or not it is acknowledged. Nothing in this type removes one.
//!   - *Coverage.* A discrepancy is "a gap until acknowledged": while it is
//!     unacknowledged, its offsets are never verified, even where a passed or
//!     empty audit covers them (earlier or later: order cannot matter); they
//!     are a gap tagged `discrepancy` (and `passed`). Once acknowledged, its
//!     offsets follow the ordinary rule: verified where a passed or empty
//!     audit covers them, a gap tagged `discrepancy` where none does.
//!     Acknowledgement alone never verifies an offset.
//! - The other gaps (`partial`, `error`, `unsupported`, `expired`,
//!   `skipped`, unaudited) are filled by a passed or empty audit that covers
//!   the same offsets, such as a windowed increment that spans a checkpoint
//!   whose audit did not finish. The attempts that failed stay in that
//!   audit's report; they are not coverage's to keep.
//! - If the same audit is recorded once acknowledged and once not, it is
//!   unacknowledged: the union never lowers what a discrepancy holds.
//! - An empty range (`start == end`) covers nothing and moves neither the
//!   lowest nor the highest offset; a discrepancy on one is still listed.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::outcome::Outcome;

/// A half-open offset range `[start, end)`; `start <= end`. Read from JSON
/// as `{"start": .., "end": ..}`, a reversed one refused, an unknown field
/// refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "RawRange")]
pub struct OffsetRange {
    start: u64,
    end: u64,
}

/// A range that cannot be one.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("offset range [{start}, {end}): start is after end")]
pub struct RangeError {
    pub start: u64,
    pub end: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRange {
    start: u64,
    end: u64,
}

impl TryFrom<RawRange> for OffsetRange {
    type Error = RangeError;

    fn try_from(raw: RawRange) -> Result<Self, RangeError> {
        OffsetRange::new(raw.start, raw.end)
    }
}

impl OffsetRange {
    /// `[start, end)`, refused when `start > end`.
    pub fn new(start: u64, end: u64) -> Result<Self, RangeError> {
        if start > end {
            return Err(RangeError { start, end });
        }
        Ok(OffsetRange { start, end })
    }

    pub fn start(self) -> u64 {
        self.start
    }

    pub fn end(self) -> u64 {
        self.end
    }

    pub fn is_empty(self) -> bool {
        self.start == self.end
    }

    pub fn contains(self, offset: u64) -> bool {
        self.start <= offset && offset < self.end
    }
}

/// Disjoint, sorted, non-adjacent ranges, none empty: a set of offsets.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct RangeSet(Vec<OffsetRange>);

impl RangeSet {
    /// The ranges, sorted by start; no two overlap or touch.
    pub fn ranges(&self) -> &[OffsetRange] {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Adds `range`, merging it with every range it overlaps or touches.
    pub fn insert(&mut self, range: OffsetRange) {
        if range.is_empty() {
            return;
        }
        let (mut start, mut end) = (range.start, range.end);
        let mut kept = Vec::with_capacity(self.0.len() + 1);
        for r in self.0.drain(..) {
            if r.end < start || r.start > end {
                kept.push(r);
            } else {
                start = start.min(r.start);
                end = end.max(r.end);
            }
        }
        let at = kept.partition_point(|r| r.start < start);
        kept.insert(at, OffsetRange { start, end });
        self.0 = kept;
    }

    pub fn contains(&self, offset: u64) -> bool {
        let at = self.0.partition_point(|r| r.end <= offset);
        self.0.get(at).is_some_and(|r| r.contains(offset))
    }

    /// The offsets of `self` that are not in `other`.
    pub fn difference(&self, other: &RangeSet) -> RangeSet {
        let mut out = Vec::new();
        for r in &self.0 {
            let mut start = r.start;
            for o in other.0.iter().filter(|o| o.end > r.start && o.start < r.end) {
                if o.start > start {
                    out.push(OffsetRange { start, end: o.start });
                }
                start = start.max(o.end);
            }
            if start < r.end {
                out.push(OffsetRange { start, end: r.end });
            }
        }
        RangeSet(out)
    }
}

/// One log partition.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Partition {
    pub topic: String,
    pub partition: u32,
}

/// One audit's current record, as coverage needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditSpan {
    /// The audit's id (`clink-audit-report` v1).
    pub audit: String,
    /// The outcome of its latest attempt.
    pub outcome: Outcome,
    /// Whether an operator acknowledged it (only a discrepancy's matters).
    pub acknowledged: bool,
    /// Its scope's offset range per topic and partition.
    pub ranges: Vec<(Partition, OffsetRange)>,
}

/// A gap: offsets between the lowest and highest seen that are not verified.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Gap {
    pub range: OffsetRange,
    /// The outcomes of the audits whose ranges cover every offset of this
    /// gap; empty when no audit covered it.
    pub outcomes: BTreeSet<Outcome>,
}

impl Gap {
    pub fn is_unaudited(&self) -> bool {
        self.outcomes.is_empty()
    }

    /// The gap's tags as status prints them: the outcomes, or `unaudited`.
    pub fn tags(&self) -> Vec<&'static str> {
        if self.is_unaudited() {
            return vec!["unaudited"];
        }
        self.outcomes.iter().map(|o| o.as_str()).collect()
    }
}

/// A discrepancy as listed: whatever else covers its offsets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ListedDiscrepancy {
    pub audit: String,
    pub partition: Partition,
    pub range: OffsetRange,
    pub acknowledged: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct PartitionCoverage {
    by_outcome: BTreeMap<Outcome, RangeSet>,
    /// (audit, range) of each discrepancy -> acknowledged (the AND of
    /// every record of it).
    discrepancies: BTreeMap<(String, OffsetRange), bool>,
    lowest: Option<u64>,
    highest: Option<u64>,
}

impl PartitionCoverage {
    fn add(&mut self, audit: &str, outcome: Outcome, acknowledged: bool, range: OffsetRange) {
        if outcome == Outcome::Discrepancy {
            let held = self.discrepancies.entry((audit.to_string(), range)).or_insert(acknowledged);
            *held = *held && acknowledged;
        }
        if range.is_empty() {
            return;
        }
        self.by_outcome.entry(outcome).or_default().insert(range);
        self.lowest = Some(self.lowest.map_or(range.start, |l| l.min(range.start)));
        self.highest = Some(self.highest.map_or(range.end, |h| h.max(range.end)));
    }

    fn counted(&self) -> RangeSet {
        let mut set = RangeSet::default();
        for (outcome, ranges) in &self.by_outcome {
            if outcome.counts_toward_coverage() {
                ranges.0.iter().for_each(|r| set.insert(*r));
            }
        }
        set
    }

    fn held(&self) -> RangeSet {
        let mut set = RangeSet::default();
        for ((_, range), acknowledged) in &self.discrepancies {
            if !acknowledged {
                set.insert(*range);
            }
        }
        set
    }

    fn verified(&self) -> RangeSet {
        self.counted().difference(&self.held())
    }

    fn gaps(&self) -> Vec<Gap> {
        let (Some(lowest), Some(highest)) = (self.lowest, self.highest) else {
            return Vec::new();
        };
        let verified = self.verified();
        // Every range's ends: between two neighbours, membership in each set
        // is constant.
        let mut points: BTreeSet<u64> = BTreeSet::from([lowest, highest]);
        for r in self.by_outcome.values().chain([&verified]).flat_map(|s| s.0.iter()) {
            points.insert(r.start);
            points.insert(r.end);
        }
        let points: Vec<u64> = points.into_iter().collect();
        let mut gaps: Vec<Gap> = Vec::new();
        for pair in points.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            if verified.contains(a) {
                continue;
            }
            let outcomes: BTreeSet<Outcome> =
                self.by_outcome.iter().filter(|(_, s)| s.contains(a)).map(|(o, _)| *o).collect();
            match gaps.last_mut() {
                Some(last) if last.range.end == a && last.outcomes == outcomes => last.range.end = b,
                _ => gaps.push(Gap { range: OffsetRange { start: a, end: b }, outcomes }),
            }
        }
        gaps
    }
}

/// Coverage of every partition the audits named.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Coverage {
    partitions: BTreeMap<Partition, PartitionCoverage>,
}

impl Coverage {
    /// Coverage of `audits`, in any order.
    pub fn from_audits<'a>(audits: impl IntoIterator<Item = &'a AuditSpan>) -> Self {
        let mut coverage = Coverage::default();
        audits.into_iter().for_each(|a| coverage.add(a));
        coverage
    }

    /// Adds one audit's record (a union: see the module's documentation).
    pub fn add(&mut self, audit: &AuditSpan) {
        for (partition, range) in &audit.ranges {
            self.partitions.entry(partition.clone()).or_default().add(
                &audit.audit,
                audit.outcome,
                audit.acknowledged,
                *range,
            );
        }
    }

    /// The partitions seen, sorted.
    pub fn partitions(&self) -> impl Iterator<Item = &Partition> {
        self.partitions.keys()
    }

    /// `[lowest, highest)` offset seen in `partition`, over every outcome.
    pub fn extent(&self, partition: &Partition) -> Option<OffsetRange> {
        let p = self.partitions.get(partition)?;
        Some(OffsetRange { start: p.lowest?, end: p.highest? })
    }

    /// The verified offsets of `partition`: those of passed and empty
    /// audits, less those of unacknowledged discrepancies.
    pub fn verified(&self, partition: &Partition) -> RangeSet {
        self.partitions.get(partition).map(PartitionCoverage::verified).unwrap_or_default()
    }

    /// The gaps of `partition`, sorted: every offset of
    /// [`extent`](Self::extent) that is not verified, split where the set
    /// of outcomes covering it changes.
    pub fn gaps(&self, partition: &Partition) -> Vec<Gap> {
        self.partitions.get(partition).map(PartitionCoverage::gaps).unwrap_or_default()
    }

    /// Every discrepancy recorded, acknowledged or not, whatever passed
    /// over its offsets; sorted by partition, audit and range.
    pub fn discrepancies(&self) -> Vec<ListedDiscrepancy> {
        let mut out = Vec::new();
        for (partition, p) in &self.partitions {
            for ((audit, range), acknowledged) in &p.discrepancies {
                out.push(ListedDiscrepancy {
                    audit: audit.clone(),
                    partition: partition.clone(),
                    range: *range,
                    acknowledged: *acknowledged,
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p0() -> Partition {
        Partition { topic: "orders".into(), partition: 0 }
    }

    fn r(start: u64, end: u64) -> OffsetRange {
        OffsetRange::new(start, end).unwrap()
    }

    fn span(audit: &str, outcome: Outcome, acknowledged: bool, start: u64, end: u64) -> AuditSpan {
        AuditSpan { audit: audit.into(), outcome, acknowledged, ranges: vec![(p0(), r(start, end))] }
    }

    fn tags(gaps: &[Gap]) -> Vec<(u64, u64, Vec<&'static str>)> {
        gaps.iter().map(|g| (g.range.start, g.range.end, g.tags())).collect()
    }

    #[test]
    fn a_reversed_range_is_refused() {
        assert_eq!(OffsetRange::new(5, 4), Err(RangeError { start: 5, end: 4 }));
        assert!(OffsetRange::new(4, 4).unwrap().is_empty());
        assert_eq!(RangeError { start: 5, end: 4 }.to_string(), "offset range [5, 4): start is after end");
    }

    #[test]
    fn a_range_reads_back_and_a_reversed_one_is_refused() {
        let text = serde_json::to_string(&r(3, 9)).unwrap();
        assert_eq!(text, r#"{"start":3,"end":9}"#);
        assert_eq!(serde_json::from_str::<OffsetRange>(&text).unwrap(), r(3, 9));
        let err = serde_json::from_str::<OffsetRange>(r#"{"start":9,"end":3}"#).unwrap_err();
        assert!(err.to_string().contains("offset range [9, 3): start is after end"), "{err}");
        assert!(serde_json::from_str::<OffsetRange>(r#"{"start":1,"end":3,"x":0}"#).is_err());
        assert!(serde_json::from_str::<OffsetRange>(r#"{"start":1}"#).is_err());
    }

    #[test]
    fn passed_and_empty_merge_and_unaudited_is_a_gap() {
        let audits = [
            span("a", Outcome::Passed, false, 0, 10),
            span("b", Outcome::Empty, false, 10, 20),
            span("c", Outcome::Passed, false, 30, 40),
        ];
        let c = Coverage::from_audits(&audits);
        assert_eq!(c.verified(&p0()).ranges(), [r(0, 20), r(30, 40)]);
        assert_eq!(tags(&c.gaps(&p0())), [(20, 30, vec!["unaudited"])]);
        assert_eq!(c.extent(&p0()), Some(r(0, 40)));
    }

    #[test]
    fn every_other_outcome_is_a_gap_tagged_with_it() {
        for o in Outcome::ALL.into_iter().filter(|o| !o.counts_toward_coverage()) {
            let c = Coverage::from_audits(&[span("a", Outcome::Passed, false, 0, 10), span("b", o, false, 10, 20)]);
            assert_eq!(c.verified(&p0()).ranges(), [r(0, 10)], "{o:?}");
            assert_eq!(tags(&c.gaps(&p0())), [(10, 20, vec![o.as_str()])], "{o:?}");
        }
    }

    #[test]
    fn a_later_pass_never_clears_an_unacknowledged_discrepancy() {
        let found = span("a", Outcome::Discrepancy, false, 0, 10);
        let later = span("b", Outcome::Passed, false, 5, 20);
        let c = Coverage::from_audits([&found, &later]);
        assert_eq!(c.verified(&p0()).ranges(), [r(10, 20)]);
        assert_eq!(tags(&c.gaps(&p0())), [(0, 5, vec!["discrepancy"]), (5, 10, vec!["passed", "discrepancy"])]);
        assert_eq!(c.discrepancies().len(), 1);
        assert!(!c.discrepancies()[0].acknowledged);
    }

    #[test]
    fn acknowledged_it_stays_listed_and_a_pass_may_then_verify() {
        let found = span("a", Outcome::Discrepancy, true, 0, 10);
        let later = span("b", Outcome::Passed, false, 5, 20);
        let c = Coverage::from_audits([&found, &later]);
        assert_eq!(c.verified(&p0()).ranges(), [r(5, 20)]);
        // Acknowledgement alone verifies nothing.
        assert_eq!(tags(&c.gaps(&p0())), [(0, 5, vec!["discrepancy"])]);
        let listed = c.discrepancies();
        assert_eq!(listed.len(), 1);
        assert_eq!((listed[0].audit.as_str(), listed[0].range, listed[0].acknowledged), ("a", r(0, 10), true));
    }

    #[test]
    fn recorded_both_ways_it_is_unacknowledged() {
        let c = Coverage::from_audits(&[
            span("a", Outcome::Discrepancy, true, 0, 10),
            span("a", Outcome::Discrepancy, false, 0, 10),
            span("b", Outcome::Passed, false, 0, 10),
        ]);
        assert!(c.verified(&p0()).is_empty());
        assert!(!c.discrepancies()[0].acknowledged);
    }

    #[test]
    fn a_pass_fills_a_partial_gap() {
        let c = Coverage::from_audits(&[
            span("a", Outcome::Partial, false, 0, 10),
            span("b", Outcome::Passed, false, 0, 20),
        ]);
        assert_eq!(c.verified(&p0()).ranges(), [r(0, 20)]);
        assert!(c.gaps(&p0()).is_empty());
    }

    #[test]
    fn an_empty_range_covers_nothing_but_its_discrepancy_is_listed() {
        let c = Coverage::from_audits(&[
            span("a", Outcome::Passed, false, 10, 20),
            span("b", Outcome::Discrepancy, false, 30, 30),
            span("c", Outcome::Passed, false, 5, 5),
        ]);
        assert_eq!(c.extent(&p0()), Some(r(10, 20)));
        assert_eq!(c.verified(&p0()).ranges(), [r(10, 20)]);
        assert!(c.gaps(&p0()).is_empty());
        assert_eq!(c.discrepancies().len(), 1);
    }

    #[test]
    fn partitions_are_apart() {
        let p1 = Partition { topic: "orders".into(), partition: 1 };
        let a = AuditSpan {
            audit: "a".into(),
            outcome: Outcome::Discrepancy,
            acknowledged: false,
            ranges: vec![(p1.clone(), r(0, 10))],
        };
        let c = Coverage::from_audits([&a, &span("b", Outcome::Passed, false, 0, 10)]);
        assert_eq!(c.verified(&p0()).ranges(), [r(0, 10)]);
        assert!(c.verified(&p1).is_empty());
        assert_eq!(c.partitions().count(), 2);
        let unknown = Partition { topic: "x".into(), partition: 0 };
        assert!(c.verified(&unknown).is_empty() && c.gaps(&unknown).is_empty() && c.extent(&unknown).is_none());
    }

    #[test]
    fn range_set_merges_touching_and_overlapping() {
        let mut s = RangeSet::default();
        for (a, b) in [(10, 20), (0, 5), (5, 10), (30, 35), (32, 40), (50, 50)] {
            s.insert(r(a, b));
        }
        assert_eq!(s.ranges(), [r(0, 20), r(30, 40)]);
        let mut cut = RangeSet::default();
        cut.insert(r(3, 4));
        cut.insert(r(15, 33));
        assert_eq!(s.difference(&cut).ranges(), [r(0, 3), r(4, 15), r(33, 40)]);
    }

    const DOMAIN: u64 = 48;

    fn arb_span() -> impl Strategy<Value = AuditSpan> {
        (0..4usize, 0..DOMAIN, 0..DOMAIN, 0..8usize, any::<bool>(), 0..2u32).prop_map(|(id, a, b, o, ack, part)| {
            AuditSpan {
                audit: format!("audit-{id}"),
                outcome: Outcome::ALL[o],
                acknowledged: ack,
                ranges: vec![(
                    Partition { topic: "t".into(), partition: part },
                    OffsetRange { start: a.min(b), end: a.max(b) },
                )],
            }
        })
    }

    fn in_input(audits: &[AuditSpan], part: &Partition, x: u64, keep: impl Fn(&AuditSpan) -> bool) -> bool {
        audits.iter().filter(|a| keep(a)).any(|a| a.ranges.iter().any(|(p, r)| p == part && r.contains(x)))
    }

    fn well_formed(ranges: &[OffsetRange], may_touch: bool) -> bool {
        ranges.iter().all(|r| !r.is_empty())
            && ranges.windows(2).all(|w| if may_touch { w[0].end <= w[1].start } else { w[0].end < w[1].start })
    }

    proptest! {
        #[test]
        fn order_does_not_matter_and_twice_is_once(
            audits in proptest::collection::vec(arb_span(), 0..12),
            seed in any::<u64>(),
        ) {
            let once = Coverage::from_audits(&audits);
            let mut shuffled = audits.clone();
            // A deterministic permutation from the seed.
            let n = shuffled.len();
            for i in (1..n).rev() {
                let j = (seed.wrapping_mul(6364136223846793005).wrapping_add(i as u64) % (i as u64 + 1)) as usize;
                shuffled.swap(i, j);
            }
            prop_assert_eq!(&Coverage::from_audits(&shuffled), &once);
            prop_assert_eq!(&Coverage::from_audits(audits.iter().chain(audits.iter())), &once);
            let mut reversed = audits.clone();
            reversed.reverse();
            prop_assert_eq!(Coverage::from_audits(&reversed), once);
        }

        #[test]
        fn verified_and_gaps_partition_the_extent(audits in proptest::collection::vec(arb_span(), 0..12)) {
            let c = Coverage::from_audits(&audits);
            for part in c.partitions() {
                let verified = c.verified(part);
                let gaps = c.gaps(part);
                prop_assert!(well_formed(verified.ranges(), false));
                let gap_ranges: Vec<OffsetRange> = gaps.iter().map(|g| g.range).collect();
                prop_assert!(well_formed(&gap_ranges, true));
                // Two touching gaps always differ in their tags.
                for w in gaps.windows(2) {
                    prop_assert!(w[0].range.end < w[1].range.start || w[0].outcomes != w[1].outcomes);
                }
                let extent = c.extent(part);
                for x in 0..DOMAIN + 1 {
                    let counted = in_input(&audits, part, x, |a| a.outcome.counts_toward_coverage());
                    let held = in_input(&audits, part, x, |a| a.outcome == Outcome::Discrepancy && !a.acknowledged);
                    // The union of verified ranges is that of passed and empty
                    // inputs, less unacknowledged discrepancies.
                    prop_assert_eq!(verified.contains(x), counted && !held, "offset {}", x);
                    let in_gaps: Vec<&Gap> = gaps.iter().filter(|g| g.range.contains(x)).collect();
                    let in_extent = extent.is_some_and(|e| e.contains(x));
                    // Exactly one of verified and gaps within the extent, none outside.
                    prop_assert_eq!(usize::from(verified.contains(x)) + in_gaps.len(), usize::from(in_extent));
                    if let Some(g) = in_gaps.first() {
                        let expected: BTreeSet<Outcome> = audits
                            .iter()
                            .filter(|a| a.ranges.iter().any(|(p, r)| p == part && r.contains(x)))
                            .map(|a| a.outcome)
                            .collect();
                        prop_assert_eq!(&g.outcomes, &expected);
                    }
                }
            }
        }

        #[test]
        fn every_discrepancy_stays_listed(audits in proptest::collection::vec(arb_span(), 0..12)) {
            let c = Coverage::from_audits(&audits);
            let listed = c.discrepancies();
            for a in audits.iter().filter(|a| a.outcome == Outcome::Discrepancy) {
                let (part, range) = &a.ranges[0];
                let hit = listed.iter().find(|d| d.audit == a.audit && &d.partition == part && d.range == *range);
                prop_assert!(hit.is_some());
                // Unacknowledged in any record: unacknowledged.
                if !a.acknowledged {
                    prop_assert!(hit.is_some_and(|d| !d.acknowledged));
                }
            }
            prop_assert!(listed.len() <= audits.iter().filter(|a| a.outcome == Outcome::Discrepancy).count());
        }
    }
}
