//! One captured epoch of an incident bundle, loaded for replay: its operator
//! spec, its capture, and the snapshot it started from, all read from the
//! bundle's copies (the bytes the manifest vouched for) with the engine's
//! readers and the engine's rule for where an epoch starts.

use std::collections::{BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};

use clink_basics::ids::OperatorId;
use clink_basics::ndjson::parse_objects;
use clink_bundle::{Bundle, EpochEntry, EvidenceError, Markers};
use clink_engine::capture::spec::Neighbour;
use clink_engine::capture::{read_capture, Capture, OpSpecFile};
use clink_engine::checkpoint::{epoch_start_from, participant_name, StartPoint};
use clink_engine::job::JobGraph;
use serde_json::Value as Json;

use super::{check_capture_names, replayable, EpochEvidence, EpochRef, ReplayError, StartState, MAX_CAPTURE_BYTES};

/// Operators that call out to other systems are never replayed offline.
pub fn calls_out(type_name: &str) -> bool {
    type_name.contains("lookup") || type_name.contains("predict")
}

/// A trace file larger than this is refused unread.
pub const MAX_TRACE_BYTES: u64 = 256 << 20;

/// The restores a bundle records, and what could not be read to know them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Restores {
    /// (restored_from, next) pairs.
    pub known: Vec<(u64, u64)>,
    /// Trace files that did not read: a restore they name is unknown, so an
    /// epoch whose start only a restore could explain cannot be placed.
    pub unread: Vec<String>,
}

/// The restores the bundle records: the RESTORED record's, and the Redeploy
/// events of the bundle's traces (which name restores the RESTORED record
/// has since been overwritten for). A trace that does not read is listed,
/// never skipped.
pub fn known_restores(bundle: &Bundle) -> Restores {
    let mut known: BTreeSet<(u64, u64)> = BTreeSet::new();
    let mut unread = Vec::new();
    if let Some(r) = bundle.manifest.selection.restored {
        known.insert((r.restored_from, r.next));
    }
    let job = bundle.job_id();
    for a in bundle.trace_artifacts() {
        let read = bundle.read_vouched(&a.path, MAX_TRACE_BYTES).map_err(|e| e.to_string());
        let lines = match read.and_then(|bytes| parse_objects(&bytes).map_err(|e| format!("{}: {e}", a.path))) {
            Ok(lines) => lines,
            Err(e) => {
                unread.push(e);
                continue;
            }
        };
        for (_, v) in lines {
            if v.get("event").and_then(Json::as_str) == Some("Redeploy")
                && v.get("job").and_then(Json::as_u64) == Some(job)
            {
                match (v.get("restore").and_then(Json::as_u64), v.get("next").and_then(Json::as_u64)) {
                    (Some(r), Some(n)) => {
                        known.insert((r, n));
                    }
                    _ => unread.push(format!("{}: a Redeploy without restore and next", a.path)),
                }
            }
        }
    }
    Restores { known: known.into_iter().collect(), unread }
}

/// What loading a bundle's epochs reads beyond each epoch's own files, once
/// for them all (a verification loads hundreds of epochs): the restores and
/// the markers that place an epoch, and the captures decoded last. A
/// producer's replay is compared with its consumers' captures of the same
/// epoch, which their own replays read too; a caller that takes epochs in
/// epoch order decodes each of them once.
#[derive(Debug)]
pub struct BundleEpochs {
    pub restores: Restores,
    markers: Result<Markers, String>,
    recent: Mutex<RecentCaptures>,
}

type RecentCaptures = VecDeque<(EpochRef, Arc<Capture>)>;

/// Captures kept decoded: an epoch's operators and sinks of the example
/// job, for two threads working on neighbouring epochs.
const RECENT_CAPTURES: usize = 8;

impl BundleEpochs {
    pub fn read(bundle: &Bundle) -> Self {
        BundleEpochs {
            restores: known_restores(bundle),
            markers: bundle.markers().map_err(|e| e.to_string()),
            recent: Mutex::new(VecDeque::with_capacity(RECENT_CAPTURES)),
        }
    }

    /// The captured epoch at `at`, as [`read_bundle_capture`] reads it, or
    /// as it read it a moment ago.
    pub fn capture(&self, bundle: &Bundle, at: &EpochRef) -> Result<Arc<Capture>, ReplayError> {
        if let Some(capture) = self.recent_list().iter().find(|(r, _)| r == at).map(|(_, c)| Arc::clone(c)) {
            return Ok(capture);
        }
        let capture = Arc::new(read_bundle_capture(bundle, at)?);
        let mut list = self.recent_list();
        if list.len() == RECENT_CAPTURES {
            list.pop_front();
        }
        list.push_back((at.clone(), Arc::clone(&capture)));
        Ok(capture)
    }

    fn recent_list(&self) -> std::sync::MutexGuard<'_, RecentCaptures> {
        // A thread that panicked holding the lock left a list of whole
        // entries: it is still sound to read.
        self.recent.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// How an op.json and the job graph differ.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SpecMismatch(pub String);

/// Whether a captured op.json describes what the job graph says this
/// operator and subtask are: every field the graph also names, neighbours
/// compared as sets. `Err` names the first field that differs.
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

/// The bundle's entry for a captured epoch.
pub fn epoch_entry<'a>(bundle: &'a Bundle, at: &EpochRef) -> Result<&'a EpochEntry, ReplayError> {
    let path = clink_bundle::manifest::capture_path(at.operator, at.subtask, at.epoch);
    bundle
        .manifest
        .epochs
        .iter()
        .find(|e| e.path == path)
        .ok_or_else(|| ReplayError::Unavailable(format!("the bundle lists no capture at {path}")))
}

/// Loads one captured operator epoch from a bundle, or says why it cannot be
/// replayed: evidence the bundle lacks is unavailable, evidence that does not
/// read or does not agree is refused, an operator this build cannot replay
/// is unsupported.
/// `graph` is the job graph the bundle names; when there is one, the
/// captured op.json must describe the same operator.
pub fn load_bundle_epoch(
    bundle: &Bundle,
    entry: &EpochEntry,
    epochs: &BundleEpochs,
    graph: Option<&JobGraph>,
) -> Result<EpochEvidence, ReplayError> {
    let op = entry.operator_id();
    let at = EpochRef { operator: op, subtask: entry.subtask, epoch: entry.epoch };
    let spec_rel = format!("capture/op-{op}/subtask-{}/op.json", entry.subtask);
    let spec = bundle.op_spec(op, entry.subtask).map_err(|e| evidence_error(e, &spec_rel))?;
    if let Some(graph) = graph {
        spec_agrees_with_graph(&spec, graph, entry.subtask).map_err(|why| {
            ReplayError::Refused(format!("{spec_rel} and the job graph name different things: {why}"))
        })?;
    }
    if calls_out(&spec.type_name) {
        return Err(ReplayError::Unsupported(format!(
            "operator {op} ({}) calls an external system per record; verification replays nothing that leaves the process",
            spec.type_name
        )));
    }
    replayable(&spec)?;
    let capture = epochs.capture(bundle, &at)?;
    let markers = epochs.markers.as_ref().map_err(|e| ReplayError::Unavailable(format!("the markers: {e}")))?;
    let restores = &epochs.restores;
    let start = epoch_start_from(&markers.completed, markers.restored.as_ref(), entry.epoch, &restores.known)
        .map_err(|e| ReplayError::Unavailable(e.to_string()))?;
    let placed_by_a_restore = restores.known.iter().any(|&(_, next)| next == entry.epoch);
    if !restores.unread.is_empty() && !placed_by_a_restore && entry.epoch > 1 {
        return Err(ReplayError::Unavailable(format!(
            "where epoch {} starts depends on restores the traces would name, and some did not read: {}",
            entry.epoch,
            restores.unread.join("; ")
        )));
    }
    let start = match start {
        StartPoint::Empty => StartState::Empty,
        StartPoint::Checkpoint(c) => {
            let participant = participant_name(op, entry.subtask);
            let generation = bundle.manifest.selection.generation;
            let rel =
                format!("checkpoint/_state/{}/v{generation}/{participant}/checkpoint-{c}.snap", bundle.manifest.job.id);
            let snapshot = bundle.snapshot(generation, &participant, c).map_err(|e| match e {
                e if e.is_unlisted() => {
                    ReplayError::Unavailable(format!("the starting state ({rel}) is not in the bundle"))
                }
                e => ReplayError::Refused(format!("the starting state: {e}")),
            })?;
            StartState::Snapshot { checkpoint: c, slots: snapshot.slots }
        }
    };
    Ok(EpochEvidence { at, spec, capture, start })
}

/// A captured epoch of the bundle, from the bytes the manifest vouched for,
/// its header naming the job, operator, subtask and epoch its path says.
pub fn read_bundle_capture(bundle: &Bundle, at: &EpochRef) -> Result<Capture, ReplayError> {
    let rel = clink_bundle::manifest::capture_path(at.operator, at.subtask, at.epoch);
    let bytes = bundle
        .capture_bytes(at.operator, at.subtask, at.epoch, MAX_CAPTURE_BYTES)
        .map_err(|e| evidence_error(e, &rel))?;
    let capture = read_capture(&bytes).map_err(|e| ReplayError::Refused(format!("{rel}: {e}")))?;
    check_capture_names(&capture, bundle.job_id(), at)?;
    Ok(capture)
}

/// What a piece of evidence that cannot be read means for a replay: absent is
/// unavailable, there and not what the manifest vouches for (or not reading)
/// is refused.
fn evidence_error(e: EvidenceError, what: &str) -> ReplayError {
    if e.is_unlisted() {
        ReplayError::Unavailable(format!("{what} is not in the bundle"))
    } else {
        ReplayError::Refused(e.to_string())
    }
}
