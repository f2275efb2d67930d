//! Emission dumps (`clink replay --out`) and their comparison
//! (`clink replay-diff`).
//!
//! A dump is a header (magic, version, the epoch it came from) and the rows in
//! the canonical row encoding, so two dumps are identical exactly when their
//! bytes are. The comparison names the first emission that differs.

use std::path::Path;

use clink_engine::codec::{Reader, Writer};
use clink_engine::value::{decode_row, encode_row, row_bytes, Row};

use super::EpochRef;

pub const EMIT_MAGIC: &[u8; 8] = b"CLNKEMIT";
pub const EMIT_VERSION: u32 = 1;
const MAX_DUMP_BYTES: u64 = 1 << 30;

/// The rows alone in their canonical encoding (what "byte-identical" compares).
pub fn encode_rows(rows: &[Row]) -> Vec<u8> {
    let mut w = Writer::new();
    w.u64(rows.len() as u64);
    for row in rows {
        encode_row(&mut w, row);
    }
    w.into_bytes()
}

pub fn encode_dump(at: &EpochRef, rows: &[Row]) -> Vec<u8> {
    let mut w = Writer::new();
    w.raw(EMIT_MAGIC).u32(EMIT_VERSION).u64(at.operator.0).u32(at.subtask).u64(at.epoch);
    w.raw(&encode_rows(rows));
    w.into_bytes()
}

/// A dump read back: where it came from and its rows.
#[derive(Debug, Clone, PartialEq)]
pub struct Dump {
    pub operator: u64,
    pub subtask: u32,
    pub epoch: u64,
    pub rows: Vec<Row>,
}

/// Why an emission dump was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DumpError(pub String);

pub fn decode_dump(bytes: &[u8]) -> Result<Dump, DumpError> {
    let mut r = Reader::new(bytes);
    let err = |e: clink_engine::codec::DecodeError| DumpError(e.to_string());
    if r.take(8).map_err(err)? != EMIT_MAGIC {
        return Err(DumpError("not an emission dump (bad magic)".into()));
    }
    let version = r.u32().map_err(err)?;
    if version != EMIT_VERSION {
        return Err(DumpError(format!("dump version {version}; this build reads {EMIT_VERSION}")));
    }
    let operator = r.u64().map_err(err)?;
    let subtask = r.u32().map_err(err)?;
    let epoch = r.u64().map_err(err)?;
    let count = r.u64().map_err(err)?;
    if count > r.remaining() as u64 / 4 {
        return Err(DumpError(format!("the dump claims {count} rows, more than its bytes can hold")));
    }
    let mut rows = Vec::new();
    for _ in 0..count {
        rows.push(decode_row(&mut r).map_err(err)?);
    }
    r.finish().map_err(err)?;
    Ok(Dump { operator, subtask, epoch, rows })
}

pub fn read_dump(path: &Path) -> Result<Dump, DumpError> {
    let bytes = clink_basics::files::read_bounded(path, MAX_DUMP_BYTES)
        .map_err(|e| DumpError(format!("{}: {e}", path.display())))?;
    decode_dump(&bytes).map_err(|e| DumpError(format!("{}: {e}", path.display())))
}

/// The first place two emission sequences differ.
#[derive(Debug, Clone, PartialEq)]
pub struct Difference {
    pub index: usize,
    pub left: Option<Row>,
    pub right: Option<Row>,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |r: &Option<Row>| match r {
            Some(row) => describe_row(row),
            None => "(no emission)".to_string(),
        };
        write!(f, "emission {}: {} vs {}", self.index, show(&self.left), show(&self.right))
    }
}

pub fn first_difference(left: &[Row], right: &[Row]) -> Option<Difference> {
    let n = left.len().max(right.len());
    (0..n).find(|&i| left.get(i).map(|r| row_bytes(r)) != right.get(i).map(|r| row_bytes(r))).map(|i| Difference {
        index: i,
        left: left.get(i).cloned(),
        right: right.get(i).cloned(),
    })
}

/// A row with its types, for people: `[Str("a"), Timestamp(10), ...]`.
pub fn describe_row(row: &Row) -> String {
    format!("{row:?}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clink_basics::ids::OperatorId;
    use clink_engine::value::Value;

    #[test]
    fn dumps_round_trip_and_differences_are_located() {
        let at = EpochRef { operator: OperatorId(3), subtask: 1, epoch: 4 };
        let rows = vec![vec![Value::Int(1)], vec![Value::Str("b".into())]];
        let dump = decode_dump(&encode_dump(&at, &rows)).unwrap();
        assert_eq!(dump.rows, rows);
        assert_eq!(first_difference(&rows, &rows), None);
        let mut doctored = rows.clone();
        doctored[1] = vec![Value::Str("c".into())];
        assert_eq!(first_difference(&rows, &doctored).unwrap().index, 1);
        assert_eq!(first_difference(&rows, &rows[..1]).unwrap().right, None);
        let bytes = encode_dump(&at, &rows);
        for cut in 0..bytes.len() {
            assert!(decode_dump(&bytes[..cut]).is_err());
        }
    }
}
