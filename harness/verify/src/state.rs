//! The consistency checks: checkpoint.marker, checkpoint.restore_rule,
//! checkpoint.participants and state.decode, each run on the bundle's copy of
//! the checkpoint directory with the engine's own readers (the ones its
//! restore runs). Where two pieces of evidence name the same thing (the
//! marker and the manifest, a snapshot's header and its path and sidecar, the
//! marker's participants and the job graph), the check requires them to agree.
//! Every file is read through the bundle's vouched readers: the bytes decided
//! on are the bytes the manifest lists, found by their path.

use clink_basics::text::count;
use std::collections::BTreeSet;

use clink_basics::digest::sha256_hex;
use clink_basics::ids::OperatorId;
use clink_bundle::graph::{GraphProblem, KnownGraph};
use clink_bundle::paths::ArtifactKind;
use clink_bundle::Bundle;
use clink_engine::checkpoint::layout::{parse_participant_name, participant_name};
use clink_engine::checkpoint::{restore_point_from, RestoreRule};
use clink_engine::job::{JobGraph, PlannedOperator};

use super::{CheckResult, Status};

pub fn marker(bundle: &Bundle, graph: &Result<KnownGraph, GraphProblem>) -> CheckResult {
    let sel = &bundle.manifest.selection;
    let name = "checkpoint.marker";
    let m = match bundle.completed_marker(sel.checkpoint) {
        Ok(m) => m,
        Err(e) => return CheckResult::new(name, Status::Failed, format!("the selected marker is not valid: {e}"))
            .next(
            "the checkpoint directory the bundle came from is damaged or the bundle was altered; inspect the marker",
        ),
    };
    if m.generation != sel.generation {
        return CheckResult::new(
            name,
            Status::Failed,
            format!("the marker names generation {}, the manifest {}", m.generation, sel.generation),
        );
    }
    if m.participants.iter().collect::<BTreeSet<_>>() != sel.participants.iter().collect() {
        return CheckResult::new(name, Status::Failed, "the marker's participants differ from the manifest's")
            .details([format!("marker: {:?}", m.participants), format!("manifest: {:?}", sel.participants)]);
    }
    let graph_evidence = match graph {
        Ok(known) => format!("job graph: {}", known.source),
        Err(GraphProblem::Absent(why)) => format!("job graph: none ({why})"),
        Err(GraphProblem::Broken(why)) => {
            return CheckResult::new(name, Status::Failed, format!("the job graph does not hold: {why}"))
                .next("the bundle was altered, or the job changed between the marker and the manifest; collect again")
        }
    };
    CheckResult::new(
        name,
        Status::Passed,
        "the selected COMPLETED marker parses and names this job, this checkpoint, the manifest's generation and participants, and a job graph that reads",
    )
    .evidence([
        format!(
            "COMPLETED-{}: job {}, generation {}, {} participants, kind {}, marker version {}",
            m.checkpoint,
            m.job,
            m.generation,
            m.participants.len(),
            m.kind.as_str(),
            m.version
        ),
        graph_evidence,
    ])
}

pub fn restore_rule(bundle: &Bundle) -> CheckResult {
    let name = "checkpoint.restore_rule";
    let sel = &bundle.manifest.selection;
    let Some(confirmation) = bundle.manifest.job.requires_commit_confirmation else {
        return CheckResult::new(
            name,
            Status::Unsupported,
            "the bundle does not say whether the job's sinks need commit confirmation, so which rule applies is unknown",
        )
        .next("collect from a checkpoint directory whose markers name the job graph, or pass --commit-confirmation");
    };
    let Some(engine_choice) = sel.engine_choice else {
        return CheckResult::new(
            name,
            Status::Unsupported,
            "the collection named its checkpoint without a restore rule, so it recorded no engine choice to recompute",
        )
        .next("collect again without --checkpoint, or with the rule known");
    };
    let rule = RestoreRule::for_confirmation(confirmation);
    let point = match bundle.markers() {
        Ok(m) => restore_point_from(m.completed, m.confirmed, m.restored, rule),
        Err(e) => return CheckResult::new(name, Status::Failed, format!("the markers cannot be read: {e}")),
    };
    let mut evidence = vec![
        format!("rule {}", rule.name()),
        format!("markers: completed {:?}, confirmed {:?}", point.completed, point.confirmed),
    ];
    if let Some(r) = &point.restored {
        evidence.push(format!(
            "RESTORED: restored_from {}, next {}; passes over {:?}",
            r.restored_from, r.next, point.passed_over
        ));
    }
    if let Some(named) = sel.named {
        evidence.push(format!("the manifest says checkpoint {named} was named; the engine chose {engine_choice}"));
    }
    if sel.named.is_none() && sel.checkpoint != point.checkpoint {
        return CheckResult::new(
            name,
            Status::Failed,
            format!(
                "no checkpoint was named, so the bundle is of the engine's choice, {}; the manifest selects {}",
                point.checkpoint, sel.checkpoint
            ),
        )
        .evidence(evidence)
        .next("the manifest was altered; collect again");
    }
    if point.checkpoint != engine_choice {
        return CheckResult::new(
            name,
            Status::Failed,
            format!(
                "the restore rule over the bundle's markers chooses checkpoint {}, the manifest records {engine_choice}",
                point.checkpoint
            ),
        )
        .evidence(evidence)
        .next("the manifest or the markers were altered, or the markers changed after the choice; collect again");
    }
    if confirmation && point.checkpoint > 0 {
        match confirmed_receipts(bundle, point.checkpoint) {
            Ok(vouched) => evidence.push(vouched),
            Err(problem) => {
                return CheckResult::new(name, Status::Failed, problem)
                    .evidence(evidence)
                    .next("a CONFIRMED marker vouches for commits only its sinks' receipts prove; collect again, or find what removed them")
            }
        }
    }
    let mut result = CheckResult::new(
        name,
        Status::Passed,
        "the engine's restore choice, recomputed over the bundle's markers, is the one recorded",
    )
    .evidence(evidence);
    if confirmation {
        result.details.push(
            "a job in the confirmation family runs the in-doubt walk after a takeover, which asks the sinks' systems and can move the point; offline nothing can say how far".into(),
        );
    }
    result
}

/// The chosen CONFIRMED marker and the receipts it vouches for agree: it
/// reads and names this job and checkpoint; it names exactly the
/// commit-confirmed sink subtasks the job graph of that checkpoint deploys
/// (a marker that leaves a sink out vouches for a commit nothing proves);
/// each sink's receipt of it is in the bundle, names that sink and
/// checkpoint, and vouches for the transaction that sink's snapshot of the
/// checkpoint holds (the handle the engine's walk compares). A marker
/// confirmed by a dataset import vouches for the exporting run's receipts,
/// which live with that run; it is said so.
fn confirmed_receipts(bundle: &Bundle, checkpoint: u64) -> Result<String, String> {
    let marker =
        bundle.confirmed_marker(checkpoint).map_err(|e| format!("CONFIRMED-{checkpoint} does not read: {e}"))?;
    let completed =
        bundle.completed_marker(checkpoint).map_err(|e| format!("COMPLETED-{checkpoint} does not read: {e}"))?;
    let graph = bundle
        .job_graph_at(checkpoint)
        .map_err(|e| format!("the job graph of checkpoint {checkpoint} is needed to know its sinks: {e}"))?
        .graph;
    let sinks = confirmed_sinks(&graph);
    let named: BTreeSet<String> = marker.sinks.iter().cloned().collect();
    if named != sinks.keys().cloned().collect::<BTreeSet<_>>() {
        return Err(format!(
            "CONFIRMED-{checkpoint} names sinks {:?}; the job graph's commit-confirmed sink subtasks are {:?}",
            named,
            sinks.keys().collect::<Vec<_>>()
        ));
    }
    if let Some(stranger) = marker.sinks.iter().find(|s| !completed.participants.contains(s)) {
        return Err(format!("CONFIRMED-{checkpoint} names {stranger}, which COMPLETED-{checkpoint} does not"));
    }
    if marker.confirmed_by == "import" {
        // The marker's own word is not evidence: the record the engine
        // writes when it imports a dataset must be in the bundle and name it.
        let imported = bundle.imported_checkpoint().map_err(|e| format!("the IMPORTED record does not read: {e}"))?;
        if imported != Some(checkpoint) {
            return Err(format!(
                "CONFIRMED-{checkpoint} says a dataset import confirmed it, and the bundle's IMPORTED record names {}",
                imported.map_or("nothing (there is none)".to_string(), |c| format!("checkpoint {c}"))
            ));
        }
        return Ok(format!(
            "CONFIRMED-{checkpoint}: confirmed by a dataset import, as the bundle's IMPORTED record says, for sinks {:?}; their receipts are the exporting run's",
            marker.sinks
        ));
    }
    for (sink, confirmation) in &sinks {
        let receipt = bundle.receipt(sink, checkpoint).map_err(|e| {
            format!("CONFIRMED-{checkpoint} names {sink}, and its receipt of checkpoint {checkpoint} is not there to vouch for it: {e}")
        })?;
        let snapshot = bundle.snapshot(completed.generation, sink, checkpoint).map_err(|e| {
            format!("{sink}'s snapshot of checkpoint {checkpoint} is needed to hold its receipt to the transaction it sealed: {e}")
        })?;
        let sealed = (confirmation.handle)(&snapshot.slots)
            .map_err(|e| format!("{sink}'s snapshot of checkpoint {checkpoint}: {e}"))?;
        if sealed.as_ref() != Some(&receipt.handle) {
            return Err(format!(
                "{sink}'s receipt of checkpoint {checkpoint} vouches for {:?}, its snapshot of it holds {:?}: another transaction",
                receipt.handle, sealed
            ));
        }
    }
    Ok(format!(
        "CONFIRMED-{checkpoint} (by {}): every sink's receipt of it read, each the transaction its snapshot holds: {:?}",
        marker.confirmed_by, marker.sinks
    ))
}

/// The commit-confirmed sink subtasks a job graph deploys, with the rule
/// that reads the handle a snapshot holds.
fn confirmed_sinks(
    graph: &JobGraph,
) -> std::collections::BTreeMap<String, clink_engine::operators::CommitConfirmation> {
    graph
        .operators
        .iter()
        .filter_map(|o| Some((o, o.spec.descriptor.confirmation?)))
        .flat_map(|(o, c)| (0..o.spec.parallelism).map(move |s| (participant_name(o.spec.id, s), c)))
        .collect()
}

/// The participants a job graph deploys: every operator at its parallelism.
fn deployed(graph: &JobGraph) -> BTreeSet<String> {
    graph.operators.iter().flat_map(|o| (0..o.spec.parallelism).map(move |s| participant_name(o.spec.id, s))).collect()
}

pub fn participants(bundle: &Bundle, graph: &Result<KnownGraph, GraphProblem>) -> CheckResult {
    let name = "checkpoint.participants";
    let sel = &bundle.manifest.selection;
    if sel.participants.is_empty() {
        // An empty list would vouch for nothing: never a pass.
        return CheckResult::new(
            name,
            Status::Failed,
            "the manifest records no participant of the selected checkpoint",
        );
    }
    let mut problems = Vec::new();
    match graph {
        Ok(known) => {
            let expected = deployed(&known.graph);
            let listed: BTreeSet<String> = sel.participants.iter().cloned().collect();
            for missing in expected.difference(&listed) {
                problems.push(format!("{missing}: the job graph deploys it, the marker records no ack of it"));
            }
            for extra in listed.difference(&expected) {
                problems.push(format!("{extra}: the marker records it, the job graph deploys no such subtask"));
            }
        }
        Err(GraphProblem::Broken(why)) => problems.push(format!("the job graph does not hold: {why}")),
        Err(GraphProblem::Absent(why)) => {
            return CheckResult::new(
                name,
                Status::Unavailable,
                format!(
                "nothing says which subtasks the job deploys, so the marker's participants cannot be checked: {why}"
            ),
            )
            .next("collect from a checkpoint directory written by a build whose markers name the job graph")
        }
    }
    let mut verified = 0;
    for p in &sel.participants {
        // The same rules the engine's restore runs, on the vouched bytes:
        // every name checked against the path.
        let read = if bundle.manifest.contents.state {
            bundle.snapshot(sel.generation, p, sel.checkpoint).map(|_| verified += 1)
        } else {
            bundle.snapshot_meta(sel.generation, p, sel.checkpoint).map(|_| ())
        };
        if let Err(e) = read {
            problems.push(format!("{p}: {e}"));
        }
    }
    if !problems.is_empty() {
        return CheckResult::new(
            name,
            Status::Failed,
            format!("{} with the selected checkpoint's participants", count(problems.len(), "problem", "problems")),
        )
        .details(problems);
    }
    CheckResult::new(
        name,
        Status::Passed,
        "the marker's participants are exactly the subtasks the job graph deploys, and each has its checkpoint in the bundle, naming what its path says",
    )
    .evidence([format!(
        "{} sidecars; {verified} snapshots verified against them and their headers{}",
        sel.participants.len(),
        if bundle.manifest.contents.state { "" } else { " (snapshots not included)" }
    )])
}

/// The planned operator for a participant: from the job graph, else (a bundle
/// of version 1 markers without a manifest) from a captured op.json.
fn operator_for(bundle: &Bundle, graph: Option<&JobGraph>, op: OperatorId, subtask: u32) -> Option<PlannedOperator> {
    if let Some(graph) = graph {
        return graph.operator(op).cloned();
    }
    bundle.op_spec(op, subtask).ok()?.plan().ok()
}

pub fn decode(bundle: &Bundle, graph: &Result<KnownGraph, GraphProblem>) -> CheckResult {
    let name = "state.decode";
    if !bundle.manifest.contents.state {
        return CheckResult::new(
            name,
            Status::Unavailable,
            "the bundle holds no snapshots (collected without --include-state)",
        )
        .next("collect with --include-state to decode the state");
    }
    if let Err(GraphProblem::Broken(why)) = graph {
        return CheckResult::new(name, Status::Failed, format!("the job graph does not hold: {why}"));
    }
    let graph = graph.as_ref().ok().map(|k| &k.graph);
    let mut decoded = Vec::new();
    let mut problems = Vec::new();
    let mut unknown = Vec::new();
    for (generation, participant, checkpoint) in snapshots_to_decode(bundle) {
        let at = bundle.layout().snapshot(generation, &participant, checkpoint);
        let at = bundle.bundle_path(&at).unwrap_or_else(|_| at.display().to_string());
        let verified = match bundle.snapshot(generation, &participant, checkpoint) {
            Ok(v) => v,
            Err(e) => {
                problems.push(e.to_string());
                continue;
            }
        };
        let Some((op, subtask)) = parse_participant_name(&participant) else {
            problems.push(format!("{at}: participant {participant:?} is not a participant name"));
            continue;
        };
        let Some(planned) = operator_for(bundle, graph, op, subtask) else {
            let why = if graph.is_some() {
                "the job graph has no operator"
            } else {
                "no job graph or op.json says what operator"
            };
            unknown.push(format!("{at}: {why} {op}"));
            continue;
        };
        match planned.decode_state(&verified.slots) {
            Ok(()) => {
                let slots: Vec<String> = verified
                    .slots
                    .0
                    .iter()
                    .map(|(n, s)| format!("{n} v{} {}", s.version, &sha256_hex(&s.bytes)[..16]))
                    .collect();
                decoded.push(format!(
                    "{participant} checkpoint {checkpoint} ({}): {}",
                    planned.spec.type_name,
                    slots.join(", ")
                ));
            }
            Err(e) => problems.push(format!("{at}: {} does not restore: {e}", planned.spec.type_name)),
        }
    }
    if !problems.is_empty() {
        return CheckResult::new(
            name,
            Status::Failed,
            format!("{} restore", count(problems.len(), "snapshot does not", "snapshots do not")),
        )
        .details(problems.into_iter().chain(decoded));
    }
    if decoded.is_empty() && unknown.is_empty() {
        return CheckResult::new(name, Status::Unavailable, "the bundle lists no snapshot to decode");
    }
    if !unknown.is_empty() {
        let status = if graph.is_some() { Status::Failed } else { Status::Unavailable };
        return CheckResult::new(name, status, "some snapshots belong to operators the bundle does not describe")
            .next("collect from a checkpoint directory whose markers name the job graph")
            .details(unknown.into_iter().chain(decoded));
    }
    CheckResult::new(name, Status::Passed, "every included snapshot restores through the production restore path")
        .evidence([format!("{} snapshots decoded (state names, versions, fingerprints in details)", decoded.len())])
        .details(decoded)
}

/// The snapshots state.decode decodes, found by path, whatever their role
/// says: every participant's snapshot of the selected checkpoint (which the
/// profile requires, listed or not: one missing is a problem, never a
/// smaller selection), and every other snapshot the bundle lists.
fn snapshots_to_decode(bundle: &Bundle) -> BTreeSet<(u32, String, u64)> {
    let sel = &bundle.manifest.selection;
    let mut wanted: BTreeSet<(u32, String, u64)> =
        sel.participants.iter().map(|p| (sel.generation, p.clone(), sel.checkpoint)).collect();
    for (_, kind) in bundle.artifacts_of_kind(|k| matches!(k, ArtifactKind::Snapshot { .. })) {
        if let ArtifactKind::Snapshot { generation, participant, checkpoint, .. } = kind {
            wanted.insert((generation, participant, checkpoint));
        }
    }
    wanted
}
