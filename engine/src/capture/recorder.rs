//! The recorder one subtask feeds: it encodes each event handed to its operator
//! into the current epoch's buffer and, at the epoch's barrier, writes the
//! epoch file beside its name and renames it into place.
//!
//! The bound keeps a capture's memory and disk in check: past `records_bound`
//! records an epoch stores no more records (watermarks and clock ticks go on,
//! up to four times the bound), and its header says it was truncated and how
//! many events there really were.
//!
//! Retention counts completed checkpoints, not closed epochs: a subtask may
//! close epochs well ahead of the coordinator's markers (up to the protocol's
//! checkpoints in flight), and the epoch of the newest completed checkpoint
//! is the evidence an incident right then needs. A recorder keeps its
//! `retain_epochs` epochs up to the newest completed checkpoint and every
//! epoch after it.

use std::collections::BTreeSet;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::checkpoint::durable::temp_name;
use crate::checkpoint::identity::RunIdentity;
use crate::codec::Writer;
use crate::event::Event;
use crate::value::Value;

use super::format::{encode_header, CaptureHeader, EventEncoder, CAPTURE_VERSION, CONTROL_EVENT_FACTOR};
use super::{epoch_file_name, sink_evidence_name, OpSpecFile, SinkEvidence, OP_SPEC_NAME};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureOptions {
    pub dir: PathBuf,
    /// Records stored per epoch at most.
    pub records_bound: u64,
    /// Epochs kept per subtask: older epoch files are removed as new ones land.
    pub retain_epochs: u64,
}

/// The newest checkpoint the run has completed (its marker durable), set by
/// the coordinator and read by every recorder when it prunes.
#[derive(Debug, Clone, Default)]
pub struct CompletedCheckpoint(Arc<AtomicU64>);

impl CompletedCheckpoint {
    /// Starting at `checkpoint` (0: none yet; a restored run: its restore point).
    pub fn starting_at(checkpoint: u64) -> Self {
        Self(Arc::new(AtomicU64::new(checkpoint)))
    }

    /// `checkpoint` completed; an older one never lowers what is known.
    pub fn completed(&self, checkpoint: u64) {
        self.0.fetch_max(checkpoint, Ordering::AcqRel);
    }

    pub fn newest(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
}

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
    /// The epochs with files in `dir`, oldest first (what retention prunes).
    epochs: BTreeSet<u64>,
    job: u64,
    operator: u64,
    subtask: u32,
    /// The run writing (from its op.json): every epoch file and sink
    /// evidence names it.
    run: Option<RunIdentity>,
    bound: u64,
    retain_epochs: u64,
    completed: CompletedCheckpoint,
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
    /// `completed` is the run's newest completed checkpoint, which retention
    /// counts back from.
    pub fn create(
        dir: PathBuf,
        bound: u64,
        retain_epochs: u64,
        completed: CompletedCheckpoint,
        spec: &OpSpecFile,
    ) -> io::Result<Self> {
        fs::create_dir_all(&dir)?;
        let json = serde_json::to_vec_pretty(spec).map_err(io::Error::other)?;
        write_replacing(&dir, OP_SPEC_NAME, &[&json])?;
        let epochs = epochs_in(&dir)?;
        Ok(Self {
            dir,
            epochs,
            job: spec.job_id(),
            operator: spec.operator_id(),
            subtask: spec.subtask,
            run: spec.run.clone(),
            bound,
            retain_epochs: retain_epochs.max(1),
            completed,
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
        match event {
            Event::Record(row) => self.record_row(row),
            _ => {
                self.true_events += 1;
                let keep = self.stored_control < self.bound.saturating_mul(CONTROL_EVENT_FACTOR);
                self.stored_control += u64::from(keep);
                if keep {
                    self.encoder.encode(&mut self.buf, event);
                    self.stored_events += 1;
                } else {
                    self.truncated = true;
                }
            }
        }
    }

    /// Records one record handed to the operator, from a borrowed row: the
    /// same bytes as [`record`](Self::record) of `Event::Record`, no copy.
    #[inline]
    pub fn record_row(&mut self, row: &[Value]) {
        self.true_events += 1;
        self.true_records += 1;
        if self.stored_records < self.bound {
            self.stored_records += 1;
            self.encoder.encode_record(&mut self.buf, row);
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
            run: self.run.clone(),
        };
        // The buffer keeps its capacity for the next epoch.
        let body = std::mem::take(&mut self.buf).into_bytes();
        self.encoder.reset();
        let file = epoch_file_name(epoch);
        let written = write_replacing(&self.dir, &file, &[&encode_header(&header), &body]);
        self.buf = Writer::reusing(body);
        written?;
        self.epochs.insert(epoch);
        self.prune_before(retained_from(self.completed.newest(), epoch, self.retain_epochs))?;
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

    /// Removes the epoch files (captures and sink evidence) below `keep_from`:
    /// those the folder held when the recorder started (read once) and the
    /// epochs it wrote since, from memory, so an epoch's end lists no
    /// directory. (A sink's evidence of an epoch follows that epoch's capture.)
    fn prune_before(&mut self, keep_from: u64) -> io::Result<()> {
        let Some(&oldest) = self.epochs.first() else {
            return Ok(());
        };
        if oldest >= keep_from {
            return Ok(());
        }
        let rest = self.epochs.split_off(&keep_from);
        for epoch in std::mem::replace(&mut self.epochs, rest) {
            remove_epoch_files(&self.dir, epoch)?;
        }
        Ok(())
    }

    /// Writes a sink's interval evidence for `epoch` (after the epoch's
    /// capture, whose pruning removes it too).
    pub fn write_sink_evidence(&self, evidence: &SinkEvidence) -> io::Result<()> {
        let evidence = evidence.clone().written_by(self.run.clone());
        let json = serde_json::to_vec_pretty(&evidence).map_err(io::Error::other)?;
        write_replacing(&self.dir, &sink_evidence_name(evidence.epoch), &[&json])
    }
}

/// THE retention rule: the first epoch a subtask keeps, given the run's
/// newest completed checkpoint and the newest epoch it closed: `retain`
/// epochs up to the completed checkpoint, and every epoch after it.
pub fn retained_from(completed: u64, newest_epoch: u64, retain: u64) -> u64 {
    completed.min(newest_epoch).saturating_sub(retain.max(1) - 1)
}

/// Retention applied to a subtask's folder once its recorder is gone: a
/// subtask closes its last epochs before the run's last markers are written,
/// so what its recorder kept then is more than the finished run keeps.
/// Reads the folder once; a folder that does not exist holds nothing.
pub fn prune_finished(dir: &Path, completed: u64, retain: u64) -> io::Result<()> {
    let epochs = match epochs_in(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        other => other?,
    };
    let Some(&newest) = epochs.last() else {
        return Ok(());
    };
    for &epoch in epochs.range(..retained_from(completed, newest, retain)) {
        remove_epoch_files(dir, epoch)?;
    }
    Ok(())
}

/// Removes an epoch's capture and sink evidence (either may be absent).
fn remove_epoch_files(dir: &Path, epoch: u64) -> io::Result<()> {
    for name in [epoch_file_name(epoch), sink_evidence_name(epoch)] {
        match fs::remove_file(dir.join(name)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

/// The epochs whose files (captures or sink evidence) a subtask's folder holds.
fn epochs_in(dir: &Path) -> io::Result<BTreeSet<u64>> {
    let mut epochs = BTreeSet::new();
    for entry in fs::read_dir(dir)? {
        let name = entry?.file_name();
        let Some(name) = name.to_str() else { continue };
        let epoch = super::parse_epoch_file_name(name)
            .or_else(|| clink_basics::ids::parse_decimal_u64(name.strip_prefix("epoch-")?.strip_suffix(".sink.json")?));
        epochs.extend(epoch);
    }
    Ok(epochs)
}

/// Writes `parts` beside the name and renames into place, so a reader never
/// sees a partial file. Not fsynced: captures survive the process dying,
/// which is what they are for, and cost no disk flush on the hot path.
fn write_replacing(dir: &Path, name: &str, parts: &[&[u8]]) -> io::Result<()> {
    let tmp = dir.join(temp_name(name));
    let written = (|| {
        let mut file = fs::File::create_new(&tmp)?;
        for part in parts {
            file.write_all(part)?;
        }
        drop(file);
        fs::rename(&tmp, dir.join(name))
    })();
    written.inspect_err(|_| {
        let _ = fs::remove_file(&tmp);
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::format::read_capture;
    use crate::value::{Decimal, Schema};

    fn spec() -> OpSpecFile {
        OpSpecFile {
            format: "clink-op-spec".into(),
            version: 1,
            job: "1".into(),
            id: "3".into(),
            uid: "windows".into(),
            type_name: "tumbling_window".into(),
            params: serde_json::json!({}),
            parallelism: 1,
            subtask: 0,
            input_schema: None,
            output_schema: Schema::default(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            run: None,
        }
    }

    fn files(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> =
            fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.retain(|n| n.starts_with("epoch-"));
        names.sort();
        names
    }

    #[test]
    fn a_borrowed_row_is_recorded_as_its_record_event_is() {
        let dir = tempfile::tempdir().unwrap();
        let row = vec![Value::Timestamp(5), Value::Str("acct-1".into()), Value::Decimal(Decimal::new(-1234, 2))];
        let mut by_event = EpochRecorder::create(dir.path().join("a"), 10, 5, Default::default(), &spec()).unwrap();
        let mut by_row = EpochRecorder::create(dir.path().join("b"), 10, 5, Default::default(), &spec()).unwrap();
        for _ in 0..2 {
            by_event.record(&Event::Record(row.clone()));
            by_row.record_row(&row);
        }
        by_event.finish_epoch(1).unwrap();
        by_row.finish_epoch(1).unwrap();
        let a = fs::read(dir.path().join("a/epoch-1.cap")).unwrap();
        assert_eq!(a, fs::read(dir.path().join("b/epoch-1.cap")).unwrap());
        assert_eq!(read_capture(&a).unwrap().events, vec![Event::Record(row.clone()), Event::Record(row)]);
    }

    #[test]
    fn retention_prunes_what_an_earlier_run_left_and_what_this_one_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("subtask-0");
        fs::create_dir_all(&sub).unwrap();
        for name in ["epoch-1.cap", "epoch-2.cap", "epoch-2.sink.json", "op.json.keep"] {
            fs::write(sub.join(name), b"earlier run").unwrap();
        }
        let completed = CompletedCheckpoint::starting_at(2);
        let mut recorder = EpochRecorder::create(sub.clone(), 10, 2, completed.clone(), &spec()).unwrap();
        completed.completed(3);
        recorder.finish_epoch(3).unwrap();
        assert_eq!(files(&sub), ["epoch-2.cap", "epoch-2.sink.json", "epoch-3.cap"]);
        recorder.record_row(&[Value::Int(6)]);
        completed.completed(4);
        recorder.finish_epoch(4).unwrap();
        assert_eq!(files(&sub), ["epoch-3.cap", "epoch-4.cap"]);
        // The reused buffer holds only its own epoch's events.
        recorder.record_row(&[Value::Int(7)]);
        completed.completed(5);
        recorder.finish_epoch(5).unwrap();
        let five = read_capture(&fs::read(sub.join("epoch-5.cap")).unwrap()).unwrap();
        assert_eq!(five.events, vec![Event::Record(vec![Value::Int(7)])]);
        assert!(sub.join("op.json.keep").exists(), "other files are left");
    }

    /// A subtask that runs ahead of the coordinator's markers keeps the
    /// epoch of the newest completed checkpoint: what an incident right then
    /// is collected from (counting closed epochs, epoch 2 went when 5 closed).
    #[test]
    fn epochs_closed_ahead_of_the_markers_do_not_push_out_the_completed_ones() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("subtask-0");
        let completed = CompletedCheckpoint::default();
        let mut recorder = EpochRecorder::create(sub.clone(), 10, 2, completed.clone(), &spec()).unwrap();
        recorder.finish_epoch(1).unwrap();
        completed.completed(1);
        recorder.finish_epoch(2).unwrap();
        completed.completed(2);
        for epoch in 3..=5 {
            recorder.finish_epoch(epoch).unwrap();
        }
        assert_eq!(files(&sub), ["epoch-1.cap", "epoch-2.cap", "epoch-3.cap", "epoch-4.cap", "epoch-5.cap"]);
        completed.completed(1); // an older completion never lowers what is known
        completed.completed(4);
        recorder.finish_epoch(6).unwrap();
        assert_eq!(files(&sub), ["epoch-3.cap", "epoch-4.cap", "epoch-5.cap", "epoch-6.cap"]);
        // The run ends: its last markers came after the subtask's last epoch.
        drop(recorder);
        fs::write(sub.join("epoch-4.sink.json"), b"{}").unwrap();
        prune_finished(&sub, 6, 2).unwrap();
        assert_eq!(files(&sub), ["epoch-5.cap", "epoch-6.cap"]);
        prune_finished(&dir.path().join("never-made"), 6, 2).unwrap();
    }
}
