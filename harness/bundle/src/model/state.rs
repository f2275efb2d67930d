//! The participants' state: every sidecar and snapshot the bundle lists, each
//! read with the restore path's own rule (the sidecar and the header name
//! what the path says, the snapshot is what its sidecar vouches for), then
//! held to its checkpoint's marker (generation, participants) and to its key
//! groups: a subtask's keyed state holds only the keys it owns.

use clink_engine::checkpoint::layout::parse_participant_name;
use clink_engine::job::PlannedOperator;

use super::{Evidence, Fact};
use crate::manifest::Bundle;
use crate::paths::ArtifactKind;

pub(super) fn read(bundle: &Bundle, e: &mut Evidence) {
    for (a, kind) in
        bundle.artifacts_of_kind(|k| matches!(k, ArtifactKind::Snapshot { .. } | ArtifactKind::SnapshotMeta { .. }))
    {
        match kind {
            ArtifactKind::SnapshotMeta { generation, participant, checkpoint, .. } => {
                match bundle.snapshot_meta(generation, &participant, checkpoint) {
                    Ok(meta) => {
                        e.sidecars.insert((generation, participant, checkpoint), meta);
                    }
                    Err(why) => e.find(Fact::Unread, super::placed(&a.path, &why)),
                }
            }
            ArtifactKind::Snapshot { generation, participant, checkpoint, .. } => {
                match bundle.snapshot(generation, &participant, checkpoint) {
                    Ok(s) => {
                        e.snapshots.insert((generation, participant, checkpoint), s);
                    }
                    Err(why) => e.find(Fact::State, super::placed(&a.path, &why)),
                }
            }
            _ => {}
        }
    }
}

/// The operator a participant is, at a checkpoint: its marker's graph's.
fn operator_at<'a>(e: &'a Evidence, participant: &str, checkpoint: u64) -> Option<&'a PlannedOperator> {
    let (op, _) = parse_participant_name(participant)?;
    e.graph_at(checkpoint)?.operator(op)
}

pub(super) fn compare(e: &mut Evidence) {
    let mut found = Vec::new();
    for (g, p, c) in e.sidecars.keys() {
        let Some(marker) = e.completed.get(c) else {
            found.push(format!(
                "{p}'s state of checkpoint {c}: no COMPLETED marker of the bundle records checkpoint {c}"
            ));
            continue;
        };
        if marker.generation != *g {
            found.push(format!(
                "{p}'s state of checkpoint {c} is of generation {g}; COMPLETED-{c} names generation {}",
                marker.generation
            ));
        }
        if !marker.participants.contains(p) {
            found.push(format!("{p}'s state of checkpoint {c}: COMPLETED-{c} records no ack of {p}"));
        }
    }
    for ((g, p, c), snapshot) in &e.snapshots {
        if !e.sidecars.contains_key(&(*g, p.clone(), *c)) {
            found.push(format!("{p}'s snapshot of checkpoint {c} is listed without its sidecar"));
        }
        let Some(op) = operator_at(e, p, *c) else { continue };
        let subtask = parse_participant_name(p).map_or(0, |(_, s)| s);
        if subtask >= op.spec.parallelism {
            found.push(format!(
                "{p}'s state of checkpoint {c}: operator {} runs {} subtasks",
                op.spec.id, op.spec.parallelism
            ));
            continue;
        }
        // The state must be one this operator's restore takes.
        if let Err(why) = op.decode_state(&snapshot.slots) {
            found.push(format!("{p}'s snapshot of checkpoint {c}: {} does not restore it: {why}", op.spec.type_name));
            continue;
        }
        let (misplaced, _) = clink_engine::inspect::misplaced_and_undocumented(op, subtask, &snapshot.slots);
        if let Some(row) = misplaced.first() {
            found.push(format!(
                "{p}'s snapshot of checkpoint {c} holds {} keyed rows of keys another subtask of operator {} owns (the key-group rule), the first a {} {:?}: state of another subtask",
                misplaced.len(),
                op.spec.id,
                row.kind,
                row.values
            ));
        }
    }
    for detail in found {
        e.find(Fact::State, detail);
    }
}
