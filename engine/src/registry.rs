//! The one operator registry: operator type names to their kind, their output
//! schema, and their constructors.
//!
//! The job validator, the runtime and replay all build operators here and
//! nowhere else, so a replayed operator is the operator production ran.

use std::path::PathBuf;

use crate::job::{Fields, JobError, OperatorSpec, PlannedOperator};
use crate::operators::{
    filter, idle, key_by, line_sink, proc_time_counter, project, segment_source, staged_sink, window, Environment,
    OperatorError, Sink, Source, Transform,
};
use crate::value::Schema;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperatorKind {
    Source,
    Transform,
    Sink,
}

const TYPES: &[(&str, OperatorKind)] = &[
    (segment_source::TYPE, OperatorKind::Source),
    (filter::TYPE, OperatorKind::Transform),
    (project::TYPE, OperatorKind::Transform),
    (key_by::TYPE, OperatorKind::Transform),
    (window::TYPE, OperatorKind::Transform),
    (idle::TYPE, OperatorKind::Transform),
    (proc_time_counter::TYPE, OperatorKind::Transform),
    (line_sink::TYPE, OperatorKind::Sink),
    (staged_sink::TYPE, OperatorKind::Sink),
];

pub fn type_names() -> Vec<&'static str> {
    TYPES.iter().map(|(name, _)| *name).collect()
}

pub fn kind_of(type_name: &str) -> Option<OperatorKind> {
    TYPES.iter().find(|(name, _)| *name == type_name).map(|(_, kind)| *kind)
}

/// Checks an operator's params against its input and returns its output
/// schema. Error paths are relative to `params`.
pub fn output_schema(spec: &OperatorSpec, input: Option<&Schema>) -> Result<Schema, JobError> {
    let params = &spec.params;
    let input = || input.ok_or_else(|| JobError::new("$", "the operator has no input"));
    match spec.type_name.as_str() {
        segment_source::TYPE => {
            Fields::object(params, "$")?.only(&[])?;
            Ok(segment_source::output_schema())
        }
        filter::TYPE => filter::plan(params, input()?).map(|_| input().cloned())?,
        project::TYPE => project::plan(params, input()?).map(|p| p.output),
        key_by::TYPE => key_by::plan(params, input()?),
        window::TYPE => window::plan(params, input()?).map(|p| p.output),
        idle::TYPE => idle::plan(params, input()?).map(|p| p.output),
        proc_time_counter::TYPE => proc_time_counter::plan(params, input()?).map(|p| p.output),
        line_sink::TYPE | staged_sink::TYPE => {
            Fields::object(params, "$")?.only(&[])?;
            Ok(Schema::default())
        }
        other => Err(JobError::new("$", format!("unknown operator type {other:?}"))),
    }
}

fn planned_input(op: &PlannedOperator) -> Result<&Schema, OperatorError> {
    op.input_schema
        .as_ref()
        .ok_or_else(|| OperatorError::Protocol(format!("operator {} has no input schema", op.spec.id)))
}

fn param_error(op: &PlannedOperator) -> impl FnOnce(JobError) -> OperatorError + '_ {
    move |e| OperatorError::Input(format!("operator {} params: {e}", op.spec.id))
}

pub fn build_source(op: &PlannedOperator, env: &Environment) -> Result<Box<dyn Source>, OperatorError> {
    match op.spec.type_name.as_str() {
        segment_source::TYPE => Ok(Box::new(segment_source::SegmentSource::new(env.input_dir.clone()))),
        other => Err(OperatorError::Protocol(format!("{other:?} is not a source"))),
    }
}

pub fn build_transform(op: &PlannedOperator) -> Result<Box<dyn Transform>, OperatorError> {
    let input = planned_input(op)?;
    let params = &op.spec.params;
    Ok(match op.spec.type_name.as_str() {
        filter::TYPE => Box::new(filter::plan(params, input).map_err(param_error(op))?),
        project::TYPE => Box::new(project::Project::new(project::plan(params, input).map_err(param_error(op))?)),
        key_by::TYPE => {
            key_by::plan(params, input).map_err(param_error(op))?;
            Box::new(key_by::KeyBy)
        }
        window::TYPE => Box::new(window::TumblingWindow::new(window::plan(params, input).map_err(param_error(op))?)),
        idle::TYPE => Box::new(idle::IdleDetector::new(idle::plan(params, input).map_err(param_error(op))?)),
        proc_time_counter::TYPE => Box::new(proc_time_counter::ProcTimeCounter::new(
            proc_time_counter::plan(params, input).map_err(param_error(op))?,
        )),
        other => return Err(OperatorError::Protocol(format!("{other:?} is not a transform"))),
    })
}

/// Decodes a participant's state through its operator's restore path, with
/// no side effect: a transform is built and restored on a manual clock, a
/// source's position and a sink's handles are decoded without touching input
/// or output. What `state.decode` runs on a bundle's snapshots.
pub fn decode_state(op: &PlannedOperator, slots: &crate::checkpoint::StateSlots) -> Result<(), OperatorError> {
    match op.spec.kind {
        OperatorKind::Source => match op.spec.type_name.as_str() {
            segment_source::TYPE => segment_source::decode_position(slots).map(|_| ()),
            other => Err(OperatorError::Protocol(format!("{other:?} is not a source"))),
        },
        OperatorKind::Transform => {
            let mut driver =
                crate::operators::driver::Driver::new(build_transform(op)?, crate::timers::Clock::Manual(0));
            driver.restore(slots)
        }
        OperatorKind::Sink => match op.spec.type_name.as_str() {
            staged_sink::TYPE => staged_sink::decode_handles(slots).map(|_| ()),
            line_sink::TYPE => Ok(()),
            other => Err(OperatorError::Protocol(format!("{other:?} is not a sink"))),
        },
    }
}

/// The columns of an operator's output rows that name the key each row
/// belongs to. The engine orders each key's rows and nothing across keys, so
/// comparisons of an operator's output group by these; an operator that
/// declares none is compared row for row.
pub fn output_key_columns(op: &PlannedOperator) -> Vec<usize> {
    match op.spec.type_name.as_str() {
        window::TYPE | idle::TYPE | proc_time_counter::TYPE => {
            let keys = op.spec.params.get("key").and_then(|k| k.as_array()).map_or(0, Vec::len);
            (0..keys).collect()
        }
        // key_by passes rows through: its key columns sit where the input has them.
        key_by::TYPE => op
            .spec
            .params
            .get("columns")
            .and_then(|c| c.as_array())
            .map(|cols| cols.iter().filter_map(|c| c.as_str().and_then(|n| op.output_schema.index_of(n))).collect())
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// The folder a sink publishes into: `<output-dir>/<uid>`.
pub fn sink_dir(op: &PlannedOperator, env: &Environment) -> PathBuf {
    env.output_dir.join(&op.spec.uid)
}

pub fn build_sink(op: &PlannedOperator, subtask: u32, env: &Environment) -> Result<Box<dyn Sink>, OperatorError> {
    let dir = sink_dir(op, env);
    Ok(match op.spec.type_name.as_str() {
        line_sink::TYPE => Box::new(line_sink::LineFileSink::new(dir, subtask)),
        staged_sink::TYPE => Box::new(staged_sink::StagedFileSink::new(dir, subtask, env.defects.clone())),
        other => return Err(OperatorError::Protocol(format!("{other:?} is not a sink"))),
    })
}

/// Checks what an operator needs before the job starts (a source's whole input).
pub fn preflight(op: &PlannedOperator, env: &Environment) -> Result<(), OperatorError> {
    if op.spec.type_name == segment_source::TYPE {
        segment_source::validate_input(&env.input_dir)?;
    }
    Ok(())
}
