//! The snapshot format (`checkpoint-<id>.snap`) and its integrity sidecar
//! (`checkpoint-<id>.snap.meta`).
//!
//! A snapshot is a header (job, checkpoint, operator, subtask and, from
//! version 2, the run that wrote it) and named state slots, each with a kind
//! and a schema version. The sidecar records the snapshot's size and SHA-256,
//! the slots it holds and (version 2) the run, so a reader can refuse a torn
//! or altered snapshot before decoding a byte of it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use clink_basics::digest::sha256_hex;

use super::identity::{decode_run, encode_run, RunIdentity};
use crate::codec::{DecodeError, Reader, Writer};

pub const SNAPSHOT_MAGIC: &[u8; 8] = b"CLNKSNAP";
/// Version 2 names the run that wrote it; version 1 (read still, and written
/// outside a run) does not.
pub const SNAPSHOT_VERSION: u32 = 2;
const SNAPSHOT_VERSION_UNIDENTIFIED: u32 = 1;
pub const META_FORMAT: &str = "clink-snapshot-meta";
/// Sidecars: version 2 names the run, as its snapshot does; version 1 does not.
pub const META_VERSION: u64 = 2;
const META_VERSION_UNIDENTIFIED: u64 = 1;
/// Snapshots larger than this are refused by the reader.
pub const MAX_SNAPSHOT_BYTES: u64 = 1 << 30;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SlotKind {
    /// State of the operator instance as a whole (a source position, sink handles).
    Operator,
    /// State per key (windows, last_seen, ...), entries in key order.
    Keyed,
    /// The timer service: watermark and registered timers.
    Timers,
}

impl SlotKind {
    pub fn tag(self) -> u8 {
        match self {
            SlotKind::Operator => 0,
            SlotKind::Keyed => 1,
            SlotKind::Timers => 2,
        }
    }

    pub fn from_tag(tag: u8) -> Option<Self> {
        match tag {
            0 => Some(SlotKind::Operator),
            1 => Some(SlotKind::Keyed),
            2 => Some(SlotKind::Timers),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Slot {
    pub kind: SlotKind,
    pub version: u32,
    pub bytes: Vec<u8>,
    /// Where each entry of a keyed slot begins in `bytes`, as its writer
    /// knew them (`operators::keyed::put_keyed`); empty when unknown (a slot
    /// decoded from a snapshot). Never encoded and never compared: the RocksDB
    /// backend stores a keyed slot an entry per key with them.
    pub entries: Vec<usize>,
}

impl PartialEq for Slot {
    fn eq(&self, other: &Self) -> bool {
        (self.kind, self.version, &self.bytes) == (other.kind, other.version, &other.bytes)
    }
}

impl Eq for Slot {}

/// Named state slots, in name order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StateSlots(pub BTreeMap<String, Slot>);

impl StateSlots {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn put(&mut self, name: &str, kind: SlotKind, version: u32, bytes: Vec<u8>) {
        self.put_entries(name, kind, version, bytes, Vec::new());
    }

    /// [`StateSlots::put`] with where each entry of a keyed slot begins.
    pub fn put_entries(&mut self, name: &str, kind: SlotKind, version: u32, bytes: Vec<u8>, entries: Vec<usize>) {
        self.0.insert(name.to_string(), Slot { kind, version, bytes, entries });
    }

    pub fn get(&self, name: &str) -> Option<&Slot> {
        self.0.get(name)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Who a snapshot belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotHeader {
    pub job: u64,
    pub checkpoint: u64,
    pub operator: u64,
    pub subtask: u32,
}

/// A snapshot written outside a run (version 1): [`encode_snapshot_by`] with none.
pub fn encode_snapshot(header: &SnapshotHeader, slots: &StateSlots) -> Vec<u8> {
    encode_snapshot_by(header, slots, None)
}

/// A snapshot as `run` writes it (version 2), or outside a run (version 1).
pub fn encode_snapshot_by(header: &SnapshotHeader, slots: &StateSlots, run: Option<&RunIdentity>) -> Vec<u8> {
    let mut w = Writer::new();
    let version = if run.is_some() { SNAPSHOT_VERSION } else { SNAPSHOT_VERSION_UNIDENTIFIED };
    w.raw(SNAPSHOT_MAGIC).u32(version).u64(header.job).u64(header.checkpoint).u64(header.operator).u32(header.subtask);
    if run.is_some() {
        encode_run(&mut w, run);
    }
    w.u32(slots.0.len() as u32);
    for (name, slot) in &slots.0 {
        w.str(name).u8(slot.kind.tag()).u32(slot.version).bytes(&slot.bytes);
    }
    w.into_bytes()
}

pub fn decode_snapshot(bytes: &[u8]) -> Result<(SnapshotHeader, StateSlots), DecodeError> {
    decode_snapshot_by(bytes).map(|(header, slots, _)| (header, slots))
}

/// Decodes a snapshot and the run that wrote it (`None` for version 1).
pub fn decode_snapshot_by(bytes: &[u8]) -> Result<(SnapshotHeader, StateSlots, Option<RunIdentity>), DecodeError> {
    let mut r = Reader::new(bytes);
    if r.take(8)? != SNAPSHOT_MAGIC {
        return Err(r.invalid("snapshot magic", "not a clink snapshot"));
    }
    let version = r.u32()?;
    if !(SNAPSHOT_VERSION_UNIDENTIFIED..=SNAPSHOT_VERSION).contains(&version) {
        return Err(r.invalid("snapshot version", format!("this build reads 1 to {SNAPSHOT_VERSION}, found {version}")));
    }
    let header = SnapshotHeader { job: r.u64()?, checkpoint: r.u64()?, operator: r.u64()?, subtask: r.u32()? };
    let run = if version == SNAPSHOT_VERSION {
        Some(decode_run(&mut r)?.ok_or_else(|| r.invalid("snapshot run", "a version 2 snapshot names its run"))?)
    } else {
        None
    };
    let count = r.count(13)?;
    let mut slots = StateSlots::new();
    for _ in 0..count {
        let name = r.str()?.to_string();
        let kind_tag = r.u8()?;
        let kind =
            SlotKind::from_tag(kind_tag).ok_or_else(|| r.invalid("slot kind", format!("unknown kind {kind_tag}")))?;
        let version = r.u32()?;
        let bytes = r.bytes()?.to_vec();
        if slots.0.insert(name.clone(), Slot { kind, version, bytes, entries: Vec::new() }).is_some() {
            return Err(r.invalid("slot name", format!("slot {name:?} appears twice")));
        }
    }
    r.finish()?;
    Ok((header, slots, run))
}

/// One slot as the sidecar lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlotMeta {
    pub name: String,
    pub kind: SlotKind,
    pub version: u32,
    pub bytes: u64,
}

/// The `.snap.meta` sidecar.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotMeta {
    pub format: String,
    pub version: u64,
    pub job: String,
    pub checkpoint: u64,
    pub participant: String,
    pub operator: String,
    pub subtask: u32,
    pub size: u64,
    pub sha256: String,
    pub states: Vec<SlotMeta>,
    /// The run that wrote the snapshot and this sidecar (version 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunIdentity>,
    /// Written by the RocksDB backend: the checkpoint directory holding the
    /// state, every file of it. `size` and `sha256` above are then those of
    /// the snapshot the directory's state encodes to, which a restore
    /// recomputes. Absent for the file backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rocksdb: Option<RocksIdentity>,
}

/// A RocksDB checkpoint directory as its sidecar vouches for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RocksIdentity {
    /// Its name (`<participant>.cp-<id>`), beside the participant's directory.
    pub dir: String,
    /// The bytes of all its files.
    pub bytes: u64,
    /// Every file, by name order.
    pub files: Vec<RocksFile>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RocksFile {
    pub name: String,
    pub size: u64,
    pub sha256: String,
}

impl SnapshotMeta {
    pub fn describe(header: &SnapshotHeader, participant: &str, slots: &StateSlots, encoded: &[u8]) -> Self {
        SnapshotMeta {
            format: META_FORMAT.to_string(),
            version: META_VERSION_UNIDENTIFIED,
            job: header.job.to_string(),
            checkpoint: header.checkpoint,
            participant: participant.to_string(),
            operator: header.operator.to_string(),
            subtask: header.subtask,
            size: encoded.len() as u64,
            sha256: sha256_hex(encoded),
            states: slots
                .0
                .iter()
                .map(|(name, s)| SlotMeta {
                    name: name.clone(),
                    kind: s.kind,
                    version: s.version,
                    bytes: s.bytes.len() as u64,
                })
                .collect(),
            run: None,
            rocksdb: None,
        }
    }

    /// The sidecar as `run` writes it (version 2); unchanged without one.
    pub fn written_by(mut self, run: Option<RunIdentity>) -> Self {
        if let Some(run) = run {
            self.version = META_VERSION;
            self.run = Some(run);
        }
        self
    }

    /// Whether the sidecar's version and its run agree (version 2 names one).
    pub fn version_names_run(&self) -> bool {
        (self.version >= META_VERSION) == self.run.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> (SnapshotHeader, StateSlots) {
        let mut slots = StateSlots::new();
        slots.put("windows", SlotKind::Keyed, 1, vec![1, 2, 3]);
        slots.put("timers", SlotKind::Timers, 1, vec![]);
        (SnapshotHeader { job: 1, checkpoint: 4, operator: u64::MAX, subtask: 1 }, slots)
    }

    #[test]
    fn snapshots_round_trip() {
        let (header, slots) = sample();
        let bytes = encode_snapshot(&header, &slots);
        assert_eq!(decode_snapshot(&bytes).unwrap(), (header, slots));
    }

    #[test]
    fn every_truncation_is_refused() {
        let (header, slots) = sample();
        let bytes = encode_snapshot(&header, &slots);
        for cut in 0..bytes.len() {
            assert!(decode_snapshot(&bytes[..cut]).is_err(), "cut at {cut}");
        }
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_snapshot(&bytes);
            let mut prefixed = SNAPSHOT_MAGIC.to_vec();
            prefixed.extend_from_slice(&bytes);
            let _ = decode_snapshot(&prefixed);
        }
    }
}
