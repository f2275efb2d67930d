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

use std::fmt;
use std::io;
use std::path::PathBuf;

use thiserror::Error;

use super::durable::write_durably;
use super::layout::CheckpointLayout;

pub const LINEAGE_NAME: &str = "LINEAGE";

/// The text of a lineage id: this many lowercase hex digits.
const LINEAGE_HEX_DIGITS: usize = 32;

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

/// A lineage id: 32 lowercase hex digits, checked on every way in.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LineageId(String);

impl LineageId {
    /// The id written as `text`, if it is one.
    pub fn parse(text: &str) -> Option<LineageId> {
        let well_formed =
            text.len() == LINEAGE_HEX_DIGITS && text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        well_formed.then(|| LineageId(text.to_string()))
    }

    /// A new id, from the operating system's randomness.
    fn fresh() -> Result<LineageId, LineageError> {
        let mut bytes = [0u8; LINEAGE_HEX_DIGITS / 2];
        getrandom::fill(&mut bytes).map_err(|e| LineageError::Random(e.to_string()))?;
        Ok(LineageId(bytes.iter().map(|b| format!("{b:02x}")).collect()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for LineageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Which run this is: the lineage it continues and its incarnation of it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RunIdentity {
    pub lineage: LineageId,
    /// The fencing epoch this process took (1 for the lineage's first run).
    pub incarnation: u64,
}

impl fmt::Display for RunIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "lineage {} incarnation {}", self.lineage, self.incarnation)
    }
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
    let lineage = LineageId::fresh()?;
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
