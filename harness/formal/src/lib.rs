//! clink-formal: the TLC side of clink-rs.
//!
//! It locates Java and the TLA+ jar pinned in `formal/tools.env` ([`tools`]),
//! runs TLC and judges its verdicts by exit status and message together
//! ([`tlc`]), merges a run's per-process protocol traces and validates them
//! against the specification ([`trace`]), and enumerates the models, mutants
//! and recorded traces of the formal suite ([`suite`]), each model held to
//! the distinct states and depth pinned for it ([`pins`]).
//!
//! It never downloads (`gates/fetch-tools` is the only downloader), never
//! reads a bundle (the verifier hands it trace files), and never decides a
//! check's status: a caller whose tools are missing reports unavailable.
//!
//! ```no_run
//! let tools = clink_formal::locate(None, None).expect("java and the pinned jar");
//! let validation = clink_formal::trace::validate_run(&tools, std::path::Path::new("traces/happy-path"), None);
//! ```

pub mod pins;
pub mod suite;
pub mod tlc;
pub mod tools;
pub mod trace;

pub use tools::{locate, FormalTools};
