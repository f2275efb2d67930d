//! Which jobs reconciliation and the reference audit support, decided from
//! the job graph alone: one Kafka source, a chain of record-wise operators
//! (filters, projections, key_by), optionally one keyed tumbling window right
//! before the sink, and one ClickHouse sink. Anything else is named and
//! refused.

use clink_basics::fields::FieldError;
use clink_basics::ids::OperatorId;
use clink_engine::job::JobGraph;
use clink_engine::operators::{clickhouse_sink, kafka_source};
use clink_engine::value::{Column, ColumnType};
use serde_json::{json, Value as Json};

/// What the window declares, as the job graph says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowRules {
    pub operator: OperatorId,
    pub uid: String,
    /// The group key columns.
    pub key: Vec<String>,
    pub time_column: String,
    pub value_column: String,
    pub size_ms: i64,
    pub watermark_lag_ms: i64,
    /// The engine's window has no allowed lateness: a window closes when the
    /// watermark reaches its end.
    pub allowed_lateness_ms: i64,
}

impl WindowRules {
    /// The rules as a scope document's `transform` states them.
    pub fn document(&self) -> Json {
        json!({
            "kind": "tumble",
            "size_ms": self.size_ms,
            "time_column": self.time_column,
            "key": self.key,
            "aggregates": ["count", format!("sum({})", self.value_column)],
            "watermark": {
                "strategy": "least_partition_greatest_less_lag",
                "lag_ms": self.watermark_lag_ms,
                "idle_timeout_ms": Json::Null,
            },
            "allowed_lateness_ms": self.allowed_lateness_ms,
            "late_records": "drop",
            "source_end": "offsets_at_start",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transformation {
    /// Filters and projections only.
    RecordWise,
    Windowed(WindowRules),
    /// A transformation the reference audit does not support (named): the
    /// delivery can still be reconciled, its reference checks cannot.
    Unsupported(String),
}

/// The job as the audit sees it.
#[derive(Debug, Clone)]
pub struct JobShape {
    pub source: OperatorId,
    pub source_uid: String,
    pub source_plan: kafka_source::Plan,
    pub sink: OperatorId,
    pub sink_uid: String,
    pub sink_parallelism: u32,
    pub database: String,
    pub table: String,
    /// The sink's input columns, as the job writes them.
    pub columns: Vec<Column>,
    pub transformation: Transformation,
    /// The operators between source and sink, in order, by type.
    pub chain: Vec<String>,
}

impl JobShape {
    pub fn windowed(&self) -> Option<&WindowRules> {
        match &self.transformation {
            Transformation::Windowed(w) => Some(w),
            _ => None,
        }
    }

    /// Why the reference audit does not support the transformation, if it does not.
    pub fn unsupported(&self) -> Option<&str> {
        match &self.transformation {
            Transformation::Unsupported(why) => Some(why),
            _ => None,
        }
    }

    /// The window rows' identity: the group key, window_start and window_end.
    pub fn window_identity(&self) -> Option<Vec<String>> {
        self.windowed().map(|w| {
            let mut key = w.key.clone();
            key.extend(["window_start".to_string(), "window_end".to_string()]);
            key
        })
    }
}

/// Why the audit does not support a job graph, by name.
#[derive(Debug, thiserror::Error)]
pub enum ShapeError {
    #[error("the job has {count} sources; the audit supports one Kafka source")]
    Sources { count: usize },
    #[error("the source {uid:?} is a {type_name}; the audit supports one {} (a Kafka topic)", kafka_source::TYPE)]
    SourceNotKafka { uid: String, type_name: String },
    #[error("the source's params: {0}")]
    SourceParams(FieldError),
    /// An operator of the chain feeds no operator or several.
    #[error("operator {operator} feeds {outputs} operators; the audit supports a chain from the source to one sink")]
    NotAChain { operator: OperatorId, outputs: usize },
    #[error("the job graph names no operator {0}")]
    NoSuchOperator(OperatorId),
    #[error("operator {uid:?} has several inputs (a join or a union), which the audit does not support")]
    SeveralInputs { uid: String },
    #[error("the sink's params: {0}")]
    SinkParams(FieldError),
}

/// The job's shape, or why the audit does not support it (by name).
pub fn shape(graph: &JobGraph) -> Result<JobShape, ShapeError> {
    let sources: Vec<_> = graph.operators.iter().filter(|o| o.input_schema.is_none()).collect();
    let [source] = sources.as_slice() else {
        return Err(ShapeError::Sources { count: sources.len() });
    };
    if source.spec.type_name != kafka_source::TYPE {
        return Err(ShapeError::SourceNotKafka {
            uid: source.spec.uid.clone(),
            type_name: source.spec.type_name.clone(),
        });
    }
    let source_plan = kafka_source::plan(&source.spec.params).map_err(ShapeError::SourceParams)?;
    let mut chain = Vec::new();
    let mut window: Option<WindowRules> = None;
    let mut unsupported: Option<String> = None;
    let mut at = source.spec.id;
    let sink = loop {
        let outputs: Vec<_> = graph.outputs_of(at).collect();
        let [edge] = outputs.as_slice() else {
            return Err(ShapeError::NotAChain { operator: at, outputs: outputs.len() });
        };
        let next = graph.operator(edge.to).ok_or(ShapeError::NoSuchOperator(edge.to))?;
        if graph.outputs_of(next.spec.id).count() > 1 || graph.inputs_of(next.spec.id).count() != 1 {
            return Err(ShapeError::SeveralInputs { uid: next.spec.uid.clone() });
        }
        let t = next.spec.type_name.as_str();
        if t == clickhouse_sink::TYPE {
            break next;
        }
        chain.push(t.to_string());
        if unsupported.is_none() {
            let why = match t {
                "filter" | "project" | "key_by" if window.is_some() => Some(format!(
                    "a {t} ({:?}) after the window: the audit supports record-wise operators before the window only",
                    next.spec.uid
                )),
                "filter" | "project" | "key_by" => None,
                "tumbling_window" if window.is_some() => Some("two windows: the audit supports one keyed tumbling window".into()),
                "tumbling_window" => match window_rules(next, &source_plan) {
                    Ok(rules) => {
                        window = Some(rules);
                        None
                    }
                    Err(why) => Some(why),
                },
                other => Some(format!(
                    "operator {:?} is a {other}, which the reference audit does not support (filter, project, key_by and one tumbling_window)",
                    next.spec.uid
                )),
            };
            unsupported = why;
        }
        at = next.spec.id;
    };
    let sink_plan = clickhouse_sink::plan(&sink.spec.params).map_err(ShapeError::SinkParams)?;
    let columns = sink.input_schema.clone().map(|s| s.0).unwrap_or_default();
    Ok(JobShape {
        source: source.spec.id,
        source_uid: source.spec.uid.clone(),
        source_plan,
        sink: sink.spec.id,
        sink_uid: sink.spec.uid.clone(),
        sink_parallelism: sink.spec.parallelism,
        database: sink_plan.database,
        table: sink_plan.table,
        columns,
        transformation: match (unsupported, window) {
            (Some(why), _) => Transformation::Unsupported(why),
            (None, Some(w)) => Transformation::Windowed(w),
            (None, None) => Transformation::RecordWise,
        },
        chain,
    })
}

fn window_rules(op: &clink_engine::job::PlannedOperator, source: &kafka_source::Plan) -> Result<WindowRules, String> {
    let p = &op.spec.params;
    let text = |f: &str| p.get(f).and_then(Json::as_str).map(str::to_string);
    let key: Vec<String> = p
        .get("key")
        .and_then(Json::as_array)
        .map(|a| a.iter().filter_map(Json::as_str).map(str::to_string).collect())
        .unwrap_or_default();
    let (Some(time_column), Some(value_column), Some(size_ms)) =
        (text("time"), text("value"), p.get("size_ms").and_then(Json::as_i64))
    else {
        return Err(format!("the window {:?} does not declare time, value and size_ms", op.spec.uid));
    };
    // The window's time must be the source's event time, passed through unchanged.
    let source_time = source.columns.0.get(source.event_time).map(|c| c.name.clone()).unwrap_or_default();
    if time_column != source_time {
        return Err(format!(
            "the window {:?} times its records by {time_column:?}, not the source's event time {source_time:?}",
            op.spec.uid
        ));
    }
    let input = op.input_schema.as_ref().ok_or("the window has no input schema")?;
    if input.column(&time_column).map(|(_, c)| c.ty) != Some(ColumnType::Timestamp) {
        return Err(format!("the window's time column {time_column:?} is not a timestamp"));
    }
    if key.is_empty() {
        return Err(format!("the window {:?} is not keyed", op.spec.uid));
    }
    Ok(WindowRules {
        operator: op.spec.id,
        uid: op.spec.uid.clone(),
        key,
        time_column,
        value_column,
        size_ms,
        watermark_lag_ms: source.watermark_lag_ms,
        allowed_lateness_ms: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(name: &str) -> String {
        std::fs::read_to_string(format!("{}/../../fixtures/jobs/{name}/job.json", env!("CARGO_MANIFEST_DIR"))).unwrap()
    }

    #[test]
    fn the_supported_jobs_have_a_shape_and_the_rest_are_refused_by_name() {
        let graph = clink_engine::job::parse_job(&job("kafka-clickhouse")).unwrap();
        let s = shape(&graph).unwrap();
        assert_eq!(
            (s.source_uid.as_str(), s.sink_uid.as_str(), s.table.as_str()),
            ("events", "credits-out", "credits")
        );
        assert!(shape(&clink_engine::job::parse_job(&job("kafka-windows")).unwrap()).unwrap().windowed().is_some());
        match shape(&clink_engine::job::parse_job(&job("example")).unwrap()) {
            Err(e @ ShapeError::SourceNotKafka { .. }) => {
                assert!(e.to_string().contains("the audit supports one kafka_source (a Kafka topic)"), "{e}")
            }
            other => panic!("{other:?}"),
        }
    }
}
