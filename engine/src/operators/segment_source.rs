//! The segment-file source: reads `segment-NNNN.txt` files of an input directory
//! in name order. Lines are `E,<time_ms>,<account>,<amount>` (a record),
//! `W,<time_ms>` (a watermark) and `END` (the end of the input).
//!
//! Its position (segment, line, last watermark) is its operator state, so a
//! restored source resumes exactly after the last line its checkpoint covered
//! and re-emits its last watermark first. The whole input is checked once
//! before the job starts ([`validate_input`]), so a malformed line refuses the
//! run before anything is written.
//!
//! At the end of the input available so far (no END read yet) the source
//! stops with a savepoint, or, following its input (`clink run
//! --follow-input`), waits for the next segment: segments are published
//! whole, by rename, and never change once published. A requested stop ends
//! the input at the next read either way.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use serde_json::Value as Json;

use clink_basics::fields::FieldError;

use crate::checkpoint::{SlotKind, StateSlots};
use crate::codec::{Reader, Writer};
use crate::timers::NO_WATERMARK;
use crate::value::{ColumnType, Decimal, Schema, Value};

use super::{defaults, Build, Descriptor, OperatorError, Setup, Source, SourceItem, StateDecoding, StopSignal};

pub const TYPE: &str = "segment_source";
pub const POSITION_SLOT: &str = "position";
pub const POSITION_VERSION: u32 = 1;
/// Amounts carry at most this many fraction digits.
pub const AMOUNT_SCALE: u8 = 2;
/// A line longer than this is refused.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

pub fn output_schema() -> Schema {
    Schema::of(&[
        ("time", ColumnType::Timestamp),
        ("account", ColumnType::String),
        ("amount", ColumnType::Decimal { scale: AMOUNT_SCALE }),
    ])
}

/// One parsed input line.
#[derive(Debug, Clone, PartialEq)]
pub enum Line {
    Event { time: i64, account: String, amount: Decimal },
    Watermark(i64),
    End,
}

/// Why an input line is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LineError(pub String);

/// Parses one line (without its newline).
pub fn parse_line(line: &str) -> Result<Line, LineError> {
    Ok(match parse_borrowed(line)? {
        Parsed::Event { time, account, amount } => Line::Event { time, account: account.to_string(), amount },
        Parsed::Watermark(time) => Line::Watermark(time),
        Parsed::End => Line::End,
    })
}

/// One parsed line, its account still borrowed from the line: the one
/// parser, which [`parse_line`], the source and [`validate_input`] share.
enum Parsed<'a> {
    Event { time: i64, account: &'a str, amount: Decimal },
    Watermark(i64),
    End,
}

fn parse_borrowed(line: &str) -> Result<Parsed<'_>, LineError> {
    let line = line.strip_suffix('\r').unwrap_or(line);
    if line == "END" {
        return Ok(Parsed::End);
    }
    // Fields split without collecting them: this runs for every input line.
    let mut fields = line.split(',');
    match (fields.next(), fields.next(), fields.next(), fields.next(), fields.next()) {
        (Some("E"), Some(time), Some(account), Some(amount), None) => {
            let time = parse_time(time)?;
            if account.is_empty() {
                return Err(LineError("the account is empty".into()));
            }
            let amount = Decimal::parse(amount, AMOUNT_SCALE).map_err(|e| LineError(e.to_string()))?;
            Ok(Parsed::Event { time, account, amount })
        }
        (Some("W"), Some(time), None, _, _) => Ok(Parsed::Watermark(parse_time(time)?)),
        _ => Err(LineError(format!(
            "{:?} is not E,<time_ms>,<account>,<amount> or W,<time_ms> or END",
            truncate(line, 80)
        ))),
    }
}

/// The largest time a line may carry: far beyond any real clock, and far
/// enough below `i64::MAX` that window ends and timer times cannot overflow.
pub const MAX_TIME_MS: i64 = 1 << 60;

fn parse_time(text: &str) -> Result<i64, LineError> {
    // One pass: every byte a digit (else that error, wherever it is), and
    // the value within range (else this one).
    let mut value: Option<i64> = Some(0);
    for b in text.bytes() {
        if !b.is_ascii_digit() {
            return Err(not_a_time(text));
        }
        value = value.and_then(|v| v.checked_mul(10)).and_then(|v| v.checked_add(i64::from(b - b'0')));
    }
    match value {
        _ if text.is_empty() => Err(not_a_time(text)),
        Some(t) if t <= MAX_TIME_MS => Ok(t),
        _ => Err(LineError(format!("time {} is out of range (0 to {MAX_TIME_MS})", truncate(text, 40)))),
    }
}

fn not_a_time(text: &str) -> LineError {
    LineError(format!("time {:?} is not a non-negative integer number of milliseconds", truncate(text, 40)))
}

fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_string(),
    }
}

/// The segment files of a directory, in name order.
pub fn list_segments(dir: &Path) -> Result<Vec<String>, OperatorError> {
    let entries = std::fs::read_dir(dir).map_err(OperatorError::io(dir))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(OperatorError::io(dir))?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if is_segment_name(&name) {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

fn is_segment_name(name: &str) -> bool {
    name.strip_prefix("segment-")
        .and_then(|rest| rest.strip_suffix(".txt"))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// What a whole input holds, once every line parsed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InputSummary {
    pub segments: usize,
    pub events: u64,
    pub watermarks: u64,
    pub has_end: bool,
}

/// Reads every line of every segment and refuses the first that does not
/// parse, naming its file and line; also refuses lines after END. Segments
/// are read in parallel (this runs before the job starts, on its critical
/// path) and judged in name order, so the refusal is the one a single pass
/// in order would make.
pub fn validate_input(dir: &Path) -> Result<InputSummary, OperatorError> {
    let paths: Vec<PathBuf> = list_segments(dir)?.iter().map(|name| dir.join(name)).collect();
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, paths.len().max(1));
    let checks: Vec<SegmentCheck> = if workers == 1 {
        paths.iter().map(|p| check_segment(p)).collect()
    } else {
        let mut indexed: Vec<(usize, SegmentCheck)> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..workers)
                .map(|w| {
                    let paths = &paths;
                    scope.spawn(move || {
                        (w..paths.len()).step_by(workers).map(|i| (i, check_segment(&paths[i]))).collect::<Vec<_>>()
                    })
                })
                .collect();
            handles.into_iter().flat_map(|h| h.join().unwrap_or_default()).collect()
        });
        if indexed.len() != paths.len() {
            return Err(OperatorError::Protocol("a segment check stopped without an answer".into()));
        }
        indexed.sort_by_key(|(i, _)| *i);
        indexed.into_iter().map(|(_, check)| check).collect()
    };
    let mut summary = InputSummary::default();
    for (path, check) in paths.iter().zip(checks) {
        summary.segments += 1;
        if summary.has_end && check.lines > 0 {
            return Err(input_error(path, 1, "a line after END"));
        }
        if let Some(error) = check.error {
            return Err(error);
        }
        summary.events += check.events;
        summary.watermarks += check.watermarks;
        summary.has_end |= check.has_end;
    }
    Ok(summary)
}

/// One segment read on its own: what its lines held up to the first refusal.
#[derive(Debug, Default)]
struct SegmentCheck {
    /// Lines read whole (before any refusal).
    lines: u64,
    events: u64,
    watermarks: u64,
    has_end: bool,
    error: Option<OperatorError>,
}

fn check_segment(path: &Path) -> SegmentCheck {
    let mut check = SegmentCheck::default();
    if let Err(error) = check_lines(path, &mut check) {
        check.error = Some(error);
    }
    check
}

fn check_lines(path: &Path, check: &mut SegmentCheck) -> Result<(), OperatorError> {
    let mut reader = open(path)?;
    let mut buf = Vec::new();
    while let Some(line) = read_bounded_line(&mut reader, &mut buf, path, check.lines + 1)? {
        check.lines += 1;
        if check.has_end {
            return Err(input_error(path, check.lines, "a line after END"));
        }
        match parse_borrowed(line).map_err(|e| input_error(path, check.lines, &e.0))? {
            Parsed::Event { .. } => check.events += 1,
            Parsed::Watermark(_) => check.watermarks += 1,
            Parsed::End => check.has_end = true,
        }
    }
    Ok(())
}

fn input_error(path: &Path, line: u64, reason: &str) -> OperatorError {
    OperatorError::Input(format!("{}:{line}: {reason}", path.display()))
}

fn open(path: &Path) -> Result<BufReader<File>, OperatorError> {
    File::open(path).map(BufReader::new).map_err(OperatorError::io(path))
}

/// Reads one line into `buf` (reused from line to line) and returns it
/// without its newline; `None` at the end of the file.
fn read_bounded_line<'b>(
    reader: &mut BufReader<File>,
    buf: &'b mut Vec<u8>,
    path: &Path,
    line_no: u64,
) -> Result<Option<&'b str>, OperatorError> {
    buf.clear();
    let n = reader.by_ref().take(MAX_LINE_BYTES as u64 + 1).read_until(b'\n', buf).map_err(OperatorError::io(path))?;
    if n == 0 {
        return Ok(None);
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
    } else if n > MAX_LINE_BYTES {
        return Err(input_error(path, line_no, &format!("the line is longer than {MAX_LINE_BYTES} bytes")));
    }
    std::str::from_utf8(buf).map(Some).map_err(|_| input_error(path, line_no, "the line is not UTF-8"))
}

/// Where the source is: the segment it reads, how many of its lines it has
/// consumed, the last watermark it emitted, and whether it has read END.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Position {
    pub segment: String,
    pub line: u64,
    pub watermark: i64,
    pub ended: bool,
}

/// Decodes a source's position slot without touching the input: the restore
/// path's decoding, usable to check a snapshot on its own.
pub fn decode_position(slots: &StateSlots) -> Result<Position, OperatorError> {
    let slot =
        slots.get(POSITION_SLOT).ok_or_else(|| OperatorError::state(POSITION_SLOT, "missing from the snapshot"))?;
    if slot.version != POSITION_VERSION {
        return Err(OperatorError::state(POSITION_SLOT, format!("version {} is not {POSITION_VERSION}", slot.version)));
    }
    let mut r = Reader::new(&slot.bytes);
    let decoded = (|| {
        let segment = r.str()?.to_string();
        let line = r.u64()?;
        let watermark = r.i64()?;
        let ended = r.u8()? != 0;
        r.finish()?;
        Ok::<_, crate::codec::DecodeError>(Position { segment, line, watermark, ended })
    })();
    let position = decoded.map_err(|e| OperatorError::state(POSITION_SLOT, e))?;
    if !position.segment.is_empty() && !is_segment_name(&position.segment) {
        return Err(OperatorError::state(POSITION_SLOT, format!("{:?} is not a segment file name", position.segment)));
    }
    Ok(position)
}

pub struct SegmentSource {
    dir: PathBuf,
    position: Position,
    restored_watermark: Option<i64>,
    reader: Option<BufReader<File>>,
    /// The path of the segment `reader` reads (kept, not joined per line).
    reader_path: PathBuf,
    buf: Vec<u8>,
    follow: bool,
    stop: StopSignal,
}

/// How long a following source waits before it looks for a new segment again.
const FOLLOW_WAIT: std::time::Duration = std::time::Duration::from_millis(20);

impl SegmentSource {
    pub fn new(dir: PathBuf) -> Self {
        Self {
            dir,
            position: Position { segment: String::new(), line: 0, watermark: NO_WATERMARK, ended: false },
            restored_watermark: None,
            reader: None,
            reader_path: PathBuf::new(),
            buf: Vec::new(),
            follow: false,
            stop: StopSignal::default(),
        }
    }

    /// The same source, waiting for new segments at the end of its input
    /// (`follow`) and ending its input when `stop` is raised.
    pub fn following(mut self, follow: bool, stop: StopSignal) -> Self {
        self.follow = follow;
        self.stop = stop;
        self
    }

    /// What the source says when the input available now is read: a
    /// following source waits a moment and reports itself idle; otherwise
    /// the input is exhausted (the job stops with a savepoint).
    fn out_of_input(&self) -> SourceItem {
        if self.follow && !self.stop.is_requested() {
            std::thread::sleep(FOLLOW_WAIT);
            SourceItem::Idle
        } else {
            SourceItem::Exhausted
        }
    }

    pub fn position(&self) -> &Position {
        &self.position
    }

    fn segment_path(&self) -> PathBuf {
        self.dir.join(&self.position.segment)
    }

    /// Opens the next segment after the current one; false when none is left.
    fn advance_segment(&mut self) -> Result<bool, OperatorError> {
        let segments = list_segments(&self.dir)?;
        let next = segments.into_iter().find(|s| self.position.segment.is_empty() || *s > self.position.segment);
        match next {
            Some(name) => {
                self.position.segment = name;
                self.position.line = 0;
                self.reader_path = self.segment_path();
                self.reader = Some(open(&self.reader_path)?);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Reopens the current segment and skips the lines already consumed.
    fn reopen_at_position(&mut self) -> Result<(), OperatorError> {
        let path = self.segment_path();
        let mut reader = open(&path)?;
        for n in 1..=self.position.line {
            if read_bounded_line(&mut reader, &mut self.buf, &path, n)?.is_none() {
                return Err(OperatorError::Input(format!(
                    "{}: the restored position is line {} but the segment has only {} lines",
                    path.display(),
                    self.position.line,
                    n - 1
                )));
            }
        }
        self.reader = Some(reader);
        self.reader_path = path;
        Ok(())
    }
}

impl Source for SegmentSource {
    fn restore(&mut self, slots: Option<&StateSlots>) -> Result<(), OperatorError> {
        let Some(slots) = slots else {
            return Ok(());
        };
        self.position = decode_position(slots)?;
        if !self.position.segment.is_empty() && self.segment_path().exists() {
            self.reopen_at_position()?;
        }
        self.restored_watermark = (self.position.watermark != NO_WATERMARK).then_some(self.position.watermark);
        Ok(())
    }

    fn restored_watermark(&self) -> Option<i64> {
        self.restored_watermark
    }

    fn next_item(&mut self) -> Result<SourceItem, OperatorError> {
        if self.position.ended {
            return Ok(SourceItem::End);
        }
        if self.stop.is_requested() {
            return Ok(SourceItem::Exhausted);
        }
        loop {
            if self.reader.is_none() && !self.advance_segment()? {
                return Ok(self.out_of_input());
            }
            let path = &self.reader_path;
            let line_no = self.position.line + 1;
            let reader = self.reader.as_mut().ok_or_else(|| OperatorError::Protocol("no open segment".into()))?;
            let Some(line) = read_bounded_line(reader, &mut self.buf, path, line_no)? else {
                self.reader = None;
                if !self.advance_segment()? {
                    return Ok(self.out_of_input());
                }
                continue;
            };
            self.position.line = line_no;
            let parsed = parse_borrowed(line).map_err(|e| input_error(path, line_no, &e.0))?;
            return Ok(match parsed {
                Parsed::Event { time, account, amount } => SourceItem::Record(vec![
                    Value::Timestamp(time),
                    Value::Str(account.to_string()),
                    Value::Decimal(amount),
                ]),
                Parsed::Watermark(time) if time > self.position.watermark => {
                    self.position.watermark = time;
                    SourceItem::Watermark(time)
                }
                // A watermark that does not advance says nothing new.
                Parsed::Watermark(_) => continue,
                Parsed::End => {
                    self.position.ended = true;
                    SourceItem::End
                }
            });
        }
    }

    fn snapshot(&self) -> Result<StateSlots, OperatorError> {
        let mut w = Writer::new();
        w.str(&self.position.segment)
            .u64(self.position.line)
            .i64(self.position.watermark)
            .u8(u8::from(self.position.ended));
        let mut slots = StateSlots::new();
        slots.put(POSITION_SLOT, SlotKind::Operator, POSITION_VERSION, w.into_bytes());
        Ok(slots)
    }
}


pub const DESCRIPTOR: Descriptor = Descriptor {
    type_name: TYPE,
    build: Build::Source(build),
    plan,
    state: StateDecoding::Decode(decode_state),
    key_columns: defaults::no_key_columns,
    preflight,
    replays_as_live: true,
    confirmation: None,
    redivision: None,
};

fn plan(params: &Json, _input: Option<&Schema>) -> Result<Schema, FieldError> {
    defaults::no_params(params)?;
    Ok(output_schema())
}

fn build(setup: &Setup<'_>) -> Result<Box<dyn Source>, OperatorError> {
    let source = SegmentSource::new(setup.env.input_dir.clone());
    Ok(Box::new(source.following(setup.env.follow_input, setup.env.stop.clone())))
}

fn decode_state(slots: &StateSlots) -> Result<(), OperatorError> {
    decode_position(slots).map(|_| ())
}

fn preflight(setup: &Setup<'_>) -> Result<(), OperatorError> {
    if setup.env.input_dir.as_os_str().is_empty() {
        return Err(OperatorError::Input(format!(
            "operator {:?} reads segment files: name their directory with --input-dir",
            setup.uid
        )));
    }
    validate_input(&setup.env.input_dir).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    use proptest::prelude::*;

    proptest! {
        #[test]
        fn any_line_parses_or_is_refused_without_panicking(line in "\\PC{0,80}") {
            let _ = parse_line(&line);
        }

        #[test]
        fn well_formed_event_lines_round_trip(time in 0i64..=MAX_TIME_MS, account in "[a-z0-9-]{1,12}", cents in any::<i64>()) {
            let amount = Decimal::new(i128::from(cents), AMOUNT_SCALE);
            let line = format!("E,{time},{account},{amount}");
            prop_assert_eq!(parse_line(&line).unwrap(), Line::Event { time, account, amount });
        }
    }

    #[test]
    fn a_restored_position_in_an_absent_segment_goes_on_with_the_next() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("segment-0000.txt"), "E,1000,a,1\nW,1000\n").unwrap();
        let mut first = SegmentSource::new(dir.path().to_path_buf());
        assert!(matches!(first.next_item().unwrap(), SourceItem::Record(_)));
        assert_eq!(first.next_item().unwrap(), SourceItem::Watermark(1000));
        let slots = first.snapshot().unwrap();
        std::fs::remove_file(dir.path().join("segment-0000.txt")).unwrap();
        std::fs::write(dir.path().join("segment-0001.txt"), "E,2000,b,2\nEND\n").unwrap();
        let mut restored = SegmentSource::new(dir.path().to_path_buf());
        restored.restore(Some(&slots)).unwrap();
        assert_eq!(restored.restored_watermark(), Some(1000));
        let SourceItem::Record(row) = restored.next_item().unwrap() else { panic!("expected a record") };
        assert_eq!(row[1], Value::Str("b".into()));
        assert_eq!(restored.next_item().unwrap(), SourceItem::End);
    }

    #[test]
    fn lines_parse_or_are_refused_with_a_reason() {
        assert_eq!(
            parse_line("E,1000,acct-1,12.5").unwrap(),
            Line::Event { time: 1000, account: "acct-1".into(), amount: Decimal::new(1250, 2) }
        );
        assert_eq!(parse_line("W,5").unwrap(), Line::Watermark(5));
        assert_eq!(parse_line("END\r").unwrap(), Line::End);
        for bad in [
            "",
            "E,1,a",
            "E,x,a,1",
            "E,1,,1",
            "E,1,a,1.234",
            "W",
            "W,1,2",
            "end",
            "E,1,a,1,2",
            "X,1",
            "E,-5,a,1",
            "E,9223372036854775807,a,1",
            "W,-9223372036854775808",
        ] {
            assert!(parse_line(bad).is_err(), "{bad:?}");
        }
    }

    fn write_input(dir: &Path, segments: &[&str]) {
        for (i, body) in segments.iter().enumerate() {
            std::fs::write(dir.join(format!("segment-{i:04}.txt")), body).unwrap();
        }
    }

    fn drain(source: &mut SegmentSource) -> Vec<SourceItem> {
        let mut items = Vec::new();
        loop {
            let item = source.next_item().unwrap();
            let done = matches!(item, SourceItem::End | SourceItem::Exhausted);
            items.push(item);
            if done {
                return items;
            }
        }
    }

    #[test]
    fn a_restored_source_resumes_after_its_position() {
        let dir = tempfile::tempdir().unwrap();
        write_input(dir.path(), &["E,1,a,1\nW,1\nE,2,b,2\n", "W,3\nE,4,a,1.5\nEND\n"]);
        let mut source = SegmentSource::new(dir.path().to_path_buf());
        source.restore(None).unwrap();
        let mut first = Vec::new();
        for _ in 0..3 {
            first.push(source.next_item().unwrap());
        }
        let snapshot = source.snapshot().unwrap();
        let rest = drain(&mut source);

        let mut restored = SegmentSource::new(dir.path().to_path_buf());
        restored.restore(Some(&snapshot)).unwrap();
        assert_eq!(restored.restored_watermark(), Some(1));
        assert_eq!(drain(&mut restored), rest);
        assert_eq!(rest.last(), Some(&SourceItem::End));
        assert_eq!(rest.len(), 3, "W,3 / E,4 / END");
    }

    #[test]
    fn validation_names_the_file_and_line_at_fault() {
        let dir = tempfile::tempdir().unwrap();
        write_input(dir.path(), &["E,1,a,1\n", "W,1\nE,2,b,two\n"]);
        let err = validate_input(dir.path()).unwrap_err().to_string();
        assert!(err.contains("segment-0001.txt:2"), "{err}");

        let dir = tempfile::tempdir().unwrap();
        write_input(dir.path(), &["END\nE,1,a,1\n"]);
        let err = validate_input(dir.path()).unwrap_err().to_string();
        assert!(err.contains("after END"), "{err}");
    }

    #[test]
    fn segments_checked_in_parallel_are_judged_in_order() {
        // The first fault in the input's order is the one named, though
        // later segments (checked by another thread) fail too.
        let dir = tempfile::tempdir().unwrap();
        let mut segments = vec!["E,1,a,1\n"; 9];
        segments[3] = "E,1,a,1\nE,x,a,1\n";
        segments[6] = "bad\n";
        segments[7] = "also bad\n";
        write_input(dir.path(), &segments);
        let err = validate_input(dir.path()).unwrap_err().to_string();
        assert!(err.contains("segment-0003.txt:2") && err.contains("\"x\""), "{err}");
        // END in one segment: the next segment with a line is refused at its
        // first line, before its own (bad) lines are judged.
        let dir = tempfile::tempdir().unwrap();
        write_input(dir.path(), &["E,1,a,1\n", "END\n", "", "nonsense\n", "bad\n"]);
        let err = validate_input(dir.path()).unwrap_err().to_string();
        assert!(err.contains("segment-0003.txt:1: a line after END"), "{err}");
        // And a whole input is counted across its segments.
        let dir = tempfile::tempdir().unwrap();
        write_input(dir.path(), &["E,1,a,1\nW,1\n", "E,2,b,1\n", "W,2\nE,3,c,1\nEND\n"]);
        let summary = validate_input(dir.path()).unwrap();
        assert_eq!((summary.segments, summary.events, summary.watermarks, summary.has_end), (3, 3, 2, true));
    }

    #[test]
    fn a_restored_position_naming_another_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        write_input(dir.path(), &["E,1,a,1\n"]);
        for name in ["../../etc/passwd", "segment-0000.txt/../x", "notes.txt"] {
            let mut w = Writer::new();
            w.str(name).u64(0).i64(NO_WATERMARK).u8(0);
            let mut slots = StateSlots::new();
            slots.put(POSITION_SLOT, SlotKind::Operator, POSITION_VERSION, w.into_bytes());
            let mut source = SegmentSource::new(dir.path().to_path_buf());
            assert!(source.restore(Some(&slots)).is_err(), "{name}");
        }
    }

    #[test]
    fn a_following_source_waits_for_the_next_segment_and_a_stop_ends_its_input() {
        let dir = tempfile::tempdir().unwrap();
        write_input(dir.path(), &["E,1,a,1\nW,1\n"]);
        let stop = StopSignal::default();
        let mut source = SegmentSource::new(dir.path().to_path_buf()).following(true, stop.clone());
        source.restore(None).unwrap();
        assert!(matches!(source.next_item().unwrap(), SourceItem::Record(_)));
        assert_eq!(source.next_item().unwrap(), SourceItem::Watermark(1));
        assert_eq!(source.next_item().unwrap(), SourceItem::Idle, "no new segment yet");
        std::fs::write(dir.path().join("segment-0001.txt"), "E,2,b,2\n").unwrap();
        assert!(matches!(source.next_item().unwrap(), SourceItem::Record(_)), "the new segment is read");
        assert_eq!(source.next_item().unwrap(), SourceItem::Idle);
        stop.request();
        assert_eq!(source.next_item().unwrap(), SourceItem::Exhausted, "a stop ends the input");
        assert_eq!(source.position().segment, "segment-0001.txt");
    }

    #[test]
    fn a_stop_ends_the_input_of_a_source_that_does_not_follow_too() {
        let dir = tempfile::tempdir().unwrap();
        write_input(dir.path(), &["E,1,a,1\nE,2,a,1\nEND\n"]);
        let stop = StopSignal::default();
        let mut source = SegmentSource::new(dir.path().to_path_buf()).following(false, stop.clone());
        source.restore(None).unwrap();
        assert!(matches!(source.next_item().unwrap(), SourceItem::Record(_)));
        stop.request();
        assert_eq!(source.next_item().unwrap(), SourceItem::Exhausted);
        assert_eq!(source.position().line, 1, "the position stays after the last line read");
    }

    #[test]
    fn an_input_without_end_is_exhausted_not_ended() {
        let dir = tempfile::tempdir().unwrap();
        write_input(dir.path(), &["E,1,a,1\n"]);
        let mut source = SegmentSource::new(dir.path().to_path_buf());
        source.restore(None).unwrap();
        assert_eq!(drain(&mut source).last(), Some(&SourceItem::Exhausted));
    }
}
