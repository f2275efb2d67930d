//! Captured epochs: which the collection keeps, their operator specs
//! (redacted), their sinks' interval evidence, and the snapshot each epoch's
//! replay starts from.

use std::collections::{BTreeMap, BTreeSet};

use clink_basics::ids::{parse_decimal_u64, OperatorId};
use clink_engine::capture::{subtask_dir, OpSpecFile, SinkEvidence, OP_SPEC_NAME};
use clink_engine::checkpoint::backend::read_dir_names;
use clink_engine::checkpoint::{epoch_start, CheckpointLayout, StartPoint};
use clink_engine::job::JobGraph;
use clink_engine::operators::OperatorKind;
use clink_engine::registry;

use crate::manifest::{capture_path, EpochEntry, Note, RestoredInfo};

use super::copy::{Builder, Need};
use super::refusal::{refusal, Refusal, RefusalKind};
use super::EpochSelection;
use clink_basics::redact::redact;

pub(super) fn gather_captures(
    b: &mut Builder<'_>,
    layout: &CheckpointLayout,
    selected: u64,
    selected_is_final: bool,
    restored: Option<RestoredInfo>,
    generation: u32,
    graph: Option<&JobGraph>,
) -> Result<Vec<EpochEntry>, Refusal> {
    let options = b.options;
    let Some(capture_dir) = &options.capture_dir else {
        b.absent.push(Note { what: "captures".into(), why: "no --capture-dir".into() });
        return Ok(Vec::new());
    };
    let wanted: BTreeSet<u64> = match &options.epochs {
        EpochSelection::Only(list) => list.iter().copied().collect(),
        EpochSelection::All => BTreeSet::new(),
        EpochSelection::Default => {
            // After a final checkpoint the job ended: no epoch follows it.
            let mut e: BTreeSet<u64> = [selected].into();
            if !selected_is_final {
                e.insert(selected + 1);
            }
            if let Some(r) = restored.filter(|r| r.restored_from == selected) {
                e.insert(r.next);
            }
            e
        }
    };
    let known_restores: Vec<(u64, u64)> = restored.map(|r| (r.restored_from, r.next)).into_iter().collect();
    let completed: BTreeSet<u64> = clink_engine::checkpoint::markers::list_completed(layout)
        .map_err(|e| refusal(RefusalKind::Other, e.to_string()))?
        .into_iter()
        .collect();
    let mut entries = Vec::new();
    let ops = read_dir_names(capture_dir).map_err(|e| refusal(RefusalKind::Other, e.to_string()))?;
    // --op keeps the consumers' captures too: replay.recorded_output compares
    // an operator's replay with what its consumers received.
    let kept = options.ops.as_ref().map(|ops| with_consumers(ops, graph, capture_dir));
    for op_name in ops {
        let Some(op) = op_name.strip_prefix("op-").and_then(OperatorId::parse) else { continue };
        if kept.as_ref().is_some_and(|kept| !kept.contains(&op)) {
            b.excluded.push(Note { what: format!("capture/{op_name}"), why: "outside --op".into() });
            continue;
        }
        let subtasks =
            read_dir_names(&capture_dir.join(&op_name)).map_err(|e| refusal(RefusalKind::Other, e.to_string()))?;
        for sub_name in subtasks {
            let Some(subtask) =
                sub_name.strip_prefix("subtask-").and_then(parse_decimal_u64).and_then(|s| u32::try_from(s).ok())
            else {
                continue;
            };
            let dir = subtask_dir(capture_dir, op, subtask);
            let rel_dir = format!("capture/{op_name}/{sub_name}");
            let spec = match OpSpecFile::read(&dir.join(clink_engine::capture::OP_SPEC_NAME)) {
                Ok(spec) => spec,
                Err(e) => {
                    b.absent.push(Note { what: format!("{rel_dir}/op.json"), why: e.to_string() });
                    continue;
                }
            };
            // A capture directory two jobs share holds both jobs' files at
            // one path: only what names this job, operator and subtask is its
            // evidence.
            if let Some(why) = spec_names_another(&spec, options.job, op, subtask) {
                b.absent.push(Note { what: format!("{rel_dir}: every capture"), why });
                continue;
            }
            let mut spec_doc = serde_json::to_value(&spec).map_err(|e| refusal(RefusalKind::Other, e.to_string()))?;
            redact(&mut spec_doc);
            let bytes = serde_json::to_vec_pretty(&spec_doc).map_err(|e| refusal(RefusalKind::Other, e.to_string()))?;
            b.write(&format!("{rel_dir}/op.json"), "op_spec", &bytes, Need::Optional)?;
            let is_sink = registry::kind_of(&spec.type_name) == Some(OperatorKind::Sink);
            // A sink's default epochs also reach back over the intervals the
            // selected checkpoint completed (its reconciliation scope), and
            // over a discarded run's intervals when that scope starts at a
            // restore (what a duplicate there may come from).
            let mut wanted = wanted.clone();
            if is_sink && options.epochs == EpochSelection::Default {
                wanted.extend(sink_scope_epochs(&dir, selected, &completed, restored));
            }
            let names = read_dir_names(&dir).map_err(|e| refusal(RefusalKind::Other, e.to_string()))?;
            let mut intervals: BTreeMap<u64, u64> = BTreeMap::new();
            let mut outside = Vec::new();
            for name in names {
                let Some(epoch) = clink_engine::capture::parse_epoch_file_name(&name) else { continue };
                if options.epochs != EpochSelection::All && !wanted.contains(&epoch) {
                    outside.push(epoch);
                    continue;
                }
                let rel = capture_path(op, subtask, epoch);
                if let Some(why) = capture_names_another(&dir.join(&name), options.job, op, subtask, epoch) {
                    b.absent.push(Note { what: rel, why });
                    continue;
                }
                if !b.copy(&dir.join(&name), &rel, "capture", Need::Optional)? {
                    continue;
                }
                let evidence = clink_engine::capture::sink_evidence_name(epoch);
                let evidence_doc = SinkEvidence::read(&dir.join(&evidence));
                // Evidence that does not read is collected as it is: the
                // verifier reads every listed file and refuses it there.
                let evidence_of_another = match &evidence_doc {
                    Ok(doc) => evidence_names_another(doc, &spec, epoch),
                    Err(_) => None,
                };
                if let Some(why) = evidence_of_another {
                    b.absent.push(Note { what: format!("{rel_dir}/{evidence}"), why });
                } else if dir.join(&evidence).exists()
                    && b.copy(&dir.join(&evidence), &format!("{rel_dir}/{evidence}"), "sink_evidence", Need::Optional)?
                {
                    if let Ok(doc) = &evidence_doc {
                        intervals.insert(epoch, doc.previous_barrier);
                    }
                }
                entries.push(EpochEntry {
                    operator: op.to_string(),
                    subtask,
                    epoch,
                    path: rel,
                    role: if is_sink { "sink" } else { "operator" }.into(),
                });
                if options.include_state && !is_sink {
                    starting_state(b, layout, op, subtask, epoch, &known_restores, generation)?;
                }
            }
            if options.include_state && is_sink {
                let mut bounding: BTreeSet<u64> = BTreeSet::new();
                for (&epoch, &previous) in &intervals {
                    bounding.extend([epoch, previous].into_iter().filter(|c| *c > 0 && completed.contains(c)));
                }
                for checkpoint in bounding {
                    interval_state(b, layout, checkpoint)?;
                }
            }
            // Each file by its path: a count would let the verifier take any
            // missing capture of this subtask as one of them.
            for epoch in outside {
                b.excluded
                    .push(Note { what: capture_path(op, subtask, epoch), why: "outside the selected epochs".into() });
            }
            for epoch in &wanted {
                if !entries.iter().any(|e| e.operator_id() == op && e.subtask == subtask && e.epoch == *epoch) {
                    b.absent.push(Note {
                        what: capture_path(op, subtask, *epoch),
                        why: "not captured (or not yet: the epoch had not ended)".into(),
                    });
                }
            }
        }
    }
    Ok(entries)
}

/// The epochs of a sink subtask's reconciliation scope of `selected`: its
/// interval and, through each interval's previous barrier, every interval
/// back to a completed checkpoint or the run's start. When that walk ends at
/// the newest restore's point, the epochs of the run the restore discarded
/// too. Evidence that does not read ends the walk (the scope then says what
/// is missing).
fn sink_scope_epochs(
    dir: &std::path::Path,
    selected: u64,
    completed: &BTreeSet<u64>,
    restored: Option<RestoredInfo>,
) -> BTreeSet<u64> {
    let mut epochs = BTreeSet::new();
    let mut epoch = selected;
    while epochs.len() < 100_000 {
        let Ok(doc) = SinkEvidence::read(&dir.join(clink_engine::capture::sink_evidence_name(epoch))) else {
            break;
        };
        epochs.insert(epoch);
        let previous = doc.previous_barrier;
        if let Some(r) = restored.filter(|r| r.restored_from == previous && r.next == epoch) {
            epochs.extend(r.restored_from + 1..r.next);
        }
        if previous == 0 || previous >= epoch || completed.contains(&previous) {
            break;
        }
        epoch = previous;
    }
    epochs
}

/// Copies every participant's snapshot and sidecar of a completed checkpoint
/// that bounds a collected sink interval (role `interval_state`), unless the
/// bundle holds them already.
fn interval_state(b: &mut Builder<'_>, layout: &CheckpointLayout, checkpoint: u64) -> Result<(), Refusal> {
    let marker = match clink_engine::checkpoint::markers::read_completed(layout, checkpoint) {
        Ok(m) => m,
        Err(e) => {
            b.absent.push(Note {
                what: format!("the state of checkpoint {checkpoint}, which bounds a sink interval"),
                why: e.to_string(),
            });
            return Ok(());
        }
    };
    for participant in &marker.participants {
        for path in [
            layout.snapshot_meta(marker.generation, participant, checkpoint),
            layout.snapshot(marker.generation, participant, checkpoint),
        ] {
            let file = path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
            let rel = format!("checkpoint/_state/{}/v{}/{participant}/{file}", layout.job(), marker.generation);
            if b.artifacts.iter().any(|a| a.path == rel) {
                continue;
            }
            b.copy(&path, &rel, "interval_state", Need::Optional)?;
        }
    }
    Ok(())
}

/// The operators `--op` names and their direct consumers, from the job graph
/// (or, without one, from each named operator's captured op.json).
fn with_consumers(ops: &[OperatorId], graph: Option<&JobGraph>, capture_dir: &std::path::Path) -> BTreeSet<OperatorId> {
    let mut kept: BTreeSet<OperatorId> = ops.iter().copied().collect();
    for &op in ops {
        match graph {
            Some(g) => kept.extend(g.outputs_of(op).map(|e| e.to)),
            None => {
                let specs = read_dir_names(&capture_dir.join(format!("op-{op}"))).unwrap_or_default();
                for sub in specs {
                    if let Ok(spec) =
                        OpSpecFile::read(&capture_dir.join(format!("op-{op}")).join(sub).join(OP_SPEC_NAME))
                    {
                        kept.extend(spec.outputs.iter().filter_map(|n| OperatorId::parse(&n.operator)));
                    }
                }
            }
        }
    }
    kept
}

/// Copies the snapshot a captured epoch's replay starts from.
fn starting_state(
    b: &mut Builder<'_>,
    layout: &CheckpointLayout,
    op: OperatorId,
    subtask: u32,
    epoch: u64,
    known_restores: &[(u64, u64)],
    generation: u32,
) -> Result<(), Refusal> {
    let participant = clink_engine::checkpoint::participant_name(op, subtask);
    let start = match epoch_start(layout, epoch, known_restores) {
        Ok(StartPoint::Checkpoint(c)) => c,
        Ok(StartPoint::Empty) => return Ok(()),
        Err(why) => {
            b.absent.push(Note {
                what: format!("the starting state of {participant} epoch {epoch}"),
                why: why.to_string(),
            });
            return Ok(());
        }
    };
    for (path, role) in [
        (layout.snapshot_meta(generation, &participant, start), "snapshot_meta"),
        (layout.snapshot(generation, &participant, start), "snapshot"),
    ] {
        let file = path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
        let rel = format!("checkpoint/_state/{}/v{generation}/{participant}/{file}", layout.job());
        if b.artifacts.iter().any(|a| a.path == rel) {
            continue;
        }
        b.copy(&path, &rel, role, Need::Optional)?;
    }
    Ok(())
}

/// Why an op.json is not this job's operator and subtask, if it is not.
fn spec_names_another(spec: &OpSpecFile, job: u64, op: OperatorId, subtask: u32) -> Option<String> {
    let named = (spec.job_id(), spec.operator_id(), spec.subtask);
    (named != (job, op.0, subtask)).then(|| {
        format!(
            "its op.json names job {} operator {} subtask {}, not job {job} operator {op} subtask {subtask}: the capture directory holds another job's files",
            named.0, named.1, named.2
        )
    })
}

/// Why a capture file's header does not name the job, operator, subtask and
/// epoch its path says, if it does not (a file that does not read is left to
/// the copy and the checks, which report it as it is).
fn capture_names_another(path: &std::path::Path, job: u64, op: OperatorId, subtask: u32, epoch: u64) -> Option<String> {
    use std::io::Read;
    let mut head = Vec::with_capacity(clink_engine::capture::format::MAX_HEADER_BYTES);
    let file = std::fs::File::open(path).ok()?;
    file.take(clink_engine::capture::format::MAX_HEADER_BYTES as u64).read_to_end(&mut head).ok()?;
    let h = clink_engine::capture::format::read_capture_header(&head).ok()?;
    let named = (h.job, h.operator, h.subtask, h.epoch);
    (named != (job, op.0, subtask, epoch)).then(|| {
        format!(
            "its header names job {} operator {} subtask {} epoch {}, not what its path says (job {job} operator {op} subtask {subtask} epoch {epoch}): the capture directory holds another job's files",
            named.0, named.1, named.2, named.3
        )
    })
}

/// Why a sink's interval evidence is not this sink's, if it is not: its job,
/// operator, uid, subtask and epoch against the op.json beside it.
fn evidence_names_another(doc: &SinkEvidence, spec: &OpSpecFile, epoch: u64) -> Option<String> {
    let named = (doc.job.as_str(), doc.operator.as_str(), doc.uid.as_str(), doc.subtask, doc.epoch);
    let expected = (spec.job.as_str(), spec.id.as_str(), spec.uid.as_str(), spec.subtask, epoch);
    (named != expected).then(|| {
        format!(
            "it names job {} operator {} uid {:?} subtask {} epoch {}, not job {} operator {} uid {:?} subtask {} epoch {epoch}",
            named.0, named.1, named.2, named.3, named.4, expected.0, expected.1, expected.2, expected.3
        )
    })
}
