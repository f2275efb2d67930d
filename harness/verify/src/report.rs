//! The verification report: text for people, versioned JSON for machines.

use clink_basics::text::escape;

use super::{Conclusion, Report};

pub fn render_json(report: &Report) -> String {
    serde_json::to_string_pretty(report).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

pub fn render_text(report: &Report) -> String {
    let mut out = format!(
        "incident-verify: bundle {}: job {}, checkpoint {}, profile {}\n",
        escape(&report.bundle),
        escape(&report.job),
        report.checkpoint,
        report.profile.as_str()
    );
    if clink_engine::defects::COMPILED_IN {
        out.push_str(&format!(
            "  note: verified by a test build ({}): defect switches are compiled in\n",
            report.verifier
        ));
    }
    for check in &report.checks {
        out.push_str(&format!("  {:<12} {:<26} {}\n", check.status.as_str(), check.name, escape(&check.reason)));
        for e in &check.evidence {
            out.push_str(&format!("  {:<12} {:<26} {}\n", "", "", escape(e)));
        }
        for d in check.details.iter().take(8) {
            out.push_str(&format!("  {:<12} {:<26} - {}\n", "", "", escape(d)));
        }
        if check.details.len() > 8 {
            out.push_str(&format!("  {:<12} {:<26} - ... {} more (see --json)\n", "", "", check.details.len() - 8));
        }
        if !check.next_action.is_empty() {
            out.push_str(&format!("  {:<12} {:<26} next: {}\n", "", "", escape(&check.next_action)));
        }
    }
    let verdict = match report.result {
        Conclusion::Passed => "passed: every required check passed",
        Conclusion::Failed => "FAILED: a required check failed",
        Conclusion::Partial => {
            "PARTIAL: nothing failed, but a required check is unavailable or unsupported; this is not a pass"
        }
    };
    out.push_str(&format!("result: {verdict} (exit {})\n", report.exit_code));
    out
}
