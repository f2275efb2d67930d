//! clink-reconcile: `clink incident-reconcile` and `clink incident-scope`.
//!
//! Reconciliation answers one question offline verification cannot: does a
//! ClickHouse table hold exactly what one completed checkpoint owed it? The
//! scope ([`scope`]) comes from the bundle alone: the sink intervals the
//! checkpoint completed and the rows the sink recorded as its input there.
//! The destination is read on a connection the operator names, read-only
//! and bounded ([`read`]), twice, with its mutations before and after. Whole
//! rows are compared as multisets key by key under the canonical cells
//! ([`cells`], [`compare`]). With a reference artifact ([`artifact`]) the
//! audit compares three relationships apart: the reference with the sink's
//! input (the transformation), the sink's input with the table (the
//! delivery), the reference with the table; and for a windowed job, the
//! window rules, the recorded watermarks and finality ([`window`]).
//!
//! Everything decided on is read after the bundle's integrity checks through
//! [`evidence`]: by its exact bundle path, hashed as read against the
//! manifest, and held to what its path names (job, operator, uid, subtask,
//! epoch, checkpoint). The job graph is the one the audited checkpoint's
//! marker names. The reconciliation's steps live apart (the audit module:
//! options, destination identity, reads, delivery, reference, coverage), so
//! each rule has one place.
//!
//! This crate never writes to a destination, never connects anywhere but
//! the server it is handed, and never runs or loads anything a bundle or an
//! artifact names. Verdicts and exit codes are incident-verify's (0 passed,
//! 1 failed, 3 not established, 2 refused).
//!
//! ```no_run
//! use clink_reconcile::{reconcile, Options};
//! let bundle = clink_bundle::read_bundle(std::path::Path::new("incident-1")).expect("a bundle");
//! let endpoint = clink_connectors::clickhouse::Endpoint::parse("127.0.0.1:8123").expect("an address");
//! let report = reconcile(&bundle, &Options::new(12, endpoint), &mut clink_reconcile::Quiet).expect("not refused");
//! std::process::exit(report.exit_code.into());
//! ```

pub mod artifact;
pub mod cells;
pub mod compare;
pub mod evidence;
pub mod html;
pub mod read;
pub mod report;
pub mod scope;
pub mod scope_command;
pub mod shape;
pub mod window;

mod audit;

pub use audit::{reconcile, Coverage, Options, Quiet, ReconcileProgress, Refusal};
pub use report::{render_json, render_text, Report};
pub use scope::{Scope, ScopeError, ScopeKind, ScopeRequest};
