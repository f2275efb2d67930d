//! Planning a read job: exactly one source, every path ending in a sink,
//! single-input operators, no cycle; then, in topological order, each
//! operator's params checked by the registry against its input, and each
//! edge's partition resolved against its producer's columns.

use std::collections::{BTreeMap, BTreeSet};

use clink_basics::ids::OperatorId;

use super::parse::{Document, RawEdge, RawPartition};
use super::{Edge, JobError, JobGraph, OperatorSpec, PlannedOperator};
use crate::operators::OperatorKind;

pub(super) fn plan(document: Document) -> Result<JobGraph, JobError> {
    let Document { job_id, name, specs, edges: raw_edges } = document;
    let index_of: BTreeMap<OperatorId, usize> = specs.iter().enumerate().map(|(i, s)| (s.id, i)).collect();
    let path_of = |id: OperatorId| format!("operators[{}]", index_of.get(&id).copied().unwrap_or_default());
    let mut inputs: BTreeMap<OperatorId, Vec<usize>> = BTreeMap::new();
    let mut outputs: BTreeMap<OperatorId, Vec<usize>> = BTreeMap::new();
    for (i, edge) in raw_edges.iter().enumerate() {
        outputs.entry(edge.from).or_default().push(i);
        inputs.entry(edge.to).or_default().push(i);
    }
    check_one_source(&specs, &path_of)?;
    check_one_commit_family(&specs, &path_of)?;
    for spec in &specs {
        let n_in = inputs.get(&spec.id).map_or(0, Vec::len);
        let n_out = outputs.get(&spec.id).map_or(0, Vec::len);
        check_degree(spec, n_in, n_out, path_of(spec.id))?;
    }

    let order = topological_order(&specs, &raw_edges)?;
    let mut planned: BTreeMap<OperatorId, PlannedOperator> = BTreeMap::new();
    let mut edges = Vec::new();
    for id in &order {
        let spec = &specs[index_of[id]];
        let input_edge = inputs.get(id).and_then(|v| v.first()).map(|&i| &raw_edges[i]);
        let input_schema = input_edge.map(|e| planned[&e.from].output_schema.clone());
        let operator = PlannedOperator::plan(spec.clone(), input_schema).map_err(|e| {
            let at = if e.path == "$" { String::new() } else { format!(".{}", e.path) };
            JobError::new(format!("{}.params{at}", path_of(*id)), e.message)
        })?;
        if let Some(edge) = input_edge {
            edges.push(plan_edge(edge, &planned[&edge.from], &operator)?);
        }
        planned.insert(*id, operator);
    }
    let operators = order.iter().filter_map(|id| planned.remove(id)).collect();
    Ok(JobGraph { job_id, name, operators, edges })
}

fn check_one_source(specs: &[OperatorSpec], path_of: &dyn Fn(OperatorId) -> String) -> Result<(), JobError> {
    let sources: Vec<&OperatorSpec> = specs.iter().filter(|s| s.kind() == OperatorKind::Source).collect();
    match sources.as_slice() {
        [] => Err(JobError::new("operators", "a job needs exactly one source operator; it has none")),
        [one] if one.parallelism != 1 => {
            Err(JobError::new(format!("{}.parallelism", path_of(one.id)), "a source runs at parallelism 1"))
        }
        [_] => Ok(()),
        [_, second, ..] => Err(JobError::new(
            format!("{}.type", path_of(second.id)),
            "a job has exactly one source operator; this is a second",
        )),
    }
}

/// A job's sinks confirm their commits all or none: the commit-confirmed
/// family restores from a CONFIRMED checkpoint, which a sink of another
/// family never confirms, and from below the completed checkpoints a
/// recoverable sink's open re-commits.
fn check_one_commit_family(specs: &[OperatorSpec], path_of: &dyn Fn(OperatorId) -> String) -> Result<(), JobError> {
    let sinks: Vec<(&OperatorSpec, bool)> =
        specs.iter().filter_map(|s| s.descriptor.sink_family().map(|f| (s, f.needs_commit_confirmation()))).collect();
    let Some((first, confirms)) = sinks.first().copied() else {
        return Ok(());
    };
    match sinks.iter().find(|(_, c)| *c != confirms) {
        None => Ok(()),
        Some((other, _)) => Err(JobError::new(
            format!("{}.type", path_of(other.id)),
            format!(
                "sink {} ({}) and sink {} ({}) are of different commit families; a job's sinks confirm their commits all or none",
                first.id, first.descriptor.type_name, other.id, other.descriptor.type_name
            ),
        )),
    }
}

/// Sources have no input and feed something; transforms and sinks take one
/// input; transforms feed something and sinks nothing.
fn check_degree(spec: &OperatorSpec, n_in: usize, n_out: usize, at: String) -> Result<(), JobError> {
    let id = spec.id;
    let refusal = match spec.kind() {
        OperatorKind::Source if n_in > 0 => format!("source operator {id} cannot have inputs"),
        OperatorKind::Source if n_out == 0 => format!("source operator {id} feeds nothing"),
        OperatorKind::Sink if n_out > 0 => format!("sink operator {id} cannot have outputs"),
        OperatorKind::Transform | OperatorKind::Sink if n_in != 1 => {
            format!("operator {id} has {n_in} input edges; this engine runs single-input operators only")
        }
        OperatorKind::Transform if n_out == 0 => format!("operator {id} feeds nothing; end every path in a sink"),
        _ => return Ok(()),
    };
    Err(JobError::new(at, refusal))
}

fn plan_edge(edge: &RawEdge, upstream: &PlannedOperator, downstream: &PlannedOperator) -> Result<Edge, JobError> {
    let at = format!("{}.partition", edge.path);
    let partition = match &edge.partition {
        RawPartition::Forward if upstream.spec.parallelism != downstream.spec.parallelism => {
            return Err(JobError::new(
                at,
                format!(
                    "a forward edge needs equal parallelism; {} runs at {} and {} at {}",
                    edge.from, upstream.spec.parallelism, edge.to, downstream.spec.parallelism
                ),
            ))
        }
        raw => raw.resolve(&at, edge.from, &upstream.output_schema)?,
    };
    Ok(Edge { from: edge.from, to: edge.to, partition })
}

/// Kahn's algorithm from the source; what is left over sits on a cycle or is
/// unreachable, and both are refused by name.
fn topological_order(specs: &[OperatorSpec], edges: &[RawEdge]) -> Result<Vec<OperatorId>, JobError> {
    let mut in_degree: BTreeMap<OperatorId, usize> = specs.iter().map(|s| (s.id, 0)).collect();
    for edge in edges {
        *in_degree.entry(edge.to).or_default() += 1;
    }
    let mut ready: Vec<OperatorId> = specs.iter().filter(|s| s.kind() == OperatorKind::Source).map(|s| s.id).collect();
    let mut order = Vec::new();
    while let Some(id) = ready.pop() {
        order.push(id);
        for edge in edges.iter().filter(|e| e.from == id) {
            if let Some(d) = in_degree.get_mut(&edge.to) {
                *d -= 1;
                if *d == 0 {
                    ready.push(edge.to);
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
