//! The documents beside the captures: `op.json`, which rebuilds a captured
//! operator through the registry, and `epoch-<n>.sink.json`, a sink's account
//! of one interval.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

use crate::job::{JobGraph, OperatorId, OperatorSpec, Partition, PlannedOperator};
use crate::registry;
use crate::value::Schema;

pub const OP_SPEC_FORMAT: &str = "clink-op-spec";
pub const SINK_EVIDENCE_FORMAT: &str = "clink-sink-evidence";
pub const DOC_VERSION: u64 = 1;
const MAX_DOC_BYTES: u64 = 4 << 20;

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
}

fn partition_json(p: &Partition) -> Json {
    match p {
        Partition::Forward => Json::String("forward".into()),
        Partition::Hash { columns, .. } => serde_json::json!({ "hash": columns }),
    }
}

impl OpSpecFile {
    pub fn describe(graph: &JobGraph, op: &PlannedOperator, subtask: u32) -> Self {
        let neighbour = |id: OperatorId, partition: &Partition| {
            let other = graph.operator(id);
            Neighbour {
                operator: id.to_string(),
                uid: other.map(|o| o.spec.uid.clone()).unwrap_or_default(),
                type_name: other.map(|o| o.spec.type_name.clone()).unwrap_or_default(),
                parallelism: other.map_or(0, |o| o.spec.parallelism),
                partition: partition_json(partition),
            }
        };
        OpSpecFile {
            format: OP_SPEC_FORMAT.into(),
            version: DOC_VERSION,
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
        }
    }

    pub fn job_id(&self) -> u64 {
        crate::job::parse_decimal_u64(&self.job).unwrap_or(0)
    }

    pub fn operator_id(&self) -> u64 {
        crate::job::parse_decimal_u64(&self.id).unwrap_or(0)
    }

    /// Reads and checks an op.json: size, format, version, ids as decimal text.
    pub fn read(path: &Path) -> Result<Self, String> {
        let spec: OpSpecFile = read_doc(path)?;
        if spec.format != OP_SPEC_FORMAT || spec.version > DOC_VERSION {
            return Err(format!(
                "{}: format {:?} version {}; this build reads {OP_SPEC_FORMAT:?} up to version {DOC_VERSION}",
                path.display(),
                spec.format,
                spec.version
            ));
        }
        for (field, value) in [("job", &spec.job), ("id", &spec.id)] {
            if crate::job::parse_decimal_u64(value).is_none() {
                return Err(format!("{}: {field}: expected decimal text, found {value:?}", path.display()));
            }
        }
        Ok(spec)
    }

    /// The planned operator this spec describes, its params checked again by
    /// the registry against its input schema.
    pub fn plan(&self) -> Result<PlannedOperator, String> {
        let kind = registry::kind_of(&self.type_name)
            .ok_or_else(|| format!("operator type {:?} is not in this build's registry", self.type_name))?;
        let spec = OperatorSpec {
            id: OperatorId(self.operator_id()),
            uid: self.uid.clone(),
            type_name: self.type_name.clone(),
            params: self.params.clone(),
            parallelism: self.parallelism,
            kind,
        };
        let output_schema = registry::output_schema(&spec, self.input_schema.as_ref())
            .map_err(|e| format!("params of operator {}: {e}", self.id))?;
        Ok(PlannedOperator { spec, input_schema: self.input_schema.clone(), output_schema })
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
    pub fn read(path: &Path) -> Result<Self, String> {
        let doc: SinkEvidence = read_doc(path)?;
        if doc.format != SINK_EVIDENCE_FORMAT || doc.version > DOC_VERSION {
            return Err(format!("{}: format {:?} version {}", path.display(), doc.format, doc.version));
        }
        Ok(doc)
    }
}

fn read_doc<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, String> {
    let bytes = crate::files::read_bounded(path, MAX_DOC_BYTES).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display()))
}
