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
