//! `status --html`: the status as one page in the frame of the other
//! reports (clink-html).
//!
//! Per partition, a bar of the offsets the audits spanned, drawn in text:
//! each verified range, each gap by what left it (a distinct sign per
//! outcome, never colour alone), with a table of the ranges; then the
//! discrepancies with their acknowledgements, the unfinished audits, and
//! the last cycles with their step times. The header's facts are sentences
//! (never the document's JSON), and times are ages and durations, not epoch
//! milliseconds. It draws the status document only; it reads nothing and
//! decides nothing.

use clink_basics::status::Status;
use clink_html::{Check, Outcome as PageOutcome, Page, Section, Table, Verdict};
use serde_json::Value as Json;

use crate::status::State;
use crate::view::StatusView;

/// The width of a partition's bar, in signs.
const BAR_WIDTH: u64 = 64;

/// The sign of a range: verified, or the gap's first tag.
fn sign(tag: &str) -> char {
    match tag {
        "verified" => '█',
        "discrepancy" => '✖',
        "partial" => '▒',
        "error" => '!',
        "unsupported" => '?',
        "expired" => '×',
        "skipped" => '·',
        _ => '░', // unaudited
    }
}

const LEGEND: &str =
    "█ verified · ✖ discrepancy · ▒ partial · ! error · ? unsupported · × expired · · skipped · ░ unaudited";

fn num(v: &Json) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// One partition's bar: the extent in BAR_WIDTH cells, each the sign of the
/// range covering the cell's first offset (gaps drawn over verified, so a
/// narrow gap is never hidden).
fn bar(p: &Json) -> String {
    let (start, end) = (num(&p["extent"]["start"]), num(&p["extent"]["end"]));
    if end <= start {
        return String::new();
    }
    let mut cells = vec!['░'; BAR_WIDTH as usize];
    let span = end - start;
    let mut paint = |from: u64, to: u64, c: char| {
        let a = ((from.saturating_sub(start)) * BAR_WIDTH / span) as usize;
        let b = (((to.saturating_sub(start)) * BAR_WIDTH).div_ceil(span) as usize).min(cells.len());
        for cell in cells.iter_mut().take(b.max(a + 1).min(BAR_WIDTH as usize)).skip(a) {
            *cell = c;
        }
    };
    for r in p["verified"].as_array().into_iter().flatten() {
        paint(num(&r["start"]), num(&r["end"]), sign("verified"));
    }
    for g in p["gaps"].as_array().into_iter().flatten() {
        let tag = g["tags"].as_array().and_then(|t| t.first()).and_then(Json::as_str).unwrap_or("unaudited");
        paint(num(&g["start"]), num(&g["end"]), sign(tag));
    }
    cells.into_iter().collect()
}

fn text(v: &Json) -> String {
    match v {
        Json::String(s) => s.clone(),
        Json::Null => "—".into(),
        other => other.to_string(),
    }
}

fn count(n: u64, one: &str, many: &str) -> String {
    clink_basics::text::count(n as usize, one, many)
}

/// An audit a fact names (last attempted, last verified), as a sentence.
fn scope_fact(scope: &Json) -> String {
    if scope.is_null() {
        return "none".into();
    }
    format!(
        "checkpoint {} ({}): {}, completed {} ago",
        text(&scope["checkpoint"]),
        text(&scope["audit"]),
        text(&scope["outcome"]),
        duration(num(&scope["age_s"]))
    )
}

/// The runner's record, as a sentence.
fn runner_fact(r: &Json) -> String {
    let mut parts = vec![if r["running"] == true {
        format!("running (pid {})", text(&r["pid"]))
    } else {
        "not running".to_string()
    }];
    parts.push(match r["last_cycle_age_s"].as_u64() {
        Some(age) => format!("its last cycle ended {} ago", duration(age)),
        None => "no cycle has ended".into(),
    });
    for (key, what) in [("stopped", "stopped"), ("budget_blocked", "the disk budget holds it")] {
        if let Some(why) = r[key].as_str() {
            parts.push(format!("{what}: {why}"));
        }
    }
    let usage = &r["usage"];
    if let Some(cpu) = usage["cpu_s"].as_f64() {
        parts.push(format!("CPU {cpu:.1} s, its children {:.1} s", usage["children_cpu_s"].as_f64().unwrap_or(0.0)));
    }
    parts.join("; ")
}

/// Seconds as a person reads them: 42 s, 3 min 5 s, 2 h 10 min, 3 d 4 h.
fn duration(s: u64) -> String {
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {} s", s / 60, s % 60),
        3600..86_400 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        _ => format!("{} d {} h", s / 86_400, s % 86_400 / 3600),
    }
}

pub fn page(view: &StatusView) -> String {
    let d = &view.document;
    let outcome = match view.state {
        State::Healthy => PageOutcome::Passed,
        State::Discrepancy => PageOutcome::Failed,
        _ => PageOutcome::Partial,
    };
    let mut sections = Vec::new();
    for p in d["coverage"].as_array().into_iter().flatten() {
        let mut rows: Vec<Vec<String>> = Vec::new();
        for r in p["verified"].as_array().into_iter().flatten() {
            rows.push(vec![text(&r["start"]), text(&r["end"]), "verified".into()]);
        }
        for g in p["gaps"].as_array().into_iter().flatten() {
            let tags: Vec<String> = g["tags"].as_array().into_iter().flatten().map(text).collect();
            rows.push(vec![text(&g["start"]), text(&g["end"]), format!("gap: {}", tags.join(", "))]);
        }
        rows.sort_by_key(|r| r[0].parse::<u64>().unwrap_or(0));
        sections.push(Section {
            anchor: None,
            folded: false,
            row_links: Vec::new(),
            title: format!("Offsets of {} partition {}", text(&p["topic"]), p["partition"]),
            paragraphs: vec![bar(p), LEGEND.into()],
            table: Some(Table { header: vec!["from".into(), "to".into(), "what".into()], rows, marked: Vec::new() }),
        });
    }
    let listed = |key: &str, title: &str| -> Section {
        let rows: Vec<Vec<String>> = d[key]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                let findings: Vec<String> = r["findings"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|f| format!("{}: {}", text(&f["relationship"]), text(&f["summary"])))
                    .collect();
                let acks: Vec<String> = r["acknowledgements"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|a| format!("{} ({}, attempt {})", text(&a["note"]), text(&a["by"]), text(&a["attempt"])))
                    .collect();
                // Whether one of them names the report published now (ledger::acknowledged).
                let standing = if r["acknowledged"] == true { "" } else { "not acknowledged" };
                vec![
                    text(&r["audit"]),
                    text(&r["checkpoint"]),
                    text(&r["outcome"]),
                    text(&r["reason"]),
                    findings.join("; "),
                    [standing.to_string(), acks.join("; ")]
                        .into_iter()
                        .filter(|t| !t.is_empty())
                        .collect::<Vec<_>>()
                        .join(": "),
                ]
            })
            .collect();
        let header = ["audit", "checkpoint", "outcome", "reason", "findings", "acknowledgements"];
        let paragraphs = if rows.is_empty() { vec!["none".into()] } else { Vec::new() };
        Section {
            anchor: None,
            folded: false,
            row_links: Vec::new(),
            title: title.into(),
            paragraphs,
            table: Some(Table { header: header.map(String::from).to_vec(), rows, marked: Vec::new() }),
        }
    };
    sections.push(listed("discrepancies", "Discrepancies (they stay listed once acknowledged)"));
    sections.push(listed("unfinished", "Unfinished audits"));
    let cycles: Vec<Vec<String>> = d["cycles"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let audits: Vec<String> = c["audits"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|a| {
                    let steps: Vec<String> = a["steps"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|s| format!("{} {:.2}s", text(&s[0]), s[1].as_f64().unwrap_or(0.0)))
                        .collect();
                    format!("{} {} ({})", text(&a["checkpoint"]), text(&a["outcome"]), steps.join(", "))
                })
                .collect();
            let secs = (num(&c["ended_ms"]).saturating_sub(num(&c["started_ms"]))) as f64 / 1000.0;
            let note = if c["note"].is_null() { String::new() } else { text(&c["note"]) };
            vec![text(&c["n"]), format!("{secs:.2}"), audits.join("; "), note]
        })
        .collect();
    sections.push(Section {
        anchor: None,
        folded: false,
        row_links: Vec::new(),
        title: "Last cycles".into(),
        paragraphs: Vec::new(),
        table: Some(Table {
            header: ["cycle", "seconds", "audits (steps)", "note"].map(String::from).to_vec(),
            rows: cycles,
            marked: Vec::new(),
        }),
    });
    let checks = d["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| Check {
            name: format!("status.{}", text(c)),
            status: if text(c) == "healthy" { Status::Passed } else { Status::Failed },
            reason: format!("the condition {} holds", text(c)),
            evidence: Vec::new(),
            details: Vec::new(),
            next_action: String::new(),
            counts: Vec::new(),
        })
        .collect();
    let mut facts = vec![
        ("job".into(), text(&d["job"])),
        ("lineage".into(), text(&d["lineage"])),
        ("state".into(), text(&d["state"])),
        ("last attempted".into(), scope_fact(&d["last_attempted"])),
        ("last verified".into(), scope_fact(&d["last_verified"])),
        ("backlog".into(), count(num(&d["backlog"]), "checkpoint waits", "checkpoints wait")),
        ("runner".into(), runner_fact(&d["runner"])),
    ];
    if let Some(stale) = d["stale"].as_str() {
        facts.push(("stale".into(), stale.to_string()));
    }
    let page = Page {
        command: "clink-audit status".into(),
        subject: format!("job {}", text(&d["job"])),
        facts,
        verdict: Verdict {
            outcome,
            summary: format!("the audits of this job are {}", view.state.as_str()),
            exit_code: view.state.exit_code(),
        },
        checks,
        timeline: None,
        sections,
    };
    clink_html::render(&page)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_header_reads_as_sentences_and_times_as_durations() {
        let document = json!({
            "job": "21", "lineage": "ab", "state": "stale", "backlog": 1, "conditions": ["stale"],
            "stale": "no audit of the job's current lineage has passed yet: nothing is verified",
            "last_attempted": {"audit": "ck7-x", "checkpoint": 7, "outcome": "expired", "age_s": 3725},
            "last_verified": null,
            "runner": {"running": false, "pid": 9, "last_cycle_age_s": 42, "stopped": null, "budget_blocked": null,
                       "usage": {"cpu_s": 1.25, "children_cpu_s": 3.5}},
            "coverage": [], "discrepancies": [], "unfinished": [], "cycles": [],
        });
        let html = page(&StatusView { state: State::Stale, document });
        let header = &html[html.find("<header").unwrap()..html.find("</header>").unwrap()];
        assert!(!header.contains('{'), "JSON in the header: {header}");
        assert!(header.contains("checkpoint 7 (ck7-x): expired, completed 1 h 2 min ago"), "{header}");
        assert!(
            header.contains("not running; its last cycle ended 42 s ago; CPU 1.2 s, its children 3.5 s"),
            "{header}"
        );
        assert!(header.contains("1 checkpoint waits") && header.contains("nothing is verified"), "{header}");
        assert_eq!(duration(59), "59 s");
        assert_eq!(duration(90_000), "1 d 1 h");
    }
}
