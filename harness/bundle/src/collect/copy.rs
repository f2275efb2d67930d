//! Copying evidence into the staging directory: every file hashed while it is
//! copied, its size and modification time checked before and after, every
//! bound (`--max-bytes`, `--max-files`, `--timeout-s`) enforced, required
//! evidence refused and optional evidence excluded when a bound is reached.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use clink_engine::checkpoint::backend::read_dir_names;
use clink_engine::checkpoint::layout::{parse_completed_marker_name, parse_confirmed_marker_name, RESTORED_NAME};
use clink_engine::checkpoint::lineage::parse_run_record_name;
use clink_engine::checkpoint::CheckpointLayout;

use crate::manifest::{Artifact, Note};

use super::refusal::{refusal, Refusal, RefusalKind};
use super::CollectOptions;

/// The state of one source file before it was copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stamp {
    size: u64,
    modified: Option<SystemTime>,
}

pub(super) fn stamp(path: &Path) -> io::Result<Stamp> {
    let m = fs::symlink_metadata(path)?;
    if !m.is_file() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"));
    }
    Ok(Stamp { size: m.len(), modified: m.modified().ok() })
}

pub(super) struct Builder<'a> {
    pub(super) progress: &'a mut dyn super::CollectProgress,
    pub(super) options: &'a CollectOptions,
    pub(super) staging: PathBuf,
    pub(super) started: Instant,
    pub(super) artifacts: Vec<Artifact>,
    pub(super) absent: Vec<Note>,
    pub(super) excluded: Vec<Note>,
    pub(super) bytes: u64,
    pub(super) paused: bool,
}

/// Whether a file is evidence the selected checkpoint needs (a bound refuses)
/// or optional (a bound excludes it).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Need {
    Required,
    Optional,
}

impl Builder<'_> {
    pub(super) fn check_time(&self) -> Result<(), Refusal> {
        if self.started.elapsed() > Duration::from_secs(self.options.timeout_s) {
            return Err(refusal(RefusalKind::Timeout, format!("--timeout-s {} passed", self.options.timeout_s)));
        }
        Ok(())
    }

    /// Copies `src` to `rel` in the bundle, hashing while copying.
    pub(super) fn copy(&mut self, src: &Path, rel: &str, role: &str, need: Need) -> Result<bool, Refusal> {
        self.check_time()?;
        let before = match stamp(src) {
            Ok(s) => s,
            Err(e) if need == Need::Required => {
                return Err(refusal(RefusalKind::Missing, format!("{}: {e}", src.display())))
            }
            Err(e) => {
                self.absent.push(Note { what: rel.into(), why: format!("not readable: {e}") });
                return Ok(false);
            }
        };
        if let Some(why) = self.passes_bound(before.size) {
            if need == Need::Required {
                return Err(refusal(RefusalKind::Bound, format!("{rel}: {why}")));
            }
            self.excluded.push(Note { what: rel.into(), why });
            return Ok(false);
        }
        let dest = crate::paths::resolve(&self.staging, rel);
        if let Some(parent) = dest.parent() {
            fs::create_dir_all(parent)
                .map_err(|e| refusal(RefusalKind::Other, format!("{}: {e}", parent.display())))?;
        }
        let (size, sha256) = copy_hashed(src, &dest).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => {
                refusal(RefusalKind::Missing, format!("{} disappeared while copied", src.display()))
            }
            _ => refusal(RefusalKind::Other, format!("{}: {e}", src.display())),
        })?;
        let after = stamp(src)
            .map_err(|_| refusal(RefusalKind::Changed, format!("{} disappeared while copied", src.display())))?;
        if after != before || size != before.size {
            return Err(refusal(RefusalKind::Changed, format!("{} changed while it was copied", src.display())));
        }
        self.record(rel, role, size, sha256);
        self.pause_once();
        Ok(true)
    }

    /// Writes a document the collector derived (a redacted spec or manifest).
    pub(super) fn write(&mut self, rel: &str, role: &str, bytes: &[u8], need: Need) -> Result<(), Refusal> {
        self.check_time()?;
        if let Some(why) = self.passes_bound(bytes.len() as u64) {
            if need == Need::Required {
                return Err(refusal(RefusalKind::Bound, format!("{rel}: {why}")));
            }
            self.excluded.push(Note { what: rel.into(), why });
            return Ok(());
        }
        let dest = crate::paths::resolve(&self.staging, rel);
        if let Some(parent) = dest.parent() {
            fs::create_dir_all(parent)
                .map_err(|e| refusal(RefusalKind::Other, format!("{}: {e}", parent.display())))?;
        }
        fs::write(&dest, bytes).map_err(|e| refusal(RefusalKind::Other, format!("{rel}: {e}")))?;
        self.record(rel, role, bytes.len() as u64, clink_basics::digest::sha256_hex(bytes));
        Ok(())
    }

    fn record(&mut self, rel: &str, role: &str, size: u64, sha256: String) {
        self.bytes += size;
        self.artifacts.push(Artifact { path: rel.into(), role: role.into(), size, sha256 });
        self.progress.copied(rel, self.artifacts.len() as u64, self.bytes);
    }

    fn passes_bound(&self, size: u64) -> Option<String> {
        if self.artifacts.len() as u64 + 1 > self.options.max_files {
            return Some(format!("more than --max-files {}", self.options.max_files));
        }
        if self.bytes + size > self.options.max_bytes {
            return Some(format!("more than --max-bytes {}", self.options.max_bytes));
        }
        None
    }

    /// Only in a test build: the pause after the first copied file.
    fn pause_once(&mut self) {
        if self.paused {
            return;
        }
        self.paused = true;
        if let Some(ms) = super::test_pause_ms() {
            std::thread::sleep(Duration::from_millis(ms));
        }
    }
}

/// Copies a file while hashing it; returns the bytes copied and their SHA-256.
fn copy_hashed(src: &Path, dest: &Path) -> io::Result<(u64, String)> {
    let mut output = File::create(dest)?;
    let digest = clink_basics::digest::copy_hashed(File::open(src)?, &mut output)?;
    output.sync_all()?;
    Ok((digest.bytes, digest.sha256))
}

/// The job's marker files: name to stamp, exact names only.
pub(super) fn list_markers(layout: &CheckpointLayout) -> Result<BTreeMap<String, Stamp>, Refusal> {
    let dir = layout.jobs_dir();
    let names = read_dir_names(&dir).map_err(|e| refusal(RefusalKind::Other, e.to_string()))?;
    let mut markers = BTreeMap::new();
    for name in names {
        // A run's record too: a run starting mid-collection changes what is collected.
        let is_marker = parse_completed_marker_name(&name).is_some()
            || parse_confirmed_marker_name(&name).is_some()
            || parse_run_record_name(&name).is_some()
            || name == RESTORED_NAME;
        if is_marker {
            // Vanished since the listing: the job moved on (changed, worth a
            // retry). There and not a regular file: no retry will help (other).
            let s = stamp(&dir.join(&name)).map_err(|e| match e.kind() {
                io::ErrorKind::NotFound => refusal(RefusalKind::Changed, format!("{name}: {e}")),
                _ => refusal(RefusalKind::Other, format!("{name}: {e}; a marker is a regular file")),
            })?;
            markers.insert(name, s);
        }
    }
    Ok(markers)
}
