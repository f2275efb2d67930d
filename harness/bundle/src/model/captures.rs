//! The flight recorder's evidence: every captured epoch (header and counts,
//! read whole), every op.json and every sink interval's evidence, each held
//! to its path, to the job graph of its epoch's checkpoint, and to each other.

use std::collections::BTreeSet;

use clink_basics::ids::OperatorId;
use clink_engine::capture::spec::{Neighbour, MAX_DOC_BYTES};
use clink_engine::capture::{read_capture_shape, OpSpecFile};
use clink_engine::job::JobGraph;

use super::{Evidence, Fact};
use crate::manifest::Bundle;
use crate::paths::ArtifactKind;

/// A capture larger than this is refused unread (the replay's bound).
pub const MAX_CAPTURE_BYTES: u64 = 1 << 30;

pub(super) fn read(bundle: &Bundle, e: &mut Evidence) {
    for (a, kind) in bundle.artifacts_of_kind(|k| {
        matches!(k, ArtifactKind::Capture { .. } | ArtifactKind::OpSpec { .. } | ArtifactKind::SinkEvidence { .. })
    }) {
        match kind {
            ArtifactKind::OpSpec { operator, subtask } => match bundle.op_spec(operator, subtask) {
                Ok(spec) => {
                    e.op_specs.insert((operator, subtask), spec);
                }
                Err(why) => e.find(Fact::Unread, super::placed(&a.path, &why)),
            },
            ArtifactKind::Capture { operator, subtask, epoch } => {
                let shape = bundle
                    .capture_bytes(operator, subtask, epoch, MAX_CAPTURE_BYTES)
                    .map_err(|w| w.to_string())
                    .and_then(|bytes| read_capture_shape(&bytes).map_err(|w| w.to_string()));
                match shape {
                    Ok(shape) => {
                        e.captures.insert((operator, subtask, epoch), shape);
                    }
                    Err(why) => e.find(Fact::Unread, super::placed(&a.path, &why)),
                }
            }
            ArtifactKind::SinkEvidence { operator, subtask, epoch } => {
                match bundle.sink_evidence(operator, subtask, epoch) {
                    Ok(doc) => {
                        e.sink_evidence.insert((operator, subtask, epoch), doc);
                    }
                    Err(why) => e.find(Fact::Unread, super::placed(&a.path, &why)),
                }
            }
            _ => {}
        }
    }
    let _ = MAX_DOC_BYTES;
}

/// How an op.json and the job graph differ.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SpecMismatch(pub String);

/// Whether a captured op.json describes what the job graph says this
/// operator and subtask are: every field the graph also names, neighbours
/// compared as sets. `Err` names the first field that differs. THE rule: the
/// model, replay and incident-regress all call it.
pub fn spec_agrees_with_graph(spec: &OpSpecFile, graph: &JobGraph, subtask: u32) -> Result<(), SpecMismatch> {
    let op = OperatorId(spec.operator_id());
    let Some(planned) = graph.operator(op) else {
        return Err(SpecMismatch(format!("the graph has no operator {op}")));
    };
    if subtask >= planned.spec.parallelism {
        return Err(SpecMismatch(format!(
            "subtask {subtask}, but operator {op} runs at parallelism {}",
            planned.spec.parallelism
        )));
    }
    let mut expected = OpSpecFile::describe(graph, planned, subtask);
    clink_basics::redact::redact(&mut expected.params);
    let sorted = |n: &[Neighbour]| {
        let mut n = n.to_vec();
        n.sort_by(|a, b| a.operator.cmp(&b.operator));
        n
    };
    let fields: [(&str, bool); 11] = [
        ("job", spec.job == expected.job),
        ("id", spec.id == expected.id),
        ("uid", spec.uid == expected.uid),
        ("type", spec.type_name == expected.type_name),
        ("params", spec.params == expected.params),
        ("parallelism", spec.parallelism == expected.parallelism),
        ("subtask", spec.subtask == expected.subtask),
        ("input_schema", spec.input_schema == expected.input_schema),
        ("output_schema", spec.output_schema == expected.output_schema),
        ("inputs", sorted(&spec.inputs) == sorted(&expected.inputs)),
        ("outputs", sorted(&spec.outputs) == sorted(&expected.outputs)),
    ];
    match fields.iter().find(|(_, same)| !same) {
        Some((field, _)) => Err(SpecMismatch(format!("{field} differs"))),
        None => Ok(()),
    }
}

/// Whether a note of what the collection left out accounts for `path`: it
/// names the file, or a directory holding it (`capture/op-2`, outside
/// `--op`). A count of a directory's files (`capture/op-3/subtask-0: 5
/// epochs`, what older collectors wrote) names none of them.
fn note_covers(note: &str, path: &str) -> bool {
    note == path || path.strip_prefix(note).is_some_and(|rest| rest.starts_with('/'))
}

/// What the collector takes together, here together or said to be left out:
/// every subtask's capture of the selected checkpoint's epoch, every
/// subtask's capture of an epoch one subtask of its operator has, a sink's
/// interval evidence beside each capture but the last a run closed (a kill
/// can fall between the two), and every participant's state of a checkpoint
/// that bounds a sink interval.
fn collected_together(bundle: &Bundle, e: &Evidence, found: &mut Vec<String>) {
    let noted: BTreeSet<&str> =
        bundle.manifest.absent.iter().chain(&bundle.manifest.excluded).map(|n| n.what.as_str()).collect();
    let missing = |path: String, why: &str| {
        (bundle.artifact(&path).is_none() && !noted.iter().any(|note| note_covers(note, &path)))
            .then(|| format!("{path} is neither in the bundle nor said to be left out: {why}"))
    };
    let selected = bundle.manifest.selection.checkpoint;
    if let Some(graph) = e.graph_at(selected).filter(|_| !e.captures.is_empty()) {
        for o in
            graph.operators.iter().filter(|o| o.spec.descriptor.kind() != clink_engine::operators::OperatorKind::Source)
        {
            for s in 0..o.spec.parallelism {
                found.extend(missing(
                    crate::manifest::capture_path(o.spec.id, s, selected),
                    "every subtask's capture of the selected checkpoint's epoch is collected",
                ));
            }
        }
    }
    for (op, _, n) in e.captures.keys() {
        let parallelism = e
            .graph_at(*n)
            .or_else(|| e.graph_at(selected))
            .and_then(|g| g.operator(*op))
            .map_or(0, |o| o.spec.parallelism);
        for s in 0..parallelism {
            found.extend(missing(
                crate::manifest::capture_path(*op, s, *n),
                "its operator's other subtasks' capture of the epoch is collected",
            ));
        }
    }
    let sinks: BTreeSet<OperatorId> = e.sink_evidence.keys().map(|(op, _, _)| *op).collect();
    for ((op, s, n), shape) in &e.captures {
        if !sinks.contains(op)
            && e.graph_at(*n).and_then(|g| g.operator(*op)).is_none_or(|o| o.spec.descriptor.sink_family().is_none())
        {
            continue;
        }
        let run = shape.header.run.as_ref().map(|r| r.incarnation);
        let last = e
            .captures
            .iter()
            .filter(|((o, t, _), c)| o == op && t == s && c.header.run.as_ref().map(|r| r.incarnation) == run)
            .map(|((_, _, m), _)| *m)
            .max();
        if last != Some(*n) && !e.sink_evidence.contains_key(&(*op, *s, *n)) {
            found.push(format!("capture/op-{op}/subtask-{s}/epoch-{n}.sink.json is not in the bundle: a sink writes its interval evidence at every barrier it captured, and this is not the last its run closed"));
        }
    }
    if bundle.manifest.contents.state {
        let bounds: BTreeSet<u64> =
            e.sink_evidence.iter().flat_map(|((_, _, n), d)| [*n, d.previous_barrier]).collect();
        for c in bounds {
            let Some(marker) = e.completed.get(&c) else { continue };
            for p in &marker.participants {
                let base = format!("checkpoint/_state/{}/v{}/{p}/checkpoint-{c}.snap", e.job, marker.generation);
                let why = "every participant's state of a checkpoint that bounds a sink interval is collected";
                found.extend(missing(format!("{base}.meta"), why));
                found.extend(missing(base, why));
            }
        }
    }
}

pub(super) fn compare(bundle: &Bundle, e: &mut Evidence) {
    let mut found = Vec::new();
    collected_together(bundle, e, &mut found);
    let job = e.job;
    // The recorder's bound is the run's: every capture of one run has it.
    let mut bounds: std::collections::BTreeMap<Option<u64>, (u64, String)> = std::collections::BTreeMap::new();
    for ((op, s, n), shape) in &e.captures {
        let run = shape.header.run.as_ref().map(|r| r.incarnation);
        let place = crate::manifest::capture_path(*op, *s, *n);
        match bounds.get(&run) {
            Some((bound, other)) if *bound != shape.header.bound => found.push(format!(
                "{place} says its bound is {}; {other}, of the same run, says {bound}",
                shape.header.bound
            )),
            Some(_) => {}
            None => {
                bounds.insert(run, (shape.header.bound, place));
            }
        }
    }
    for ((op, s, n), shape) in &e.captures {
        if let Err(why) = shape.header.check_names(job, op.0, *s, *n) {
            found.push(format!("{}: {why}", crate::manifest::capture_path(*op, *s, *n)));
        }
        let faults = shape.inconsistencies();
        if !faults.is_empty() {
            found.push(format!("{}: {}", crate::manifest::capture_path(*op, *s, *n), faults.join("; ")));
        }
        if !e.op_specs.contains_key(&(*op, *s)) {
            found.push(format!(
                "{}: its op.json, which says what operator it is, is not in the bundle",
                crate::manifest::capture_path(*op, *s, *n)
            ));
        }
    }
    for ((op, s), spec) in &e.op_specs {
        let place = format!("capture/op-{op}/subtask-{s}/op.json");
        if spec.operator_id() != op.0 || spec.subtask != *s || spec.job != job.to_string() {
            found.push(format!(
                "{place}: the op.json names job {} operator {} subtask {}; its path says job {job} operator {op} subtask {s}",
                spec.job, spec.id, spec.subtask
            ));
            continue;
        }
        // The deploy that wrote it ran the newest epoch captured beside it:
        // against that checkpoint's graph (a redeploy may have changed the job
        // since older epochs ran; their replays hold them to their own graphs).
        let newest = e
            .captures
            .keys()
            .filter(|(o, t, n)| o == op && t == s && e.graph_at(*n).is_some())
            .map(|(_, _, n)| *n)
            .max();
        if let Some((n, graph)) = newest.and_then(|n| Some((n, e.graph_at(n)?))) {
            if let Err(why) = spec_agrees_with_graph(spec, graph, *s) {
                found.push(format!("{place} and the job graph of checkpoint {n} name different things: {why}"));
            }
        }
    }
    for ((op, s, n), doc) in &e.sink_evidence {
        let place = format!("capture/op-{op}/subtask-{s}/epoch-{n}.sink.json");
        let placed = (job.to_string(), op.to_string(), *s, *n);
        if (doc.job.clone(), doc.operator.clone(), doc.subtask, doc.epoch) != placed {
            found.push(format!(
                "{place}: the sink evidence names job {} operator {} subtask {} epoch {}; its path says job {} operator {} subtask {} epoch {}",
                doc.job, doc.operator, doc.subtask, doc.epoch, placed.0, placed.1, placed.2, placed.3
            ));
            continue;
        }
        if doc.previous_barrier >= *n {
            found.push(format!("{place}: its previous barrier {} is not before its epoch {n}", doc.previous_barrier));
        }
        match e.captures.get(&(*op, *s, *n)) {
            None => found.push(format!("{place}: it accounts for a capture the bundle does not hold")),
            Some(shape) => {
                let h = &shape.header;
                if doc.capture.file != clink_engine::capture::epoch_file_name(*n) {
                    found.push(format!(
                        "{place}: it accounts for capture {:?}, not {}",
                        doc.capture.file,
                        clink_engine::capture::epoch_file_name(*n)
                    ));
                }
                let account =
                    (doc.capture.records, doc.capture.events, doc.capture.stored_events, doc.capture.truncated);
                let header = (h.true_records, h.true_events, h.stored_events, h.truncated);
                if account != header {
                    found.push(format!(
                        "{place}: it accounts for {} records, {} events, {} stored, truncated {}; the capture's header says {} records, {} events, {} stored, truncated {}",
                        account.0, account.1, account.2, account.3, header.0, header.1, header.2, header.3
                    ));
                }
            }
        }
        let graphs = [e.graph_at(*n), e.graph_at(bundle.manifest.selection.checkpoint)];
        if let Some(graph) = graphs.into_iter().flatten().next() {
            match graph.operator(*op) {
                None => found.push(format!("{place}: the job graph has no operator {op}")),
                Some(o) if o.spec.descriptor.sink_family().is_none() => {
                    found.push(format!("{place}: operator {op} is a {}, not a sink", o.spec.type_name))
                }
                Some(o) if o.spec.uid != doc.uid => found.push(format!(
                    "{place}: the sink evidence names uid {}; the job graph's operator {op} is {}",
                    doc.uid, o.spec.uid
                )),
                Some(o) => {
                    let family = o.spec.descriptor.sink_family().map(|f| f.as_str());
                    let said = doc.sink.get("family").and_then(|f| f.as_str());
                    let type_said = doc.sink.get("type").and_then(|f| f.as_str());
                    if said != family || type_said != Some(o.spec.type_name.as_str()) {
                        found.push(format!(
                            "{place}: the sink's account says a {} of the {} family; the job graph's operator {op} is a {} of the {}",
                            type_said.unwrap_or("(no type)"),
                            said.unwrap_or("(no)"),
                            o.spec.type_name,
                            family.unwrap_or("(no)")
                        ));
                    }
                }
            }
        }
    }
    for detail in found {
        e.find(Fact::Capture, detail);
    }
}

#[cfg(test)]
mod tests {
    use super::note_covers;

    #[test]
    fn a_note_covers_its_file_its_directory_and_its_subtasks_epochs_only() {
        let cap = "capture/op-2/subtask-0/epoch-13.cap";
        assert!(note_covers(cap, cap));
        assert!(note_covers("capture/op-2", cap));
        // Not a neighbour whose name begins the same, another subtask, or a
        // note that only looks like an epoch count.
        assert!(!note_covers("capture/op-2", "capture/op-21/subtask-0/epoch-13.cap"));
        assert!(!note_covers("capture/op-2/subtask-0: 5 epochs", cap));
        assert!(!note_covers("capture/op-2/subtask-1: 5 epochs", cap));
        assert!(!note_covers("capture/op-2/subtask-0: every capture", cap));
        assert!(!note_covers("capture/op-2/subtask-0: many epochs", cap));
        assert!(!note_covers("capture/op-2/subtask-0/epoch-12.cap", cap));
    }
}
