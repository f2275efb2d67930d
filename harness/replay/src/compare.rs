//! Comparing rows as the engine orders them: each key's rows in order, and
//! nothing across keys (a keyed operator's subtasks interleave keys freely).

use std::collections::{BTreeMap, BTreeSet};

use clink_engine::keys::{key_bytes, key_values};
use clink_engine::value::{row_bytes, Value};

/// The first key whose rows differ between two sequences, comparing each key's
/// rows in order and nothing across keys. With no key columns the sequences
/// are compared row for row.
pub fn keyed_order_diff<R: AsRef<[Value]>>(left: &[R], right: &[R], key_columns: &[usize]) -> Option<String> {
    let group = |rows: &[R]| {
        let mut by_key: BTreeMap<Vec<u8>, Vec<Vec<u8>>> = BTreeMap::new();
        for row in rows {
            let row = row.as_ref();
            by_key.entry(key_bytes(row, key_columns)).or_default().push(row_bytes(row));
        }
        by_key
    };
    let (l, r) = (group(left), group(right));
    let keys: BTreeSet<&Vec<u8>> = l.keys().chain(r.keys()).collect();
    for key in keys {
        let (a, b) = (l.get(key).map_or(&[][..], Vec::as_slice), r.get(key).map_or(&[][..], Vec::as_slice));
        if a != b {
            let shown = key_values(key).map(|v| format!("{v:?}")).unwrap_or_else(|_| "?".into());
            let at = a.iter().zip(b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()));
            return Some(format!(
                "key {shown}: {} rows vs {}, first difference at the key's row {at}",
                a.len(),
                b.len()
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(key: &str, v: i64) -> Vec<Value> {
        vec![Value::Str(key.into()), Value::Int(v)]
    }

    #[test]
    fn order_counts_within_a_key_and_not_across_keys() {
        let a = vec![row("x", 1), row("y", 1), row("x", 2)];
        let interleaved = vec![row("y", 1), row("x", 1), row("x", 2)];
        assert_eq!(keyed_order_diff(&a, &interleaved, &[0]), None);
        let swapped = vec![row("x", 2), row("y", 1), row("x", 1)];
        let diff = keyed_order_diff(&a, &swapped, &[0]).unwrap();
        assert!(diff.contains("first difference at the key's row 0"), "{diff}");
        assert!(keyed_order_diff(&a, &interleaved, &[]).is_some(), "no key: row for row");
    }
}
