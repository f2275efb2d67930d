//! The deterministic input generator behind `clink gen-input`.
//!
//! The same seed, event count and account count always give the same bytes:
//! the pseudo-random stream is SplitMix64, written out here because the
//! generated inputs back committed fixtures and a crate's generator may change
//! its stream between versions. Events are mostly in order (each at most 1.5 s
//! behind the newest), a watermark line follows every 40 events, and no event
//! is ever behind the last watermark. Some accounts are rare, so idle spells
//! longer than the idle operator's timeout occur.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// SplitMix64: a tiny, well-studied generator whose stream is fixed by its definition.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[derive(Debug, Clone)]
pub struct GenOptions {
    pub seed: u64,
    pub events: u64,
    pub accounts: u32,
    pub segment_events: u64,
    pub out: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenSummary {
    pub segments: u64,
    pub events: u64,
    pub watermarks: u64,
    pub bytes: u64,
}

pub const START_TIME_MS: i64 = 1_700_000_000_000;
const MAX_LATENESS_MS: u64 = 1_500;
const WATERMARK_LAG_MS: i64 = 2_000;
const WATERMARK_EVERY: u64 = 40;

/// Writes `segment-NNNN.txt` files into `out`, which must hold no segment yet.
pub fn generate(options: &GenOptions) -> io::Result<GenSummary> {
    if options.accounts == 0 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "--accounts must be at least 1"));
    }
    fs::create_dir_all(&options.out)?;
    if has_segments(&options.out)? {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} already holds segment files; choose an empty directory", options.out.display()),
        ));
    }
    let per_segment = options.segment_events.max(1);
    let mut summary = GenSummary { segments: 0, events: 0, watermarks: 0, bytes: 0 };
    let mut watermark = i64::MIN;
    let mut body = String::new();
    for (i, event) in (0..options.events).zip(events(options.seed, options.accounts)) {
        let time = event.time.max(watermark);
        body.push_str(&format!("E,{time},{},{}\n", event.account, event.amount));
        summary.events += 1;
        if (i + 1) % WATERMARK_EVERY == 0 && event.newest - WATERMARK_LAG_MS > watermark {
            watermark = event.newest - WATERMARK_LAG_MS;
            body.push_str(&format!("W,{watermark}\n"));
            summary.watermarks += 1;
        }
        let last = i + 1 == options.events;
        if last {
            body.push_str("END\n");
        }
        if (i + 1) % per_segment == 0 || last {
            summary.bytes += write_segment(&options.out, summary.segments, &body)?;
            summary.segments += 1;
            body.clear();
        }
    }
    if options.events == 0 {
        summary.bytes += write_segment(&options.out, 0, "END\n")?;
        summary.segments = 1;
    }
    Ok(summary)
}

/// One generated event, before the segment writer holds it at the last
/// watermark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenEvent {
    pub time: i64,
    /// The newest time generated so far (the watermark follows it).
    pub newest: i64,
    pub account: String,
    /// Written as the input writes it: `12`, `12.5` or `12.50`.
    pub amount: String,
}

/// The endless event stream of a seed: the events `generate` writes, and
/// `clink produce` publishes, in the same order.
pub fn events(seed: u64, accounts: u32) -> impl Iterator<Item = GenEvent> {
    let mut rng = SplitMix64::new(seed);
    let mut newest = START_TIME_MS;
    let accounts = accounts.max(1);
    std::iter::from_fn(move || {
        newest += rng.below(400) as i64;
        let time = newest - rng.below(MAX_LATENESS_MS + 1) as i64;
        let account = skewed_account(&mut rng, accounts);
        let amount = amount(&mut rng);
        Some(GenEvent { time, newest, account: format!("acct-{account:03}"), amount })
    })
}

fn has_segments(dir: &Path) -> io::Result<bool> {
    for entry in fs::read_dir(dir)? {
        if entry?.file_name().to_string_lossy().starts_with("segment-") {
            return Ok(true);
        }
    }
    Ok(false)
}

fn write_segment(dir: &Path, index: u64, body: &str) -> io::Result<u64> {
    let path = dir.join(format!("segment-{index:04}.txt"));
    let mut file = fs::OpenOptions::new().write(true).create_new(true).open(&path)?;
    file.write_all(body.as_bytes())?;
    file.sync_all()?;
    Ok(body.len() as u64)
}

/// Low account numbers are frequent, high ones rare (and so often idle).
fn skewed_account(rng: &mut SplitMix64, accounts: u32) -> u32 {
    let u = rng.unit();
    ((u * u * u) * f64::from(accounts)) as u32 % accounts
}

/// An amount with at most two fraction digits, written in varied forms.
fn amount(rng: &mut SplitMix64) -> String {
    let cents = 1 + rng.below(99_999) as i64;
    let cents = if rng.below(20) == 0 { -cents } else { cents };
    let sign = if cents < 0 { "-" } else { "" };
    let abs = cents.unsigned_abs();
    match rng.below(4) {
        0 => format!("{sign}{}", abs / 100),
        1 => format!("{sign}{}.{}", abs / 100, (abs % 100) / 10),
        _ => format!("{sign}{}.{:02}", abs / 100, abs % 100),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operators::segment_source::validate_input;

    #[test]
    fn the_stream_is_fixed_by_its_definition() {
        let mut rng = SplitMix64::new(1234567);
        assert_eq!(rng.next_u64(), 6457827717110365317);
        assert_eq!(rng.next_u64(), 3203168211198807973);
    }

    #[test]
    fn generated_input_is_deterministic_and_valid() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let options = |out: &Path| GenOptions {
            seed: 7,
            events: 2_500,
            accounts: 20,
            segment_events: 1_000,
            out: out.to_path_buf(),
        };
        let summary = generate(&options(a.path())).unwrap();
        generate(&options(b.path())).unwrap();
        assert_eq!(summary.segments, 3);
        for seg in ["segment-0000.txt", "segment-0001.txt", "segment-0002.txt"] {
            assert_eq!(fs::read(a.path().join(seg)).unwrap(), fs::read(b.path().join(seg)).unwrap());
        }
        let checked = validate_input(a.path()).unwrap();
        assert_eq!(checked.events, 2_500);
        assert!(checked.has_end);
        assert!(generate(&options(a.path())).is_err(), "an existing input is never overwritten");
    }
}
