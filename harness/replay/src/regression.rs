//! Regression bundles: one epoch frozen with everything its replay needs
//! (operator spec, capture, starting snapshot, golden emissions) and a
//! manifest holding the SHA-256 of each file.
//!
//! A bundle is built in a temporary directory beside its destination and
//! published with one rename; an existing destination is never written over.
//! Running a bundle checks every file against the manifest, replays the epoch
//! and compares with the golden emissions, naming the first divergence.

use std::fs;
use std::path::{Path, PathBuf};

use clink_basics::digest::sha256_hex;
use clink_basics::ids::OperatorId;
use clink_engine::capture::{read_capture, OpSpecFile, OP_SPEC_NAME};
use serde::{Deserialize, Serialize};

use super::emissions::{decode_dump, encode_dump, first_difference};
use super::{
    check_capture_names, check_spec_names, read_start_snapshot, replay, EpochEvidence, EpochRef, ReplayError,
    StartState,
};

pub const BUNDLE_FORMAT: &str = "clink-regression-bundle";
pub const BUNDLE_VERSION: u64 = 1;
const MANIFEST: &str = "manifest.json";
const CAPTURE_FILE: &str = "epoch.cap";
const GOLDEN_FILE: &str = "golden.emit";
const STATE_FILE: &str = "state.snap";
const STATE_META_FILE: &str = "state.snap.meta";
const MAX_MANIFEST_BYTES: u64 = 1 << 20;
const MAX_FILE_BYTES: u64 = 1 << 30;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BundleFile {
    pub path: String,
    pub role: String,
    pub size: u64,
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BundleManifest {
    pub format: String,
    pub version: u64,
    pub created_by: String,
    pub job: String,
    pub operator: String,
    pub uid: String,
    #[serde(rename = "type")]
    pub type_name: String,
    pub subtask: u32,
    pub epoch: u64,
    /// The checkpoint the epoch starts from; 0 for an empty start.
    pub start_checkpoint: u64,
    pub golden_emissions: u64,
    pub files: Vec<BundleFile>,
}

/// Freezes one epoch into `dest`; runs it once before returning.
pub fn emit_bundle(evidence: &EpochEvidence, dest: &Path) -> Result<BundleManifest, ReplayError> {
    if dest.exists() {
        return Err(ReplayError::Refused(format!("{} exists; a bundle is never written over", dest.display())));
    }
    if !evidence.capture.is_whole() {
        return Err(ReplayError::Unavailable(format!(
            "the capture of {} is truncated or cut short; a regression bundle needs the whole epoch",
            evidence.at
        )));
    }
    let outcome = replay(evidence)?;
    let parent = dest.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    fs::create_dir_all(parent).map_err(|e| ReplayError::Refused(format!("{}: {e}", parent.display())))?;
    let staging = tempfile::Builder::new()
        .prefix(".regression-")
        .tempdir_in(parent)
        .map_err(|e| ReplayError::Refused(format!("{}: {e}", parent.display())))?;
    let mut files = Vec::new();
    let mut put = |name: &str, role: &str, bytes: &[u8]| -> Result<(), ReplayError> {
        fs::write(staging.path().join(name), bytes).map_err(|e| ReplayError::Refused(format!("{name}: {e}")))?;
        files.push(BundleFile {
            path: name.to_string(),
            role: role.to_string(),
            size: bytes.len() as u64,
            sha256: sha256_hex(bytes),
        });
        Ok(())
    };
    let spec_json = serde_json::to_vec_pretty(&evidence.spec).map_err(|e| ReplayError::Refused(e.to_string()))?;
    put(OP_SPEC_NAME, "operator_spec", &spec_json)?;
    put(CAPTURE_FILE, "capture", &capture_bytes(evidence)?)?;
    let start_checkpoint = match &evidence.start {
        StartState::Empty => 0,
        StartState::Snapshot { checkpoint, slots } => {
            let header = clink_engine::checkpoint::snapshot::SnapshotHeader {
                job: evidence.spec.job_id(),
                checkpoint: *checkpoint,
                operator: evidence.at.operator.0,
                subtask: evidence.at.subtask,
            };
            let bytes = clink_engine::checkpoint::snapshot::encode_snapshot(&header, slots);
            let participant = clink_engine::checkpoint::participant_name(evidence.at.operator, evidence.at.subtask);
            let meta = clink_engine::checkpoint::SnapshotMeta::describe(&header, &participant, slots, &bytes);
            let meta_json = serde_json::to_vec_pretty(&meta).map_err(|e| ReplayError::Refused(e.to_string()))?;
            put(STATE_FILE, "starting_state", &bytes)?;
            put(STATE_META_FILE, "starting_state_meta", &meta_json)?;
            *checkpoint
        }
    };
    put(GOLDEN_FILE, "golden", &encode_dump(evidence.capture.header.job, &evidence.at, &outcome.emissions))?;
    let manifest = BundleManifest {
        format: BUNDLE_FORMAT.into(),
        version: BUNDLE_VERSION,
        created_by: format!("clink {}", clink_engine::defects::build_description()),
        job: evidence.spec.job.clone(),
        operator: evidence.spec.id.clone(),
        uid: evidence.spec.uid.clone(),
        type_name: evidence.spec.type_name.clone(),
        subtask: evidence.at.subtask,
        epoch: evidence.at.epoch,
        start_checkpoint,
        golden_emissions: outcome.emissions.len() as u64,
        files,
    };
    let manifest_json = serde_json::to_vec_pretty(&manifest).map_err(|e| ReplayError::Refused(e.to_string()))?;
    fs::write(staging.path().join(MANIFEST), manifest_json).map_err(|e| ReplayError::Refused(e.to_string()))?;
    run_bundle(staging.path()).map_err(|e| ReplayError::Failed(format!("the new bundle does not pass: {e}")))?;
    let staged = staging.keep();
    fs::rename(&staged, dest).map_err(|e| {
        let _ = fs::remove_dir_all(&staged);
        ReplayError::Refused(format!("publishing {}: {e}", dest.display()))
    })?;
    Ok(manifest)
}

/// The capture as the bundle holds it: re-encoded from the events that were
/// read, so the bundle holds exactly what its replay used.
fn capture_bytes(evidence: &EpochEvidence) -> Result<Vec<u8>, ReplayError> {
    Ok(clink_engine::capture::format::encode_capture(&evidence.capture.header, &evidence.capture.events))
}

/// Why a bundle did not pass.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// The bundle itself is malformed or altered (exit 2).
    #[error("{0}")]
    Refused(String),
    /// The replay diverged from the golden emissions (exit 1).
    #[error("diverged: {0}")]
    Diverged(String),
    #[error("{0}")]
    Replay(#[from] ReplayError),
}

pub fn read_manifest(dir: &Path) -> Result<BundleManifest, BundleError> {
    let path = dir.join(MANIFEST);
    let bytes = clink_basics::files::read_bounded(&path, MAX_MANIFEST_BYTES)
        .map_err(|e| BundleError::Refused(format!("{}: {e}", path.display())))?;
    let manifest: BundleManifest =
        serde_json::from_slice(&bytes).map_err(|e| BundleError::Refused(format!("{}: {e}", path.display())))?;
    if manifest.format != BUNDLE_FORMAT {
        return Err(BundleError::Refused(format!(
            "{}: format {:?} is not {BUNDLE_FORMAT:?}",
            path.display(),
            manifest.format
        )));
    }
    if manifest.version > BUNDLE_VERSION {
        return Err(BundleError::Refused(format!(
            "{}: version {} is newer than this build reads ({BUNDLE_VERSION})",
            path.display(),
            manifest.version
        )));
    }
    Ok(manifest)
}

/// Reads a listed file after checking its name, size and SHA-256.
fn read_listed(dir: &Path, manifest: &BundleManifest, name: &str) -> Result<Vec<u8>, BundleError> {
    let entry = manifest
        .files
        .iter()
        .find(|f| f.path == name)
        .ok_or_else(|| BundleError::Refused(format!("the manifest lists no {name}")))?;
    let path = dir.join(name);
    let bytes = clink_basics::files::read_bounded(&path, entry.size.min(MAX_FILE_BYTES))
        .map_err(|e| BundleError::Refused(format!("{name}: {e} (the manifest lists {} bytes)", entry.size)))?;
    if bytes.len() as u64 != entry.size {
        return Err(BundleError::Refused(format!("{name}: {} bytes, the manifest lists {}", bytes.len(), entry.size)));
    }
    let digest = sha256_hex(&bytes);
    if digest != entry.sha256 {
        return Err(BundleError::Refused(format!("{name}: SHA-256 {digest}, the manifest lists {}", entry.sha256)));
    }
    Ok(bytes)
}

/// Runs a bundle: exit 0 on Ok, 1 on `Diverged`, 2 on `Refused`.
pub fn run_bundle(dir: &Path) -> Result<usize, BundleError> {
    let manifest = read_manifest(dir)?;
    for f in &manifest.files {
        let known = [OP_SPEC_NAME, CAPTURE_FILE, GOLDEN_FILE, STATE_FILE, STATE_META_FILE];
        if !known.contains(&f.path.as_str()) {
            return Err(BundleError::Refused(format!("the manifest lists {:?}, which a bundle does not hold", f.path)));
        }
    }
    let job = clink_basics::ids::parse_decimal_u64(&manifest.job)
        .ok_or_else(|| BundleError::Refused(format!("job {:?} is not decimal text", manifest.job)))?;
    let operator = OperatorId::parse(&manifest.operator)
        .ok_or_else(|| BundleError::Refused(format!("operator {:?} is not decimal text", manifest.operator)))?;
    let at = EpochRef { operator, subtask: manifest.subtask, epoch: manifest.epoch };
    let spec_bytes = read_listed(dir, &manifest, OP_SPEC_NAME)?;
    let spec: OpSpecFile =
        serde_json::from_slice(&spec_bytes).map_err(|e| BundleError::Refused(format!("{OP_SPEC_NAME}: {e}")))?;
    check_spec_names(&spec, job, &at)?;
    let capture = read_capture(&read_listed(dir, &manifest, CAPTURE_FILE)?)
        .map_err(|e| BundleError::Refused(format!("{CAPTURE_FILE}: {e}")))?;
    check_capture_names(&capture, job, &at)?;
    let start = if manifest.start_checkpoint == 0 {
        StartState::Empty
    } else {
        read_listed(dir, &manifest, STATE_FILE)?;
        read_listed(dir, &manifest, STATE_META_FILE)?;
        read_start_snapshot(&dir.join(STATE_FILE), &dir.join(STATE_META_FILE), manifest.start_checkpoint)?
    };
    let golden = decode_dump(&read_listed(dir, &manifest, GOLDEN_FILE)?)
        .map_err(|e| BundleError::Refused(format!("{GOLDEN_FILE}: {e}")))?;
    check_golden_names(&golden, job, &at)?;
    let evidence = EpochEvidence { at, spec, capture: std::sync::Arc::new(capture), start };
    let outcome = replay(&evidence)?;
    match first_difference(&golden.rows, &outcome.emissions) {
        None => Ok(outcome.emissions.len()),
        Some(d) => Err(BundleError::Diverged(format!(
            "{}: {d} (golden vs replay; golden has {} emissions, the replay {})",
            evidence.at,
            golden.rows.len(),
            outcome.emissions.len()
        ))),
    }
}

/// The golden names the epoch the bundle is of (a version 1 golden names no
/// job; the capture's header, already checked, does).
fn check_golden_names(golden: &super::emissions::Dump, job: u64, at: &EpochRef) -> Result<(), BundleError> {
    let same_epoch = golden.operator == at.operator.0 && golden.subtask == at.subtask && golden.epoch == at.epoch;
    if !same_epoch || golden.job.is_some_and(|j| j != job) {
        return Err(BundleError::Refused(format!("{GOLDEN_FILE} names {}, not job {job} {at}", golden.origin())));
    }
    Ok(())
}

/// The bundles under a directory: its subdirectories holding a manifest. A
/// directory or an entry that cannot be read is an error, never a bundle
/// fewer.
pub fn find_bundles(root: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for entry in fs::read_dir(root)? {
        let path = entry?.path();
        if path.join(MANIFEST).is_file() {
            found.push(path);
        }
    }
    found.sort();
    Ok(found)
}
