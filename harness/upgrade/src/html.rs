//! `upgrade check --html` and `upgrade record --html`: the report as a page
//! of the shared frame (clink-html): the verdict, every check (informational
//! ones marked), the facts, and every command the run ran with its exit.
//!
//! It draws the report it is handed and decides nothing; the frame escapes
//! everything, so nothing a build printed becomes markup.

use clink_basics::exit::Exit;
use clink_html::{Check, Outcome, Page, Section, Table, Verdict};
use serde_json::Value as Json;

use crate::report::Checks;
use crate::runner::CommandRecord;

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
    let text = |v: &Json| match v {
        Json::String(s) => s.clone(),
        other => other.to_string(),
    };
    let facts: Vec<(String, String)> =
        facts.as_object().map(|m| m.iter().map(|(k, v)| (k.clone(), text(v))).collect()).unwrap_or_default();
    let checks = checks
        .checks
        .iter()
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
}
