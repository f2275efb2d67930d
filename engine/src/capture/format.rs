//! The capture format (`.cap`), version 4, and versions 3, 2 and 1 (records
//! only) it still reads.
//!
//! A header (job, operator, subtask, epoch, the capture bound, whether the
//! epoch was truncated, the true counts and, from version 4, the run that
//! wrote it: lineage and incarnation) is followed by the stored events.
//! Past the bound, records are dropped and the header says so; watermarks and
//! clock ticks have their own budget of four times the bound. The reader
//! tolerates a file cut short: it returns the events that decode whole and
//! says the file was cut.
//!
//! Versions 3 and 4 are compact: integers are zigzag varints, a timestamp, a
//! watermark or a clock position is the difference from the previous one of
//! its kind in the file, and a string seen before in the file is the index of
//! its first appearance (up to [`DICTIONARY_LIMIT`] strings). Every event
//! depends only on the events before it, so a cut file still reads up to the
//! cut. Version 2 wrote each value in the canonical row encoding, whose fixed
//! widths made captures six times the input they recorded.

use thiserror::Error;

use crate::checkpoint::identity::{decode_run, encode_run, RunIdentity};
use crate::codec::{DecodeError, Reader, Writer};
use crate::event::Event;
use crate::value::{decode_row, Decimal, Value, MAX_DECIMAL_SCALE, MAX_ROW_COLUMNS};

pub const CAPTURE_MAGIC: &[u8; 8] = b"CLNKCAP\0";
pub const CAPTURE_VERSION: u32 = 4;
/// The compact events without the writer's identity in the header; still read.
pub const CAPTURE_VERSION_COMPACT: u32 = 3;
/// Every value in the canonical row encoding; still read.
pub const CAPTURE_VERSION_CANONICAL: u32 = 2;
/// The records-only format of older builds, still read.
pub const CAPTURE_VERSION_RECORDS_ONLY: u32 = 1;
/// Watermarks and clock ticks an epoch file may hold: this many times its
/// records bound (the recorder stops storing them there; a reader refuses
/// a file holding more).
pub const CONTROL_EVENT_FACTOR: u64 = 4;

const TAG_RECORD: u8 = 1;
const TAG_WATERMARK: u8 = 2;
const TAG_PROCESSING_TIME: u8 = 3;
/// Version 3: a watermark from an idle input.
const TAG_IDLE_WATERMARK: u8 = 4;

/// Version 3 value tags.
const V_NULL: u8 = 0;
const V_FALSE: u8 = 1;
const V_TRUE: u8 = 2;
const V_INT: u8 = 3;
const V_FLOAT: u8 = 4;
const V_DECIMAL: u8 = 5;
const V_STR_NEW: u8 = 6;
const V_STR_SEEN: u8 = 7;
const V_TIMESTAMP: u8 = 8;

/// Strings a version 3 file numbers; past it, strings are written whole.
pub const DICTIONARY_LIMIT: usize = 1 << 16;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureHeader {
    pub version: u32,
    pub job: u64,
    pub operator: u64,
    pub subtask: u32,
    pub epoch: u64,
    /// Records kept per epoch at most.
    pub bound: u64,
    /// Events were dropped past the bound.
    pub truncated: bool,
    /// Every event handed to the operator in the epoch, stored or not.
    pub true_events: u64,
    /// Every record handed to the operator in the epoch, stored or not.
    pub true_records: u64,
    /// How many events the file holds after the header.
    pub stored_events: u64,
    /// The run that wrote it (version 4 on).
    pub run: Option<RunIdentity>,
}

pub type CapturedEvent = Event;

/// A capture read back.
#[derive(Debug, Clone, PartialEq)]
pub struct Capture {
    pub header: CaptureHeader,
    pub events: Vec<CapturedEvent>,
    /// The file holds fewer whole events than its header says it stored.
    pub cut_short: bool,
}

impl Capture {
    /// The events replay can trust to be the whole epoch.
    pub fn is_whole(&self) -> bool {
        !self.header.truncated && !self.cut_short
    }

    /// What the file holds, counted.
    pub fn shape(&self) -> CaptureShape {
        let records = self.events.iter().filter(|e| matches!(e, Event::Record(_))).count() as u64;
        CaptureShape {
            header: self.header.clone(),
            records,
            control: self.events.len() as u64 - records,
            cut_short: self.cut_short,
        }
    }

    /// Where the file contradicts itself ([`CaptureShape::inconsistencies`]).
    pub fn inconsistencies(&self) -> Vec<String> {
        self.shape().inconsistencies()
    }
}

/// A capture's header and what its events come to, counted as the file is
/// read and none of them kept ([`read_capture_shape`]): what a check of the
/// file's own consistency needs, without the cost of building its rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureShape {
    pub header: CaptureHeader,
    /// Whole record events read.
    pub records: u64,
    /// Whole watermarks and clock ticks read.
    pub control: u64,
    /// As [`Capture::cut_short`].
    pub cut_short: bool,
}

impl CaptureShape {
    /// Where the file contradicts itself: its events against its header's
    /// stored count, its records and control events against its bound (the
    /// recorder keeps at most `bound` records and
    /// `bound * CONTROL_EVENT_FACTOR` watermarks and ticks), its true counts
    /// against what it stored, and its truncation flag against the counts
    /// (it is set exactly when an event was dropped). A file that passes says
    /// of itself only what its own bytes bear out.
    pub fn inconsistencies(&self) -> Vec<String> {
        let h = &self.header;
        let mut out = Vec::new();
        let (records, control) = (self.records, self.control);
        if self.cut_short {
            out.push(format!(
                "it holds {} whole events where its header says {} are stored (cut short, or bytes past them)",
                records + control,
                h.stored_events
            ));
        }
        if h.true_records > h.true_events {
            out.push(format!("its header counts {} records among {} events", h.true_records, h.true_events));
        }
        if h.stored_events > h.true_events {
            out.push(format!("its header says {} events stored of {} handed over", h.stored_events, h.true_events));
        }
        if self.cut_short {
            return out;
        }
        if records > h.bound {
            out.push(format!("it holds {records} records; its bound is {}", h.bound));
        }
        if h.holds_control_events() && control > h.bound.saturating_mul(CONTROL_EVENT_FACTOR) {
            out.push(format!(
                "it holds {control} watermarks and ticks; its bound allows {}",
                h.bound.saturating_mul(CONTROL_EVENT_FACTOR)
            ));
        }
        if records > h.true_records {
            out.push(format!("it holds {records} records; its header says {} were handed over", h.true_records));
        }
        if h.holds_control_events() {
            let dropped = h.true_events > h.stored_events;
            // Nothing dropped: it holds every record and event handed over.
            if !h.truncated && (records != h.true_records || records + control != h.true_events) {
                out.push(format!(
                    "not truncated, it holds {records} records and {} events of the {} and {} handed over",
                    records + control,
                    h.true_records,
                    h.true_events
                ));
            }
            if dropped != h.truncated {
                out.push(format!(
                    "its header says truncated {}, and it stored {} of {} events",
                    h.truncated, h.stored_events, h.true_events
                ));
            }
        } else if !h.truncated && records != h.true_records {
            out.push(format!("not truncated, it holds {records} of the {} records handed over", h.true_records));
        }
        out
    }
}

impl CaptureHeader {
    /// Whether the file holds watermarks and clock ticks as well as records
    /// (every version but the first).
    pub fn holds_control_events(&self) -> bool {
        self.version != CAPTURE_VERSION_RECORDS_ONLY
    }

    /// Whether the header names the job, operator, subtask and epoch its
    /// place says (`capture/op-<operator>/subtask-<s>/epoch-<n>.cap` of a
    /// bundle or capture directory of `job`). A capture directory holds no
    /// job id in its paths, so two jobs sharing one are told apart only here.
    pub fn check_names(&self, job: u64, operator: u64, subtask: u32, epoch: u64) -> Result<(), CaptureNameMismatch> {
        let named = (self.job, self.operator, self.subtask, self.epoch);
        if named == (job, operator, subtask, epoch) {
            return Ok(());
        }
        Err(CaptureNameMismatch { named, placed: (job, operator, subtask, epoch) })
    }
}

/// A capture whose header names another job, operator, subtask or epoch than
/// its place.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "the capture's header names job {} operator {} subtask {} epoch {}; its place says job {} operator {} subtask {} epoch {}",
    .named.0, .named.1, .named.2, .named.3, .placed.0, .placed.1, .placed.2, .placed.3
)]
pub struct CaptureNameMismatch {
    /// (job, operator, subtask, epoch) as the header names them.
    pub named: (u64, u64, u32, u64),
    /// The same, as the file's place says.
    pub placed: (u64, u64, u32, u64),
}

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum CaptureError {
    #[error("not a capture file (bad magic)")]
    NotACapture,
    #[error("capture version {0} is newer than this build reads ({CAPTURE_VERSION})")]
    NewerVersion(u32),
    #[error("capture version {0} is unknown")]
    UnknownVersion(u32),
    #[error("the capture header is unreadable: {0}")]
    Header(DecodeError),
}

pub fn encode_header(h: &CaptureHeader) -> Vec<u8> {
    let mut w = Writer::new();
    w.raw(CAPTURE_MAGIC)
        .u32(h.version)
        .u64(h.job)
        .u64(h.operator)
        .u32(h.subtask)
        .u64(h.epoch)
        .u64(h.bound)
        .u8(u8::from(h.truncated))
        .u64(h.true_events)
        .u64(h.true_records)
        .u64(h.stored_events);
    if h.version >= CAPTURE_VERSION {
        encode_run(&mut w, h.run.as_ref());
    }
    w.into_bytes()
}

/// What a version 3 writer remembers of the events before: the previous
/// timestamp, watermark and clock position, and the strings it numbered.
/// One per file: [`EventEncoder::reset`] starts the next.
#[derive(Debug, Default)]
pub struct EventEncoder {
    /// FxHash: the dictionary is probed for every string of every record.
    strings: rustc_hash::FxHashMap<String, u32>,
    last: Deltas,
}

#[derive(Debug, Default, Clone, Copy)]
struct Deltas {
    timestamp: i64,
    watermark: i64,
    clock: i64,
}

/// The difference a delta encodes, wrapping so any pair of i64 has one.
fn delta(now: i64, before: &mut i64) -> i64 {
    let d = now.wrapping_sub(*before);
    *before = now;
    d
}

impl EventEncoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Forgets everything: the next event starts a new file.
    pub fn reset(&mut self) {
        self.strings.clear();
        self.last = Deltas::default();
    }

    /// Appends one event in the version 3 encoding.
    pub fn encode(&mut self, w: &mut Writer, event: &Event) {
        match event {
            Event::Record(row) => self.encode_record(w, row),
            Event::Watermark { time, idle } => {
                w.u8(if *idle { TAG_IDLE_WATERMARK } else { TAG_WATERMARK });
                w.ivarint64(delta(*time, &mut self.last.watermark));
            }
            Event::ProcessingTime(now) => {
                w.u8(TAG_PROCESSING_TIME).ivarint64(delta(*now, &mut self.last.clock));
            }
        }
    }

    /// Appends one record event, from a borrowed row (what [`encode`] writes
    /// for `Event::Record`; a sink records its rows without copying them).
    ///
    /// [`encode`]: Self::encode
    pub fn encode_record(&mut self, w: &mut Writer, row: &[Value]) {
        w.u8(TAG_RECORD).uvarint64(row.len() as u64);
        for value in row {
            self.value(w, value);
        }
    }

    fn value(&mut self, w: &mut Writer, value: &Value) {
        match value {
            Value::Null => {
                w.u8(V_NULL);
            }
            Value::Bool(false) => {
                w.u8(V_FALSE);
            }
            Value::Bool(true) => {
                w.u8(V_TRUE);
            }
            Value::Int(v) => {
                w.u8(V_INT).ivarint64(*v);
            }
            Value::Float(f) => {
                w.u8(V_FLOAT).f64(*f);
            }
            Value::Decimal(d) => {
                w.u8(V_DECIMAL).u8(d.scale).ivarint(d.unscaled);
            }
            Value::Timestamp(t) => {
                w.u8(V_TIMESTAMP).ivarint64(delta(*t, &mut self.last.timestamp));
            }
            Value::Str(s) => match self.strings.get(s.as_str()) {
                Some(&index) => {
                    w.u8(V_STR_SEEN).uvarint(u128::from(index));
                }
                None => {
                    w.u8(V_STR_NEW).uvarint(s.len() as u128).raw(s.as_bytes());
                    if self.strings.len() < DICTIONARY_LIMIT {
                        self.strings.insert(s.clone(), self.strings.len() as u32);
                    }
                }
            },
        }
    }
}

/// A version 3 reader's memory, the mirror of [`EventEncoder`].
#[derive(Debug, Default)]
struct EventDecoder {
    strings: Vec<String>,
    last: Deltas,
    keep: Strings,
}

impl EventDecoder {
    fn event(&mut self, r: &mut Reader<'_>) -> Result<Event, DecodeError> {
        match r.u8()? {
            TAG_RECORD => {
                let n = r.uvarint(32)? as usize;
                if n > MAX_ROW_COLUMNS {
                    return Err(r.invalid("row", format!("{n} columns, more than {MAX_ROW_COLUMNS}")));
                }
                if self.keep == Strings::Checked {
                    // Read and checked, and not built: a shape reader drops it.
                    for _ in 0..n {
                        self.value(r)?;
                    }
                    return Ok(Event::Record(Vec::new()));
                }
                let mut row = Vec::with_capacity(n.min(r.remaining()));
                for _ in 0..n {
                    row.push(self.value(r)?);
                }
                Ok(Event::Record(row))
            }
            tag @ (TAG_WATERMARK | TAG_IDLE_WATERMARK) => {
                let time = undelta(r, &mut self.last.watermark)?;
                Ok(Event::Watermark { time, idle: tag == TAG_IDLE_WATERMARK })
            }
            TAG_PROCESSING_TIME => Ok(Event::ProcessingTime(undelta(r, &mut self.last.clock)?)),
            tag => Err(r.invalid("event tag", format!("unknown tag {tag}"))),
        }
    }

    fn value(&mut self, r: &mut Reader<'_>) -> Result<Value, DecodeError> {
        Ok(match r.u8()? {
            V_NULL => Value::Null,
            V_FALSE => Value::Bool(false),
            V_TRUE => Value::Bool(true),
            V_INT => {
                let v = r.ivarint(64)?;
                Value::Int(i64::try_from(v).map_err(|_| r.invalid("int", format!("{v} is out of range")))?)
            }
            V_FLOAT => Value::Float(r.f64()?),
            V_DECIMAL => {
                let scale = r.u8()?;
                if scale > MAX_DECIMAL_SCALE {
                    return Err(r.invalid("decimal scale", format!("{scale}")));
                }
                Value::Decimal(Decimal::new(r.ivarint(128)?, scale))
            }
            V_TIMESTAMP => Value::Timestamp(undelta(r, &mut self.last.timestamp)?),
            V_STR_NEW => {
                let len = r.varint_len()?;
                let at = r.offset();
                let text = std::str::from_utf8(r.take(len)?)
                    .map_err(|e| r.invalid("UTF-8 string", format!("at {at}: {e}")))?;
                let text = match self.keep {
                    Strings::Kept => text.to_string(),
                    Strings::Checked => String::new(),
                };
                if self.strings.len() < DICTIONARY_LIMIT {
                    self.strings.push(text.clone());
                }
                Value::Str(text)
            }
            V_STR_SEEN => {
                let index = r.uvarint(32)? as usize;
                let text = self.strings.get(index).ok_or_else(|| {
                    r.invalid("string index", format!("{index}: only {} strings seen", self.strings.len()))
                })?;
                Value::Str(text.clone())
            }
            tag => return Err(r.invalid("value tag", format!("unknown tag {tag}"))),
        })
    }
}

fn undelta(r: &mut Reader<'_>, before: &mut i64) -> Result<i64, DecodeError> {
    let d = r.ivarint(64)?;
    let d = i64::try_from(d).map_err(|_| r.invalid("delta", format!("{d} is out of range")))?;
    *before = before.wrapping_add(d);
    Ok(*before)
}

/// A whole capture file: the header (its version set to this build's) and
/// the events in the version 3 encoding.
pub fn encode_capture(header: &CaptureHeader, events: &[Event]) -> Vec<u8> {
    let mut header = header.clone();
    header.version = CAPTURE_VERSION;
    header.stored_events = events.len() as u64;
    let mut bytes = encode_header(&header);
    let mut w = Writer::new();
    let mut encoder = EventEncoder::new();
    for e in events {
        encoder.encode(&mut w, e);
    }
    bytes.extend(w.into_bytes());
    bytes
}

/// Decodes one event of a version 1 or 2 file.
fn decode_event_v2(r: &mut Reader<'_>, version: u32) -> Result<Event, DecodeError> {
    if version == CAPTURE_VERSION_RECORDS_ONLY {
        return decode_row(r).map(Event::Record);
    }
    match r.u8()? {
        TAG_RECORD => decode_row(r).map(Event::Record),
        TAG_WATERMARK => {
            let time = r.i64()?;
            let idle = match r.u8()? {
                0 => false,
                1 => true,
                b => return Err(r.invalid("idle flag", format!("byte {b}"))),
            };
            Ok(Event::Watermark { time, idle })
        }
        TAG_PROCESSING_TIME => Ok(Event::ProcessingTime(r.i64()?)),
        tag => Err(r.invalid("event tag", format!("unknown tag {tag}"))),
    }
}

/// The most bytes a capture header takes: what [`read_capture_header`] needs
/// (the run: a flag, the lineage's length and 32 digits, the incarnation).
pub const MAX_HEADER_BYTES: usize = 8 + 4 + 8 + 8 + 4 + 8 + 8 + 1 + 8 + 8 + 8 + (1 + 4 + 32 + 8);

/// Reads only a capture's header (from at least its first
/// [`MAX_HEADER_BYTES`] bytes, or the whole file if shorter): what a reader
/// checks a file's names with before it takes the file as evidence.
pub fn read_capture_header(bytes: &[u8]) -> Result<CaptureHeader, CaptureError> {
    read_header_from(&mut Reader::new(bytes))
}

fn read_header_from(r: &mut Reader<'_>) -> Result<CaptureHeader, CaptureError> {
    if r.take(8).map_err(|_| CaptureError::NotACapture)? != CAPTURE_MAGIC {
        return Err(CaptureError::NotACapture);
    }
    let version = r.u32().map_err(CaptureError::Header)?;
    match version {
        CAPTURE_VERSION | CAPTURE_VERSION_COMPACT | CAPTURE_VERSION_CANONICAL | CAPTURE_VERSION_RECORDS_ONLY => {}
        v if v > CAPTURE_VERSION => return Err(CaptureError::NewerVersion(v)),
        v => return Err(CaptureError::UnknownVersion(v)),
    }
    (|| {
        Ok::<_, DecodeError>(CaptureHeader {
            version,
            job: r.u64()?,
            operator: r.u64()?,
            subtask: r.u32()?,
            epoch: r.u64()?,
            bound: r.u64()?,
            truncated: r.u8()? != 0,
            true_events: r.u64()?,
            true_records: r.u64()?,
            stored_events: r.u64()?,
            run: if version >= CAPTURE_VERSION { decode_run(r)? } else { None },
        })
    })()
    .map_err(CaptureError::Header)
}

/// Reads a capture: the header must be whole; the events are read until the
/// header's count or the first that does not decode.
pub fn read_capture(bytes: &[u8]) -> Result<Capture, CaptureError> {
    let mut events = Vec::new();
    let (header, cut_short) = walk(bytes, Strings::Kept, |stored, event| {
        if events.capacity() == 0 {
            events.reserve_exact(stored);
        }
        events.push(event);
    })?;
    Ok(Capture { header, events, cut_short })
}

/// Reads a capture as [`read_capture`] does, byte for byte the same
/// decoding and the same verdict on where it is cut, keeping only the
/// counts: its strings are checked (UTF-8, dictionary indices) and never
/// copied, its rows dropped as they are read.
pub fn read_capture_shape(bytes: &[u8]) -> Result<CaptureShape, CaptureError> {
    let (mut records, mut control) = (0, 0);
    let (header, cut_short) = walk(bytes, Strings::Checked, |_, event| match event {
        Event::Record(_) => records += 1,
        _ => control += 1,
    })?;
    Ok(CaptureShape { header, records, control, cut_short })
}

/// Whether a decoder builds the rows it reads or only checks them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Strings {
    #[default]
    Kept,
    /// Every value is read and checked as for [`Strings::Kept`]; a string
    /// decodes as an empty one (no copy is made) and a record as an empty
    /// row.
    Checked,
}

/// Decodes the header, then hands `each` the events in order (with how many
/// the whole file may hold, at most: the header's count, bounded by its
/// bytes), and says whether the file was cut short.
fn walk(
    bytes: &[u8],
    strings: Strings,
    mut each: impl FnMut(usize, Event),
) -> Result<(CaptureHeader, bool), CaptureError> {
    let mut r = Reader::new(bytes);
    let header = read_header_from(&mut r)?;
    let version = header.version;
    // Every event takes at least two bytes (a tag and a count or a delta),
    // so a hostile count never reserves more than the file could hold.
    let at_most = usize::try_from(header.stored_events).unwrap_or(usize::MAX).min(r.remaining() / 2);
    let mut cut_short = false;
    let mut decoder = EventDecoder { strings: Vec::new(), last: Deltas::default(), keep: strings };
    let mut read = 0u64;
    while read < header.stored_events {
        let compact = version >= CAPTURE_VERSION_COMPACT;
        let event = if compact { decoder.event(&mut r) } else { decode_event_v2(&mut r, version) };
        match event {
            Ok(event) => each(at_most, event),
            Err(_) => {
                cut_short = true;
                break;
            }
        }
        read += 1;
    }
    if !r.is_at_end() {
        // Bytes past the stored events: not a file this format writes.
        cut_short = true;
    }
    Ok((header, cut_short))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::encode_row;
    use proptest::prelude::*;

    fn events(version: u32) -> Vec<Event> {
        let rich = vec![
            Event::Record(vec![Value::Int(1), Value::Timestamp(1_700_000_000_000), Value::Str("acct-001".into())]),
            Event::Watermark { time: 5, idle: false },
            Event::ProcessingTime(99),
            Event::Record(vec![
                Value::Str("acct-001".into()),
                Value::Timestamp(1_699_999_999_000),
                Value::Decimal(Decimal::new(-1234, 2)),
                Value::Null,
                Value::Bool(true),
                Value::Float(-0.0),
            ]),
            Event::Watermark { time: crate::timers::NO_WATERMARK, idle: true },
            Event::Record(vec![Value::Int(i64::MIN), Value::Timestamp(i64::MAX), Value::Str(String::new())]),
        ];
        match version {
            CAPTURE_VERSION_RECORDS_ONLY => {
                vec![Event::Record(vec![Value::Int(1)]), Event::Record(vec![Value::Int(2)])]
            }
            _ => rich,
        }
    }

    fn header(version: u32, events: &[Event]) -> CaptureHeader {
        CaptureHeader {
            version,
            job: 1,
            operator: 3,
            subtask: 1,
            epoch: 7,
            bound: 100,
            truncated: false,
            true_events: events.len() as u64,
            true_records: events.iter().filter(|e| matches!(e, Event::Record(_))).count() as u64,
            stored_events: events.len() as u64,
            run: None,
        }
    }

    #[test]
    fn a_version_4_header_carries_the_run_that_wrote_it() {
        let run = RunIdentity {
            lineage: crate::checkpoint::identity::LineageId::parse("00112233445566778899aabbccddeeff").unwrap(),
            incarnation: 7,
        };
        let events = events(CAPTURE_VERSION);
        let mut h = header(CAPTURE_VERSION, &events);
        h.run = Some(run.clone());
        let bytes = encode_capture(&h, &events);
        assert_eq!(read_capture_header(&bytes).unwrap().run, Some(run));
        assert_eq!(read_capture(&bytes).unwrap().events, events);
        assert!(encode_header(&h).len() <= MAX_HEADER_BYTES);
    }

    #[test]
    fn a_header_naming_another_job_operator_subtask_or_epoch_than_its_place_is_told() {
        let h = header(CAPTURE_VERSION, &[]);
        assert_eq!(h.check_names(1, 3, 1, 7), Ok(()));
        for placed in [(2, 3, 1, 7), (1, 4, 1, 7), (1, 3, 0, 7), (1, 3, 1, 8)] {
            let e = h.check_names(placed.0, placed.1, placed.2, placed.3).unwrap_err();
            assert_eq!((e.named, e.placed), ((1, 3, 1, 7), placed));
            assert!(e.to_string().contains("names job 1 operator 3 subtask 1 epoch 7"), "{e}");
        }
    }

    /// The version 2 writer older builds had, kept to prove their files still read.
    fn encode_v2(w: &mut Writer, event: &Event) {
        match event {
            Event::Record(row) => {
                w.u8(TAG_RECORD);
                encode_row(w, row);
            }
            Event::Watermark { time, idle } => {
                w.u8(TAG_WATERMARK).i64(*time).u8(u8::from(*idle));
            }
            Event::ProcessingTime(now) => {
                w.u8(TAG_PROCESSING_TIME).i64(*now);
            }
        }
    }

    fn encode(version: u32) -> Vec<u8> {
        let events = events(version);
        if version == CAPTURE_VERSION {
            return encode_capture(&header(version, &events), &events);
        }
        if version == CAPTURE_VERSION_COMPACT {
            // A version 3 file: the compact events, no writer in the header.
            let mut bytes = encode_header(&header(version, &events));
            let (mut w, mut encoder) = (Writer::new(), EventEncoder::new());
            events.iter().for_each(|e| encoder.encode(&mut w, e));
            bytes.extend(w.into_bytes());
            return bytes;
        }
        let mut bytes = encode_header(&header(version, &events));
        let mut w = Writer::new();
        for e in &events {
            match (version, e) {
                (CAPTURE_VERSION_CANONICAL, e) => encode_v2(&mut w, e),
                (_, Event::Record(row)) => {
                    encode_row(&mut w, row);
                }
                _ => {}
            }
        }
        bytes.extend(w.into_bytes());
        bytes
    }

    #[test]
    fn every_version_reads_back() {
        for version in
            [CAPTURE_VERSION, CAPTURE_VERSION_COMPACT, CAPTURE_VERSION_CANONICAL, CAPTURE_VERSION_RECORDS_ONLY]
        {
            let capture = read_capture(&encode(version)).unwrap();
            let events = events(version);
            assert_eq!(capture.header, header(version, &events), "version {version}");
            assert_eq!(capture.events, events, "version {version}");
            assert!(capture.is_whole());
        }
    }

    #[test]
    fn version_three_is_a_fraction_of_version_two() {
        let row = |i: i64| {
            Event::Record(vec![
                Value::Timestamp(1_700_000_000_000 + i * 200),
                Value::Str(format!("acct-{:03}", i % 12)),
                Value::Decimal(Decimal::new(i128::from(i * 37 % 100_000), 2)),
            ])
        };
        let events: Vec<Event> = (0..1000).map(row).collect();
        let v3 = encode_capture(&header(CAPTURE_VERSION, &events), &events).len();
        let mut w = Writer::new();
        events.iter().for_each(|e| encode_v2(&mut w, e));
        let v2 = w.len();
        assert!(v3 * 3 < v2, "version 3 took {v3} bytes, version 2 {v2}");
        assert!(v3 < 1000 * 12, "{v3} bytes for 1000 (time, account, amount) rows");
    }

    #[test]
    fn a_cut_file_keeps_its_whole_prefix_and_says_so() {
        for version in [CAPTURE_VERSION, CAPTURE_VERSION_CANONICAL] {
            let bytes = encode(version);
            let header_len = encode_header(&header(version, &events(version))).len();
            let capture = read_capture(&bytes[..bytes.len() - 3]).unwrap();
            assert!(capture.cut_short);
            assert_eq!(capture.events.len(), events(version).len() - 1, "version {version}");
            assert_eq!(capture.events[..], events(version)[..events(version).len() - 1]);
            assert!(read_capture(&bytes[..header_len - 1]).is_err(), "a cut header is an error");
        }
    }

    #[test]
    fn hostile_version_three_values_are_refused() {
        let (h, mut body) = (header(CAPTURE_VERSION, &[Event::ProcessingTime(0)]), Writer::new());
        // A reference to a string never seen, then a row claiming 2^31 columns.
        body.u8(TAG_RECORD).uvarint(1).u8(V_STR_SEEN).uvarint(0);
        let mut bytes = encode_header(&h);
        bytes.extend(body.into_bytes());
        assert!(read_capture(&bytes).unwrap().cut_short);
        let mut body = Writer::new();
        body.u8(TAG_RECORD).uvarint(1 << 31);
        let mut bytes = encode_header(&h);
        bytes.extend(body.into_bytes());
        assert!(read_capture(&bytes).unwrap().cut_short);
    }

    #[test]
    fn the_shape_counts_records_and_control_events_apart() {
        let shape = read_capture_shape(&encode(CAPTURE_VERSION)).unwrap();
        assert_eq!((shape.records, shape.control, shape.cut_short), (3, 3, false));
        assert_eq!(shape.header, header(CAPTURE_VERSION, &events(CAPTURE_VERSION)));
        let mut one_record_short = encode(CAPTURE_VERSION);
        one_record_short.truncate(one_record_short.len() - 3);
        let cut = read_capture_shape(&one_record_short).unwrap();
        assert_eq!((cut.records, cut.control, cut.cut_short), (2, 3, true));
        assert!(cut.inconsistencies()[0].contains("it holds 5 whole events where its header says 6"), "{cut:?}");
    }

    #[test]
    fn newer_versions_are_refused() {
        let mut bytes = encode(CAPTURE_VERSION);
        bytes[8..12].copy_from_slice(&(CAPTURE_VERSION + 1).to_le_bytes());
        assert_eq!(read_capture(&bytes), Err(CaptureError::NewerVersion(CAPTURE_VERSION + 1)));
    }

    proptest! {
        #[test]
        fn any_truncation_or_corruption_never_panics(cut in 0usize..400, flip in 0usize..400, bit in 0u8..8) {
            for version in [CAPTURE_VERSION, CAPTURE_VERSION_CANONICAL] {
                let mut bytes = encode(version);
                if flip < bytes.len() { bytes[flip] ^= 1 << bit; }
                let cut = cut.min(bytes.len());
                let _ = read_capture(&bytes[..cut]);
            }
        }

        /// The shape reader is the full reader's verdict without the rows:
        /// the same refusal, counts and cut on any damaged file.
        #[test]
        fn the_shape_is_what_the_whole_read_counts(cut in 0usize..400, flip in 0usize..400, bit in 0u8..8) {
            for version in [CAPTURE_VERSION, CAPTURE_VERSION_COMPACT, CAPTURE_VERSION_CANONICAL, CAPTURE_VERSION_RECORDS_ONLY] {
                let mut bytes = encode(version);
                if flip < bytes.len() { bytes[flip] ^= 1 << bit; }
                let bytes = &bytes[..cut.min(bytes.len())];
                let whole = read_capture(bytes).map(|c| (c.shape(), c.inconsistencies()));
                let shape = read_capture_shape(bytes).map(|s| { let found = s.inconsistencies(); (s, found) });
                prop_assert_eq!(shape, whole);
            }
        }

        #[test]
        fn any_events_round_trip_through_version_three(
            items in proptest::collection::vec((any::<i64>(), any::<i64>(), "[a-c]{0,3}", any::<i64>(), 0u8..4, any::<bool>()), 0..40)
        ) {
            let events: Vec<Event> = items
                .iter()
                .map(|(a, t, s, d, kind, idle)| match kind {
                    0 => Event::Watermark { time: *t, idle: *idle },
                    1 => Event::ProcessingTime(*t),
                    _ => Event::Record(vec![
                        Value::Int(*a),
                        Value::Timestamp(*t),
                        Value::Str(s.clone()),
                        Value::Decimal(Decimal::new(i128::from(*d) * 1_000_000_007, 4)),
                    ]),
                })
                .collect();
            let capture = read_capture(&encode_capture(&header(CAPTURE_VERSION, &events), &events)).unwrap();
            prop_assert!(capture.is_whole());
            prop_assert_eq!(capture.events, events);
        }
    }
}
