//! A column's type as the server names it (`system.columns.type`), parsed.
//! Types this crate does not know stay [`ChType::Other`] with their text, so
//! a caller can refuse them by name.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChType {
    Int {
        bits: u16,
        signed: bool,
    },
    Float {
        bits: u16,
    },
    /// `Decimal(P, S)` and its `Decimal32/64/128/256(S)` spellings.
    Decimal {
        precision: u8,
        scale: u8,
    },
    String,
    Bool,
    Date,
    DateTime {
        timezone: Option<String>,
    },
    DateTime64 {
        precision: u8,
        timezone: Option<String>,
    },
    Nullable(Box<ChType>),
    LowCardinality(Box<ChType>),
    Other(String),
}

impl ChType {
    pub fn parse(text: &str) -> ChType {
        let t = text.trim();
        let int = |bits: u16, signed: bool| ChType::Int { bits, signed };
        match t {
            "Int8" => return int(8, true),
            "Int16" => return int(16, true),
            "Int32" => return int(32, true),
            "Int64" => return int(64, true),
            "UInt8" => return int(8, false),
            "UInt16" => return int(16, false),
            "UInt32" => return int(32, false),
            "UInt64" => return int(64, false),
            "Float32" => return ChType::Float { bits: 32 },
            "Float64" => return ChType::Float { bits: 64 },
            "String" => return ChType::String,
            "Bool" | "Boolean" => return ChType::Bool,
            "Date" => return ChType::Date,
            "DateTime" => return ChType::DateTime { timezone: None },
            _ => {}
        }
        let Some((name, args)) = t.strip_suffix(')').and_then(|s| s.split_once('(')) else {
            return ChType::Other(t.to_string());
        };
        let args: Vec<&str> = split_args(args);
        let number = |s: &str| s.trim().parse::<u8>().ok();
        let parsed = match (name, args.as_slice()) {
            ("Nullable", [inner]) => Some(ChType::Nullable(Box::new(ChType::parse(inner)))),
            ("LowCardinality", [inner]) => Some(ChType::LowCardinality(Box::new(ChType::parse(inner)))),
            ("Decimal", [p, s]) => {
                number(p).zip(number(s)).map(|(precision, scale)| ChType::Decimal { precision, scale })
            }
            ("Decimal32", [s]) => number(s).map(|scale| ChType::Decimal { precision: 9, scale }),
            ("Decimal64", [s]) => number(s).map(|scale| ChType::Decimal { precision: 18, scale }),
            ("Decimal128", [s]) => number(s).map(|scale| ChType::Decimal { precision: 38, scale }),
            ("Decimal256", [s]) => number(s).map(|scale| ChType::Decimal { precision: 76, scale }),
            ("DateTime", [tz]) => unquote(tz).map(|tz| ChType::DateTime { timezone: Some(tz) }),
            ("DateTime64", [p]) => number(p).map(|precision| ChType::DateTime64 { precision, timezone: None }),
            ("DateTime64", [p, tz]) => {
                number(p).zip(unquote(tz)).map(|(precision, tz)| ChType::DateTime64 { precision, timezone: Some(tz) })
            }
            _ => None,
        };
        parsed.unwrap_or_else(|| ChType::Other(t.to_string()))
    }
}

/// Splits a type's arguments at the top-level commas.
fn split_args(args: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut quoted, mut start) = (0i32, false, 0);
    for (i, c) in args.char_indices() {
        match c {
            '\'' => quoted = !quoted,
            '(' if !quoted => depth += 1,
            ')' if !quoted => depth -= 1,
            ',' if !quoted && depth == 0 => {
                out.push(args[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(args[start..].trim());
    out
}

fn unquote(text: &str) -> Option<String> {
    text.trim().strip_prefix('\'')?.strip_suffix('\'').map(str::to_string)
}

impl fmt::Display for ChType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChType::Int { bits, signed } => write!(f, "{}Int{bits}", if *signed { "" } else { "U" }),
            ChType::Float { bits } => write!(f, "Float{bits}"),
            ChType::Decimal { precision, scale } => write!(f, "Decimal({precision}, {scale})"),
            ChType::String => f.write_str("String"),
            ChType::Bool => f.write_str("Bool"),
            ChType::Date => f.write_str("Date"),
            ChType::DateTime { timezone: None } => f.write_str("DateTime"),
            ChType::DateTime { timezone: Some(tz) } => write!(f, "DateTime('{tz}')"),
            ChType::DateTime64 { precision, timezone: None } => write!(f, "DateTime64({precision})"),
            ChType::DateTime64 { precision, timezone: Some(tz) } => write!(f, "DateTime64({precision}, '{tz}')"),
            ChType::Nullable(inner) => write!(f, "Nullable({inner})"),
            ChType::LowCardinality(inner) => write!(f, "LowCardinality({inner})"),
            ChType::Other(text) => f.write_str(text),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_servers_spellings_parse_and_print_back() {
        for text in [
            "Int64",
            "UInt8",
            "Float64",
            "String",
            "Decimal(18, 2)",
            "DateTime64(3)",
            "DateTime64(3, 'UTC')",
            "DateTime('Europe/Paris')",
            "Nullable(Decimal(38, 4))",
            "LowCardinality(String)",
        ] {
            assert_eq!(ChType::parse(text).to_string(), text);
        }
        assert_eq!(ChType::parse("Decimal64(2)"), ChType::Decimal { precision: 18, scale: 2 });
        assert_eq!(ChType::parse("Array(String)"), ChType::Other("Array(String)".into()));
        assert_eq!(ChType::parse("Decimal(x, 2)"), ChType::Other("Decimal(x, 2)".into()));
        assert_eq!(
            ChType::parse("Map(String, Tuple(a Int8, b String))"),
            ChType::Other("Map(String, Tuple(a Int8, b String))".into())
        );
    }
}
