//! `staged_file_sink`: the recoverable two-phase sink.
//!
//! Rows of a checkpoint interval are buffered. At the barrier of checkpoint `c`
//! the sink seals them durably into `<output>/<uid>/.staged/part-<s>-<c>` (the
//! *handle* of `c`), or seals nothing when the interval brought no row. Its
//! snapshot holds every handle not yet published, and its ack follows the
//! snapshot. On the coordinator's commit of `c` it publishes, by atomic rename
//! into `<output>/<uid>/`, every handle up to `c`. At open it re-commits the
//! restored snapshot's handles (a published one is skipped: the commit is
//! idempotent) and deletes its staged files that the snapshot does not hold.
//! The committed output is exactly the set of published files.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use clink_basics::digest::sha256_hex;

use crate::checkpoint::durable::{create_dir_durably, remove_stale_temps_of, rename_durably, sync_dir, write_durably};
use crate::checkpoint::{SlotKind, StateSlots};
use crate::codec::{Reader, Writer};
#[cfg(any(test, feature = "defects"))]
use crate::defects::Defect;
use crate::defects::Defects;
use crate::operators::rescale::{never_refuses, Redivision, Share};
use crate::value::{render_line_into, Row};

use super::{Descriptor, OperatorError, Prepared, Setup, Sink, SinkFamily, StateDecoding};

pub const TYPE: &str = "staged_file_sink";
pub const HANDLES_SLOT: &str = "handles";
pub const HANDLES_VERSION: u32 = 1;
pub const STAGED_DIR: &str = ".staged";

/// A sealed staged file: the checkpoint that sealed it, its name, and what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handle {
    pub checkpoint: u64,
    pub file: String,
    pub rows: u64,
    pub bytes: u64,
    pub sha256: String,
}

pub struct StagedFileSink {
    dir: PathBuf,
    staged_dir: PathBuf,
    subtask: u32,
    interval: Vec<u8>,
    interval_rows: u64,
    pending: BTreeMap<u64, Handle>,
    /// Only under the `ack_before_durable` defect: contents acked but not yet written.
    unsealed: BTreeMap<u64, Vec<u8>>,
    #[cfg_attr(not(any(test, feature = "defects")), allow(dead_code))]
    defects: Defects,
    /// The checkpoint the run imported from a dataset, if any.
    pub imported: Option<u64>,
}

/// The name of subtask `s`'s file for checkpoint `c`, staged and published alike.
pub fn part_name(subtask: u32, checkpoint: u64) -> String {
    format!("part-{subtask}-{checkpoint}")
}

/// The slot a rescale adds to a new subtask's share: the old subtasks past
/// the new parallelism whose staged files it cleans up as its own.
pub const ADOPTED_SLOT: &str = "adopted";
pub const ADOPTED_VERSION: u32 = 1;

fn parse_part_name(name: &str, subtask: u32) -> Option<u64> {
    let rest = name.strip_prefix(&format!("part-{subtask}-"))?;
    clink_basics::ids::parse_decimal_u64(rest)
}

impl StagedFileSink {
    pub fn new(dir: PathBuf, subtask: u32, defects: Defects) -> Self {
        let staged_dir = dir.join(STAGED_DIR);
        Self {
            dir,
            staged_dir,
            subtask,
            interval: Vec::new(),
            interval_rows: 0,
            pending: BTreeMap::new(),
            unsealed: BTreeMap::new(),
            defects,
            imported: None,
        }
    }

    /// Publishes one handle; a handle already published is left as it is.
    /// Returns whether it had to seal the staged file first (the defect).
    fn publish(&mut self, handle: &Handle) -> Result<bool, OperatorError> {
        let sealed_now = match self.unsealed.remove(&handle.checkpoint) {
            Some(contents) => {
                write_durably(&self.staged_dir, &handle.file, &contents)
                    .map_err(OperatorError::io(&self.staged_dir))?;
                true
            }
            None => false,
        };
        let staged = self.staged_dir.join(&handle.file);
        let published = self.dir.join(&handle.file);
        if is_regular_file(&published) {
            return Ok(sealed_now);
        }
        let size = fs::symlink_metadata(&staged).map(|m| m.len()).map_err(|_| {
            OperatorError::Protocol(format!(
                "the handle of checkpoint {} names {}, which is neither staged nor published",
                handle.checkpoint, handle.file
            ))
        })?;
        if size != handle.bytes {
            return Err(OperatorError::Protocol(format!(
                "{} holds {size} bytes; its handle vouches for {}",
                staged.display(),
                handle.bytes
            )));
        }
        rename_durably(&staged, &published).map_err(OperatorError::io(&published))?;
        Ok(sealed_now)
    }

    /// This subtask's staged files (and those of the old subtasks it
    /// adopted in a rescale) that no held handle names, by checkpoint.
    fn unheld_staged(&self, held: &[Handle], adopted: &[u32]) -> Result<Vec<(u64, PathBuf)>, OperatorError> {
        let held: std::collections::BTreeSet<&str> = held.iter().map(|h| h.file.as_str()).collect();
        let mut found = Vec::new();
        for entry in fs::read_dir(&self.staged_dir).map_err(OperatorError::io(&self.staged_dir))? {
            let entry = entry.map_err(OperatorError::io(&self.staged_dir))?;
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            let ours = std::iter::once(self.subtask).chain(adopted.iter().copied());
            if let Some(checkpoint) = ours.filter_map(|s| parse_part_name(&name, s)).next() {
                if !held.contains(name.as_str()) {
                    found.push((checkpoint, entry.path()));
                }
            }
        }
        found.sort();
        Ok(found)
    }

    /// DEFECT recommit_unheld_at_open: publishes every staged file of this
    /// subtask that no held handle names; returns how many.
    #[cfg(any(test, feature = "defects"))]
    fn publish_unheld_staged(&mut self, held: &[Handle]) -> Result<u64, OperatorError> {
        let mut published = 0;
        for (checkpoint, path) in self.unheld_staged(held, &[])? {
            let bytes = fs::symlink_metadata(&path).map(|m| m.len()).map_err(OperatorError::io(&path))?;
            let file = part_name(self.subtask, checkpoint);
            let handle = Handle { checkpoint, file, rows: 0, bytes, sha256: String::new() };
            self.publish(&handle)?;
            published += 1;
        }
        Ok(published)
    }

    /// Removes this subtask's staged files that no held handle names.
    fn remove_unheld_staged(&self, held: &[Handle], adopted: &[u32]) -> Result<(), OperatorError> {
        let unheld = self.unheld_staged(held, adopted)?;
        for (_, path) in &unheld {
            fs::remove_file(path).map_err(OperatorError::io(path))?;
        }
        if !unheld.is_empty() {
            sync_dir(&self.staged_dir).map_err(OperatorError::io(&self.staged_dir))?;
        }
        Ok(())
    }
}

fn is_regular_file(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| m.is_file())
}

impl Sink for StagedFileSink {
    fn family(&self) -> SinkFamily {
        FAMILY
    }

    fn open(&mut self, restored: Option<&StateSlots>) -> Result<u64, OperatorError> {
        create_dir_durably(&self.staged_dir).map_err(OperatorError::io(&self.staged_dir))?;
        // Sibling subtasks share the staging directory: only our own temporaries.
        remove_stale_temps_of(&self.staged_dir, &format!("part-{}-", self.subtask))
            .map_err(OperatorError::io(&self.staged_dir))?;
        let (mut held, adopted) = match restored {
            Some(slots) => (decode_handle_list(slots)?, decode_adopted(slots)?),
            None => (Vec::new(), Vec::new()),
        };
        for old in &adopted {
            remove_stale_temps_of(&self.staged_dir, &format!("part-{old}-"))
                .map_err(OperatorError::io(&self.staged_dir))?;
        }
        // Handles of an imported checkpoint belong to the run that took it:
        // it committed them into its own output, not this one.
        if let Some(imported) = self.imported {
            held.retain(|h| h.checkpoint > imported);
        }
        let mut recommitted = 0;
        // DEFECT no_recommit_at_open: the restored handles are not re-committed.
        #[cfg(any(test, feature = "defects"))]
        let recommit = !self.defects.has(Defect::NoRecommitAtOpen);
        #[cfg(not(any(test, feature = "defects")))]
        let recommit = true;
        if recommit {
            for handle in &held {
                self.publish(handle)?;
                recommitted += 1;
            }
        }
        // DEFECT recommit_unheld_at_open: every staged file of ours is
        // published, held or not, and counted as re-committed.
        #[cfg(any(test, feature = "defects"))]
        if self.defects.has(Defect::RecommitUnheldAtOpen) {
            recommitted += self.publish_unheld_staged(&held)?;
        }
        // DEFECT no_cleanup_at_open: the staged files the snapshot does not hold stay.
        #[cfg(any(test, feature = "defects"))]
        let clean_up = !self.defects.has(Defect::NoCleanupAtOpen);
        #[cfg(not(any(test, feature = "defects")))]
        let clean_up = true;
        if clean_up {
            self.remove_unheld_staged(&held, &adopted)?;
        }
        self.pending.clear();
        Ok(recommitted)
    }

    fn write(&mut self, row: &Row) -> Result<(), OperatorError> {
        render_line_into(&mut self.interval, row);
        self.interval.push(b'\n');
        self.interval_rows += 1;
        Ok(())
    }

    fn prepare(&mut self, checkpoint: u64) -> Result<Prepared, OperatorError> {
        if self.interval_rows == 0 {
            return Ok(Prepared::EMPTY);
        }
        let handle = Handle {
            checkpoint,
            file: part_name(self.subtask, checkpoint),
            rows: std::mem::take(&mut self.interval_rows),
            bytes: self.interval.len() as u64,
            sha256: sha256_hex(&self.interval),
        };
        // DEFECT ack_before_durable: the file is sealed only when the commit arrives.
        #[cfg(any(test, feature = "defects"))]
        let durable = !self.defects.has(Defect::AckBeforeDurable);
        #[cfg(not(any(test, feature = "defects")))]
        let durable = true;
        if durable {
            let written = write_durably(&self.staged_dir, &handle.file, &self.interval);
            // The interval's buffer keeps its capacity for the next interval.
            self.interval.clear();
            written.map_err(OperatorError::io(&self.staged_dir))?;
        } else {
            self.unsealed.insert(checkpoint, std::mem::take(&mut self.interval));
        }
        // DEFECT commit_at_barrier: published at the barrier.
        #[cfg(any(test, feature = "defects"))]
        if durable && self.defects.has(Defect::CommitAtBarrier) {
            self.publish(&handle)?;
            return Ok(Prepared { staged: true, durable, published: true });
        }
        self.pending.insert(checkpoint, handle);
        Ok(Prepared { staged: true, durable, published: false })
    }

    fn snapshot(&self) -> Result<StateSlots, OperatorError> {
        let mut slots = StateSlots::new();
        slots.put(HANDLES_SLOT, SlotKind::Operator, HANDLES_VERSION, write_handles(self.pending.values()));
        Ok(slots)
    }

    fn abort(&mut self, checkpoint: u64) -> Result<(), OperatorError> {
        self.unsealed.remove(&checkpoint);
        if let Some(handle) = self.pending.remove(&checkpoint) {
            let path = self.staged_dir.join(&handle.file);
            if path.exists() {
                fs::remove_file(&path).map_err(OperatorError::io(&path))?;
            }
        }
        Ok(())
    }

    fn evidence(&self, checkpoint: u64) -> serde_json::Value {
        let handle = self
            .pending
            .get(&checkpoint)
            .map(|h| serde_json::json!({"file": h.file, "rows": h.rows, "bytes": h.bytes, "sha256": h.sha256}));
        serde_json::json!({
            "type": TYPE,
            "family": self.family().as_str(),
            "staged": handle.is_some(),
            "handle": handle,
        })
    }

    fn commit(&mut self, checkpoint: u64) -> Result<Vec<u64>, OperatorError> {
        let due: Vec<u64> = self.pending.range(..=checkpoint).map(|(&c, _)| c).collect();
        // DEFECT commit_above_checkpoint: every handle held is published, above
        // `checkpoint` too.
        #[cfg(any(test, feature = "defects"))]
        let due: Vec<u64> = if self.defects.has(Defect::CommitAboveCheckpoint) {
            self.pending.keys().copied().collect()
        } else {
            due
        };
        let mut sealed_now = Vec::new();
        for c in due {
            if let Some(handle) = self.pending.get(&c).cloned() {
                if self.publish(&handle)? {
                    sealed_now.push(c);
                }
                self.pending.remove(&c);
            }
        }
        Ok(sealed_now)
    }
}

/// The handles a staged-file sink's snapshot holds.
pub fn decode_handles(slots: &StateSlots) -> Result<BTreeMap<u64, Handle>, OperatorError> {
    Ok(decode_handle_list(slots)?.into_iter().map(|h| (h.checkpoint, h)).collect())
}

/// The handles a snapshot holds, in its order. A rescale's share may hold
/// several of one checkpoint (one per old subtask it succeeds).
pub fn decode_handle_list(slots: &StateSlots) -> Result<Vec<Handle>, OperatorError> {
    let slot =
        slots.get(HANDLES_SLOT).ok_or_else(|| OperatorError::state(HANDLES_SLOT, "missing from the snapshot"))?;
    if slot.version != HANDLES_VERSION {
        return Err(OperatorError::state(HANDLES_SLOT, format!("version {} is not {HANDLES_VERSION}", slot.version)));
    }
    let mut r = Reader::new(&slot.bytes);
    let decode = |r: &mut Reader<'_>| {
        let n = r.count(36)?;
        let mut handles = Vec::with_capacity(n);
        for _ in 0..n {
            let handle = Handle {
                checkpoint: r.u64()?,
                file: r.str()?.to_string(),
                rows: r.u64()?,
                bytes: r.u64()?,
                sha256: r.str()?.to_string(),
            };
            handles.push(handle);
        }
        r.finish()?;
        Ok::<_, crate::codec::DecodeError>(handles)
    };
    let handles = decode(&mut r).map_err(|e| OperatorError::state(HANDLES_SLOT, e))?;
    for h in &handles {
        let safe = h.file.starts_with("part-") && clink_basics::names::is_safe_name(&h.file);
        if !safe {
            return Err(OperatorError::state(HANDLES_SLOT, format!("handle names {:?}, not a part file", h.file)));
        }
    }
    Ok(handles)
}


pub const DESCRIPTOR: Descriptor = Descriptor::sink(TYPE, FAMILY, build, StateDecoding::Decode(decode_state))
    .redivided_by(Redivision { refuses: never_refuses, split: redivide });

/// Two-phase, with its handles in the snapshot and re-committed at open.
const FAMILY: SinkFamily = SinkFamily::Recoverable;

fn build(setup: &Setup<'_>) -> Result<Box<dyn Sink>, OperatorError> {
    let dir = setup.env.output_dir.join(setup.uid);
    let mut sink = StagedFileSink::new(dir, setup.subtask, setup.env.defects.clone());
    sink.imported = setup.env.imported_checkpoint;
    Ok(Box::new(sink))
}

/// The old subtasks a rescale's share hands over for cleanup (none in a snapshot).
fn decode_adopted(slots: &StateSlots) -> Result<Vec<u32>, OperatorError> {
    let Some(slot) = slots.get(ADOPTED_SLOT) else {
        return Ok(Vec::new());
    };
    if slot.version != ADOPTED_VERSION {
        return Err(OperatorError::state(ADOPTED_SLOT, format!("version {} is not {ADOPTED_VERSION}", slot.version)));
    }
    let mut r = Reader::new(&slot.bytes);
    let mut decode = || {
        let n = r.count(4)?;
        let adopted = (0..n).map(|_| r.u32()).collect::<Result<Vec<_>, _>>()?;
        r.finish()?;
        Ok::<_, crate::codec::DecodeError>(adopted)
    };
    decode().map_err(|e| OperatorError::state(ADOPTED_SLOT, e))
}

fn write_handles<'a>(handles: impl ExactSizeIterator<Item = &'a Handle>) -> Vec<u8> {
    let mut w = Writer::new();
    w.u32(handles.len() as u32);
    for h in handles {
        w.u64(h.checkpoint).str(&h.file).u64(h.rows).u64(h.bytes).str(&h.sha256);
    }
    w.into_bytes()
}

/// A rescale's share: the handles of every old subtask this one succeeds,
/// which its open finalises, and the ones past the new parallelism, whose
/// staged files only it may clean up.
fn redivide(_: &serde_json::Value, share: &Share<'_>) -> Result<StateSlots, OperatorError> {
    let mut handles = Vec::new();
    let mut adopted = Vec::new();
    for (old, part) in share.predecessor_parts() {
        handles.extend(decode_handle_list(part)?);
        if old >= share.rescale.to {
            adopted.push(old);
        }
    }
    let mut slots = StateSlots::new();
    slots.put(HANDLES_SLOT, SlotKind::Operator, HANDLES_VERSION, write_handles(handles.iter()));
    let mut w = Writer::new();
    w.u32(adopted.len() as u32);
    for old in adopted {
        w.u32(old);
    }
    slots.put(ADOPTED_SLOT, SlotKind::Operator, ADOPTED_VERSION, w.into_bytes());
    Ok(slots)
}

fn decode_state(slots: &StateSlots) -> Result<(), OperatorError> {
    decode_handles(slots).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::Value;

    fn sink(dir: &Path, defects: Defects) -> StagedFileSink {
        let mut s = StagedFileSink::new(dir.join("out"), 0, defects);
        s.open(None).unwrap();
        s
    }

    fn published(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir.join("out"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| !n.starts_with('.'))
            .collect();
        names.sort();
        names
    }

    #[test]
    fn empty_intervals_seal_nothing_and_commits_publish_up_to_the_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = sink(dir.path(), Defects::none());
        assert_eq!(s.prepare(1).unwrap(), Prepared::EMPTY);
        s.write(&vec![Value::Int(1)]).unwrap();
        assert!(s.prepare(2).unwrap().staged);
        s.write(&vec![Value::Int(2)]).unwrap();
        assert!(s.prepare(3).unwrap().staged);
        s.commit(2).unwrap();
        assert_eq!(published(dir.path()), vec!["part-0-2"]);
        s.commit(3).unwrap();
        assert_eq!(published(dir.path()), vec!["part-0-2", "part-0-3"]);
        assert_eq!(fs::read_to_string(dir.path().join("out/part-0-3")).unwrap(), "2\n");
    }

    #[test]
    fn open_recommits_held_handles_once_and_drops_unheld_staged_files() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = sink(dir.path(), Defects::none());
        s.write(&vec![Value::Int(1)]).unwrap();
        s.prepare(1).unwrap();
        let snapshot = s.snapshot().unwrap();
        s.write(&vec![Value::Int(2)]).unwrap();
        s.prepare(2).unwrap(); // sealed, never completed
                               // The process dies here; a new incarnation opens from checkpoint 1.
        let mut again = StagedFileSink::new(dir.path().join("out"), 0, Defects::none());
        again.open(Some(&snapshot)).unwrap();
        assert_eq!(published(dir.path()), vec!["part-0-1"]);
        assert!(!dir.path().join("out/.staged/part-0-2").exists());
        // A second open of the same snapshot changes nothing.
        let mut third = StagedFileSink::new(dir.path().join("out"), 0, Defects::none());
        third.open(Some(&snapshot)).unwrap();
        assert_eq!(published(dir.path()), vec!["part-0-1"]);
    }

    #[test]
    fn without_the_recommit_a_completed_interval_is_never_published() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = sink(dir.path(), Defects::none());
        s.write(&vec![Value::Int(1)]).unwrap();
        s.prepare(1).unwrap();
        let snapshot = s.snapshot().unwrap();
        let mut again = StagedFileSink::new(dir.path().join("out"), 0, Defects::of(&[Defect::NoRecommitAtOpen]));
        again.open(Some(&snapshot)).unwrap();
        again.commit(5).unwrap();
        assert!(published(dir.path()).is_empty());
    }

    /// Seals 1 (held by the snapshot returned) and 2 (not held: sealed after
    /// it, never completed), then reopens a new incarnation from that snapshot.
    fn reopen_with_an_unheld_staged_file(dir: &Path, defects: Defects) -> (u64, Vec<String>, bool) {
        let mut s = sink(dir, Defects::none());
        s.write(&vec![Value::Int(1)]).unwrap();
        s.prepare(1).unwrap();
        let snapshot = s.snapshot().unwrap();
        s.write(&vec![Value::Int(2)]).unwrap();
        s.prepare(2).unwrap();
        let mut again = StagedFileSink::new(dir.join("out"), 0, defects);
        let recommitted = again.open(Some(&snapshot)).unwrap();
        (recommitted, published(dir), dir.join("out/.staged/part-0-2").exists())
    }

    #[test]
    fn the_open_defects_publish_or_keep_a_staged_file_the_snapshot_does_not_hold() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(reopen_with_an_unheld_staged_file(dir.path(), Defects::none()), (1, vec!["part-0-1".into()], false));
        let dir = tempfile::tempdir().unwrap();
        let recommit_all = Defects::of(&[Defect::RecommitUnheldAtOpen]);
        assert_eq!(
            reopen_with_an_unheld_staged_file(dir.path(), recommit_all),
            (2, vec!["part-0-1".into(), "part-0-2".into()], false),
            "the uncompleted interval 2 is published, and counted"
        );
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            reopen_with_an_unheld_staged_file(dir.path(), Defects::of(&[Defect::NoCleanupAtOpen])),
            (1, vec!["part-0-1".into()], true),
            "the unheld staged file is left behind"
        );
    }

    #[test]
    fn a_commit_publishes_only_up_to_its_checkpoint_but_the_defect_publishes_every_handle() {
        for (defects, want) in [
            (Defects::none(), vec!["part-0-1"]),
            (Defects::of(&[Defect::CommitAboveCheckpoint]), vec!["part-0-1", "part-0-2"]),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let mut s = sink(dir.path(), defects);
            for c in [1, 2] {
                s.write(&vec![Value::Int(c as i64)]).unwrap();
                s.prepare(c).unwrap();
            }
            s.commit(1).unwrap();
            assert_eq!(published(dir.path()), want);
        }
    }

    #[test]
    fn a_hostile_handle_name_is_refused() {
        let mut w = Writer::new();
        w.u32(1).u64(1).str("../../etc/passwd").u64(0).u64(0).str("");
        let mut slots = StateSlots::new();
        slots.put(HANDLES_SLOT, SlotKind::Operator, HANDLES_VERSION, w.into_bytes());
        assert!(decode_handles(&slots).is_err());
    }
}
