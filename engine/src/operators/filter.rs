//! `filter`: keeps the records whose column compares true against a literal.
//! Stateless. A NULL compares false to everything.

use std::cmp::Ordering;

use serde_json::Value as Json;

use clink_basics::fields::{kind_name, FieldError, Fields};
use crate::value::{compare_values, ColumnType, Row, Schema, Value};

use super::{defaults, Context, Descriptor, OperatorError, Setup, Transform};

pub const TYPE: &str = "filter";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comparison {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Comparison {
    fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "eq" => Comparison::Eq,
            "ne" => Comparison::Ne,
            "lt" => Comparison::Lt,
            "le" => Comparison::Le,
            "gt" => Comparison::Gt,
            "ge" => Comparison::Ge,
            _ => return None,
        })
    }

    fn holds(self, ordering: Ordering) -> bool {
        match self {
            Comparison::Eq => ordering == Ordering::Equal,
            Comparison::Ne => ordering != Ordering::Equal,
            Comparison::Lt => ordering == Ordering::Less,
            Comparison::Le => ordering != Ordering::Greater,
            Comparison::Gt => ordering == Ordering::Greater,
            Comparison::Ge => ordering != Ordering::Less,
        }
    }
}

pub struct Filter {
    column: usize,
    comparison: Comparison,
    literal: Value,
}

pub fn plan(params: &Json, input: &Schema) -> Result<Filter, FieldError> {
    let f = Fields::object(params, "$")?;
    f.only(&["column", "op", "value"])?;
    let name = f.str("column")?;
    let (column, col) = input.column(name).ok_or_else(|| {
        f.error("column", format!("no input column {name:?}; the input has {}", input.names().join(", ")))
    })?;
    let op = f.str("op")?;
    let comparison =
        Comparison::parse(op).ok_or_else(|| f.error("op", format!("{op:?} is not one of eq, ne, lt, le, gt, ge")))?;
    let raw = f.value("value")?;
    let literal = literal_for(raw, col.ty).ok_or_else(|| {
        f.error("value", format!("{} does not fit column {name:?} of type {:?}", kind_name(raw), col.ty))
    })?;
    Ok(Filter { column, comparison, literal })
}

/// A JSON literal as a value of the column's type; a null literal is refused
/// (a NULL compares false to everything, so the filter would drop every row).
fn literal_for(raw: &Json, ty: ColumnType) -> Option<Value> {
    match crate::value::value_from_json(raw, ty)? {
        Value::Null => None,
        v => Some(v),
    }
}

impl Transform for Filter {
    fn on_record(&mut self, row: Row, cx: &mut Context<'_>) -> Result<(), OperatorError> {
        let keep = match row.get(self.column) {
            None | Some(Value::Null) => false,
            Some(v) => self.comparison.holds(compare_values(v, &self.literal)),
        };
        if keep {
            cx.emit(row);
        }
        Ok(())
    }
}


pub const DESCRIPTOR: Descriptor = Descriptor::transform(TYPE, build, plan_schema);

fn plan_schema(params: &Json, input: Option<&Schema>) -> Result<Schema, FieldError> {
    let input = defaults::input(input)?;
    plan(params, input)?;
    Ok(input.clone())
}

fn build(setup: &Setup<'_>) -> Result<Box<dyn Transform>, OperatorError> {
    Ok(Box::new(plan(setup.params, setup.input()?).map_err(setup.params_error())?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operators::driver::Driver;
    use crate::event::Event;
    use crate::operators::segment_source::output_schema;
    use crate::timers::Clock;
    use crate::value::Decimal;

    fn keeps(params: serde_json::Value, amount: &str) -> bool {
        let filter = plan(&params, &output_schema()).unwrap();
        let mut d = Driver::new(Box::new(filter), Clock::Manual(0));
        let mut out = Vec::new();
        let row = vec![Value::Timestamp(1), Value::Str("a".into()), Value::Decimal(Decimal::parse(amount, 2).unwrap())];
        d.handle(Event::Record(row), &mut out).unwrap();
        !out.is_empty()
    }

    #[test]
    fn decimals_compare_exactly() {
        let gt = serde_json::json!({"column": "amount", "op": "gt", "value": "10.00"});
        assert!(keeps(gt.clone(), "10.01"));
        assert!(!keeps(gt, "10"));
        assert!(keeps(serde_json::json!({"column": "amount", "op": "le", "value": "10"}), "10.00"));
    }

    #[test]
    fn params_are_refused_by_field() {
        let schema = output_schema();
        for (params, field) in [
            (serde_json::json!({"column": "nope", "op": "eq", "value": 1}), "column"),
            (serde_json::json!({"column": "amount", "op": "like", "value": "1"}), "op"),
            (serde_json::json!({"column": "amount", "op": "eq", "value": 1.5}), "value"),
            (serde_json::json!({"column": "amount", "op": "eq", "value": "1", "extra": 1}), "extra"),
        ] {
            let err = plan(&params, &schema).err().unwrap();
            assert_eq!(err.path, field, "{err}");
        }
    }
}
