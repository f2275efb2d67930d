//! `incident-scope`: the scope document of a bundle's checkpoint, from the
//! bundle alone, its integrity checked first.

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

/// The scope document of `checkpoint`. A windowed job's scope is its
/// lineage (or an increment of it with `since`); a record-wise job's is one
/// interval, or the run from its start.
pub fn scope_document(bundle: &Bundle, checkpoint: u64, since: Option<u64>, from_run_start: bool) -> Outcome {
    if let Some(why) = crate::scope::conflicting_starts(since, from_run_start) {
        return Outcome::Refused(why);
    }
    let failed: Vec<String> = clink_verify::integrity_checks(bundle)
        .into_iter()
        .filter(|c| c.status == Status::Failed)
        .map(|c| format!("{}: {}", c.name, c.reason))
        .collect();
    if !failed.is_empty() {
        return Outcome::Refused(format!("the bundle's integrity checks failed: {}", failed.join("; ")));
    }
    if let Err(e) = clink_verify::claims_hold(bundle) {
        return Outcome::Refused(e.0);
    }
    // Where the graph does not read or is not a shape the audit knows,
    // Scope::compute says why, by name.
    let shape = crate::scope::shape_at(bundle, checkpoint);
    if let Some(why) = shape.as_ref().and_then(|s| s.unsupported()) {
        return Outcome::Unsupported(why.to_string());
    }
    let windowed = shape.is_some_and(|s| s.windowed().is_some());
    match ScopeKind::requested(since, from_run_start, windowed, windowed) {
        Ok(kind) => scope_of(bundle, checkpoint, kind),
        Err(why) => Outcome::Refused(why),
    }
}

fn scope_of(bundle: &Bundle, checkpoint: u64, kind: ScopeKind) -> Outcome {
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
