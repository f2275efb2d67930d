//! The bundle's artifacts as the scope and the reconciliation decide on them.
//!
//! The integrity checks hash every artifact once; what is decided on is read
//! again afterwards. So every read here goes through clink-bundle's evidence
//! readers (`clink_bundle::evidence`: the bytes by their exact bundle path,
//! hashed as read and compared with the manifest, parsed by the engine's own
//! from-bytes readers), never from a file a second time. What those readers
//! leave to their caller is held here: a sink's evidence must name the
//! bundle's job and the sink's operator, uid, subtask and epoch, and its
//! recorded input's header the job, operator, subtask and epoch its path
//! says, so two jobs that shared one capture directory never mix evidence.
//!
//! What an artifact may be refused for or missing is said in [`Unread`]: the
//! caller turns `Absent` and `Unreadable` into checks that cannot decide,
//! and `Refused` into a refusal. Nothing here judges what it read.

use std::collections::BTreeSet;

use clink_basics::ids::OperatorId;
use clink_bundle::evidence::EvidenceError;
use clink_bundle::{Bundle, VouchError};
use clink_engine::capture::{read_capture, sink_evidence_name, Capture, SinkEvidence};
use clink_engine::checkpoint::backend::VerifiedSnapshot;
use clink_engine::checkpoint::markers::{CompletedMarker, RestoredRecord};

/// The largest capture read (as replay bounds it).
pub const MAX_CAPTURE_BYTES: u64 = 1 << 30;

/// Why an artifact gives nothing to decide on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unread {
    /// The bundle does not hold it: what needs it is not established.
    Absent(String),
    /// Held, and vouched for, but it does not read (malformed, over a bound,
    /// an I/O error): what needs it is not established.
    Unreadable(String),
    /// Not the bytes the manifest vouched for, or naming something other
    /// than its path says: the bundle is refused.
    Refused(String),
}

impl Unread {
    pub fn message(&self) -> &str {
        match self {
            Unread::Absent(m) | Unread::Unreadable(m) | Unread::Refused(m) => m,
        }
    }
}

impl std::fmt::Display for Unread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

/// How evidence that is vouched for and does not read counts: for markers,
/// a refusal (the request cannot mean anything); for snapshots and sink
/// evidence, a check that cannot decide.
#[derive(Clone, Copy)]
enum IfInvalid {
    Refuse,
    NotEstablished,
}

fn unread(e: EvidenceError, invalid: IfInvalid) -> Unread {
    let message = e.to_string();
    match e {
        EvidenceError::Vouch(VouchError::Unlisted { .. }) => Unread::Absent(message),
        EvidenceError::Vouch(VouchError::Changed { .. } | VouchError::NotInBundle { .. }) => Unread::Refused(message),
        EvidenceError::Vouch(VouchError::TooLarge { .. } | VouchError::Io { .. }) => Unread::Unreadable(message),
        EvidenceError::Invalid(_) => match invalid {
            IfInvalid::Refuse => Unread::Refused(message),
            IfInvalid::NotEstablished => Unread::Unreadable(message),
        },
    }
}

/// The checkpoints whose COMPLETED markers the manifest lists, and the
/// RESTORED record if it lists one.
pub fn markers(bundle: &Bundle) -> Result<(BTreeSet<u64>, Option<RestoredRecord>), Unread> {
    let markers = bundle.markers().map_err(|e| unread(e, IfInvalid::Refuse))?;
    Ok((markers.completed.into_iter().collect(), markers.restored))
}

/// COMPLETED marker `checkpoint`, naming this job and checkpoint.
pub fn completed(bundle: &Bundle, checkpoint: u64) -> Result<CompletedMarker, Unread> {
    bundle.completed_marker(checkpoint).map_err(|e| unread(e, IfInvalid::Refuse))
}

/// A participant's snapshot of `checkpoint`, checked against its sidecar,
/// both naming the job, participant and checkpoint their paths say.
pub fn snapshot(
    bundle: &Bundle,
    generation: u32,
    participant: &str,
    checkpoint: u64,
) -> Result<VerifiedSnapshot, Unread> {
    bundle.snapshot(generation, participant, checkpoint).map_err(|e| unread(e, IfInvalid::NotEstablished))
}

/// Where one sink subtask's interval lives in a bundle, and what its
/// evidence must name: the bundle's job, the sink's operator and uid as the
/// job graph gives them, the subtask and the epoch.
#[derive(Debug, Clone, Copy)]
pub struct SinkPlace<'a> {
    pub sink: OperatorId,
    pub uid: &'a str,
    pub subtask: u32,
    pub epoch: u64,
}

impl SinkPlace<'_> {
    pub fn evidence_path(&self) -> String {
        format!("capture/op-{}/subtask-{}/{}", self.sink, self.subtask, sink_evidence_name(self.epoch))
    }

    pub fn capture_path(&self) -> String {
        clink_bundle::manifest::capture_path(self.sink, self.subtask, self.epoch)
    }
}

/// One sink subtask's interval evidence, naming its place.
pub fn sink_evidence(bundle: &Bundle, place: &SinkPlace<'_>) -> Result<SinkEvidence, Unread> {
    let evidence = bundle
        .sink_evidence(place.sink, place.subtask, place.epoch)
        .map_err(|e| unread(e, IfInvalid::NotEstablished))?;
    let named = (&evidence.job, &evidence.operator, evidence.uid.as_str(), evidence.subtask, evidence.epoch);
    let placed = (&bundle.job_id().to_string(), &place.sink.to_string(), place.uid, place.subtask, place.epoch);
    if named != placed {
        return Err(Unread::Refused(format!(
            "{}: the sink evidence names job {} operator {} uid {:?} subtask {} epoch {}; the bundle and its job graph place it at job {} operator {} uid {:?} subtask {} epoch {}",
            place.evidence_path(),
            named.0,
            named.1,
            named.2,
            named.3,
            named.4,
            placed.0,
            placed.1,
            placed.2,
            placed.3,
            placed.4
        )));
    }
    Ok(evidence)
}

/// One sink subtask's recorded input, its header naming its place.
pub fn sink_capture(bundle: &Bundle, place: &SinkPlace<'_>) -> Result<Capture, Unread> {
    let path = place.capture_path();
    let bytes = bundle
        .capture_bytes(place.sink, place.subtask, place.epoch, MAX_CAPTURE_BYTES)
        .map_err(|e| unread(e, IfInvalid::NotEstablished))?;
    let capture = read_capture(&bytes).map_err(|e| Unread::Unreadable(format!("{path}: {e}")))?;
    capture
        .header
        .check_names(bundle.job_id(), place.sink.0, place.subtask, place.epoch)
        .map_err(|e| Unread::Refused(format!("{path}: {e}")))?;
    Ok(capture)
}
