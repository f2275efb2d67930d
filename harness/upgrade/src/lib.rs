//! clink-upgrade: can a candidate build read the state a baseline build
//! retained, restore the job from it and reproduce the checked results?
//!
//! `record` runs the baseline to the test definition's cut, takes a
//! savepoint while the job runs, exports it with the tools build and writes
//! an evidence set (`clink-upgrade-evidence` version 1) bound by the SHA-256
//! of its `evidence.json`. `check` verifies that set before anything runs,
//! restores each build from its own scratch copy, and answers each part of
//! the question in its own check (`clink-upgrade-report` version 1).
//!
//! Every build is a process started from the binary named on the command
//! line, bounded in time, memory and output; this crate links no engine
//! code and never runs anything an evidence set names. Logical state comes
//! from the tools build's `clink state-cat --json`; the expectation comes
//! from `clink_reference::upgrade`, which shares no code with any build.
//! Agreement between two builds is never taken as correctness.

pub mod check;
pub mod compare;
pub mod confine;
pub mod definition;
pub mod elf;
pub mod evidence;
pub mod html;
pub mod lease;
pub mod pin;
pub mod record;
pub mod report;
pub mod runner;
pub mod sealed;
pub mod steps;

use std::path::PathBuf;

/// Why a command is refused before anything is judged (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    #[error("{0}")]
    Bad(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A build: the `clink` binary that runs the job, and the job file it runs.
#[derive(Debug, Clone)]
pub struct Build {
    pub clink: PathBuf,
    pub job: PathBuf,
}

/// Bounds on every process a command starts.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// One process's wall time.
    pub run_timeout_s: u64,
    /// One process's resident memory.
    pub max_rss_mib: u64,
    /// Bytes written under the command's --out.
    pub max_output_mib: u64,
    /// The whole command.
    pub timeout_s: u64,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds { run_timeout_s: 120, max_rss_mib: 2048, max_output_mib: 1024, timeout_s: 600 }
    }
}
