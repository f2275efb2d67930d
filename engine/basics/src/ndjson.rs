//! Reading a file of one JSON object per line (protocol traces), strictly:
//! bounded in size, UTF-8 throughout, every line whole (a file that does not
//! end in a newline was cut mid-line), and not empty. Every refusal names the
//! line.

use std::io;
use std::path::Path;

use serde_json::{Map, Value as Json};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum NdjsonError {
    #[error("{0}")]
    Read(io::Error),
    #[error("the file is empty")]
    Empty,
    #[error("line {line}: not UTF-8")]
    NotUtf8 { line: usize },
    #[error("line {line}: cut short (the file does not end in a newline)")]
    Cut { line: usize },
    #[error("line {line}: not a JSON object: {reason}")]
    NotAnObject { line: usize, reason: String },
}

/// One line's object and its number (from 1).
pub type Line = (usize, Map<String, Json>);

/// Reads every line of a file as a JSON object.
pub fn read_objects(path: &Path, max_bytes: u64) -> Result<Vec<Line>, NdjsonError> {
    parse_objects(&crate::files::read_bounded(path, max_bytes).map_err(NdjsonError::Read)?)
}

/// Parses bytes as one JSON object per line.
pub fn parse_objects(bytes: &[u8]) -> Result<Vec<Line>, NdjsonError> {
    if bytes.is_empty() {
        return Err(NdjsonError::Empty);
    }
    let text = std::str::from_utf8(bytes).map_err(|e| NdjsonError::NotUtf8 {
        line: 1 + bytes[..e.valid_up_to()].iter().filter(|&&b| b == b'\n').count(),
    })?;
    let lines: Vec<&str> = text.split_terminator('\n').collect();
    if !text.ends_with('\n') {
        return Err(NdjsonError::Cut { line: lines.len() });
    }
    lines
        .iter()
        .enumerate()
        .map(|(i, line)| match serde_json::from_str::<Json>(line) {
            Ok(Json::Object(map)) => Ok((i + 1, map)),
            Ok(other) => {
                Err(NdjsonError::NotAnObject { line: i + 1, reason: crate::fields::kind_name(&other).to_string() })
            }
            Err(e) => Err(NdjsonError::NotAnObject { line: i + 1, reason: e.to_string() }),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn whole_lines_only_and_every_refusal_names_its_line() {
        assert_eq!(parse_objects(b"{\"a\":1}\n{\"b\":2}\n").unwrap().len(), 2);
        assert!(matches!(parse_objects(b""), Err(NdjsonError::Empty)));
        assert!(matches!(parse_objects(b"{\"a\":1}\n{\"b\""), Err(NdjsonError::Cut { line: 2 })));
        assert!(matches!(parse_objects(b"{\"a\":1}\n{\"b\":\"\xff\"}\n"), Err(NdjsonError::NotUtf8 { line: 2 })));
        assert!(matches!(parse_objects(b"{\"a\":1}\n[1]\n"), Err(NdjsonError::NotAnObject { line: 2, .. })));
        assert!(matches!(parse_objects(b"\n"), Err(NdjsonError::NotAnObject { line: 1, .. })));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = parse_objects(&bytes);
        }
    }
}
