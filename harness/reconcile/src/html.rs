//! `incident-reconcile --html`: the reconciliation report as a page of the
//! shared frame (clink-html): the verdict, every check, and the findings of
//! each relationship (what the scope expected against what was found) with
//! their first discrepancies, key by key.
//!
//! It draws what the report holds and decides nothing; everything from the
//! bundle, the destination or the artifact reaches the page as text, which
//! the frame escapes.

use clink_html::{Outcome, Page, Section, Table, Verdict};
use clink_verify::Conclusion;
use serde_json::Value as Json;

use crate::report::Report;

/// The page of a reconciliation report.
pub fn page(report: &Report) -> Page {
    let (outcome, summary) = match report.result {
        Conclusion::Passed => (Outcome::Passed, "the destination holds exactly what the checkpoint owed it"),
        Conclusion::Failed => (Outcome::Failed, "a required check failed"),
        Conclusion::Partial => {
            (Outcome::Partial, "nothing failed, but a required check is unavailable or unsupported; this is not a pass")
        }
    };
    let text = |v: &Json| match v {
        Json::String(s) => s.clone(),
        Json::Null => String::new(),
        other => other.to_string(),
    };
    let mut facts = vec![
        ("bundle".to_string(), report.bundle.clone()),
        ("job".to_string(), report.job.clone()),
        ("checkpoint".to_string(), report.checkpoint.to_string()),
        ("reconciler".to_string(), report.reconciler.clone()),
    ];
    if let Some(table) = report.destination.get("observed_table") {
        facts.push(("destination".into(), text(table)));
    }
    if let Some(scope) = report.scope.get("summary") {
        facts.push(("scope".into(), text(scope)));
    }
    if let Some(coverage) = report.coverage.get("summary").or(Some(&report.coverage)) {
        facts.push(("coverage".into(), text(coverage)));
    }
    Page {
        command: "clink incident-reconcile".into(),
        subject: format!("bundle {}, checkpoint {}", report.bundle, report.checkpoint),
        facts,
        verdict: Verdict { outcome, summary: summary.into(), exit_code: report.exit_code },
        checks: report.checks.iter().map(clink_verify::html::check).collect(),
        timeline: None,
        sections: sections(report),
    }
}

fn sections(report: &Report) -> Vec<Section> {
    let mut sections = vec![Section {
        anchor: None,
        folded: false,
        row_links: Vec::new(),
        title: "Findings by relationship".into(),
        paragraphs: vec![
            "Each relationship compares whole rows key by key as multisets; the first discrepancies of each are listed below it.".into(),
        ],
        table: Some(Table {
            header: ["relationship", "compares", "summary", "findings"].map(String::from).to_vec(),
            rows: report
                .findings
                .iter()
                .map(|f| vec![f.relationship.to_string(), f.compares.to_string(), f.summary.clone(), f.count.to_string()])
                .collect(),
            marked: Vec::new(),
        }),
    }];
    for f in report.findings.iter().filter(|f| !f.first.is_empty()) {
        sections.push(Section {
            anchor: None,
            folded: false,
            row_links: Vec::new(),
            title: format!("Discrepancies: {} ({})", f.relationship, f.compares),
            paragraphs: vec![format!("{} findings; the first {}:", f.count, f.first.len())],
            table: Some(Table {
                header: vec!["finding".into()],
                rows: f.first.iter().map(|l| vec![l.clone()]).collect(),
                marked: Vec::new(),
            }),
        });
    }
    if !report.assumptions.is_empty() {
        sections.push(Section {
            anchor: None,
            folded: false,
            row_links: Vec::new(),
            title: "Assumptions".into(),
            paragraphs: report.assumptions.clone(),
            table: None,
        });
    }
    sections
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Findings, Observation};
    use clink_verify::{CheckResult, Status};
    use serde_json::json;

    fn report() -> Report {
        Report {
            format: "clink-reconcile-report",
            version: 1,
            reconciler: "clink 0.1.0".into(),
            bundle: "incident-<script>alert(1)</script>".into(),
            job: "21".into(),
            checkpoint: 3,
            observation: Observation::default(),
            scope: json!({"summary": "interval 3"}),
            destination: json!({"observed_table": "default.credits\"><b>"}),
            method: json!({}),
            assumptions: vec!["the table holds only this run".into()],
            mutations: json!({}),
            reference: json!(null),
            coverage: json!({"summary": "the keys of the scope"}),
            checks: vec![CheckResult::new("reconcile.rows", Status::Failed, "2 rows missing")],
            findings: vec![Findings {
                relationship: "delivery",
                compares: "the sink's input with the table",
                summary: "2 missing".into(),
                count: 2,
                first: vec!["missing key [\"<img src=x>\"]".into()],
            }],
            result: Conclusion::Failed,
            exit_code: 1,
        }
    }

    #[test]
    fn the_page_holds_the_verdict_the_checks_and_each_relationships_discrepancies_as_text() {
        let html = clink_html::render(&page(&report()));
        assert!(html.contains("reconcile.rows"));
        assert!(html.contains("Discrepancies: delivery"));
        assert!(html.contains("2 rows missing"));
        // Evidence never becomes markup.
        for hostile in ["<script>alert(1)", "<img src=x>", "\"><b>"] {
            assert!(!html.contains(hostile), "{hostile} reached the page unescaped");
        }
        assert!(html.contains("&lt;img src=x&gt;"));
    }
}
