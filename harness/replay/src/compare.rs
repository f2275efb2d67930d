//! Comparing rows as the engine orders them: each key's rows in order, and
//! nothing across keys (a keyed operator's subtasks interleave keys freely).

use rustc_hash::FxHashMap;

use clink_engine::keys::{key_bytes, key_values};
use clink_engine::value::{rows_identical, Value};

/// The first key whose rows differ between two sequences, comparing each key's
/// rows in order and nothing across keys. With no key columns the sequences
/// are compared row for row.
pub fn keyed_order_diff<L: AsRef<[Value]>, R: AsRef<[Value]>>(
    left: &[L],
    right: &[R],
    key_columns: &[usize],
) -> Option<String> {
    // Hashed, not ordered: the keys are ordered only when a difference is
    // found, to name the first.
    let mut by_key: FxHashMap<Vec<u8>, Sides<'_>> = FxHashMap::default();
    let sides = [left.iter().map(AsRef::as_ref).collect::<Vec<_>>(), right.iter().map(AsRef::as_ref).collect()];
    for (side, rows) in sides.iter().enumerate() {
        for &row in rows {
            by_key.entry(key_bytes(row, key_columns)).or_default()[side].push(row);
        }
    }
    let (key, [a, b]) = by_key.iter().filter(|(_, [a, b])| differ_at(a, b).is_some()).min_by_key(|(key, _)| *key)?;
    let shown = key_values(key).map(|v| format!("{v:?}")).unwrap_or_else(|_| "?".into());
    Some(format!(
        "key {shown}: {} rows vs {}, first difference at the key's row {}",
        a.len(),
        b.len(),
        differ_at(a, b).unwrap_or_default()
    ))
}

/// One key's rows on the left and on the right, in order.
type Sides<'r> = [Vec<&'r [Value]>; 2];

/// Where two sequences of one key's rows first differ (a row, or where the
/// shorter ends).
fn differ_at(a: &[&[Value]], b: &[&[Value]]) -> Option<usize> {
    match a.iter().zip(b).position(|(x, y)| !rows_identical(x, y)) {
        Some(at) => Some(at),
        None if a.len() != b.len() => Some(a.len().min(b.len())),
        None => None,
    }
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

    #[test]
    fn rows_compare_by_their_bytes_not_their_numbers() {
        let float = |f: f64| vec![Value::Str("x".into()), Value::Float(f)];
        assert_eq!(keyed_order_diff(&[float(f64::NAN)], &[float(f64::NAN)], &[0]), None, "NaN is its own bytes");
        let zeros = keyed_order_diff(&[float(0.0)], &[float(-0.0)], &[0]).unwrap();
        assert!(zeros.contains("1 rows vs 1, first difference at the key's row 0"), "{zeros}");
        let longer = keyed_order_diff(&[float(1.0)], &[float(1.0), float(2.0)], &[0]).unwrap();
        assert!(longer.contains("1 rows vs 2, first difference at the key's row 1"), "{longer}");
    }
}
