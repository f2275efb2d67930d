//! The independent reference for the example job: the windows and idle rows
//! its input must produce, computed from the input files alone.
//!
//! It deliberately shares nothing with the engine: it parses the
//! segment files itself, keeps amounts as integer cents, and renders its own
//! lines. A defect in the engine's operators, encoding or rendering therefore
//! cannot hide by being repeated here.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

use crate::ReferenceError;

#[derive(Debug, Clone, Copy)]
pub struct ReferenceParams {
    pub window_ms: i64,
    pub idle_timeout_ms: i64,
}

impl Default for ReferenceParams {
    fn default() -> Self {
        Self { window_ms: 10_000, idle_timeout_ms: 30_000 }
    }
}

/// The expected output lines of each sink of the example job.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReferenceOutput {
    /// `account,window_start,window_end,count,sum`
    pub windows: Vec<String>,
    /// `account,last_seen,idle_count`
    pub idle: Vec<String>,
}

/// The example job's state by its specification (shared with the upgrade
/// reference, which reads it at the cut).
#[derive(Default)]
pub(crate) struct State {
    pub(crate) watermark: Option<i64>,
    pub(crate) windows: BTreeMap<(String, i64), (u64, i128)>,
    pub(crate) last_seen: BTreeMap<String, i64>,
    pub(crate) idle_count: BTreeMap<String, u64>,
    pub(crate) idle_timers: BTreeSet<(i64, String)>,
    pub(crate) out: ReferenceOutput,
}

/// The input's segment files (`segment-*.txt`), in the order they are read.
pub(crate) fn segment_names(input_dir: &Path) -> Result<Vec<String>, ReferenceError> {
    let io = |source| ReferenceError::Io { path: input_dir.to_path_buf(), source };
    let mut names = Vec::new();
    for entry in fs::read_dir(input_dir).map_err(io)? {
        let name = entry.map_err(io)?.file_name().to_string_lossy().into_owned();
        if name.starts_with("segment-") && name.ends_with(".txt") {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

pub fn compute(input_dir: &Path, params: ReferenceParams) -> Result<ReferenceOutput, ReferenceError> {
    let names = segment_names(input_dir)?;
    let mut state = State::default();
    for name in names {
        let path = input_dir.join(&name);
        let text = fs::read_to_string(&path).map_err(|source| ReferenceError::Io { path: path.clone(), source })?;
        for (i, line) in text.lines().enumerate() {
            let fields: Vec<&str> = line.split(',').collect();
            let bad = |what: String| ReferenceError::Input { at: format!("{}:{}", path.display(), i + 1), what };
            match fields[..] {
                ["E", t, account, amount] => {
                    let t = parse_time(t).ok_or_else(|| bad("bad time".into()))?;
                    let cents = parse_cents(amount).ok_or_else(|| bad(format!("bad amount {amount:?}")))?;
                    state.event(t, account, cents, params);
                }
                ["W", t] => {
                    let t = parse_time(t).ok_or_else(|| bad("bad watermark".into()))?;
                    state.advance(t, params);
                }
                ["END"] => state.advance(i64::MAX, params),
                _ => return Err(bad(format!("unreadable line {line:?}"))),
            }
        }
    }
    Ok(state.out)
}

impl State {
    pub(crate) fn event(&mut self, t: i64, account: &str, cents: i128, p: ReferenceParams) {
        let start = t.div_euclid(p.window_ms) * p.window_ms;
        let late = self.watermark.is_some_and(|w| start + p.window_ms <= w);
        if !late {
            let w = self.windows.entry((account.to_string(), start)).or_insert((0, 0));
            w.0 += 1;
            w.1 = w.1.saturating_add(cents);
        }
        let seen = self.last_seen.get(account).copied();
        if seen.is_none_or(|s| t > s) {
            self.last_seen.insert(account.to_string(), t);
            self.idle_timers.insert((t + p.idle_timeout_ms, account.to_string()));
        }
    }

    pub(crate) fn advance(&mut self, w: i64, p: ReferenceParams) {
        if self.watermark.is_some_and(|cur| w <= cur) {
            return;
        }
        self.watermark = Some(w);
        let due: Vec<(String, i64)> =
            self.windows.keys().filter(|(_, start)| start + p.window_ms <= w).cloned().collect();
        for key in due {
            if let Some((count, cents)) = self.windows.remove(&key) {
                let (account, start) = key;
                self.out.windows.push(format!(
                    "{account},{start},{},{count},{}",
                    start + p.window_ms,
                    render_cents(cents)
                ));
            }
        }
        while let Some((time, account)) = self.idle_timers.first().cloned() {
            if time > w {
                break;
            }
            self.idle_timers.pop_first();
            let seen = self.last_seen[&account];
            if seen + p.idle_timeout_ms == time {
                let n = self.idle_count.entry(account.clone()).or_insert(0);
                *n += 1;
                self.out.idle.push(format!("{account},{seen},{n}"));
            }
        }
    }
}

/// Times are non-negative and at most 2^60, so window and timer arithmetic
/// cannot overflow.
pub(crate) fn parse_time(text: &str) -> Option<i64> {
    let t: i64 = text.parse().ok()?;
    (0..=1 << 60).contains(&t).then_some(t)
}

pub(crate) fn parse_cents(text: &str) -> Option<i128> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (whole, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if whole.is_empty() || frac.len() > 2 || !whole.chars().chain(frac.chars()).all(|c| c.is_ascii_digit()) {
        return None;
    }
    if digits.contains('.') && frac.is_empty() {
        return None;
    }
    let cents =
        whole.parse::<i128>().ok()?.checked_mul(100)?.checked_add(format!("{frac:0<2}").parse::<i128>().ok()?)?;
    Some(if negative { -cents } else { cents })
}

pub(crate) fn render_cents(cents: i128) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    let abs = cents.unsigned_abs();
    format!("{sign}{}.{:02}", abs / 100, abs % 100)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cents_parse_and_render() {
        assert_eq!(parse_cents("12"), Some(1200));
        assert_eq!(parse_cents("12.5"), Some(1250));
        assert_eq!(parse_cents("-0.07"), Some(-7));
        assert_eq!(parse_cents("1."), None);
        assert_eq!(render_cents(-7), "-0.07");
        assert_eq!(render_cents(1250), "12.50");
    }

    #[test]
    fn windows_and_idle_rows_from_a_small_input() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(
            dir.path().join("segment-0000.txt"),
            "E,1000,a,1.5\nE,2000,a,2\nE,12000,b,0.25\nW,10000\nE,45000,b,1\nW,50000\nEND\n",
        )
        .unwrap();
        let out = compute(dir.path(), ReferenceParams::default()).unwrap();
        assert_eq!(out.windows, vec!["a,0,10000,2,3.50", "b,10000,20000,1,0.25", "b,40000,50000,1,1.00"]);
        // a idle at 2000+30000 (fires at W 50000); b at 45000+30000 fires at END.
        assert_eq!(out.idle, vec!["a,2000,1", "b,45000,1"]);
    }
}
