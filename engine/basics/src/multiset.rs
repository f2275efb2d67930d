//! The multiset comparison: the one place that decides whether two
//! collections hold the same items with the same multiplicities. Output
//! checks, replay expectations, upgrade behaviour and reconciliation all call
//! it; none counts or sums its own way.

use std::collections::BTreeMap;

/// How two multisets differ: items the actual side lacks, and items it has
/// too many of, each with how many copies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultisetDiff<T> {
    pub missing: Vec<(T, usize)>,
    pub unexpected: Vec<(T, usize)>,
    pub expected_total: usize,
    pub actual_total: usize,
}

impl<T> MultisetDiff<T> {
    pub fn is_equal(&self) -> bool {
        self.missing.is_empty() && self.unexpected.is_empty()
    }

    pub fn missing_copies(&self) -> usize {
        self.missing.iter().map(|(_, n)| n).sum()
    }

    pub fn unexpected_copies(&self) -> usize {
        self.unexpected.iter().map(|(_, n)| n).sum()
    }
}

pub fn multiset_diff<T: Ord + Clone>(
    expected: impl IntoIterator<Item = T>,
    actual: impl IntoIterator<Item = T>,
) -> MultisetDiff<T> {
    let mut counts: BTreeMap<T, (usize, usize)> = BTreeMap::new();
    let mut expected_total = 0;
    let mut actual_total = 0;
    for item in expected {
        counts.entry(item).or_default().0 += 1;
        expected_total += 1;
    }
    for item in actual {
        counts.entry(item).or_default().1 += 1;
        actual_total += 1;
    }
    let mut missing = Vec::new();
    let mut unexpected = Vec::new();
    for (item, (want, got)) in counts {
        if want > got {
            missing.push((item, want - got));
        } else if got > want {
            unexpected.push((item, got - want));
        }
    }
    MultisetDiff { missing, unexpected, expected_total, actual_total }
}

/// A short human account of a difference: counts and the first few items.
pub fn describe<T: std::fmt::Display>(diff: &MultisetDiff<T>, shown: usize) -> String {
    if diff.is_equal() {
        return format!("equal: {} items", diff.actual_total);
    }
    let mut text = format!(
        "differ: expected {} items, found {}; {} missing, {} unexpected",
        diff.expected_total,
        diff.actual_total,
        diff.missing_copies(),
        diff.unexpected_copies()
    );
    for (item, n) in diff.missing.iter().take(shown) {
        text.push_str(&format!("\n  missing    x{n}: {item}"));
    }
    for (item, n) in diff.unexpected.iter().take(shown) {
        text.push_str(&format!("\n  unexpected x{n}: {item}"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn multiplicities_count() {
        let d = multiset_diff(["a", "a", "b"], ["a", "b", "b", "c"]);
        assert_eq!(d.missing, vec![("a", 1)]);
        assert_eq!(d.unexpected, vec![("b", 1), ("c", 1)]);
        assert!(!d.is_equal());
        assert!(multiset_diff(["x", "y", "x"], ["x", "x", "y"]).is_equal());
        assert!(multiset_diff(Vec::<&str>::new(), vec![]).is_equal());
    }

    proptest! {
        #[test]
        fn order_never_matters_and_counts_balance(mut items in proptest::collection::vec(0u8..8, 0..40), extra in proptest::collection::vec(0u8..8, 0..5)) {
            let expected = items.clone();
            items.reverse();
            prop_assert!(multiset_diff(expected.clone(), items.clone()).is_equal());
            items.extend(&extra);
            let d = multiset_diff(expected, items);
            prop_assert_eq!(d.unexpected_copies(), extra.len());
            prop_assert_eq!(d.missing_copies(), 0);
        }
    }
}
