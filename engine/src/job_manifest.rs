//! The coordinator's job manifest in its HA directory (`clink run --ha-dir`):
//! what a running job is (its graph, its checkpoint settings, whether its
//! sinks need commit confirmation), for tools that inspect a live job.
//!
//! `<ha-dir>/jobs/<job>/manifest.json` exists while the job runs. When the job
//! ends the manifest is removed and only `status.json`, its terminal status,
//! stays, so an incident collected after the end has no graph to read.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

use crate::checkpoint::durable::{create_dir_durably, write_durably};
use crate::checkpoint::identity::RunIdentity;

pub const FORMAT: &str = "clink-job-manifest";
/// Version 2 names the run that published it; version 1, read still, does not.
pub const VERSION: u64 = 2;
/// The version of a manifest no run has published yet.
pub const VERSION_UNIDENTIFIED: u64 = 1;
pub const MANIFEST_NAME: &str = "manifest.json";
pub const STATUS_NAME: &str = "status.json";
pub const STATUS_VERSION: u64 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobManifest {
    pub format: String,
    pub version: u64,
    pub job: String,
    pub name: String,
    /// The job graph exactly as submitted (format clink-job).
    pub graph: Json,
    /// `every_records:N`, `interval_ms:N` or `final_only`.
    pub checkpoint_trigger: String,
    pub requires_commit_confirmation: bool,
    pub started_at_ms: u64,
    /// The run that published it, once it held the checkpoint directory (version 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunIdentity>,
}

impl JobManifest {
    /// The manifest as `run` publishes it (version 2).
    pub fn published_by(mut self, run: RunIdentity) -> Self {
        self.version = VERSION;
        self.run = Some(run);
        self
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobStatus {
    pub format: String,
    pub version: u64,
    pub job: String,
    /// `finished`, `stopped_with_savepoint` or `failed`.
    pub terminal: String,
    pub ended_at_ms: u64,
}

pub fn job_dir(ha_dir: &Path, job: u64) -> PathBuf {
    ha_dir.join("jobs").join(job.to_string())
}

/// Publishes the manifest of a job that starts running.
pub fn publish(ha_dir: &Path, manifest: &JobManifest, job: u64) -> io::Result<()> {
    let dir = job_dir(ha_dir, job);
    create_dir_durably(&dir)?;
    let _ = fs::remove_file(dir.join(STATUS_NAME));
    write_durably(&dir, MANIFEST_NAME, &serde_json::to_vec_pretty(manifest).map_err(io::Error::other)?)
}

/// Replaces a job's manifest with its terminal status.
pub fn retire(ha_dir: &Path, job: u64, terminal: &str, ended_at_ms: u64) -> io::Result<()> {
    let dir = job_dir(ha_dir, job);
    let status = JobStatus {
        format: "clink-job-status".into(),
        version: STATUS_VERSION,
        job: job.to_string(),
        terminal: terminal.into(),
        ended_at_ms,
    };
    write_durably(&dir, STATUS_NAME, &serde_json::to_vec_pretty(&status).map_err(io::Error::other)?)?;
    match fs::remove_file(dir.join(MANIFEST_NAME)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Why a job manifest was refused.
#[derive(Debug, thiserror::Error)]
pub enum JobManifestError {
    #[error("{path}: {source}")]
    Read {
        path: std::path::PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path}: {reason}")]
    Invalid { path: std::path::PathBuf, reason: String },
}

/// Reads a job manifest: bounded, a known format and version.
pub fn read(path: &Path) -> Result<JobManifest, JobManifestError> {
    let bytes = clink_basics::files::read_bounded(path, MAX_MANIFEST_BYTES)
        .map_err(|source| JobManifestError::Read { path: path.to_path_buf(), source })?;
    parse(path, &bytes)
}

/// A job manifest larger than this is refused unread.
pub const MAX_MANIFEST_BYTES: u64 = 16 << 20;

/// Parses and checks a job manifest's bytes (read from `path`).
pub fn parse(path: &Path, bytes: &[u8]) -> Result<JobManifest, JobManifestError> {
    let invalid = |reason: String| JobManifestError::Invalid { path: path.to_path_buf(), reason };
    if bytes.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(invalid(format!("{} bytes, over the limit of {MAX_MANIFEST_BYTES}", bytes.len())));
    }
    let manifest: JobManifest = serde_json::from_slice(bytes).map_err(|e| invalid(e.to_string()))?;
    if manifest.format != FORMAT || !(1..=VERSION).contains(&manifest.version) {
        return Err(invalid(format!("format {:?} version {}", manifest.format, manifest.version)));
    }
    if (manifest.version >= VERSION) != manifest.run.is_some() {
        return Err(invalid(format!(
            "version {} names the run that published it exactly from version 2",
            manifest.version
        )));
    }
    Ok(manifest)
}
