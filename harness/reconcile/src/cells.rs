//! THE canonical cells (`clink-canonical-cells-v1`): how one value of a
//! sink's column is written so that two cells are equal exactly when the
//! values are. The reconciler turns the sink's recorded input and the
//! destination's answers into them, and the reference artifact's reader
//! checks an artifact's cells against them; nothing else decides equality of
//! values. (The independent reference writes the same form with code of its
//! own.)
//!
//! A cell is JSON `null` (NULL, equal only to NULL) or a string:
//!
//! | kind | the string |
//! |---|---|
//! | `int` | the integer in decimal, no sign on zero, no leading zero |
//! | `bool` | `true` or `false` |
//! | `float` | `nan` for every NaN; otherwise the IEEE-754 bits as 16 lowercase hex digits (so -0.0 and +0.0 differ) |
//! | `decimal(S)` | the unscaled integer at the column's scale S, as an `int` |
//! | `timestamp_ms` | ticks at millisecond precision since the epoch, as an `int` |
//! | `date` | days since 1970-01-01, as an `int` |
//! | `string` | the bytes themselves (UTF-8) |

use std::fmt;

use clink_connectors::clickhouse::types::ChType;
use clink_engine::value::{ColumnType, Value};
use serde_json::Value as Json;
use thiserror::Error;

/// The name the scope and the artifact give these rules.
pub const SEMANTICS: &str = "clink-canonical-cells-v1";

/// One canonical cell: `None` is NULL.
pub type Cell = Option<String>;

/// How a column's values are compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CellKind {
    Int,
    Bool,
    Float,
    Decimal { scale: u8 },
    TimestampMs,
    Date,
    String,
}

#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("{0}")]
pub struct CellError(pub String);

fn bad(message: impl Into<String>) -> CellError {
    CellError(message.into())
}

impl CellKind {
    /// The kind of a job column's values.
    pub fn of(ty: ColumnType) -> CellKind {
        match ty {
            ColumnType::Bool => CellKind::Bool,
            ColumnType::Int => CellKind::Int,
            ColumnType::Float => CellKind::Float,
            ColumnType::Decimal { scale } => CellKind::Decimal { scale },
            ColumnType::String => CellKind::String,
            ColumnType::Timestamp => CellKind::TimestampMs,
        }
    }

    /// The kind's name in scope documents (`decimal(2)`, `timestamp_ms`).
    pub fn name(self) -> String {
        match self {
            CellKind::Int => "int".into(),
            CellKind::Bool => "bool".into(),
            CellKind::Float => "float".into(),
            CellKind::Decimal { scale } => format!("decimal({scale})"),
            CellKind::TimestampMs => "timestamp_ms".into(),
            CellKind::Date => "date".into(),
            CellKind::String => "string".into(),
        }
    }

    pub fn parse(name: &str) -> Option<CellKind> {
        Some(match name {
            "int" => CellKind::Int,
            "bool" => CellKind::Bool,
            "float" => CellKind::Float,
            "timestamp_ms" => CellKind::TimestampMs,
            "date" => CellKind::Date,
            "string" => CellKind::String,
            _ => {
                let scale = name.strip_prefix("decimal(")?.strip_suffix(')')?;
                let scale: u8 = scale.parse().ok().filter(|s: &u8| *s <= 76 && s.to_string() == scale)?;
                CellKind::Decimal { scale }
            }
        })
    }

    /// Whether a key may be of this kind (integers and strings identify rows).
    pub fn can_key(self) -> bool {
        matches!(self, CellKind::Int | CellKind::TimestampMs | CellKind::String)
    }
}

impl fmt::Display for CellKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// Whether `text` is an integer in its one canonical spelling.
pub fn is_canonical_int(text: &str) -> bool {
    let digits = text.strip_prefix('-').unwrap_or(text);
    if digits.is_empty() || digits.len() > 80 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return false;
    }
    if digits.len() > 1 && digits.starts_with('0') {
        return false;
    }
    !(text.starts_with('-') && digits == "0")
}

/// The canonical spelling of an integer written in any decimal form the
/// server prints (`+5`, `-0`, `007` are read; nothing else is).
fn canonical_int(text: &str) -> Result<String, CellError> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if digits.is_empty() || digits.len() > 80 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad(format!("{text:?} is not an integer")));
    }
    let trimmed = digits.trim_start_matches('0');
    let trimmed = if trimmed.is_empty() { "0" } else { trimmed };
    Ok(if negative && trimmed != "0" { format!("-{trimmed}") } else { trimmed.to_string() })
}

/// A float's cell: every NaN one cell, otherwise its bits.
pub fn float_cell(f: f64) -> String {
    if f.is_nan() {
        "nan".into()
    } else {
        format!("{:016x}", f.to_bits())
    }
}

fn is_canonical_float(text: &str) -> bool {
    if text == "nan" {
        return true;
    }
    text.len() == 16
        && text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        && u64::from_str_radix(text, 16).is_ok_and(|bits| !f64::from_bits(bits).is_nan())
}

/// A value of the sink's input as its cell.
pub fn from_value(value: &Value, kind: CellKind) -> Result<Cell, CellError> {
    Ok(Some(match (kind, value) {
        (_, Value::Null) => return Ok(None),
        (CellKind::Int, Value::Int(v)) | (CellKind::TimestampMs, Value::Timestamp(v)) => v.to_string(),
        (CellKind::TimestampMs, Value::Int(v)) => v.to_string(),
        (CellKind::Bool, Value::Bool(b)) => b.to_string(),
        (CellKind::Float, Value::Float(f)) => float_cell(*f),
        (CellKind::Decimal { scale }, Value::Decimal(d)) => {
            let at = d.rescale(scale).ok_or_else(|| {
                bad(format!("decimal {d} does not fit scale {scale} exactly (its scale is {})", d.scale))
            })?;
            at.unscaled.to_string()
        }
        (CellKind::String, Value::Str(s)) => s.clone(),
        (kind, value) => return Err(bad(format!("a {value:?} is not a value of a {kind} column"))),
    }))
}

/// A cell of the destination's TabSeparated answer (`None`: `\N`), read as
/// the table's column type says, into the comparison's kind.
pub fn from_text(text: Option<&str>, table_type: &ChType, kind: CellKind) -> Result<Cell, CellError> {
    let Some(text) = text else {
        return match table_type {
            ChType::Nullable(_) => Ok(None),
            other => Err(bad(format!("NULL in a {other} column, which is not Nullable"))),
        };
    };
    let inner = match table_type {
        ChType::Nullable(inner) | ChType::LowCardinality(inner) => return from_text(Some(text), inner, kind),
        other => other,
    };
    let wrong = || bad(format!("a {inner} column does not hold {kind} values"));
    Ok(Some(match (kind, inner) {
        (CellKind::Int | CellKind::TimestampMs, ChType::Int { .. }) => canonical_int(text)?,
        (CellKind::Bool, ChType::Int { bits: 8, signed: false }) | (CellKind::Bool, ChType::Bool) => match text {
            "0" | "false" => "false".into(),
            "1" | "true" => "true".into(),
            other => return Err(bad(format!("{other:?} is not a Bool"))),
        },
        (CellKind::Float, ChType::Float { .. }) => {
            let f: f64 = match text {
                "inf" | "+inf" => f64::INFINITY,
                "-inf" => f64::NEG_INFINITY,
                "nan" | "-nan" | "+nan" => f64::NAN,
                other => other.parse().map_err(|_| bad(format!("{other:?} is not a float")))?,
            };
            float_cell(f)
        }
        (CellKind::Decimal { scale }, ChType::Decimal { scale: s, .. }) if *s == scale => {
            decimal_unscaled(text, scale)?
        }
        (CellKind::Decimal { .. }, ChType::Decimal { scale: s, .. }) => {
            return Err(bad(format!("a Decimal column of scale {s} compared at scale {kind}")))
        }
        // The reader selects a DateTime64 as its instant
        // (`toUnixTimestamp64Milli`, [`crate::read`]), never its rendering,
        // which the server's time zone and output format decide.
        (CellKind::TimestampMs, ChType::DateTime64 { precision: 3, timezone })
            if timezone.as_deref().is_none_or(|tz| tz == "UTC") =>
        {
            canonical_int(text)?
        }
        (CellKind::Date, ChType::Date) => days_of_date(text)?.to_string(),
        (CellKind::String, ChType::String) => text.to_string(),
        _ => return Err(wrong()),
    }))
}

/// A destination's cell as the engine writes that value in a line
/// (`clink_engine::value::render_line`): a decimal read as a value at its
/// column's scale and written with all its digits (`12.5` and `12.50` are
/// one value), an integer in its canonical digits, a string as itself. For
/// the suites that compare a table with line-rendered reference rows; other
/// types are refused.
pub fn engine_text(text: Option<&str>, table_type: &ChType) -> Result<String, CellError> {
    let Some(text) = text else {
        return Ok("NULL".into());
    };
    match table_type {
        ChType::Nullable(inner) | ChType::LowCardinality(inner) => engine_text(Some(text), inner),
        ChType::Decimal { scale, .. } => {
            let unscaled: i128 =
                decimal_unscaled(text, *scale)?.parse().map_err(|_| bad(format!("{text:?} is out of range")))?;
            Ok(clink_engine::value::Decimal::new(unscaled, *scale).to_string())
        }
        ChType::Int { .. } => canonical_int(text),
        ChType::String => Ok(text.to_string()),
        other => Err(bad(format!("a {other} cell is not compared as a line here"))),
    }
}

/// Whether a table column of this type can be read as the kind exactly.
pub fn reads_exactly(table_type: &ChType, kind: CellKind) -> bool {
    let inner = match table_type {
        ChType::Nullable(inner) | ChType::LowCardinality(inner) => return reads_exactly(inner, kind),
        other => other,
    };
    match (kind, inner) {
        (CellKind::Int | CellKind::TimestampMs, ChType::Int { .. }) => true,
        (CellKind::Bool, ChType::Int { bits: 8, signed: false } | ChType::Bool) => true,
        (CellKind::Float, ChType::Float { .. }) => true,
        (CellKind::Decimal { scale }, ChType::Decimal { scale: s, .. }) => *s == scale,
        (CellKind::TimestampMs, ChType::DateTime64 { precision: 3, timezone }) => {
            timezone.as_deref().is_none_or(|tz| tz == "UTC")
        }
        (CellKind::Date, ChType::Date) => true,
        (CellKind::String, ChType::String) => true,
        _ => false,
    }
}

/// `-?digits[.digits]` with exactly the scale's fraction digits (as the
/// server prints a Decimal), as the unscaled integer.
fn decimal_unscaled(text: &str, scale: u8) -> Result<String, CellError> {
    let (negative, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (int_part, frac) = body.split_once('.').unwrap_or((body, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if int_part.is_empty() || !digits(int_part) || !digits(frac) || frac.len() > usize::from(scale) {
        return Err(bad(format!("{text:?} is not a decimal of scale {scale}")));
    }
    let padded = format!("{frac:0<width$}", width = usize::from(scale));
    canonical_int(&format!("{}{int_part}{padded}", if negative { "-" } else { "" }))
}

/// `YYYY-MM-DD` as days since 1970-01-01 (proleptic Gregorian).
fn days_of_date(text: &str) -> Result<i64, CellError> {
    let wrong = || bad(format!("{text:?} is not a date"));
    let parts: Vec<&str> = text.split('-').collect();
    let [y, m, d] = parts.as_slice() else { return Err(wrong()) };
    if y.len() != 4 || m.len() != 2 || d.len() != 2 {
        return Err(wrong());
    }
    let num = |t: &str| t.parse::<i64>().map_err(|_| wrong());
    let (y, m, d) = (num(y)?, num(m)?, num(d)?);
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let month_days = [31, if leap { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    if !(1..=12).contains(&m) || d < 1 || d > month_days[(m - 1) as usize] {
        return Err(wrong());
    }
    // H. Hinnant's days_from_civil.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    Ok(era * 146_097 + doe - 719_468)
}

/// An artifact's JSON cell, checked to be canonical for its column.
pub fn check(json: &Json, kind: CellKind) -> Result<Cell, CellError> {
    let text = match json {
        Json::Null => return Ok(None),
        Json::String(s) => s,
        other => return Err(bad(format!("{other} is not a canonical cell (null or a string)"))),
    };
    let ok = match kind {
        CellKind::Int | CellKind::TimestampMs | CellKind::Date | CellKind::Decimal { .. } => is_canonical_int(text),
        CellKind::Bool => text == "true" || text == "false",
        CellKind::Float => is_canonical_float(text),
        CellKind::String => true,
    };
    if ok {
        Ok(Some(text.clone()))
    } else {
        Err(bad(format!("{text:?} is not a canonical {kind} cell")))
    }
}

/// A cell as JSON.
pub fn to_json(cell: &Cell) -> Json {
    match cell {
        None => Json::Null,
        Some(s) => Json::String(s.clone()),
    }
}

/// A row of cells as a JSON array.
pub fn row_json(row: &[Cell]) -> Json {
    Json::Array(row.iter().map(to_json).collect())
}

/// A cell as text for a report (`NULL`, or the JSON string).
pub fn show(cell: &Cell) -> String {
    match cell {
        None => "NULL".into(),
        Some(s) => Json::String(s.clone()).to_string(),
    }
}

/// A row as text for a report.
pub fn show_row(row: &[Cell]) -> String {
    format!("[{}]", row.iter().map(show).collect::<Vec<_>>().join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clink_engine::value::Decimal;
    use proptest::prelude::*;

    #[test]
    fn the_table_of_rules_holds() {
        // Integers exact, decimals as the unscaled integer at the scale.
        assert_eq!(from_value(&Value::Int(-7), CellKind::Int).unwrap(), Some("-7".into()));
        assert_eq!(
            from_value(&Value::Decimal(Decimal::new(150, 2)), CellKind::Decimal { scale: 2 }).unwrap(),
            Some("150".into())
        );
        assert_eq!(
            from_value(&Value::Decimal(Decimal::new(15, 1)), CellKind::Decimal { scale: 2 }).unwrap(),
            Some("150".into())
        );
        assert!(from_value(&Value::Decimal(Decimal::new(155, 3)), CellKind::Decimal { scale: 2 }).is_err());
        let dec = ChType::parse("Decimal(18, 2)");
        for (text, want) in [("1.50", "150"), ("-0.05", "-5"), ("0.00", "0"), ("12", "1200"), ("-0.00", "0")] {
            assert_eq!(
                from_text(Some(text), &dec, CellKind::Decimal { scale: 2 }).unwrap(),
                Some(want.into()),
                "{text}"
            );
        }
        // As the engine writes a line: 26 prints 12.5 and 7 for 12.50 and 7.00.
        for (text, want) in [("12.5", "12.50"), ("12.50", "12.50"), ("7", "7.00"), ("-0.05", "-0.05")] {
            assert_eq!(engine_text(Some(text), &dec).unwrap(), want);
        }
        assert!(engine_text(Some("1.234"), &dec).is_err(), "a fraction finer than the scale is no value of it");
        assert_eq!(engine_text(Some("-0"), &ChType::parse("Int64")).unwrap(), "0");
        // Floats by bits: every NaN equal, -0.0 and +0.0 different.
        let f = ChType::parse("Float64");
        assert_eq!(
            from_text(Some("nan"), &f, CellKind::Float).unwrap(),
            from_value(&Value::Float(-f64::NAN), CellKind::Float).unwrap()
        );
        assert_ne!(
            from_text(Some("-0"), &f, CellKind::Float).unwrap(),
            from_text(Some("0"), &f, CellKind::Float).unwrap()
        );
        assert_eq!(
            from_text(Some("1.5"), &f, CellKind::Float).unwrap(),
            from_value(&Value::Float(1.5), CellKind::Float).unwrap()
        );
        // Timestamps as ticks, from Int64 or DateTime64(3) (selected as its instant).
        let ms = from_value(&Value::Timestamp(1_700_000_000_123), CellKind::TimestampMs).unwrap();
        assert_eq!(from_text(Some("1700000000123"), &ChType::parse("Int64"), CellKind::TimestampMs).unwrap(), ms);
        assert_eq!(
            from_text(Some("1700000000123"), &ChType::parse("DateTime64(3)"), CellKind::TimestampMs).unwrap(),
            ms
        );
        assert_eq!(
            from_text(Some("-1"), &ChType::parse("DateTime64(3, 'UTC')"), CellKind::TimestampMs).unwrap(),
            Some("-1".into())
        );
        // A rendering is not an instant: the server's time zone and format decide it.
        assert!(
            from_text(Some("2023-11-14 22:13:20.123"), &ChType::parse("DateTime64(3)"), CellKind::TimestampMs).is_err()
        );
        assert_eq!(from_text(Some("2000-03-01"), &ChType::Date, CellKind::Date).unwrap(), Some("11017".into()));
        // Strings as bytes; NULL only equal to NULL.
        assert_eq!(from_text(Some("a\tb"), &ChType::String, CellKind::String).unwrap(), Some("a\tb".into()));
        assert_eq!(from_text(None, &ChType::parse("Nullable(String)"), CellKind::String).unwrap(), None);
        assert!(from_text(None, &ChType::String, CellKind::String).is_err(), "NULL in a column that is not Nullable");
        assert_ne!(from_text(Some(""), &ChType::parse("Nullable(String)"), CellKind::String).unwrap(), None);
        // Bools from UInt8 or Bool.
        assert_eq!(from_text(Some("1"), &ChType::parse("UInt8"), CellKind::Bool).unwrap(), Some("true".into()));
        assert!(from_text(Some("2"), &ChType::parse("UInt8"), CellKind::Bool).is_err());
        // A type that does not hold the kind is refused.
        assert!(from_text(Some("1"), &ChType::String, CellKind::Int).is_err());
        assert!(from_text(Some("1700000000123"), &ChType::parse("DateTime64(6)"), CellKind::TimestampMs).is_err());
    }

    #[test]
    fn artifact_cells_must_be_canonical() {
        for (json, kind) in [
            (Json::from("5"), CellKind::Int),
            (Json::from("-5"), CellKind::Int),
            (Json::from("0"), CellKind::Decimal { scale: 2 }),
            (Json::from("nan"), CellKind::Float),
            (Json::from("8000000000000000"), CellKind::Float),
            (Json::from(""), CellKind::String),
            (Json::Null, CellKind::Int),
        ] {
            assert!(check(&json, kind).is_ok(), "{json} as {kind}");
        }
        for (json, kind) in [
            (Json::from(5), CellKind::Int),
            (Json::from("05"), CellKind::Int),
            (Json::from("-0"), CellKind::Int),
            (Json::from("+5"), CellKind::Int),
            (Json::from("1.50"), CellKind::Decimal { scale: 2 }),
            (Json::from("7ff8000000000000"), CellKind::Float),
            (Json::from("3FF0000000000000"), CellKind::Float),
            (Json::from("1"), CellKind::Bool),
            (Json::from(true), CellKind::Bool),
        ] {
            assert!(check(&json, kind).is_err(), "{json} as {kind} must be refused");
        }
    }

    #[test]
    fn kinds_name_themselves_and_parse_back() {
        for kind in [
            CellKind::Int,
            CellKind::Bool,
            CellKind::Float,
            CellKind::Decimal { scale: 0 },
            CellKind::Decimal { scale: 38 },
            CellKind::TimestampMs,
            CellKind::Date,
            CellKind::String,
        ] {
            assert_eq!(CellKind::parse(&kind.name()), Some(kind));
        }
        for bad in ["decimal(02)", "decimal()", "decimal(x)", "decimal(999)", "Int", ""] {
            assert_eq!(CellKind::parse(bad), None, "{bad}");
        }
    }

    proptest! {
        #[test]
        fn the_server_and_the_input_agree_on_every_integer(v in any::<i64>()) {
            let a = from_value(&Value::Int(v), CellKind::Int).unwrap();
            let b = from_text(Some(&v.to_string()), &ChType::parse("Int64"), CellKind::Int).unwrap();
            prop_assert_eq!(&a, &b);
            prop_assert!(check(&to_json(&a), CellKind::Int).is_ok());
        }

        #[test]
        fn decimals_printed_at_their_scale_read_back_to_the_same_cell(unscaled in -10i128.pow(17)..10i128.pow(17), scale in 0u8..6) {
            let d = Decimal::new(unscaled, scale);
            let a = from_value(&Value::Decimal(d), CellKind::Decimal { scale }).unwrap();
            let ty = ChType::Decimal { precision: 38, scale };
            let b = from_text(Some(&d.to_string()), &ty, CellKind::Decimal { scale }).unwrap();
            prop_assert_eq!(&a, &b);
            let kind = CellKind::Decimal { scale };
            prop_assert!(check(&to_json(&a), kind).is_ok());
        }

        #[test]
        fn floats_read_back_to_their_bits(bits in any::<u64>()) {
            let f = f64::from_bits(bits);
            let a = from_value(&Value::Float(f), CellKind::Float).unwrap();
            let text = if f.is_nan() { "nan".to_string() } else if f.is_infinite() { if f > 0.0 { "inf".into() } else { "-inf".into() } } else { format!("{f:?}") };
            let b = from_text(Some(&text), &ChType::parse("Float64"), CellKind::Float).unwrap();
            prop_assert_eq!(&a, &b);
            prop_assert!(check(&to_json(&a), CellKind::Float).is_ok());
        }

        #[test]
        fn any_text_is_read_or_refused_without_panicking(text in ".{0,40}", json_int in any::<i64>()) {
            for ty in ["Int64", "UInt8", "Float64", "Decimal(18, 2)", "DateTime64(3)", "Date", "String", "Nullable(Int64)", "Bool"] {
                for kind in [CellKind::Int, CellKind::Bool, CellKind::Float, CellKind::Decimal { scale: 2 }, CellKind::TimestampMs, CellKind::Date, CellKind::String] {
                    let _ = from_text(Some(&text), &ChType::parse(ty), kind);
                    let _ = check(&Json::from(text.clone()), kind);
                    let _ = check(&Json::from(json_int), kind);
                }
            }
            let _ = CellKind::parse(&text);
        }

        #[test]
        fn timestamps_read_back_from_a_datetime64s_instant(ms in -2_000_000_000_000i64..4_000_000_000_000) {
            // The reader selects toUnixTimestamp64Milli(column): the milliseconds, in any spelling.
            for text in [ms.to_string(), format!("{:+}", ms)] {
                let b = from_text(Some(&text), &ChType::parse("DateTime64(3, 'UTC')"), CellKind::TimestampMs).unwrap();
                prop_assert_eq!(b, Some(ms.to_string()));
            }
        }
    }
}
