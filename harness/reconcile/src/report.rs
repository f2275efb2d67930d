//! The reconciliation report (`clink-reconcile-report`, version 1): the
//! observation's times on both clocks, the scope with its source ranges and
//! each interval's INSERT ledger, the destination as recorded and as
//! observed, the method, the assumptions, the table's mutations, every
//! check, the findings by relationship, and the coverage. Text for people,
//! JSON for scripts.

use clink_verify::{CheckResult, Conclusion, Status};
use serde::Serialize;
use serde_json::Value as Json;

pub const REPORT_FORMAT: &str = "clink-reconcile-report";
pub const REPORT_VERSION: u64 = 1;

/// When the observation was made, by this machine's clock and by the server's.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Observation {
    pub started_at_ms: u64,
    pub finished_at_ms: u64,
    pub server_time_before_s: Option<i64>,
    pub server_time_after_s: Option<i64>,
    pub elapsed_ms: u64,
}

/// Findings of one relationship: how many, and the first few.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Findings {
    pub relationship: &'static str,
    pub compares: &'static str,
    pub summary: String,
    pub count: usize,
    pub first: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub format: &'static str,
    pub version: u64,
    pub reconciler: String,
    pub bundle: String,
    pub job: String,
    pub checkpoint: u64,
    pub observation: Observation,
    pub scope: Json,
    pub destination: Json,
    pub method: Json,
    pub assumptions: Vec<String>,
    pub mutations: Json,
    pub reference: Json,
    pub coverage: Json,
    pub checks: Vec<CheckResult>,
    pub findings: Vec<Findings>,
    pub result: Conclusion,
    pub exit_code: u8,
}

impl Report {
    pub fn check(&self, name: &str) -> Option<&CheckResult> {
        self.checks.iter().find(|c| c.name == name)
    }
}

/// The conclusion of a list of checks: failed wins, then partial.
pub fn conclude(checks: &[CheckResult]) -> Conclusion {
    if checks.iter().any(|c| c.status == Status::Failed) {
        Conclusion::Failed
    } else if !checks.is_empty() && checks.iter().all(|c| c.status == Status::Passed) {
        Conclusion::Passed
    } else {
        Conclusion::Partial
    }
}

pub fn render_json(report: &Report) -> String {
    serde_json::to_string_pretty(report).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

pub fn render_text(report: &Report) -> String {
    use std::fmt::Write;
    let esc = |s: &str| clink_basics::text::escape(s);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "clink incident-reconcile: bundle {} job {} checkpoint {}",
        esc(&report.bundle),
        report.job,
        report.checkpoint
    );
    if let Some(d) = report.destination.get("observed_table") {
        let _ = writeln!(out, "destination: {}", esc(d.as_str().unwrap_or_default()));
    }
    if let Some(s) = report.scope.get("summary").and_then(Json::as_str) {
        let _ = writeln!(out, "scope: {}", esc(s));
    }
    for c in &report.checks {
        let _ = writeln!(out, "{:<24} {:<11} {}", c.name, c.status.as_str(), esc(&c.reason));
        for e in &c.evidence {
            let _ = writeln!(out, "    evidence: {}", esc(e));
        }
        for d in c.details.iter().take(20) {
            let _ = writeln!(out, "    {}", esc(d));
        }
        if !c.next_action.is_empty() && c.status != Status::Passed {
            let _ = writeln!(out, "    next: {}", esc(&c.next_action));
        }
    }
    for f in report.findings.iter().filter(|f| f.count > 0) {
        let _ = writeln!(out, "findings ({}: {}): {}", f.relationship, f.compares, esc(&f.summary));
        for line in &f.first {
            let _ = writeln!(out, "    {}", esc(line));
        }
    }
    if let Some(c) = report.coverage.get("statement").and_then(Json::as_str) {
        let _ = writeln!(out, "coverage: {}", esc(c));
    }
    let _ = writeln!(
        out,
        "result: {} (exit {})",
        match report.result {
            Conclusion::Passed => "passed",
            Conclusion::Failed => "failed",
            Conclusion::Partial => "partial: not established",
        },
        report.exit_code
    );
    out
}
