//! `project`: keeps the named columns, in the order named. Stateless.

use serde_json::Value as Json;

use clink_basics::fields::{FieldError, Fields};
use crate::value::{Row, Schema, Value};

use super::{Context, Descriptor, OperatorError, Transform};

pub const TYPE: &str = "project";

pub struct Project {
    indices: Vec<usize>,
}

pub struct Plan {
    pub indices: Vec<usize>,
    pub output: Schema,
}

pub fn plan(params: &Json, input: &Schema) -> Result<Plan, FieldError> {
    let f = Fields::object(params, "$")?;
    f.only(&["columns"])?;
    let columns = f.str_list("columns")?;
    if columns.is_empty() {
        return Err(f.error("columns", "name at least one column"));
    }
    let mut indices = Vec::new();
    let mut output = Schema::default();
    for c in &columns {
        let (i, column) = input.column(c).ok_or_else(|| {
            f.error("columns", format!("no input column {c:?}; the input has {}", input.names().join(", ")))
        })?;
        if output.index_of(c).is_some() {
            return Err(f.error("columns", format!("column {c:?} is named twice")));
        }
        indices.push(i);
        output.0.push(column.clone());
    }
    Ok(Plan { indices, output })
}

impl Project {
    pub fn new(plan: Plan) -> Self {
        Self { indices: plan.indices }
    }
}

impl Transform for Project {
    fn on_record(&mut self, row: Row, cx: &mut Context<'_>) -> Result<(), OperatorError> {
        let projected = self.indices.iter().map(|&i| wrong_value(row.get(i).cloned().unwrap_or(Value::Null))).collect();
        cx.emit(projected);
        Ok(())
    }
}

/// The value passed on. A build with the `defect-project-wrong-value`
/// feature changes some decimals by one unit in the last place: a
/// transformation that computes a wrong value, which its sink then writes
/// faithfully (what only an independent reference can tell).
fn wrong_value(value: Value) -> Value {
    match value {
        Value::Decimal(d) if cfg!(feature = "defect-project-wrong-value") && d.unscaled.rem_euclid(10) == 7 => {
            Value::Decimal(crate::value::Decimal::new(d.unscaled.saturating_add(1), d.scale))
        }
        other => other,
    }
}

pub const DESCRIPTOR: Descriptor = Descriptor::transform(TYPE, build, plan_schema);

planned_transform!(Project::new);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operators::driver::Driver;
    use crate::event::Event;
    use crate::operators::segment_source::output_schema;
    use crate::timers::Clock;

    #[test]
    fn keeps_the_named_columns_in_order() {
        let p = plan(&serde_json::json!({"columns": ["amount", "account"]}), &output_schema()).unwrap();
        assert_eq!(p.output.names(), vec!["amount", "account"]);
        let mut d = Driver::new(Box::new(Project::new(p)), Clock::Manual(0));
        let mut out = Vec::new();
        d.handle(Event::Record(vec![Value::Timestamp(1), Value::Str("a".into()), Value::Int(5)]), &mut out).unwrap();
        assert_eq!(out, vec![vec![Value::Int(5), Value::Str("a".into())]]);
        assert!(plan(&serde_json::json!({"columns": ["account", "account"]}), &output_schema()).is_err());
        assert!(plan(&serde_json::json!({"columns": []}), &output_schema()).is_err());
    }
}
