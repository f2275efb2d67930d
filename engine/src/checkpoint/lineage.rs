//! The identity of a run: which lineage of a job it continues, and which
//! incarnation of that lineage it is.
//!
//! A *lineage* is the history one checkpoint directory holds for a job: it
//! begins when a run finds the job's directory without one, and every run that
//! resumes over the same directory (after a kill, a stop or a failure)
//! continues it. Its id is 128 random bits, written once, durably, to
//! `_jobs/<job>/LINEAGE`, and never rewritten: a fresh checkpoint directory
//! (or one emptied by hand) starts a new lineage even when the job file, its
//! job id and its checkpoint numbers are the same as an earlier one's. An
//! *incarnation* is one process's run of the lineage: the fencing epoch it took
//! (`fence.rs`), one above the run before it.
//!
//! Anything that must not be confused with another run's (a destination's
//! deduplication token, a transactional id's owner, an artifact's writer)
//! names the lineage and, where a resend must stay recognisable only within
//! one process, the incarnation. This module only creates and reads the
//! record; it never decides what a foreign lineage means to a destination.

use std::io;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::durable::write_durably;
pub use super::identity::{LineageId, RunIdentity, LINEAGE_HEX_DIGITS};
use super::layout::CheckpointLayout;

pub const LINEAGE_NAME: &str = "LINEAGE";

#[derive(Debug, Error)]
pub enum LineageError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path}: {reason}")]
    Invalid { path: PathBuf, reason: String },
    #[error("no randomness for a new lineage id: {0}")]
    Random(String),
}

/// One run of the lineage, as it recorded itself when it took the
/// directory's lock (`_jobs/<job>/RUN-<incarnation>`): the process, and the
/// stamp its protocol trace files carry (`<pid>-<start>`, when tracing was
/// on), so a trace file is tied to the run that wrote it. Written once,
/// never rewritten, never pruned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunRecord {
    pub format: String,
    pub version: u64,
    pub job: String,
    pub run: RunIdentity,
    pub pid: u32,
    /// `<pid>-<start µs>` of the run's trace files; `None` when it traced nothing.
    pub trace: Option<String>,
    pub started_at_ms: u64,
}

pub const RUN_RECORD_FORMAT: &str = "clink-run-record";
pub const RUN_RECORD_VERSION: u64 = 1;
pub const RUN_RECORD_PREFIX: &str = "RUN-";
/// A run record larger than this is refused unread.
pub const MAX_RUN_RECORD_BYTES: u64 = 4096;

pub fn run_record_name(incarnation: u64) -> String {
    format!("{RUN_RECORD_PREFIX}{incarnation}")
}

/// The incarnation of a `RUN-<n>` name: the prefix and a canonical positive decimal.
pub fn parse_run_record_name(name: &str) -> Option<u64> {
    let n = clink_basics::ids::parse_decimal_u64(name.strip_prefix(RUN_RECORD_PREFIX)?)?;
    (n > 0).then_some(n)
}

impl RunRecord {
    /// This process's record of `run` of `job`.
    pub fn of_this_process(job: u64, run: RunIdentity, trace: Option<String>) -> Self {
        let started_at_ms =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        RunRecord {
            format: RUN_RECORD_FORMAT.into(),
            version: RUN_RECORD_VERSION,
            job: job.to_string(),
            run,
            pid: std::process::id(),
            trace,
            started_at_ms,
        }
    }
}

/// Writes a run's record, durably.
pub fn write_run_record(layout: &CheckpointLayout, record: &RunRecord) -> Result<(), LineageError> {
    let dir = layout.jobs_dir();
    let name = run_record_name(record.run.incarnation);
    let bytes = serde_json::to_vec_pretty(record)
        .map_err(|e| LineageError::Invalid { path: dir.join(&name), reason: e.to_string() })?;
    write_durably(&dir, &name, &bytes).map_err(|source| LineageError::Io { path: dir.join(&name), source })
}

/// Parses a run record's bytes (read from `path`) and checks that it names
/// `job` and the incarnation its name says, and a trace stamp of its own pid.
pub fn parse_run_record_bytes(
    path: &std::path::Path,
    bytes: &[u8],
    job: u64,
    incarnation: u64,
) -> Result<RunRecord, LineageError> {
    let invalid = |reason: String| LineageError::Invalid { path: path.to_path_buf(), reason };
    if bytes.len() as u64 > MAX_RUN_RECORD_BYTES {
        return Err(invalid(format!("{} bytes, over the limit of {MAX_RUN_RECORD_BYTES}", bytes.len())));
    }
    let record: RunRecord = serde_json::from_slice(bytes).map_err(|e| invalid(e.to_string()))?;
    if record.format != RUN_RECORD_FORMAT || record.version != RUN_RECORD_VERSION {
        return Err(invalid(format!("format {:?} version {}", record.format, record.version)));
    }
    if record.job != job.to_string() || record.run.incarnation != incarnation {
        return Err(invalid(format!(
            "names job {} incarnation {}; its path says job {job} incarnation {incarnation}",
            record.job, record.run.incarnation
        )));
    }
    if let Some(stamp) = &record.trace {
        let pid = stamp.split_once('-').map(|(pid, _)| pid);
        if pid != Some(record.pid.to_string().as_str()) {
            return Err(invalid(format!("its trace stamp {stamp:?} is not of its pid {}", record.pid)));
        }
    }
    Ok(record)
}

/// The lineage the job's directory records, if it records one.
pub fn read_lineage(layout: &CheckpointLayout) -> Result<Option<LineageId>, LineageError> {
    let path = layout.jobs_dir().join(LINEAGE_NAME);
    match clink_basics::files::read_bounded_text(&path, 128) {
        Ok(text) => LineageId::parse(text.trim_end_matches('\n')).map(Some).ok_or_else(|| LineageError::Invalid {
            path,
            reason: format!("{:?} is not a lineage id ({LINEAGE_HEX_DIGITS} lowercase hex digits)", text.trim()),
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(LineageError::Io { path, source }),
    }
}

/// The lineage the job's directory records, begun now (written durably) when
/// it records none. Only the run that holds the job's lock may call this.
pub fn continue_or_begin(layout: &CheckpointLayout) -> Result<LineageId, LineageError> {
    if let Some(lineage) = read_lineage(layout)? {
        return Ok(lineage);
    }
    let lineage = LineageId::fresh().map_err(LineageError::Random)?;
    let dir = layout.jobs_dir();
    write_durably(&dir, LINEAGE_NAME, format!("{lineage}\n").as_bytes())
        .map_err(|source| LineageError::Io { path: dir.join(LINEAGE_NAME), source })?;
    Ok(lineage)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_keeps_its_lineage_and_a_fresh_one_begins_another() {
        let dir = tempfile::tempdir().unwrap();
        let layout = CheckpointLayout::new(dir.path().join("a"), 7);
        std::fs::create_dir_all(layout.jobs_dir()).unwrap();
        assert_eq!(read_lineage(&layout).unwrap(), None);
        let first = continue_or_begin(&layout).unwrap();
        assert_eq!(continue_or_begin(&layout).unwrap(), first, "a resume continues the lineage");
        assert_eq!(read_lineage(&layout).unwrap(), Some(first.clone()));

        let other = CheckpointLayout::new(dir.path().join("b"), 7);
        std::fs::create_dir_all(other.jobs_dir()).unwrap();
        assert_ne!(continue_or_begin(&other).unwrap(), first, "the same job in a fresh directory: a new lineage");
    }

    #[test]
    fn a_record_that_is_not_a_lineage_id_is_refused_never_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let layout = CheckpointLayout::new(dir.path(), 7);
        std::fs::create_dir_all(layout.jobs_dir()).unwrap();
        for bad in ["", "xyz\n", "0123456789abcdef0123456789ABCDEF\n", "0123456789abcdef0123456789abcdef0\n"] {
            std::fs::write(layout.jobs_dir().join(LINEAGE_NAME), bad).unwrap();
            let err = continue_or_begin(&layout).unwrap_err();
            assert!(matches!(err, LineageError::Invalid { .. }), "{bad:?}: {err}");
            assert_eq!(std::fs::read_to_string(layout.jobs_dir().join(LINEAGE_NAME)).unwrap(), bad);
        }
    }

    #[test]
    fn ids_parse_only_in_their_one_form() {
        assert!(LineageId::parse("0123456789abcdef0123456789abcdef").is_some());
        assert!(LineageId::parse("0123456789abcdef0123456789abcde").is_none());
        assert!(LineageId::parse("0123456789abcdef0123456789abcdeg").is_none());
    }
}
