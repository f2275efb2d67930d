//! The HTML reports (`--html`): their structure as insta snapshots of a
//! normalised outline (the good bundle, a rejected trace), escaping of a
//! hostile bundle, a 10,000-event timeline, and the pages opened in a real
//! browser (headless Chromium: scripts run without error, the diverging event
//! is in the DOM, a screenshot is taken; the A/B page's totals lead to
//! sections it has, its long lists folded). Browser trials are ignored with the
//! kind `browser` where Chromium is missing; trials that need TLC with the
//! kind `tlc` where Java or the pinned jar is missing. Never passed instead.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use clink_basics::digest::sha256_hex;
use clink_formal::trace::{MergedTrace, TraceLine};
use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::{json, Value as Json};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn clink() -> Command {
    Command::new(env!("CARGO_BIN_EXE_clink"))
}

/// Where the trials leave their pages and screenshots (kept for a look).
fn out_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("html");
    fs::create_dir_all(&dir).unwrap();
    dir
}

// ---------------------------------------------------------------------------
// The outline: element tags with their classes and ids, and text, indented by
// depth; the style skipped, the page's script named, the timeline's data
// summarised. Volatile text (temporary paths, seconds) is redacted.

const VOID: &[&str] = &["meta", "link", "br", "hr", "img", "input", "col", "wbr"];

fn attr_value(attrs: &str, name: &str) -> Option<String> {
    let mut rest = attrs;
    while let Some(at) = rest.find(name) {
        let before_ok = at == 0 || rest.as_bytes()[at - 1].is_ascii_whitespace();
        let after = &rest[at + name.len()..];
        if before_ok && after.starts_with("=\"") {
            let value = &after[2..];
            return value.find('"').map(|end| value[..end].to_string());
        }
        rest = after;
    }
    None
}

fn redact(text: &str) -> String {
    let tmp = std::env::temp_dir().display().to_string();
    text.split(' ')
        .map(|w| {
            if w.starts_with(&tmp) {
                "<tmp>".to_string()
            } else if w.trim_end_matches(['s', ',', ';', ')']).parse::<f64>().is_ok()
                && w.contains('.')
                && w.contains('s')
            {
                "<seconds>".to_string()
            } else {
                w.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn data_summary(json: &str) -> Vec<String> {
    let d: Json = match serde_json::from_str(json) {
        Ok(d) => d,
        Err(e) => return vec![format!("TIMELINE DATA DOES NOT PARSE: {e}")],
    };
    let n = d["ev"].as_array().map_or(0, |e| e.len() / 5);
    let bands: Vec<String> = d["bands"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|b| format!("{} {}", b[0], b[3].as_str().unwrap_or("?")))
        .collect();
    let marks: Vec<String> =
        d["marks"].as_array().into_iter().flatten().map(|m| m[2].as_str().unwrap_or("?").to_string()).collect();
    vec![
        format!(
            "data: job {}, {n} events, {} distinct details",
            d["job"],
            d["details"].as_array().map_or(0, |a| a.len())
        ),
        format!("lanes: {}", d["lanes"]),
        format!("names: {}", d["names"]),
        format!("bands: {}", bands.join(", ")),
        format!("marks: {}", redact(&marks.join(" | "))),
        format!("divergence: {}", redact(&d["div"].to_string())),
    ]
}

fn outline(html: &str) -> String {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut rest = html;
    while !rest.is_empty() {
        let Some(lt) = rest.find('<') else {
            push_text(&mut out, depth, rest);
            break;
        };
        push_text(&mut out, depth, &rest[..lt]);
        rest = &rest[lt..];
        let Some(gt) = rest.find('>') else { break };
        let tag = &rest[1..gt];
        rest = &rest[gt + 1..];
        if tag.starts_with('!') {
            continue;
        }
        if let Some(name) = tag.strip_prefix('/') {
            depth = depth.saturating_sub(1);
            let _ = name;
            continue;
        }
        let (name, attrs) = tag.split_once(' ').unwrap_or((tag, ""));
        let mut line = name.to_string();
        if let Some(id) = attr_value(attrs, "id") {
            line.push_str(&format!("#{id}"));
        }
        if let Some(class) = attr_value(attrs, "class") {
            for c in class.split_whitespace() {
                line.push_str(&format!(".{c}"));
            }
        }
        if name == "style" || name == "script" {
            let close = format!("</{name}>");
            let end = rest.find(&close).unwrap_or(rest.len());
            let body = &rest[..end];
            rest = &rest[(end + close.len()).min(rest.len())..];
            out.push(format!("{}{line}", "  ".repeat(depth)));
            if name == "script" && attr_value(attrs, "type").as_deref() == Some("application/json") {
                out.extend(data_summary(body).into_iter().map(|l| format!("{}  {l}", "  ".repeat(depth))));
            }
            continue;
        }
        out.push(format!("{}{line}", "  ".repeat(depth)));
        if !VOID.contains(&name) {
            depth += 1;
        }
    }
    out.join("\n") + "\n"
}

fn push_text(out: &mut Vec<String>, depth: usize, text: &str) {
    let t = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if !t.is_empty() {
        out.push(format!("{}\"{}\"", "  ".repeat(depth), redact(&t)));
    }
}

fn snapshot(name: &str, html: &str) {
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path(repo().join("harness/tests/snapshots/html"));
    settings.set_prepend_module_to_snapshot(false);
    settings.bind(|| insta::assert_snapshot!(name.to_string(), outline(html)));
}

// ---------------------------------------------------------------------------
// Making the pages.

/// `clink incident-verify --html` on a copy of the good bundle (named `good`).
fn good_page(profile: &str) -> Result<String, Failed> {
    let scratch = tempfile::tempdir().map_err(|e| e.to_string())?;
    common::copy_dir(&repo().join("fixtures/bundles/good"), &scratch.path().join("good"));
    verify_html(scratch.path(), "good", profile)
}

fn verify_html(dir: &Path, bundle: &str, profile: &str) -> Result<String, Failed> {
    let page = dir.join("report.html");
    let out = clink()
        .current_dir(dir)
        .args(["incident-verify", "--profile", profile, bundle, "--json", "--html", "report.html"])
        .output()
        .map_err(|e| e.to_string())?;
    // The JSON report is what it always was, alone on standard output.
    let doc: Json = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("stdout is not one JSON document: {e}\n{}", String::from_utf8_lossy(&out.stdout)))?;
    if doc["format"] != "clink-verify-report" || doc.to_string().contains("diverged_at") {
        return Err(format!("unexpected report: {doc}").into());
    }
    if !out.stderr.is_empty() {
        return Err(
            format!("progress or noise on a non-terminal stderr: {}", String::from_utf8_lossy(&out.stderr)).into()
        );
    }
    fs::read_to_string(&page).map_err(|e| format!("{}: {e}", page.display()).into())
}

/// `clink trace-validate --html` on a recorded trace.
fn trace_page(trace: &str) -> Result<(String, i32), Failed> {
    let scratch = tempfile::tempdir().map_err(|e| e.to_string())?;
    let page = scratch.path().join("report.html");
    let out = clink()
        .current_dir(repo())
        .args(["trace-validate", "--trace", trace, "--json", "--html"])
        .arg(&page)
        .output()
        .map_err(|e| e.to_string())?;
    let html = fs::read_to_string(&page).map_err(|e| {
        format!(
            "{}: {e}\n{}{}",
            page.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    Ok((html, out.status.code().unwrap_or(-1)))
}

/// The rejected trace the page trials draw, and where its expected.txt says
/// validation rejects it (`rejected <k> <event>`), so a re-recording that
/// moves the event keeps the trials honest.
const REJECTED: &str = "traces/defect-broadcast_before_marker";

fn expected_rejection() -> Result<(usize, String), Failed> {
    let text = fs::read_to_string(repo().join(REJECTED).join("expected.txt")).map_err(|e| e.to_string())?;
    text.lines()
        .find_map(|l| {
            let mut words = l.strip_prefix("rejected ")?.split_whitespace();
            Some((words.next()?.parse().ok()?, words.next()?.to_string()))
        })
        .ok_or_else(|| format!("{REJECTED}/expected.txt names no rejection").into())
}

const HOSTILE_UNLISTED: &str = "traces/<svg onload=alert(2)>\"'.ndjson";
const HOSTILE_FIELD: &str = "</script><script>alert(3)</script><!--\u{2028}";
const HOSTILE_SUB: &str = "op-<b onmouseover=alert(4)>-0";

/// A copy of the good bundle with hostile fields in a trace's lines (re-vouched
/// for), and a hostile unlisted file whose name bundle.artifacts's reason
/// repeats. (A hostile trace file *name* never reaches a page: the reader
/// refuses a path the collector does not write.)
fn hostile_page() -> Result<String, Failed> {
    let scratch = tempfile::tempdir().map_err(|e| e.to_string())?;
    let dir = scratch.path().join("hostile");
    common::copy_dir(&repo().join("fixtures/bundles/good"), &dir);
    let manifest_path = dir.join("manifest.json");
    let mut m: Json =
        serde_json::from_slice(&fs::read(&manifest_path).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    let artifacts = m["artifacts"].as_array_mut().ok_or("no artifacts")?;
    let worker = artifacts
        .iter_mut()
        .find(|a| a["role"] == "trace" && a["path"].as_str().is_some_and(|p| p.contains("/worker-")))
        .ok_or("no worker trace")?;
    let old = worker["path"].as_str().unwrap_or_default().to_string();
    let text = fs::read_to_string(dir.join(&old)).map_err(|e| e.to_string())?;
    let mut doctored = String::new();
    for line in text.lines() {
        let mut v: Json = serde_json::from_str(line).map_err(|e| e.to_string())?;
        v["note"] = HOSTILE_FIELD.into();
        if v.get("sub").is_some() && v["sub"] == "op-6-1" {
            v["sub"] = HOSTILE_SUB.into();
        }
        doctored.push_str(&v.to_string());
        doctored.push('\n');
    }
    fs::write(dir.join(&old), &doctored).map_err(|e| e.to_string())?;
    worker["size"] = doctored.len().into();
    worker["sha256"] = sha256_hex(doctored.as_bytes()).into();
    fs::write(&manifest_path, serde_json::to_vec_pretty(&m).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    fs::write(dir.join(HOSTILE_UNLISTED), b"unlisted\n").map_err(|e| e.to_string())?;
    verify_html(scratch.path(), "hostile", "replay")
}

/// A copy of the good bundle whose first coordinator broadcasts checkpoint 1's
/// commit before writing its COMPLETED marker (the two lines' events
/// exchanged, their seq and ts kept, the file re-vouched for): the trace
/// reads well and protocol.conformance rejects it. The page must highlight
/// the event the check names.
fn bundle_divergence() -> Result<(), Failed> {
    let scratch = tempfile::tempdir().map_err(|e| e.to_string())?;
    let dir = scratch.path().join("swapped");
    common::copy_dir(&repo().join("fixtures/bundles/good"), &dir);
    let manifest_path = dir.join("manifest.json");
    let mut m: Json =
        serde_json::from_slice(&fs::read(&manifest_path).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    let coordinator = m["artifacts"]
        .as_array_mut()
        .ok_or("no artifacts")?
        .iter_mut()
        .filter(|a| a["role"] == "trace" && a["path"].as_str().is_some_and(|p| p.contains("/coordinator-")))
        .min_by_key(|a| a["path"].as_str().map(str::to_string))
        .ok_or("no coordinator trace")?;
    let path = dir.join(coordinator["path"].as_str().unwrap_or_default());
    let mut lines: Vec<Json> = fs::read_to_string(&path)
        .map_err(|e| e.to_string())?
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let marker = lines.iter().position(|l| l["event"] == "WriteCompleted").ok_or("no WriteCompleted")?;
    if lines.get(marker + 1).map(|l| &l["event"]) != Some(&json!("Broadcast")) {
        return Err("the good bundle's first marker is not followed by its broadcast".into());
    }
    let (a, b) = (lines[marker].clone(), lines[marker + 1].clone());
    for (at, from) in [(marker, b), (marker + 1, a)] {
        let (seq, ts) = (lines[at]["seq"].clone(), lines[at]["ts"].clone());
        lines[at] = from;
        lines[at]["seq"] = seq;
        lines[at]["ts"] = ts;
    }
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    fs::write(&path, &text).map_err(|e| e.to_string())?;
    coordinator["size"] = text.len().into();
    coordinator["sha256"] = sha256_hex(text.as_bytes()).into();
    fs::write(&manifest_path, serde_json::to_vec_pretty(&m).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;

    let out = clink()
        .current_dir(scratch.path())
        .args(["incident-verify", "--profile", "full", "swapped", "--json", "--html", "report.html"])
        .output()
        .map_err(|e| e.to_string())?;
    let report: Json = serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
    let check = report["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == "protocol.conformance"))
        .ok_or("no protocol.conformance")?;
    let reason = check["reason"].as_str().unwrap_or_default();
    let k: usize = reason
        .strip_prefix("event ")
        .and_then(|r| r.split(' ').next())
        .and_then(|k| k.parse().ok())
        .ok_or_else(|| format!("protocol.conformance did not reject: {check}"))?;
    let html = fs::read_to_string(scratch.path().join("report.html")).map_err(|e| e.to_string())?;
    let start = html.find("id=\"timeline-data\">").ok_or("no timeline data")? + "id=\"timeline-data\">".len();
    let end = start + html[start..].find("</script>").ok_or("unclosed data")?;
    let data: Json = serde_json::from_str(&html[start..end]).map_err(|e| e.to_string())?;
    if data["div"]["i"] != json!(k - 1) {
        return Err(format!("the page highlights event index {}, the check names event {k}", data["div"]["i"]).into());
    }
    let row = html.find("id=\"divergence-row\"").ok_or("no divergence row")?;
    if !html[row..]
        .split("</tr>")
        .next()
        .is_some_and(|r| r.contains(&format!("<td>{k}</td>")) && r.contains("Broadcast"))
    {
        return Err("the highlighted row is not the named Broadcast".into());
    }
    Ok(())
}

/// Checks on the page's text: evidence appears only escaped, and the only
/// scripts are the page's three (error hook, data, timeline).
fn assert_escaped(html: &str) -> Result<(), Failed> {
    let scripts = html.matches("<script").count();
    let closes = html.matches("</script>").count();
    if scripts != 3 || closes != 3 {
        return Err(format!("{scripts} <script and {closes} </script> in the page; the page has 3 of its own").into());
    }
    for raw in ["<img", "<svg", "<b ", "<!--", "\u{2028}"] {
        if html.contains(raw) {
            return Err(format!("{raw:?} reached the page unescaped").into());
        }
    }
    for shown in ["&lt;svg onload=alert(2)&gt;&quot;&#39;.ndjson"] {
        if !html.contains(shown) {
            return Err(format!("{shown:?} is not shown as text").into());
        }
    }
    // The data block holds the hostile strings, escaped for a script, and
    // reads back to them.
    let start = html.find("id=\"timeline-data\">").ok_or("no timeline data")? + "id=\"timeline-data\">".len();
    let end = start + html[start..].find("</script>").ok_or("unclosed data")?;
    let data: Json = serde_json::from_str(&html[start..end]).map_err(|e| e.to_string())?;
    if !data["lanes"].as_array().is_some_and(|l| l.iter().any(|l| l == HOSTILE_SUB)) {
        return Err(format!("the hostile subtask is not a lane: {}", data["lanes"]).into());
    }
    if !data["details"]
        .as_array()
        .is_some_and(|d| d.iter().any(|d| d.as_str().is_some_and(|d| d.contains(HOSTILE_FIELD))))
    {
        return Err("the hostile field does not read back from the data".into());
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// A 10,000-event trace: checkpoint cycles of the example job's shape (a
// source, two keyed operators, two sinks, each with two subtasks).

fn synthetic_trace(target: usize) -> MergedTrace {
    let mut events = Vec::new();
    let mut ts = 1_800_000_000_000_000u64;
    let (mut cseq, mut wseq) = (0u64, 0u64);
    let subs = ["op-1-0", "op-2-0", "op-3-0", "op-3-1", "op-4-0", "op-4-1", "op-5-0", "op-5-1", "op-6-0", "op-6-1"];
    let sinks = ["op-5-0", "op-5-1", "op-6-0", "op-6-1"];
    let mut push = |coord: bool, v: Json, events: &mut Vec<TraceLine>| {
        ts += 37;
        let (file, seq, proc_) = if coord {
            cseq += 1;
            ("coordinator-100-1.ndjson", cseq, "coordinator:100")
        } else {
            wseq += 1;
            ("worker-100-1.ndjson", wseq, "worker:100")
        };
        let Json::Object(mut fields) = v else { unreachable!() };
        fields.insert("job".into(), 1.into());
        fields.insert("proc".into(), proc_.into());
        fields.insert("seq".into(), seq.into());
        fields.insert("ts".into(), ts.into());
        events.push(TraceLine { file: file.into(), seq, ts, process: "100-1".into(), fields });
    };
    for s in subs {
        let source = s == "op-1-0";
        push(false, json!({"event": "Placement", "sub": s, "worker": 1, "source": source}), &mut events);
    }
    for s in sinks {
        push(
            false,
            json!({"event": "SinkOpens", "sub": s, "family": "recoverable", "restore": 0, "recommitted": 0}),
            &mut events,
        );
    }
    let mut ckpt = 0;
    while events.len() < target {
        ckpt += 1;
        push(true, json!({"event": "Trigger", "ckpt": ckpt, "epoch": 0, "kind": "periodic"}), &mut events);
        push(
            false,
            json!({"event": "DeliverBarrier", "ckpt": ckpt, "epoch": 0, "worker": 1, "fenced": false}),
            &mut events,
        );
        for s in subs {
            if sinks.contains(&s) {
                push(
                    false,
                    json!({"event": "SinkPrepare", "sub": s, "ckpt": ckpt, "family": "recoverable", "staged": true}),
                    &mut events,
                );
            }
            push(false, json!({"event": "SubtaskAck", "sub": s, "ckpt": ckpt, "ok": true}), &mut events);
        }
        push(true, json!({"event": "CoordComplete", "ckpt": ckpt, "outcome": "completed", "epoch": 0}), &mut events);
        push(true, json!({"event": "WriteCompleted", "ckpt": ckpt, "epoch": 0}), &mut events);
        push(true, json!({"event": "Broadcast", "ckpt": ckpt, "withheld": false, "epoch": 0}), &mut events);
        for s in sinks {
            push(false, json!({"event": "DeliverCommit", "sub": s, "ckpt": ckpt, "accepted": true}), &mut events);
            push(false, json!({"event": "SinkCommit", "sub": s, "ckpt": ckpt}), &mut events);
        }
    }
    events.truncate(target);
    MergedTrace { job: 1, events, ties: Vec::new() }
}

/// Renders the synthetic trace's page (as trace-validate would, TLC
/// unavailable) and says how long building and rendering took.
fn big_page(target: usize) -> (String, f64) {
    let trace = synthetic_trace(target);
    let started = Instant::now();
    let page = clink_html::trace_validation::trace_validation_page(
        "synthetic",
        &trace,
        clink_html::trace_validation::TraceOutcome::Unavailable("not run: a rendering test".into()),
    );
    let html = clink_html::render(&page);
    (html, started.elapsed().as_secs_f64() * 1000.0)
}

fn ten_thousand_events() -> Result<(), Failed> {
    let (html, ms) = big_page(10_000);
    let data_bytes = html.len();
    eprintln!("10,000 events: page built in {ms:.1} ms, {} KiB", data_bytes / 1024);
    if !html.contains("10000 events on 12 lanes") {
        return Err("the summary does not count 10,000 events on 12 lanes".into());
    }
    if data_bytes > 1 << 20 {
        return Err(format!("the page is {data_bytes} bytes for 10,000 events; the data is not compact").into());
    }
    fs::write(out_dir().join("ten-thousand.html"), html).map_err(|e| e.to_string())?;
    Ok(())
}

// ---------------------------------------------------------------------------
// The browser.

fn chromium() -> Option<PathBuf> {
    ["chromium", "chromium-browser"].into_iter().find_map(|n| which::which(n).ok())
}

/// Opens a page in headless Chromium with no network of any kind: takes a
/// screenshot and dumps the DOM after the scripts ran. Returns the DOM and
/// the console messages Chromium logged.
fn browse(chrome: &Path, page: &Path, png: Option<&Path>, height: u32) -> Result<(String, Vec<String>), Failed> {
    let run = |extra: &[String]| -> Result<(String, String), Failed> {
        let profile = tempfile::tempdir().map_err(|e| e.to_string())?;
        let out = Command::new("timeout")
            .arg("120")
            .arg(chrome)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-quic",
                "--no-first-run",
                "--hide-scrollbars",
                "--enable-logging=stderr",
                "--v=0",
                "--force-device-scale-factor=1",
            ])
            .arg(format!("--window-size=1280,{height}"))
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .args(extra)
            .arg(format!("file://{}", page.display()))
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(
                format!("chromium exit {:?}: {}", out.status.code(), String::from_utf8_lossy(&out.stderr)).into()
            );
        }
        Ok((String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned()))
    };
    let (dom, log) = run(&["--dump-dom".to_string()])?;
    let mut console: Vec<String> = log.lines().filter(|l| l.contains("CONSOLE")).map(str::to_string).collect();
    if let Some(png) = png {
        let (_, log) = run(&[format!("--screenshot={}", png.display())])?;
        console.extend(log.lines().filter(|l| l.contains("CONSOLE")).map(str::to_string));
        let bytes = fs::read(png).map_err(|e| format!("{}: {e}", png.display()))?;
        if !bytes.starts_with(b"\x89PNG") {
            return Err(format!("{} is not a PNG", png.display()).into());
        }
    }
    Ok((dom, console))
}

/// The DOM after the scripts ran: the timeline drawn, no script error, no
/// console message.
fn assert_ran(dom: &str, console: &[String]) -> Result<(), Failed> {
    if !console.is_empty() {
        return Err(format!("console messages:\n{}", console.join("\n")).into());
    }
    if dom.contains("data-script-errors=\"") {
        let start = dom.find("id=\"script-errors\"").unwrap_or(0);
        return Err(format!("the page's script failed: {}", &dom[start..(start + 400).min(dom.len())]).into());
    }
    if !dom.contains("data-timeline=\"drawn\"") {
        return Err("the timeline was not drawn (data-timeline missing)".into());
    }
    // No label drawn over another or past the plot's edges (the script
    // measures every label it placed).
    if !dom.contains("data-label-overlaps=\"0\"") {
        let overlaps = attr_in_dom(dom, "tl-wrap", "data-label-overlaps");
        return Err(format!("labels overlap or are cut at the edge: {overlaps:?}").into());
    }
    Ok(())
}

fn attr_in_dom(dom: &str, element_id: &str, attr: &str) -> Option<String> {
    let at = dom.find(&format!("id=\"{element_id}\""))?;
    let open = dom[..at].rfind('<')?;
    let close = at + dom[at..].find('>')?;
    attr_value(&dom[open..close], attr)
}

fn browser_rejected(chrome: &Path) -> Result<(), Failed> {
    let (k, event) = expected_rejection()?;
    let (html, code) = trace_page(REJECTED)?;
    if code != 1 {
        return Err(format!("trace-validate exit {code}, expected 1").into());
    }
    let page = out_dir().join("rejected.html");
    fs::write(&page, html).map_err(|e| e.to_string())?;
    let png = out_dir().join("timeline.png");
    let (dom, console) = browse(chrome, &page, Some(&png), 760)?;
    assert_ran(&dom, &console)?;
    // The script placed the diverging event's marker, in view, on event k.
    if attr_in_dom(&dom, "diverging-event", "data-event-index") != Some(k.to_string()) {
        return Err(format!("no diverging-event marker on event {k} in the DOM").into());
    }
    if attr_in_dom(&dom, "diverging-event", "data-in-view").as_deref() != Some("true") {
        return Err("the first view does not show the diverging event".into());
    }
    if attr_in_dom(&dom, "diverging-event", "data-tag-cut").as_deref() != Some("false") {
        return Err("the diverging event's tag is cut at the page's edge".into());
    }
    if !dom.contains("id=\"divergence-row\"") || !dom.contains(&format!("event {k}: {event} (")) {
        return Err("the diverging event's row or label is missing".into());
    }
    let size = fs::metadata(&png).map_err(|e| e.to_string())?.len();
    if size > 200 * 1024 {
        return Err(format!("the screenshot is {size} bytes; the README's should stay under 200 KiB").into());
    }
    // CLINK_UPDATE_SCREENSHOT=1 refreshes the README's picture from this run.
    if std::env::var_os("CLINK_UPDATE_SCREENSHOT").is_some() {
        fs::create_dir_all(repo().join("docs")).map_err(|e| e.to_string())?;
        fs::copy(&png, repo().join("docs/timeline.png")).map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn browser_good(chrome: &Path) -> Result<(), Failed> {
    let page = out_dir().join("good.html");
    fs::write(&page, good_page("replay")?).map_err(|e| e.to_string())?;
    let (dom, console) = browse(chrome, &page, Some(&out_dir().join("good.png")), 1000)?;
    assert_ran(&dom, &console)?;
    if dom.contains("id=\"diverging-event\"") {
        return Err("a passed bundle shows a diverging event".into());
    }
    Ok(())
}

/// The hostile bundle's page, after its scripts ran: no element the bundle
/// named exists, and its names are there as text.
fn browser_hostile(chrome: &Path) -> Result<(), Failed> {
    let page = out_dir().join("hostile.html");
    fs::write(&page, hostile_page()?).map_err(|e| e.to_string())?;
    let (dom, console) = browse(chrome, &page, None, 1000)?;
    assert_ran(&dom, &console)?;
    let scripts = dom.matches("<script").count();
    if scripts != 3 {
        return Err(format!("{scripts} script elements in the DOM; the page has 3 of its own").into());
    }
    for injected in ["<img", "<svg", "<b ", "onerror=\"", "onload=\"", "onmouseover=\""] {
        if dom.contains(injected) {
            return Err(format!("the DOM holds an injected {injected:?}").into());
        }
    }
    // The unlisted file's name is shown as text; the hostile subtask, which
    // only the timeline draws, is in the page's data escaped for a script.
    if !dom.contains("&lt;svg onload=alert(2)&gt;") || !dom.contains(r"op-\u003cb onmouseover=alert(4)\u003e-0") {
        return Err("the hostile names are not in the DOM as text".into());
    }
    Ok(())
}

fn browser_ten_thousand(chrome: &Path) -> Result<(), Failed> {
    let (html, build_ms) = big_page(10_000);
    let page = out_dir().join("ten-thousand.html");
    fs::write(&page, html).map_err(|e| e.to_string())?;
    let started = Instant::now();
    let (dom, console) = browse(chrome, &page, None, 900)?;
    let browser_ms = started.elapsed().as_secs_f64() * 1000.0;
    assert_ran(&dom, &console)?;
    let draw_ms = attr_in_dom(&dom, "tl-wrap", "data-draw-ms").unwrap_or_default();
    let drawn = attr_in_dom(&dom, "tl-wrap", "data-drawn").unwrap_or_default();
    eprintln!(
        "10,000 events: page built in {build_ms:.1} ms; first draw {draw_ms} ms ({drawn} glyphs); chromium start to DOM dump {browser_ms:.0} ms"
    );
    if drawn.parse::<u64>().unwrap_or(0) == 0 {
        return Err("nothing was drawn".into());
    }
    Ok(())
}

/// `clink replay ab` of the example job against this same build, as a page:
/// totals first, each a link; the epochs not compared and every epoch folded.
fn replay_ab_page() -> Result<String, Failed> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let d = dir.path();
    let run = |args: &[&str]| -> Result<std::process::Output, Failed> {
        clink().args(args).output().map_err(|e| Failed::from(e.to_string()))
    };
    let path = |p: &Path| p.display().to_string();
    let (input, ck, capture, page) = (d.join("input"), d.join("ck"), d.join("capture"), d.join("ab.html"));
    let gen = run(&["gen-input", "--seed", "5", "--events", "3000", "--accounts", "20", "--out", &path(&input)])?;
    let job = repo().join("fixtures/jobs/example/job.json");
    let ran = run(&[
        "run",
        "--quiet",
        "--checkpoint-every-records",
        "1000",
        "--job",
        &path(&job),
        "--input-dir",
        &path(&input),
        "--output-dir",
        &path(&d.join("out")),
        "--checkpoint-dir",
        &path(&ck),
        "--capture-dir",
        &path(&capture),
    ])?;
    if !gen.status.success() || !ran.status.success() {
        return Err(format!("the run: {}", String::from_utf8_lossy(&ran.stderr)).into());
    }
    let clink_bin = env!("CARGO_BIN_EXE_clink");
    let ab = run(&[
        "replay",
        "ab",
        "--capture-dir",
        &path(&capture),
        "--checkpoint-dir",
        &path(&ck),
        "--candidate-clink",
        clink_bin,
        "--allow-unsupported",
        "--html",
        &path(&page),
    ])?;
    if ab.status.code() != Some(0) {
        return Err(format!("replay ab exit {:?}: {}", ab.status.code(), String::from_utf8_lossy(&ab.stderr)).into());
    }
    fs::read_to_string(&page).map_err(|e| e.to_string().into())
}

/// The A/B page in the browser: it loads with no script error, every link
/// of its totals leads to an element the DOM has, and the long lists are
/// drawn closed.
fn browser_replay_ab(chrome: &Path) -> Result<(), Failed> {
    let page = out_dir().join("replay-ab.html");
    fs::write(&page, replay_ab_page()?).map_err(|e| e.to_string())?;
    let (dom, console) = browse(chrome, &page, Some(&out_dir().join("replay-ab.png")), 900)?;
    if !console.is_empty() || dom.contains("data-script-errors=\"") {
        return Err(format!("the page did not load cleanly: {console:?}").into());
    }
    let links: Vec<String> = dom
        .match_indices("href=\"#")
        .filter_map(|(at, _)| dom[at + 7..].split('"').next().map(str::to_string))
        .collect();
    if !links.iter().any(|l| l == "every-epoch") || !links.iter().any(|l| l == "not-compared") {
        return Err(format!("the totals do not link to every epoch and the epochs not compared: {links:?}").into());
    }
    for to in &links {
        if !dom.contains(&format!("id=\"{to}\"")) {
            return Err(format!("a total links to #{to}, which the page does not have").into());
        }
    }
    let (totals, folded) = (dom.find(">Totals<"), dom.find("<details"));
    if !matches!((totals, folded), (Some(t), Some(f)) if t < f) || dom.matches("<details>").count() != 2 {
        return Err("the page does not open on the totals with the two long lists folded (closed)".into());
    }
    Ok(())
}

// ---------------------------------------------------------------------------

fn main() {
    let args = Arguments::from_args();
    let tlc = clink_formal::locate(None, None);
    let chrome = chromium();
    let needs_tlc = |name: &str, f: fn() -> Result<(), Failed>| match &tlc {
        Ok(_) => Trial::test(name, f),
        Err(_) => Trial::test(name, || Ok(())).with_ignored_flag(true).with_kind("tlc"),
    };
    let browser = |name: &str, needs_tlc: bool, f: fn(&Path) -> Result<(), Failed>| match (&chrome, &tlc) {
        (Some(c), Ok(_)) => {
            let c = c.clone();
            Trial::test(name, move || f(&c))
        }
        (Some(c), Err(_)) if !needs_tlc => {
            let c = c.clone();
            Trial::test(name, move || f(&c))
        }
        (None, _) => Trial::test(name, || Ok(())).with_ignored_flag(true).with_kind("browser"),
        (Some(_), Err(_)) => Trial::test(name, || Ok(())).with_ignored_flag(true).with_kind("tlc"),
    };
    let trials = vec![
        Trial::test("outline::good_bundle", || {
            snapshot("good-bundle-replay", &good_page("replay")?);
            Ok(())
        }),
        needs_tlc("outline::rejected_trace", || {
            let (k, event) = expected_rejection()?;
            let (html, code) = trace_page(REJECTED)?;
            if code != 1 {
                return Err(format!("exit {code}, expected 1 (rejected)").into());
            }
            if !html.contains(&format!("<tr class=\"diverging\" id=\"divergence-row\"><td>{k}</td>"))
                || !html.contains(&format!("REJECTED at event {k} of"))
                || !html.contains(&format!("<strong>{event}</strong>"))
            {
                return Err(format!("the page does not highlight event {k} ({event})").into());
            }
            snapshot("rejected-trace", &html);
            Ok(())
        }),
        needs_tlc("outline::bundle_conformance_divergence", bundle_divergence),
        Trial::test("escaping::hostile_bundle", || assert_escaped(&hostile_page()?)),
        Trial::test("scale::ten_thousand_events", ten_thousand_events),
        browser("browser::rejected_trace", true, browser_rejected),
        browser("browser::good_bundle", false, browser_good),
        browser("browser::hostile_bundle", false, browser_hostile),
        browser("browser::ten_thousand_events", false, browser_ten_thousand),
        browser("browser::replay_ab", false, browser_replay_ab),
    ];
    libtest_mimic::run(&args, trials).exit();
}
