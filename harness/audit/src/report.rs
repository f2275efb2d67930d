//! One audit's report: `clink-audit-report` version 1.
//!
//! It owns the document's shape: the audit's id, job, checkpoint and the
//! configuration's fingerprint, its outcome and every attempt with every
//! step (failed attempts stay), the scope's offsets per partition, the
//! findings by relationship, and the digests of the evidence files the
//! steps left. It never holds a credential: the configuration is named by
//! its fingerprint, and the children's argument lists are not copied in.

use serde_json::{json, Value as Json};

use crate::config::AuditConfig;
use crate::ledger::{AuditRecord, Ledger};
use crate::steps::AuditFiles;

pub const REPORT_FORMAT: &str = "clink-audit-report";

fn digest(path: &std::path::Path) -> Json {
    match clink_basics::digest::sha256_file(path, u64::MAX) {
        Ok(d) => json!({"bytes": d.bytes, "sha256": d.sha256}),
        Err(_) => Json::Null,
    }
}

/// The report of `rec`, as JSON text.
pub fn document(config: &AuditConfig, ledger: &Ledger, rec: &AuditRecord, files: &AuditFiles) -> String {
    let ranges: Vec<Json> = rec
        .ranges
        .iter()
        .map(|(p, r)| json!({"topic": p.topic, "partition": p.partition, "start": r.start(), "end": r.end()}))
        .collect();
    let doc = json!({
        "format": REPORT_FORMAT,
        "version": 1,
        "id": rec.id,
        "job": config.job.id,
        "checkpoint": rec.checkpoint,
        "checkpoint_marker_sha256": rec.marker_sha256,
        "lineage": rec.lineage,
        "configuration_fingerprint": ledger.fingerprint,
        "shape": ledger.shape,
        "completed_at_ms": rec.completed_ms,
        "outcome": rec.outcome,
        "counts_toward_coverage": rec.outcome.is_some_and(|o| o.counts_toward_coverage()),
        "next_attempt_due_s": rec.next_due_s,
        "since": rec.attempts.last().and_then(|a| a.since),
        "ranges": ranges,
        "findings": rec.findings,
        "attempts": rec.attempts,
        "evidence": {
            "directory": files.dir.strip_prefix(&config.state_dir).unwrap_or(&files.dir),
            "scope": digest(&files.scope),
            "reference": digest(&files.reference),
            "verify": digest(&files.verify),
            "reconcile": digest(&files.reconcile),
        },
    });
    serde_json::to_string_pretty(&doc).unwrap_or_default()
}
