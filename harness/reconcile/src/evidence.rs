//! The bundle's artifacts as the scope and the reconciliation decide on them.
//!
//! The integrity checks hash every artifact once; what is decided on is read
//! again afterwards. So every read here goes through
//! [`Bundle::read_vouched`] (the bytes by their exact bundle path, hashed as
//! they are read and compared with the manifest) and is parsed from those
//! bytes by the engine's own readers, never from the file a second time.
//! Every artifact is then held to what its path names: a marker, snapshot,
//! sink evidence or capture naming another job, operator, uid, subtask,
//! epoch or checkpoint is refused, so two jobs that shared one capture
//! directory can never mix their evidence.
//!
//! What an artifact may be refused for or missing is said in [`Unread`]: the
//! caller turns `Absent` and `Unreadable` into checks that cannot decide,
//! and `Refused` into a refusal. Errors name files by their bundle paths.
//! Nothing here judges what it read.

use std::collections::BTreeSet;
use std::path::Path;

use clink_basics::ids::OperatorId;
use clink_bundle::{Bundle, VouchError};
use clink_engine::capture::spec::MAX_DOC_BYTES;
use clink_engine::capture::{read_capture, sink_evidence_name, Capture, SinkEvidence};
use clink_engine::checkpoint::backend::{
    check_snapshot_names, parse_snapshot_meta, verify_snapshot_bytes, VerifiedSnapshot, MAX_META_BYTES,
};
use clink_engine::checkpoint::layout::{parse_completed_marker_name, RESTORED_NAME};
use clink_engine::checkpoint::markers::{
    check_completed_names, parse_completed_bytes, parse_restored_bytes, CompletedMarker, RestoredRecord,
    MAX_MARKER_BYTES,
};
use clink_engine::checkpoint::snapshot::MAX_SNAPSHOT_BYTES;
use clink_engine::checkpoint::CheckpointLayout;

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

fn unread(e: VouchError) -> Unread {
    match e {
        VouchError::Unlisted { .. } => Unread::Absent(e.to_string()),
        VouchError::Changed { .. } | VouchError::NotInBundle { .. } => Unread::Refused(e.to_string()),
        VouchError::TooLarge { .. } | VouchError::Io { .. } => Unread::Unreadable(e.to_string()),
    }
}

/// The bytes at bundle path `path`, as the manifest vouched for them.
pub fn vouched(bundle: &Bundle, path: &str, limit: u64) -> Result<Vec<u8>, Unread> {
    bundle.read_vouched(path, limit).map_err(unread)
}

fn layout(bundle: &Bundle) -> CheckpointLayout {
    CheckpointLayout::new(bundle.checkpoint_dir(), bundle.job_id())
}

/// The bundle path of a file the engine's layout names.
fn bundle_path(bundle: &Bundle, file: &Path) -> Result<String, Unread> {
    bundle.bundle_path(file).map_err(|e| Unread::Refused(e.to_string()))
}

/// The checkpoints whose COMPLETED markers the manifest lists.
pub fn completed_ids(bundle: &Bundle) -> Result<BTreeSet<u64>, Unread> {
    let jobs = bundle_path(bundle, &layout(bundle).jobs_dir())?;
    let prefix = format!("{jobs}/");
    Ok(bundle
        .manifest
        .artifacts
        .iter()
        .filter_map(|a| a.path.strip_prefix(&prefix))
        .filter_map(parse_completed_marker_name)
        .collect())
}

/// COMPLETED marker `checkpoint`, vouched for and naming this job and checkpoint.
pub fn completed(bundle: &Bundle, checkpoint: u64) -> Result<CompletedMarker, Unread> {
    let path = bundle_path(bundle, &layout(bundle).completed_marker(checkpoint))?;
    let bytes = vouched(bundle, &path, MAX_MARKER_BYTES)?;
    let named = Path::new(&path);
    let marker = parse_completed_bytes(named, &bytes).map_err(|e| Unread::Refused(e.to_string()))?;
    check_completed_names(named, &marker, bundle.job_id(), checkpoint).map_err(|e| Unread::Refused(e.to_string()))?;
    Ok(marker)
}

/// The RESTORED record, if the manifest lists one, vouched for and of this job.
pub fn restored(bundle: &Bundle) -> Result<Option<RestoredRecord>, Unread> {
    let path = bundle_path(bundle, &layout(bundle).jobs_dir().join(RESTORED_NAME))?;
    if bundle.artifact(&path).is_none() {
        return Ok(None);
    }
    let bytes = vouched(bundle, &path, MAX_MARKER_BYTES)?;
    parse_restored_bytes(Path::new(&path), &bytes, bundle.job_id())
        .map(Some)
        .map_err(|e| Unread::Refused(e.to_string()))
}

/// A participant's snapshot of `checkpoint` and its sidecar, both vouched
/// for, the snapshot checked against the sidecar, both naming the job,
/// participant and checkpoint their paths say.
pub fn snapshot(
    bundle: &Bundle,
    generation: u32,
    participant: &str,
    checkpoint: u64,
) -> Result<VerifiedSnapshot, Unread> {
    let layout = layout(bundle);
    let snap = bundle_path(bundle, &layout.snapshot(generation, participant, checkpoint))?;
    let meta = bundle_path(bundle, &layout.snapshot_meta(generation, participant, checkpoint))?;
    let meta_bytes = vouched(bundle, &meta, MAX_META_BYTES)?;
    let snap_bytes = vouched(bundle, &snap, MAX_SNAPSHOT_BYTES)?;
    let (snap, meta) = (Path::new(&snap), Path::new(&meta));
    let sidecar = parse_snapshot_meta(meta, &meta_bytes).map_err(|e| Unread::Unreadable(e.to_string()))?;
    let verified = verify_snapshot_bytes(snap, &snap_bytes, sidecar).map_err(|e| Unread::Unreadable(e.to_string()))?;
    check_snapshot_names(&verified, snap, meta, bundle.job_id(), participant, checkpoint)
        .map_err(|e| Unread::Refused(e.to_string()))?;
    Ok(verified)
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

/// One sink subtask's interval evidence, vouched for and naming its place.
pub fn sink_evidence(bundle: &Bundle, place: &SinkPlace<'_>) -> Result<SinkEvidence, Unread> {
    let path = place.evidence_path();
    let bytes = vouched(bundle, &path, MAX_DOC_BYTES)?;
    let evidence = SinkEvidence::parse(Path::new(&path), &bytes).map_err(|e| Unread::Unreadable(e.to_string()))?;
    let named = (&evidence.job, &evidence.operator, evidence.uid.as_str(), evidence.subtask, evidence.epoch);
    let placed = (&bundle.job_id().to_string(), &place.sink.to_string(), place.uid, place.subtask, place.epoch);
    if named != placed {
        return Err(Unread::Refused(format!(
            "{path}: the sink evidence names job {} operator {} uid {:?} subtask {} epoch {}; the bundle and its job graph place it at job {} operator {} uid {:?} subtask {} epoch {}",
            named.0, named.1, named.2, named.3, named.4, placed.0, placed.1, placed.2, placed.3, placed.4
        )));
    }
    Ok(evidence)
}

/// One sink subtask's recorded input, vouched for, its header naming its place.
pub fn sink_capture(bundle: &Bundle, place: &SinkPlace<'_>) -> Result<Capture, Unread> {
    let path = place.capture_path();
    let bytes = vouched(bundle, &path, MAX_CAPTURE_BYTES)?;
    let capture = read_capture(&bytes).map_err(|e| Unread::Unreadable(format!("{path}: {e}")))?;
    capture
        .header
        .check_names(bundle.job_id(), place.sink.0, place.subtask, place.epoch)
        .map_err(|e| Unread::Refused(format!("{path}: {e}")))?;
    Ok(capture)
}
