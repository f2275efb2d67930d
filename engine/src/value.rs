//! Typed values and rows, their one canonical binary encoding, and their one text
//! rendering.
//!
//! Captures, snapshots, golden files and sink output all go through the functions
//! here; no other module encodes a value. Decoding never panics on input: a
//! malformed row is a [`DecodeError`].

use std::cmp::Ordering;
use std::fmt;

use crate::codec::{DecodeError, Reader, Writer};

/// An exact decimal: `unscaled × 10^-scale`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Decimal {
    pub unscaled: i128,
    pub scale: u8,
}

/// The largest scale a decimal may carry (that of ClickHouse's Decimal128).
pub const MAX_DECIMAL_SCALE: u8 = 38;

impl Decimal {
    pub fn new(unscaled: i128, scale: u8) -> Self {
        Self { unscaled, scale }
    }

    /// This value at a larger scale, or `None` when it would overflow.
    pub fn rescale(self, scale: u8) -> Option<Decimal> {
        if scale < self.scale {
            return None;
        }
        let factor = 10i128.checked_pow(u32::from(scale - self.scale))?;
        Some(Decimal::new(self.unscaled.checked_mul(factor)?, scale))
    }

    /// Exact sum at the larger of the two scales; `None` on overflow.
    pub fn checked_add(self, other: Decimal) -> Option<Decimal> {
        let scale = self.scale.max(other.scale);
        let a = self.rescale(scale)?;
        let b = other.rescale(scale)?;
        Some(Decimal::new(a.unscaled.checked_add(b.unscaled)?, scale))
    }

    /// Parses `-?digits[.digits]` with at most `max_scale` fraction digits. The
    /// result's scale is `max_scale`, so every value of a column shares one scale.
    pub fn parse(text: &str, max_scale: u8) -> Result<Decimal, DecimalError> {
        let (negative, body) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let (int_part, frac_part) = match body.split_once('.') {
            Some((i, f)) => (i, f),
            None => (body, ""),
        };
        let digits_only = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if int_part.is_empty() || !digits_only(int_part) || !digits_only(frac_part) {
            return Err(DecimalError(format!("{text:?} is not a decimal number")));
        }
        if body.contains('.') && frac_part.is_empty() {
            return Err(DecimalError(format!("{text:?} has a decimal point and no fraction digits")));
        }
        if frac_part.len() > usize::from(max_scale) {
            return Err(DecimalError(format!(
                "{text:?} has {} fraction digits; at most {max_scale} are allowed",
                frac_part.len()
            )));
        }
        let padded = frac_part.bytes().chain(std::iter::repeat(b'0')).take(max_scale.into());
        let digits = int_part.bytes().chain(padded);
        // Up to 18 digits cannot overflow a u64: the common case (every input
        // line's amount) skips the checked 128-bit arithmetic.
        let unscaled = if int_part.len() + usize::from(max_scale) <= 18 {
            i128::from(digits.fold(0u64, |v, digit| v * 10 + u64::from(digit - b'0')))
        } else {
            let mut unscaled: i128 = 0;
            for digit in digits {
                unscaled = unscaled
                    .checked_mul(10)
                    .and_then(|v| v.checked_add(i128::from(digit - b'0')))
                    .ok_or_else(|| DecimalError(format!("{text:?} is too large")))?;
            }
            unscaled
        };
        Ok(Decimal::new(if negative { -unscaled } else { unscaled }, max_scale))
    }
}

/// Why text is not a decimal of the column's scale.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DecimalError(pub String);

impl fmt::Display for Decimal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.unscaled < 0 { "-" } else { "" };
        let digits = self.unscaled.unsigned_abs().to_string();
        let scale = usize::from(self.scale);
        if scale == 0 {
            return write!(f, "{sign}{digits}");
        }
        let padded = format!("{digits:0>width$}", width = scale + 1);
        let (int_part, frac_part) = padded.split_at(padded.len() - scale);
        write!(f, "{sign}{int_part}.{frac_part}")
    }
}

/// One typed value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Decimal(Decimal),
    Str(String),
    /// Milliseconds since the Unix epoch.
    Timestamp(i64),
}

/// The types a column may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ColumnType {
    Bool,
    Int,
    Float,
    Decimal { scale: u8 },
    String,
    Timestamp,
}

/// A named, typed column of a row.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Column {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: ColumnType,
}

/// The columns an operator's rows carry, in order.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Schema(pub Vec<Column>);

impl Schema {
    pub fn of(columns: &[(&str, ColumnType)]) -> Self {
        Schema(columns.iter().map(|(name, ty)| Column { name: (*name).to_string(), ty: *ty }).collect())
    }

    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.0.iter().position(|c| c.name == name)
    }

    pub fn column(&self, name: &str) -> Option<(usize, &Column)> {
        self.0.iter().enumerate().find(|(_, c)| c.name == name)
    }

    pub fn names(&self) -> Vec<&str> {
        self.0.iter().map(|c| c.name.as_str()).collect()
    }
}

pub type Row = Vec<Value>;

const TAG_NULL: u8 = 0;
const TAG_BOOL: u8 = 1;
const TAG_INT: u8 = 2;
const TAG_FLOAT: u8 = 3;
const TAG_DECIMAL: u8 = 4;
const TAG_STR: u8 = 5;
const TAG_TIMESTAMP: u8 = 6;

/// Rows wider than this are refused by the decoder.
pub const MAX_ROW_COLUMNS: usize = 4096;

/// Appends the canonical encoding of one value.
pub fn encode_value(w: &mut Writer, value: &Value) {
    match value {
        Value::Null => {
            w.u8(TAG_NULL);
        }
        Value::Bool(b) => {
            w.u8(TAG_BOOL).u8(u8::from(*b));
        }
        Value::Int(i) => {
            w.u8(TAG_INT).i64(*i);
        }
        Value::Float(f) => {
            w.u8(TAG_FLOAT).f64(*f);
        }
        Value::Decimal(d) => {
            w.u8(TAG_DECIMAL).u8(d.scale).i128(d.unscaled);
        }
        Value::Str(s) => {
            w.u8(TAG_STR).str(s);
        }
        Value::Timestamp(t) => {
            w.u8(TAG_TIMESTAMP).i64(*t);
        }
    }
}

pub fn decode_value(r: &mut Reader<'_>) -> Result<Value, DecodeError> {
    let tag = r.u8()?;
    Ok(match tag {
        TAG_NULL => Value::Null,
        TAG_BOOL => match r.u8()? {
            0 => Value::Bool(false),
            1 => Value::Bool(true),
            other => return Err(r.invalid("bool", format!("byte {other} is neither 0 nor 1"))),
        },
        TAG_INT => Value::Int(r.i64()?),
        TAG_FLOAT => Value::Float(r.f64()?),
        TAG_DECIMAL => {
            let scale = r.u8()?;
            if scale > MAX_DECIMAL_SCALE {
                return Err(r.invalid("decimal scale", format!("{scale} exceeds {MAX_DECIMAL_SCALE}")));
            }
            Value::Decimal(Decimal::new(r.i128()?, scale))
        }
        TAG_STR => Value::Str(r.str()?.to_string()),
        TAG_TIMESTAMP => Value::Timestamp(r.i64()?),
        other => return Err(r.invalid("value tag", format!("unknown tag {other}"))),
    })
}

/// Appends the canonical encoding of a row: its width, then each value.
pub fn encode_row(w: &mut Writer, row: &[Value]) {
    w.u32(row.len() as u32);
    for value in row {
        encode_value(w, value);
    }
}

pub fn decode_row(r: &mut Reader<'_>) -> Result<Row, DecodeError> {
    let width = r.count(1)?;
    if width > MAX_ROW_COLUMNS {
        return Err(r.invalid("row width", format!("{width} columns exceed {MAX_ROW_COLUMNS}")));
    }
    (0..width).map(|_| decode_value(r)).collect()
}

/// The canonical encoding of one row on its own.
pub fn row_bytes(row: &[Value]) -> Vec<u8> {
    let mut w = Writer::new();
    encode_row(&mut w, row);
    w.into_bytes()
}

/// Whether two rows have the same canonical encoding ([`row_bytes`]),
/// decided without encoding them: `==`, except that floats compare by their
/// bits (NaN is itself and -0.0 is not 0.0, as in the bytes). What
/// "byte-identical" means wherever rows are compared in memory.
pub fn rows_identical(a: &[Value], b: &[Value]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| values_identical(x, y))
}

fn values_identical(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Float(x), Value::Float(y)) => x.to_bits() == y.to_bits(),
        _ => a == b,
    }
}

/// Decodes exactly one row from `bytes`.
pub fn row_from_bytes(bytes: &[u8]) -> Result<Row, DecodeError> {
    let mut r = Reader::new(bytes);
    let row = decode_row(&mut r)?;
    r.finish()?;
    Ok(row)
}

impl fmt::Display for Value {
    /// The text form sinks write: timestamps as epoch milliseconds, decimals
    /// exactly at their scale, NULL as the empty string.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Null => Ok(()),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Float(x) => write!(f, "{x}"),
            Value::Decimal(d) => write!(f, "{d}"),
            Value::Str(s) => f.write_str(s),
            Value::Timestamp(t) => write!(f, "{t}"),
        }
    }
}

/// One row as a sink line: values rendered and joined by commas.
pub fn render_line(row: &[Value]) -> String {
    let mut line = Vec::with_capacity(64);
    render_line_into(&mut line, row);
    // Every part is UTF-8: strings are, and the rest is ASCII.
    String::from_utf8(line).unwrap_or_default()
}

/// [`render_line`] appended to `out` (no newline): the sinks' hot path, so
/// numbers are written without core::fmt. The text is exactly the values'
/// `Display` forms joined by commas (a test holds the two together).
pub fn render_line_into(out: &mut Vec<u8>, row: &[Value]) {
    let mut ints = itoa::Buffer::new();
    for (i, value) in row.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        match value {
            Value::Null => {}
            Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
            Value::Int(v) | Value::Timestamp(v) => out.extend_from_slice(ints.format(*v).as_bytes()),
            Value::Str(s) => out.extend_from_slice(s.as_bytes()),
            Value::Decimal(d) => render_decimal(out, *d, &mut ints),
            Value::Float(x) => {
                use std::io::Write;
                let _ = write!(out, "{x}");
            }
        }
    }
}

fn render_decimal(out: &mut Vec<u8>, d: Decimal, ints: &mut itoa::Buffer) {
    if d.unscaled < 0 {
        out.push(b'-');
    }
    let digits = ints.format(d.unscaled.unsigned_abs()).as_bytes();
    let scale = usize::from(d.scale);
    if scale == 0 {
        out.extend_from_slice(digits);
        return;
    }
    // Zeros in front so there is at least one digit before the point: 5 at
    // scale 2 is 0.05.
    let zeros = (scale + 1).saturating_sub(digits.len());
    let start = out.len();
    out.extend(std::iter::repeat_n(b'0', zeros));
    out.extend_from_slice(digits);
    let int_len = zeros + digits.len() - scale;
    out.insert(start + int_len, b'.');
}

/// A total order over values (floats by their total order), so values can key
/// ordered maps and sorting is deterministic.
pub fn compare_values(a: &Value, b: &Value) -> Ordering {
    fn rank(v: &Value) -> u8 {
        match v {
            Value::Null => 0,
            Value::Bool(_) => 1,
            Value::Int(_) => 2,
            Value::Float(_) => 3,
            Value::Decimal(_) => 4,
            Value::Str(_) => 5,
            Value::Timestamp(_) => 6,
        }
    }
    match (a, b) {
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Int(x), Value::Int(y)) => x.cmp(y),
        (Value::Float(x), Value::Float(y)) => x.total_cmp(y),
        (Value::Decimal(x), Value::Decimal(y)) => (x.scale, x.unscaled).cmp(&(y.scale, y.unscaled)),
        (Value::Str(x), Value::Str(y)) => x.cmp(y),
        (Value::Timestamp(x), Value::Timestamp(y)) => x.cmp(y),
        _ => rank(a).cmp(&rank(b)),
    }
}

/// A JSON cell as a value of a column's type: decimals are given as text (to
/// keep them exact), timestamps as epoch milliseconds, NULL as null. `None`
/// when the cell does not fit the type.
pub fn value_from_json(cell: &serde_json::Value, ty: ColumnType) -> Option<Value> {
    use serde_json::Value as Json;
    Some(match (ty, cell) {
        (_, Json::Null) => Value::Null,
        (ColumnType::Bool, Json::Bool(b)) => Value::Bool(*b),
        (ColumnType::Int, Json::Number(n)) => Value::Int(n.as_i64()?),
        (ColumnType::Timestamp, Json::Number(n)) => Value::Timestamp(n.as_i64()?),
        (ColumnType::Float, Json::Number(n)) => Value::Float(n.as_f64()?),
        (ColumnType::String, Json::String(s)) => Value::Str(s.clone()),
        (ColumnType::Decimal { scale }, Json::String(s)) => Value::Decimal(Decimal::parse(s, scale).ok()?),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {

    proptest::proptest! {
        #[test]
        fn the_fast_line_is_the_display_forms_joined(
            ints in proptest::collection::vec(proptest::prelude::any::<i64>(), 1..4),
            unscaled in proptest::prelude::any::<i128>(),
            scale in 0u8..=38,
            text in "[a-z,é]{0,5}",
            x in proptest::prelude::any::<f64>(),
        ) {
            let mut row: Row = ints.iter().map(|&i| Value::Int(i)).collect();
            row.extend([
                Value::Decimal(Decimal::new(unscaled, scale)),
                Value::Str(text),
                Value::Timestamp(ints[0]),
                Value::Float(x),
                Value::Null,
                Value::Bool(true),
            ]);
            let slow: Vec<String> = row.iter().map(|v| v.to_string()).collect();
            proptest::prop_assert_eq!(render_line(&row), slow.join(","));
        }
    }
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn decimals_parse_at_the_column_scale_and_render_exactly() {
        for (text, shown) in
            [("12", "12.00"), ("12.5", "12.50"), ("-0.05", "-0.05"), ("0", "0.00"), ("123456789.99", "123456789.99")]
        {
            assert_eq!(Decimal::parse(text, 2).unwrap().to_string(), shown, "{text}");
        }
        for bad in ["", "-", "1.", ".5", "1.234", "1,5", "+1", "1e3", "--1", "1.-2"] {
            assert!(Decimal::parse(bad, 2).is_err(), "{bad:?} must be refused");
        }
    }

    #[test]
    fn decimal_sums_are_exact() {
        let a = Decimal::parse("0.10", 2).unwrap();
        let b = Decimal::parse("0.20", 2).unwrap();
        assert_eq!(a.checked_add(b).unwrap().to_string(), "0.30");
        assert!(Decimal::new(i128::MAX, 2).checked_add(a).is_none());
    }

    #[test]
    fn lines_render_each_type() {
        let row = vec![
            Value::Str("a".into()),
            Value::Timestamp(10_000),
            Value::Int(3),
            Value::Decimal(Decimal::new(-5, 2)),
            Value::Null,
            Value::Bool(true),
        ];
        assert_eq!(render_line(&row), "a,10000,3,-0.05,,true");
    }

    fn arb_value() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::Int),
            any::<f64>().prop_map(Value::Float),
            (any::<i128>(), 0u8..=MAX_DECIMAL_SCALE).prop_map(|(u, s)| Value::Decimal(Decimal::new(u, s))),
            ".{0,20}".prop_map(Value::Str),
            any::<i64>().prop_map(Value::Timestamp),
        ]
    }

    proptest! {
        #[test]
        fn rows_round_trip(row in proptest::collection::vec(arb_value(), 0..12)) {
            let bytes = row_bytes(&row);
            let back = row_from_bytes(&bytes).unwrap();
            // Compare through the encoding: NaN != NaN as a value, not as bytes.
            prop_assert_eq!(row_bytes(&back), bytes);
        }

        #[test]
        fn rows_are_identical_exactly_when_their_bytes_are(
            a in proptest::collection::vec(arb_value(), 0..6),
            b in proptest::collection::vec(arb_value(), 0..6),
            nan_bits in any::<u64>(),
        ) {
            prop_assert_eq!(rows_identical(&a, &b), row_bytes(&a) == row_bytes(&b));
            prop_assert!(rows_identical(&a, &a.clone()));
            // Equal as numbers, not as bytes; and a NaN is its own bytes.
            prop_assert!(!rows_identical(&[Value::Float(0.0)], &[Value::Float(-0.0)]));
            let nan = Value::Float(f64::from_bits(nan_bits | 0x7ff0_0000_0000_0001));
            prop_assert!(rows_identical(std::slice::from_ref(&nan), std::slice::from_ref(&nan)));
            prop_assert!(!rows_identical(&[Value::Int(1)], &[Value::Timestamp(1)]));
        }

        #[test]
        fn arbitrary_bytes_never_panic_the_decoder(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = row_from_bytes(&bytes);
        }

        #[test]
        fn truncated_rows_are_errors(row in proptest::collection::vec(arb_value(), 1..8), cut in 0usize..64) {
            let bytes = row_bytes(&row);
            let cut = cut.min(bytes.len() - 1);
            prop_assert!(row_from_bytes(&bytes[..cut]).is_err());
        }
    }
}
