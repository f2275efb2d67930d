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
pub mod html;
pub mod read;
pub mod report;
pub mod scope;
pub mod shape;
pub mod window;

mod audit;

pub use audit::{reconcile, Coverage, Options, Quiet, ReconcileProgress, Refusal};
pub use report::{render_json, render_text, Report};
pub use scope::{Scope, ScopeError, ScopeKind, ScopeRequest};

/// `incident-scope`: the scope document of a bundle's checkpoint.
pub mod scope_command {
    use clink_bundle::Bundle;
    use clink_verify::Status;
    use serde_json::Value as Json;

    use crate::scope::{Scope, ScopeError, ScopeKind, ScopeRequest};

    /// What incident-scope concluded.
    pub enum Outcome {
        /// The document, whole (exit 0).
        Whole(Json),
        /// The document, with evidence or positions not whole (exit 3).
        NotWhole(Json, Vec<String>),
        /// The job's shape is not supported: nothing is written (exit 3).
        Unsupported(String),
        /// The request does not fit the bundle (exit 2).
        Refused(String),
    }

    /// The scope document of `checkpoint`, from the bundle alone, its
    /// integrity checked first.
    pub fn scope_document(bundle: &Bundle, checkpoint: u64, since: Option<u64>, from_run_start: bool) -> Outcome {
        let failed: Vec<String> = clink_verify::integrity_checks(bundle)
            .into_iter()
            .filter(|c| c.status == Status::Failed)
            .map(|c| format!("{}: {}", c.name, c.reason))
            .collect();
        if !failed.is_empty() {
            return Outcome::Refused(format!("the bundle's integrity checks failed: {}", failed.join("; ")));
        }
        let graph = match bundle.job_graph() {
            Ok(g) => g.graph,
            Err(e) => return Outcome::Refused(format!("the bundle names no usable job graph: {e}")),
        };
        let shape = match crate::shape::shape(&graph) {
            Ok(s) => s,
            Err(why) => return Outcome::Unsupported(why.to_string()),
        };
        if let Some(why) = shape.unsupported() {
            return Outcome::Unsupported(why.to_string());
        }
        let kind = match (since, from_run_start || shape.windowed().is_some()) {
            (Some(base), _) if shape.windowed().is_none() => {
                return Outcome::Refused(format!(
                    "--since {base}: increments are for windowed jobs; a record-wise scope is one interval (or --from-run-start)"
                ))
            }
            (Some(base), _) => ScopeKind::Increment { base },
            (None, true) => ScopeKind::Lineage,
            (None, false) => ScopeKind::Interval,
        };
        match Scope::compute(bundle, ScopeRequest { checkpoint, kind }) {
            Ok(scope) => {
                let doc = scope.document();
                if scope.whole() {
                    Outcome::Whole(doc)
                } else {
                    Outcome::NotWhole(doc, scope.problems.clone())
                }
            }
            Err(ScopeError::Refused(why)) => Outcome::Refused(why),
            Err(ScopeError::Unsupported(why)) => Outcome::Unsupported(why),
        }
    }
}
