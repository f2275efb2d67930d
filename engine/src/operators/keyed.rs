//! Keyed state helpers shared by the keyed operators: the encoding of a keyed
//! state slot (entries in key order), and the params every keyed operator
//! reads. A key's bytes are [`crate::keys`]'.

use std::collections::BTreeMap;

use crate::checkpoint::{SlotKind, StateSlots};
use crate::codec::{DecodeError, Reader, Writer};
pub use crate::keys::{key_bytes, key_bytes_into, key_of_values, key_values};

use super::OperatorError;

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
        assert!(get_keyed(&slots, "last_seen", 2, |r| r.i64()).is_err());
        assert!(get_keyed(&slots, "windows", 1, |r| r.i64()).is_err());
    }
}
