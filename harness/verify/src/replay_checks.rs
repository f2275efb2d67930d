//! The replay checks on a bundle: replay.determinism, replay.recorded_output
//! and replay.expected_output.
//!
//! The selection (`--op`, `--subtask`, `--epoch`) is every captured operator
//! epoch that matches, in operator, subtask, epoch order; `--max-replays`
//! bounds how many are checked, and the rest are counted as omitted, never
//! dropped. Each check then concludes: failed when any epoch failed; passed
//! only when every selected epoch was checked whole and passed (an empty
//! selection never passes); unavailable when any epoch was omitted or lacked
//! evidence; unsupported when the only gap is epochs this build cannot replay
//! or compare.

use clink_basics::text::count;
use std::collections::BTreeSet;
use std::path::Path;

use clink_basics::ids::OperatorId;
use clink_bundle::graph::{GraphProblem, KnownGraph};
use clink_bundle::manifest::capture_path;
use clink_bundle::model::Evidence;
use clink_bundle::{Bundle, EpochEntry};
use clink_engine::event::Event;
use clink_engine::routing::Route;
use clink_engine::value::Row;
use clink_replay::bundle::{load_bundle_epoch, BundleEpochs};
use clink_replay::compare::keyed_order_diff;
use clink_replay::{verify, EpochEvidence, EpochRef, ReplayError, ReplayOutcome};

use super::{CheckResult, Counts, Selection, Status, UsageError};

/// What one epoch came to for one check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EpochStatus {
    Passed,
    Failed(String),
    Unavailable(String),
    Unsupported(String),
}

struct EpochResult {
    at: EpochRef,
    determinism: EpochStatus,
    recorded: EpochStatus,
    /// The whole epoch's replayed rows, when it was replayed whole.
    rows: Option<Vec<Row>>,
    output_schema: Option<clink_engine::value::Schema>,
}

pub fn run(
    bundle: &Bundle,
    evidence: &Evidence,
    graph: &Result<KnownGraph, GraphProblem>,
    selection: &Selection,
    expected: Option<&Path>,
) -> Result<Vec<CheckResult>, UsageError> {
    run_observed(bundle, evidence, graph, selection, expected, &mut crate::progress::Quiet)
}

/// [`run`], telling `progress` as each selected epoch is checked.
pub fn run_observed(
    bundle: &Bundle,
    evidence: &Evidence,
    graph: &Result<KnownGraph, GraphProblem>,
    selection: &Selection,
    expected: Option<&Path>,
    progress: &mut dyn crate::progress::VerifyProgress,
) -> Result<Vec<CheckResult>, UsageError> {
    let completed = match completed_checkpoints(bundle, evidence) {
        Ok(c) => c,
        Err(why) => return Ok(markers_unreadable(&why, expected.is_some())),
    };
    let (selected, cut) = select(bundle, selection, &completed);
    let max = selection.max_replays.get();
    let checked: Vec<&EpochEntry> = selected.iter().copied().take(max).collect();
    let omitted: Vec<String> = selected.iter().skip(max).take(5).map(|e| describe(e)).collect();
    let epochs = BundleEpochs::of(evidence);
    let job = JobEvidence { graph, epochs: &epochs, completed: &completed, evidence };
    // Only replay.expected_output reads the replayed rows after an epoch's
    // own checks: without it, an epoch's rows are dropped once checked, so
    // memory holds the epochs being replayed, not the bundle's output.
    let keep_rows = expected.is_some();
    let results = replay_epochs(bundle, &checked, &job, keep_rows, progress);
    let counts_base = Counts {
        selected: selected.len(),
        checked: checked.len(),
        omitted: selected.len() - checked.len(),
        ..Counts::default()
    };
    let mut checks = vec![
        conclude(
            "replay.determinism",
            "every selected epoch was replayed whole, twice from its starting state, and emitted the same rows in the same order both times",
            counts_base,
            &omitted,
            results.iter().map(|r| (&r.at, &r.determinism)),
        ),
        conclude(
            "replay.recorded_output",
            "for every selected epoch, the replay's rows equal what production handed the operator's downstream in the same epoch, each key's in order, and the replay ends in the state the bundle's snapshot of the epoch's checkpoint holds, where it holds one",
            counts_base,
            &omitted,
            results.iter().map(|r| (&r.at, &r.recorded)),
        ),
    ];
    if let Some(path) = expected {
        let replayed: Vec<crate::expected::Replayed<'_>> = results
            .iter()
            .map(|r| crate::expected::Replayed {
                at: &r.at,
                rows: r.rows.as_ref(),
                output_schema: r.output_schema.as_ref(),
            })
            .collect();
        checks.push(crate::expected::expected_output(
            path,
            &selected,
            &replayed,
            counts_base,
            &omitted,
            &epochs.restores.known,
        )?);
    }
    for check in &mut checks {
        check.details.extend(cut.iter().cloned());
    }
    Ok(checks)
}

fn describe(e: &EpochEntry) -> String {
    format!("operator {} subtask {} epoch {}", e.operator, e.subtask, e.epoch)
}

/// The checkpoints whose COMPLETED marker the bundle holds: an epoch is whole
/// only when its checkpoint completed. A marker that did not read is never
/// read as "not completed": the caller makes every replay check unavailable
/// with the reason.
fn completed_checkpoints(bundle: &Bundle, evidence: &Evidence) -> Result<BTreeSet<u64>, String> {
    let unread: Vec<String> = bundle
        .artifacts_of_kind(|k| matches!(k, clink_bundle::paths::ArtifactKind::CompletedMarker { .. }))
        .filter_map(|(a, k)| match k {
            clink_bundle::paths::ArtifactKind::CompletedMarker { checkpoint, .. } => {
                (!evidence.completed.contains_key(&checkpoint)).then(|| a.path.clone())
            }
            _ => None,
        })
        .collect();
    if !unread.is_empty() {
        return Err(format!("the bundle's markers could not be read: {}", unread.join(", ")));
    }
    Ok(evidence.completed.keys().copied().collect())
}

/// Every replay check, unavailable: which epochs are whole is not known.
fn markers_unreadable(why: &str, expected: bool) -> Vec<CheckResult> {
    let mut names = vec!["replay.determinism", "replay.recorded_output"];
    if expected {
        names.push("replay.expected_output");
    }
    names.into_iter().map(|name| CheckResult::new(name, Status::Unavailable, why)).collect()
}

/// The captured operator epochs the selection names. Without `--epoch`, an
/// epoch whose checkpoint did not complete is left out (the run stopped
/// within it, so its evidence may be cut), and said to be.
fn select<'a>(
    bundle: &'a Bundle,
    selection: &Selection,
    completed: &BTreeSet<u64>,
) -> (Vec<&'a EpochEntry>, Vec<String>) {
    let mut selected: Vec<&EpochEntry> = bundle
        .manifest
        .epochs
        .iter()
        .filter(|e| e.role == "operator")
        .filter(|e| selection.ops.as_ref().is_none_or(|ops| ops.contains(&e.operator_id())))
        .filter(|e| selection.subtasks.as_ref().is_none_or(|s| s.contains(&e.subtask)))
        .filter(|e| selection.epochs.as_ref().is_none_or(|s| s.contains(&e.epoch)))
        .collect();
    selected.sort_by_key(|e| (e.operator_id(), e.subtask, e.epoch));
    let mut cut = BTreeSet::new();
    if selection.epochs.is_none() {
        selected.retain(|e| {
            let whole = completed.contains(&e.epoch);
            if !whole {
                cut.insert(e.epoch);
            }
            whole
        });
    }
    let notes = cut
        .iter()
        .map(|epoch| {
            format!(
                "not selected by default: epoch {epoch}: checkpoint {epoch} did not complete (the run stopped within it), so its evidence may be cut; --epoch {epoch} says why it cannot be checked"
            )
        })
        .collect();
    (selected, notes)
}

/// What a replay error means for one epoch's checks.
fn status_of(e: ReplayError) -> EpochStatus {
    match e {
        ReplayError::Unsupported(why) => EpochStatus::Unsupported(why),
        ReplayError::Unavailable(why) => EpochStatus::Unavailable(why),
        ReplayError::Refused(_) | ReplayError::Failed(_) => EpochStatus::Failed(e.to_string()),
    }
}

/// What every epoch's load reads about the job, read once: its graph, where
/// its epochs start (restores and markers), and its completed checkpoints.
struct JobEvidence<'a> {
    graph: &'a Result<KnownGraph, GraphProblem>,
    epochs: &'a BundleEpochs,
    completed: &'a BTreeSet<u64>,
    evidence: &'a Evidence,
}

/// Every epoch checked, on as many threads as the machine has cores (epochs
/// are independent: each replays from its own starting state). They are
/// taken in epoch order, so that the captures of one epoch are decoded once
/// for their own replays and for the comparisons with their producers' (the
/// loader keeps the last few); results come back in the selection's order;
/// progress counts epochs as they finish.
fn replay_epochs(
    bundle: &Bundle,
    checked: &[&EpochEntry],
    job: &JobEvidence<'_>,
    keep_rows: bool,
    progress: &mut dyn crate::progress::VerifyProgress,
) -> Vec<EpochResult> {
    let total = checked.len();
    progress.epochs(0, total);
    let mut order: Vec<usize> = (0..total).collect();
    order.sort_by_key(|&i| (checked[i].epoch, checked[i].operator_id(), checked[i].subtask));
    let results = crate::parallel::map_ordered(
        &order,
        |&i| check_epoch(bundle, checked[i], job, keep_rows),
        |done| progress.epochs(done, total),
    );
    let mut slots: Vec<Option<EpochResult>> = (0..total).map(|_| None).collect();
    for (i, result) in order.into_iter().zip(results) {
        slots[i] = Some(result);
    }
    slots.into_iter().flatten().collect()
}

fn load(bundle: &Bundle, entry: &EpochEntry, job: &JobEvidence<'_>) -> Result<EpochEvidence, EpochStatus> {
    if !job.completed.contains(&entry.epoch) {
        let checkable: BTreeSet<u64> =
            bundle.manifest.epochs.iter().map(|e| e.epoch).filter(|e| job.completed.contains(e)).collect();
        return Err(EpochStatus::Unavailable(format!(
            "checkpoint {} did not complete: the run stopped (or crashed) within epoch {}, so its evidence may be cut; the bundle's epochs that can be checked: {checkable:?}",
            entry.epoch, entry.epoch
        )));
    }
    let graph = match job.graph {
        Ok(known) => Some(&known.graph),
        Err(GraphProblem::Absent(_)) => None,
        Err(GraphProblem::Broken(why)) => {
            return Err(EpochStatus::Failed(format!("the job graph does not hold: {why}")))
        }
    };
    load_bundle_epoch(bundle, entry, job.epochs, graph).map_err(status_of)
}

fn check_epoch(bundle: &Bundle, entry: &EpochEntry, job: &JobEvidence<'_>, keep_rows: bool) -> EpochResult {
    let at = EpochRef { operator: entry.operator_id(), subtask: entry.subtask, epoch: entry.epoch };
    let evidence = match load(bundle, entry, job) {
        Ok(e) => e,
        Err(status) => {
            return EpochResult { at, determinism: status.clone(), recorded: status, rows: None, output_schema: None }
        }
    };
    let whole = evidence.capture.is_whole() && evidence.capture.header.holds_control_events();
    let partial_why = if evidence.capture.header.truncated {
        Some(format!(
            "the capture is truncated at its bound ({} records of {})",
            evidence.capture.header.bound, evidence.capture.header.true_records
        ))
    } else if evidence.capture.cut_short {
        Some("the capture file holds fewer events than its header counts (cut short)".to_string())
    } else if !evidence.capture.header.holds_control_events() {
        Some("a version 1 capture holds records only".to_string())
    } else {
        None
    };
    let verification = match verify(&evidence) {
        Ok(v) => v,
        Err(e) => {
            let status = EpochStatus::Failed(format!("{at}: {e}"));
            return EpochResult { at, determinism: status.clone(), recorded: status, rows: None, output_schema: None };
        }
    };
    let determinism = if !verification.identical {
        EpochStatus::Failed(format!(
            "{at}: two replays differ at {}",
            verification.first_difference.map(|d| d.to_string()).unwrap_or_default()
        ))
    } else if let Some(why) = &partial_why {
        EpochStatus::Unavailable(format!("{at}: {why}; the stored prefix replayed identically twice"))
    } else {
        EpochStatus::Passed
    };
    let recorded = match &partial_why {
        Some(why) => EpochStatus::Unavailable(format!("{at}: {why}")),
        None => compare_downstream(bundle, job, &evidence, &verification.outcome),
    };
    let rows = verification.outcome.emissions;
    // The spec planned when the epoch loaded (`replayable`): this cannot fail.
    let output_schema = evidence.spec.plan().ok().map(|p| p.output_schema);
    EpochResult { at, determinism, recorded, rows: (whole && keep_rows).then_some(rows), output_schema }
}

/// Where the bundle holds the participant's snapshot of the epoch's own
/// checkpoint (the state production reached at the barrier that closed the
/// epoch), the replay, whole, must end in exactly that state: why not, if not.
fn end_state_differs(evidence: &Evidence, at: &EpochRef, end: &clink_engine::checkpoint::StateSlots) -> Option<String> {
    let participant = clink_engine::checkpoint::participant_name(at.operator, at.subtask);
    let (_, snapshot) = evidence.snapshots.iter().find(|((_, p, c), _)| *p == participant && *c == at.epoch)?;
    if &snapshot.slots == end {
        return None;
    }
    let differs: Vec<&String> = snapshot
        .slots
        .0
        .keys()
        .chain(end.0.keys())
        .filter(|name| snapshot.slots.0.get(*name) != end.0.get(*name))
        .collect();
    Some(format!(
        "{at}: the replay ends in another state than {participant}'s snapshot of checkpoint {} (slots {differs:?} differ): the snapshot is not what this epoch's events make of its starting state",
        at.epoch
    ))
}

/// Compares the replay's rows with each consumer's capture of the same epoch.
fn compare_downstream(
    bundle: &Bundle,
    job: &JobEvidence<'_>,
    evidence: &EpochEvidence,
    outcome: &ReplayOutcome,
) -> EpochStatus {
    let (epochs, rows) = (job.epochs, &outcome.emissions);
    let spec = &evidence.spec;
    let at = &evidence.at;
    let planned = match spec.plan() {
        Ok(p) => p,
        Err(e) => return EpochStatus::Failed(format!("{at}: its op.json does not plan: {e}")),
    };
    if !planned.spec.descriptor.replays_as_live {
        return EpochStatus::Unsupported(format!(
            "{at}: {} reads the clock while handling records, so its replay agrees with other replays, not with production",
            planned.spec.type_name
        ));
    }
    // Production's own state at the barrier, where the bundle holds it.
    if let Some(why) = end_state_differs(job.evidence, at, &outcome.end_state) {
        return EpochStatus::Failed(why);
    }
    if spec.outputs.is_empty() {
        return EpochStatus::Unsupported(format!("{at}: the operator has no consumer to compare with"));
    }
    let keys = planned.output_key_columns();
    for consumer in &spec.outputs {
        let Some(consumer_op) = OperatorId::parse(&consumer.operator) else {
            return EpochStatus::Failed(format!("{at}: op.json names consumer {:?}", consumer.operator));
        };
        let routed = match route(spec, consumer, rows, at) {
            Ok(r) => r,
            Err(status) => return status,
        };
        for (target, expected) in routed {
            let rel = capture_path(consumer_op, target, at.epoch);
            if bundle.artifact(&rel).is_none() {
                return EpochStatus::Unavailable(format!("{at}: the downstream capture {rel} is not in the bundle"));
            }
            // Vouched bytes, and a header naming the job, consumer, subtask and
            // epoch its path says: another job's capture at this path never
            // stands in for production's output.
            let downstream = EpochRef { operator: consumer_op, subtask: target, epoch: at.epoch };
            let capture = match epochs.capture(bundle, &downstream) {
                Ok(c) => c,
                Err(e) => return EpochStatus::Failed(format!("{at}: the downstream capture: {e}")),
            };
            if !capture.is_whole() {
                return EpochStatus::Unavailable(format!(
                    "{at}: the downstream capture {rel} is truncated or cut short"
                ));
            }
            let production: Vec<&Row> =
                capture.events.iter().filter_map(|e| if let Event::Record(r) = e { Some(r) } else { None }).collect();
            if let Some(d) = keyed_order_diff(&expected, &production, &keys) {
                return EpochStatus::Failed(format!("{at}: the replay differs from what {rel} received: {d}"));
            }
        }
    }
    EpochStatus::Passed
}

/// Which consumer subtask received which of the rows, predicted with the
/// runtime's own routing, when the topology lets a replay say.
fn route<'r>(
    spec: &clink_engine::capture::OpSpecFile,
    consumer: &clink_engine::capture::spec::Neighbour,
    rows: &'r [Row],
    at: &EpochRef,
) -> Result<Vec<(u32, Vec<&'r Row>)>, EpochStatus> {
    let partition = spec
        .output_partition(consumer)
        .map_err(|e| EpochStatus::Failed(format!("{at}: op.json's partition to {}: {e}", consumer.operator)))?;
    let route = Route::of(&partition);
    match route {
        Route::Forward if consumer.parallelism != spec.parallelism => {
            return Err(EpochStatus::Unsupported(format!(
                "{at}: a forward edge between parallelisms {} and {}",
                spec.parallelism, consumer.parallelism
            )))
        }
        Route::Hash(_) if spec.parallelism != 1 => {
            return Err(EpochStatus::Unsupported(format!(
                "{at}: {} subtasks feed each consumer subtask by hash; their interleaving is not captured",
                spec.parallelism
            )))
        }
        _ => {}
    }
    let consumers = consumer.parallelism.max(1);
    let mut routed: Vec<(u32, Vec<&Row>)> =
        route.broadcast_targets(at.subtask, consumers).map(|t| (t, Vec::new())).collect();
    for row in rows {
        let target = route.target(at.subtask, row, consumers);
        match routed.iter_mut().find(|(t, _)| *t == target) {
            Some((_, rows)) => rows.push(row),
            None => return Err(EpochStatus::Failed(format!("{at}: a row routed to subtask {target} of {consumers}"))),
        }
    }
    Ok(routed)
}

fn conclude<'a>(
    name: &'static str,
    meaning: &str,
    mut counts: Counts,
    omitted: &[String],
    results: impl Iterator<Item = (&'a EpochRef, &'a EpochStatus)>,
) -> CheckResult {
    let mut details = Vec::new();
    for (_, status) in results {
        match status {
            EpochStatus::Passed => counts.passed += 1,
            EpochStatus::Failed(why) => {
                counts.failed += 1;
                details.push(format!("failed: {why}"));
            }
            EpochStatus::Unavailable(why) => {
                counts.unavailable += 1;
                details.push(format!("unavailable: {why}"));
            }
            EpochStatus::Unsupported(why) => {
                counts.unsupported += 1;
                details.push(format!("unsupported: {why}"));
            }
        }
    }
    if counts.omitted > 0 {
        details.push(format!(
            "omitted by --max-replays ({} epochs), the first: {}",
            counts.omitted,
            omitted.join("; ")
        ));
    }
    let (status, reason, next) = if counts.failed > 0 {
        (
            Status::Failed,
            format!("{} failed", count(counts.failed, "selected epoch", "selected epochs")),
            "read the failures in the details; freeze one with incident-regress to reproduce it",
        )
    } else if counts.selected == 0 {
        (
            Status::Unavailable,
            "no captured epoch is selected; an empty selection never passes".to_string(),
            "collect with --include-captures, or widen --op/--subtask/--epoch",
        )
    } else if counts.passed == counts.selected {
        (Status::Passed, meaning.to_string(), "")
    } else if counts.omitted > 0 || counts.unavailable > 0 {
        (
            Status::Unavailable,
            "some selected epochs were not checked whole".to_string(),
            "raise --max-replays to the selection's size, or narrow --op/--subtask/--epoch to the epochs that need checking",
        )
    } else {
        (Status::Unsupported, "the only gap is epochs this build cannot replay or compare".to_string(), "")
    };
    let mut result = CheckResult::new(name, status, reason).next(next).details(details);
    result.counts = Some(counts);
    result.evidence.push(format!(
        "counts: selected {}, checked {}, passed {}, failed {}, unavailable {}, unsupported {}, omitted {}",
        counts.selected,
        counts.checked,
        counts.passed,
        counts.failed,
        counts.unavailable,
        counts.unsupported,
        counts.omitted
    ));
    result
}
