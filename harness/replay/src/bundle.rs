//! One captured epoch of an incident bundle, loaded for replay: its operator
//! spec, its capture, and the snapshot it started from, all read from the
//! bundle's copies (the bytes the manifest vouched for) with the engine's
//! readers and the engine's rule for where an epoch starts.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use clink_bundle::model::{Depth, Evidence, Fact};
use clink_bundle::{Bundle, EpochEntry, EvidenceError};
use clink_engine::capture::{read_capture, Capture};
use clink_engine::checkpoint::{epoch_start_from, participant_name, StartPoint};
use clink_engine::job::JobGraph;

use super::{check_capture_names, replayable, EpochEvidence, EpochRef, ReplayError, StartState, MAX_CAPTURE_BYTES};

/// Operators that call out to other systems are never replayed offline.
pub fn calls_out(type_name: &str) -> bool {
    type_name.contains("lookup") || type_name.contains("predict")
}

pub use clink_bundle::model::{spec_agrees_with_graph, SpecMismatch, MAX_TRACE_BYTES};

/// The restores a bundle records, and what could not be read to know them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Restores {
    /// (restored_from, next) pairs.
    pub known: Vec<(u64, u64)>,
    /// Trace files that did not read: a restore they name is unknown, so an
    /// epoch whose start only a restore could explain cannot be placed.
    pub unread: Vec<String>,
}

/// What loading a bundle's epochs reads beyond each epoch's own files, once
/// for them all (a verification loads hundreds of epochs), from THE reader's
/// model of the bundle (`clink_bundle::model::Evidence`): the restores and
/// markers that place an epoch, each checkpoint's generation and job graph,
/// and the captures decoded last. A producer's replay is compared with its
/// consumers' captures of the same epoch, which their own replays read too;
/// a caller that takes epochs in epoch order decodes each of them once.
#[derive(Debug)]
pub struct BundleEpochs {
    pub restores: Restores,
    completed: Vec<u64>,
    restored: Option<clink_engine::checkpoint::RestoredRecord>,
    generations: std::collections::BTreeMap<u64, u32>,
    graphs: std::collections::BTreeMap<u64, Arc<JobGraph>>,
    /// The model refused the bundle (evidence of another lineage): nothing
    /// of it is replayed.
    refused: Option<String>,
    recent: Mutex<RecentCaptures>,
}

type RecentCaptures = VecDeque<(EpochRef, Arc<Capture>)>;

/// Captures kept decoded: an epoch's operators and sinks of the example
/// job, for two threads working on neighbouring epochs.
const RECENT_CAPTURES: usize = 8;

impl BundleEpochs {
    /// Reads the bundle's evidence (every artifact, THE reader) for its epochs.
    pub fn read(bundle: &Bundle) -> Self {
        match Evidence::read(bundle, Depth::Contents) {
            Ok(evidence) => BundleEpochs::of(&evidence),
            Err(refused) => BundleEpochs { refused: Some(refused.0), ..BundleEpochs::of(&Evidence::default()) },
        }
    }

    /// The epochs' placing evidence from a model already read.
    pub fn of(evidence: &Evidence) -> Self {
        let unread = evidence
            .about(Fact::Unread)
            .filter(|f| f.detail.starts_with("traces/"))
            .map(|f| f.detail.clone())
            .collect();
        BundleEpochs {
            restores: Restores { known: evidence.restores.iter().copied().collect(), unread },
            completed: evidence.completed.keys().copied().collect(),
            restored: evidence.restored.clone(),
            generations: evidence.completed.iter().map(|(c, m)| (*c, m.generation)).collect(),
            graphs: evidence.graphs.clone(),
            refused: None,
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
    if let Some(why) = &epochs.refused {
        return Err(ReplayError::Refused(why.clone()));
    }
    // The operator that ran the epoch is the one its checkpoint's graph names.
    if let Some(graph) = epochs.graphs.get(&entry.epoch) {
        spec_agrees_with_graph(&spec, graph, entry.subtask).map_err(|why| {
            ReplayError::Refused(format!("{spec_rel} and the job graph COMPLETED-{} names differ: {why}", entry.epoch))
        })?;
    }
    let capture = epochs.capture(bundle, &at)?;
    let restores = &epochs.restores;
    let start = epoch_start_from(&epochs.completed, epochs.restored.as_ref(), entry.epoch, &restores.known)
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
            // The starting checkpoint's own marker says its generation and
            // its job: a state of another generation or of another operator
            // is never restored into this one.
            let generation = *epochs.generations.get(&c).ok_or_else(|| {
                ReplayError::Unavailable(format!(
                    "the epoch starts from checkpoint {c}, whose COMPLETED marker is not in the bundle"
                ))
            })?;
            if let Some(graph) = epochs.graphs.get(&c) {
                spec_agrees_with_graph(&spec, graph, entry.subtask).map_err(|why| {
                    ReplayError::Refused(format!(
                        "the epoch starts from checkpoint {c}, whose job graph describes operator {op} otherwise than {spec_rel}: {why}"
                    ))
                })?;
            }
            let participant = participant_name(op, entry.subtask);
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
