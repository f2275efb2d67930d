//! The consistency checks: checkpoint.marker, checkpoint.restore_rule,
//! checkpoint.participants and state.decode, each a judgement of THE
//! reader's model of the bundle (`clink_bundle::model`), which read every
//! marker, record, receipt, sidecar and snapshot with the engine's own
//! readers and compared every fact two of them state. A check here fails on
//! every finding of its facts, and adds the seed's own rules (the restore
//! choice recomputed, the participants against the graph, every snapshot
//! restored).

use std::collections::BTreeSet;

use clink_basics::digest::sha256_hex;
use clink_basics::text::count;
use clink_bundle::graph::{GraphProblem, KnownGraph};
use clink_bundle::model::{Evidence, Fact};
use clink_bundle::Bundle;
use clink_engine::checkpoint::layout::{parse_participant_name, participant_name};
use clink_engine::checkpoint::{restore_point_from, RestoreRule};
use clink_engine::job::JobGraph;

use super::{CheckResult, Status};

/// The findings of some facts, as a check's details: `None` when there is none.
pub(crate) fn findings(evidence: &Evidence, facts: &[Fact]) -> Option<Vec<String>> {
    let found: Vec<String> =
        evidence.findings.iter().filter(|f| facts.contains(&f.fact)).map(|f| f.detail.clone()).collect();
    (!found.is_empty()).then_some(found)
}

fn failed_on(name: &'static str, what: &str, details: Vec<String>) -> CheckResult {
    // The first disagreement is the reason; every one is in the details.
    let first = details.first().cloned().unwrap_or_default();
    let more = match details.len() {
        0 | 1 => String::new(),
        n => format!(" (and {} more between {what})", n - 1),
    };
    CheckResult::new(name, Status::Failed, format!("{first}{more}"))
        .next("two artifacts that state the same fact disagree: one was altered, or is another run's; collect again")
        .details(details.into_iter().take(30))
}

pub fn marker(bundle: &Bundle, evidence: &Evidence, graph: &Result<KnownGraph, GraphProblem>) -> CheckResult {
    let sel = &bundle.manifest.selection;
    let name = "checkpoint.marker";
    let Some(m) = evidence.completed.get(&sel.checkpoint) else {
        return CheckResult::new(
            name,
            Status::Failed,
            "the selected COMPLETED marker is not in the bundle, or does not read",
        )
        .next("the checkpoint directory the bundle came from is damaged or the bundle was altered; inspect the marker")
        .details(findings(evidence, &[Fact::Unread]).unwrap_or_default());
    };
    if m.generation != sel.generation {
        return CheckResult::new(
            name,
            Status::Failed,
            format!("the marker names generation {}, the manifest {}", m.generation, sel.generation),
        );
    }
    let listed: BTreeSet<&String> = sel.participants.iter().collect();
    if m.participants.iter().collect::<BTreeSet<_>>() != listed || m.participants.len() != sel.participants.len() {
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
    if let Some(found) = findings(evidence, &[Fact::Marker]) {
        return failed_on(name, "the markers, their job graphs and the traces", found);
    }
    CheckResult::new(
        name,
        Status::Passed,
        "the selected COMPLETED marker parses and names this job, this checkpoint, the manifest's generation and participants, and a job graph that reads; every marker agrees with its graph and the traces",
    )
    .evidence([
        format!(
            "COMPLETED-{}: job {}, generation {}, {} participants, kind {}, marker version {}{}",
            m.checkpoint,
            m.job,
            m.generation,
            m.participants.len(),
            m.kind.as_str(),
            m.version,
            m.run.as_ref().map(|r| format!(", written by {r}")).unwrap_or_default()
        ),
        graph_evidence,
        format!("{} COMPLETED markers read", evidence.completed.len()),
    ])
}

pub fn restore_rule(bundle: &Bundle, evidence: &Evidence) -> CheckResult {
    let name = "checkpoint.restore_rule";
    let sel = &bundle.manifest.selection;
    // The family the evidence says (the manifest's flag only where no
    // evidence says one: the claims check holds the two to each other).
    let Some(confirmation) = evidence.family.or(bundle.manifest.job.requires_commit_confirmation) else {
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
    let completed: Vec<u64> = evidence.completed.keys().copied().collect();
    let confirmed: Vec<u64> = evidence.confirmed.keys().copied().collect();
    let point = restore_point_from(completed, confirmed, evidence.restored.clone(), rule);
    let mut details = Vec::new();
    let mut evidence_list = vec![
        format!("rule {}", rule.name()),
        format!("markers: completed {:?}, confirmed {:?}", point.completed, point.confirmed),
    ];
    if let Some(r) = &point.restored {
        evidence_list.push(format!(
            "RESTORED: restored_from {}, next {}; passes over {:?}{}",
            r.restored_from,
            r.next,
            point.passed_over,
            r.run.as_ref().map(|run| format!("; written by {run}")).unwrap_or_default()
        ));
    }
    if let Some(named) = sel.named {
        evidence_list.push(format!("the manifest says checkpoint {named} was named; the engine chose {engine_choice}"));
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
        .evidence(evidence_list)
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
        .evidence(evidence_list)
        .next("the manifest or the markers were altered, or the markers changed after the choice; collect again");
    }
    if confirmation && point.checkpoint > 0 {
        match evidence.confirmed.get(&point.checkpoint) {
            None => details.push(format!("CONFIRMED-{} is the chosen point and does not read", point.checkpoint)),
            Some(m) if m.confirmed_by == "import" => evidence_list.push(format!(
                "CONFIRMED-{}: confirmed by a dataset import, as the bundle's IMPORTED record says, for sinks {:?}; their receipts are the exporting run's",
                point.checkpoint, m.sinks
            )),
            Some(m) => evidence_list.push(format!(
                "CONFIRMED-{} (by {}): every sink's receipt of it read, each the transaction its snapshot holds: {:?}",
                point.checkpoint, m.confirmed_by, m.sinks
            )),
        }
    }
    details.extend(findings(evidence, &[Fact::Restore]).unwrap_or_default());
    if !details.is_empty() {
        return failed_on(name, "the restore records, the family's evidence and the markers", details)
            .evidence(evidence_list);
    }
    let mut result = CheckResult::new(
        name,
        Status::Passed,
        "the engine's restore choice, recomputed over the bundle's markers, is the one recorded, and every restore record, CONFIRMED marker and receipt agrees with the rest of the evidence",
    )
    .evidence(evidence_list);
    if confirmation {
        result.details.push(
            "a job in the confirmation family runs the in-doubt walk after a takeover, which asks the sinks' systems and can move the point; offline nothing can say how far".into(),
        );
    }
    result
}

/// The participants a job graph deploys: every operator at its parallelism.
fn deployed(graph: &JobGraph) -> BTreeSet<String> {
    graph.operators.iter().flat_map(|o| (0..o.spec.parallelism).map(move |s| participant_name(o.spec.id, s))).collect()
}

pub fn participants(bundle: &Bundle, evidence: &Evidence, graph: &Result<KnownGraph, GraphProblem>) -> CheckResult {
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
        let key = (sel.generation, p.clone(), sel.checkpoint);
        if !evidence.sidecars.contains_key(&key) {
            problems.push(format!(
                "{p}: its sidecar of checkpoint {} is not in the bundle, or does not read",
                sel.checkpoint
            ));
        }
        if bundle.manifest.contents.state {
            if evidence.snapshots.contains_key(&key) {
                verified += 1;
            } else {
                problems.push(format!(
                    "{p}: its snapshot of checkpoint {} is not in the bundle, or does not verify",
                    sel.checkpoint
                ));
            }
        }
    }
    problems.extend(findings(evidence, &[Fact::Participants]).unwrap_or_default());
    if !problems.is_empty() {
        return CheckResult::new(
            name,
            Status::Failed,
            format!("{} with the checkpoints' participants", count(problems.len(), "problem", "problems")),
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

pub fn decode(bundle: &Bundle, evidence: &Evidence) -> CheckResult {
    let name = "state.decode";
    if !bundle.manifest.contents.state {
        return CheckResult::new(
            name,
            Status::Unavailable,
            "the bundle holds no snapshots (collected without --include-state)",
        )
        .next("collect with --include-state to decode the state");
    }
    let mut decoded = Vec::new();
    let mut problems = findings(evidence, &[Fact::State]).unwrap_or_default();
    for ((generation, participant, checkpoint), snapshot) in &evidence.snapshots {
        let Some((op, subtask)) = parse_participant_name(participant) else {
            problems.push(format!("{participant:?} is not a participant name"));
            continue;
        };
        let planned = evidence
            .graph_at(*checkpoint)
            .and_then(|g| g.operator(op).cloned())
            .or_else(|| evidence.op_specs.get(&(op, subtask)).and_then(|s| s.plan().ok()));
        let Some(planned) = planned else {
            problems.push(format!("{participant}'s snapshot of checkpoint {checkpoint} (v{generation}): no job graph or op.json of the bundle says what operator {op} is"));
            continue;
        };
        match planned.decode_state(&snapshot.slots) {
            Ok(()) => {
                let slots: Vec<String> = snapshot
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
            Err(e) => problems.push(format!(
                "{participant}'s snapshot of checkpoint {checkpoint}: {} does not restore it: {e}",
                planned.spec.type_name
            )),
        }
    }
    if !problems.is_empty() {
        problems.sort();
        problems.dedup();
        return CheckResult::new(
            name,
            Status::Failed,
            format!("{} with the participants' state", count(problems.len(), "problem", "problems")),
        )
        .details(problems.into_iter().chain(decoded));
    }
    if decoded.is_empty() {
        return CheckResult::new(name, Status::Unavailable, "the bundle lists no snapshot to decode");
    }
    CheckResult::new(
        name,
        Status::Passed,
        "every included snapshot restores through the production restore path, holds only keys of its subtask's key groups, and names the run its checkpoint's marker does",
    )
    .evidence([format!("{} snapshots decoded (state names, versions, fingerprints in details)", decoded.len())])
    .details(decoded)
}
