//! Keys: the canonical bytes of a record's key, and which subtask owns it.
//!
//! A key's bytes are the canonical row encoding of its columns, so the same
//! key always has the same bytes and keys order and hash identically
//! everywhere. A key's group is a stable hash of its bytes modulo
//! [`KEY_GROUPS`]; a subtask owns a contiguous range of groups. The hash is
//! FNV-1a, written out here rather than taken from a crate, because it must
//! never change between builds: a restored subtask must own the keys whose
//! state it restored, and the std hasher promises no stability.

use crate::codec::{DecodeError, Reader, Writer};
use crate::value::{decode_row, encode_row, Row, Value};

/// The canonical encoding of a row's key columns: the same key always has the
/// same bytes, so keys order and hash identically everywhere.
pub fn key_bytes(row: &[Value], key_columns: &[usize]) -> Vec<u8> {
    key_bytes_into(Vec::with_capacity(32), row, key_columns)
}

/// [`key_bytes`] written into `buf` (cleared first), for callers that reuse one buffer.
pub fn key_bytes_into(buf: Vec<u8>, row: &[Value], key_columns: &[usize]) -> Vec<u8> {
    let mut w = Writer::reusing(buf);
    w.u32(key_columns.len() as u32);
    for &i in key_columns {
        crate::value::encode_value(&mut w, row.get(i).unwrap_or(&Value::Null));
    }
    w.into_bytes()
}

/// The key group of a row's key columns, with no allocation on the way
/// (the bytes are the same [`key_bytes`] makes, in a per-thread buffer).
pub fn key_group_of(row: &[Value], key_columns: &[usize]) -> u32 {
    thread_local! {
        static SCRATCH: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
    }
    SCRATCH.with(|scratch| {
        let bytes = key_bytes_into(scratch.take(), row, key_columns);
        let group = key_group(&bytes);
        scratch.set(bytes);
        group
    })
}

/// The key's values back from its bytes.
pub fn key_values(key: &[u8]) -> Result<Row, DecodeError> {
    let mut r = Reader::new(key);
    let row = decode_row(&mut r)?;
    r.finish()?;
    Ok(row)
}

/// Encodes a key row the way [`key_bytes`] does, for keys built from values.
pub fn key_of_values(values: &[Value]) -> Vec<u8> {
    let mut w = Writer::new();
    encode_row(&mut w, values);
    w.into_bytes()
}

/// The number of key groups (the most a keyed operator can be scaled to).
pub const KEY_GROUPS: u32 = 128;

pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

pub fn key_group(key: &[u8]) -> u32 {
    (fnv1a64(key) % u64::from(KEY_GROUPS)) as u32
}

/// The subtask of `parallelism` that owns a key group.
pub fn subtask_for_group(group: u32, parallelism: u32) -> u32 {
    group * parallelism / KEY_GROUPS
}

pub fn subtask_for_key(key: &[u8], parallelism: u32) -> u32 {
    subtask_for_group(key_group(key), parallelism)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_bytes_match_the_row_encoding_of_the_key_values() {
        let row = vec![Value::Int(1), Value::Str("a".into()), Value::Int(2)];
        assert_eq!(key_bytes(&row, &[1]), key_of_values(&[Value::Str("a".into())]));
        assert_eq!(key_values(&key_bytes(&row, &[1, 2])).unwrap(), vec![Value::Str("a".into()), Value::Int(2)]);
    }

    #[test]
    fn the_hash_is_the_published_fnv1a() {
        assert_eq!(fnv1a64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
    }

    #[test]
    fn every_group_has_an_owner_in_range() {
        for p in 1..=KEY_GROUPS {
            for g in 0..KEY_GROUPS {
                assert!(subtask_for_group(g, p) < p);
            }
        }
    }
}
