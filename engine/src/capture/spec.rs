//! The documents beside the captures: `op.json`, which rebuilds a captured
//! operator through the registry, and `epoch-<n>.sink.json`, a sink's account
//! of one interval.

use std::path::{Path, PathBuf};

use clink_basics::fields::FieldError;
use clink_basics::ids::{parse_decimal_u64, OperatorId};
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use thiserror::Error;

use crate::checkpoint::identity::RunIdentity;
use crate::job::{JobGraph, OperatorSpec, Partition, PlannedOperator};
use crate::registry::{self, UnknownType};
use crate::value::Schema;

/// Why a document beside the captures was refused.
#[derive(Debug, Error)]
pub enum SpecError {
    #[error("{path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {reason}")]
    Invalid { path: PathBuf, reason: String },
    #[error("{0}")]
    UnknownType(#[from] UnknownType),
    #[error("params of operator {operator}: {source}")]
    Params {
        operator: String,
        #[source]
        source: FieldError,
    },
}

fn invalid(path: &Path, reason: impl Into<String>) -> SpecError {
    SpecError::Invalid { path: path.to_path_buf(), reason: reason.into() }
}

pub const OP_SPEC_FORMAT: &str = "clink-op-spec";
pub const SINK_EVIDENCE_FORMAT: &str = "clink-sink-evidence";
/// Version 2 names the run that wrote the document; version 1, still read, does not.
pub const DOC_VERSION: u64 = 2;
/// The version of a document that names no run (written outside a run).
pub const DOC_VERSION_UNIDENTIFIED: u64 = 1;
/// An op.json or sink evidence document larger than this is refused unread.
pub const MAX_DOC_BYTES: u64 = 4 << 20;

/// One neighbour of a captured operator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Neighbour {
    pub operator: String,
    pub uid: String,
    #[serde(rename = "type")]
    pub type_name: String,
    pub parallelism: u32,
    /// `"forward"` or `{"hash": [columns]}`, as in the job.
    pub partition: Json,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpSpecFile {
    pub format: String,
    pub version: u64,
    pub job: String,
    pub id: String,
    pub uid: String,
    #[serde(rename = "type")]
    pub type_name: String,
    pub params: Json,
    pub parallelism: u32,
    pub subtask: u32,
    pub input_schema: Option<Schema>,
    pub output_schema: Schema,
    pub inputs: Vec<Neighbour>,
    pub outputs: Vec<Neighbour>,
    /// The run that deployed the subtask and wrote this file (version 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunIdentity>,
}

/// A document's version for whether it names its writer, and the rule the
/// readers hold it to: version 2 names one, version 1 none.
fn version_for(run: Option<&RunIdentity>) -> u64 {
    if run.is_some() {
        DOC_VERSION
    } else {
        DOC_VERSION_UNIDENTIFIED
    }
}

fn check_version(
    path: &Path,
    format: &str,
    expected: &str,
    version: u64,
    run: Option<&RunIdentity>,
) -> Result<(), SpecError> {
    if format != expected || !(1..=DOC_VERSION).contains(&version) {
        return Err(invalid(
            path,
            format!("format {format:?} version {version}; this build reads {expected:?} versions 1 to {DOC_VERSION}"),
        ));
    }
    if version != version_for(run) {
        return Err(invalid(
            path,
            format!(
                "version {version} {} the run that wrote it",
                if run.is_some() { "does not name" } else { "names" }
            ),
        ));
    }
    Ok(())
}

impl OpSpecFile {
    /// The same spec, as the run `run` writes it.
    pub fn written_by(mut self, run: Option<RunIdentity>) -> Self {
        self.version = version_for(run.as_ref());
        self.run = run;
        self
    }

    pub fn describe(graph: &JobGraph, op: &PlannedOperator, subtask: u32) -> Self {
        let neighbour = |id: OperatorId, partition: &Partition| {
            let other = graph.operator(id);
            Neighbour {
                operator: id.to_string(),
                uid: other.map(|o| o.spec.uid.clone()).unwrap_or_default(),
                type_name: other.map(|o| o.spec.type_name.clone()).unwrap_or_default(),
                parallelism: other.map_or(0, |o| o.spec.parallelism),
                partition: partition.to_json(),
            }
        };
        OpSpecFile {
            format: OP_SPEC_FORMAT.into(),
            version: DOC_VERSION_UNIDENTIFIED,
            job: graph.job_id.to_string(),
            id: op.spec.id.to_string(),
            uid: op.spec.uid.clone(),
            type_name: op.spec.type_name.clone(),
            params: op.spec.params.clone(),
            parallelism: op.spec.parallelism,
            subtask,
            input_schema: op.input_schema.clone(),
            output_schema: op.output_schema.clone(),
            inputs: graph.inputs_of(op.spec.id).map(|e| neighbour(e.from, &e.partition)).collect(),
            outputs: graph.outputs_of(op.spec.id).map(|e| neighbour(e.to, &e.partition)).collect(),
            run: None,
        }
    }

    /// The job id; [`OpSpecFile::read`] refused any that is not decimal text.
    pub fn job_id(&self) -> u64 {
        parse_decimal_u64(&self.job).unwrap_or(0)
    }

    /// The operator id; [`OpSpecFile::read`] refused any that is not decimal text.
    pub fn operator_id(&self) -> u64 {
        parse_decimal_u64(&self.id).unwrap_or(0)
    }

    /// Reads and checks an op.json: size, format, version, ids as decimal text.
    pub fn read(path: &Path) -> Result<Self, SpecError> {
        Self::parse(path, &read_doc_bytes(path)?)
    }

    /// Parses and checks an op.json's bytes (read from `path`, which only
    /// names it in errors).
    pub fn parse(path: &Path, bytes: &[u8]) -> Result<Self, SpecError> {
        let spec: OpSpecFile = parse_doc(path, bytes)?;
        check_version(path, &spec.format, OP_SPEC_FORMAT, spec.version, spec.run.as_ref())?;
        for (field, value) in [("job", &spec.job), ("id", &spec.id)] {
            if parse_decimal_u64(value).is_none() {
                return Err(invalid(path, format!("{field}: expected decimal text, found {value:?}")));
            }
        }
        Ok(spec)
    }

    /// The planned operator this spec describes, its params checked again by
    /// the registry against its input schema.
    pub fn plan(&self) -> Result<PlannedOperator, SpecError> {
        let spec = OperatorSpec {
            id: OperatorId(self.operator_id()),
            uid: self.uid.clone(),
            type_name: self.type_name.clone(),
            params: self.params.clone(),
            parallelism: self.parallelism,
            descriptor: registry::descriptor(&self.type_name)?,
        };
        PlannedOperator::plan(spec, self.input_schema.clone())
            .map_err(|source| SpecError::Params { operator: self.id.clone(), source })
    }

    /// The partition of an output edge, resolved against this operator's columns.
    pub fn output_partition(&self, consumer: &Neighbour) -> Result<Partition, FieldError> {
        Partition::from_json(
            Some(&consumer.partition),
            "outputs.partition",
            OperatorId(self.operator_id()),
            &self.output_schema,
        )
    }
}

/// A sink's account of one checkpoint interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SinkEvidence {
    pub format: String,
    pub version: u64,
    pub job: String,
    pub operator: String,
    pub uid: String,
    pub subtask: u32,
    pub epoch: u64,
    /// The barrier before this interval (the restore point at a run's first).
    pub previous_barrier: u64,
    /// What the interval's capture came to.
    pub capture: CaptureAccount,
    /// The sink's own account (its family, what it sealed).
    pub sink: Json,
    /// The last watermark the sink had received when the barrier reached
    /// it. Absent from evidence written before the field existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watermark: Option<BarrierWatermark>,
    /// The run that wrote it (version 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunIdentity>,
}

/// The watermark a sink held at a barrier: `last` is `None` when no
/// watermark had reached it yet in this run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BarrierWatermark {
    pub last: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaptureAccount {
    pub file: String,
    pub records: u64,
    pub events: u64,
    pub stored_events: u64,
    pub truncated: bool,
}

impl SinkEvidence {
    pub fn read(path: &Path) -> Result<Self, SpecError> {
        Self::parse(path, &read_doc_bytes(path)?)
    }

    /// Parses and checks interval evidence's bytes (read from `path`).
    pub fn parse(path: &Path, bytes: &[u8]) -> Result<Self, SpecError> {
        let doc: SinkEvidence = parse_doc(path, bytes)?;
        check_version(path, &doc.format, SINK_EVIDENCE_FORMAT, doc.version, doc.run.as_ref())?;
        Ok(doc)
    }

    /// The same evidence, as the run `run` writes it.
    pub fn written_by(mut self, run: Option<RunIdentity>) -> Self {
        self.version = version_for(run.as_ref());
        self.run = run;
        self
    }
}

fn read_doc_bytes(path: &Path) -> Result<Vec<u8>, SpecError> {
    clink_basics::files::read_bounded(path, MAX_DOC_BYTES)
        .map_err(|source| SpecError::Read { path: path.to_path_buf(), source })
}

fn parse_doc<T: serde::de::DeserializeOwned>(path: &Path, bytes: &[u8]) -> Result<T, SpecError> {
    if bytes.len() as u64 > MAX_DOC_BYTES {
        return Err(invalid(path, format!("{} bytes, over the limit of {MAX_DOC_BYTES}", bytes.len())));
    }
    serde_json::from_slice(bytes).map_err(|e| invalid(path, e.to_string()))
}
