//! The capture format (`.cap`), version 2, and the records-only version 1 it
//! still reads.
//!
//! A header (job, operator, subtask, epoch, the capture bound, whether the
//! epoch was truncated, and the true counts) is followed by the stored events.
//! Past the bound, records are dropped and the header says so; watermarks and
//! clock ticks have their own budget of four times the bound. The reader
//! tolerates a file cut short: it returns the events that decode whole and
//! says the file was cut.

use thiserror::Error;

use crate::codec::{DecodeError, Reader, Writer};
use crate::event::Event;
use crate::value::{decode_row, encode_row};

pub const CAPTURE_MAGIC: &[u8; 8] = b"CLNKCAP\0";
pub const CAPTURE_VERSION: u32 = 2;
/// The records-only format of older builds, still read.
pub const CAPTURE_VERSION_RECORDS_ONLY: u32 = 1;

const TAG_RECORD: u8 = 1;
const TAG_WATERMARK: u8 = 2;
const TAG_PROCESSING_TIME: u8 = 3;

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
    w.into_bytes()
}

/// Appends one event in the version 2 encoding.
pub fn encode_event(w: &mut Writer, event: &Event) {
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

fn decode_event(r: &mut Reader<'_>, version: u32) -> Result<Event, DecodeError> {
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

/// Reads a capture: the header must be whole; the events are read until the
/// header's count or the first that does not decode.
pub fn read_capture(bytes: &[u8]) -> Result<Capture, CaptureError> {
    let mut r = Reader::new(bytes);
    if r.take(8).map_err(|_| CaptureError::NotACapture)? != CAPTURE_MAGIC {
        return Err(CaptureError::NotACapture);
    }
    let version = r.u32().map_err(CaptureError::Header)?;
    match version {
        CAPTURE_VERSION | CAPTURE_VERSION_RECORDS_ONLY => {}
        v if v > CAPTURE_VERSION => return Err(CaptureError::NewerVersion(v)),
        v => return Err(CaptureError::UnknownVersion(v)),
    }
    let header = (|| {
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
        })
    })()
    .map_err(CaptureError::Header)?;
    let mut events = Vec::new();
    let mut cut_short = false;
    while (events.len() as u64) < header.stored_events {
        match decode_event(&mut r, version) {
            Ok(event) => events.push(event),
            Err(_) => {
                cut_short = true;
                break;
            }
        }
    }
    if !r.is_at_end() {
        // Bytes past the stored events: not a file this format writes.
        cut_short = true;
    }
    Ok(Capture { header, events, cut_short })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::Value;
    use proptest::prelude::*;

    fn sample(version: u32) -> (CaptureHeader, Vec<Event>) {
        let events = if version == CAPTURE_VERSION {
            vec![
                Event::Record(vec![Value::Int(1)]),
                Event::Watermark { time: 5, idle: false },
                Event::ProcessingTime(99),
                Event::Record(vec![Value::Str("x".into())]),
            ]
        } else {
            vec![Event::Record(vec![Value::Int(1)]), Event::Record(vec![Value::Int(2)])]
        };
        let header = CaptureHeader {
            version,
            job: 1,
            operator: 3,
            subtask: 1,
            epoch: 7,
            bound: 100,
            truncated: false,
            true_events: events.len() as u64,
            true_records: 2,
            stored_events: events.len() as u64,
        };
        (header, events)
    }

    fn encode(version: u32) -> Vec<u8> {
        let (header, events) = sample(version);
        let mut bytes = encode_header(&header);
        let mut w = Writer::new();
        for e in &events {
            if version == CAPTURE_VERSION {
                encode_event(&mut w, e);
            } else if let Event::Record(row) = e {
                encode_row(&mut w, row);
            }
        }
        bytes.extend(w.into_bytes());
        bytes
    }

    #[test]
    fn both_versions_read_back() {
        for version in [CAPTURE_VERSION, CAPTURE_VERSION_RECORDS_ONLY] {
            let capture = read_capture(&encode(version)).unwrap();
            let (header, events) = sample(version);
            assert_eq!(capture.header, header);
            assert_eq!(capture.events, events);
            assert!(capture.is_whole());
        }
    }

    #[test]
    fn a_cut_file_keeps_its_whole_prefix_and_says_so() {
        let bytes = encode(CAPTURE_VERSION);
        let header_len = encode_header(&sample(CAPTURE_VERSION).0).len();
        let capture = read_capture(&bytes[..bytes.len() - 3]).unwrap();
        assert!(capture.cut_short);
        assert_eq!(capture.events.len(), 3);
        assert!(read_capture(&bytes[..header_len - 1]).is_err(), "a cut header is an error");
    }

    #[test]
    fn newer_versions_are_refused() {
        let mut bytes = encode(CAPTURE_VERSION);
        bytes[8..12].copy_from_slice(&3u32.to_le_bytes());
        assert_eq!(read_capture(&bytes), Err(CaptureError::NewerVersion(3)));
    }

    proptest! {
        #[test]
        fn any_truncation_or_corruption_never_panics(cut in 0usize..200, flip in 0usize..200, bit in 0u8..8) {
            let mut bytes = encode(CAPTURE_VERSION);
            if flip < bytes.len() { bytes[flip] ^= 1 << bit; }
            let cut = cut.min(bytes.len());
            let _ = read_capture(&bytes[..cut]);
        }
    }
}
