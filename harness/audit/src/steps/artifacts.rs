//! The files a step's child wrote, read back for what the runner records
//! beside a verdict: the scope's shape and ranges, the reference
//! artifact's header, end line and row count, the offsets an audit spans.
//!
//! Every read is bounded, and a file that cannot be read gives no fact
//! (never a default one).

use std::io::{BufRead, Read, Seek, SeekFrom};
use std::path::Path;

use serde_json::Value as Json;

use super::field;
use crate::coverage::{OffsetRange, Partition};
use crate::ledger::Shape;

/// The first line of a file, as JSON (the artifact's header), read bounded.
pub(super) fn first_line(path: &Path) -> Option<Json> {
    let file = std::fs::File::open(path).ok()?;
    let mut line = String::new();
    std::io::BufReader::new(file.take(16 << 20)).read_line(&mut line).ok()?;
    serde_json::from_str(&line).ok()
}

/// The last line of a file, as JSON (the artifact's end line).
pub(super) fn last_line(path: &Path) -> Option<Json> {
    let mut file = std::fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    let start = len.saturating_sub(1 << 20);
    file.seek(SeekFrom::Start(start)).ok()?;
    let mut tail = String::new();
    file.read_to_string(&mut tail).ok()?;
    serde_json::from_str(tail.trim_end().rsplit('\n').next()?).ok()
}

/// The rows the reference artifact's end line counts.
pub fn reference_rows(path: &Path) -> Option<u64> {
    let end = last_line(path)?;
    (field(&end, "type") == Some("end")).then(|| end.get("rows").and_then(Json::as_u64)).flatten()
}

/// What the scope says: the shape, and per topic and partition its range.
pub struct ScopeFacts {
    /// Per topic and partition: where the scope starts (none: at the run's
    /// start, which checkpoints do not record) and where it ends.
    pub shape: Shape,
    /// The scope spans the run from its start (a windowed lineage, or a record-wise `--from-run-start`).
    pub from_run_start: bool,
    pub ranges: Vec<(Partition, Option<u64>, u64)>,
}

/// Reads the scope the scope step wrote.
pub fn scope_facts(path: &Path) -> Result<ScopeFacts, String> {
    let bytes = clink_basics::files::read_bounded(path, 64 << 20).map_err(|e| format!("{}: {e}", path.display()))?;
    let scope: Json = serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    let shape = match scope.get("version").and_then(Json::as_u64) {
        Some(1) => Shape::RecordWise,
        Some(2 | 3) => Shape::Windowed,
        other => return Err(format!("{}: scope version {other:?}", path.display())),
    };
    let from_run_start = shape == Shape::Windowed && scope.get("version").and_then(Json::as_u64) == Some(2)
        || scope.get("from_run_start").and_then(Json::as_bool) == Some(true);
    let mut ranges = Vec::new();
    for source in scope.get("sources").and_then(Json::as_array).into_iter().flatten() {
        let topic = field(source, "topic").ok_or("a scope source without a topic")?.to_string();
        for p in source.get("partitions").and_then(Json::as_array).into_iter().flatten() {
            let num = |k: &str| p.get(k).and_then(Json::as_u64);
            let (Some(partition), Some(to)) = (num("partition"), num("to")) else {
                return Err(format!("{}: a partition without partition and to", path.display()));
            };
            ranges.push((Partition { topic: topic.clone(), partition: partition as u32 }, num("from"), to));
        }
    }
    Ok(ScopeFacts { shape, from_run_start, ranges })
}

/// The offsets an audit spans, per topic and partition: the scope's, with a
/// start at the run's start taken from the reference's own reading of the
/// log (its end line's `recorded.ranges`), never guessed.
pub fn spanned(scope: &Path, reference: &Path) -> Result<Vec<(Partition, OffsetRange)>, String> {
    let facts = scope_facts(scope)?;
    let read = last_line(reference);
    let started = |partition: u32| -> Option<u64> {
        read.as_ref()?.pointer("/recorded/ranges")?.as_array()?.iter().find_map(|r| {
            (r.get("partition")?.as_u64()? == u64::from(partition)).then(|| r.get("from")?.as_u64()).flatten()
        })
    };
    facts
        .ranges
        .into_iter()
        .map(|(p, from, to)| {
            let from = from.or_else(|| started(p.partition)).ok_or_else(|| {
                format!(
                    "partition {} of {} starts at the run's start and the reference read no start",
                    p.partition, p.topic
                )
            })?;
            Ok((p, OffsetRange::new(from, to).map_err(|e| e.to_string())?))
        })
        .collect()
}

/// The largest bundle manifest read (one entry per file, at most
/// `bounds.bundle_files` of them).
const MAX_MANIFEST_BYTES: u64 = 256 << 20;

/// The SHA-256 the collected bundle's manifest vouches for as checkpoint
/// `checkpoint`'s COMPLETED marker of job `job`, found by its whole path in
/// the bundle (`checkpoint/_jobs/<job>/COMPLETED-<n>`, the collector's
/// layout; incident-verify then checks the bytes against it). A manifest
/// that cannot be read, or that lists no such marker, gives no hash.
pub fn collected_marker_sha256(bundle: &Path, job: &str, checkpoint: u64) -> Result<String, String> {
    let path = bundle.join("manifest.json");
    let bytes =
        clink_basics::files::read_bounded(&path, MAX_MANIFEST_BYTES).map_err(|e| format!("{}: {e}", path.display()))?;
    let manifest: Json = serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    let marker = format!("checkpoint/_jobs/{job}/COMPLETED-{checkpoint}");
    let artifacts = manifest
        .get("artifacts")
        .and_then(Json::as_array)
        .ok_or_else(|| format!("{}: no artifacts list", path.display()))?;
    let listed: Vec<&Json> = artifacts.iter().filter(|a| field(a, "path") == Some(marker.as_str())).collect();
    match listed.as_slice() {
        [one] => field(one, "sha256")
            .map(str::to_string)
            .ok_or_else(|| format!("{}: {marker} has no sha256", path.display())),
        [] => Err(format!("{}: lists no {marker}", path.display())),
        _ => Err(format!("{}: lists {marker} {} times", path.display(), listed.len())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bundle(artifacts: Json) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let manifest = serde_json::json!({"format": "clink-incident-bundle", "artifacts": artifacts});
        std::fs::write(dir.path().join("manifest.json"), manifest.to_string()).unwrap();
        dir
    }

    #[test]
    fn the_collected_marker_is_found_by_its_whole_path_only() {
        let marker =
            |path: &str, sha: &str| serde_json::json!({"path": path, "role": "completed_marker", "sha256": sha});
        let b = bundle(serde_json::json!([
            marker("checkpoint/_jobs/9/COMPLETED-3", "aa"),
            marker("checkpoint/_jobs/9/COMPLETED-31", "bb"),
            marker("checkpoint/_jobs/19/COMPLETED-3", "cc"),
        ]));
        assert_eq!(collected_marker_sha256(b.path(), "9", 3).unwrap(), "aa");
        assert_eq!(collected_marker_sha256(b.path(), "19", 3).unwrap(), "cc");
        assert!(collected_marker_sha256(b.path(), "9", 4)
            .unwrap_err()
            .contains("lists no checkpoint/_jobs/9/COMPLETED-4"));
        let twice = bundle(serde_json::json!([
            marker("checkpoint/_jobs/9/COMPLETED-3", "aa"),
            marker("checkpoint/_jobs/9/COMPLETED-3", "aa")
        ]));
        assert!(collected_marker_sha256(twice.path(), "9", 3).unwrap_err().contains("2 times"));
        let none = tempfile::tempdir().unwrap();
        assert!(collected_marker_sha256(none.path(), "9", 3).is_err(), "no manifest is no hash");
    }
}
