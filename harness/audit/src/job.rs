//! What the running job has completed: the `COMPLETED-<n>` markers of its
//! checkpoint directory, each with what identifies it beside its id (when it
//! was written and its bytes' SHA-256, [`CheckpointIdentity`]).
//!
//! Beside them, the lineage the job's directory records (`_jobs/<job>/LINEAGE`,
//! written once by the engine when a run begins a fresh directory), read as
//! bytes by this crate's own bounded reader ([`lineage`]): audits of another
//! lineage never speak for this one.
//!
//! This is selection's view only: which checkpoints to audit, in what order,
//! and whether a checkpoint is the one an audit was made of. It hashes a
//! marker's bytes but never interprets them and never decides anything an
//! audit concludes; collection copies and hashes the markers, and the checks
//! read them as the bundle's manifest vouched for them.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::UNIX_EPOCH;

use crate::ledger::CheckpointIdentity;

/// The largest marker hashed (the engine refuses larger ones unread).
pub const MAX_MARKER_BYTES: u64 = 1 << 20;

/// The lineage record's name in the job's directory.
pub const LINEAGE_FILE: &str = "LINEAGE";
/// A lineage id's length: lowercase hex digits.
const LINEAGE_DIGITS: usize = 32;
/// The most of the record read: an id and its newline, with room to see more.
const MAX_LINEAGE_BYTES: u64 = 64;

/// Why an audit of checkpoint `checkpoint` can never be complete: the
/// job's capture retention has removed the captures of its interval (some
/// operator subtask keeps captured epochs, all of them later), so no
/// attempt can collect them again. `None` when that is not known to be so.
pub fn captures_purged(capture_dir: &Path, checkpoint: u64) -> Option<String> {
    let operators = std::fs::read_dir(capture_dir).ok()?;
    for op in operators.flatten().filter(|e| e.file_name().to_str().is_some_and(|n| n.starts_with("op-"))) {
        for subtask in std::fs::read_dir(op.path()).ok()?.flatten() {
            let kept: Vec<u64> = std::fs::read_dir(subtask.path())
                .ok()?
                .flatten()
                .filter_map(|f| epoch_of(f.file_name().to_str()?))
                .collect();
            let oldest = kept.iter().min().copied();
            if oldest.is_some_and(|o| o > checkpoint) {
                return Some(format!(
                    "the job's capture retention has already removed interval {checkpoint}'s captures \
                     ({} keeps epochs from {} on), so this audit can never be complete: keep more captured \
                     epochs (clink run --capture-retain-epochs N, by default as many as --retain-checkpoints) \
                     or run the runner more often, so each checkpoint is audited before its evidence goes",
                    subtask.path().display(),
                    oldest.unwrap_or_default()
                ));
            }
        }
    }
    None
}

/// The epoch a capture file is of (`epoch-<n>.cap`, `epoch-<n>.sink.json`).
fn epoch_of(name: &str) -> Option<u64> {
    name.strip_prefix("epoch-")?.split('.').next()?.parse().ok()
}

/// A lineage record that is there and does not read as one.
#[derive(Debug, thiserror::Error)]
#[error("{}: {why}", path.display())]
pub struct LineageError {
    pub path: std::path::PathBuf,
    pub why: String,
}

/// The lineage `_jobs/<job>/LINEAGE` records: `None` when there is no such
/// file (an engine from before lineages, or a job that has not started).
/// Anything else that is not one id of 32 lowercase hex digits, ended by
/// one newline or none, is refused: a lineage is never guessed.
pub fn lineage(checkpoint_dir: &Path, job: &str) -> Result<Option<String>, LineageError> {
    let path = checkpoint_dir.join("_jobs").join(job).join(LINEAGE_FILE);
    let refused = |why: String| LineageError { path: path.clone(), why };
    match clink_basics::files::read_bounded(&path, MAX_LINEAGE_BYTES) {
        Ok(bytes) => parse_lineage(&bytes).map(Some).map_err(refused),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(refused(e.to_string())),
    }
}

/// A lineage record's bytes as its id, or why they are not one.
pub fn parse_lineage(bytes: &[u8]) -> Result<String, String> {
    let id = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let well_formed = id.len() == LINEAGE_DIGITS && id.iter().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b));
    if !well_formed {
        let shown: String = String::from_utf8_lossy(&bytes[..bytes.len().min(48)]).into();
        return Err(format!("{shown:?} is not a lineage id ({LINEAGE_DIGITS} lowercase hex digits and a newline)"));
    }
    Ok(String::from_utf8_lossy(id).into_owned())
}

/// The job's completed checkpoints: id -> its identity. A marker that cannot
/// be read whole now (removed by the job's retention mid-look, too large) is
/// left out of this look.
pub fn completed(checkpoint_dir: &Path, job: &str) -> std::io::Result<BTreeMap<u64, CheckpointIdentity>> {
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
        if let Some(identity) = identify(&entry.path(), id) {
            out.insert(id, identity);
        }
    }
    Ok(out)
}

/// A marker's identity: its write time and the SHA-256 of its bytes.
fn identify(path: &Path, checkpoint: u64) -> Option<CheckpointIdentity> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    if !meta.is_file() {
        return None;
    }
    let completed_ms =
        meta.modified().ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map_or(0, |d| d.as_millis() as u64);
    let digest = clink_basics::digest::sha256_file(path, MAX_MARKER_BYTES).ok()?;
    (digest.bytes <= MAX_MARKER_BYTES).then_some(CheckpointIdentity {
        checkpoint,
        completed_ms,
        marker_sha256: digest.sha256,
    })
}

/// A checkpoint id in canonical decimal (no sign, no leading zero).
fn canonical_id(text: &str) -> Option<u64> {
    let id: u64 = text.parse().ok()?;
    (id.to_string() == text && id > 0).then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const ID: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn a_lineage_record_reads_as_one_id_or_is_refused() {
        assert_eq!(parse_lineage(format!("{ID}\n").as_bytes()).unwrap(), ID);
        assert_eq!(parse_lineage(ID.as_bytes()).unwrap(), ID);
        let upper = ID.to_uppercase();
        for bad in ["", "\n", "xyz\n", &format!("{ID}\n\n"), &format!("{ID}0\n"), &upper, &format!(" {ID}")] {
            assert!(parse_lineage(bad.as_bytes()).is_err(), "{bad:?}");
        }
        let dir = tempfile::tempdir().unwrap();
        let jobs = dir.path().join("_jobs/7");
        std::fs::create_dir_all(&jobs).unwrap();
        assert_eq!(lineage(dir.path(), "7").unwrap(), None, "no record: an engine from before lineages");
        std::fs::write(jobs.join(LINEAGE_FILE), format!("{ID}\n")).unwrap();
        assert_eq!(lineage(dir.path(), "7").unwrap().as_deref(), Some(ID));
        std::fs::write(jobs.join(LINEAGE_FILE), vec![b'a'; 1 << 20]).unwrap();
        assert!(lineage(dir.path(), "7").unwrap_err().why.contains("exceed"), "read bounded");
        std::fs::remove_file(jobs.join(LINEAGE_FILE)).unwrap();
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), jobs.join(LINEAGE_FILE)).unwrap();
        assert!(lineage(dir.path(), "7").is_err(), "a link is not followed");
    }

    proptest! {
        #[test]
        fn any_bytes_are_an_id_or_a_refusal(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            if let Ok(id) = parse_lineage(&bytes) {
                prop_assert_eq!(id.len(), 32);
                prop_assert!(bytes.starts_with(id.as_bytes()));
            }
        }
    }

    #[test]
    fn captures_removed_by_retention_are_told_from_captures_not_yet_there() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("op-4/subtask-0");
        std::fs::create_dir_all(&sub).unwrap();
        assert_eq!(captures_purged(dir.path(), 4), None, "nothing captured: not known to be gone");
        for name in ["epoch-5.cap", "epoch-5.sink.json", "epoch-6.sink.json", "op.json"] {
            std::fs::write(sub.join(name), b"").unwrap();
        }
        let why = captures_purged(dir.path(), 4).unwrap();
        assert!(why.contains("--capture-retain-epochs") && why.contains("from 5 on"), "{why}");
        assert_eq!(captures_purged(dir.path(), 5), None, "its own epoch is kept");
        assert_eq!(captures_purged(dir.path(), 7), None, "a later checkpoint's are not yet written");
        assert_eq!(captures_purged(&dir.path().join("none"), 4), None);
    }

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

    #[test]
    fn a_marker_is_identified_by_its_bytes_and_write_time() {
        let dir = tempfile::tempdir().unwrap();
        let jobs = dir.path().join("_jobs/7");
        std::fs::create_dir_all(&jobs).unwrap();
        std::fs::write(jobs.join("COMPLETED-1"), b"{}").unwrap();
        let first = completed(dir.path(), "7").unwrap()[&1].clone();
        assert_eq!(first.marker_sha256, clink_basics::digest::sha256_hex(b"{}"));
        std::thread::sleep(std::time::Duration::from_millis(20));
        // The job directory reset: the same id, the same bytes, written again.
        std::fs::remove_file(jobs.join("COMPLETED-1")).unwrap();
        std::fs::write(jobs.join("COMPLETED-1"), b"{}").unwrap();
        let again = completed(dir.path(), "7").unwrap()[&1].clone();
        assert_ne!(first, again);
    }
}
