//! `key_by`: passes records through unchanged and declares the key the
//! downstream hash edge partitions by. It holds no state.

use serde_json::Value as Json;

use crate::job::{Fields, JobError};
use crate::value::{Row, Schema};

use super::{Context, OperatorError, Transform};

pub const TYPE: &str = "key_by";

pub struct KeyBy;

/// The key columns, which must exist in the input.
pub fn plan(params: &Json, input: &Schema) -> Result<Schema, JobError> {
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
        cx.emit(row);
        Ok(())
    }
}
