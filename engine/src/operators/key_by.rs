//! `key_by`: passes records through unchanged and declares the key the
//! downstream hash edge partitions by. It holds no state.

use serde_json::Value as Json;

use clink_basics::fields::{FieldError, Fields};
use crate::value::{Row, Schema};

use super::{defaults, Context, Descriptor, OperatorError, Setup, Transform};

pub const TYPE: &str = "key_by";

pub struct KeyBy;

/// The key columns, which must exist in the input.
pub fn plan(params: &Json, input: &Schema) -> Result<Schema, FieldError> {
    let f = Fields::object(params, "$")?;
    f.only(&["columns"])?;
    let columns = f.str_list("columns")?;
    if columns.is_empty() {
        return Err(f.error("columns", "name at least one key column"));
    }
    for c in &columns {
        if input.index_of(c).is_none() {
            return Err(
                f.error("columns", format!("no input column {c:?}; the input has {}", input.names().join(", ")))
            );
        }
    }
    Ok(input.clone())
}

impl Transform for KeyBy {
    fn on_record(&mut self, row: Row, cx: &mut Context<'_>) -> Result<(), OperatorError> {
        if crate::defects::active().has(crate::defects::Defect::PanicInOperator) {
            panic!("test defect panic_in_operator");
        }
        cx.emit(row);
        Ok(())
    }
}

pub const DESCRIPTOR: Descriptor = Descriptor::transform(TYPE, build, plan_schema).keyed_by(passed_through_key_columns);

fn plan_schema(params: &Json, input: Option<&Schema>) -> Result<Schema, FieldError> {
    plan(params, defaults::input(input)?)
}

fn build(setup: &Setup<'_>) -> Result<Box<dyn Transform>, OperatorError> {
    plan(setup.params, setup.input()?).map_err(setup.params_error())?;
    Ok(Box::new(KeyBy))
}

/// key_by passes rows through: its key columns sit where the input has them.
fn passed_through_key_columns(params: &Json, output: &Schema) -> Vec<usize> {
    params
        .get("columns")
        .and_then(|c| c.as_array())
        .map(|cols| cols.iter().filter_map(|c| c.as_str().and_then(|n| output.index_of(n))).collect())
        .unwrap_or_default()
}
