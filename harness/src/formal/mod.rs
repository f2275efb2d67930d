//! The formal side: locating Java and the pinned TLA+ jar, and (trace
//! validation) following a run's protocol trace through the specification.
//!
//! Nothing here downloads: `gates/fetch-tools` is the only downloader. A check
//! or trial whose tools are missing is unavailable or ignored with the reason.

pub mod tlc;
pub mod tools;
pub mod trace;

pub use tools::{locate, FormalTools};

use crate::bundle::Bundle;
use crate::verify::{CheckResult, Status};

/// protocol.conformance on a bundle's traces.
pub fn validate_bundle_traces(_bundle: &Bundle, _tools: &FormalTools) -> CheckResult {
    CheckResult::new(
        "protocol.conformance",
        Status::Unavailable,
        "trace validation under TLC is not wired into this build yet",
    )
    .next("validate the run's traces with gates/formal-check --trace once it exists")
}
