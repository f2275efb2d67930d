//! Keyed state helpers shared by the keyed operators: the in-memory map a
//! keyed operator holds its state in, and the encoding of a keyed state slot
//! (entries in key order). A key's bytes and its shared form are
//! [`crate::keys`]'. A snapshot never depends on the map's iteration order:
//! its entries are written sorted by key bytes.

use std::collections::BTreeMap;

use crate::checkpoint::{SlotKind, StateSlots};
use crate::codec::{DecodeError, Reader, Writer};
pub use crate::keys::{key_bytes, key_bytes_into, key_of_values, key_values, Key};

use super::OperatorError;

/// Keyed state in memory: each key's entry under its shared bytes, found
/// from a record's key bytes with no allocation. FxHash, which is not
/// DoS-resistant: crafted keys can slow a subtask down, never change what it
/// computes (nothing is read out of the map in its iteration order).
pub type KeyedMap<V> = rustc_hash::FxHashMap<Key, V>;

/// Writes a keyed slot: the entry count, then each key and its value, in
/// key-byte order whatever order `entries` come in.
pub fn put_keyed<'a, K: AsRef<[u8]> + 'a, V: 'a>(
    slots: &mut StateSlots,
    name: &str,
    version: u32,
    entries: impl IntoIterator<Item = (&'a K, &'a V)>,
    mut write_value: impl FnMut(&mut Writer, &V),
) {
    let mut sorted: Vec<(&[u8], &V)> = entries.into_iter().map(|(k, v)| (k.as_ref(), v)).collect();
    sorted.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let mut w = Writer::new();
    w.u32(sorted.len() as u32);
    let mut starts = Vec::with_capacity(sorted.len());
    for (key, value) in sorted {
        starts.push(w.len());
        w.bytes(key);
        write_value(&mut w, value);
    }
    slots.put_entries(name, SlotKind::Keyed, version, w.into_bytes(), starts);
}

/// Reads a keyed slot written by [`put_keyed`], checking its version.
pub fn get_keyed<V>(
    slots: &StateSlots,
    name: &str,
    version: u32,
    mut read_value: impl FnMut(&mut Reader<'_>) -> Result<V, DecodeError>,
) -> Result<BTreeMap<Vec<u8>, V>, OperatorError> {
    let slot = slots.get(name).ok_or_else(|| OperatorError::state(name, "missing from the snapshot"))?;
    if slot.kind != SlotKind::Keyed || slot.version != version {
        return Err(OperatorError::state(
            name,
            format!("expected a keyed slot at version {version}, found {:?} at version {}", slot.kind, slot.version),
        ));
    }
    let mut r = Reader::new(&slot.bytes);
    let mut decode = |r: &mut Reader<'_>| -> Result<BTreeMap<Vec<u8>, V>, DecodeError> {
        let n = r.count(4)?;
        let mut map = BTreeMap::new();
        for _ in 0..n {
            let key = r.bytes()?.to_vec();
            key_values(&key)?;
            let value = read_value(r)?;
            map.insert(key, value);
        }
        r.finish()?;
        Ok(map)
    };
    decode(&mut r).map_err(|e| OperatorError::state(name, e))
}

/// Re-divides a keyed slot across a rescale: the entries of every old
/// subtask's slot whose key the new subtask owns, into `out`. A key held by
/// two old subtasks is refused (keys were divided by group before, too).
pub fn redivide_keyed<V>(
    share: &crate::operators::rescale::Share<'_>,
    out: &mut StateSlots,
    name: &str,
    version: u32,
    mut read_value: impl FnMut(&mut Reader<'_>) -> Result<V, DecodeError>,
    write_value: impl FnMut(&mut Writer, &V),
) -> Result<(), OperatorError> {
    let mut merged: BTreeMap<Vec<u8>, V> = BTreeMap::new();
    for part in share.parts {
        for (key, value) in get_keyed(part, name, version, &mut read_value)? {
            if share.owns_key(&key) && merged.insert(key, value).is_some() {
                return Err(OperatorError::state(name, "two old subtasks hold the same key"));
            }
        }
    }
    put_keyed(out, name, version, merged.iter(), write_value);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::Value;

    #[test]
    fn keyed_slots_round_trip_and_check_their_version() {
        let mut map = BTreeMap::new();
        map.insert(key_of_values(&[Value::Str("k".into())]), 5i64);
        let mut slots = StateSlots::new();
        put_keyed(&mut slots, "last_seen", 1, &map, |w, v| {
            w.i64(*v);
        });
        assert_eq!(get_keyed(&slots, "last_seen", 1, |r| r.i64()).unwrap(), map);
        // A hash map's entries are written in key order too: the same bytes.
        let mut keyed: KeyedMap<i64> = KeyedMap::default();
        for (k, v) in [(b"b".to_vec(), 2), (b"a".to_vec(), 1), (b"c".to_vec(), 3)] {
            keyed.insert(Key::from(k), v);
        }
        let sorted: BTreeMap<Vec<u8>, i64> = keyed.iter().map(|(k, v)| (k.to_vec(), *v)).collect();
        let (mut from_hash, mut from_tree) = (StateSlots::new(), StateSlots::new());
        put_keyed(&mut from_hash, "s", 1, &keyed, |w, v| {
            w.i64(*v);
        });
        put_keyed(&mut from_tree, "s", 1, &sorted, |w, v| {
            w.i64(*v);
        });
        assert_eq!(from_hash.get("s").unwrap().bytes, from_tree.get("s").unwrap().bytes);
        assert!(get_keyed(&slots, "last_seen", 2, |r| r.i64()).is_err());
        assert!(get_keyed(&slots, "windows", 1, |r| r.i64()).is_err());
    }
}
