//! Emission dumps (`clink replay --out`) and their comparison
//! (`clink replay-diff`).
//!
//! A dump is a header (magic, version, the job and epoch it came from) and the
//! rows in the canonical row encoding, so two dumps are identical exactly when
//! their bytes are. The comparison names the first emission that differs.
//!
//! Version 2 names the job; version 1 (older builds, older regression
//! goldens) does not, and is still read, with `job` unknown.

use std::path::Path;

use clink_engine::codec::{Reader, Writer};
use clink_engine::value::{decode_row, encode_row, rows_identical, Row};

use super::EpochRef;

pub const EMIT_MAGIC: &[u8; 8] = b"CLNKEMIT";
pub const EMIT_VERSION: u32 = 2;
/// The header without the job, written by older builds; still read.
pub const EMIT_VERSION_NO_JOB: u32 = 1;
/// Every dump version this build reads.
pub const EMIT_READ_VERSIONS: &[u32] = &[EMIT_VERSION_NO_JOB, EMIT_VERSION];
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

pub fn encode_dump(job: u64, at: &EpochRef, rows: &[Row]) -> Vec<u8> {
    let mut w = Writer::new();
    w.raw(EMIT_MAGIC).u32(EMIT_VERSION).u64(job).u64(at.operator.0).u32(at.subtask).u64(at.epoch);
    w.raw(&encode_rows(rows));
    w.into_bytes()
}

/// A dump read back: where it came from and its rows.
#[derive(Debug, Clone, PartialEq)]
pub struct Dump {
    /// The dump's version (1 or 2).
    pub version: u32,
    /// The job the epoch belongs to; `None` in a version 1 dump, which does
    /// not say.
    pub job: Option<u64>,
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
    let job = match version {
        EMIT_VERSION => Some(r.u64().map_err(err)?),
        EMIT_VERSION_NO_JOB => None,
        _ => return Err(DumpError(format!("dump version {version}; this build reads versions 1 and 2"))),
    };
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
    Ok(Dump { version, job, operator, subtask, epoch, rows })
}

pub fn read_dump(path: &Path) -> Result<Dump, DumpError> {
    let bytes = clink_basics::files::read_bounded(path, MAX_DUMP_BYTES)
        .map_err(|e| DumpError(format!("{}: {e}", path.display())))?;
    decode_dump(&bytes).map_err(|e| DumpError(format!("{}: {e}", path.display())))
}

impl Dump {
    /// Where the dump says it came from, for people.
    pub fn origin(&self) -> String {
        let job = self.job.map_or("job unknown (a version 1 dump)".to_string(), |j| format!("job {j}"));
        format!("{job} operator {} subtask {} epoch {}", self.operator, self.subtask, self.epoch)
    }
}

/// Why two dumps do not describe the same epoch (`None` when they do): the
/// first header field that differs, or a job a version 1 dump leaves unsaid.
pub fn origin_mismatch(a: &Dump, b: &Dump) -> Option<String> {
    let fields: [(&str, Option<u64>, Option<u64>); 4] = [
        ("job", a.job, b.job),
        ("operator", Some(a.operator), Some(b.operator)),
        ("subtask", Some(u64::from(a.subtask)), Some(u64::from(b.subtask))),
        ("epoch", Some(a.epoch), Some(b.epoch)),
    ];
    for (name, x, y) in fields {
        match (x, y) {
            (Some(x), Some(y)) if x != y => return Some(format!("they name different {name}s ({x} and {y})")),
            (None, _) | (_, None) => {
                return Some(format!("a version 1 dump does not name its {name}, so the two cannot be shown to agree"))
            }
            _ => {}
        }
    }
    None
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

/// Where two emission sequences first differ in their canonical bytes
/// (`None`: they are byte-identical, as [`encode_rows`] would show).
pub fn first_difference(left: &[Row], right: &[Row]) -> Option<Difference> {
    let n = left.len().max(right.len());
    let same = |i: usize| match (left.get(i), right.get(i)) {
        (Some(a), Some(b)) => rows_identical(a, b),
        _ => false,
    };
    (0..n).find(|&i| !same(i)).map(|i| Difference {
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
        let dump = decode_dump(&encode_dump(9, &at, &rows)).unwrap();
        assert_eq!(dump.rows, rows);
        assert_eq!((dump.version, dump.job, dump.operator, dump.subtask, dump.epoch), (2, Some(9), 3, 1, 4));
        assert_eq!(origin_mismatch(&dump, &dump), None);
        assert_eq!(first_difference(&rows, &rows), None);
        let mut doctored = rows.clone();
        doctored[1] = vec![Value::Str("c".into())];
        assert_eq!(first_difference(&rows, &doctored).unwrap().index, 1);
        assert_eq!(first_difference(&rows, &rows[..1]).unwrap().right, None);
        let bytes = encode_dump(9, &at, &rows);
        for cut in 0..bytes.len() {
            assert!(decode_dump(&bytes[..cut]).is_err());
        }
    }

    /// A version 1 dump: the same header without the job.
    fn v1_dump(at: &EpochRef, rows: &[Row]) -> Vec<u8> {
        let mut w = Writer::new();
        w.raw(EMIT_MAGIC).u32(EMIT_VERSION_NO_JOB).u64(at.operator.0).u32(at.subtask).u64(at.epoch);
        w.raw(&encode_rows(rows));
        w.into_bytes()
    }

    #[test]
    fn version_1_dumps_are_read_and_their_unknown_job_never_agrees() {
        let at = EpochRef { operator: OperatorId(3), subtask: 1, epoch: 4 };
        let rows = vec![vec![Value::Int(1)]];
        let old = decode_dump(&v1_dump(&at, &rows)).unwrap();
        assert_eq!((old.version, old.job, old.rows.clone()), (1, None, rows.clone()));
        let new = decode_dump(&encode_dump(1, &at, &rows)).unwrap();
        assert!(origin_mismatch(&old, &new).unwrap().contains("does not name its job"));
    }

    type Change = Box<dyn Fn(&mut Dump)>;

    #[test]
    fn each_header_field_that_differs_is_named() {
        let at = EpochRef { operator: OperatorId(3), subtask: 1, epoch: 4 };
        let base = decode_dump(&encode_dump(1, &at, &[])).unwrap();
        let cases: [(&str, Change); 4] = [
            ("job", Box::new(|d| d.job = Some(2))),
            ("operator", Box::new(|d| d.operator = 4)),
            ("subtask", Box::new(|d| d.subtask = 0)),
            ("epoch", Box::new(|d| d.epoch = 5)),
        ];
        for (field, change) in cases {
            let mut other = base.clone();
            change(&mut other);
            let why = origin_mismatch(&base, &other).unwrap();
            assert!(why.contains(&format!("different {field}s")), "{field}: {why}");
        }
    }

    proptest::proptest! {
        #[test]
        fn the_dump_reader_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            let _ = decode_dump(&bytes);
            let mut framed = EMIT_MAGIC.to_vec();
            framed.extend_from_slice(&bytes);
            let _ = decode_dump(&framed);
        }
    }
}
