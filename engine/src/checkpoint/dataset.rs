//! Checkpoint datasets: one completed checkpoint exported out of a job's
//! checkpoint directory, with a digest index, so it can be kept, copied,
//! verified and restored from elsewhere.
//!
//! ```text
//! <dataset>/dataset.json                         the index (format clink-checkpoint-dataset v1)
//! <dataset>/_jobs/<job>/COMPLETED-<id>           the checkpoint's marker, byte for byte
//! <dataset>/_jobs/<job>/graph-<sha256>.json      the job graph the marker names
//! <dataset>/_state/<job>/v<gen>/<participant>/checkpoint-<id>.snap[.meta]
//! ```
//! The layout below the index is a checkpoint directory's, so a build that
//! only knows how to resume over a checkpoint directory can restore from a
//! copy of a dataset too. The index lists every other file with its size and
//! SHA-256; the dataset's digest is the SHA-256 of the index's bytes, so one
//! digest kept elsewhere binds every byte.
//!
//! [`export`] copies only what the marker vouches for, each snapshot verified
//! against its sidecar while it is copied, into a temporary directory beside
//! the destination, published with one rename. [`verify`] trusts nothing:
//! the digest, every listed file's size and hash, no unlisted file, no link,
//! the marker naming the job and checkpoint, and every snapshot against its
//! sidecar. [`import`] puts a verified dataset's checkpoint into a job's
//! checkpoint directory, the marker last, so the restore rule finds it.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use clink_basics::digest::{sha256_file, sha256_hex};

use super::backend::{FileStateBackend, StateError};
use super::durable::{create_dir_durably, write_durably};
use super::graph::{read_graph, GraphError, GraphRef};
use super::identity::RunIdentity;
use super::layout::{completed_marker_name, snapshot_meta_name, snapshot_name, CheckpointLayout, IMPORTED_NAME};
use super::markers::{list_completed, read_completed, CompletedMarker, MarkerError};

pub const DATASET_FORMAT: &str = "clink-checkpoint-dataset";
pub const DATASET_VERSION: u64 = 1;
pub const INDEX_NAME: &str = "dataset.json";
const MAX_INDEX_BYTES: u64 = 8 << 20;
/// The most files a dataset may list (participants times two, a marker, a graph).
const MAX_FILES: usize = 100_000;
/// The deepest a dataset's tree goes (`_state/<job>/v<gen>/<participant>/file`).
const MAX_DEPTH: usize = 6;
/// A file larger than this is refused while verifying (a snapshot's own limit).
const MAX_FILE_BYTES: u64 = 1 << 30;

#[derive(Debug, Error)]
pub enum DatasetError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path}: {reason}")]
    Invalid { path: PathBuf, reason: String },
    #[error("{path} exists already; a dataset is written to a new path")]
    Exists { path: PathBuf },
    #[error(transparent)]
    Markers(#[from] MarkerError),
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Graph(#[from] GraphError),
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> DatasetError + '_ {
    move |source| DatasetError::Io { path: path.to_path_buf(), source }
}

/// One file of a dataset as its index lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexedFile {
    /// Relative to the dataset's root, `/`-separated.
    pub path: String,
    pub size: u64,
    pub sha256: String,
}

/// `dataset.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatasetIndex {
    pub format: String,
    pub version: u64,
    pub job: String,
    pub checkpoint: u64,
    /// The marker's kind: periodic, final or savepoint.
    pub kind: String,
    pub generation: u32,
    /// The build that exported it (`clink --version`).
    pub exported_by: String,
    pub participants: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph: Option<GraphRef>,
    pub files: Vec<IndexedFile>,
}

/// A dataset whose index was read (and, from [`verify`], every file checked).
#[derive(Debug, Clone)]
pub struct Dataset {
    pub dir: PathBuf,
    pub index: DatasetIndex,
    /// The SHA-256 of `dataset.json`.
    pub digest: String,
    pub job: u64,
}

impl Dataset {
    /// The dataset as a checkpoint directory.
    pub fn layout(&self) -> CheckpointLayout {
        CheckpointLayout::new(&self.dir, self.job)
    }
}

/// Which checkpoint of a directory to export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    Id(u64),
    /// The newest completed checkpoint.
    Latest,
}

impl Which {
    /// `latest` or a checkpoint id.
    pub fn parse(text: &str) -> Option<Which> {
        if text == "latest" {
            return Some(Which::Latest);
        }
        clink_basics::ids::parse_decimal_u64(text).filter(|&id| id > 0).map(Which::Id)
    }
}

/// The checkpoint id `which` names in a job's directory: it must have a
/// COMPLETED marker.
pub fn resolve(layout: &CheckpointLayout, which: Which) -> Result<u64, DatasetError> {
    let completed = list_completed(layout)?;
    let missing = |what: String| DatasetError::Invalid { path: layout.jobs_dir(), reason: what };
    match which {
        Which::Latest => completed
            .last()
            .copied()
            .ok_or_else(|| missing(format!("job {} has no completed checkpoint", layout.job()))),
        Which::Id(id) if completed.contains(&id) => Ok(id),
        Which::Id(id) => Err(missing(format!(
            "checkpoint {id} of job {} has no COMPLETED marker (completed: {completed:?})",
            layout.job()
        ))),
    }
}

fn relative(parts: &[&str]) -> String {
    parts.join("/")
}

/// The relative paths of a checkpoint's files in a checkpoint directory's layout.
fn marker_path(job: u64, checkpoint: u64) -> String {
    relative(&["_jobs", &job.to_string(), &completed_marker_name(checkpoint)])
}

fn graph_path(job: u64, graph: &GraphRef) -> String {
    relative(&["_jobs", &job.to_string(), &graph.file])
}

fn snapshot_paths(job: u64, generation: u32, participant: &str, checkpoint: u64) -> [String; 2] {
    let dir = ["_state".to_string(), job.to_string(), format!("v{generation}"), participant.to_string()];
    let join = |name: String| {
        let mut parts: Vec<&str> = dir.iter().map(String::as_str).collect();
        parts.push(&name);
        relative(&parts)
    };
    [join(snapshot_name(checkpoint)), join(snapshot_meta_name(checkpoint))]
}

/// Exports checkpoint `checkpoint` of a job's directory to a new directory `out`.
pub fn export(
    layout: &CheckpointLayout,
    checkpoint: u64,
    out: &Path,
    exported_by: &str,
) -> Result<Dataset, DatasetError> {
    if fs::symlink_metadata(out).is_ok() {
        return Err(DatasetError::Exists { path: out.to_path_buf() });
    }
    let marker = read_completed(layout, checkpoint)?;
    let backend = FileStateBackend::new(layout.clone());
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    create_dir_durably(&parent).map_err(io_error(&parent))?;
    let name = out.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "dataset".into());
    let tmp = parent.join(super::durable::temp_name(&name));
    let result = (|| {
        let job = layout.job();
        let mut files = Vec::new();
        let mut put = |rel: String, bytes: &[u8]| -> Result<(), DatasetError> {
            let path = tmp.join(&rel);
            let dir = path.parent().unwrap_or(&tmp).to_path_buf();
            create_dir_durably(&dir).map_err(io_error(&dir))?;
            let file_name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            write_durably(&dir, &file_name, bytes).map_err(io_error(&path))?;
            files.push(IndexedFile { path: rel, size: bytes.len() as u64, sha256: sha256_hex(bytes) });
            Ok(())
        };
        for participant in &marker.participants {
            // Verified against its sidecar first; then the very bytes that
            // hash as the sidecar says are the ones copied.
            let verified = backend.read(marker.generation, participant, checkpoint)?;
            let [snap_rel, meta_rel] = snapshot_paths(job, marker.generation, participant, checkpoint);
            let snap_path = layout.snapshot(marker.generation, participant, checkpoint);
            let snap = clink_basics::files::read_bounded(&snap_path, MAX_FILE_BYTES).map_err(io_error(&snap_path))?;
            if sha256_hex(&snap) != verified.meta.sha256 {
                return Err(DatasetError::Invalid { path: snap_path, reason: "changed while it was exported".into() });
            }
            let meta_path = layout.snapshot_meta(marker.generation, participant, checkpoint);
            let meta = clink_basics::files::read_bounded(&meta_path, MAX_FILE_BYTES).map_err(io_error(&meta_path))?;
            put(snap_rel, &snap)?;
            put(meta_rel, &meta)?;
        }
        if let Some(graph) = &marker.graph {
            put(graph_path(job, graph), &read_graph(layout, graph)?)?;
        }
        let marker_file = layout.completed_marker(checkpoint);
        let marker_bytes =
            clink_basics::files::read_bounded(&marker_file, MAX_INDEX_BYTES).map_err(io_error(&marker_file))?;
        put(marker_path(job, checkpoint), &marker_bytes)?;
        files.sort_by(|a, b| a.path.cmp(&b.path));
        let index = DatasetIndex {
            format: DATASET_FORMAT.into(),
            version: DATASET_VERSION,
            job: job.to_string(),
            checkpoint,
            kind: marker.kind.as_str().into(),
            generation: marker.generation,
            exported_by: exported_by.to_string(),
            participants: marker.participants.clone(),
            graph: marker.graph.clone(),
            files,
        };
        let bytes = serde_json::to_vec_pretty(&index)
            .map_err(|e| DatasetError::Invalid { path: tmp.join(INDEX_NAME), reason: e.to_string() })?;
        write_durably(&tmp, INDEX_NAME, &bytes).map_err(io_error(&tmp.join(INDEX_NAME)))?;
        fs::rename(&tmp, out).map_err(io_error(out))?;
        super::durable::sync_dir(&parent).map_err(io_error(&parent))?;
        Ok(Dataset { dir: out.to_path_buf(), digest: sha256_hex(&bytes), index, job })
    })();
    if result.is_err() {
        let _ = fs::remove_dir_all(&tmp);
    }
    result
}

/// Reads a dataset's index (bounded, strict, a known format and version),
/// without checking the files it lists.
pub fn read_index(dir: &Path) -> Result<Dataset, DatasetError> {
    let path = dir.join(INDEX_NAME);
    let bytes = clink_basics::files::read_bounded(&path, MAX_INDEX_BYTES).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => DatasetError::Invalid {
            path: dir.to_path_buf(),
            reason: format!("not a checkpoint dataset: no {INDEX_NAME} (export one with `clink checkpoint export`)"),
        },
        _ => DatasetError::Io { path: path.clone(), source: e },
    })?;
    let invalid = |reason: String| DatasetError::Invalid { path: path.clone(), reason };
    let probe: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| invalid(e.to_string()))?;
    let format = probe.get("format").and_then(|f| f.as_str()).unwrap_or_default();
    let version = probe.get("version").and_then(|v| v.as_u64()).unwrap_or(0);
    if format != DATASET_FORMAT || version == 0 || version > DATASET_VERSION {
        return Err(invalid(format!(
            "format {format:?} version {version}; this build reads {DATASET_FORMAT:?} up to version {DATASET_VERSION}"
        )));
    }
    let index: DatasetIndex = serde_json::from_value(probe).map_err(|e| invalid(e.to_string()))?;
    let job = clink_basics::ids::parse_decimal_u64(&index.job)
        .ok_or_else(|| invalid(format!("job {:?} is not a decimal id", index.job)))?;
    if index.files.len() > MAX_FILES {
        return Err(invalid(format!("{} files exceed the limit of {MAX_FILES}", index.files.len())));
    }
    Ok(Dataset { dir: dir.to_path_buf(), digest: sha256_hex(&bytes), index, job })
}

/// Whether a listed path is plain: relative, `/`-separated names, no `.`
/// or `..`, nothing that starts with `.`.
fn is_plain_relative(path: &str) -> bool {
    !path.is_empty()
        && path.split('/').count() <= MAX_DEPTH
        && Path::new(path).components().all(|c| matches!(c, Component::Normal(_)))
        && path.split('/').all(|part| !part.is_empty() && !part.starts_with('.'))
}

/// Every file under `dir` (relative, `/`-separated); a link or anything that
/// is neither a file nor a directory is refused.
fn walk(root: &Path, dir: &Path, depth: usize, out: &mut BTreeSet<String>) -> Result<(), DatasetError> {
    if depth > MAX_DEPTH {
        return Err(DatasetError::Invalid { path: dir.to_path_buf(), reason: "nested too deep".into() });
    }
    for entry in fs::read_dir(dir).map_err(io_error(dir))? {
        let entry = entry.map_err(io_error(dir))?;
        let path = entry.path();
        let kind = fs::symlink_metadata(&path).map_err(io_error(&path))?.file_type();
        let rel = path.strip_prefix(root).unwrap_or(&path);
        let Some(rel) = rel.to_str().map(|r| r.replace(std::path::MAIN_SEPARATOR, "/")) else {
            return Err(DatasetError::Invalid { path: path.clone(), reason: "a name that is not UTF-8".into() });
        };
        if kind.is_symlink() {
            return Err(DatasetError::Invalid { path, reason: "a link; a dataset holds none".into() });
        } else if kind.is_dir() {
            walk(root, &path, depth + 1, out)?;
        } else if kind.is_file() {
            out.insert(rel);
            if out.len() > MAX_FILES + 1 {
                return Err(DatasetError::Invalid { path: root.to_path_buf(), reason: "too many files".into() });
            }
        } else {
            return Err(DatasetError::Invalid { path, reason: "neither a file nor a directory".into() });
        }
    }
    Ok(())
}

/// Verifies a dataset: its digest (when one is given), every file it lists
/// (size, SHA-256), no file it does not list, no link, a marker that names
/// the index's job and checkpoint, participants and graph, and every
/// snapshot against its sidecar.
pub fn verify(dir: &Path, expected_digest: Option<&str>) -> Result<Dataset, DatasetError> {
    let root_kind = fs::symlink_metadata(dir).map_err(io_error(dir))?;
    if !root_kind.is_dir() {
        return Err(DatasetError::Invalid { path: dir.to_path_buf(), reason: "not a directory".into() });
    }
    let dataset = read_index(dir)?;
    let index_path = dir.join(INDEX_NAME);
    let invalid = |path: &Path, reason: String| DatasetError::Invalid { path: path.to_path_buf(), reason };
    if let Some(expected) = expected_digest {
        if dataset.digest != expected {
            return Err(invalid(&index_path, format!("SHA-256 {}, the digest given is {expected}", dataset.digest)));
        }
    }
    let index = &dataset.index;
    let mut listed = BTreeSet::new();
    for file in &index.files {
        if !is_plain_relative(&file.path) || file.path == INDEX_NAME {
            return Err(invalid(&index_path, format!("lists {:?}, not a plain relative path", file.path)));
        }
        if !listed.insert(file.path.clone()) {
            return Err(invalid(&index_path, format!("lists {:?} twice", file.path)));
        }
    }
    let mut present = BTreeSet::new();
    walk(dir, dir, 0, &mut present)?;
    present.remove(INDEX_NAME);
    if let Some(extra) = present.difference(&listed).next() {
        return Err(invalid(&dir.join(extra), "present but not listed in the index".into()));
    }
    if let Some(missing) = listed.difference(&present).next() {
        return Err(invalid(&dir.join(missing), "listed in the index but missing".into()));
    }
    for file in &index.files {
        let path = dir.join(&file.path);
        let found = sha256_file(&path, MAX_FILE_BYTES).map_err(io_error(&path))?;
        if found.bytes != file.size || found.sha256 != file.sha256 {
            return Err(invalid(
                &path,
                format!(
                    "{} bytes with SHA-256 {}; the index records {} bytes with {}",
                    found.bytes, found.sha256, file.size, file.sha256
                ),
            ));
        }
    }
    let layout = dataset.layout();
    let required = expected_files(&dataset);
    if let Some(absent) = required.iter().find(|p| !listed.contains(*p)) {
        return Err(invalid(&index_path, format!("does not list {absent:?}, which the checkpoint needs")));
    }
    let marker = read_completed(&layout, index.checkpoint)?;
    check_marker_agrees(&dataset, &marker)?;
    if let Some(graph) = &marker.graph {
        read_graph(&layout, graph)?;
    }
    let backend = FileStateBackend::new(layout);
    for participant in &marker.participants {
        backend.read(marker.generation, participant, index.checkpoint)?;
    }
    Ok(dataset)
}

/// The files the index's checkpoint needs: marker, graph, every participant's snapshot and sidecar.
fn expected_files(dataset: &Dataset) -> Vec<String> {
    let index = &dataset.index;
    let mut files = vec![marker_path(dataset.job, index.checkpoint)];
    if let Some(graph) = &index.graph {
        files.push(graph_path(dataset.job, graph));
    }
    for participant in &index.participants {
        files.extend(snapshot_paths(dataset.job, index.generation, participant, index.checkpoint));
    }
    files
}

fn check_marker_agrees(dataset: &Dataset, marker: &CompletedMarker) -> Result<(), DatasetError> {
    let index = &dataset.index;
    let differs = |what: &str| DatasetError::Invalid {
        path: dataset.layout().completed_marker(index.checkpoint),
        reason: format!("the marker's {what} differs from the index's"),
    };
    if marker.participants != index.participants {
        return Err(differs("participants"));
    }
    if marker.graph != index.graph {
        return Err(differs("job graph"));
    }
    if marker.generation != index.generation || marker.kind.as_str() != index.kind {
        return Err(differs("generation or kind"));
    }
    Ok(())
}

/// Puts a dataset's checkpoint into a job's checkpoint directory: snapshots
/// and sidecars, the graph, then the marker, each durably. The directory
/// must hold nothing of that checkpoint yet.
pub fn import(dataset: &Dataset, into: &CheckpointLayout) -> Result<(), DatasetError> {
    let index = &dataset.index;
    if into.job() != dataset.job {
        return Err(DatasetError::Invalid {
            path: dataset.dir.clone(),
            reason: format!("holds job {}, not job {}", dataset.job, into.job()),
        });
    }
    let target_marker = into.completed_marker(index.checkpoint);
    if fs::symlink_metadata(&target_marker).is_ok() {
        return Err(DatasetError::Exists { path: target_marker });
    }
    let copy = |rel: &str| -> Result<(), DatasetError> {
        let from = dataset.dir.join(rel);
        let to = into.root().join(rel);
        let dir = to.parent().unwrap_or(into.root()).to_path_buf();
        create_dir_durably(&dir).map_err(io_error(&dir))?;
        let bytes = clink_basics::files::read_bounded(&from, MAX_FILE_BYTES).map_err(io_error(&from))?;
        let name = to.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        write_durably(&dir, &name, &bytes).map_err(io_error(&to))
    };
    for participant in &index.participants {
        for rel in snapshot_paths(dataset.job, index.generation, participant, index.checkpoint) {
            copy(&rel)?;
        }
    }
    if let Some(graph) = &index.graph {
        copy(&graph_path(dataset.job, graph))?;
    }
    copy(&marker_path(dataset.job, index.checkpoint))?;
    // The imported checkpoint's files name the run that took it, another
    // lineage: the record says so, and which run imported it.
    let from = read_completed(into, index.checkpoint)
        .map_err(|e| DatasetError::Invalid { path: dataset.dir.clone(), reason: e.to_string() })?
        .run;
    let record = ImportedRecord {
        format: IMPORTED_FORMAT.into(),
        version: IMPORTED_VERSION,
        job: into.job().to_string(),
        checkpoint: index.checkpoint,
        from,
        run: into.writer(),
    };
    let path = into.imported_record();
    let bytes = serde_json::to_vec_pretty(&record)
        .map_err(|e| DatasetError::Invalid { path: path.clone(), reason: e.to_string() })?;
    write_durably(&into.jobs_dir(), IMPORTED_NAME, &bytes).map_err(io_error(&path))
}

pub const IMPORTED_FORMAT: &str = "clink-imported-record";
pub const IMPORTED_VERSION: u64 = 1;
/// An IMPORTED record larger than this is refused unread.
pub const MAX_IMPORTED_BYTES: u64 = 4096;

/// `_jobs/<job>/IMPORTED`: the checkpoint a run took from a dataset, the run
/// that wrote that checkpoint's files (another lineage), and the run that
/// imported it. Older builds wrote the checkpoint's id alone, as decimal
/// text: still read, naming neither run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportedRecord {
    pub format: String,
    pub version: u64,
    pub job: String,
    pub checkpoint: u64,
    /// The run the imported COMPLETED marker names (`None`: it names none).
    pub from: Option<RunIdentity>,
    /// The run that imported it.
    pub run: Option<RunIdentity>,
}

/// Parses an IMPORTED record's bytes (read from `path`) for `job`.
pub fn parse_imported_bytes(path: &Path, bytes: &[u8], job: u64) -> Result<ImportedRecord, DatasetError> {
    let invalid = |reason: String| DatasetError::Invalid { path: path.to_path_buf(), reason };
    if bytes.len() as u64 > MAX_IMPORTED_BYTES {
        return Err(invalid(format!("{} bytes, over the limit of {MAX_IMPORTED_BYTES}", bytes.len())));
    }
    let text = std::str::from_utf8(bytes).map_err(|_| invalid("not UTF-8".into()))?;
    if let Some(checkpoint) = clink_basics::ids::parse_decimal_u64(text.trim()) {
        let legacy = ImportedRecord {
            format: IMPORTED_FORMAT.into(),
            version: 0,
            job: job.to_string(),
            checkpoint,
            from: None,
            run: None,
        };
        return Ok(legacy);
    }
    let record: ImportedRecord = serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?;
    if record.format != IMPORTED_FORMAT || record.version != IMPORTED_VERSION {
        return Err(invalid(format!("format {:?} version {}", record.format, record.version)));
    }
    if record.job != job.to_string() || record.checkpoint == 0 {
        return Err(invalid(format!("names job {} checkpoint {}", record.job, record.checkpoint)));
    }
    Ok(record)
}

/// The checkpoint a directory imported from a dataset, if it did: its
/// sinks' handles were committed by the run that took it, into that run's
/// output, so a restore from it re-commits none of them here.
pub fn imported_checkpoint(layout: &CheckpointLayout) -> Option<u64> {
    let path = layout.imported_record();
    let bytes = clink_basics::files::read_bounded(&path, MAX_IMPORTED_BYTES).ok()?;
    parse_imported_bytes(&path, &bytes, layout.job()).ok().map(|r| r.checkpoint)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::graph::write_graph;
    use crate::checkpoint::markers::{write_completed, CheckpointKind};
    use crate::checkpoint::snapshot::{SlotKind, SnapshotHeader};
    use crate::checkpoint::StateSlots;
    use proptest::prelude::*;

    /// A job directory with checkpoints 1 and 2 of two participants.
    fn job_dir() -> (tempfile::TempDir, CheckpointLayout) {
        let dir = tempfile::tempdir().unwrap();
        let layout = CheckpointLayout::new(dir.path().join("ck"), 7);
        let graph = write_graph(&layout, b"{\"format\":\"clink-job\"}").unwrap();
        let backend = FileStateBackend::new(layout.clone());
        for checkpoint in [1, 2] {
            for (op, sub) in [(1u64, 0u32), (3, 1)] {
                let mut slots = StateSlots::new();
                slots.put("position", SlotKind::Operator, 1, vec![checkpoint as u8; 9]);
                let header = SnapshotHeader { job: 7, checkpoint, operator: op, subtask: sub };
                backend.write(&format!("op-{op}-{sub}"), &header, &slots).unwrap();
            }
            let marker = CompletedMarker::new(
                7,
                checkpoint,
                1,
                CheckpointKind::Savepoint,
                vec!["op-1-0".into(), "op-3-1".into()],
                Some(graph.clone()),
            );
            write_completed(&layout, &marker).unwrap();
        }
        (dir, layout)
    }

    #[test]
    fn an_exported_dataset_verifies_and_imports_as_a_restore_point() {
        let (dir, layout) = job_dir();
        assert_eq!(resolve(&layout, Which::Latest).unwrap(), 2);
        assert!(resolve(&layout, Which::Id(5)).is_err());
        let out = dir.path().join("ds");
        let exported = export(&layout, 1, &out, "test").unwrap();
        assert!(export(&layout, 1, &out, "test").is_err(), "never over an existing path");
        let verified = verify(&out, Some(&exported.digest)).unwrap();
        assert_eq!(verified.index.checkpoint, 1);
        assert_eq!(verified.index.files.len(), 6, "4 snapshot files, the graph, the marker");
        assert!(verify(&out, Some(&"0".repeat(64))).is_err(), "another digest");
        let into = CheckpointLayout::new(dir.path().join("new"), 7);
        import(&verified, &into).unwrap();
        assert_eq!(crate::checkpoint::restore_point_on_disk(&into).unwrap().checkpoint, 1);
        FileStateBackend::new(into.clone()).read(1, "op-3-1", 1).unwrap();
        assert!(import(&verified, &into).is_err(), "the checkpoint is there already");
        let other_job = CheckpointLayout::new(dir.path().join("other"), 8);
        assert!(import(&verified, &other_job).is_err());
    }

    #[test]
    fn every_kind_of_tampering_is_refused() {
        let (dir, layout) = job_dir();
        let out = dir.path().join("ds");
        export(&layout, 2, &out, "test").unwrap();
        let copy = |name: &str| {
            let to = dir.path().join(name);
            crate::checkpoint::dataset::tests::copy_tree(&out, &to);
            to
        };
        let snap = "_state/7/v1/op-3-1/checkpoint-2.snap";

        let flipped = copy("flipped");
        let mut bytes = fs::read(flipped.join(snap)).unwrap();
        bytes[20] ^= 1;
        fs::write(flipped.join(snap), bytes).unwrap();
        assert!(verify(&flipped, None).unwrap_err().to_string().contains("SHA-256"));

        let truncated = copy("truncated");
        fs::remove_file(truncated.join(snap)).unwrap();
        assert!(verify(&truncated, None).unwrap_err().to_string().contains("missing"));

        let extra = copy("extra");
        fs::write(extra.join("_jobs/7/COMPLETED-9"), b"{}").unwrap();
        assert!(verify(&extra, None).unwrap_err().to_string().contains("not listed"));

        let linked = copy("linked");
        fs::remove_file(linked.join(snap)).unwrap();
        std::os::unix::fs::symlink(out.join(snap), linked.join(snap)).unwrap();
        assert!(verify(&linked, None).unwrap_err().to_string().contains("link"));

        let newer = copy("newer");
        let index = fs::read_to_string(newer.join(INDEX_NAME)).unwrap();
        fs::write(newer.join(INDEX_NAME), index.replace("\"version\": 1", "\"version\": 2")).unwrap();
        assert!(verify(&newer, None).unwrap_err().to_string().contains("up to version 1"));

        let escaping = copy("escaping");
        let index = fs::read_to_string(escaping.join(INDEX_NAME)).unwrap();
        fs::write(escaping.join(INDEX_NAME), index.replace("_jobs/7/COMPLETED-2", "../COMPLETED-2")).unwrap();
        assert!(verify(&escaping, None).unwrap_err().to_string().contains("plain relative"));
    }

    pub(super) fn copy_tree(from: &Path, to: &Path) {
        fs::create_dir_all(to).unwrap();
        for entry in fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let target = to.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                copy_tree(&entry.path(), &target);
            } else {
                fs::copy(entry.path(), target).unwrap();
            }
        }
    }

    proptest! {
        #[test]
        fn any_index_text_is_read_or_refused_without_panicking(text in ".{0,300}") {
            let dir = tempfile::tempdir().unwrap();
            fs::write(dir.path().join(INDEX_NAME), &text).unwrap();
            let _ = read_index(dir.path());
            let _ = verify(dir.path(), None);
        }

        #[test]
        fn listed_paths_are_plain_or_refused(path in "[a-z_./]{0,30}") {
            let plain = is_plain_relative(&path);
            if plain {
                prop_assert!(!path.split('/').any(|part| part == ".." || part == ".") && !path.starts_with('/'));
            }
        }
    }
}
