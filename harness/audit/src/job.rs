//! What the running job has completed: the `COMPLETED-<n>` markers of its
//! checkpoint directory and when each was written.
//!
//! This is selection's view only: which checkpoints to audit and in what
//! order. It never reads a marker's content and never decides anything an
//! audit concludes; collection copies and hashes the markers, and the
//! checks read them as the bundle's manifest vouched for them.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::UNIX_EPOCH;

/// The job's completed checkpoints: id -> when its marker was written (unix ms).
pub fn completed(checkpoint_dir: &Path, job: &str) -> std::io::Result<BTreeMap<u64, u64>> {
    let dir = checkpoint_dir.join("_jobs").join(job);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        // A job that has not started yet has completed nothing.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(e) => return Err(e),
    };
    let mut out = BTreeMap::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(id) = name.to_str().and_then(|n| n.strip_prefix("COMPLETED-")).and_then(canonical_id) else {
            continue;
        };
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        let ms =
            meta.modified().ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map_or(0, |d| d.as_millis() as u64);
        out.insert(id, ms);
    }
    Ok(out)
}

/// A checkpoint id in canonical decimal (no sign, no leading zero).
fn canonical_id(text: &str) -> Option<u64> {
    let id: u64 = text.parse().ok()?;
    (id.to_string() == text && id > 0).then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_canonical_completed_markers_count() {
        let dir = tempfile::tempdir().unwrap();
        let jobs = dir.path().join("_jobs/7");
        std::fs::create_dir_all(&jobs).unwrap();
        for name in ["COMPLETED-1", "COMPLETED-12", "COMPLETED-012", "COMPLETED-x", "EPOCH", "COMPLETED-0"] {
            std::fs::write(jobs.join(name), b"{}").unwrap();
        }
        std::fs::create_dir(jobs.join("COMPLETED-3")).unwrap();
        let ids: Vec<u64> = completed(dir.path(), "7").unwrap().into_keys().collect();
        assert_eq!(ids, [1, 12]);
        assert!(completed(dir.path(), "8").unwrap().is_empty());
    }
}
