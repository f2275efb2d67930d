//! The state backend: writes each participant's snapshot and sidecar
//! durably, and reads them back only after checking one against the other.
//! The snapshot is a file (`checkpoint-<id>.snap`) or, when the layout's
//! state root says `rocksdb://`, a RocksDB checkpoint directory
//! (`checkpoint::rocks`); either way the sidecar is THE record of its
//! identity, and a read returns the same verified slots, so every restore
//! goes through [`FileStateBackend::read`] whichever backend wrote it.
//!
//! The participant that owns a snapshot acks its checkpoint only after
//! [`FileStateBackend::write`] returned, so a completed checkpoint's snapshots
//! are on disk whole. A reader trusts nothing: size, SHA-256, header and format
//! are all checked before the slots are handed out.

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::durable::{create_dir_durably, write_all_durably, write_durably};
use super::identity::RunIdentity;
use super::layout::{
    parse_rocks_checkpoint_name, parse_snapshot_name, participant_name, rocks_checkpoint_name, snapshot_meta_name,
    snapshot_name, CheckpointLayout, GENERATION,
};
use super::rocks;
use super::snapshot::{
    decode_snapshot_by, encode_snapshot_by, SlotMeta, SnapshotHeader, SnapshotMeta, StateSlots, MAX_SNAPSHOT_BYTES,
    META_FORMAT, META_VERSION,
};
use super::state_error::io_error;
pub use super::state_error::{read_dir_names, StateError};
use super::state_root::BackendKind;
use clink_basics::digest::sha256_hex;
use clink_basics::ids::{parse_decimal_u64, OperatorId};

/// A sidecar larger than this is refused unread.
pub const MAX_META_BYTES: u64 = 1 << 20;

/// A snapshot read back and checked against its sidecar.
#[derive(Debug, Clone)]
pub struct VerifiedSnapshot {
    pub meta: SnapshotMeta,
    pub header: SnapshotHeader,
    pub slots: StateSlots,
    /// The run that wrote it, as its header and sidecar both name it.
    pub run: Option<RunIdentity>,
}

#[derive(Debug, Clone)]
pub struct FileStateBackend {
    layout: CheckpointLayout,
    /// The layout generation this run writes: the first one, or one past
    /// its restore point's after a rescale re-divided the state.
    generation: u32,
    /// The RocksDB participants' live databases this process opened, shared
    /// by every clone (a database is opened once per process).
    live: LiveDatabases,
}

#[derive(Clone, Default)]
struct LiveDatabases(Arc<Mutex<HashMap<PathBuf, Arc<rocksdb::DB>>>>);

impl std::fmt::Debug for LiveDatabases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LiveDatabases")
    }
}

impl LiveDatabases {
    fn open(&self, live: &Path) -> Result<Arc<rocksdb::DB>, StateError> {
        let mut open = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(db) = open.get(live) {
            return Ok(Arc::clone(db));
        }
        let db = Arc::new(rocks::open_live(live)?);
        open.insert(live.to_path_buf(), Arc::clone(&db));
        Ok(db)
    }
}

impl FileStateBackend {
    pub fn new(layout: CheckpointLayout) -> Self {
        Self { layout, generation: GENERATION, live: LiveDatabases::default() }
    }

    /// The same backend, writing under `generation`.
    pub fn writing_generation(self, generation: u32) -> Self {
        Self { generation, ..self }
    }

    /// The layout generation this backend writes (and the markers name).
    pub fn generation(&self) -> u32 {
        self.generation
    }

    pub fn layout(&self) -> &CheckpointLayout {
        &self.layout
    }

    /// Writes a participant's snapshot, then its sidecar, each durably.
    pub fn write(
        &self,
        participant: &str,
        header: &SnapshotHeader,
        slots: &StateSlots,
    ) -> Result<SnapshotMeta, StateError> {
        let dir = self.layout.participant_dir(self.generation, participant);
        create_dir_durably(&dir).map_err(io_error(&dir))?;
        // Both files name the run writing through this layout.
        let run = self.layout.writer();
        let bytes = encode_snapshot_by(header, slots, run.as_ref());
        let mut meta = SnapshotMeta::describe(header, participant, slots, &bytes).written_by(run.clone());
        if self.layout.state().kind() == BackendKind::Rocksdb {
            let live = self.layout.rocks_live(self.generation, participant);
            let cp = self.layout.rocks_checkpoint(self.generation, participant, header.checkpoint);
            let db = self.live.open(&live)?;
            meta.rocksdb = Some(rocks::write_checkpoint(&db, &live, &cp, header, slots, run.as_ref())?);
            let meta_json = serde_json::to_vec_pretty(&meta)
                .map_err(|e| StateError::MetaInvalid { path: dir.clone(), reason: e.to_string() })?;
            // The checkpoint directory is durable; its sidecar vouches for it.
            let meta_name = snapshot_meta_name(header.checkpoint);
            write_durably(&dir, &meta_name, &meta_json).map_err(io_error(&dir.join(&meta_name)))?;
            return Ok(meta);
        }
        let snap_name = snapshot_name(header.checkpoint);
        let meta_json = serde_json::to_vec_pretty(&meta)
            .map_err(|e| StateError::MetaInvalid { path: dir.clone(), reason: e.to_string() })?;
        let meta_name = snapshot_meta_name(header.checkpoint);
        // The snapshot, then its sidecar, with one fsync of the directory:
        // a reader needs both, and the ack waits for the call to return.
        write_all_durably(&dir, &[(&snap_name, &bytes), (&meta_name, &meta_json)])
            .map_err(io_error(&dir.join(&snap_name)))?;
        Ok(meta)
    }

    /// Reads a participant's snapshot of `checkpoint`, verified: sidecar and
    /// snapshot agree, and both name this job, this checkpoint and this
    /// participant (its operator and subtask), as its path does. The restore
    /// path and the checks read snapshots through this one function.
    pub fn read(&self, generation: u32, participant: &str, checkpoint: u64) -> Result<VerifiedSnapshot, StateError> {
        let snap = self.layout.snapshot(generation, participant, checkpoint);
        let meta = self.layout.snapshot_meta(generation, participant, checkpoint);
        let sidecar = read_snapshot_meta(&meta)?;
        let verified = if sidecar.rocksdb.is_some() {
            self.verify_rocks(generation, participant, checkpoint, sidecar, &meta)?
        } else {
            verify_snapshot(&snap, &meta)?
        };
        check_snapshot_names(&verified, &snap, &meta, self.layout.job(), participant, checkpoint)?;
        Ok(verified)
    }

    /// A RocksDB checkpoint read through its sidecar: the directory the
    /// sidecar names must be this participant's of this checkpoint, its
    /// files those the sidecar lists, and its state must encode to the
    /// snapshot the sidecar vouches for.
    fn verify_rocks(
        &self,
        generation: u32,
        participant: &str,
        checkpoint: u64,
        sidecar: SnapshotMeta,
        meta_path: &Path,
    ) -> Result<VerifiedSnapshot, StateError> {
        let Some(identity) = &sidecar.rocksdb else {
            return Err(StateError::MetaInvalid {
                path: meta_path.to_path_buf(),
                reason: "no RocksDB checkpoint".into(),
            });
        };
        let expected = rocks_checkpoint_name(participant, checkpoint);
        if identity.dir != expected {
            return Err(StateError::Mismatch {
                path: meta_path.to_path_buf(),
                reason: format!(
                    "the sidecar names the RocksDB checkpoint {:?}; its path says {expected:?}",
                    identity.dir
                ),
            });
        }
        let cp = self.layout.rocks_checkpoint(generation, participant, checkpoint);
        let bytes = rocks::read_checkpoint(&cp, identity)?;
        verify_snapshot_bytes(&cp, &bytes, sidecar)
    }

    /// Reads a participant's sidecar of `checkpoint` alone (when the snapshot
    /// is not at hand), checking that it names what its path says.
    pub fn read_meta(&self, generation: u32, participant: &str, checkpoint: u64) -> Result<SnapshotMeta, StateError> {
        let path = self.layout.snapshot_meta(generation, participant, checkpoint);
        let meta = read_snapshot_meta(&path)?;
        check_meta_names(&meta, &path, self.layout.job(), participant, checkpoint)?;
        Ok(meta)
    }

    /// Every checkpoint id any participant of any generation has a snapshot
    /// of (ids are never reused across a rescale).
    pub fn snapshot_ids(&self) -> Result<BTreeSet<u64>, StateError> {
        let mut ids = BTreeSet::new();
        for name in read_dir_names(&self.layout.state_root())? {
            let Some(generation) = name.strip_prefix('v').and_then(parse_decimal_u64) else {
                continue;
            };
            let Ok(generation) = u32::try_from(generation) else {
                continue;
            };
            let generation_dir = self.layout.generation_dir(generation);
            for participant in read_dir_names(&generation_dir)? {
                let dir = generation_dir.join(&participant);
                if !dir.is_dir() {
                    continue;
                }
                // A RocksDB participant keeps a sidecar and no .snap file.
                ids.extend(read_dir_names(&dir)?.iter().filter_map(|n| {
                    parse_snapshot_name(n).or_else(|| n.strip_suffix(".meta").and_then(parse_snapshot_name))
                }));
            }
        }
        Ok(ids)
    }

    /// Removes every participant's snapshots of checkpoints below
    /// `keep_from`, except those of the checkpoints in `keep`.
    /// Only this backend's generation is pruned: an older one holds the
    /// restore point a rescaled run started from.
    pub fn prune_below_keeping(&self, keep_from: u64, keep: &BTreeSet<u64>) -> Result<(), StateError> {
        let generation_dir = self.layout.generation_dir(self.generation);
        for participant in read_dir_names(&generation_dir)? {
            let dir = generation_dir.join(&participant);
            if let Some((_, id)) = parse_rocks_checkpoint_name(&participant) {
                if id < keep_from && !keep.contains(&id) {
                    fs::remove_dir_all(&dir).map_err(io_error(&dir))?;
                }
                continue;
            }
            if !dir.is_dir() {
                continue;
            }
            for name in read_dir_names(&dir)? {
                let id =
                    parse_snapshot_name(&name).or_else(|| name.strip_suffix(".meta").and_then(parse_snapshot_name));
                if matches!(id, Some(id) if id < keep_from && !keep.contains(&id)) {
                    let path = dir.join(&name);
                    fs::remove_file(&path).map_err(io_error(&path))?;
                }
            }
        }
        Ok(())
    }

    /// Removes every participant's snapshots of checkpoints below `keep_from`.
    pub fn prune_below(&self, keep_from: u64) -> Result<(), StateError> {
        self.prune_below_keeping(keep_from, &BTreeSet::new())
    }
}

/// Reads a sidecar: bounded, strictly typed, a known format and version.
pub fn read_snapshot_meta(meta_path: &Path) -> Result<SnapshotMeta, StateError> {
    let text = clink_basics::files::read_bounded(meta_path, MAX_META_BYTES).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => StateError::MetaMissing { path: meta_path.to_path_buf() },
        io::ErrorKind::InvalidData => StateError::MetaInvalid { path: meta_path.to_path_buf(), reason: e.to_string() },
        _ => io_error(meta_path)(e),
    })?;
    parse_snapshot_meta(meta_path, &text)
}

/// Parses a sidecar's bytes (read from `meta_path`, which only names it in
/// errors): bounded, strictly typed, a known format and version.
pub fn parse_snapshot_meta(meta_path: &Path, text: &[u8]) -> Result<SnapshotMeta, StateError> {
    if text.len() as u64 > MAX_META_BYTES {
        return Err(StateError::MetaInvalid {
            path: meta_path.to_path_buf(),
            reason: format!("{} bytes, over the limit of {MAX_META_BYTES}", text.len()),
        });
    }
    let meta: SnapshotMeta = serde_json::from_slice(text)
        .map_err(|e| StateError::MetaInvalid { path: meta_path.to_path_buf(), reason: e.to_string() })?;
    if meta.format != META_FORMAT || meta.version > META_VERSION || !meta.version_names_run() {
        return Err(StateError::MetaInvalid {
            path: meta_path.to_path_buf(),
            reason: format!(
                "format {:?} version {}; this build reads {META_FORMAT:?} up to version {META_VERSION}, naming the run that wrote it exactly from version 2",
                meta.format, meta.version
            ),
        });
    }
    Ok(meta)
}

/// Whether a sidecar read from `meta_path` names the job, checkpoint and
/// participant its path says.
pub fn check_meta_names(
    meta: &SnapshotMeta,
    meta_path: &Path,
    job: u64,
    participant: &str,
    checkpoint: u64,
) -> Result<(), StateError> {
    check_names(meta, job, checkpoint, participant).map_err(|reason| StateError::Mismatch {
        path: meta_path.to_path_buf(),
        reason: format!("the sidecar {reason}"),
    })
}

/// Whether a verified snapshot (its sidecar and its header) names the job,
/// checkpoint and participant its path says. The restore path and every
/// reader of a bundle's snapshots apply this one rule.
pub fn check_snapshot_names(
    verified: &VerifiedSnapshot,
    snap_path: &Path,
    meta_path: &Path,
    job: u64,
    participant: &str,
    checkpoint: u64,
) -> Result<(), StateError> {
    check_meta_names(&verified.meta, meta_path, job, participant, checkpoint)?;
    let h = &verified.header;
    let named = (h.job, h.checkpoint, participant_name(OperatorId(h.operator), h.subtask));
    if named != (job, checkpoint, participant.to_string()) {
        return Err(StateError::Mismatch {
            path: snap_path.to_path_buf(),
            reason: format!(
                "the snapshot's header names job {} checkpoint {} participant {}; its path says job {job} checkpoint {checkpoint} participant {participant}",
                named.0, named.1, named.2
            ),
        });
    }
    Ok(())
}

/// Whether a sidecar names the job, checkpoint and participant its path says,
/// and a participant whose operator and subtask are its own.
fn check_names(meta: &SnapshotMeta, job: u64, checkpoint: u64, participant: &str) -> Result<(), String> {
    let own = participant_name(OperatorId(parse_decimal_u64(&meta.operator).unwrap_or(u64::MAX)), meta.subtask);
    let named = (meta.job.as_str(), meta.checkpoint, meta.participant.as_str(), own.as_str());
    let expected = (job.to_string(), checkpoint, participant);
    if named != (expected.0.as_str(), expected.1, expected.2, expected.2) {
        return Err(format!(
            "names job {} checkpoint {} participant {} (operator {} subtask {}); its path says job {job} checkpoint {checkpoint} participant {participant}",
            meta.job, meta.checkpoint, meta.participant, meta.operator, meta.subtask
        ));
    }
    Ok(())
}

/// Checks a snapshot against its sidecar and decodes it.
pub fn verify_snapshot(snap_path: &Path, meta_path: &Path) -> Result<VerifiedSnapshot, StateError> {
    let meta = read_snapshot_meta(meta_path)?;
    let len = fs::symlink_metadata(snap_path).map_err(io_error(snap_path))?;
    if !len.is_file() {
        return Err(StateError::Mismatch { path: snap_path.to_path_buf(), reason: "not a regular file".into() });
    }
    if len.len() != meta.size || len.len() > MAX_SNAPSHOT_BYTES {
        return Err(StateError::Mismatch {
            path: snap_path.to_path_buf(),
            reason: format!("{} bytes on disk, the sidecar vouches for {}", len.len(), meta.size),
        });
    }
    let bytes = fs::read(snap_path).map_err(io_error(snap_path))?;
    verify_snapshot_bytes(snap_path, &bytes, meta)
}

/// Checks a snapshot's bytes (read from `snap_path`) against its sidecar and
/// decodes them: size, SHA-256, then the slots the sidecar lists.
pub fn verify_snapshot_bytes(
    snap_path: &Path,
    bytes: &[u8],
    meta: SnapshotMeta,
) -> Result<VerifiedSnapshot, StateError> {
    if bytes.len() as u64 != meta.size || bytes.len() as u64 > MAX_SNAPSHOT_BYTES {
        return Err(StateError::Mismatch {
            path: snap_path.to_path_buf(),
            reason: format!("{} bytes, the sidecar vouches for {}", bytes.len(), meta.size),
        });
    }
    let digest = sha256_hex(bytes);
    if digest != meta.sha256 {
        return Err(StateError::Mismatch {
            path: snap_path.to_path_buf(),
            reason: format!("SHA-256 {digest}, the sidecar vouches for {}", meta.sha256),
        });
    }
    let (header, slots, run) =
        decode_snapshot_by(bytes).map_err(|source| StateError::Decode { path: snap_path.to_path_buf(), source })?;
    if run != meta.run {
        let show = |r: &Option<RunIdentity>| r.as_ref().map_or("no run".to_string(), ToString::to_string);
        return Err(StateError::Mismatch {
            path: snap_path.to_path_buf(),
            reason: format!("the snapshot names {}, its sidecar {}", show(&run), show(&meta.run)),
        });
    }
    // Every field of every slot the sidecar describes (name, kind, version,
    // size) is what the snapshot holds, in its order.
    let held: Vec<SlotMeta> = slots
        .0
        .iter()
        .map(|(name, s)| SlotMeta { name: name.clone(), kind: s.kind, version: s.version, bytes: s.bytes.len() as u64 })
        .collect();
    if meta.states != held {
        let show = |list: &[SlotMeta]| {
            list.iter().map(|s| format!("{} {:?} v{} {} B", s.name, s.kind, s.version, s.bytes)).collect::<Vec<_>>()
        };
        return Err(StateError::Mismatch {
            path: snap_path.to_path_buf(),
            reason: format!("the sidecar lists slots {:?}, the snapshot holds {:?}", show(&meta.states), show(&held)),
        });
    }
    Ok(VerifiedSnapshot { meta, header, slots, run })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::snapshot::SlotKind;

    fn backend() -> (tempfile::TempDir, FileStateBackend) {
        let dir = tempfile::tempdir().unwrap();
        let backend = FileStateBackend::new(CheckpointLayout::new(dir.path(), 1));
        (dir, backend)
    }

    fn write_one(backend: &FileStateBackend, checkpoint: u64) {
        let mut slots = StateSlots::new();
        slots.put("position", SlotKind::Operator, 1, b"abc".to_vec());
        let header = SnapshotHeader { job: 1, checkpoint, operator: 7, subtask: 0 };
        backend.write("op-7-0", &header, &slots).unwrap();
    }

    #[test]
    fn a_written_snapshot_reads_back_verified() {
        let (_dir, backend) = backend();
        write_one(&backend, 3);
        let snap = backend.read(GENERATION, "op-7-0", 3).unwrap();
        assert_eq!(snap.slots.get("position").unwrap().bytes, b"abc");
        assert_eq!(backend.snapshot_ids().unwrap().into_iter().collect::<Vec<_>>(), vec![3]);
    }

    #[test]
    fn a_torn_or_altered_snapshot_is_never_read_as_valid() {
        let (_dir, backend) = backend();
        write_one(&backend, 3);
        let path = backend.layout().snapshot(GENERATION, "op-7-0", 3);
        let good = fs::read(&path).unwrap();

        fs::write(&path, &good[..good.len() - 2]).unwrap();
        assert!(matches!(backend.read(GENERATION, "op-7-0", 3), Err(StateError::Mismatch { .. })));

        let mut flipped = good.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        fs::write(&path, &flipped).unwrap();
        let err = backend.read(GENERATION, "op-7-0", 3).unwrap_err().to_string();
        assert!(err.contains("SHA-256"), "{err}");

        fs::write(&path, &good).unwrap();
        fs::remove_file(backend.layout().snapshot_meta(GENERATION, "op-7-0", 3)).unwrap();
        assert!(matches!(backend.read(GENERATION, "op-7-0", 3), Err(StateError::MetaMissing { .. })));
    }

    #[test]
    fn a_snapshot_of_another_checkpoint_is_refused() {
        let (_dir, backend) = backend();
        write_one(&backend, 3);
        let layout = backend.layout();
        fs::rename(layout.snapshot(GENERATION, "op-7-0", 3), layout.snapshot(GENERATION, "op-7-0", 4)).unwrap();
        fs::rename(layout.snapshot_meta(GENERATION, "op-7-0", 3), layout.snapshot_meta(GENERATION, "op-7-0", 4))
            .unwrap();
        let err = backend.read(GENERATION, "op-7-0", 4).unwrap_err().to_string();
        assert!(err.contains("checkpoint 3"), "{err}");
    }

    #[test]
    fn pruning_keeps_the_checkpoints_it_is_told_to() {
        let (_dir, backend) = backend();
        for c in 1..=4 {
            write_one(&backend, c);
        }
        backend.prune_below_keeping(4, &BTreeSet::from([2])).unwrap();
        assert_eq!(backend.snapshot_ids().unwrap().into_iter().collect::<Vec<_>>(), vec![2, 4]);
    }

    #[test]
    fn pruning_keeps_the_newer_checkpoints() {
        let (_dir, backend) = backend();
        for c in 1..=4 {
            write_one(&backend, c);
        }
        backend.prune_below(3).unwrap();
        assert_eq!(backend.snapshot_ids().unwrap().into_iter().collect::<Vec<_>>(), vec![3, 4]);
        assert!(!backend.layout().snapshot_meta(GENERATION, "op-7-0", 2).exists());
    }
}
