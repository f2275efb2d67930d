//! The windowed reference: each record's fate, each window's value, its
//! finality at the audited checkpoint, and the source's bound at every
//! checkpoint of the lineage, all from the records read and the scope's
//! recorded positions and watermarks.
//!
//! The source's watermark is the least, over the partitions it still reads,
//! of each partition's greatest event time so far, less the lag; a partition
//! read to its end offset no longer holds it, and once every partition is,
//! the source ends and every window may close. A record arrives at the
//! window when the watermark is at most the least of two bounds: its own
//! partition's greatest earlier time less the lag, and the source's bound at
//! the next checkpoint (aligned barriers let nothing past a barrier through
//! before it). It is at least the watermark the sink recorded at the
//! checkpoint before it. A window closes when the watermark reaches its end
//! plus the lateness; a record for a closed window is dropped. So a record
//! whose window closes above the upper bound was folded in, one whose
//! window closes at or below the floor was dropped, and any other is
//! undetermined, with its window.

use std::collections::BTreeMap;

use serde_json::{json, Value as Json};

use crate::cells;
use crate::scope::{LineagePoint, ScopeDoc};
use crate::transform::{Event, WindowRules};

/// The most the watermark can be at some moment; `None` is "no watermark
/// yet" (below every time), `Some(i64::MAX)` the end of input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    NegInf,
    At(i64),
    PosInf,
}

impl Bound {
    fn json(self) -> Json {
        match self {
            Bound::NegInf => json!("-inf"),
            Bound::PosInf => json!("+inf"),
            Bound::At(v) => json!(v),
        }
    }

    fn min(self, other: Bound) -> Bound {
        match (self, other) {
            (Bound::NegInf, _) | (_, Bound::NegInf) => Bound::NegInf,
            (Bound::PosInf, b) | (b, Bound::PosInf) => b,
            (Bound::At(a), Bound::At(b)) => Bound::At(a.min(b)),
        }
    }

    /// Whether a window closing at `closing` may have closed under this bound.
    fn reaches(self, closing: i64) -> bool {
        match self {
            Bound::NegInf => false,
            Bound::PosInf => true,
            Bound::At(b) => closing <= b,
        }
    }
}

/// A watermark the sink recorded: `None` when none had arrived.
fn recorded_reaches(w: Option<i64>, closing: i64) -> bool {
    w.is_some_and(|w| closing <= w)
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Acc {
    pub count: i64,
    pub sum: i128,
    pub undetermined: bool,
}

/// What the reference carries from one increment to the next: each
/// partition's position and greatest event time, and the windows not yet
/// final.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct State {
    pub job: String,
    pub topic: String,
    pub checkpoint: u64,
    pub positions: BTreeMap<i32, i64>,
    pub greatest: BTreeMap<i32, Option<i64>>,
    pub windows: BTreeMap<(String, i64), Acc>,
}

pub const STATE_FORMAT: &str = "clink-reference-window-state";

impl State {
    pub fn to_json(&self) -> Json {
        json!({
            "format": STATE_FORMAT,
            "version": 1,
            "job": self.job,
            "topic": self.topic,
            "checkpoint": self.checkpoint,
            "positions": self.positions.iter().map(|(p, o)| json!({"partition": p, "next": o})).collect::<Vec<_>>(),
            "greatest": self.greatest.iter().map(|(p, g)| json!({"partition": p, "time": g})).collect::<Vec<_>>(),
            "windows": self.windows.iter().map(|((account, start), a)| json!({
                "account": account, "start": start, "count": a.count, "sum": a.sum.to_string(), "undetermined": a.undetermined
            })).collect::<Vec<_>>(),
        })
    }

    pub fn parse(bytes: &[u8]) -> Result<State, String> {
        let v: Json = serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {e}"))?;
        if v.get("format").and_then(Json::as_str) != Some(STATE_FORMAT)
            || v.get("version").and_then(Json::as_u64) != Some(1)
        {
            return Err(format!("not a {STATE_FORMAT} version 1"));
        }
        let list = |f: &str| v.get(f).and_then(Json::as_array).cloned().ok_or_else(|| format!("{f}: expected a list"));
        let partition = |x: &Json| {
            x.get("partition").and_then(Json::as_i64).and_then(|p| i32::try_from(p).ok()).ok_or("a partition")
        };
        let mut s = State {
            job: v.get("job").and_then(Json::as_str).unwrap_or_default().to_string(),
            topic: v.get("topic").and_then(Json::as_str).unwrap_or_default().to_string(),
            checkpoint: v.get("checkpoint").and_then(Json::as_u64).ok_or("checkpoint")?,
            ..State::default()
        };
        for x in list("positions")? {
            s.positions.insert(partition(&x)?, x.get("next").and_then(Json::as_i64).ok_or("positions: next")?);
        }
        for x in list("greatest")? {
            let t = match x.get("time") {
                None | Some(Json::Null) => None,
                Some(t) => Some(t.as_i64().ok_or("greatest: time")?),
            };
            s.greatest.insert(partition(&x)?, t);
        }
        for x in list("windows")? {
            let account = x.get("account").and_then(Json::as_str).ok_or("windows: account")?.to_string();
            let start = x.get("start").and_then(Json::as_i64).ok_or("windows: start")?;
            let acc = Acc {
                count: x.get("count").and_then(Json::as_i64).ok_or("windows: count")?,
                sum: x.get("sum").and_then(Json::as_str).and_then(|t| t.parse().ok()).ok_or("windows: sum")?,
                undetermined: x.get("undetermined").and_then(Json::as_bool).ok_or("windows: undetermined")?,
            };
            s.windows.insert((account, start), acc);
        }
        Ok(s)
    }
}

#[derive(Debug, Default, Clone, Copy)]
pub struct Fates {
    pub folded: u64,
    pub dropped_late: u64,
    pub undetermined: u64,
    pub filtered: u64,
}

pub struct Outcome {
    pub rows: Vec<Vec<Json>>,
    /// (identity, status, why)
    pub left_out: Vec<(Vec<Json>, &'static str, String)>,
    pub bounds: Vec<(u64, Bound)>,
    pub fates: Fates,
    pub state_out: State,
}

/// One partition's records with the greatest event time up to each.
struct Partition {
    before: Option<i64>,
    /// (offset, event, greatest including this record)
    records: Vec<(i64, Event, i64)>,
    end: Option<i64>,
}

impl Partition {
    /// The greatest event time of the records before `position`.
    fn greatest_before(&self, position: i64) -> Option<i64> {
        let i = self.records.partition_point(|(o, _, _)| *o < position);
        if i == 0 {
            self.before
        } else {
            Some(self.records[i - 1].2)
        }
    }
}

pub fn compute(
    rules: &WindowRules,
    scope: &ScopeDoc,
    records: BTreeMap<i32, Vec<(i64, Event)>>,
    state_in: Option<&State>,
) -> Result<Outcome, String> {
    let mut partitions: BTreeMap<i32, Partition> = BTreeMap::new();
    for range in &scope.ranges {
        let before = state_in.and_then(|s| s.greatest.get(&range.partition).copied().flatten());
        let mut greatest = before;
        let mut list = Vec::new();
        for (offset, e) in records.get(&range.partition).cloned().unwrap_or_default() {
            greatest = Some(greatest.map_or(e.time, |g| g.max(e.time)));
            list.push((offset, e, greatest.unwrap_or(i64::MIN)));
        }
        partitions.insert(range.partition, Partition { before, records: list, end: range.end });
    }
    let lag = rules.lag_ms;
    let bound_at = |point: &LineagePoint| -> Result<Bound, String> {
        let mut bound = Bound::PosInf;
        for (p, part) in &partitions {
            let position = *point
                .positions
                .get(p)
                .ok_or_else(|| format!("checkpoint {} records no position of partition {p}", point.checkpoint))?;
            if part.end.is_some_and(|end| position >= end) {
                continue; // read to its end: it holds nothing back
            }
            bound = bound.min(match part.greatest_before(position) {
                None => Bound::NegInf,
                Some(g) => Bound::At(g.saturating_sub(lag)),
            });
        }
        Ok(bound)
    };
    let lineage = &scope.lineage;
    if lineage.is_empty() {
        return Err("the scope's lineage holds no completed checkpoint".into());
    }
    let mut bounds = Vec::new();
    for point in lineage {
        bounds.push((point.checkpoint, bound_at(point)?));
    }
    let mut windows: BTreeMap<(String, i64), Acc> = state_in.map(|s| s.windows.clone()).unwrap_or_default();
    let mut fates = Fates::default();
    for (p, part) in &partitions {
        for (i, (offset, e, _)) in part.records.iter().enumerate() {
            let next = lineage.iter().position(|c| c.positions.get(p).is_some_and(|pos| *pos > *offset));
            let Some(next) = next else {
                return Err(format!("partition {p} offset {offset} is past the audited checkpoint's position"));
            };
            let floor =
                if next == 0 { scope.base.as_ref().and_then(|b| b.watermark) } else { lineage[next - 1].watermark };
            let own = if i == 0 { part.before } else { Some(part.records[i - 1].2) };
            let own = own.map_or(Bound::NegInf, |g| Bound::At(g.saturating_sub(lag)));
            let upper = bounds[next].1.min(own);
            let start = rules.start_of(e.time);
            let closing = start.saturating_add(rules.size_ms).saturating_add(rules.allowed_lateness_ms);
            let key = (e.account.clone(), start);
            if !upper.reaches(closing) {
                fates.folded += 1;
                let acc = windows.entry(key).or_default();
                acc.count += 1;
                acc.sum = acc.sum.checked_add(e.amount).ok_or("a window's sum overflowed")?;
            } else if recorded_reaches(floor, closing) {
                fates.dropped_late += 1;
            } else {
                fates.undetermined += 1;
                windows.entry(key).or_default().undetermined = true;
            }
        }
    }
    let last = lineage.last().ok_or("no audited checkpoint")?;
    let final_by = scope.finality_watermark;
    let bound_n = bounds.last().map_or(Bound::NegInf, |b| b.1);
    let mut rows = Vec::new();
    let mut left_out = Vec::new();
    let mut carried = BTreeMap::new();
    for ((account, start), acc) in windows {
        let end = start.saturating_add(rules.size_ms);
        let closing = end.saturating_add(rules.allowed_lateness_ms);
        let identity = vec![cells::text(&account), cells::int(i128::from(start)), cells::int(i128::from(end))];
        if recorded_reaches(final_by, closing) {
            if acc.undetermined {
                left_out.push((identity, "undetermined", "a record's fate is undetermined: whether it was folded in or dropped late depends on the order the job read its partitions in".to_string()));
            } else if acc.count > 0 {
                rows.push(vec![
                    cells::text(&account),
                    cells::int(i128::from(start)),
                    cells::int(i128::from(end)),
                    cells::int(i128::from(acc.count)),
                    cells::int(acc.sum),
                ]);
            }
        } else if !bound_n.reaches(closing) {
            left_out.push((
                identity,
                "open",
                format!(
                    "its end plus lateness {closing} is above what the source allows at checkpoint {} ({})",
                    last.checkpoint,
                    bound_n.json()
                ),
            ));
            carried.insert((account, start), acc);
        } else {
            left_out.push((identity, "undetermined", format!(
                "its end plus lateness {closing} is above the recorded watermark {} and within the source's bound {} at checkpoint {}",
                final_by.map_or("none".to_string(), |w| w.to_string()),
                bound_n.json(),
                last.checkpoint
            )));
            carried.insert((account, start), acc);
        }
    }
    let state_out = State {
        job: scope.job.clone(),
        topic: scope.topic.clone(),
        checkpoint: scope.checkpoint,
        positions: scope.ranges.iter().map(|r| (r.partition, r.to)).collect(),
        greatest: partitions.iter().map(|(p, part)| (*p, part.greatest_before(i64::MAX))).collect(),
        windows: carried,
    };
    Ok(Outcome { rows, left_out, bounds, fates, state_out })
}

pub fn bounds_json(bounds: &[(u64, Bound)]) -> Json {
    Json::Array(bounds.iter().map(|(c, b)| json!({"checkpoint": c, "bound": b.json()})).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scope::Range;

    fn scope(lineage: Vec<LineagePoint>, finality: Option<i64>, ends: [i64; 2]) -> ScopeDoc {
        ScopeDoc {
            raw: Json::Null,
            version: 2,
            job: "22".into(),
            checkpoint: lineage.last().map_or(0, |l| l.checkpoint),
            topic: "t".into(),
            cluster_id: None,
            isolation: "read_committed".into(),
            partitions_in_log: Some(2),
            ranges: vec![
                Range {
                    partition: 0,
                    from: Some(0),
                    to: lineage.last().map_or(0, |l| l.positions[&0]),
                    end: Some(ends[0]),
                },
                Range {
                    partition: 1,
                    from: Some(0),
                    to: lineage.last().map_or(0, |l| l.positions[&1]),
                    end: Some(ends[1]),
                },
            ],
            complete: true,
            sha256: String::new(),
            lineage,
            base: None,
            finality_watermark: finality,
        }
    }

    fn point(c: u64, p0: i64, p1: i64, w: Option<i64>) -> LineagePoint {
        LineagePoint { checkpoint: c, positions: [(0, p0), (1, p1)].into(), watermark: w }
    }

    fn event(time: i64, amount: i128) -> Event {
        Event { id: 0, time, account: "a".into(), amount }
    }

    #[test]
    fn records_fold_or_drop_by_the_bounds_and_the_floor() {
        let rules = WindowRules { size_ms: 10, lag_ms: 0, allowed_lateness_ms: 0 };
        // Partition 0 reaches time 25 by checkpoint 1; partition 1 sends a
        // record of time 3 after checkpoint 1, whose recorded watermark is 20:
        // its window [0, 10) had closed, so it was dropped.
        let lineage = vec![point(1, 2, 1, Some(20)), point(2, 2, 2, Some(i64::MAX))];
        let s = scope(lineage, Some(i64::MAX), [2, 2]);
        let records: BTreeMap<i32, Vec<(i64, Event)>> =
            [(0, vec![(0, event(1, 100)), (1, event(25, 5))]), (1, vec![(0, event(21, 7)), (1, event(3, 9))])].into();
        let out = compute(&rules, &s, records, None).unwrap();
        assert_eq!((out.fates.folded, out.fates.dropped_late, out.fates.undetermined), (3, 1, 0));
        let sums: Vec<(String, String)> = out.rows.iter().map(|r| (r[1].to_string(), r[4].to_string())).collect();
        assert_eq!(
            sums,
            vec![("\"0\"".to_string(), "\"100\"".to_string()), ("\"20\"".to_string(), "\"12\"".to_string())]
        );
        assert_eq!(out.bounds, vec![(1, Bound::At(21)), (2, Bound::PosInf)]);
    }

    #[test]
    fn a_record_between_the_floor_and_the_bound_is_undetermined_and_so_is_its_window() {
        let rules = WindowRules { size_ms: 10, lag_ms: 0, allowed_lateness_ms: 0 };
        // The record of time 3 arrives after checkpoint 1 (recorded watermark
        // 5: its window [0, 10) still open), and before checkpoint 2, whose
        // bound is 21: it may have been folded in or dropped.
        let lineage = vec![point(1, 1, 1, Some(5)), point(2, 2, 2, Some(i64::MAX))];
        let s = scope(lineage, Some(i64::MAX), [2, 2]);
        let records: BTreeMap<i32, Vec<(i64, Event)>> =
            [(0, vec![(0, event(5, 1)), (1, event(25, 1))]), (1, vec![(0, event(21, 1)), (1, event(3, 1))])].into();
        let out = compute(&rules, &s, records, None).unwrap();
        assert_eq!(out.fates.undetermined, 1);
        assert!(out.left_out.iter().any(|(id, status, _)| *status == "undetermined" && id[1] == json!("0")));
    }

    #[test]
    fn windows_above_the_source_bound_are_open_and_carried_in_the_state() {
        let rules = WindowRules { size_ms: 10, lag_ms: 0, allowed_lateness_ms: 0 };
        let lineage = vec![point(1, 1, 1, Some(10))];
        let s = scope(lineage, Some(10), [5, 5]);
        let records: BTreeMap<i32, Vec<(i64, Event)>> =
            [(0, vec![(0, event(12, 1))]), (1, vec![(0, event(11, 1))])].into();
        let out = compute(&rules, &s, records, None).unwrap();
        assert!(out.rows.is_empty());
        assert_eq!(out.left_out.len(), 1);
        assert_eq!(out.left_out[0].1, "open");
        assert_eq!(out.state_out.windows.len(), 1);
        let back = State::parse(out.state_out.to_json().to_string().as_bytes()).unwrap();
        assert_eq!(back, out.state_out);
    }
}
