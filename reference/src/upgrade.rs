//! The upgrade check's reference: from an upgrade test definition alone
//! (`clink-upgrade-test` version 1), the seeded input it fixes, and the rows
//! and logical state the example job's specification expects at the cut and
//! at END.
//!
//! It owns the input generator (the gate writes the builds' input with it,
//! so the input is a function of the definition) and the expectation. It
//! never reads what a build wrote and shares no code with the engine or the
//! harness: the specification is applied by `example::State` (an event falls
//! in the window [s, s + size); a window emits when the watermark reaches its
//! end; an idle timer fires at the first watermark at or past it and emits
//! when `last_seen` has not moved; END advances the watermark past
//! everything).
//!
//! State rows are lists of strings: the role (`source`, `windows`, `idle`),
//! the kind (`source.position`, `window`, `last_seen`, `idle_count`,
//! `timer`) and typed values written `<type>:<text>` (`string:acct-1`,
//! `int:3`, `timestamp:1000`, `decimal:12.5` with no trailing zero, `bool:true`,
//! `null`). A gate converts a build's listing into the same form.

use serde_json::Value as Json;

use crate::example::{parse_cents, parse_time, render_cents, ReferenceParams, State};
use crate::ReferenceError;

pub const TEST_FORMAT: &str = "clink-upgrade-test";
pub const TEST_VERSION: u64 = 1;
pub const REFERENCE_FORMAT: &str = "clink-upgrade-reference";

/// What the reference reads of a definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Semantics {
    pub window_ms: i64,
    pub idle_timeout_ms: i64,
    pub seed: u64,
    pub accounts: u64,
    pub segments: u64,
    pub cut_after: u64,
    pub events_per_segment: u64,
    pub start_ms: i64,
    pub step_ms: i64,
    pub watermark_every: u64,
    pub retire_per_segment: u64,
}

fn invalid(what: impl Into<String>) -> ReferenceError {
    ReferenceError::Input { at: "test definition".into(), what: what.into() }
}

fn int(doc: &Json, path: &[&str]) -> Result<i64, ReferenceError> {
    let mut v = doc;
    for p in path {
        v = v.get(p).ok_or_else(|| invalid(format!("no field {}", path.join("."))))?;
    }
    v.as_i64().ok_or_else(|| invalid(format!("{} is not an integer", path.join("."))))
}

/// An integer in `[min, max]`; one outside is refused, never clamped.
fn bounded(doc: &Json, path: &[&str], min: i64, max: i64) -> Result<u64, ReferenceError> {
    let v = int(doc, path)?;
    if v < min || v > max {
        return Err(invalid(format!("{} is {v}; it must be between {min} and {max}", path.join("."))));
    }
    Ok(v as u64)
}

fn positive(doc: &Json, path: &[&str], max: i64) -> Result<u64, ReferenceError> {
    bounded(doc, path, 1, max)
}

/// The seed: any integer from 0 to 2^64 - 1 (a negative one is refused,
/// never reinterpreted).
fn seed(doc: &Json) -> Result<u64, ReferenceError> {
    let v = doc.get("input").and_then(|i| i.get("seed")).ok_or_else(|| invalid("no field input.seed"))?;
    v.as_u64().ok_or_else(|| invalid(format!("input.seed is {v}; it must be an integer from 0 to {}", u64::MAX)))
}

/// Reads the semantics and the input of a definition; another format or
/// version is refused, never guessed at.
pub fn semantics(test_json: &[u8]) -> Result<Semantics, ReferenceError> {
    let doc: Json = serde_json::from_slice(test_json).map_err(|e| invalid(e.to_string()))?;
    if doc.get("format").and_then(Json::as_str) != Some(TEST_FORMAT) {
        return Err(invalid(format!("not a {TEST_FORMAT} document")));
    }
    if doc.get("version").and_then(Json::as_u64) != Some(TEST_VERSION) {
        return Err(invalid(format!("{TEST_FORMAT} version {} is unsupported", doc["version"])));
    }
    let s = Semantics {
        window_ms: positive(&doc, &["job", "window_ms"], 1 << 40)? as i64,
        idle_timeout_ms: positive(&doc, &["job", "idle_timeout_ms"], 1 << 40)? as i64,
        seed: seed(&doc)?,
        accounts: positive(&doc, &["input", "accounts"], 10_000)?,
        segments: positive(&doc, &["input", "segments"], 1_000)?,
        cut_after: positive(&doc, &["input", "cut_after"], 1_000)?,
        events_per_segment: positive(&doc, &["input", "events_per_segment"], 100_000)?,
        start_ms: positive(&doc, &["input", "start_ms"], 1 << 50)? as i64,
        step_ms: positive(&doc, &["input", "step_ms"], 1 << 20)? as i64,
        watermark_every: positive(&doc, &["input", "watermark_every"], 100_000)?,
        retire_per_segment: bounded(&doc, &["input", "retire_per_segment"], 0, 10_000)?,
    };
    if s.cut_after >= s.segments {
        return Err(invalid("input.cut_after must leave at least one segment for the continuation"));
    }
    Ok(s)
}

/// xorshift64*: the definition's seed fixes every choice.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// The input's segments, `(file name, text)` in order: the first
/// `cut_after` are read before the cut, the rest are the continuation (the
/// last one ends with END). Event times never fall behind a watermark.
pub fn generate_input(s: &Semantics) -> Vec<(String, String)> {
    let mut rng = Rng(s.seed | 1);
    let mut segments = Vec::new();
    let mut k: i64 = 0;
    for seg in 0..s.segments {
        let active = s.accounts.saturating_sub(seg * s.retire_per_segment).max(1);
        let mut text = String::new();
        for i in 0..s.events_per_segment {
            let base = s.start_ms + k * s.step_ms;
            let time = base + (rng.next() % s.step_ms as u64) as i64;
            let account = rng.next() % active;
            let cents = (rng.next() % 100_000) as i128;
            text.push_str(&format!("E,{time},acct-{account},{}\n", render_cents(cents)));
            if (i + 1) % s.watermark_every == 0 {
                text.push_str(&format!("W,{base}\n"));
            }
            k += 1;
        }
        if seg + 1 == s.segments {
            text.push_str("END\n");
        }
        segments.push((format!("segment-{seg:04}.txt"), text));
    }
    segments
}

/// What the specification expects at one point of the input.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Expected {
    /// `account,window_start,window_end,count,sum`
    pub windows: Vec<String>,
    /// `account,last_seen,idle_count`
    pub idle: Vec<String>,
    /// Logical state rows (see the module's documentation).
    pub state: Vec<Vec<String>>,
}

/// The expectation at the cut and at END.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expectation {
    pub at_cut: Expected,
    pub at_end: Expected,
}

impl Expectation {
    pub fn to_json(&self) -> Json {
        let one = |e: &Expected| serde_json::json!({"windows": e.windows, "idle": e.idle, "state": e.state});
        serde_json::json!({
            "format": REFERENCE_FORMAT,
            "version": 1,
            "at_cut": one(&self.at_cut),
            "at_end": one(&self.at_end),
        })
    }
}

/// A decimal's text without trailing zeros (`12.50` → `12.5`, `3.00` → `3`).
pub fn normal_decimal(text: &str) -> String {
    match text.split_once('.') {
        Some((whole, frac)) => {
            let frac = frac.trim_end_matches('0');
            let whole = if whole.is_empty() || whole == "-" { format!("{whole}0") } else { whole.to_string() };
            let text = if frac.is_empty() { whole } else { format!("{whole}.{frac}") };
            if text == "-0" {
                "0".into()
            } else {
                text
            }
        }
        None => text.to_string(),
    }
}

fn s(v: impl std::fmt::Display) -> String {
    format!("string:{v}")
}

fn ts(v: i64) -> String {
    format!("timestamp:{v}")
}

fn int_v(v: impl std::fmt::Display) -> String {
    format!("int:{v}")
}

fn state_rows(state: &State, p: ReferenceParams, position: [String; 4]) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    let mut source = vec!["source".to_string(), "source.position".into()];
    source.extend(position);
    rows.push(source);
    for ((account, start), (count, cents)) in &state.windows {
        rows.push(vec![
            "windows".into(),
            "window".into(),
            s(account),
            ts(*start),
            int_v(count),
            format!("decimal:{}", normal_decimal(&render_cents(*cents))),
        ]);
        rows.push(vec![
            "windows".into(),
            "timer".into(),
            s("event"),
            ts(start + p.window_ms),
            int_v(start),
            s(account),
        ]);
    }
    for (account, seen) in &state.last_seen {
        rows.push(vec!["idle".into(), "last_seen".into(), s(account), ts(*seen)]);
    }
    for (account, n) in &state.idle_count {
        rows.push(vec!["idle".into(), "idle_count".into(), s(account), int_v(n)]);
    }
    for (time, account) in &state.idle_timers {
        rows.push(vec!["idle".into(), "timer".into(), s("event"), ts(*time), int_v(0), s(account)]);
    }
    rows.sort();
    rows
}

/// The rows and state the job's specification expects from this input.
pub fn expect(s: &Semantics, segments: &[(String, String)]) -> Result<Expectation, ReferenceError> {
    let p = ReferenceParams { window_ms: s.window_ms, idle_timeout_ms: s.idle_timeout_ms };
    let mut state = State::default();
    let mut at_cut = None;
    let mut last_watermark: Option<i64> = None;
    let mut ended = false;
    for (n, (name, text)) in segments.iter().enumerate() {
        let mut lines = 0u64;
        for (i, line) in text.lines().enumerate() {
            lines += 1;
            let bad = |what: String| ReferenceError::Input { at: format!("{name}:{}", i + 1), what };
            let fields: Vec<&str> = line.split(',').collect();
            match fields[..] {
                ["E", t, account, amount] => {
                    let t = parse_time(t).ok_or_else(|| bad("bad time".into()))?;
                    if state.watermark.is_some_and(|w| t < w) {
                        return Err(bad(format!("event at {t} is behind the watermark: the contract is broken")));
                    }
                    let cents = parse_cents(amount).ok_or_else(|| bad(format!("bad amount {amount:?}")))?;
                    state.event(t, account, cents, p);
                }
                ["W", t] => {
                    let t = parse_time(t).ok_or_else(|| bad("bad watermark".into()))?;
                    if last_watermark.is_none_or(|w| t > w) {
                        last_watermark = Some(t);
                    }
                    state.advance(t, p);
                }
                ["END"] => {
                    ended = true;
                    state.advance(i64::MAX, p);
                }
                _ => return Err(bad(format!("unreadable line {line:?}"))),
            }
        }
        let position = |ended: bool| {
            [
                format!("string:{name}"),
                int_v(lines),
                last_watermark.map_or("null".to_string(), ts),
                format!("bool:{ended}"),
            ]
        };
        if n as u64 + 1 == s.cut_after {
            at_cut = Some(Expected {
                windows: state.out.windows.clone(),
                idle: state.out.idle.clone(),
                state: state_rows(&state, p, position(false)),
            });
        }
        if n + 1 == segments.len() {
            let at_end = Expected {
                windows: state.out.windows.clone(),
                idle: state.out.idle.clone(),
                state: state_rows(&state, p, position(ended)),
            };
            let at_cut = at_cut.ok_or_else(|| invalid("the cut is past the input"))?;
            return Ok(Expectation { at_cut, at_end });
        }
    }
    Err(invalid("no input"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEF: &str = r#"{"format": "clink-upgrade-test", "version": 1,
        "job": {"window_ms": 10000, "idle_timeout_ms": 30000},
        "input": {"seed": 7, "accounts": 4, "segments": 3, "cut_after": 2, "events_per_segment": 30,
                  "start_ms": 1000, "step_ms": 700, "watermark_every": 5, "retire_per_segment": 1}}"#;

    #[test]
    fn the_input_is_a_function_of_the_definition() {
        let s = semantics(DEF.as_bytes()).unwrap();
        assert_eq!(generate_input(&s), generate_input(&s));
        let input = generate_input(&s);
        assert_eq!(input.len(), 3);
        assert!(input[2].1.ends_with("END\n"));
        assert!(!input[1].1.contains("END"));
    }

    #[test]
    fn windows_are_open_and_timers_pending_at_the_cut_and_nothing_at_end() {
        let s = semantics(DEF.as_bytes()).unwrap();
        let e = expect(&s, &generate_input(&s)).unwrap();
        let kinds = |x: &Expected, k: &str| x.state.iter().filter(|r| r[1] == k).count();
        assert!(kinds(&e.at_cut, "window") > 0);
        assert!(kinds(&e.at_cut, "timer") > 0);
        assert_eq!(kinds(&e.at_end, "window"), 0);
        assert_eq!(kinds(&e.at_end, "timer"), 0);
        assert!(e.at_end.windows.len() > e.at_cut.windows.len());
        assert!(!e.at_end.idle.is_empty(), "retired accounts go idle");
        let position = e.at_end.state.iter().find(|r| r[1] == "source.position").unwrap();
        assert_eq!(position[5], "bool:true");
    }

    #[test]
    fn another_format_or_version_is_refused() {
        assert!(semantics(DEF.replace("\"version\": 1", "\"version\": 2").as_bytes()).is_err());
        assert!(semantics(DEF.replace("clink-upgrade-test", "other").as_bytes()).is_err());
        assert!(semantics(b"not json").is_err());
    }

    #[test]
    fn a_value_out_of_range_is_refused_never_clamped() {
        for (bad, field) in [
            ("\"retire_per_segment\": 10001", "input.retire_per_segment"),
            ("\"retire_per_segment\": -1", "input.retire_per_segment"),
            ("\"retire_per_segment\": 1.5", "input.retire_per_segment"),
            ("\"seed\": -7", "input.seed"),
        ] {
            let key = bad.split(':').next().unwrap();
            let original = DEF.split(key).nth(1).unwrap().split([',', '}']).next().unwrap();
            let doc = DEF.replace(&format!("{key}{original}"), bad);
            assert_ne!(doc, DEF, "{bad} was not substituted");
            let err = semantics(doc.as_bytes()).unwrap_err().to_string();
            assert!(err.contains(field), "{bad}: {err}");
        }
        let edge = DEF.replace("\"retire_per_segment\": 1", "\"retire_per_segment\": 10000");
        assert_eq!(semantics(edge.as_bytes()).unwrap().retire_per_segment, 10_000);
        let zero = DEF.replace("\"retire_per_segment\": 1", "\"retire_per_segment\": 0");
        assert_eq!(semantics(zero.as_bytes()).unwrap().retire_per_segment, 0);
    }

    #[test]
    fn decimals_are_written_without_trailing_zeros() {
        assert_eq!(normal_decimal("12.50"), "12.5");
        assert_eq!(normal_decimal("3.00"), "3");
        assert_eq!(normal_decimal("-0.00"), "0");
        assert_eq!(normal_decimal("7"), "7");
    }
}
