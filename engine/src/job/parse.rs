//! Reading a job document: the header, the operators and the edges, each
//! field typed and named by its path. Shape rules that need the whole graph
//! are [`super::plan`]'s.

use std::collections::BTreeSet;

use clink_basics::fields::Fields;
use clink_basics::ids::OperatorId;
use clink_basics::names::is_safe_name;
use serde_json::Value as Json;

use super::{JobError, OperatorSpec, Partition, JOB_FORMAT, JOB_VERSION, MAX_OPERATORS, MAX_PARALLELISM};
use crate::registry;
use crate::value::Schema;

/// A job document read field by field, before its shape is checked.
pub(super) struct Document {
    pub job_id: u64,
    pub name: String,
    pub specs: Vec<OperatorSpec>,
    pub edges: Vec<RawEdge>,
}

/// An edge as written: its partition's columns not yet resolved.
pub(super) struct RawEdge {
    pub from: OperatorId,
    pub to: OperatorId,
    pub partition: RawPartition,
    /// Where the edge sits in the document (`edges[3]`).
    pub path: String,
}

pub(crate) enum RawPartition {
    Forward,
    Hash(Vec<String>),
}

impl RawPartition {
    /// Resolves hash columns against the rows the producer emits.
    pub fn resolve(&self, at: &str, producer: OperatorId, producer_output: &Schema) -> Result<Partition, JobError> {
        match self {
            RawPartition::Forward => Ok(Partition::Forward),
            RawPartition::Hash(columns) => {
                let indices = columns
                    .iter()
                    .map(|column| {
                        producer_output.index_of(column).ok_or_else(|| {
                            JobError::new(
                                format!("{at}.hash"),
                                format!(
                                    "column {column:?} is not among the columns {producer} emits: {}",
                                    producer_output.names().join(", ")
                                ),
                            )
                        })
                    })
                    .collect::<Result<Vec<usize>, JobError>>()?;
                Ok(Partition::Hash { columns: columns.clone(), indices })
            }
        }
    }
}

pub(super) fn document(root: &Fields<'_>) -> Result<Document, JobError> {
    root.only(&["format", "version", "job_id", "name", "operators", "edges"])?;
    let format = root.str("format")?;
    if format != JOB_FORMAT {
        return Err(JobError::new("format", format!("expected \"{JOB_FORMAT}\", found {format:?}")));
    }
    let version = root.u64("version")?;
    if version != JOB_VERSION {
        return Err(JobError::new("version", format!("this build reads version {JOB_VERSION}; found {version}")));
    }
    let job_id = root.optional("job_id", |f, k| f.decimal_id(k))?.unwrap_or(1);
    let name = root.optional("name", |f, k| f.str(k).map(str::to_string))?.unwrap_or_else(|| "job".into());
    let specs = operators(root)?;
    let edges = edges(root, &specs)?;
    Ok(Document { job_id, name, specs, edges })
}

fn operators(root: &Fields<'_>) -> Result<Vec<OperatorSpec>, JobError> {
    let items = root.array("operators")?;
    if items.is_empty() {
        return Err(JobError::new("operators", "a job needs at least one operator"));
    }
    if items.len() > MAX_OPERATORS {
        return Err(JobError::new(
            "operators",
            format!("{} operators exceed the limit of {MAX_OPERATORS}", items.len()),
        ));
    }
    let mut specs = Vec::new();
    let mut ids = BTreeSet::new();
    let mut uids = BTreeSet::new();
    for (i, item) in items.iter().enumerate() {
        let f = Fields::object(item, &format!("operators[{i}]"))?;
        let spec = operator(&f)?;
        if !ids.insert(spec.id) {
            return Err(f.error("id", format!("duplicate operator id {}", spec.id)));
        }
        if !uids.insert(spec.uid.clone()) {
            return Err(f.error("uid", format!("duplicate uid {:?}", spec.uid)));
        }
        specs.push(spec);
    }
    Ok(specs)
}

fn operator(f: &Fields<'_>) -> Result<OperatorSpec, JobError> {
    f.only(&["id", "uid", "type", "params", "parallelism"])?;
    let id = OperatorId(f.decimal_id("id")?);
    let uid = f.str("uid")?.to_string();
    if !is_safe_name(&uid) {
        return Err(
            f.error("uid", format!("{uid:?} must be 1-128 characters of A-Z a-z 0-9 . _ - and not start with '.'"))
        );
    }
    let type_name = f.str("type")?.to_string();
    let descriptor = registry::descriptor(&type_name).map_err(|e| f.error("type", e.to_string()))?;
    let params = match f.get("params") {
        None => Json::Object(Default::default()),
        Some(p) if p.is_object() => p.clone(),
        Some(_) => return Err(f.error("params", "expected an object")),
    };
    let parallelism = f.u64("parallelism")?;
    if !(1..=MAX_PARALLELISM).contains(&parallelism) {
        return Err(f.error("parallelism", format!("expected 1 to {MAX_PARALLELISM}, found {parallelism}")));
    }
    Ok(OperatorSpec { id, uid, type_name, params, parallelism: parallelism as u32, descriptor })
}

fn edges(root: &Fields<'_>, specs: &[OperatorSpec]) -> Result<Vec<RawEdge>, JobError> {
    let known: BTreeSet<OperatorId> = specs.iter().map(|s| s.id).collect();
    let mut edges = Vec::new();
    let mut seen = BTreeSet::new();
    for (i, item) in root.array("edges")?.iter().enumerate() {
        let path = format!("edges[{i}]");
        let f = Fields::object(item, &path)?;
        f.only(&["from", "to", "partition"])?;
        let from = OperatorId(f.decimal_id("from")?);
        let to = OperatorId(f.decimal_id("to")?);
        for (field, id) in [("from", from), ("to", to)] {
            if !known.contains(&id) {
                return Err(f.error(field, format!("no operator has id {id}")));
            }
        }
        if from == to {
            return Err(f.error("to", format!("operator {from} cannot feed itself")));
        }
        if !seen.insert((from, to)) {
            return Err(f.error("to", format!("a second edge from {from} to {to}")));
        }
        let partition = raw_partition(f.get("partition"), &f.field_path("partition"))?;
        edges.push(RawEdge { from, to, partition, path });
    }
    Ok(edges)
}

/// `"forward"` or `{"hash": [columns]}`, sitting at `at`.
pub(crate) fn raw_partition(value: Option<&Json>, at: &str) -> Result<RawPartition, JobError> {
    match value {
        Some(Json::String(s)) if s == "forward" => Ok(RawPartition::Forward),
        Some(hash @ Json::Object(_)) => {
            let hash = Fields::object(hash, at)?;
            hash.only(&["hash"])?;
            let columns = hash.str_list("hash")?;
            if columns.is_empty() {
                return Err(hash.error("hash", "a hash partition needs at least one key column"));
            }
            Ok(RawPartition::Hash(columns))
        }
        Some(_) => Err(JobError::new(at, "expected \"forward\" or {\"hash\": [columns]}")),
        None => Err(JobError::new(at, "missing")),
    }
}
