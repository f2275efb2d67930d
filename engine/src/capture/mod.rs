//! The flight recorder: per operator, per subtask, per epoch, the ordered
//! events the runner handed the operator, so any epoch can be replayed.
//!
//! Layout under `--capture-dir`:
//! ```text
//! op-<id>/subtask-<s>/op.json            the operator spec replay rebuilds it from
//! op-<id>/subtask-<s>/epoch-<n>.cap      the events of epoch n (between barriers n-1 and n)
//! op-<id>/subtask-<s>/epoch-<n>.sink.json  a sink's interval evidence
//! ```
//! This module owns the capture format, the op.json and sink.json documents,
//! and the recorder the runtime feeds. It never replays: the harness does,
//! through the registry and the operator driver.

pub mod format;
pub mod recorder;
pub mod spec;

pub use format::{
    read_capture, read_capture_shape, Capture, CaptureError, CaptureHeader, CaptureNameMismatch, CaptureShape,
    CapturedEvent, CAPTURE_VERSION,
};
pub use recorder::{CaptureOptions, CompletedCheckpoint, EpochRecorder};
pub use spec::{OpSpecFile, SinkEvidence};

use std::path::{Path, PathBuf};

use clink_basics::ids::OperatorId;

/// `<capture-dir>/op-<id>/subtask-<s>`.
pub fn subtask_dir(capture_dir: &Path, operator: OperatorId, subtask: u32) -> PathBuf {
    capture_dir.join(format!("op-{operator}")).join(format!("subtask-{subtask}"))
}

pub fn epoch_file_name(epoch: u64) -> String {
    format!("epoch-{epoch}.cap")
}

pub fn sink_evidence_name(epoch: u64) -> String {
    format!("epoch-{epoch}.sink.json")
}

pub const OP_SPEC_NAME: &str = "op.json";

/// The epoch of an `epoch-<n>.cap` name.
pub fn parse_epoch_file_name(name: &str) -> Option<u64> {
    clink_basics::ids::parse_decimal_u64(name.strip_prefix("epoch-")?.strip_suffix(".cap")?)
}
