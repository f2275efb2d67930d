//! Whole typed rows compared as multisets, key by key, through THE multiset
//! comparison (`clink_basics::multiset`). Each key's differences are
//! classified: rows missing, rows changed (the key holds other values),
//! rows duplicated (more copies of an expected row), and rows unexpected (a
//! row the expectation does not hold, beside the expected ones). Counts,
//! totals and digests decide nothing.

use std::collections::{BTreeMap, BTreeSet};

use clink_basics::multiset::multiset_diff;
use serde::Serialize;

use crate::cells::{show_row, Cell};

pub type Row = Vec<Cell>;
pub type Key = Vec<Cell>;
pub type Keyed = BTreeMap<Key, Vec<Row>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Missing,
    Changed,
    Duplicated,
    Unexpected,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Missing => "missing",
            Kind::Changed => "changed",
            Kind::Duplicated => "duplicated",
            Kind::Unexpected => "unexpected",
        }
    }
}

/// One discrepancy of one key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub kind: Kind,
    pub key: Vec<Cell>,
    /// The row one side expected (missing, changed, duplicated).
    pub expected: Option<Row>,
    /// The row the other side holds (changed, duplicated, unexpected).
    pub actual: Option<Row>,
    pub copies: usize,
    /// What in the evidence explains it (duplicates only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explained_by: Option<String>,
}

impl Finding {
    pub fn describe(&self) -> String {
        let mut text = format!("{} key {}", self.kind.as_str(), show_row(&self.key));
        match (&self.expected, &self.actual) {
            (Some(e), Some(a)) if e != a => text.push_str(&format!(": expected {} found {}", show_row(e), show_row(a))),
            (Some(e), _) => text.push_str(&format!(": {}", show_row(e))),
            (None, Some(a)) => text.push_str(&format!(": {}", show_row(a))),
            (None, None) => {}
        }
        if self.copies > 1 {
            text.push_str(&format!(" (x{})", self.copies));
        }
        if let Some(why) = &self.explained_by {
            text.push_str(&format!(" — explained by {why}"));
        }
        text
    }
}

/// What a comparison found, with counts per kind (in copies).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Comparison {
    pub keys: usize,
    pub expected_rows: usize,
    pub actual_rows: usize,
    pub missing: usize,
    pub changed: usize,
    pub duplicated: usize,
    pub unexpected: usize,
    /// Duplicated copies the evidence explains.
    pub duplicated_explained: usize,
    pub findings: Vec<Finding>,
}

impl Comparison {
    pub fn equal(&self) -> bool {
        self.findings.is_empty()
    }

    pub fn summary(&self) -> String {
        format!(
            "{} keys, {} rows expected, {} found: {} missing, {} changed, {} duplicated ({} explained), {} unexpected",
            self.keys,
            self.expected_rows,
            self.actual_rows,
            self.missing,
            self.changed,
            self.duplicated,
            self.duplicated_explained,
            self.unexpected
        )
    }
}

/// Compares `expected` with `actual` over `keys` (a key neither side holds
/// compares equal). Rows of keys outside `keys` are ignored.
pub fn compare(expected: &Keyed, actual: &Keyed, keys: &BTreeSet<Key>) -> Comparison {
    let mut c = Comparison { keys: keys.len(), ..Comparison::default() };
    let empty: Vec<Row> = Vec::new();
    for key in keys {
        let e = expected.get(key).unwrap_or(&empty);
        let a = actual.get(key).unwrap_or(&empty);
        c.expected_rows += e.len();
        c.actual_rows += a.len();
        let diff = multiset_diff(e.iter().cloned(), a.iter().cloned());
        if diff.is_equal() {
            continue;
        }
        let expected_set: BTreeSet<&Row> = e.iter().collect();
        // Extra copies of rows the key should hold are duplicates; other
        // extra rows pair with missing ones as changes, the rest unexpected.
        let mut foreign: Vec<(Row, usize)> = Vec::new();
        for (row, n) in diff.unexpected {
            if expected_set.contains(&row) {
                c.duplicated += n;
                c.findings.push(Finding {
                    kind: Kind::Duplicated,
                    key: key.clone(),
                    expected: Some(row.clone()),
                    actual: Some(row),
                    copies: n,
                    explained_by: None,
                });
            } else {
                foreign.push((row, n));
            }
        }
        let mut missing: Vec<(Row, usize)> = diff.missing;
        let mut foreign = foreign.into_iter().flat_map(|(r, n)| std::iter::repeat_n(r, n));
        let mut unpaired_missing = Vec::new();
        for (row, n) in missing.drain(..) {
            for _ in 0..n {
                match foreign.next() {
                    Some(found) => {
                        c.changed += 1;
                        c.findings.push(Finding {
                            kind: Kind::Changed,
                            key: key.clone(),
                            expected: Some(row.clone()),
                            actual: Some(found),
                            copies: 1,
                            explained_by: None,
                        });
                    }
                    None => unpaired_missing.push(row.clone()),
                }
            }
        }
        for row in unpaired_missing {
            c.missing += 1;
            c.findings.push(Finding {
                kind: Kind::Missing,
                key: key.clone(),
                expected: Some(row),
                actual: None,
                copies: 1,
                explained_by: None,
            });
        }
        for row in foreign {
            c.unexpected += 1;
            c.findings.push(Finding {
                kind: Kind::Unexpected,
                key: key.clone(),
                expected: None,
                actual: Some(row),
                copies: 1,
                explained_by: None,
            });
        }
    }
    c
}

/// Marks the duplicates `sources` account for: each source names what
/// explains its rows and how many copies of each row it may have added.
pub fn explain_duplicates(c: &mut Comparison, sources: &[(String, BTreeMap<Row, usize>)]) {
    let mut budget: Vec<(String, BTreeMap<Row, usize>)> = sources.to_vec();
    for f in c.findings.iter_mut().filter(|f| f.kind == Kind::Duplicated) {
        let Some(row) = f.actual.clone() else { continue };
        let mut left = f.copies;
        let mut why = Vec::new();
        for (name, rows) in budget.iter_mut() {
            if left == 0 {
                break;
            }
            if let Some(n) = rows.get_mut(&row) {
                let take = (*n).min(left);
                if take > 0 {
                    *n -= take;
                    left -= take;
                    why.push(name.clone());
                }
            }
        }
        if left == 0 && !why.is_empty() {
            c.duplicated_explained += f.copies;
            f.explained_by = Some(why.join(" and "));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(cells: &[&str]) -> Row {
        cells.iter().map(|c| Some(c.to_string())).collect()
    }

    fn keyed(rows: &[Row]) -> Keyed {
        crate::read::by_key(rows.to_vec(), &[0])
    }

    #[test]
    fn each_kind_is_told_apart() {
        let expected =
            keyed(&[row(&["1", "a"]), row(&["2", "b"]), row(&["3", "c"]), row(&["4", "d"]), row(&["5", "e"])]);
        let actual = keyed(&[
            // 1 missing; 2 changed; 3 duplicated; 4 with an unexpected extra row; 5 equal
            row(&["2", "B"]),
            row(&["3", "c"]),
            row(&["3", "c"]),
            row(&["4", "d"]),
            row(&["4", "x"]),
            row(&["5", "e"]),
        ]);
        let keys: BTreeSet<Key> = expected.keys().cloned().collect();
        let c = compare(&expected, &actual, &keys);
        let kinds: Vec<(Kind, String)> =
            c.findings.iter().map(|f| (f.kind, f.key[0].clone().unwrap_or_default())).collect();
        assert!(kinds.contains(&(Kind::Missing, "1".into())), "{kinds:?}");
        assert!(kinds.contains(&(Kind::Changed, "2".into())), "{kinds:?}");
        assert!(kinds.contains(&(Kind::Duplicated, "3".into())), "{kinds:?}");
        assert!(kinds.contains(&(Kind::Unexpected, "4".into())), "{kinds:?}");
        assert_eq!(c.findings.len(), 4);
        assert_eq!((c.missing, c.changed, c.duplicated, c.unexpected), (1, 1, 1, 1));
    }

    #[test]
    fn equal_sides_find_nothing_and_order_does_not_matter() {
        let a = keyed(&[row(&["1", "a"]), row(&["1", "b"]), row(&["2", "c"])]);
        let b = keyed(&[row(&["2", "c"]), row(&["1", "b"]), row(&["1", "a"])]);
        let keys: BTreeSet<Key> = a.keys().cloned().collect();
        assert!(compare(&a, &b, &keys).equal());
    }

    #[test]
    fn duplicates_are_explained_only_as_far_as_the_evidence_goes() {
        let expected = keyed(&[row(&["1", "a"]), row(&["2", "b"])]);
        let actual = keyed(&[row(&["1", "a"]), row(&["1", "a"]), row(&["2", "b"]), row(&["2", "b"])]);
        let keys: BTreeSet<Key> = expected.keys().cloned().collect();
        let mut c = compare(&expected, &actual, &keys);
        let resent: BTreeMap<Row, usize> = [(row(&["1", "a"]), 1)].into();
        explain_duplicates(&mut c, &[("the restore to checkpoint 1".into(), resent)]);
        let explained: Vec<bool> = c.findings.iter().map(|f| f.explained_by.is_some()).collect();
        assert_eq!(explained, vec![true, false]);
        assert_eq!(c.duplicated_explained, 1);
    }
}
