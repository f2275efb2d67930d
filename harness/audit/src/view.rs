//! What `status` shows, gathered from the state directory alone: the
//! ledger (checked to be this configuration's, [`Ledger::of_config`]), the
//! acknowledgements, the published reports' hashes they are bound to, and
//! whether a runner holds the lock.
//!
//! It owns the gathering of [`Facts`] and the status document
//! (`clink-audit-status` version 1) with its text. It never runs a step,
//! never writes to the state directory and never reads the job's own
//! directories: what the runner did not record, status does not know.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{json, Value as Json};

use crate::config::{AuditConfig, Selection};
use crate::coverage::{AuditSpan, Coverage};
use crate::ledger::{
    acknowledged, acknowledgements, published_report_sha256, Ack, AuditRecord, Ledger, LedgerError, Step, LEDGER_FILE,
};
use crate::lock::{holder, LockError};
use crate::outcome::Outcome;
use crate::status::{conditions, state, Facts, State};

/// What the operator expects of the runner, for the conditions that depend on time.
#[derive(Debug, Clone, Copy)]
pub struct Expectations {
    /// `stopped` when no runner holds the lock and no cycle ended within this.
    pub cycle_within_s: u64,
    /// `stale` when the newest verified checkpoint of the current lineage is
    /// older than this (nothing verified is stale at once).
    pub stale_after_s: u64,
    /// `behind` when more completed checkpoints than this wait for a first attempt.
    pub backlog_threshold: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error(transparent)]
    Lock(#[from] LockError),
}

/// The status document and its state.
pub struct StatusView {
    pub state: State,
    pub document: Json,
}

fn age_s(now_ms: u64, at_ms: u64) -> u64 {
    now_ms.saturating_sub(at_ms) / 1000
}

/// Gathers the status of `config`'s state directory at `now_ms`.
pub fn status(config: &AuditConfig, expect: Expectations, now_ms: u64) -> Result<StatusView, ViewError> {
    let dir = Path::new(&config.state_dir);
    // A state directory no runner has written is refused, not shown empty.
    let ledger = if dir.join(LEDGER_FILE).exists() { Ledger::of_config(config)? } else { Ledger::read(dir)? };
    let acks = acknowledgements(dir)?;
    let reports = report_hashes(dir, &ledger)?;
    let held = holder(dir)?;
    Ok(build(config, &ledger, &acks, &reports, held.is_some(), expect, now_ms))
}

/// The SHA-256 of each discrepancy's published report, by audit id: what an
/// acknowledgement must name to silence it.
pub fn report_hashes(dir: &Path, ledger: &Ledger) -> Result<BTreeMap<String, String>, LedgerError> {
    let mut out = BTreeMap::new();
    for rec in ledger.records().filter(|r| r.outcome == Some(Outcome::Discrepancy)) {
        if let Some(sha) = published_report_sha256(dir, &rec.id)? {
            out.insert(rec.id.clone(), sha);
        }
    }
    Ok(out)
}

/// The completed checkpoints the runner is to audit: from the first it
/// took (after `start_at`), all of them sequentially, or the newest only.
fn eligible<'a>(config: &AuditConfig, ledger: &'a Ledger) -> Vec<(&'a u64, &'a u64)> {
    let Some(cursor) = ledger.cursor else { return Vec::new() };
    let start = ledger.audits.keys().next().copied().unwrap_or(u64::MAX).min(cursor.saturating_add(1));
    let newest = ledger.observed.keys().next_back().copied();
    ledger
        .observed
        .iter()
        .filter(|(ck, _)| match config.selection {
            Selection::Sequential => **ck >= start,
            Selection::LatestOnly => Some(**ck) == newest,
        })
        .collect()
}

pub fn build(
    config: &AuditConfig,
    ledger: &Ledger,
    acks: &BTreeMap<String, Vec<Ack>>,
    reports: &BTreeMap<String, String>,
    runner_held: bool,
    expect: Expectations,
    now_ms: u64,
) -> StatusView {
    let acked = |r: &AuditRecord| acknowledged(r, reports.get(&r.id).map(String::as_str), acks);
    // Coverage is the current lineage's: a retired lineage verified offsets
    // for output the new one wrote again.
    let spans: Vec<AuditSpan> = ledger
        .audits
        .values()
        .filter_map(|r| {
            r.outcome.map(|outcome| AuditSpan {
                audit: r.id.clone(),
                outcome,
                acknowledged: acked(r),
                ranges: r.ranges.clone(),
            })
        })
        .collect();
    let coverage = Coverage::from_audits(&spans);
    let discrepancies: Vec<&AuditRecord> =
        ledger.records().filter(|r| r.outcome == Some(Outcome::Discrepancy)).collect();
    // A step started without its result is unfinished only when no runner
    // is there to finish it; one collected early waits for the next cycle.
    let unfinished: Vec<&AuditRecord> = ledger
        .audits
        .values()
        .filter(|r| {
            let crashed = r.open_attempt().is_some_and(|a| {
                let collected_early = a.steps.len() == 1 && a.done(Step::Collect).is_some();
                ledger.running.as_ref().is_some_and(|run| run.checkpoint == r.checkpoint) || !collected_early
            });
            matches!(r.outcome, Some(Outcome::Partial | Outcome::Error)) || (crashed && !runner_held)
        })
        .collect();
    // A verified audit whose spanned offsets were not recorded counts no
    // coverage; it is not finished as far as coverage goes, so status says so.
    let coverage_unknown: Vec<&AuditRecord> = ledger
        .audits
        .values()
        .filter(|r| r.outcome.is_some_and(Outcome::counts_toward_coverage) && r.ranges.is_empty())
        .collect();
    let eligible = eligible(config, ledger);
    let backlog =
        eligible.iter().filter(|(ck, _)| ledger.audits.get(ck).is_none_or(|r| r.attempts.is_empty())).count() as u64;
    // Only the current lineage's audits speak for it; retired ones never do.
    let verified = ledger
        .audits
        .values()
        .filter(|r| r.lineage == ledger.lineage && r.outcome.is_some_and(Outcome::counts_toward_coverage))
        .max_by_key(|r| (r.completed_ms, r.checkpoint));
    let attempted = ledger.audits.values().rev().find(|r| !r.attempts.is_empty());
    let last_cycle_age = ledger.runner.last_cycle_end_ms.map(|t| age_s(now_ms, t));
    let runner_stopped = ledger.runner.budget_blocked.is_some()
        || (!runner_held && last_cycle_age.is_none_or(|a| a > expect.cycle_within_s));
    let facts = Facts {
        unacknowledged_discrepancies: discrepancies.iter().filter(|r| !acked(r)).count(),
        acknowledged_discrepancies: discrepancies.iter().filter(|r| acked(r)).count(),
        runner_stopped,
        unfinished_audits: unfinished.len() + coverage_unknown.len(),
        backlog,
        backlog_threshold: expect.backlog_threshold,
        last_verified_age_s: verified.map(|r| age_s(now_ms, r.completed_ms)),
        stale_after_s: expect.stale_after_s,
        eligible_scope: !eligible.is_empty(),
    };
    let the_state = state(&facts);
    let scope = |r: Option<&AuditRecord>| {
        r.map(|r| {
            json!({"audit": r.id, "checkpoint": r.checkpoint, "outcome": r.outcome,
                   "age_s": age_s(now_ms, r.completed_ms)})
        })
    };
    let partitions: Vec<Json> = coverage
        .partitions()
        .map(|p| {
            let verified: Vec<Json> =
                coverage.verified(p).ranges().iter().map(|r| json!({"start": r.start(), "end": r.end()})).collect();
            let gaps: Vec<Json> = coverage
                .gaps(p)
                .iter()
                .map(|g| json!({"start": g.range.start(), "end": g.range.end(), "tags": g.tags()}))
                .collect();
            let extent = coverage.extent(p).map(|r| json!({"start": r.start(), "end": r.end()}));
            json!({"topic": p.topic, "partition": p.partition, "extent": extent, "verified": verified, "gaps": gaps})
        })
        .collect();
    let listed = |r: &&AuditRecord| {
        let last = r.attempts.last();
        json!({
            "audit": r.id,
            "checkpoint": r.checkpoint,
            "outcome": r.outcome,
            "reason": last.and_then(|a| a.reason.clone()),
            "attempts": r.attempts.len(),
            "discrepancy_attempt": r.discrepancy_attempt(),
            "report_sha256": reports.get(&r.id),
            "acknowledged": acked(r),
            "next_attempt_due_s": r.next_due_s,
            "findings": r.findings,
            "acknowledgements": acks.get(&r.id).cloned().unwrap_or_default(),
        })
    };
    let gaps: Vec<Json> = ledger
        .records()
        .filter(|r| matches!(r.outcome, Some(Outcome::Unsupported | Outcome::Expired | Outcome::Skipped)))
        .map(|r| json!({"audit": r.id, "checkpoint": r.checkpoint, "outcome": r.outcome}))
        .collect();
    let cycles: Vec<Json> = ledger.cycles.iter().rev().take(20).map(|c| json!(c)).collect();
    let document = json!({
        "format": "clink-audit-status",
        "version": 1,
        "job": config.job.id,
        "state": the_state.as_str(),
        "exit_code": the_state.exit_code(),
        "conditions": conditions(&facts).iter().map(|s| s.as_str()).collect::<Vec<_>>(),
        "shape": ledger.shape,
        "lineage": ledger.lineage,
        "last_attempted": scope(attempted),
        "last_verified": scope(verified),
        "stale": stale_reason(verified.map(|r| age_s(now_ms, r.completed_ms)), &facts),
        "backlog": backlog,
        "observed_newest": ledger.observed.keys().next_back(),
        "first_seen": ledger.first_seen,
        "retired": ledger.retired.iter().map(|r| json!({"audit": r.id, "checkpoint": r.checkpoint, "outcome": r.outcome}))
            .collect::<Vec<_>>(),
        "coverage": partitions,
        "discrepancies": discrepancies.iter().map(listed).collect::<Vec<_>>(),
        "unfinished": unfinished.iter().map(listed).collect::<Vec<_>>(),
        "coverage_unknown": coverage_unknown
            .iter()
            .map(|r| json!({"audit": r.id, "checkpoint": r.checkpoint, "outcome": r.outcome,
                            "reason": "verified, but the offsets it spans were not recorded: it counts no coverage"}))
            .collect::<Vec<_>>(),
        "gaps": gaps,
        "chain": ledger.chain,
        "runner": {
            "running": runner_held,
            "pid": ledger.runner.pid,
            "last_cycle_age_s": last_cycle_age,
            "stopped": ledger.runner.stopped,
            "budget_blocked": ledger.runner.budget_blocked,
            "usage": ledger.runner.usage,
        },
        "cycles": cycles,
    });
    StatusView { state: the_state, document }
}

/// Why the state is `stale`, when it is.
fn stale_reason(age: Option<u64>, facts: &Facts) -> Option<String> {
    match age {
        Some(age) if age > facts.stale_after_s => Some(format!(
            "the newest verified checkpoint completed {age} s ago, past --stale-after-s {}",
            facts.stale_after_s
        )),
        None if facts.eligible_scope => {
            Some("no audit of the job's current lineage has passed yet: nothing is verified".into())
        }
        _ => None,
    }
}

/// The status as a person reads it: sentences and lists, no JSON (the
/// same facts as `--json`, which a program reads).
pub fn text(view: &StatusView) -> String {
    use std::fmt::Write;
    let d = &view.document;
    let mut out = String::new();
    let _ = writeln!(out, "state: {} (exit {})", view.state.as_str(), view.state.exit_code());
    let conditions: Vec<&str> = d["conditions"].as_array().into_iter().flatten().filter_map(Json::as_str).collect();
    if !conditions.is_empty() {
        let _ = writeln!(out, "because: {}", conditions.join("; "));
    }
    if let Some(why) = d["stale"].as_str() {
        let _ = writeln!(out, "stale: {why}");
    }
    let _ = writeln!(out, "last attempted: {}", audit_line(&d["last_attempted"]));
    let _ = writeln!(out, "last verified: {}", audit_line(&d["last_verified"]));
    let _ = writeln!(out, "backlog: {} completed checkpoints not yet attempted", d["backlog"].as_u64().unwrap_or(0));
    for p in d["coverage"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "coverage of {} partition {}: verified {}; gaps {}",
            p["topic"].as_str().unwrap_or("?"),
            p["partition"],
            ranges(&p["verified"]),
            ranges(&p["gaps"])
        );
    }
    for (title, key) in [
        ("discrepancy", "discrepancies"),
        ("unfinished", "unfinished"),
        ("coverage unknown", "coverage_unknown"),
        ("gap", "gaps"),
    ] {
        for r in d[key].as_array().into_iter().flatten() {
            let mut line = format!(
                "{title}: checkpoint {} ({}), {}",
                r["checkpoint"],
                r["audit"].as_str().unwrap_or("?"),
                r["outcome"].as_str().unwrap_or("no outcome yet")
            );
            if let Some(reason) = r["reason"].as_str() {
                let _ = write!(line, ": {reason}");
            }
            if r["acknowledged"] == true {
                line.push_str(" (acknowledged)");
            }
            let _ = writeln!(out, "{line}");
        }
    }
    let _ = writeln!(out, "runner: {}", runner_line(&d["runner"]));
    out
}

/// `checkpoint 12 (ck12-…), passed, completed 40 s ago`, or `none`.
fn audit_line(a: &Json) -> String {
    if a.is_null() {
        return "none".into();
    }
    format!(
        "checkpoint {} ({}), {}, completed {} s ago",
        a["checkpoint"],
        a["audit"].as_str().unwrap_or("?"),
        a["outcome"].as_str().unwrap_or("no outcome yet"),
        a["age_s"]
    )
}

/// Offset ranges as `[3, 9) [12, 20)`, with a gap's tags; `none` when empty.
fn ranges(list: &Json) -> String {
    let shown: Vec<String> = list
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            let tags: Vec<&str> = r["tags"].as_array().into_iter().flatten().filter_map(Json::as_str).collect();
            let range = format!("[{}, {})", r["start"], r["end"]);
            if tags.is_empty() {
                range
            } else {
                format!("{range} ({})", tags.join(", "))
            }
        })
        .collect();
    if shown.is_empty() {
        "none".into()
    } else {
        shown.join(" ")
    }
}

/// Whether a runner holds the state directory, its last cycle's age, and
/// what stopped or blocks it.
fn runner_line(r: &Json) -> String {
    let mut line = if r["running"] == true { "running".to_string() } else { "not running".to_string() };
    if let Some(pid) = r["pid"].as_u64() {
        line.push_str(&format!(" (pid {pid})"));
    }
    match r["last_cycle_age_s"].as_u64() {
        Some(age) => line.push_str(&format!(", last cycle ended {age} s ago")),
        None => line.push_str(", no cycle has ended"),
    }
    if let Some(stopped) = r["stopped"].as_str() {
        line.push_str(&format!(", stopped: {stopped}"));
    }
    if let Some(blocked) = r["budget_blocked"].as_str() {
        line.push_str(&format!("; blocked: {blocked}"));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coverage::{OffsetRange, Partition};
    use crate::ledger::{Attempt, StepRecord};

    const EXAMPLE: &str = include_str!("../examples/audit.json");

    fn passed(ck: u64, ranges: Vec<(Partition, OffsetRange)>) -> AuditRecord {
        let step = |step| StepRecord { step, exit_code: Some(0), seconds: 0.1, note: String::new(), outcome: None };
        AuditRecord {
            id: format!("ck{ck}-test"),
            checkpoint: ck,
            completed_ms: 1_000,
            marker_sha256: None,
            lineage: None,
            outcome: Some(Outcome::Passed),
            attempts: vec![Attempt {
                n: 1,
                cycle: 1,
                started_ms: 1_000,
                ended_ms: Some(2_000),
                outcome: Some(Outcome::Passed),
                reason: None,
                since: None,
                steps: Step::ALL.iter().map(|s| step(*s)).collect(),
            }],
            next_due_s: None,
            published: true,
            ranges,
            findings: Vec::new(),
            evidence_deleted: false,
        }
    }

    fn view(records: Vec<AuditRecord>) -> StatusView {
        let config = AuditConfig::from_slice(EXAMPLE.as_bytes()).unwrap();
        let mut ledger = Ledger::new("f");
        ledger.cursor = records.iter().map(|r| r.checkpoint).max();
        for r in records {
            ledger.observed.insert(r.checkpoint, r.completed_ms);
            ledger.audits.insert(r.checkpoint, r);
        }
        ledger.runner.last_cycle_end_ms = Some(2_000);
        let expect = Expectations { cycle_within_s: 3600, stale_after_s: 3600, backlog_threshold: 5 };
        build(&config, &ledger, &BTreeMap::new(), &BTreeMap::new(), true, expect, 3_000)
    }

    fn range(start: u64, end: u64) -> (Partition, OffsetRange) {
        (Partition { topic: "t".into(), partition: 0 }, OffsetRange::new(start, end).unwrap())
    }

    #[test]
    fn passes_with_their_offsets_are_healthy() {
        let v = view(vec![passed(1, vec![range(0, 10)]), passed(2, vec![range(10, 20)])]);
        assert_eq!(v.state, State::Healthy, "{}", v.document);
        assert_eq!(v.document["coverage_unknown"], json!([]));
    }

    #[test]
    fn a_pass_whose_offsets_are_unknown_is_incomplete_and_listed() {
        let v = view(vec![passed(1, vec![range(0, 10)]), passed(2, Vec::new())]);
        assert_eq!(v.state, State::Incomplete, "{}", v.document);
        assert_eq!(v.document["coverage_unknown"][0]["checkpoint"], 2);
        assert!(text(&v).contains("coverage unknown: checkpoint 2 (ck2-test)"), "{}", text(&v));
    }

    /// The text a person reads holds no JSON: no braces, no quoted keys.
    #[test]
    fn the_text_reads_as_sentences_not_json() {
        let v = view(vec![passed(1, vec![range(0, 10)]), passed(2, Vec::new())]);
        let t = text(&v);
        assert!(!t.contains('{') && !t.contains("\":"), "{t}");
        assert!(t.contains("last verified: checkpoint 2 (ck2-test), passed, completed"), "{t}");
        assert!(t.contains("verified [0, 10); gaps"), "{t}");
        assert!(t.contains("runner: running (pid 0), last cycle ended"), "{t}");
    }

    /// A job that completes a checkpoint every minute for three hours while
    /// every audit ends `unsupported` or `expired`: the newest is always
    /// young, the first the runner took is not.
    fn never_verified(selection: crate::config::Selection) -> StatusView {
        let mut config = AuditConfig::from_slice(EXAMPLE.as_bytes()).unwrap();
        config.selection = selection;
        let now = 3 * 3_600_000;
        let mut ledger = Ledger::new("f");
        for ck in 1..=180u64 {
            let completed_ms = (ck - 1) * 60_000;
            ledger.observed.insert(ck, completed_ms);
            let outcome = if ck % 2 == 0 { Outcome::Unsupported } else { Outcome::Expired };
            let mut rec = passed(ck, Vec::new());
            rec.completed_ms = completed_ms;
            rec.outcome = Some(outcome);
            rec.attempts[0].outcome = Some(outcome);
            ledger.audits.insert(ck, rec);
        }
        // The job's retention keeps its newest markers only.
        ledger.observed.retain(|ck, _| *ck > 175);
        ledger.cursor = Some(180);
        ledger.first_seen = Some(crate::ledger::FirstSeen { checkpoint: 1, completed_ms: 0 });
        ledger.runner.last_cycle_end_ms = Some(now);
        let expect = Expectations { cycle_within_s: 3600, stale_after_s: 3600, backlog_threshold: 5 };
        build(&config, &ledger, &BTreeMap::new(), &BTreeMap::new(), true, expect, now)
    }

    #[test]
    fn a_runner_that_never_verified_anything_is_stale_not_healthy() {
        for selection in [crate::config::Selection::LatestOnly, crate::config::Selection::Sequential] {
            let v = never_verified(selection);
            assert_eq!(v.state, State::Stale, "{selection:?}: {}", v.document);
        }
    }

    #[test]
    fn a_discrepancy_acknowledged_for_another_report_stands() {
        let mut rec = passed(1, vec![range(0, 10)]);
        rec.outcome = Some(Outcome::Discrepancy);
        let first = rec.attempts[0].clone();
        rec.attempts[0].outcome = Some(Outcome::Error);
        rec.attempts.push(crate::ledger::Attempt { n: 2, outcome: Some(Outcome::Discrepancy), ..first });
        let config = AuditConfig::from_slice(EXAMPLE.as_bytes()).unwrap();
        let mut ledger = Ledger::new("f");
        ledger.cursor = Some(1);
        ledger.observed.insert(1, 1_000);
        ledger.audits.insert(1, rec);
        ledger.runner.last_cycle_end_ms = Some(2_000);
        let expect = Expectations { cycle_within_s: 3600, stale_after_s: 3600, backlog_threshold: 5 };
        let reports = BTreeMap::from([("ck1-test".to_string(), "now".to_string())]);
        let ack = |sha: &str| Ack::new("ck1-test", 2, sha, "n", 1, "op");
        let state = |acks: Vec<Ack>, reports: &BTreeMap<String, String>| {
            let acks = BTreeMap::from([("ck1-test".to_string(), acks)]);
            build(&config, &ledger, &acks, reports, true, expect, 3_000).state
        };
        assert_eq!(state(vec![ack("before")], &reports), State::Discrepancy, "an older report's");
        let mut unbound = ack("now");
        unbound.report_sha256 = None;
        assert_eq!(state(vec![unbound], &reports), State::Discrepancy, "one naming no report");
        assert_eq!(state(vec![ack("now")], &BTreeMap::new()), State::Discrepancy, "no report published");
        assert_ne!(state(vec![ack("now")], &reports), State::Discrepancy);
    }

    /// A job directory reset to a new lineage: the retired lineage's pass is
    /// listed and is not "last verified"; nothing of the new one is.
    #[test]
    fn a_retired_lineages_pass_verifies_nothing_of_the_new_one() {
        let config = AuditConfig::from_slice(EXAMPLE.as_bytes()).unwrap();
        let mut ledger = Ledger::new("f");
        let mut old = passed(1, vec![range(0, 10)]);
        old.lineage = Some("a".repeat(32));
        old.completed_ms = 2_900;
        ledger.retired.push(old);
        ledger.lineage = Some("b".repeat(32));
        ledger.cursor = Some(1);
        ledger.observed.insert(1, 2_950);
        let mut new = passed(1, vec![range(0, 10)]);
        new.lineage = ledger.lineage.clone();
        new.outcome = Some(Outcome::Unsupported);
        new.attempts[0].outcome = Some(Outcome::Unsupported);
        ledger.audits.insert(1, new);
        ledger.runner.last_cycle_end_ms = Some(2_990);
        let expect = Expectations { cycle_within_s: 3600, stale_after_s: 3600, backlog_threshold: 5 };
        let v = build(&config, &ledger, &BTreeMap::new(), &BTreeMap::new(), true, expect, 3_000);
        assert_eq!(v.state, State::Stale, "{}", v.document);
        assert_eq!(v.document["last_verified"], Json::Null);
        let verified = v.document["coverage"][0]["verified"].clone();
        assert_eq!(verified, json!([]), "the retired pass's offsets are not the new lineage's coverage");
        assert!(v.document["stale"].as_str().unwrap().contains("current lineage"), "{}", v.document);
    }
}
