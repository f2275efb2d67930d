//! `upgrade check --html` and `upgrade record --html`: the report as a page
//! of the shared frame (clink-html): the verdict, every check (the failed
//! first, then the not established, then the passed; informational ones
//! marked), the facts as text (a build as its path, hash and size, never
//! JSON), and every command the run ran with its exit.
//!
//! It draws the report it is handed and decides nothing; the frame escapes
//! everything, so nothing a build printed becomes markup.

use clink_basics::exit::Exit;
use clink_html::{Check, Outcome, Page, Section, Table, Verdict};
use serde_json::Value as Json;

use crate::report::Checks;
use crate::runner::CommandRecord;

/// Where a check of this status is listed: what failed first, what passed last.
fn severity(status: clink_html::Status) -> u8 {
    use clink_html::Status;
    match status {
        Status::Failed => 0,
        Status::Unavailable => 1,
        Status::Unsupported => 2,
        Status::Passed => 3,
    }
}

/// A fact as lines a person reads: a file's identity (`path`, `sha256`,
/// `size`) as one line, an object as one fact per member (its name
/// prefixed), a list as its items, nothing as "none".
fn flatten(name: &str, value: &Json, out: &mut Vec<(String, String)>) {
    match value {
        Json::Object(m) if m.contains_key("sha256") && m.contains_key("path") => {
            let size = m.get("size").and_then(Json::as_u64).map_or(String::new(), |b| format!(", {b} bytes"));
            let sha = m["sha256"].as_str().unwrap_or("?");
            out.push((name.into(), format!("{} (SHA-256 {sha}{size})", m["path"].as_str().unwrap_or("?"))));
        }
        Json::Object(m) => {
            for (k, v) in m {
                flatten(&format!("{name} {}", k.replace('_', " ")), v, out);
            }
        }
        Json::Array(items) => {
            let items: Vec<String> = items.iter().map(scalar).collect();
            out.push((name.into(), if items.is_empty() { "none".into() } else { items.join(", ") }));
        }
        other => out.push((name.into(), scalar(other))),
    }
}

fn scalar(value: &Json) -> String {
    match value {
        Json::String(s) => s.clone(),
        Json::Null => "none".into(),
        Json::Object(_) | Json::Array(_) => {
            let mut lines = Vec::new();
            flatten("", value, &mut lines);
            lines.into_iter().map(|(k, v)| format!("{}: {v}", k.trim())).collect::<Vec<_>>().join("; ")
        }
        other => other.to_string(),
    }
}

/// The page of one `upgrade` run.
pub fn page(command: &str, checks: &Checks, facts: &Json, commands: &[CommandRecord]) -> Page {
    let exit = checks.result();
    let (outcome, summary) = match exit {
        Exit::Passed => (Outcome::Passed, "every required check passed"),
        Exit::Failed => (Outcome::Failed, "a required check failed"),
        _ => (
            Outcome::Partial,
            "nothing required failed, but something required was not established; this is not a pass",
        ),
    };
    let mut facts_shown = Vec::new();
    if let Some(m) = facts.as_object() {
        for (k, v) in m {
            flatten(&k.replace('_', " "), v, &mut facts_shown);
        }
    }
    let facts = facts_shown;
    let mut ordered: Vec<_> = checks.checks.iter().collect();
    // Stable: within one status, the seed's table order.
    ordered.sort_by_key(|c| severity(c.status));
    let checks = ordered
        .into_iter()
        .map(|c| Check {
            name: if c.required { c.name.to_string() } else { format!("{} (informational)", c.name) },
            status: c.status,
            reason: c.reason.clone(),
            evidence: Vec::new(),
            details: Vec::new(),
            next_action: String::new(),
            counts: Vec::new(),
        })
        .collect();
    let rows = commands
        .iter()
        .map(|c| {
            let ended = match (c.exit_code, c.signal, &c.stopped) {
                (_, _, Some(why)) => format!("stopped: {why}"),
                (Some(code), _, _) => format!("exit {code}"),
                (None, Some(signal), _) => format!("signal {signal}"),
                (None, None, None) => "unknown".into(),
            };
            vec![c.name.clone(), c.argv.join(" "), ended, format!("{:.1} s", c.seconds)]
        })
        .collect();
    Page {
        command: format!("clink upgrade {command}"),
        subject: "upgrade validation".into(),
        facts,
        verdict: Verdict { outcome, summary: summary.into(), exit_code: exit.code() },
        checks,
        timeline: None,
        sections: vec![Section {
            anchor: None,
            folded: false,
            row_links: Vec::new(),
            title: "Commands run".into(),
            paragraphs: vec![
                "Every command this run started, as it was run; each one's log is kept under --out/logs.".into()
            ],
            table: Some(Table {
                header: ["name", "command", "ended", "time"].map(String::from).to_vec(),
                rows,
                marked: Vec::new(),
            }),
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Status, CHECK_TABLE};

    #[test]
    fn the_page_shows_every_check_and_command_and_escapes_what_builds_printed() {
        let mut checks = Checks::new(CHECK_TABLE);
        checks.set("restore.candidate", Status::Failed, "operator <b>windows</b> restored nothing");
        let commands = vec![CommandRecord {
            name: "candidate run".into(),
            argv: vec!["clink".into(), "run".into(), "--job".into(), "<script>x</script>".into()],
            exit_code: Some(1),
            signal: None,
            stopped: None,
            seconds: 1.25,
            stdout: String::new(),
            stderr: String::new(),
        }];
        let html = clink_html::render(&page("check", &checks, &serde_json::json!({"baseline": "v0.2.0"}), &commands));
        for (name, _) in CHECK_TABLE {
            assert!(html.contains(name), "{name} is not on the page");
        }
        assert!(html.contains("state.raw (informational)"));
        assert!(html.contains("candidate run") && html.contains("exit 1"));
        for hostile in ["<b>windows</b>", "<script>x</script>"] {
            assert!(!html.contains(hostile), "{hostile} reached the page unescaped");
        }
    }

    #[test]
    fn failed_checks_come_first_and_no_fact_is_json() {
        let mut checks = Checks::new(CHECK_TABLE);
        let last = CHECK_TABLE[CHECK_TABLE.len() - 1].0;
        checks.set(last, Status::Failed, "it failed");
        let identity = serde_json::json!({"path": "/b/clink", "sha256": "ab", "size": 3});
        let facts = serde_json::json!({
            "builds": {"baseline": {"clink": identity, "job": identity}, "tools": identity},
            "capabilities_established": {"baseline": "reported"},
            "baseline_misplaced_rows": [],
        });
        let page = page("check", &checks, &facts, &[]);
        assert_eq!(page.checks[0].name.trim_end_matches(" (informational)"), last, "the failed check first");
        assert!(page.checks.windows(2).all(|w| severity(w[0].status) <= severity(w[1].status)));
        let shown: Vec<String> = page.facts.iter().map(|(k, v)| format!("{k} = {v}")).collect();
        assert!(shown.contains(&"builds baseline clink = /b/clink (SHA-256 ab, 3 bytes)".to_string()), "{shown:?}");
        assert!(shown.contains(&"capabilities established baseline = reported".to_string()), "{shown:?}");
        assert!(shown.contains(&"baseline misplaced rows = none".to_string()), "{shown:?}");
        assert!(page.facts.iter().all(|(_, v)| !v.contains('{') && !v.contains('"')), "{shown:?}");
    }
}
