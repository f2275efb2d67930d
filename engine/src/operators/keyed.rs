//! Keyed state helpers shared by the keyed operators: the canonical bytes of a
//! record's key, and the encoding of a keyed state slot (entries in key order).

use std::collections::BTreeMap;

use crate::checkpoint::{SlotKind, StateSlots};
use crate::codec::{DecodeError, Reader, Writer};
use crate::value::{decode_row, encode_row, Row, Value};

use super::OperatorError;

/// The canonical encoding of a row's key columns: the same key always has the
/// same bytes, so keys order and hash identically everywhere.
pub fn key_bytes(row: &[Value], key_columns: &[usize]) -> Vec<u8> {
    let mut w = Writer::new();
    w.u32(key_columns.len() as u32);
    for &i in key_columns {
        crate::value::encode_value(&mut w, row.get(i).unwrap_or(&Value::Null));
    }
    w.into_bytes()
}

/// The key's values back from its bytes.
pub fn key_values(key: &[u8]) -> Result<Row, DecodeError> {
    let mut r = Reader::new(key);
    let row = decode_row(&mut r)?;
    r.finish()?;
    Ok(row)
}

/// Writes a keyed slot: the entry count, then each key and its value.
pub fn put_keyed<V>(
    slots: &mut StateSlots,
    name: &str,
    version: u32,
    map: &BTreeMap<Vec<u8>, V>,
    mut write_value: impl FnMut(&mut Writer, &V),
) {
    let mut w = Writer::new();
    w.u32(map.len() as u32);
    for (key, value) in map {
        w.bytes(key);
        write_value(&mut w, value);
    }
    slots.put(name, SlotKind::Keyed, version, w.into_bytes());
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

/// Encodes a key row the way [`key_bytes`] does, for keys built from values.
pub fn key_of_values(values: &[Value]) -> Vec<u8> {
    let mut w = Writer::new();
    encode_row(&mut w, values);
    w.into_bytes()
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
    fn keyed_slots_round_trip_and_check_their_version() {
        let mut map = BTreeMap::new();
        map.insert(key_of_values(&[Value::Str("k".into())]), 5i64);
        let mut slots = StateSlots::new();
        put_keyed(&mut slots, "last_seen", 1, &map, |w, v| {
            w.i64(*v);
        });
        assert_eq!(get_keyed(&slots, "last_seen", 1, |r| r.i64()).unwrap(), map);
        assert!(get_keyed(&slots, "last_seen", 2, |r| r.i64()).is_err());
        assert!(get_keyed(&slots, "windows", 1, |r| r.i64()).is_err());
    }
}
