//! Job graphs: the JSON a user writes, and the validated graph the runtime and
//! replay build from.
//!
//! This module owns the job format (`clink-job`, version 1) and every rule a
//! graph must satisfy before anything runs. It never builds an operator: the
//! registry does, from the specs validated here. Every refusal names the path
//! of the field at fault (`operators[2].id`) and what was expected.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;

use serde_json::Value as Json;
use thiserror::Error;

use crate::registry::{self, OperatorKind};
use crate::value::Schema;

pub const JOB_FORMAT: &str = "clink-job";
pub const JOB_VERSION: u64 = 1;
/// A job file larger than this is refused unread.
pub const MAX_JOB_BYTES: u64 = 4 * 1024 * 1024;
pub const MAX_OPERATORS: usize = 1024;
pub const MAX_PARALLELISM: u64 = 128;

/// A 64-bit operator id, written in JSON as decimal text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OperatorId(pub u64);

impl fmt::Display for OperatorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl OperatorId {
    /// Parses canonical decimal text: digits only, no sign, no leading zero.
    pub fn parse(text: &str) -> Option<OperatorId> {
        parse_decimal_u64(text).map(OperatorId)
    }
}

/// Canonical decimal text of a u64: ASCII digits, no sign, no leading zeros.
pub fn parse_decimal_u64(text: &str) -> Option<u64> {
    let canonical =
        !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) && (text == "0" || !text.starts_with('0'));
    if canonical {
        text.parse().ok()
    } else {
        None
    }
}

/// A refusal of a job: where in the document, and why.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("{path}: {message}")]
pub struct JobError {
    pub path: String,
    pub message: String,
}

impl JobError {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self { path: path.into(), message: message.into() }
    }
}

/// How an edge spreads records over the consumer's subtasks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Partition {
    /// Subtask `s` feeds subtask `s`; the two sides have equal parallelism.
    Forward,
    /// By the key group of these columns of the producer's rows.
    Hash { columns: Vec<String>, indices: Vec<usize> },
}

#[derive(Debug, Clone, PartialEq)]
pub struct OperatorSpec {
    pub id: OperatorId,
    pub uid: String,
    pub type_name: String,
    pub params: Json,
    pub parallelism: u32,
    pub kind: OperatorKind,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Edge {
    pub from: OperatorId,
    pub to: OperatorId,
    pub partition: Partition,
}

/// A validated job: operators in topological order, each with the schema of
/// the rows it receives and the rows it emits.
#[derive(Debug, Clone)]
pub struct JobGraph {
    pub job_id: u64,
    pub name: String,
    pub operators: Vec<PlannedOperator>,
    pub edges: Vec<Edge>,
}

#[derive(Debug, Clone)]
pub struct PlannedOperator {
    pub spec: OperatorSpec,
    pub input_schema: Option<Schema>,
    pub output_schema: Schema,
}

impl JobGraph {
    pub fn operator(&self, id: OperatorId) -> Option<&PlannedOperator> {
        self.operators.iter().find(|o| o.spec.id == id)
    }

    pub fn outputs_of(&self, id: OperatorId) -> impl Iterator<Item = &Edge> {
        self.edges.iter().filter(move |e| e.from == id)
    }

    pub fn inputs_of(&self, id: OperatorId) -> impl Iterator<Item = &Edge> {
        self.edges.iter().filter(move |e| e.to == id)
    }

    pub fn source(&self) -> &PlannedOperator {
        // validate() guarantees exactly one source, first in topological order.
        &self.operators[0]
    }
}

/// Reads and validates a job file.
pub fn load_job(path: &Path) -> Result<JobGraph, JobError> {
    let shown = path.display().to_string();
    let bytes = crate::files::read_bounded(path, MAX_JOB_BYTES)
        .map_err(|e| JobError::new(&shown, format!("cannot read: {e}")))?;
    let text = String::from_utf8(bytes).map_err(|_| JobError::new(&shown, "not UTF-8"))?;
    parse_job(&text).map_err(|e| JobError::new(format!("{shown}: {}", e.path), e.message))
}

/// Parses and validates a job document.
pub fn parse_job(text: &str) -> Result<JobGraph, JobError> {
    let doc: Json = serde_json::from_str(text).map_err(|e| JobError::new("$", format!("not JSON: {e}")))?;
    let root = Fields::object(&doc, "$")?;
    root.only(&["format", "version", "job_id", "name", "operators", "edges"])?;
    let format = root.str("format")?;
    if format != JOB_FORMAT {
        return Err(JobError::new("format", format!("expected \"{JOB_FORMAT}\", found {format:?}")));
    }
    let version = root.u64("version")?;
    if version != JOB_VERSION {
        return Err(JobError::new("version", format!("this build reads version {JOB_VERSION}; found {version}")));
    }
    let job_id = match root.get("job_id") {
        None => 1,
        Some(_) => root.decimal_id("job_id")?,
    };
    let name = match root.get("name") {
        None => String::from("job"),
        Some(_) => root.str("name")?.to_string(),
    };
    let specs = parse_operators(&root)?;
    let edges = parse_edges(&root, &specs)?;
    plan(job_id, name, specs, edges)
}

fn parse_operators(root: &Fields<'_>) -> Result<Vec<OperatorSpec>, JobError> {
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
        let path = format!("operators[{i}]");
        let f = Fields::object(item, &path)?;
        f.only(&["id", "uid", "type", "params", "parallelism"])?;
        let id = OperatorId(f.decimal_id("id")?);
        if !ids.insert(id) {
            return Err(f.error("id", format!("duplicate operator id {id}")));
        }
        let uid = f.str("uid")?.to_string();
        if !is_safe_name(&uid) {
            return Err(f.error(
                "uid",
                format!("{uid:?} must be 1-128 characters of A-Z a-z 0-9 . _ - and not start with '.'"),
            ));
        }
        if !uids.insert(uid.clone()) {
            return Err(f.error("uid", format!("duplicate uid {uid:?}")));
        }
        let type_name = f.str("type")?.to_string();
        let kind = registry::kind_of(&type_name).ok_or_else(|| {
            f.error(
                "type",
                format!("unknown operator type {type_name:?}; known types: {}", registry::type_names().join(", ")),
            )
        })?;
        let params = match f.get("params") {
            None => Json::Object(Default::default()),
            Some(p) if p.is_object() => p.clone(),
            Some(_) => return Err(f.error("params", "expected an object")),
        };
        let parallelism = f.u64("parallelism")?;
        if !(1..=MAX_PARALLELISM).contains(&parallelism) {
            return Err(f.error("parallelism", format!("expected 1 to {MAX_PARALLELISM}, found {parallelism}")));
        }
        specs.push(OperatorSpec { id, uid, type_name, params, parallelism: parallelism as u32, kind });
    }
    Ok(specs)
}

/// Names that become directory names (sink folders): no separators, no `..`.
pub fn is_safe_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

enum RawPartition {
    Forward,
    Hash(Vec<String>),
}

fn parse_edges(
    root: &Fields<'_>,
    specs: &[OperatorSpec],
) -> Result<Vec<(OperatorId, OperatorId, RawPartition, String)>, JobError> {
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
        let partition = match f.get("partition") {
            Some(Json::String(s)) if s == "forward" => RawPartition::Forward,
            Some(Json::Object(_)) => {
                let hash = Fields::object(f.value("partition")?, &f.field_path("partition"))?;
                hash.only(&["hash"])?;
                let columns = hash.str_list("hash")?;
                if columns.is_empty() {
                    return Err(hash.error("hash", "a hash partition needs at least one key column"));
                }
                RawPartition::Hash(columns)
            }
            Some(_) => {
                return Err(f.error("partition", "expected \"forward\" or {\"hash\": [columns]}"));
            }
            None => return Err(f.error("partition", "missing")),
        };
        edges.push((from, to, partition, path));
    }
    Ok(edges)
}

fn plan(
    job_id: u64,
    name: String,
    specs: Vec<OperatorSpec>,
    raw_edges: Vec<(OperatorId, OperatorId, RawPartition, String)>,
) -> Result<JobGraph, JobError> {
    let index_of: BTreeMap<OperatorId, usize> = specs.iter().enumerate().map(|(i, s)| (s.id, i)).collect();
    let path_of = |id: OperatorId| format!("operators[{}]", index_of[&id]);
    let mut inputs: BTreeMap<OperatorId, Vec<usize>> = BTreeMap::new();
    let mut outputs: BTreeMap<OperatorId, Vec<usize>> = BTreeMap::new();
    for (i, (from, to, _, _)) in raw_edges.iter().enumerate() {
        outputs.entry(*from).or_default().push(i);
        inputs.entry(*to).or_default().push(i);
    }

    let sources: Vec<&OperatorSpec> = specs.iter().filter(|s| s.kind == OperatorKind::Source).collect();
    match sources.as_slice() {
        [] => return Err(JobError::new("operators", "a job needs exactly one source operator; it has none")),
        [one] => {
            if one.parallelism != 1 {
                return Err(JobError::new(
                    format!("{}.parallelism", path_of(one.id)),
                    "a source runs at parallelism 1",
                ));
            }
        }
        [_, second, ..] => {
            return Err(JobError::new(
                format!("{}.type", path_of(second.id)),
                "a job has exactly one source operator; this is a second",
            ))
        }
    }
    for spec in &specs {
        let n_in = inputs.get(&spec.id).map_or(0, Vec::len);
        let n_out = outputs.get(&spec.id).map_or(0, Vec::len);
        let at = path_of(spec.id);
        match spec.kind {
            OperatorKind::Source if n_in > 0 => {
                return Err(JobError::new(at, format!("source operator {} cannot have inputs", spec.id)))
            }
            OperatorKind::Source if n_out == 0 => {
                return Err(JobError::new(at, format!("source operator {} feeds nothing", spec.id)))
            }
            OperatorKind::Sink if n_out > 0 => {
                return Err(JobError::new(at, format!("sink operator {} cannot have outputs", spec.id)))
            }
            OperatorKind::Transform | OperatorKind::Sink if n_in != 1 => {
                return Err(JobError::new(
                    at,
                    format!(
                        "operator {} has {n_in} input edges; this engine runs single-input operators only",
                        spec.id
                    ),
                ))
            }
            OperatorKind::Transform if n_out == 0 => {
                return Err(JobError::new(at, format!("operator {} feeds nothing; end every path in a sink", spec.id)))
            }
            _ => {}
        }
    }

    let order = topological_order(&specs, &raw_edges)?;
    let mut planned: BTreeMap<OperatorId, PlannedOperator> = BTreeMap::new();
    let mut edges = Vec::new();
    for id in &order {
        let spec = &specs[index_of[id]];
        let input_edge = inputs.get(id).and_then(|v| v.first()).map(|&i| &raw_edges[i]);
        let input_schema = input_edge.map(|(from, _, _, _)| planned[from].output_schema.clone());
        let output_schema = registry::output_schema(spec, input_schema.as_ref()).map_err(|e| {
            let at = if e.path == "$" { String::new() } else { format!(".{}", e.path) };
            JobError::new(format!("{}.params{at}", path_of(*id)), e.message)
        })?;
        if let Some((from, to, partition, path)) = input_edge {
            let upstream = &planned[from];
            let partition = match partition {
                RawPartition::Forward => {
                    if upstream.spec.parallelism != spec.parallelism {
                        return Err(JobError::new(
                            format!("{path}.partition"),
                            format!(
                                "a forward edge needs equal parallelism; {from} runs at {} and {to} at {}",
                                upstream.spec.parallelism, spec.parallelism
                            ),
                        ));
                    }
                    Partition::Forward
                }
                RawPartition::Hash(columns) => {
                    let mut indices = Vec::new();
                    for column in columns {
                        let index = upstream.output_schema.index_of(column).ok_or_else(|| {
                            JobError::new(
                                format!("{path}.partition.hash"),
                                format!(
                                    "column {column:?} is not among the columns {from} emits: {}",
                                    upstream.output_schema.names().join(", ")
                                ),
                            )
                        })?;
                        indices.push(index);
                    }
                    Partition::Hash { columns: columns.clone(), indices }
                }
            };
            edges.push(Edge { from: *from, to: *to, partition });
        }
        planned.insert(*id, PlannedOperator { spec: spec.clone(), input_schema, output_schema });
    }
    let operators = order.iter().map(|id| planned.remove(id).expect("planned above")).collect();
    Ok(JobGraph { job_id, name, operators, edges })
}

/// Kahn's algorithm from the source; what is left over sits on a cycle or is
/// unreachable, and both are refused by name.
fn topological_order(
    specs: &[OperatorSpec],
    edges: &[(OperatorId, OperatorId, RawPartition, String)],
) -> Result<Vec<OperatorId>, JobError> {
    let mut in_degree: BTreeMap<OperatorId, usize> = specs.iter().map(|s| (s.id, 0)).collect();
    for (_, to, _, _) in edges {
        *in_degree.entry(*to).or_default() += 1;
    }
    let mut ready: Vec<OperatorId> = specs.iter().filter(|s| s.kind == OperatorKind::Source).map(|s| s.id).collect();
    let mut order = Vec::new();
    while let Some(id) = ready.pop() {
        order.push(id);
        for (from, to, _, _) in edges {
            if *from == id {
                let d = in_degree.get_mut(to).expect("edge targets are known ids");
                *d -= 1;
                if *d == 0 {
                    ready.push(*to);
                }
            }
        }
    }
    if order.len() < specs.len() {
        let placed: BTreeSet<_> = order.iter().collect();
        let left: Vec<String> = specs.iter().filter(|s| !placed.contains(&s.id)).map(|s| s.id.to_string()).collect();
        return Err(JobError::new(
            "edges",
            format!("operators {} are on a cycle or not reachable from the source", left.join(", ")),
        ));
    }
    Ok(order)
}

/// Typed access to one JSON object's fields, each error carrying the field's path.
pub struct Fields<'a> {
    map: &'a serde_json::Map<String, Json>,
    path: String,
}

impl<'a> Fields<'a> {
    pub fn object(value: &'a Json, path: &str) -> Result<Self, JobError> {
        match value {
            Json::Object(map) => Ok(Self { map, path: path.to_string() }),
            other => Err(JobError::new(path, format!("expected an object, found {}", kind_name(other)))),
        }
    }

    pub fn field_path(&self, field: &str) -> String {
        if self.path == "$" {
            field.to_string()
        } else {
            format!("{}.{field}", self.path)
        }
    }

    pub fn error(&self, field: &str, message: impl Into<String>) -> JobError {
        JobError::new(self.field_path(field), message)
    }

    /// Refuses any field not in `allowed`, so a misspelt field is not ignored.
    pub fn only(&self, allowed: &[&str]) -> Result<(), JobError> {
        match self.map.keys().find(|k| !allowed.contains(&k.as_str())) {
            None => Ok(()),
            Some(k) if allowed.is_empty() => Err(self.error(k, "unknown field; this takes no fields")),
            Some(k) => Err(self.error(k, format!("unknown field; expected one of {}", allowed.join(", ")))),
        }
    }

    pub fn get(&self, field: &str) -> Option<&'a Json> {
        self.map.get(field)
    }

    pub fn value(&self, field: &str) -> Result<&'a Json, JobError> {
        self.get(field).ok_or_else(|| self.error(field, "missing"))
    }

    pub fn str(&self, field: &str) -> Result<&'a str, JobError> {
        match self.value(field)? {
            Json::String(s) => Ok(s),
            other => Err(self.error(field, format!("expected a string, found {}", kind_name(other)))),
        }
    }

    pub fn u64(&self, field: &str) -> Result<u64, JobError> {
        match self.value(field)? {
            Json::Number(n) if n.as_u64().is_some() => Ok(n.as_u64().unwrap_or_default()),
            other => Err(self.error(field, format!("expected a non-negative integer, found {}", kind_name(other)))),
        }
    }

    /// A 64-bit id written as decimal text (JSON numbers stop at 2^53 in many readers).
    pub fn decimal_id(&self, field: &str) -> Result<u64, JobError> {
        match self.value(field)? {
            Json::String(s) => parse_decimal_u64(s)
                .ok_or_else(|| self.error(field, format!("expected a 64-bit id as decimal text, found {s:?}"))),
            other => Err(self.error(
                field,
                format!("expected a 64-bit id as decimal text (a JSON string), found {}", kind_name(other)),
            )),
        }
    }

    pub fn array(&self, field: &str) -> Result<&'a Vec<Json>, JobError> {
        match self.value(field)? {
            Json::Array(items) => Ok(items),
            other => Err(self.error(field, format!("expected an array, found {}", kind_name(other)))),
        }
    }

    pub fn str_list(&self, field: &str) -> Result<Vec<String>, JobError> {
        let items = self.array(field)?;
        items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                Json::String(s) => Ok(s.clone()),
                other => Err(JobError::new(
                    format!("{}[{i}]", self.field_path(field)),
                    format!("expected a string, found {}", kind_name(other)),
                )),
            })
            .collect()
    }
}

pub fn kind_name(value: &Json) -> &'static str {
    match value {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "an array",
        Json::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const EXAMPLE: &str = include_str!("../../fixtures/jobs/example/job.json");

    #[test]
    fn the_example_job_plans_in_topological_order() {
        let job = parse_job(EXAMPLE).unwrap();
        assert_eq!(job.source().spec.uid, "source");
        let order: Vec<u64> = job.operators.iter().map(|o| o.spec.id.0).collect();
        for edge in &job.edges {
            let from = order.iter().position(|&i| i == edge.from.0).unwrap();
            let to = order.iter().position(|&i| i == edge.to.0).unwrap();
            assert!(from < to, "{edge:?}");
        }
        let window = job.operator(OperatorId(3)).unwrap();
        assert_eq!(window.output_schema.names(), vec!["account", "window_start", "window_end", "count", "sum"]);
    }

    #[test]
    fn ids_use_all_64_bits_as_decimal_text() {
        let job = EXAMPLE.replace("\"1\"", "\"18446744073709551615\"");
        let job = parse_job(&job).unwrap();
        assert_eq!(job.source().spec.id, OperatorId(u64::MAX));
    }

    #[test]
    fn unknown_fields_are_refused_by_path() {
        let job = EXAMPLE.replace("\"parallelism\": 1}", "\"parallelism\": 1, \"paralelism\": 2}");
        let err = parse_job(&job).unwrap_err();
        assert_eq!(err.path, "operators[0].paralelism", "{err}");
    }

    /// Replacement values for mutating one field of the example.
    fn hostile_value() -> impl Strategy<Value = Json> {
        prop_oneof![
            Just(Json::Null),
            Just(Json::Bool(true)),
            any::<i64>().prop_map(Json::from),
            any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(Json::Null, Json::Number)),
            ".{0,12}".prop_map(Json::String),
            Just(serde_json::json!([])),
            Just(serde_json::json!({})),
            Just(serde_json::json!({"hash": []})),
            Just(Json::String("../..".into())),
            Just(Json::String("18446744073709551616".into())),
        ]
    }

    /// Every path to a value in a JSON document.
    fn paths(value: &Json, at: Vec<String>, out: &mut Vec<Vec<String>>) {
        out.push(at.clone());
        match value {
            Json::Object(map) => {
                for (k, v) in map {
                    let mut p = at.clone();
                    p.push(k.clone());
                    paths(v, p, out);
                }
            }
            Json::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    let mut p = at.clone();
                    p.push(i.to_string());
                    paths(v, p, out);
                }
            }
            _ => {}
        }
    }

    fn replace_at(doc: &mut Json, path: &[String], new: Json) {
        let mut at = doc;
        for step in path {
            at = match at {
                Json::Object(map) => map.get_mut(step).expect("path from the document"),
                Json::Array(items) => &mut items[step.parse::<usize>().expect("index")],
                _ => return,
            };
        }
        *at = new;
    }

    proptest! {
        #[test]
        fn arbitrary_text_never_panics(text in ".{0,400}") {
            let _ = parse_job(&text);
        }

        #[test]
        fn a_mutated_job_is_refused_with_a_path_or_still_valid(pick in any::<prop::sample::Index>(), value in hostile_value()) {
            let mut doc: Json = serde_json::from_str(EXAMPLE).unwrap();
            let mut all = Vec::new();
            paths(&doc, Vec::new(), &mut all);
            let path = pick.get(&all).clone();
            replace_at(&mut doc, &path, value);
            match parse_job(&doc.to_string()) {
                Ok(job) => prop_assert!(!job.operators.is_empty()),
                Err(e) => {
                    prop_assert!(!e.path.is_empty());
                    prop_assert!(!e.message.is_empty());
                }
            }
        }
    }
}
