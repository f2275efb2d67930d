//! The multiset comparison: the one place that decides whether two collections
//! hold the same items with the same multiplicities. Output checks, replay
//! expectations and reconciliation all call it.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::Path;

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

/// The first key whose rows differ between two sequences, comparing each key's
/// rows in order and nothing across keys. With no key columns the sequences
/// are compared row for row.
pub fn keyed_order_diff<R: AsRef<[clink_engine::value::Value]>>(
    left: &[R],
    right: &[R],
    key_columns: &[usize],
) -> Option<String> {
    use clink_engine::operators::keyed::key_bytes;
    use clink_engine::value::row_bytes;
    let group = |rows: &[R]| {
        let mut by_key: BTreeMap<Vec<u8>, Vec<Vec<u8>>> = BTreeMap::new();
        for row in rows {
            let row = row.as_ref();
            by_key.entry(key_bytes(row, key_columns)).or_default().push(row_bytes(row));
        }
        by_key
    };
    let (l, r) = (group(left), group(right));
    let keys: std::collections::BTreeSet<&Vec<u8>> = l.keys().chain(r.keys()).collect();
    for key in keys {
        let (a, b) = (l.get(key).map_or(&[][..], Vec::as_slice), r.get(key).map_or(&[][..], Vec::as_slice));
        if a != b {
            let shown = clink_engine::operators::keyed::key_values(key)
                .map(|v| format!("{v:?}"))
                .unwrap_or_else(|_| "?".into());
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

/// Every line of every regular, non-hidden file directly in `dir`, in file
/// name order. A link or a directory inside is refused, not followed.
pub fn read_output_lines(dir: &Path) -> io::Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let kind = entry.file_type()?;
        if !kind.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} is not a regular file", entry.path().display()),
            ));
        }
        names.push(name);
    }
    names.sort();
    let mut lines = Vec::new();
    for name in names {
        let text = fs::read_to_string(dir.join(&name))?;
        lines.extend(text.lines().map(str::to_string));
    }
    Ok(lines)
}

/// Lines of a file (an expected output).
pub fn read_lines(path: &Path) -> io::Result<Vec<String>> {
    Ok(fs::read_to_string(path)?.lines().map(str::to_string).collect())
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

    #[test]
    fn multiplicities_count() {
        let d = multiset_diff(["a", "a", "b"], ["a", "b", "b", "c"]);
        assert_eq!(d.missing, vec![("a", 1)]);
        assert_eq!(d.unexpected, vec![("b", 1), ("c", 1)]);
        assert!(!d.is_equal());
        assert!(multiset_diff(["x", "y", "x"], ["x", "x", "y"]).is_equal());
        assert!(multiset_diff(Vec::<&str>::new(), vec![]).is_equal());
    }
}
