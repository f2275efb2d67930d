//! ClickHouse's TabSeparated text format: one row per line, fields separated
//! by tabs, `\N` for NULL, and backslash escapes for the characters that
//! would break a line or a field.

use thiserror::Error;

/// One field as read: `None` is NULL.
pub type Cell = Option<String>;

/// Why an answer is not TabSeparated rows.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TsvError {
    #[error("the answer is not UTF-8: {0}")]
    NotUtf8(std::str::Utf8Error),
    #[error("the answer does not end with a newline: it was cut short")]
    CutShort,
    /// Row `row` (from 1) has a field that does not unescape.
    #[error("row {row}: {field:?} ends with a lone backslash")]
    LoneBackslash { row: usize, field: String },
}

/// Appends `text` as one escaped field.
pub fn escape_into(out: &mut Vec<u8>, text: &str) {
    for &b in text.as_bytes() {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\0' => out.extend_from_slice(b"\\0"),
            b'\x08' => out.extend_from_slice(b"\\b"),
            b'\x0c' => out.extend_from_slice(b"\\f"),
            b'\'' => out.extend_from_slice(b"\\'"),
            _ => out.push(b),
        }
    }
}

/// Parses a whole TabSeparated answer into rows of cells.
pub fn parse_rows(body: &[u8]) -> Result<Vec<Vec<Cell>>, TsvError> {
    let text = std::str::from_utf8(body).map_err(TsvError::NotUtf8)?;
    let mut rows = Vec::new();
    if text.is_empty() {
        return Ok(rows);
    }
    let Some(text) = text.strip_suffix('\n') else {
        return Err(TsvError::CutShort);
    };
    for (n, line) in text.split('\n').enumerate() {
        let row = line
            .split('\t')
            .map(|field| {
                if field == "\\N" {
                    Ok(None)
                } else {
                    unescape(field).map(Some).ok_or_else(|| TsvError::LoneBackslash { row: n + 1, field: field.into() })
                }
            })
            .collect::<Result<Vec<Cell>, TsvError>>()?;
        rows.push(row);
    }
    Ok(rows)
}

/// The field unescaped; `None` when it ends with a lone backslash.
fn unescape(field: &str) -> Option<String> {
    if !field.contains('\\') {
        return Some(field.to_string());
    }
    let mut out = String::with_capacity(field.len());
    let mut chars = field.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        out.push(match chars.next() {
            Some('t') => '\t',
            Some('n') => '\n',
            Some('r') => '\r',
            Some('0') => '\0',
            Some('b') => '\x08',
            Some('f') => '\x0c',
            Some('a') => '\x07',
            Some('v') => '\x0b',
            Some(other) => other,
            None => return None,
        });
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn nulls_empty_strings_and_escapes_read_back() {
        let rows = parse_rows(b"1\t\\N\t\n2\ta\\tb\\\\c\t\\n\n").unwrap();
        assert_eq!(rows[0], vec![Some("1".into()), None, Some(String::new())]);
        assert_eq!(rows[1], vec![Some("2".into()), Some("a\tb\\c".into()), Some("\n".into())]);
        assert!(parse_rows(b"1\t2").is_err(), "a cut-short answer is refused");
        assert_eq!(parse_rows(b"a\\\n"), Err(TsvError::LoneBackslash { row: 1, field: "a\\".into() }));
        assert!(parse_rows(b"").unwrap().is_empty());
    }

    proptest! {
        #[test]
        fn any_text_written_as_a_field_reads_back(texts in proptest::collection::vec(any::<String>(), 1..5)) {
            let mut line = Vec::new();
            for (i, t) in texts.iter().enumerate() {
                if i > 0 { line.push(b'\t'); }
                escape_into(&mut line, t);
            }
            line.push(b'\n');
            let rows = parse_rows(&line).unwrap();
            let back: Vec<String> = rows[0].iter().map(|c| c.clone().unwrap_or_default()).collect();
            // "\N" written as text escapes its backslash, so it never reads as NULL.
            prop_assert!(rows[0].iter().all(Option::is_some));
            prop_assert_eq!(back, texts);
        }
    }
}
