//! `rename`: gives columns new names, rows unchanged. Stateless. A job that
//! writes to a table whose columns are named otherwise than its input needs
//! nothing else: the sink matches columns by name.

use serde_json::Value as Json;

use crate::value::{Row, Schema};
use clink_basics::fields::{FieldError, Fields};

use super::{Context, Descriptor, OperatorError, Transform};

pub const TYPE: &str = "rename";

pub struct Rename;

pub struct Plan {
    pub output: Schema,
}

/// `{"columns": {"old": "new", ...}}`: every old name an input column, the
/// names after renaming all distinct.
pub fn plan(params: &Json, input: &Schema) -> Result<Plan, FieldError> {
    let f = Fields::object(params, "$")?;
    f.only(&["columns"])?;
    let columns = f.child("columns")?;
    let Some(renames) = f.value("columns")?.as_object().filter(|m| !m.is_empty()) else {
        return Err(f.error("columns", "an object of at least one old name to its new name"));
    };
    let mut output = input.clone();
    for old in renames.keys() {
        let new = columns.str(old)?;
        if new.is_empty() {
            return Err(columns.error(old, "a new name is not empty"));
        }
        let Some(i) = input.index_of(old) else {
            return Err(columns.error(old, format!("no input column {old:?}; the input has {}", input.names().join(", "))));
        };
        output.0[i].name = new.to_string();
    }
    let names = output.names();
    if let Some(twice) = names.iter().enumerate().find(|(i, n)| names[..*i].contains(n)).map(|(_, n)| *n) {
        return Err(f.error("columns", format!("after renaming, two columns are named {twice:?}")));
    }
    Ok(Plan { output })
}

impl Rename {
    pub fn new(_plan: Plan) -> Self {
        Self
    }
}

impl Transform for Rename {
    fn on_record(&mut self, row: Row, cx: &mut Context<'_>) -> Result<(), OperatorError> {
        cx.emit(row);
        Ok(())
    }
}

pub const DESCRIPTOR: Descriptor = Descriptor::transform(TYPE, build, plan_schema);

planned_transform!(Rename::new);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Event;
    use crate::operators::driver::Driver;
    use crate::operators::segment_source::output_schema;
    use crate::timers::Clock;
    use crate::value::Value;
    use serde_json::json;

    #[test]
    fn renames_the_named_columns_and_passes_rows_unchanged() {
        let p = plan(&json!({"columns": {"amount": "cents", "account": "who"}}), &output_schema()).unwrap();
        assert_eq!(p.output.names(), vec!["time", "who", "cents"]);
        let mut d = Driver::new(Box::new(Rename::new(p)), Clock::Manual(0));
        let mut out = Vec::new();
        let row = vec![Value::Timestamp(1), Value::Str("a".into()), Value::Int(5)];
        d.handle(Event::Record(row.clone()), &mut out).unwrap();
        assert_eq!(out, vec![row]);
    }

    #[test]
    fn bad_renames_are_refused_naming_the_field() {
        let input = output_schema();
        for (params, path) in [
            (json!({"columns": {}}), "columns"),
            (json!({"columns": {"nope": "x"}}), "columns.nope"),
            (json!({"columns": {"amount": ""}}), "columns.amount"),
            (json!({"columns": {"amount": 7}}), "columns.amount"),
            (json!({"columns": {"amount": "time"}}), "columns"),
            (json!({"columns": {"amount": "x"}, "other": 1}), "other"),
        ] {
            let e = plan(&params, &input).err().unwrap_or_else(|| panic!("{params} was accepted"));
            assert!(e.to_string().contains(path), "{params}: {e}");
        }
    }
}
