//! The recorder one subtask feeds: it encodes each event handed to its operator
//! into the current epoch's buffer and, at the epoch's barrier, writes the
//! epoch file beside its name and renames it into place.
//!
//! The bound keeps a capture's memory and disk in check: past `records_bound`
//! records an epoch stores no more records (watermarks and clock ticks go on,
//! up to four times the bound), and its header says it was truncated and how
//! many events there really were.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::checkpoint::durable::temp_name;
use crate::codec::Writer;
use crate::event::Event;

use super::format::{encode_header, CaptureHeader, EventEncoder, CAPTURE_VERSION};
use super::{epoch_file_name, sink_evidence_name, OpSpecFile, SinkEvidence, OP_SPEC_NAME};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureOptions {
    pub dir: PathBuf,
    /// Records stored per epoch at most.
    pub records_bound: u64,
    /// Epochs kept per subtask: older epoch files are removed as new ones land.
    pub retain_epochs: u64,
}

/// Watermarks and clock ticks may use this many times the records bound.
pub const CONTROL_EVENT_FACTOR: u64 = 4;

/// What one written epoch holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpochWritten {
    pub file: String,
    pub stored_events: u64,
    pub true_events: u64,
    pub true_records: u64,
    pub truncated: bool,
}

pub struct EpochRecorder {
    dir: PathBuf,
    job: u64,
    operator: u64,
    subtask: u32,
    bound: u64,
    retain_epochs: u64,
    buf: Writer,
    encoder: EventEncoder,
    stored_events: u64,
    stored_records: u64,
    stored_control: u64,
    true_events: u64,
    true_records: u64,
    truncated: bool,
}

impl EpochRecorder {
    /// Prepares `dir` (the subtask's capture folder) and writes its op.json.
    pub fn create(dir: PathBuf, bound: u64, retain_epochs: u64, spec: &OpSpecFile) -> io::Result<Self> {
        fs::create_dir_all(&dir)?;
        let json = serde_json::to_vec_pretty(spec).map_err(io::Error::other)?;
        write_replacing(&dir, OP_SPEC_NAME, &json)?;
        Ok(Self {
            dir,
            job: spec.job_id(),
            operator: spec.operator_id(),
            subtask: spec.subtask,
            bound,
            retain_epochs: retain_epochs.max(1),
            buf: Writer::new(),
            encoder: EventEncoder::new(),
            stored_events: 0,
            stored_records: 0,
            stored_control: 0,
            true_events: 0,
            true_records: 0,
            truncated: false,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Records one event handed to the operator.
    #[inline]
    pub fn record(&mut self, event: &Event) {
        self.true_events += 1;
        let keep = match event {
            Event::Record(_) => {
                self.true_records += 1;
                let keep = self.stored_records < self.bound;
                self.stored_records += u64::from(keep);
                keep
            }
            _ => {
                let keep = self.stored_control < self.bound.saturating_mul(CONTROL_EVENT_FACTOR);
                self.stored_control += u64::from(keep);
                keep
            }
        };
        if keep {
            self.encoder.encode(&mut self.buf, event);
            self.stored_events += 1;
        } else {
            self.truncated = true;
        }
    }

    /// Writes the epoch that barrier `epoch` closes, and starts the next.
    pub fn finish_epoch(&mut self, epoch: u64) -> io::Result<EpochWritten> {
        let header = CaptureHeader {
            version: CAPTURE_VERSION,
            job: self.job,
            operator: self.operator,
            subtask: self.subtask,
            epoch,
            bound: self.bound,
            truncated: self.truncated,
            true_events: self.true_events,
            true_records: self.true_records,
            stored_events: self.stored_events,
        };
        let body = std::mem::take(&mut self.buf).into_bytes();
        self.encoder.reset();
        let mut bytes = encode_header(&header);
        bytes.extend_from_slice(&body);
        let file = epoch_file_name(epoch);
        write_replacing(&self.dir, &file, &bytes)?;
        self.prune_before(epoch.saturating_sub(self.retain_epochs - 1))?;
        let written = EpochWritten {
            file,
            stored_events: self.stored_events,
            true_events: self.true_events,
            true_records: self.true_records,
            truncated: self.truncated,
        };
        self.stored_events = 0;
        self.stored_records = 0;
        self.stored_control = 0;
        self.true_events = 0;
        self.true_records = 0;
        self.truncated = false;
        Ok(written)
    }

    /// Removes the epoch files (captures and sink evidence) below `keep_from`.
    fn prune_before(&self, keep_from: u64) -> io::Result<()> {
        for entry in fs::read_dir(&self.dir)? {
            let name = entry?.file_name();
            let Some(name) = name.to_str() else { continue };
            let epoch = super::parse_epoch_file_name(name).or_else(|| {
                clink_basics::ids::parse_decimal_u64(name.strip_prefix("epoch-")?.strip_suffix(".sink.json")?)
            });
            if epoch.is_some_and(|e| e < keep_from) {
                fs::remove_file(self.dir.join(name))?;
            }
        }
        Ok(())
    }

    /// Writes a sink's interval evidence for `epoch`.
    pub fn write_sink_evidence(&self, evidence: &SinkEvidence) -> io::Result<()> {
        let json = serde_json::to_vec_pretty(evidence).map_err(io::Error::other)?;
        write_replacing(&self.dir, &sink_evidence_name(evidence.epoch), &json)
    }
}

/// Writes beside the name and renames into place, so a reader never sees a
/// partial file. Not fsynced: captures survive the process dying, which is
/// what they are for, and cost no disk flush on the hot path.
fn write_replacing(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    let tmp = dir.join(temp_name(name));
    fs::write(&tmp, bytes)?;
    fs::rename(&tmp, dir.join(name)).inspect_err(|_| {
        let _ = fs::remove_file(&tmp);
    })
}
