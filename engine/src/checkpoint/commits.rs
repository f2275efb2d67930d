//! The commit-confirmed family's durable evidence: commit receipts,
//! `.unresolved` markers and CONFIRMED markers.
//!
//! A sink of the family commits a broker transaction it cannot commit again
//! once its process is gone, so what it did must be on disk the instant it
//! happened. A **receipt** (`_jobs/<job>/receipts/<participant>/receipt-<c>`)
//! says the transaction of checkpoint `c` committed; it is written the
//! instant the broker acknowledged the commit, or when the in-doubt walk or
//! a reopening sink proved the commit over the wire. An **unresolved marker**
//! (`_jobs/<job>/unresolved/<participant>/unresolved-<c>`) is left by a walk
//! that stopped early, for a handle it could not prove: the owning sink's
//! open settles it before it fences the id. A **CONFIRMED marker**
//! (`_jobs/<job>/CONFIRMED-<c>`) says every sink's commit of `c` is
//! receipted; the family restores from the newest one.
//!
//! Each file carries the transaction's handle ([`TxnHandle`]): the
//! transactional id, the producer identity the commit was made under, and
//! how many records the sink had been handed up to the checkpoint's barrier
//! (replay suppression's horizon). Every write is durable (temporary name,
//! fsync, rename, fsync of the directory); every read is bounded and refuses
//! a file that names another job, participant or checkpoint than its path.
//! This module decides nothing: the runtime's walk and the sink task choose
//! what to write and when.

use std::fs;
use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::backend::read_dir_names;
use super::durable::{create_dir_durably, sync_dir, write_durably};
use super::graph::GraphRef;
use super::identity::RunIdentity;
use super::layout::{CheckpointLayout, RECEIPT_PREFIX, UNRESOLVED_PREFIX};
use super::markers::MarkerError;

pub const RECEIPT_FORMAT: &str = "clink-commit-receipt";
pub const UNRESOLVED_FORMAT: &str = "clink-unresolved-marker";
pub const CONFIRMED_FORMAT: &str = "clink-confirmed-marker";
/// Version 2 names the run that wrote the file; version 1, read still (and
/// written outside a run), does not.
pub const COMMITS_VERSION: u64 = 2;
const COMMITS_VERSION_UNIDENTIFIED: u64 = 1;

fn commits_version(run: Option<&RunIdentity>) -> u64 {
    if run.is_some() {
        COMMITS_VERSION
    } else {
        COMMITS_VERSION_UNIDENTIFIED
    }
}
/// A receipt or marker larger than this is refused unread (a handle holds
/// 16 hex digits per row of its transaction: about four million rows).
pub const MAX_COMMITS_BYTES: u64 = 64 << 20;

/// One transaction of a commit-confirmed sink, as its snapshot holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TxnHandle {
    pub checkpoint: u64,
    pub transactional_id: String,
    pub producer_id: i64,
    pub epoch: i16,
    /// The rows the transaction carries, by digest: a replay swallows rows
    /// a receipt above its restore point holds, as many times as it holds them.
    pub rows: RowDigests,
}

/// A row's identity for replay suppression: the first 8 bytes of the
/// SHA-256 of what the sink sent for it.
pub type RowDigest = u64;

/// The digests of a transaction's rows, in the order they were sent;
/// written as 16 lowercase hex digits each, one string.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RowDigests(pub Vec<RowDigest>);

impl From<RowDigests> for String {
    fn from(d: RowDigests) -> String {
        let mut text = String::with_capacity(d.0.len() * 16);
        for digest in d.0 {
            text.push_str(&format!("{digest:016x}"));
        }
        text
    }
}

impl TryFrom<String> for RowDigests {
    type Error = String;

    fn try_from(text: String) -> Result<RowDigests, String> {
        if !text.len().is_multiple_of(16) {
            return Err(format!("row digests: {} hex digits are not whole 16-digit digests", text.len()));
        }
        let digit = |c: u8| c.is_ascii_digit() || (b'a'..=b'f').contains(&c);
        if !text.bytes().all(digit) {
            return Err("row digests: not lowercase hex".into());
        }
        text.as_bytes()
            .chunks(16)
            .map(|chunk| {
                let hex = std::str::from_utf8(chunk).map_err(|e| e.to_string())?;
                u64::from_str_radix(hex, 16).map_err(|e| format!("row digests: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(RowDigests)
    }
}

/// A row's digest: the first 8 bytes of SHA-256 over its key's length, its
/// key and its payload.
pub fn row_digest(key: &[u8], payload: &[u8]) -> RowDigest {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update((key.len() as u64).to_le_bytes());
    h.update(key);
    h.update(payload);
    let d = h.finalize();
    u64::from_be_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
}

/// The durable proof that a handle's transaction committed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Receipt {
    pub format: String,
    pub version: u64,
    pub job: String,
    pub participant: String,
    /// Who proved the commit: `sink` (the broker's answer to the commit),
    /// `walk` (the in-doubt walk's probe) or `open` (a reopening sink's settlement).
    pub proven_by: String,
    pub handle: TxnHandle,
    /// The run that wrote it (version 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunIdentity>,
}

/// A handle the walk could not prove, left for the owning sink's open.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnresolvedMarker {
    pub format: String,
    pub version: u64,
    pub job: String,
    pub participant: String,
    pub handle: TxnHandle,
    /// The run that wrote it (version 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunIdentity>,
}

/// Every sink's commit of a checkpoint is receipted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfirmedMarker {
    pub format: String,
    pub version: u64,
    pub job: String,
    pub checkpoint: u64,
    /// The sinks whose commits it vouches for, by participant name.
    pub sinks: Vec<String>,
    /// Who confirmed it: `sinks` (every sink's CommitConfirmed) or `walk`.
    pub confirmed_by: String,
    pub graph: Option<GraphRef>,
    /// The run that wrote it (version 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunIdentity>,
}

/// Who proved a commit, as a receipt records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProvenBy {
    Sink,
    Walk,
    Open,
}

impl ProvenBy {
    pub fn as_str(self) -> &'static str {
        match self {
            ProvenBy::Sink => "sink",
            ProvenBy::Walk => "walk",
            ProvenBy::Open => "open",
        }
    }
}

/// Makes a receipt of `handle` durable for `participant`.
pub fn write_receipt(
    layout: &CheckpointLayout,
    participant: &str,
    handle: &TxnHandle,
    proven_by: ProvenBy,
) -> Result<(), MarkerError> {
    let run = layout.writer();
    let receipt = Receipt {
        format: RECEIPT_FORMAT.into(),
        version: commits_version(run.as_ref()),
        job: layout.job().to_string(),
        participant: participant.to_string(),
        proven_by: proven_by.as_str().into(),
        handle: handle.clone(),
        run,
    };
    write_json(&layout.receipt(participant, handle.checkpoint), &receipt)
}

/// The receipt of `participant`'s commit of `checkpoint`, if there is one.
pub fn read_receipt(
    layout: &CheckpointLayout,
    participant: &str,
    checkpoint: u64,
) -> Result<Option<Receipt>, MarkerError> {
    let path = layout.receipt(participant, checkpoint);
    let Some(bytes) = read_if_present(&path)? else {
        return Ok(None);
    };
    parse_receipt_bytes(&path, &bytes, layout.job(), participant, checkpoint).map(Some)
}

/// Parses a receipt's bytes (read from `path`) and checks that it names
/// `job`, `participant` and `checkpoint`, as its path does.
pub fn parse_receipt_bytes(
    path: &Path,
    bytes: &[u8],
    job: u64,
    participant: &str,
    checkpoint: u64,
) -> Result<Receipt, MarkerError> {
    let receipt: Receipt = parse_json(path, bytes)?;
    check_names(path, RECEIPT_FORMAT, (&receipt.format, receipt.version), job, &receipt.job, receipt.run.as_ref())?;
    check_handle(path, participant, &receipt.participant, checkpoint, &receipt.handle)?;
    Ok(receipt)
}

/// The checkpoints `participant` has receipts for, ascending.
pub fn list_receipts(layout: &CheckpointLayout, participant: &str) -> Result<Vec<u64>, MarkerError> {
    list_ids(&layout.receipts_dir(participant), RECEIPT_PREFIX)
}

/// Leaves an unresolved marker of `handle` for `participant`'s next open.
pub fn write_unresolved(layout: &CheckpointLayout, participant: &str, handle: &TxnHandle) -> Result<(), MarkerError> {
    let run = layout.writer();
    let marker = UnresolvedMarker {
        format: UNRESOLVED_FORMAT.into(),
        version: commits_version(run.as_ref()),
        job: layout.job().to_string(),
        participant: participant.to_string(),
        handle: handle.clone(),
        run,
    };
    write_json(&layout.unresolved(participant, handle.checkpoint), &marker)
}

/// The unresolved marker of `participant`'s handle of `checkpoint`.
pub fn read_unresolved(
    layout: &CheckpointLayout,
    participant: &str,
    checkpoint: u64,
) -> Result<UnresolvedMarker, MarkerError> {
    let path = layout.unresolved(participant, checkpoint);
    let bytes = read_if_present(&path)?.ok_or_else(|| MarkerError::Invalid {
        path: path.clone(),
        reason: "listed, then gone before it was read".into(),
    })?;
    parse_unresolved_bytes(&path, &bytes, layout.job(), participant, checkpoint)
}

/// Parses an unresolved marker's bytes (read from `path`) and checks that it
/// names `job`, `participant` and `checkpoint`, as its path does.
pub fn parse_unresolved_bytes(
    path: &Path,
    bytes: &[u8],
    job: u64,
    participant: &str,
    checkpoint: u64,
) -> Result<UnresolvedMarker, MarkerError> {
    let marker: UnresolvedMarker = parse_json(path, bytes)?;
    check_names(path, UNRESOLVED_FORMAT, (&marker.format, marker.version), job, &marker.job, marker.run.as_ref())?;
    check_handle(path, participant, &marker.participant, checkpoint, &marker.handle)?;
    Ok(marker)
}

/// The checkpoints `participant` has unresolved markers for, ascending.
pub fn list_unresolved(layout: &CheckpointLayout, participant: &str) -> Result<Vec<u64>, MarkerError> {
    list_ids(&layout.unresolved_dir(participant), UNRESOLVED_PREFIX)
}

/// Removes every unresolved marker of `participant` (its open settled them),
/// durably.
pub fn clear_unresolved(layout: &CheckpointLayout, participant: &str) -> Result<(), MarkerError> {
    let dir = layout.unresolved_dir(participant);
    let ids = list_unresolved(layout, participant)?;
    for id in &ids {
        let path = layout.unresolved(participant, *id);
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(source) => return Err(MarkerError::Io { path, source }),
        }
    }
    if !ids.is_empty() {
        sync_dir(&dir).map_err(|source| MarkerError::Io { path: dir.clone(), source })?;
    }
    Ok(())
}

/// Makes `CONFIRMED-<checkpoint>` durable.
pub fn write_confirmed(layout: &CheckpointLayout, marker: &ConfirmedMarker) -> Result<(), MarkerError> {
    let mut marker = marker.clone();
    marker.run = layout.writer();
    marker.version = commits_version(marker.run.as_ref());
    write_json(&layout.confirmed_marker(marker.checkpoint), &marker)
}

impl ConfirmedMarker {
    pub fn new(job: u64, checkpoint: u64, sinks: Vec<String>, confirmed_by: &str, graph: Option<GraphRef>) -> Self {
        ConfirmedMarker {
            format: CONFIRMED_FORMAT.into(),
            version: COMMITS_VERSION_UNIDENTIFIED,
            job: job.to_string(),
            checkpoint,
            sinks,
            confirmed_by: confirmed_by.into(),
            graph,
            run: None,
        }
    }
}

/// Reads and checks `CONFIRMED-<checkpoint>`: a known format and version,
/// and it names this job and this checkpoint.
pub fn read_confirmed(layout: &CheckpointLayout, checkpoint: u64) -> Result<ConfirmedMarker, MarkerError> {
    let path = layout.confirmed_marker(checkpoint);
    let bytes = read_if_present(&path)?
        .ok_or_else(|| MarkerError::Invalid { path: path.clone(), reason: "no such marker".into() })?;
    parse_confirmed_bytes(&path, &bytes, layout.job(), checkpoint)
}

/// Parses a CONFIRMED marker's bytes (read from `path`) and checks that it
/// names `job` and `checkpoint`.
pub fn parse_confirmed_bytes(
    path: &Path,
    bytes: &[u8],
    job: u64,
    checkpoint: u64,
) -> Result<ConfirmedMarker, MarkerError> {
    let marker: ConfirmedMarker = parse_json(path, bytes)?;
    check_names(path, CONFIRMED_FORMAT, (&marker.format, marker.version), job, &marker.job, marker.run.as_ref())?;
    if marker.checkpoint != checkpoint {
        return Err(MarkerError::Invalid {
            path: path.to_path_buf(),
            reason: format!("names checkpoint {}, not {checkpoint}", marker.checkpoint),
        });
    }
    Ok(marker)
}

fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), MarkerError> {
    let (dir, name) = split(path)?;
    let io_err = |source| MarkerError::Io { path: path.to_path_buf(), source };
    create_dir_durably(dir).map_err(io_err)?;
    let bytes = serde_json::to_vec_pretty(value)
        .map_err(|e| MarkerError::Invalid { path: path.to_path_buf(), reason: e.to_string() })?;
    write_durably(dir, name, &bytes).map_err(|source| MarkerError::Io { path: path.to_path_buf(), source })
}

fn split(path: &Path) -> Result<(&Path, &str), MarkerError> {
    let invalid = || MarkerError::Invalid { path: path.to_path_buf(), reason: "not a file path".into() };
    let dir = path.parent().ok_or_else(invalid)?;
    let name = path.file_name().and_then(|n| n.to_str()).ok_or_else(invalid)?;
    Ok((dir, name))
}

fn read_if_present(path: &Path) -> Result<Option<Vec<u8>>, MarkerError> {
    match clink_basics::files::read_bounded(path, MAX_COMMITS_BYTES) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(MarkerError::Io { path: path.to_path_buf(), source }),
    }
}

fn parse_json<T: serde::de::DeserializeOwned>(path: &Path, bytes: &[u8]) -> Result<T, MarkerError> {
    serde_json::from_slice(bytes).map_err(|e| MarkerError::Invalid { path: path.to_path_buf(), reason: e.to_string() })
}

fn check_names(
    path: &Path,
    format: &str,
    (found, version): (&str, u64),
    job: u64,
    names_job: &str,
    run: Option<&RunIdentity>,
) -> Result<(), MarkerError> {
    let invalid = |reason: String| MarkerError::Invalid { path: path.to_path_buf(), reason };
    if found != format || !(1..=COMMITS_VERSION).contains(&version) {
        return Err(invalid(format!(
            "format {found:?} version {version}; this build reads {format:?} versions 1 to {COMMITS_VERSION}"
        )));
    }
    if version != commits_version(run) {
        return Err(invalid(format!("version {version} names the run that wrote it exactly from version 2")));
    }
    if names_job != job.to_string() {
        return Err(invalid(format!("names job {names_job}, not job {job}")));
    }
    Ok(())
}

fn check_handle(
    path: &Path,
    participant: &str,
    names_participant: &str,
    checkpoint: u64,
    handle: &TxnHandle,
) -> Result<(), MarkerError> {
    let invalid = |reason: String| MarkerError::Invalid { path: path.to_path_buf(), reason };
    if names_participant != participant {
        return Err(invalid(format!("names participant {names_participant:?}, not {participant:?}")));
    }
    if handle.checkpoint != checkpoint {
        return Err(invalid(format!("holds the handle of checkpoint {}, not {checkpoint}", handle.checkpoint)));
    }
    Ok(())
}

/// The ids of the files `<prefix><id>` in `dir` (a canonical positive
/// decimal; temporaries and other names are passed over), ascending.
fn list_ids(dir: &Path, prefix: &str) -> Result<Vec<u64>, MarkerError> {
    let names =
        read_dir_names(dir).map_err(|e| MarkerError::Invalid { path: dir.to_path_buf(), reason: e.to_string() })?;
    let mut ids: Vec<u64> = names
        .iter()
        .filter_map(|n| clink_basics::ids::parse_decimal_u64(n.strip_prefix(prefix)?))
        .filter(|&id| id > 0)
        .collect();
    ids.sort_unstable();
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle(checkpoint: u64) -> TxnHandle {
        TxnHandle {
            checkpoint,
            transactional_id: "clink-7-out-0".into(),
            producer_id: 12,
            epoch: 3,
            rows: RowDigests(vec![checkpoint, u64::MAX, row_digest(b"k", b"v")]),
        }
    }

    #[test]
    fn receipts_round_trip_and_list_by_id() {
        let dir = tempfile::tempdir().unwrap();
        let layout = CheckpointLayout::new(dir.path(), 7);
        assert_eq!(read_receipt(&layout, "op-4-0", 2).unwrap(), None);
        for c in [10, 2] {
            write_receipt(&layout, "op-4-0", &handle(c), ProvenBy::Sink).unwrap();
        }
        assert_eq!(list_receipts(&layout, "op-4-0").unwrap(), [2, 10]);
        assert_eq!(list_receipts(&layout, "op-4-1").unwrap(), Vec::<u64>::new());
        let r = read_receipt(&layout, "op-4-0", 10).unwrap().unwrap();
        assert_eq!((r.handle, r.proven_by.as_str()), (handle(10), "sink"));
    }

    #[test]
    fn a_receipt_that_names_another_checkpoint_or_participant_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let layout = CheckpointLayout::new(dir.path(), 7);
        write_receipt(&layout, "op-4-0", &handle(3), ProvenBy::Walk).unwrap();
        fs::rename(layout.receipt("op-4-0", 3), layout.receipt("op-4-0", 4)).unwrap();
        let e = read_receipt(&layout, "op-4-0", 4).unwrap_err().to_string();
        assert!(e.contains("handle of checkpoint 3, not 4"), "{e}");
        fs::create_dir_all(layout.receipts_dir("op-4-1")).unwrap();
        fs::rename(layout.receipt("op-4-0", 4), layout.receipt("op-4-1", 3)).unwrap();
        let e = read_receipt(&layout, "op-4-1", 3).unwrap_err().to_string();
        assert!(e.contains("names participant \"op-4-0\""), "{e}");
        let other = CheckpointLayout::new(dir.path(), 8);
        write_receipt(&layout, "op-4-0", &handle(5), ProvenBy::Open).unwrap();
        fs::create_dir_all(other.receipts_dir("op-4-0")).unwrap();
        fs::copy(layout.receipt("op-4-0", 5), other.receipt("op-4-0", 5)).unwrap();
        let e = read_receipt(&other, "op-4-0", 5).unwrap_err().to_string();
        assert!(e.contains("names job 7, not job 8"), "{e}");
    }

    #[test]
    fn unreadable_receipts_are_errors_never_absence() {
        let dir = tempfile::tempdir().unwrap();
        let layout = CheckpointLayout::new(dir.path(), 7);
        fs::create_dir_all(layout.receipts_dir("op-4-0")).unwrap();
        fs::write(layout.receipt("op-4-0", 1), b"{\"format\": \"clink-commit-receipt\"").unwrap();
        assert!(read_receipt(&layout, "op-4-0", 1).is_err());
        fs::write(layout.receipt("op-4-0", 2), vec![b' '; MAX_COMMITS_BYTES as usize + 1]).unwrap();
        assert!(read_receipt(&layout, "op-4-0", 2).unwrap_err().to_string().contains("exceed"));
        std::os::unix::fs::symlink(layout.receipt("op-4-0", 1), layout.receipt("op-4-0", 3)).unwrap();
        assert!(read_receipt(&layout, "op-4-0", 3).is_err(), "a link is not a receipt");
    }

    #[test]
    fn row_digests_round_trip_as_hex_and_refuse_anything_else() {
        let digests = RowDigests(vec![0, 1, u64::MAX, 0xdead_beef]);
        let text: String = digests.clone().into();
        assert_eq!(text.len(), 64);
        assert_eq!(RowDigests::try_from(text).unwrap(), digests);
        for bad in ["0", "000000000000000g", "000000000000000A"] {
            assert!(RowDigests::try_from(bad.to_string()).is_err(), "{bad}");
        }
        assert_eq!(RowDigests::try_from(String::new()).unwrap(), RowDigests::default());
        assert_ne!(row_digest(b"ab", b"c"), row_digest(b"a", b"bc"), "the key's length is hashed");
    }

    #[test]
    fn unresolved_markers_are_listed_read_and_cleared() {
        let dir = tempfile::tempdir().unwrap();
        let layout = CheckpointLayout::new(dir.path(), 7);
        for c in [3, 5] {
            write_unresolved(&layout, "op-4-1", &handle(c)).unwrap();
        }
        fs::write(layout.unresolved_dir("op-4-1").join(".unresolved-9.tmp-1-2"), b"half").unwrap();
        assert_eq!(list_unresolved(&layout, "op-4-1").unwrap(), [3, 5]);
        assert_eq!(read_unresolved(&layout, "op-4-1", 5).unwrap().handle, handle(5));
        clear_unresolved(&layout, "op-4-1").unwrap();
        assert_eq!(list_unresolved(&layout, "op-4-1").unwrap(), Vec::<u64>::new());
        assert!(read_unresolved(&layout, "op-4-1", 5).is_err());
    }

    #[test]
    fn confirmed_markers_name_their_job_and_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let layout = CheckpointLayout::new(dir.path(), 7);
        let marker = ConfirmedMarker::new(7, 4, vec!["op-4-0".into()], "sinks", None);
        write_confirmed(&layout, &marker).unwrap();
        assert_eq!(read_confirmed(&layout, 4).unwrap(), marker);
        assert_eq!(super::super::markers::list_confirmed(&layout).unwrap(), [4]);
        fs::rename(layout.confirmed_marker(4), layout.confirmed_marker(5)).unwrap();
        assert!(read_confirmed(&layout, 5).unwrap_err().to_string().contains("names checkpoint 4, not 5"));
    }
}
