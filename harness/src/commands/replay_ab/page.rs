//! The A/B report three ways: JSON (`clink-replay-ab` version 1) for gates,
//! text for people at a terminal, and a page of the shared report frame
//! with a row per epoch and each divergence's emissions side by side.
//!
//! It draws what the run found and decides nothing; the frame escapes every
//! string, so no row a build emitted becomes markup.

use clink_basics::exit::Exit;
use clink_basics::text::count;
use clink_html::{Outcome, Page, Section, Table, Verdict};
use serde_json::{json, Value as Json};

use super::{row_text, EpochResult, Report, Status};

/// The counts per status, in a fixed order.
fn totals(results: &[EpochResult]) -> Vec<(&'static str, usize)> {
    let names =
        ["identical", "diverged", "missing-capability", "candidate-failed", "unsupported", "unavailable", "refused"];
    names.iter().map(|n| (*n, results.iter().filter(|r| r.status.name() == *n).count())).collect()
}

fn epoch_json(r: &EpochResult) -> Json {
    let mut doc = json!({
        "operator": r.at.operator.to_string(), "subtask": r.at.subtask, "epoch": r.at.epoch,
        "operator_type": r.operator_type, "status": r.status.name(),
    });
    match &r.status {
        Status::Identical { emissions } => doc["emissions"] = json!({"this": emissions, "candidate": emissions}),
        Status::Diverged { index, ours, theirs, counts } => {
            doc["emissions"] = json!({"this": counts.0, "candidate": counts.1});
            doc["first_difference"] = json!({
                "index": index,
                "this": ours.first(), "candidate": theirs.first(),
            });
            doc["from_first_difference"] = json!({"this": ours, "candidate": theirs});
        }
        Status::MissingCapability(names) => doc["missing"] = json!(names),
        Status::Candidate(why) | Status::Unsupported(why) | Status::Unavailable(why) | Status::Refused(why) => {
            doc["reason"] = json!(why)
        }
    }
    doc
}

pub(super) fn json(report: &Report, exit: Exit) -> Json {
    json!({
        "format": "clink-replay-ab", "version": 1,
        "this_build": clink_engine::defects::build_description(),
        "candidate": report.candidate,
        "capabilities_error": report.capabilities.as_ref().err(),
        "isolation": report.isolation,
        "job": report.job, "evidence": report.evidence,
        "epochs": report.results.iter().map(epoch_json).collect::<Vec<_>>(),
        "totals": totals(&report.results).into_iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "selected": report.results.len(),
        "seconds": report.seconds,
        "exit_code": exit.code(),
    })
}

/// One line per epoch that is not identical, then the totals.
pub(super) fn text(report: &Report) -> String {
    let mut lines = Vec::new();
    if let Err(why) = &report.capabilities {
        lines.push(format!("the candidate declares nothing: {why}"));
    }
    for r in &report.results {
        let at = &r.at;
        match &r.status {
            // Counted in the totals; a line each would bury the findings.
            Status::Identical { .. } | Status::Unsupported(_) => {}
            Status::Diverged { index, ours, theirs, counts } => lines.push(format!(
                "{at} ({}): DIVERGED at emission {index}: this build {} vs candidate {} ({} vs {} emissions)",
                r.operator_type,
                ours.first().map_or("(no emission)".into(), |c| row_text(c)),
                theirs.first().map_or("(no emission)".into(), |c| row_text(c)),
                counts.0,
                counts.1
            )),
            Status::MissingCapability(names) => {
                lines.push(format!("{at}: refused: the candidate does not declare {}", names.join(", ")))
            }
            other => lines.push(format!("{at}: {}: {}", other.name(), reason(other))),
        }
    }
    let shown: Vec<String> =
        totals(&report.results).into_iter().filter(|(_, n)| *n > 0).map(|(name, n)| format!("{n} {name}")).collect();
    lines.push(format!(
        "A/B against {}: {} epochs selected: {} ({:.1} s)",
        report.candidate["path"].as_str().unwrap_or("?"),
        report.results.len(),
        shown.join(", "),
        report.seconds
    ));
    lines.join("\n")
}

fn reason(status: &Status) -> String {
    match status {
        Status::Identical { emissions } => format!("{emissions} emissions, byte for byte"),
        Status::Diverged { index, .. } => format!("first difference at emission {index}"),
        Status::MissingCapability(names) => format!("the candidate does not declare {}", names.join(", ")),
        Status::Candidate(why) | Status::Unsupported(why) | Status::Unavailable(why) | Status::Refused(why) => {
            why.clone()
        }
    }
}

/// Every file of code the candidate ran with, as one fact: how many, and their one hash.
fn code_fact(candidate: &Json) -> String {
    let files = candidate["code"].as_array().map_or(0, Vec::len);
    let sha = candidate["code_sha256"].as_str().unwrap_or("?");
    format!("{} (the binary, its loader and libraries): SHA-256 {sha} over all", count(files, "file", "files"))
}

pub(super) fn html(report: &Report, exit: Exit) -> String {
    let (outcome, summary) = match exit {
        Exit::Passed => (Outcome::Passed, "every selected epoch emitted the same rows on both builds"),
        Exit::Failed => {
            (Outcome::Failed, "the builds' emissions differ; each divergence is shown from its first difference")
        }
        Exit::Refused => (Outcome::Failed, "some evidence is malformed and was refused"),
        _ => (Outcome::Partial, "not every epoch could be compared; this is not a pass"),
    };
    let mut sections = vec![totals_section(&report.results)];
    let divergences = report.results.iter().filter_map(divergence_section);
    sections.extend(divergences.enumerate().map(|(k, s)| Section { anchor: Some(divergence_anchor(k + 1)), ..s }));
    sections.extend(not_compared_section(&report.results));
    sections.push(epochs_section(&report.results));
    let page = Page {
        command: "clink replay ab".into(),
        subject: format!("candidate {}", report.candidate["path"].as_str().unwrap_or("?")),
        facts: vec![
            ("this build".into(), clink_engine::defects::build_description().to_string()),
            ("candidate build".into(), report.candidate["build"].as_str().unwrap_or("(undeclared)").to_string()),
            ("candidate sha256".into(), report.candidate["sha256"].as_str().unwrap_or("?").to_string()),
            ("candidate code".into(), code_fact(&report.candidate)),
            ("job".into(), report.job.to_string()),
            ("evidence".into(), report.evidence.clone()),
            ("candidate isolation".into(), isolation_fact(&report.isolation)),
        ],
        verdict: Verdict { outcome, summary: summary.into(), exit_code: exit.code() },
        // The isolation proof is a precondition, not a finding: shown among
        // the facts, so no "passed" tally stands beside a failed verdict.
        checks: Vec::new(),
        timeline: None,
        sections,
    };
    clink_html::render(&page)
}

fn isolation_fact(proof: &Json) -> String {
    let result = proof["result"].as_str().unwrap_or("not proven");
    match proof["reason"].as_str().filter(|r| !r.is_empty()) {
        Some(reason) => format!("{result}: {reason}"),
        None => result.to_string(),
    }
}

/// The sections' anchors, the page's own names.
const NOT_COMPARED: &str = "not-compared";
const EVERY_EPOCH: &str = "every-epoch";

fn divergence_anchor(k: usize) -> String {
    format!("divergence-{k}")
}

/// Where a total's row leads: the first divergence, the epochs not
/// compared, or (identical) the list of every epoch.
fn total_anchor(name: &str) -> String {
    match name {
        "identical" => EVERY_EPOCH.into(),
        "diverged" => divergence_anchor(1),
        _ => NOT_COMPARED.into(),
    }
}

/// The page opens on these: how many epochs ended each way, each a link to
/// where those epochs are shown.
fn totals_section(results: &[EpochResult]) -> Section {
    let shown: Vec<(&str, usize)> = totals(results).into_iter().filter(|(_, n)| *n > 0).collect();
    let rows = shown.iter().map(|(name, n)| vec![name.to_string(), n.to_string()]);
    Section {
        anchor: None,
        folded: false,
        row_links: shown.iter().enumerate().map(|(i, (name, _))| (i, total_anchor(name))).collect(),
        title: "Totals".into(),
        paragraphs: vec![format!(
            "{} selected. Divergences follow, each from its first difference; then the epochs not compared, by reason; then every epoch.",
            count(results.len(), "epoch", "epochs")
        )],
        table: Some(Table { header: vec!["result".into(), "epochs".into()], rows: rows.collect(), marked: Vec::new() }),
    }
}

/// Epochs listed in a cell at most; the rest are counted.
const EPOCHS_NAMED: usize = 12;

/// The epochs that were not compared, one row per result and reason, with
/// how many share it and which (the first few named).
fn not_compared_section(results: &[EpochResult]) -> Option<Section> {
    let mut groups: std::collections::BTreeMap<(&str, String), Vec<String>> = Default::default();
    for r in results.iter().filter(|r| !matches!(r.status, Status::Identical { .. } | Status::Diverged { .. })) {
        groups.entry((r.status.name(), reason(&r.status))).or_default().push(r.at.to_string());
    }
    if groups.is_empty() {
        return None;
    }
    let rows = groups
        .into_iter()
        .map(|((name, why), epochs)| {
            let mut named = epochs.iter().take(EPOCHS_NAMED).cloned().collect::<Vec<_>>().join("; ");
            if epochs.len() > EPOCHS_NAMED {
                named.push_str(&format!("; and {} more", epochs.len() - EPOCHS_NAMED));
            }
            vec![name.to_string(), why, epochs.len().to_string(), named]
        })
        .collect();
    Some(Section {
        anchor: Some(NOT_COMPARED.into()),
        folded: true,
        row_links: Vec::new(),
        title: "Not compared, by reason".into(),
        paragraphs: vec!["Each reason once, with the epochs it kept from the comparison.".into()],
        table: Some(Table {
            header: ["result", "reason", "epochs", "which"].map(String::from).to_vec(),
            rows,
            marked: Vec::new(),
        }),
    })
}

fn epochs_section(results: &[EpochResult]) -> Section {
    let rows = results
        .iter()
        .map(|r| {
            vec![
                r.at.operator.to_string(),
                r.at.subtask.to_string(),
                r.at.epoch.to_string(),
                r.operator_type.clone(),
                r.status.name().to_string(),
                reason(&r.status),
            ]
        })
        .collect();
    Section {
        anchor: Some(EVERY_EPOCH.into()),
        folded: true,
        row_links: Vec::new(),
        title: "Every epoch".into(),
        paragraphs: Vec::new(),
        table: Some(Table {
            header: ["operator", "subtask", "epoch", "type", "result", "detail"].map(String::from).to_vec(),
            rows,
            marked: Vec::new(),
        }),
    }
}

/// A typed cell (`Timestamp(17)`) split into its type and its text, so a
/// column of one type can name it once in its header.
fn split_typed(cell: &str) -> (&str, &str) {
    match cell.split_once('(') {
        Some((kind, rest)) if rest.ends_with(')') => (kind, &rest[..rest.len() - 1]),
        _ => ("", cell),
    }
}

/// The type every cell of column `c` has on both sides, when there is one.
fn column_type<'a>(ours: &'a [Vec<String>], theirs: &'a [Vec<String>], c: usize) -> Option<&'a str> {
    let mut kinds = ours.iter().chain(theirs.iter()).filter_map(|r| r.get(c)).map(|v| split_typed(v).0);
    let first = kinds.next()?;
    (!first.is_empty() && kinds.all(|k| k == first)).then_some(first)
}

/// Both builds' emissions side by side from the first difference: a row per
/// emission index, this build's cells then the candidate's, each cell that
/// differs from its counterpart marked. A column of one type names it in its
/// header and its cells show the values alone.
fn divergence_section(r: &EpochResult) -> Option<Section> {
    let Status::Diverged { index, ours, theirs, counts } = &r.status else { return None };
    let width = ours.iter().chain(theirs.iter()).map(Vec::len).max().unwrap_or(0);
    let types: Vec<Option<&str>> = (0..width).map(|c| column_type(ours, theirs, c)).collect();
    let mut header = vec!["emission #".to_string()];
    for side in ["this build", "candidate build"] {
        header.extend(types.iter().enumerate().map(|(c, t)| match t {
            Some(t) => format!("{side}: column {c} ({t})"),
            None => format!("{side}: column {c}"),
        }));
    }
    let mut rows = Vec::new();
    let mut marked = Vec::new();
    for i in 0..ours.len().max(theirs.len()) {
        let (a, b) = (ours.get(i), theirs.get(i));
        let mut row = vec![(index + i).to_string()];
        for (side, cells) in [a, b].into_iter().enumerate() {
            for (c, kind) in types.iter().enumerate() {
                let cell = cells.and_then(|cs| cs.get(c));
                let other = [b, a][side].and_then(|cs| cs.get(c));
                if cell != other {
                    marked.push((i, 1 + side * width + c));
                }
                row.push(match (cells, cell) {
                    (None, _) => "(no emission)".into(),
                    (Some(_), None) => String::new(),
                    (Some(_), Some(v)) if kind.is_some() => split_typed(v).1.to_string(),
                    (Some(_), Some(v)) => v.clone(),
                });
            }
        }
        rows.push(row);
    }
    Some(Section {
        anchor: None,
        folded: false,
        row_links: Vec::new(),
        title: format!("Divergence: {} ({})", r.at, r.operator_type),
        paragraphs: vec![format!(
            "The builds agree on the first {index} emissions. This build emitted {}, the candidate {}; below, the next {} of each from the first difference, differing cells marked \u{25B6}.",
            counts.0,
            counts.1,
            ours.len().max(theirs.len())
        )],
        table: Some(Table { header, rows, marked }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clink_basics::ids::OperatorId;
    use clink_replay::EpochRef;

    use super::super::tests::result;

    fn row(cells: &[&str]) -> Vec<String> {
        cells.iter().map(|c| c.to_string()).collect()
    }

    #[test]
    fn a_divergence_marks_exactly_the_cells_that_differ_on_both_sides() {
        let r = EpochResult {
            at: EpochRef { operator: OperatorId(3), subtask: 0, epoch: 2 },
            operator_type: "tumbling_window".into(),
            status: Status::Diverged {
                index: 7,
                ours: vec![row(&["Str(\"a\")", "Int(10)"]), row(&["Str(\"b\")", "Null"])],
                theirs: vec![row(&["Str(\"a\")", "Int(9)"])],
                counts: (9, 8),
            },
        };
        let section = divergence_section(&r).unwrap();
        let table = section.table.unwrap();
        // Column 0 is all Str, so its header names the type; column 1 mixes Int and Null.
        assert_eq!(
            table.header,
            [
                "emission #",
                "this build: column 0 (Str)",
                "this build: column 1",
                "candidate build: column 0 (Str)",
                "candidate build: column 1"
            ]
        );
        assert_eq!(table.rows[0], ["7", "\"a\"", "Int(10)", "\"a\"", "Int(9)"]);
        assert_eq!(table.rows[1], ["8", "\"b\"", "Null", "(no emission)", "(no emission)"]);
        // Row 0: column 1 differs (10 vs 9) on both sides; row 1: everything, against no emission.
        assert_eq!(table.marked, vec![(0, 2), (0, 4), (1, 1), (1, 2), (1, 3), (1, 4)]);
        let identical = EpochResult { status: Status::Identical { emissions: 3 }, ..r };
        assert!(divergence_section(&identical).is_none());
    }

    #[test]
    fn every_total_links_to_a_section_the_page_has() {
        let diverged =
            Status::Diverged { index: 0, ours: vec![row(&["Int(1)"])], theirs: vec![row(&["Int(2)"])], counts: (1, 1) };
        let results = vec![
            result(1, Status::Identical { emissions: 3 }),
            result(2, diverged.clone()),
            result(3, diverged),
            result(4, Status::Unavailable("its starting checkpoint was pruned".into())),
            result(5, Status::Unsupported("a sink".into())),
        ];
        let totals = totals_section(&results);
        let rows = totals.table.as_ref().unwrap().rows.clone();
        assert_eq!(
            rows.iter().map(|r| r[0].as_str()).collect::<Vec<_>>(),
            ["identical", "diverged", "unsupported", "unavailable"]
        );
        let links: Vec<&str> = totals.row_links.iter().map(|(_, to)| to.as_str()).collect();
        assert_eq!(links, ["every-epoch", "divergence-1", "not-compared", "not-compared"]);
        // The rendered page holds every target, the long lists folded.
        let report = Report {
            results,
            candidate: json!({"path": "c", "sha256": "0"}),
            capabilities: Err("not asked".into()),
            seconds: 0.0,
            job: 1,
            evidence: "capture".into(),
            isolation: json!({"result": "enforced"}),
        };
        let page = html(&report, Exit::Failed);
        for to in ["every-epoch", "divergence-1", "divergence-2", "not-compared"] {
            assert!(page.contains(&format!("id=\"{to}\"")), "no section {to}");
        }
        for to in links {
            assert!(page.contains(&format!("<a href=\"#{to}\">")), "no link to {to}");
        }
        assert_eq!(page.matches("<details>").count(), 2, "the epochs not compared and every epoch are folded");
        let totals_at = page.find(">Totals<").unwrap();
        assert!(totals_at < page.find("id=\"divergence-1\"").unwrap(), "the page opens on the totals");
    }
}
