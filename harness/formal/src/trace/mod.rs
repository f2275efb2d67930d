//! Trace validation: a run's per-process protocol trace files read strictly
//! against the vocabulary (`formal/trace/events.txt`), merged into one job's
//! sequence of events, written as generated TLA+ modules of literals
//! (`TraceConstants.tla`, `TraceEvents.tla`; the format is formal/README.md's
//! "Generated trace modules"), and checked by TLC with the trace module.
//!
//! Reading refuses, never skips: a file whose `seq` does not run from 1 without
//! a gap in file order, whose `ts` does not strictly increase with it, whose
//! name or `proc` is not the engine's, or a line without `job`, of an unknown
//! event, missing a field, carrying a field the vocabulary does not list, or
//! of the wrong type, makes the whole trace malformed ([`Malformed`]). Merging
//! orders the files' lines by `ts`; two lines of one process never share a
//! stamp (one clock), and lines of different processes that do are reported as
//! ties.
//!
//! The modules are literals so TLC evaluates each event once: validation time
//! grows linearly with the trace's length.
//!
//! The parts, one module each: [`vocabulary`] (events.txt), reading files
//! (`read`), merging (`merge`), the generated modules (`modules`), and
//! validation with TLC (`validate`).

use thiserror::Error;

/// Traces of at most this many events are also checked against the
/// specification's correctness invariants (`TraceExactlyOnceChecked.cfg`).
pub const CHECKED_MAX_EVENTS: usize = 400;

/// A trace that cannot be read as the engine writes it: refused (exit 2), never
/// validated in part.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("malformed trace: {0}")]
pub struct Malformed(pub String);

impl From<Malformed> for String {
    fn from(m: Malformed) -> String {
        m.to_string()
    }
}

mod merge;
mod modules;
mod read;
mod validate;
pub mod vocabulary;

pub use merge::{merge, MergedTrace};
pub use modules::{
    constants, family, write_modules, ConstantsError, LiteralError, ModulesError, SinkFamily, TraceConstants,
};
pub use read::{check_line, coordinator_event, read_file, read_run, LineError, TraceLine};
pub use validate::{
    judge, out_of_scope, read_and_merge, validate_modules, validate_run, validate_trace, OutOfScope, Validation,
    ValidationError, Verdict,
};
pub use vocabulary::{
    field_type, parse_vocabulary, read_vocabulary, EventSpec, FieldType, Vocabulary, VocabularyError, VocabularyProblem,
};

#[cfg(test)]
mod tests;
