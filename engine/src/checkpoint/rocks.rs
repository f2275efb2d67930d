//! The RocksDB state backend: each participant's state in a RocksDB
//! database of its own (`<participant>.db/`), and each of its checkpoints a
//! RocksDB checkpoint (`<participant>.cp-<id>/`, its files hard-linked from
//! the database's where they are shared), vouched for by the participant's
//! sidecar (every file's name, size and SHA-256).
//!
//! Keys, in the participant's database (one per operator and subtask):
//! ```text
//! H                                  the snapshot's header and run (a snapshot of no slots)
//! S <slot name> 0x00                 a slot's kind and version, and its bytes unless keyed
//! K <slot name> 0x00 <group> <key>   one entry of a keyed slot: key group (u16, big-endian), key bytes
//! ```
//! so a key group's entries are one range of keys. A checkpoint writes only
//! the keys that changed since the database's last state.
//!
//! A restore never opens the checkpoint itself: it checks the directory's
//! files against the sidecar (a missing, extra, truncated or altered file is
//! refused by name), copies them to a scratch directory, opens the copy read
//! only and re-encodes the state; the caller holds that encoding to the
//! sidecar's size and SHA-256 with the file backend's own rule
//! (`backend::verify_snapshot_bytes`). It never writes a checkpoint directory
//! after it is made, and never reads the live database to restore.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rocksdb::{checkpoint::Checkpoint, IteratorMode, Options, WriteBatch, WriteOptions, DB};

use super::durable::sync_dir;
use super::identity::RunIdentity;
use super::snapshot::{
    decode_snapshot_by, encode_snapshot_by, RocksFile, RocksIdentity, SlotKind, SnapshotHeader, StateSlots,
};
use super::state_error::{io_error, read_dir_names, StateError};
use crate::codec::{Reader, Writer};
use clink_basics::digest::{copy_hashed, sha256_file, StreamDigest};

use super::snapshot::MAX_SNAPSHOT_BYTES;

/// A checkpoint directory of more files than this is refused unread.
const MAX_FILES: usize = 10_000;

fn rocks_error(path: &Path) -> impl FnOnce(rocksdb::Error) -> StateError + '_ {
    move |e| StateError::Mismatch { path: path.to_path_buf(), reason: format!("RocksDB: {e}") }
}

/// The keys and values a participant's state is stored as.
fn state_keys(
    header: &SnapshotHeader,
    slots: &StateSlots,
    run: Option<&RunIdentity>,
) -> Result<BTreeMap<Vec<u8>, Vec<u8>>, String> {
    let mut keys = BTreeMap::new();
    keys.insert(b"H".to_vec(), encode_snapshot_by(header, &StateSlots::new(), run));
    for (name, slot) in &slots.0 {
        if name.as_bytes().contains(&0) {
            return Err(format!("slot name {name:?} holds a NUL byte"));
        }
        let split = slot.kind == SlotKind::Keyed && !slot.entries.is_empty();
        let mut w = Writer::new();
        w.u8(slot.kind.tag()).u32(slot.version).u8(u8::from(split));
        if !split {
            w.bytes(&slot.bytes);
        }
        keys.insert(prefixed(b'S', name), w.into_bytes());
        if split {
            for (i, &start) in slot.entries.iter().enumerate() {
                let end = slot.entries.get(i + 1).copied().unwrap_or(slot.bytes.len());
                let entry =
                    slot.bytes.get(start..end).ok_or_else(|| format!("slot {name:?}: entry {i} out of range"))?;
                let key = Reader::new(entry).bytes().map_err(|e| format!("slot {name:?}: entry {i}: {e}"))?;
                let group = u16::try_from(crate::keys::key_group(key)).unwrap_or(u16::MAX);
                let mut k = prefixed(b'K', name);
                k.extend_from_slice(&group.to_be_bytes());
                k.extend_from_slice(key);
                keys.insert(k, entry.to_vec());
            }
        }
    }
    Ok(keys)
}

fn prefixed(tag: u8, name: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(name.len() + 2);
    k.push(tag);
    k.extend_from_slice(name.as_bytes());
    k.push(0);
    k
}

/// Opens (creating) a participant's live database. One that does not open
/// (a kill left it unrecoverable) is state no checkpoint depends on: it is
/// made again.
pub fn open_live(live: &Path) -> Result<DB, StateError> {
    let mut opts = Options::default();
    opts.create_if_missing(true);
    match DB::open(&opts, live) {
        Ok(db) => Ok(db),
        Err(_) if live.is_dir() => {
            fs::remove_dir_all(live).map_err(io_error(live))?;
            DB::open(&opts, live).map_err(rocks_error(live))
        }
        Err(e) => Err(rocks_error(live)(e)),
    }
}

/// Makes the live database hold exactly this state (only the keys that
/// changed are written, synced), then takes its checkpoint `cp` and
/// describes every file of it.
pub fn write_checkpoint(
    db: &DB,
    live: &Path,
    cp: &Path,
    header: &SnapshotHeader,
    slots: &StateSlots,
    run: Option<&RunIdentity>,
) -> Result<RocksIdentity, StateError> {
    let mut wanted =
        state_keys(header, slots, run).map_err(|reason| StateError::Mismatch { path: live.to_path_buf(), reason })?;
    let mut batch = WriteBatch::default();
    for item in db.iterator(IteratorMode::Start) {
        let (key, value) = item.map_err(rocks_error(live))?;
        match wanted.get(&*key) {
            Some(v) if **v == *value => {
                wanted.remove(&*key);
            }
            Some(_) => {}
            None => batch.delete(&key),
        }
    }
    for (key, value) in &wanted {
        batch.put(key, value);
    }
    let mut sync = WriteOptions::default();
    sync.set_sync(true);
    db.write_opt(batch, &sync).map_err(rocks_error(live))?;
    // A directory of this id is what a run killed between its checkpoint
    // and its sidecar left: no marker can name it (ids are never reused).
    if cp.exists() {
        fs::remove_dir_all(cp).map_err(io_error(cp))?;
    }
    Checkpoint::new(db).and_then(|c| c.create_checkpoint(cp)).map_err(rocks_error(cp))?;
    for name in read_dir_names(cp)? {
        fs::File::open(cp.join(&name)).and_then(|f| f.sync_all()).map_err(io_error(&cp.join(&name)))?;
    }
    sync_dir(cp).map_err(io_error(cp))?;
    if let Some(parent) = cp.parent() {
        sync_dir(parent).map_err(io_error(parent))?;
    }
    describe(cp)
}

/// Every file of a checkpoint directory: name, size, SHA-256.
pub fn describe(cp: &Path) -> Result<RocksIdentity, StateError> {
    let mut files = Vec::new();
    for name in listed(cp)? {
        let path = cp.join(&name);
        let StreamDigest { bytes: size, sha256 } = sha256_file(&path, MAX_SNAPSHOT_BYTES).map_err(io_error(&path))?;
        files.push(RocksFile { name, size, sha256 });
    }
    let dir = cp.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    Ok(RocksIdentity { dir, bytes: files.iter().map(|f| f.size).sum(), files })
}

/// A checkpoint directory's names: regular files only (a link, a directory
/// or anything else refuses it), bounded.
fn listed(cp: &Path) -> Result<Vec<String>, StateError> {
    let meta = fs::symlink_metadata(cp).map_err(io_error(cp))?;
    if !meta.is_dir() {
        return Err(StateError::Mismatch { path: cp.to_path_buf(), reason: "not a directory".into() });
    }
    let names = read_dir_names(cp)?;
    if names.len() > MAX_FILES {
        return Err(StateError::Mismatch {
            path: cp.to_path_buf(),
            reason: format!("{} files, over the limit of {MAX_FILES}", names.len()),
        });
    }
    for name in &names {
        let path = cp.join(name);
        if !fs::symlink_metadata(&path).map_err(io_error(&path))?.is_file() {
            return Err(StateError::Mismatch { path, reason: "not a regular file".into() });
        }
    }
    Ok(names)
}

/// Copies a checkpoint directory into `into`, checking it against what its
/// sidecar vouches for file by file as it copies (one pass: what is opened
/// is what was hashed), naming the first file that differs.
pub fn copy_checked(cp: &Path, vouched: &RocksIdentity, into: &Path) -> Result<(), StateError> {
    let on_disk = listed(cp)?;
    let expected: BTreeMap<&str, &RocksFile> = vouched.files.iter().map(|f| (f.name.as_str(), f)).collect();
    if let Some(extra) = on_disk.iter().find(|n| !expected.contains_key(n.as_str())) {
        return Err(StateError::Mismatch {
            path: cp.join(extra),
            reason: "a file the sidecar does not vouch for".into(),
        });
    }
    for file in &vouched.files {
        let path = cp.join(&file.name);
        if !on_disk.contains(&file.name) {
            return Err(StateError::Mismatch { path, reason: "missing; the sidecar vouches for it".into() });
        }
        let to = into.join(&file.name);
        let copied = fs::File::open(&path)
            .and_then(|from| copy_hashed(io::Read::take(from, MAX_SNAPSHOT_BYTES + 1), fs::File::create(&to)?))
            .map_err(io_error(&path))?;
        if copied.bytes != file.size {
            return Err(StateError::Mismatch {
                path,
                reason: format!("{} bytes on disk, the sidecar vouches for {}", copied.bytes, file.size),
            });
        }
        if copied.sha256 != file.sha256 {
            return Err(StateError::Mismatch {
                path,
                reason: format!("SHA-256 {}, the sidecar vouches for {}", copied.sha256, file.sha256),
            });
        }
    }
    Ok(())
}

/// The snapshot bytes a checkpoint directory's state encodes to, read from
/// a scratch copy opened read-only, after the copy was checked against
/// `vouched`; the caller checks the bytes against the sidecar.
pub fn read_checkpoint(cp: &Path, vouched: &RocksIdentity) -> Result<Vec<u8>, StateError> {
    let scratch = Scratch::new(cp)?;
    copy_checked(cp, vouched, &scratch.0)?;
    decode_database(&scratch.0).map_err(|e| match e {
        StateError::Mismatch { reason, .. } => StateError::Mismatch { path: cp.to_path_buf(), reason },
        other => other,
    })
}

/// Opens a database read-only and encodes its state as the snapshot it holds.
pub fn decode_database(dir: &Path) -> Result<Vec<u8>, StateError> {
    let invalid = |reason: String| StateError::Mismatch { path: dir.to_path_buf(), reason };
    let db = DB::open_for_read_only(&Options::default(), dir, false).map_err(rocks_error(dir))?;
    let mut frame = None;
    let mut slots: BTreeMap<String, (SlotKind, u32, Option<Vec<u8>>)> = BTreeMap::new();
    let mut entries: BTreeMap<String, Vec<Entry>> = BTreeMap::new();
    for item in db.iterator(IteratorMode::Start) {
        let (key, value) = item.map_err(rocks_error(dir))?;
        match key.split_first() {
            Some((b'H', [])) => frame = Some(value.to_vec()),
            Some((b'S', rest)) => {
                let name = slot_name(rest).ok_or_else(|| invalid("a slot key without its name".into()))?;
                let mut r = Reader::new(&value);
                let slot = (|| {
                    let tag = r.u8()?;
                    let kind = SlotKind::from_tag(tag).ok_or_else(|| r.invalid("slot kind", format!("{tag}")))?;
                    let version = r.u32()?;
                    let bytes = if r.u8()? == 0 { Some(r.bytes()?.to_vec()) } else { None };
                    r.finish()?;
                    Ok::<_, crate::codec::DecodeError>((kind, version, bytes))
                })()
                .map_err(|e| invalid(format!("slot {name:?}: {e}")))?;
                slots.insert(name, slot);
            }
            Some((b'K', rest)) => {
                let name = slot_name(rest).ok_or_else(|| invalid("an entry key without its slot".into()))?;
                let Some(key_bytes) = rest.get(name.len() + 3..) else {
                    return Err(invalid(format!("slot {name:?}: an entry key without its key group")));
                };
                entries.entry(name).or_default().push((key_bytes.to_vec(), value.to_vec()));
            }
            _ => return Err(invalid(format!("a key this backend never writes: {:?}", String::from_utf8_lossy(&key)))),
        }
    }
    let frame = frame.ok_or_else(|| invalid("no header key (H)".into()))?;
    let (header, _, run) = decode_snapshot_by(&frame).map_err(|e| invalid(format!("header: {e}")))?;
    let mut state = StateSlots::new();
    for (name, (kind, version, bytes)) in slots {
        let bytes = match bytes {
            Some(bytes) => bytes,
            None => {
                let mut held = entries.remove(&name).unwrap_or_default();
                held.sort_by(|a, b| a.0.cmp(&b.0));
                let mut w = Writer::new();
                w.u32(u32::try_from(held.len()).map_err(|_| invalid(format!("slot {name:?}: too many entries")))?);
                for (_, entry) in held {
                    w.raw(&entry);
                }
                w.into_bytes()
            }
        };
        state.put(&name, kind, version, bytes);
    }
    if let Some(name) = entries.keys().next() {
        return Err(invalid(format!("entries of slot {name:?}, which the state does not list as keyed")));
    }
    Ok(encode_snapshot_by(&header, &state, run.as_ref()))
}

/// A keyed slot's entry as stored: its key bytes and its encoded entry.
type Entry = (Vec<u8>, Vec<u8>);

/// The slot name of a key's rest (`<name> 0x00 ...`).
fn slot_name(rest: &[u8]) -> Option<String> {
    let end = rest.iter().position(|&b| b == 0)?;
    String::from_utf8(rest[..end].to_vec()).ok()
}

/// A scratch directory of this process, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(cp: &Path) -> Result<Self, StateError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!("clink-rocks-restore-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let dir = std::env::temp_dir().join(name);
        fs::create_dir_all(&dir).map_err(|source| StateError::Io { path: cp.to_path_buf(), source })?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::backend::FileStateBackend;
    use crate::checkpoint::layout::CheckpointLayout;
    use crate::checkpoint::state_error::read_dir_names;
    use crate::checkpoint::state_root::parse_state_flag;
    use crate::checkpoint::GENERATION;
    use crate::operators::keyed::{key_of_values, put_keyed};
    use crate::value::Value;

    const P: &str = "op-7-0";

    fn backend(dir: &Path) -> FileStateBackend {
        let state = parse_state_flag(&format!("rocksdb://{}", dir.join("state").display())).unwrap();
        FileStateBackend::new(CheckpointLayout::new(dir.join("ck"), 1).with_state(state))
    }

    fn slots(keys: std::ops::Range<i64>) -> StateSlots {
        let map: BTreeMap<Vec<u8>, i64> = keys.map(|k| (key_of_values(&[Value::Int(k)]), k * 10)).collect();
        let mut slots = StateSlots::new();
        put_keyed(&mut slots, "last_seen", 1, &map, |w, v| {
            w.i64(*v);
        });
        slots.put("timers", SlotKind::Timers, 1, vec![1, 2, 3]);
        slots
    }

    fn write(backend: &FileStateBackend, checkpoint: u64, keys: std::ops::Range<i64>) -> StateSlots {
        let state = slots(keys);
        let header = SnapshotHeader { job: 1, checkpoint, operator: 7, subtask: 0 };
        backend.write(P, &header, &state).unwrap();
        state
    }

    fn cp(backend: &FileStateBackend, checkpoint: u64) -> PathBuf {
        backend.layout().rocks_checkpoint(GENERATION, P, checkpoint)
    }

    fn sst(backend: &FileStateBackend, checkpoint: u64) -> PathBuf {
        let dir = cp(backend, checkpoint);
        let name = read_dir_names(&dir).unwrap().into_iter().find(|n| n.ends_with(".sst")).unwrap();
        dir.join(name)
    }

    fn refusal(backend: &FileStateBackend, checkpoint: u64) -> String {
        backend.read(GENERATION, P, checkpoint).unwrap_err().to_string()
    }

    #[test]
    fn a_checkpoint_reads_back_as_the_slots_written_and_shares_files_with_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let backend = backend(dir.path());
        let first = write(&backend, 1, 0..200);
        let second = write(&backend, 2, 100..300);
        assert_eq!(backend.read(GENERATION, P, 1).unwrap().slots, first);
        assert_eq!(backend.read(GENERATION, P, 2).unwrap().slots, second);
        // Every key is stored under its key group: the keyed slot's entries.
        let meta = backend.read_meta(GENERATION, P, 2).unwrap();
        let identity = meta.rocksdb.unwrap();
        assert_eq!(identity.dir, "op-7-0.cp-2");
        assert!(identity.files.iter().any(|f| f.name == "CURRENT") && identity.bytes > 0);
        // Incremental: checkpoint 2 holds checkpoint 1's table file, the same bytes.
        let one = backend.read_meta(GENERATION, P, 1).unwrap().rocksdb.unwrap();
        let shared = one.files.iter().filter(|f| f.name.ends_with(".sst")).filter(|f| identity.files.contains(f));
        assert_eq!(shared.count(), 1, "{one:?} {identity:?}");
        assert_eq!(backend.snapshot_ids().unwrap().into_iter().collect::<Vec<_>>(), vec![1, 2]);
        backend.prune_below(2).unwrap();
        assert!(!cp(&backend, 1).exists() && cp(&backend, 2).exists());
        assert_eq!(backend.read(GENERATION, P, 2).unwrap().slots, second);
    }

    #[test]
    fn a_missing_or_truncated_table_file_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let backend = backend(dir.path());
        write(&backend, 1, 0..50);
        let table = sst(&backend, 1);
        let bytes = fs::read(&table).unwrap();
        fs::write(&table, &bytes[..bytes.len() / 2]).unwrap();
        let err = refusal(&backend, 1);
        assert!(err.contains(&table.display().to_string()) && err.contains("bytes on disk"), "{err}");
        fs::remove_file(&table).unwrap();
        let err = refusal(&backend, 1);
        assert!(err.contains(&table.display().to_string()) && err.contains("missing"), "{err}");
    }

    #[test]
    fn a_current_file_pointing_elsewhere_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let backend = backend(dir.path());
        write(&backend, 1, 0..50);
        let current = cp(&backend, 1).join("CURRENT");
        fs::write(&current, b"MANIFEST-000001\n").unwrap();
        let err = refusal(&backend, 1);
        assert!(err.contains(&current.display().to_string()) && err.contains("SHA-256"), "{err}");
    }

    /// The variant without the sidecar's check: another checkpoint's
    /// directory in this one's place opens in RocksDB and decodes to older
    /// state, silently. The backend refuses it, naming the first file.
    #[test]
    fn another_checkpoints_directory_decodes_without_the_check_and_is_refused_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let backend = backend(dir.path());
        let first = write(&backend, 1, 0..50);
        write(&backend, 2, 0..80);
        let (one, two) = (cp(&backend, 1), cp(&backend, 2));
        fs::remove_dir_all(&two).unwrap();
        fs::create_dir(&two).unwrap();
        for name in read_dir_names(&one).unwrap() {
            fs::copy(one.join(&name), two.join(&name)).unwrap();
        }
        let unchecked = decode_database(&two).unwrap();
        let (_, decoded, _) = decode_snapshot_by(&unchecked).unwrap();
        assert_eq!(decoded, first, "without the check, checkpoint 1's state restores as checkpoint 2's");
        let err = refusal(&backend, 2);
        assert!(err.contains("op-7-0.cp-2/"), "{err}");
    }

    #[test]
    fn a_sidecar_naming_another_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let backend = backend(dir.path());
        write(&backend, 1, 0..5);
        let meta = backend.layout().snapshot_meta(GENERATION, P, 1);
        let text = fs::read_to_string(&meta).unwrap().replace("op-7-0.cp-1", "op-7-0.cp-9");
        fs::write(&meta, text).unwrap();
        assert!(refusal(&backend, 1).contains("op-7-0.cp-9"));
    }
}
