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
    MultisetDiff {
        missing,
        unexpected,
        expected_total,
        actual_total,
    }
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
    Ok(fs::read_to_string(path)?
        .lines()
        .map(str::to_string)
        .collect())
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
