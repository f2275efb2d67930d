//! The report frame: a verdict, its checks, an optional protocol timeline and
//! optional extra sections, rendered as one self-contained HTML document.
//!
//! Every command that judges something (incident-verify, trace-validate, and
//! later upgrade check and incident-reconcile) fills a [`Page`] with its own
//! checks and sections; the frame, its escaping and its script are shared.

use std::fmt::Write as _;

use sha2::{Digest, Sha256};

pub use clink_basics::status::Status;

use crate::escape::{attr, script_json, text};
use crate::timeline::{Timeline, EVENTS_BEFORE};

const CSS: &str = include_str!("assets/report.css");
const TIMELINE_JS: &str = include_str!("assets/timeline.js");
/// Runs first: an error in the page's own script is written into the page
/// (`#script-errors`, and `data-script-errors` on the root element).
const ERRORS_JS: &str = include_str!("assets/errors.js");

/// How a run concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Passed,
    Failed,
    /// Nothing failed, but something required was not established: not a pass.
    Partial,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Passed => "passed",
            Outcome::Failed => "failed",
            Outcome::Partial => "partial",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub outcome: Outcome,
    /// One sentence: what the outcome means.
    pub summary: String,
    pub exit_code: u8,
}

/// One check, as every report of ours states it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub name: String,
    pub status: Status,
    pub reason: String,
    pub evidence: Vec<String>,
    pub details: Vec<String>,
    pub next_action: String,
    /// Named counts (a replay check's selection), in order.
    pub counts: Vec<(String, u64)>,
}

/// A table of text cells.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Table {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
    /// Cells drawn as differing, by (row, column) (an A/B divergence's
    /// cells): marked with a class and a visible sign, never by colour alone.
    pub marked: Vec<(usize, usize)>,
}

/// A section a command adds after the checks (for example, discrepancies per key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    pub title: String,
    pub paragraphs: Vec<String>,
    pub table: Option<Table>,
    /// The section's id, for links to it (a name of the command's own,
    /// never evidence: it is escaped all the same).
    pub anchor: Option<String>,
    /// Drawn closed (a `<details>` whose summary is the title): long lists
    /// a reader opens when they want them.
    pub folded: bool,
    /// Rows whose first cell links to a section of the page, by its anchor.
    pub row_links: Vec<(usize, String)>,
}

impl Section {
    /// A section with a title, its paragraphs and table, no anchor, open.
    pub fn new(title: impl Into<String>, paragraphs: Vec<String>, table: Option<Table>) -> Section {
        Section { title: title.into(), paragraphs, table, anchor: None, folded: false, row_links: Vec::new() }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// The command that made the report, e.g. `clink incident-verify`.
    pub command: String,
    /// What it judged, e.g. `bundle incident-1`.
    pub subject: String,
    /// Facts about the run, in order (job, checkpoint, profile, verifier).
    pub facts: Vec<(String, String)>,
    pub verdict: Verdict,
    pub checks: Vec<Check>,
    pub timeline: Option<Timeline>,
    pub sections: Vec<Section>,
}

/// A CSP source for an inline script: `'sha256-<base64>'` of its text.
fn script_hash(script: &str) -> String {
    format!("'sha256-{}'", base64(&Sha256::digest(script.as_bytes())))
}

/// Standard base64 with padding (for the CSP hashes; nothing else needs it).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A table cell longer than this many characters wraps instead of widening
/// the table past the page.
const PROSE_CHARS: usize = 48;

/// Microseconds since the trace began, as milliseconds.
pub fn ms(us: u64) -> String {
    format!("{}.{:03} ms", us / 1000, us % 1000)
}

/// A span of microseconds: milliseconds up to ten seconds, seconds beyond.
pub fn span(us: u64) -> String {
    if us < 10_000_000 {
        ms(us)
    } else {
        format!("{}.{:03} s", us / 1_000_000, (us / 1000) % 1000)
    }
}

/// Renders the page: one HTML document with its style and script inline.
/// The content security policy allows no fetch of any kind and only the
/// page's own two scripts (by hash), so even markup that escaped escaping
/// could neither load nor run anything.
pub fn render(page: &Page) -> String {
    let mut h = String::with_capacity(64 * 1024);
    let csp = format!(
        "default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src {} {}; base-uri 'none'; form-action 'none'",
        script_hash(ERRORS_JS),
        script_hash(TIMELINE_JS)
    );
    let outcome = page.verdict.outcome.as_str();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{}\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{} {}: {}</title>\n<style>{CSS}</style>\n<script>{ERRORS_JS}</script>\n</head>\n<body>\n",
        attr(&csp),
        text(&page.command),
        text(&page.subject),
        outcome
    );
    header(&mut h, page);
    h.push_str("<main>\n<pre id=\"script-errors\" class=\"script-errors\" hidden></pre>\n");
    if let Some(t) = &page.timeline {
        timeline(&mut h, t);
        divergence(&mut h, t);
    }
    checks(&mut h, &page.checks);
    for s in &page.sections {
        section(&mut h, s);
    }
    h.push_str("</main>\n<footer>A self-contained report: it loads nothing from anywhere.</footer>\n");
    if let Some(t) = &page.timeline {
        let _ = write!(
            h,
            "<script type=\"application/json\" id=\"timeline-data\">{}</script>\n<script>{TIMELINE_JS}</script>\n",
            script_json(&t.data())
        );
    }
    h.push_str("</body>\n</html>\n");
    h
}

fn header(h: &mut String, page: &Page) {
    let v = &page.verdict;
    let _ = write!(
        h,
        "<header class=\"verdict {o}\">\n<h1>{} <span class=\"subject\">{}</span></h1>\n\
         <p class=\"verdict-line\"><span class=\"badge {o}\">{}</span> {} <span class=\"exit\">(exit {})</span></p>\n",
        text(&page.command),
        text(&page.subject),
        v.outcome.as_str().to_uppercase(),
        text(&v.summary),
        v.exit_code,
        o = v.outcome.as_str()
    );
    if !page.facts.is_empty() {
        h.push_str("<dl class=\"facts\">\n");
        for (k, val) in &page.facts {
            let _ = writeln!(h, "<div><dt>{}</dt><dd>{}</dd></div>", text(k), text(val));
        }
        h.push_str("</dl>\n");
    }
    if !page.checks.is_empty() {
        h.push_str("<p class=\"tally\">");
        for status in [Status::Failed, Status::Unavailable, Status::Unsupported, Status::Passed] {
            let n = page.checks.iter().filter(|c| c.status == status).count();
            if n > 0 {
                let _ = write!(h, "<span class=\"status {s}\">{n} {s}</span> ", s = status.as_str());
            }
        }
        h.push_str("</p>\n");
    }
    h.push_str("</header>\n");
}

/// The diverging event with its reason and the events just before it, as
/// plain HTML (it reads without the script).
fn divergence(h: &mut String, t: &Timeline) {
    let Some(d) = &t.divergence else { return };
    h.push_str("<section id=\"divergence\" class=\"divergence\">\n<h2>Where the trace left the protocol</h2>\n");
    match t.events.get(d.index) {
        Some(e) => {
            let _ = writeln!(
                h,
                "<p class=\"diverging-summary\">Event {} of {}, <strong>{}</strong> on {} at +{}, is the first that no step of the specification can produce.</p>",
                d.index + 1,
                t.events.len(),
                text(&e.name),
                text(t.lanes.get(e.lane).map_or("?", String::as_str)),
                ms(e.t)
            );
        }
        None => {
            let _ = writeln!(
                h,
                "<p class=\"diverging-summary\">The trace ended after its {} events without being accepted.</p>",
                t.events.len()
            );
        }
    }
    let _ = writeln!(h, "<p class=\"reason\">{}</p>", text(&d.reason));
    let from = d.index.saturating_sub(EVENTS_BEFORE);
    let to = (d.index + 1).min(t.events.len());
    if from < to {
        h.push_str(
            "<table class=\"events\">\n<thead><tr><th>#</th><th>time</th><th>lane</th><th>event</th><th>fields</th></tr></thead>\n<tbody>\n",
        );
        for (i, e) in t.events.iter().enumerate().take(to).skip(from) {
            let class = if i == d.index { " class=\"diverging\" id=\"divergence-row\"" } else { "" };
            let _ = writeln!(
                h,
                "<tr{class}><td>{}</td><td>+{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                i + 1,
                ms(e.t),
                text(t.lanes.get(e.lane).map_or("?", String::as_str)),
                text(&e.name),
                text(&e.fields())
            );
        }
        h.push_str("</tbody>\n</table>\n");
    }
    h.push_str("</section>\n");
}

fn timeline(h: &mut String, t: &Timeline) {
    let last = t.events.last().map_or(0, |e| e.t);
    let _ = writeln!(
        h,
        "<section id=\"timeline\" class=\"timeline\">\n<h2>Protocol timeline</h2>\n\
         <p class=\"timeline-summary\">Job {}: {} events on {} lanes over {}; {} checkpoints; {} recoveries, redeploys and restarts.</p>",
        t.job,
        t.events.len(),
        t.lanes.len(),
        span(last),
        t.bands.len(),
        t.marks.len()
    );
    h.push_str("<div class=\"controls\">\n<button type=\"button\" id=\"tl-all\">Whole trace</button>\n");
    if t.divergence.as_ref().is_some_and(|d| d.index < t.events.len()) {
        h.push_str("<button type=\"button\" id=\"tl-div\" class=\"bad\">Diverging event</button>\n");
    }
    h.push_str("<label>Zoom to checkpoint <select id=\"tl-ckpt\"><option value=\"\">choose</option>");
    for (i, b) in t.bands.iter().enumerate() {
        let _ = write!(h, "<option value=\"{i}\">{} ({})</option>", b.ckpt, text(&b.outcome));
    }
    h.push_str(
        "</select></label>\n<button type=\"button\" id=\"tl-in\" title=\"zoom in\">+</button>\
         <button type=\"button\" id=\"tl-out\" title=\"zoom out\">&minus;</button>\n\
         <span id=\"tl-status\" class=\"tl-status\" aria-live=\"polite\"></span>\n</div>\n\
         <div id=\"tl-wrap\" class=\"tl-wrap\"><canvas id=\"tl-canvas\" height=\"120\"></canvas><div id=\"tl-tip\" class=\"tip\" hidden></div></div>\n\
         <noscript><p class=\"hint\">The timeline is drawn by the page's script; the tables below list its checkpoints and files.</p></noscript>\n\
         <p class=\"hint\">Wheel, + and &minus; zoom; drag pans; click a checkpoint in the bottom strip to zoom to it; click an event to show its fields; double-click shows the whole trace.</p>\n\
         <pre id=\"tl-selected\" class=\"selected-event\" hidden></pre>\n",
    );
    h.push_str(
        "<ul class=\"legend\"><li><span class=\"swatch completed\"></span>checkpoint completed</li>\
         <li><span class=\"swatch failed\"></span>failed</li><li><span class=\"swatch discarded\"></span>discarded</li>\
         <li><span class=\"swatch open\"></span>not decided in the trace</li><li><span class=\"line marker\"></span>COMPLETED marker durable</li>\
         <li><span class=\"line commit\"></span>commit broadcast to last sink commit</li>\
         <li><span class=\"line restart\"></span>recovery, redeploy, restart</li><li><span class=\"line diverging\"></span>first diverging event</li></ul>\n",
    );
    for n in &t.notes {
        let _ = writeln!(h, "<p class=\"note\">{}</p>", text(n));
    }
    let _ = write!(
        h,
        "<details class=\"checkpoints\"><summary>Checkpoints ({})</summary>\n<table>\n<thead><tr><th>checkpoint</th><th>outcome</th><th>triggered</th><th>decided</th><th>marker durable</th><th>broadcast</th><th>last sink commit</th></tr></thead>\n<tbody>\n",
        t.bands.len()
    );
    let at = |v: Option<u64>| v.map_or_else(|| "-".to_string(), |v| format!("+{}", ms(v)));
    for b in &t.bands {
        let _ = writeln!(
            h,
            "<tr class=\"{}\"><td>{}</td><td>{}</td><td>+{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            attr(&b.outcome),
            b.ckpt,
            text(&b.outcome),
            ms(b.triggered),
            at(b.decided),
            at(b.marker),
            at(b.broadcast),
            at(b.committed)
        );
    }
    h.push_str("</tbody>\n</table>\n</details>\n");
    if !t.marks.is_empty() {
        let _ = write!(
            h,
            "<details class=\"marks\"><summary>Recoveries, redeploys and restarts ({})</summary>\n<ul>\n",
            t.marks.len()
        );
        for m in &t.marks {
            let _ = writeln!(h, "<li>+{}: {}</li>", ms(m.t), text(&m.label));
        }
        h.push_str("</ul>\n</details>\n");
    }
    let _ = write!(h, "<details class=\"files\"><summary>Trace files ({})</summary>\n<ul>\n", t.files.len());
    for (f, n) in &t.files {
        let _ = writeln!(h, "<li><code>{}</code>: {n} events</li>", text(f));
    }
    h.push_str("</ul>\n</details>\n</section>\n");
}

fn checks(h: &mut String, checks: &[Check]) {
    if checks.is_empty() {
        return;
    }
    h.push_str("<section id=\"checks\" class=\"checks\">\n<h2>Checks</h2>\n");
    for c in checks {
        let s = c.status.as_str();
        let _ = write!(
            h,
            "<article class=\"check {s}\" id=\"check-{}\">\n<h3><span class=\"status {s}\">{s}</span> <code>{}</code></h3>\n<p class=\"reason\">{}</p>\n",
            attr(&c.name),
            text(&c.name),
            text(&c.reason)
        );
        if !c.counts.is_empty() {
            h.push_str("<p class=\"counts\">");
            let counts: Vec<String> = c.counts.iter().map(|(k, v)| format!("{} {v}", text(k))).collect();
            h.push_str(&counts.join(", "));
            h.push_str("</p>\n");
        }
        if !c.evidence.is_empty() {
            h.push_str("<ul class=\"evidence\">\n");
            for e in &c.evidence {
                let _ = writeln!(h, "<li>{}</li>", text(e));
            }
            h.push_str("</ul>\n");
        }
        if !c.details.is_empty() {
            let open = if c.status == Status::Passed || c.details.len() > 20 { "" } else { " open" };
            let _ =
                write!(h, "<details class=\"details\"{open}><summary>{} details</summary>\n<ul>\n", c.details.len());
            for d in &c.details {
                let _ = writeln!(h, "<li>{}</li>", text(d));
            }
            h.push_str("</ul>\n</details>\n");
        }
        if !c.next_action.is_empty() {
            let _ = writeln!(h, "<p class=\"next\"><span class=\"label\">Next:</span> {}</p>", text(&c.next_action));
        }
        h.push_str("</article>\n");
    }
    h.push_str("</section>\n");
}

fn section(h: &mut String, s: &Section) {
    match &s.anchor {
        Some(id) => {
            let _ = writeln!(h, "<section class=\"extra\" id=\"{}\">", attr(id));
        }
        None => h.push_str("<section class=\"extra\">\n"),
    }
    if s.folded {
        let _ = writeln!(h, "<details>\n<summary><h2>{}</h2></summary>", text(&s.title));
    } else {
        let _ = writeln!(h, "<h2>{}</h2>", text(&s.title));
    }
    for p in &s.paragraphs {
        let _ = writeln!(h, "<p>{}</p>", text(p));
    }
    if let Some(table) = &s.table {
        h.push_str("<table>\n<thead><tr>");
        for c in &table.header {
            let _ = write!(h, "<th>{}</th>", text(c));
        }
        h.push_str("</tr></thead>\n<tbody>\n");
        for (r, row) in table.rows.iter().enumerate() {
            h.push_str("<tr>");
            let link = s.row_links.iter().find(|(i, _)| *i == r).map(|(_, to)| to);
            for (col, c) in row.iter().enumerate() {
                let cell = match link.filter(|_| col == 0) {
                    Some(to) => format!("<a href=\"#{}\">{}</a>", attr(to), text(c)),
                    None => text(c),
                };
                // A long cell (a reason, a list) wraps; short ones (ids, numbers) stay on one line.
                let prose = if c.chars().count() > PROSE_CHARS { " prose" } else { "" };
                if table.marked.contains(&(r, col)) {
                    let _ = write!(h, "<td class=\"differs{prose}\" title=\"differs\">&#x25B6; {cell}</td>");
                } else if prose.is_empty() {
                    let _ = write!(h, "<td>{cell}</td>");
                } else {
                    let _ = write!(h, "<td class=\"prose\">{cell}</td>");
                }
            }
            h.push_str("</tr>\n");
        }
        h.push_str("</tbody>\n</table>\n");
    }
    if s.folded {
        h.push_str("</details>\n");
    }
    h.push_str("</section>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page() -> Page {
        Page {
            command: "clink test".into(),
            subject: "bundle <b>x</b>".into(),
            facts: vec![("job".into(), "1".into())],
            verdict: Verdict { outcome: Outcome::Failed, summary: "a check failed".into(), exit_code: 1 },
            checks: vec![Check {
                name: "bundle.artifacts".into(),
                status: Status::Failed,
                reason: "unlisted: traces/<script>alert('x')</script>.ndjson".into(),
                evidence: vec!["\"quoted\" & <i>".into()],
                details: vec!["</details><script>".into()],
                next_action: "<a href=x>".into(),
                counts: vec![("selected".into(), 3)],
            }],
            timeline: None,
            sections: vec![Section {
                anchor: None,
                folded: false,
                row_links: Vec::new(),
                title: "per key".into(),
                paragraphs: vec!["<p>".into()],
                table: Some(Table {
                    header: vec!["key".into()],
                    rows: vec![vec!["<td>".into()]],
                    marked: vec![(0, 0)],
                }),
            }],
        }
    }

    #[test]
    fn spans_read_in_milliseconds_then_seconds() {
        assert_eq!(span(44_085), "44.085 ms");
        assert_eq!(span(13_112_777), "13.112 s");
    }

    #[test]
    fn base64_matches_the_standard() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }

    #[test]
    fn evidence_renders_as_text_only() {
        let html = render(&page());
        // The only elements with these names are the page's own.
        assert_eq!(html.matches("<script").count(), 1, "no timeline, so only the error script: {html}");
        assert!(!html.contains("<b>") && !html.contains("<i>") && !html.contains("<a ") && !html.contains("<td><td>"));
        assert!(
            html.contains("<td class=\"differs\" title=\"differs\">&#x25B6; &lt;td&gt;</td>"),
            "a marked cell is marked"
        );
        assert!(html.contains("traces/&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;.ndjson"));
        assert!(html.contains("&lt;/details&gt;&lt;script&gt;"));
        assert!(html.contains("Content-Security-Policy"));
    }
}
