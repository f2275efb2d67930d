//! Keys: the canonical bytes of a record's key, which subtask owns it, and
//! the shared form keyed state holds it in.
//!
//! A key's bytes are the canonical row encoding of its columns, so the same
//! key always has the same bytes and keys order and hash identically
//! everywhere. A key's group is a stable hash of its bytes modulo
//! [`KEY_GROUPS`]; a subtask owns a contiguous range of groups. The hash is
//! FNV-1a, written out here rather than taken from a crate, because it must
//! never change between builds: a restored subtask must own the keys whose
//! state it restored, and the std hasher promises no stability.
//!
//! Keyed state holds a key as a [`Key`]: its bytes once, shared by the state
//! entry and every timer of that key, so a record whose key is already known
//! costs no allocation. A row's key is hashed and routed from a reused
//! scratch buffer ([`key_group_in`]), never from an owned copy. This module
//! never decides what a key's state is, only what a key is.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

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
        let mut bytes = scratch.take();
        let group = key_group_in(&mut bytes, row, key_columns);
        scratch.set(bytes);
        group
    })
}

/// [`key_group_of`] with the caller's scratch buffer (the output gate keeps
/// one), so the hot path needs no thread-local lookup either.
pub fn key_group_in(scratch: &mut Vec<u8>, row: &[Value], key_columns: &[usize]) -> u32 {
    let bytes = key_bytes_into(std::mem::take(scratch), row, key_columns);
    let group = key_group(&bytes);
    *scratch = bytes;
    group
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

/// A key's canonical bytes, held once and shared: a clone is a reference
/// count, so a key's state entry and its timers hold one allocation between
/// them. It orders, compares and hashes exactly as its bytes do (so maps of
/// keys iterate in byte order and are looked up by `&[u8]`).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key(Arc<[u8]>);

impl Deref for Key {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl Borrow<[u8]> for Key {
    fn borrow(&self) -> &[u8] {
        &self.0
    }
}

impl AsRef<[u8]> for Key {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl From<&[u8]> for Key {
    fn from(bytes: &[u8]) -> Key {
        Key(Arc::from(bytes))
    }
}

impl From<Vec<u8>> for Key {
    fn from(bytes: Vec<u8>) -> Key {
        Key(Arc::from(bytes))
    }
}

impl<const N: usize> PartialEq<&[u8; N]> for Key {
    fn eq(&self, other: &&[u8; N]) -> bool {
        *self.0 == other[..]
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({:?})", &*self.0)
    }
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
