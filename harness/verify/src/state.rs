//! The consistency checks: checkpoint.marker, checkpoint.restore_rule,
//! checkpoint.participants and state.decode, each run on the bundle's copy of
//! the checkpoint directory with the engine's own readers.

use std::collections::BTreeSet;

use clink_basics::digest::sha256_hex;
use clink_basics::ids::OperatorId;
use clink_engine::capture::OpSpecFile;
use clink_engine::checkpoint::backend::{read_snapshot_meta, verify_snapshot};
use clink_engine::checkpoint::layout::parse_participant_name;
use clink_engine::checkpoint::markers::read_completed;
use clink_engine::checkpoint::{restore_point_on_disk_by, CheckpointLayout, RestoreRule};
use clink_engine::job::{JobGraph, PlannedOperator};

use super::{CheckResult, Status};
use clink_bundle::Bundle;

fn layout(bundle: &Bundle) -> CheckpointLayout {
    CheckpointLayout::new(bundle.checkpoint_dir(), bundle.job_id())
}

pub fn marker(bundle: &Bundle) -> CheckResult {
    let sel = &bundle.manifest.selection;
    let name = "checkpoint.marker";
    match read_completed(&layout(bundle), sel.checkpoint) {
        Err(e) => CheckResult::new(name, Status::Failed, format!("the selected marker is not valid: {e}")).next(
            "the checkpoint directory the bundle came from is damaged or the bundle was altered; inspect the marker",
        ),
        Ok(m) if m.generation != sel.generation => CheckResult::new(
            name,
            Status::Failed,
            format!("the marker names generation {}, the manifest {}", m.generation, sel.generation),
        ),
        Ok(m) if m.participants.iter().collect::<BTreeSet<_>>() != sel.participants.iter().collect() => {
            CheckResult::new(name, Status::Failed, "the marker's participants differ from the manifest's")
                .details([format!("marker: {:?}", m.participants), format!("manifest: {:?}", sel.participants)])
        }
        Ok(m) => CheckResult::new(
            name,
            Status::Passed,
            "the selected COMPLETED marker parses and names this job, this checkpoint and the manifest's generation",
        )
        .evidence([format!(
            "COMPLETED-{}: job {}, generation {}, {} participants, kind {}",
            m.checkpoint,
            m.job,
            m.generation,
            m.participants.len(),
            m.kind.as_str()
        )]),
    }
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
        .next("collect with the job manifest (--ha-dir while the job runs) or --commit-confirmation");
    };
    let rule = RestoreRule::for_confirmation(confirmation);
    let point = match restore_point_on_disk_by(&layout(bundle), rule) {
        Ok(p) => p,
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
        evidence.push(format!("collected checkpoint {named} was named; the engine chose {}", sel.engine_choice));
    }
    if point.checkpoint != sel.engine_choice {
        return CheckResult::new(
            name,
            Status::Failed,
            format!(
                "the restore rule over the bundle's markers chooses checkpoint {}, the manifest records {}",
                point.checkpoint, sel.engine_choice
            ),
        )
        .evidence(evidence)
        .next("the manifest or the markers were altered, or the markers changed after the choice; collect again");
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

pub fn participants(bundle: &Bundle) -> CheckResult {
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
    let layout = layout(bundle);
    let mut problems = Vec::new();
    let mut verified = 0;
    for p in &sel.participants {
        let meta_path = layout.snapshot_meta(sel.generation, p, sel.checkpoint);
        let meta = match read_snapshot_meta(&meta_path) {
            Ok(m) => m,
            Err(e) => {
                problems.push(format!("{p}: {e}"));
                continue;
            }
        };
        if meta.participant != *p || meta.checkpoint != sel.checkpoint || meta.job != bundle.manifest.job.id {
            problems.push(format!(
                "{p}: the sidecar names job {} checkpoint {} participant {}",
                meta.job, meta.checkpoint, meta.participant
            ));
            continue;
        }
        if bundle.manifest.contents.state {
            match verify_snapshot(&layout.snapshot(sel.generation, p, sel.checkpoint), &meta_path) {
                Ok(_) => verified += 1,
                Err(e) => problems.push(format!("{p}: {e}")),
            }
        }
    }
    if !problems.is_empty() {
        return CheckResult::new(
            name,
            Status::Failed,
            format!("{} participants' checkpoints do not hold", problems.len()),
        )
        .details(problems);
    }
    CheckResult::new(
        name,
        Status::Passed,
        "every participant the marker records has its checkpoint in the bundle under the marker's generation",
    )
    .evidence([format!(
        "{} sidecars; {verified} snapshots verified against them{}",
        sel.participants.len(),
        if bundle.manifest.contents.state { "" } else { " (snapshots not included)" }
    )])
}

/// The job's graph, from the bundle's job manifest.
pub fn graph(bundle: &Bundle) -> Option<JobGraph> {
    let manifest = clink_engine::job_manifest::read(&bundle.root.join("job/manifest.json")).ok()?;
    clink_engine::job::parse_job(&manifest.graph.to_string()).ok()
}

/// The planned operator for a participant: from the graph, else from a captured op.json.
fn operator_for(bundle: &Bundle, graph: Option<&JobGraph>, op: OperatorId, subtask: u32) -> Option<PlannedOperator> {
    if let Some(o) = graph.and_then(|g| g.operator(op)) {
        return Some(o.clone());
    }
    let spec = clink_engine::capture::subtask_dir(&bundle.capture_dir(), op, subtask).join("op.json");
    OpSpecFile::read(&spec).ok()?.plan().ok()
}

pub fn decode(bundle: &Bundle) -> CheckResult {
    let name = "state.decode";
    if !bundle.manifest.contents.state {
        return CheckResult::new(
            name,
            Status::Unavailable,
            "the bundle holds no snapshots (collected without --include-state)",
        )
        .next("collect with --include-state to decode the state");
    }
    let graph = graph(bundle);
    let mut decoded = Vec::new();
    let mut problems = Vec::new();
    let mut unknown = Vec::new();
    for a in bundle.manifest.artifacts.iter().filter(|a| a.role == "snapshot") {
        let snap = clink_bundle::paths::resolve(&bundle.root, &a.path);
        let meta = snap.with_extension("snap.meta");
        let verified = match verify_snapshot(&snap, &meta) {
            Ok(v) => v,
            Err(e) => {
                problems.push(format!("{}: {e}", a.path));
                continue;
            }
        };
        let Some((op, subtask)) = parse_participant_name(&verified.meta.participant) else {
            problems.push(format!("{}: participant {:?} is not a participant name", a.path, verified.meta.participant));
            continue;
        };
        let Some(planned) = operator_for(bundle, graph.as_ref(), op, subtask) else {
            unknown.push(format!("{}: no job graph or op.json says what operator {op} is", a.path));
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
                    "{} checkpoint {} ({}): {}",
                    verified.meta.participant,
                    verified.meta.checkpoint,
                    planned.spec.type_name,
                    slots.join(", ")
                ));
            }
            Err(e) => problems.push(format!("{}: {} does not restore: {e}", a.path, planned.spec.type_name)),
        }
    }
    if !problems.is_empty() {
        return CheckResult::new(name, Status::Failed, format!("{} snapshots do not restore", problems.len()))
            .details(problems.into_iter().chain(decoded));
    }
    if decoded.is_empty() && unknown.is_empty() {
        return CheckResult::new(name, Status::Unavailable, "the bundle lists no snapshot to decode");
    }
    if !unknown.is_empty() {
        return CheckResult::new(
            name,
            Status::Unavailable,
            "some snapshots belong to operators the bundle does not describe",
        )
        .next("collect while the job runs (--ha-dir) so the bundle holds the job graph")
        .details(unknown.into_iter().chain(decoded));
    }
    CheckResult::new(name, Status::Passed, "every included snapshot restores through the production restore path")
        .evidence([format!("{} snapshots decoded (state names, versions, fingerprints in details)", decoded.len())])
        .details(decoded)
}
