//! What the operator asks a reconciliation for, and the combinations of it
//! that are refused before anything is read.

use std::path::PathBuf;

use clink_connectors::clickhouse::Endpoint;
use thiserror::Error;

use crate::read::Bounds;

/// A request the bundle, the destination or the artifact does not fit (exit 2).
#[derive(Debug, Error)]
#[error("{0}")]
pub struct Refusal(pub String);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coverage {
    /// Only the rows of the selected keys are read.
    SelectedKeys,
    /// The whole table is read and must hold exactly the expected rows.
    CompleteTable,
}

#[derive(Debug, Clone)]
pub struct Options {
    pub checkpoint: u64,
    /// The job the operator expects the bundle to be of.
    pub job: Option<u64>,
    pub key: Option<Vec<String>>,
    pub since: Option<u64>,
    pub from_run_start: bool,
    pub endpoint: Endpoint,
    /// The database and table the operator expects (they must be the evidence's).
    pub database: Option<String>,
    pub table: Option<String>,
    pub bounds: Bounds,
    pub reference: Option<PathBuf>,
    pub max_artifact_bytes: u64,
    pub coverage: Coverage,
    /// The operator's declaration that the table holds this one run's writes and nothing else.
    pub table_holds_only_this_run: bool,
    /// How many findings of each relationship the report lists.
    pub list: usize,
    /// Where to write the expected rows (the sink's recorded input over the
    /// scope) as canonical cells, one JSON object per line.
    pub expected_out: Option<PathBuf>,
}

impl Options {
    pub fn new(checkpoint: u64, endpoint: Endpoint) -> Options {
        Options {
            checkpoint,
            job: None,
            key: None,
            since: None,
            from_run_start: false,
            endpoint,
            database: None,
            table: None,
            bounds: Bounds::default(),
            reference: None,
            max_artifact_bytes: 1 << 30,
            coverage: Coverage::SelectedKeys,
            table_holds_only_this_run: false,
            list: 20,
            expected_out: None,
        }
    }

    /// Combinations no bundle could fit, refused before anything is read.
    pub fn refusal(&self) -> Option<Refusal> {
        if let Some(why) = crate::scope::conflicting_starts(self.since, self.from_run_start) {
            return Some(Refusal(why));
        }
        if self.coverage == Coverage::CompleteTable && self.since.is_some() {
            return Some(Refusal(
                "--coverage=complete-table is refused for an increment (--since): its scope does not span the run"
                    .into(),
            ));
        }
        None
    }

    /// Whether the audit needs the lineage whatever `--from-run-start` says:
    /// the whole table is compared with the run's whole output, and a
    /// windowed reference is computed from the job's start.
    pub fn needs_lineage(&self, windowed: bool) -> bool {
        self.coverage == Coverage::CompleteTable || (windowed && self.reference.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> Options {
        Options::new(4, Endpoint::parse("127.0.0.1:8123").unwrap())
    }

    #[test]
    fn two_starts_or_a_whole_table_of_an_increment_are_refused_before_reading() {
        let mut o = options();
        assert!(o.refusal().is_none());
        o.since = Some(2);
        assert!(o.refusal().is_none());
        o.from_run_start = true;
        let why = o.refusal().unwrap().0;
        assert!(why.contains("--since 2 and --from-run-start"), "{why}");
        o.from_run_start = false;
        o.coverage = Coverage::CompleteTable;
        assert!(o.refusal().unwrap().0.contains("complete-table is refused for an increment"));
    }
}
