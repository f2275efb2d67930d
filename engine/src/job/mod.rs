//! Job graphs: the JSON a user writes, and the validated graph the runtime and
//! replay build from.
//!
//! This module owns the job format (`clink-job`, version 1) and every rule a
//! graph must satisfy before anything runs: [`parse`] reads the document,
//! [`plan`] checks its shape, orders it and gives every operator its schemas.
//! It never builds an operator: the registry does, from the specs validated
//! here. Every refusal names the path of the field at fault
//! (`operators[2].id`) and what was expected.

mod parse;
mod plan;

use std::fmt;
use std::path::Path;

use clink_basics::fields::{FieldError, Fields};
use clink_basics::ids::OperatorId;
use serde_json::Value as Json;

use crate::checkpoint::StateSlots;
use crate::operators::{Descriptor, Environment, OperatorError, OperatorKind, Setup, Sink, Source, Transform};
use crate::registry;
use crate::value::Schema;

pub const JOB_FORMAT: &str = "clink-job";
pub const JOB_VERSION: u64 = 1;
/// A job file larger than this is refused unread.
pub const MAX_JOB_BYTES: u64 = 4 * 1024 * 1024;
pub const MAX_OPERATORS: usize = 1024;
pub const MAX_PARALLELISM: u64 = 128;

/// A refusal of a job: where in the document, and why.
pub type JobError = FieldError;

/// How an edge spreads records over the consumer's subtasks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Partition {
    /// Subtask `s` feeds subtask `s`; the two sides have equal parallelism.
    Forward,
    /// By the key group of these columns of the producer's rows.
    Hash { columns: Vec<String>, indices: Vec<usize> },
}

impl Partition {
    /// The partition as a job document writes it.
    pub fn to_json(&self) -> Json {
        match self {
            Partition::Forward => Json::String("forward".into()),
            Partition::Hash { columns, .. } => serde_json::json!({ "hash": columns }),
        }
    }

    /// Reads a partition as a job document writes it (`"forward"` or
    /// `{"hash": [columns]}`), resolving hash columns against the rows the
    /// producer emits. `at` is the path the value sits at.
    pub fn from_json(
        value: Option<&Json>,
        at: &str,
        producer: OperatorId,
        producer_output: &Schema,
    ) -> Result<Partition, FieldError> {
        parse::raw_partition(value, at)?.resolve(at, producer, producer_output)
    }
}

#[derive(Clone, PartialEq)]
pub struct OperatorSpec {
    pub id: OperatorId,
    pub uid: String,
    pub type_name: String,
    pub params: Json,
    pub parallelism: u32,
    /// The registry's entry for `type_name`.
    pub descriptor: &'static Descriptor,
}

impl fmt::Debug for OperatorSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OperatorSpec")
            .field("id", &self.id)
            .field("uid", &self.uid)
            .field("type_name", &self.type_name)
            .field("params", &self.params)
            .field("parallelism", &self.parallelism)
            .finish()
    }
}

impl OperatorSpec {
    pub fn kind(&self) -> OperatorKind {
        self.descriptor.kind()
    }
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

impl PlannedOperator {
    /// Plans one operator on its own (from a captured spec): its params
    /// checked by the registry against the input it is said to receive.
    pub fn plan(spec: OperatorSpec, input_schema: Option<Schema>) -> Result<PlannedOperator, FieldError> {
        let output_schema = (spec.descriptor.plan)(&spec.params, input_schema.as_ref())?;
        Ok(PlannedOperator { spec, input_schema, output_schema })
    }

    /// What the operator's constructor is given for one subtask.
    pub fn setup<'a>(&'a self, subtask: u32, env: &'a Environment) -> Setup<'a> {
        Setup {
            uid: &self.spec.uid,
            params: &self.spec.params,
            input: self.input_schema.as_ref(),
            subtask,
            parallelism: self.spec.parallelism,
            env,
        }
    }

    pub fn build_source(&self, env: &Environment) -> Result<Box<dyn Source>, OperatorError> {
        registry::build_source(self.spec.descriptor, &self.setup(0, env))
    }

    pub fn build_transform(&self, env: &Environment) -> Result<Box<dyn Transform>, OperatorError> {
        registry::build_transform(self.spec.descriptor, &self.setup(0, env))
    }

    pub fn build_sink(&self, subtask: u32, env: &Environment) -> Result<Box<dyn Sink>, OperatorError> {
        registry::build_sink(self.spec.descriptor, &self.setup(subtask, env))
    }

    /// Decodes a snapshot of this operator through its restore path, with no
    /// side effect (what `state.decode` runs on a bundle's snapshots).
    pub fn decode_state(&self, slots: &StateSlots) -> Result<(), OperatorError> {
        registry::decode_state(self.spec.descriptor, &self.setup(0, &Environment::default()), slots)
    }

    /// What the operator checks before the job starts.
    pub fn preflight(&self, env: &Environment) -> Result<(), OperatorError> {
        (self.spec.descriptor.preflight)(&self.setup(0, env))
    }

    /// The columns of this operator's output rows that name each row's key.
    /// The engine orders each key's rows and nothing across keys, so
    /// comparisons of an operator's output group by these; an operator that
    /// declares none is compared row for row.
    pub fn output_key_columns(&self) -> Vec<usize> {
        (self.spec.descriptor.key_columns)(&self.spec.params, &self.output_schema)
    }
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
        // plan() guarantees exactly one source, first in topological order.
        &self.operators[0]
    }

    /// The graph as a canonical job document (operators by id, edges by
    /// their ends): what [`parse_job`] reads back into the same graph, so two
    /// graphs are the same job exactly when their documents are equal. The
    /// checkpoint directory keeps this beside its markers.
    pub fn to_document(&self) -> Json {
        let mut operators: Vec<&PlannedOperator> = self.operators.iter().collect();
        operators.sort_by_key(|o| o.spec.id);
        let mut edges: Vec<&Edge> = self.edges.iter().collect();
        edges.sort_by_key(|e| (e.from, e.to));
        let operators: Vec<Json> = operators
            .iter()
            .map(|o| {
                serde_json::json!({
                    "id": o.spec.id.to_string(),
                    "uid": o.spec.uid,
                    "type": o.spec.type_name,
                    "params": o.spec.params,
                    "parallelism": o.spec.parallelism,
                })
            })
            .collect();
        let edges: Vec<Json> = edges
            .iter()
            .map(|e| serde_json::json!({"from": e.from.to_string(), "to": e.to.to_string(), "partition": e.partition.to_json()}))
            .collect();
        serde_json::json!({
            "format": JOB_FORMAT,
            "version": JOB_VERSION,
            "job_id": self.job_id.to_string(),
            "name": self.name,
            "operators": operators,
            "edges": edges,
        })
    }

    /// Whether any sink needs its commits confirmed before the job may
    /// restore past them (which chooses the restore rule).
    pub fn requires_commit_confirmation(&self) -> bool {
        self.operators
            .iter()
            .filter_map(|o| o.spec.descriptor.sink_family())
            .any(|family| family.needs_commit_confirmation())
    }
}

/// Reads and validates a job file.
pub fn load_job(path: &Path) -> Result<JobGraph, JobError> {
    let shown = path.display().to_string();
    let bytes = clink_basics::files::read_bounded(path, MAX_JOB_BYTES)
        .map_err(|e| JobError::new(&shown, format!("cannot read: {e}")))?;
    let text = String::from_utf8(bytes).map_err(|_| JobError::new(&shown, "not UTF-8"))?;
    parse_job(&text).map_err(|e| JobError::new(format!("{shown}: {}", e.path), e.message))
}

/// Parses and validates a job document.
pub fn parse_job(text: &str) -> Result<JobGraph, JobError> {
    let doc: Json = serde_json::from_str(text).map_err(|e| JobError::new("$", format!("not JSON: {e}")))?;
    let root = Fields::object(&doc, "$")?;
    let document = parse::document(&root)?;
    plan::plan(document)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const EXAMPLE: &str = include_str!("../../../fixtures/jobs/example/job.json");

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
    fn the_document_of_a_graph_reads_back_as_the_same_graph() {
        let job = parse_job(EXAMPLE).unwrap();
        let again = parse_job(&job.to_document().to_string()).unwrap();
        assert_eq!(again.to_document(), job.to_document());
        let ids = |g: &JobGraph| {
            let mut ids: Vec<_> = g.operators.iter().map(|o| (o.spec.id, o.spec.uid.clone())).collect();
            ids.sort();
            ids
        };
        assert_eq!(ids(&again), ids(&job));
        assert!(!job.requires_commit_confirmation());
    }

    const KAFKA_KAFKA: &str = include_str!("../../../fixtures/jobs/kafka-kafka/job.json");

    #[test]
    fn a_job_of_kafka_sinks_confirms_its_commits_and_may_not_mix_families() {
        assert!(parse_job(KAFKA_KAFKA).unwrap().requires_commit_confirmation());
        let mut doc: Json = serde_json::from_str(KAFKA_KAFKA).unwrap();
        doc["operators"].as_array_mut().unwrap().push(serde_json::json!(
            {"id": "5", "uid": "files", "type": "staged_file_sink", "params": {}, "parallelism": 2}
        ));
        doc["edges"].as_array_mut().unwrap().push(serde_json::json!({"from": "3", "to": "5", "partition": "forward"}));
        let err = parse_job(&doc.to_string()).unwrap_err();
        assert_eq!(err.path, "operators[4].type", "{err}");
        assert!(err.message.contains("different commit families"), "{err}");
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
