//! The destination's reads: the selected keys twice, --settle-ms apart,
//! with the table's mutations before and after; and, for complete-table
//! coverage, the whole table between two looks at its active parts. What
//! makes the reads unable to decide is said, never smoothed over.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::cells;
use crate::compare::{Key, Row};
use crate::read::{by_key, Mutation, ReadColumn, ReadFailure, Reader};

use super::ReconcileProgress;

/// The two reads of the selected keys and what surrounded them.
pub(super) struct Reads {
    pub first: Vec<Row>,
    pub second: Vec<Row>,
    pub failure: Option<ReadFailure>,
    pub mutations_before: Vec<Mutation>,
    pub mutations_after: Vec<Mutation>,
    /// Why the reads cannot decide (a mutation, a key read differently twice).
    pub unstable: Option<String>,
}

pub(super) fn read_twice(
    reader: &mut Reader<'_>,
    columns: &[ReadColumn],
    key: &[usize],
    keys: &BTreeSet<Key>,
    progress: &mut dyn ReconcileProgress,
) -> Reads {
    let mut reads = Reads {
        first: Vec::new(),
        second: Vec::new(),
        failure: None,
        mutations_before: Vec::new(),
        mutations_after: Vec::new(),
        unstable: None,
    };
    let keys: Vec<Key> = keys.iter().cloned().collect();
    let settle = reader.bounds.settle_ms;
    let result = (|| -> Result<(), ReadFailure> {
        reads.mutations_before = reader.mutations()?;
        reads.first = reader.rows_of_keys(columns, key, &keys)?;
        progress.read_done(1, keys.len(), settle);
        std::thread::sleep(Duration::from_millis(settle));
        reads.second = reader.rows_of_keys(columns, key, &keys)?;
        progress.read_done(2, keys.len(), 0);
        reads.mutations_after = reader.mutations()?;
        Ok(())
    })();
    if let Err(e) = result {
        reads.failure = Some(e);
        return reads;
    }
    if let Some(m) = reads.mutations_before.iter().chain(&reads.mutations_after).find(|m| !m.done) {
        reads.unstable = Some(format!(
            "a mutation of the table is in progress ({}: {}): its rows may change under the read",
            m.id, m.command
        ));
    } else if reads.mutations_before != reads.mutations_after {
        reads.unstable = Some("a mutation of the table began during the read".into());
    } else {
        let a = by_key(reads.first.clone(), key);
        let b = by_key(reads.second.clone(), key);
        let all: BTreeSet<&Key> = a.keys().chain(b.keys()).collect();
        let empty = Vec::new();
        for k in all {
            let x = clink_basics::multiset::multiset_diff(
                a.get(k).unwrap_or(&empty).iter().cloned(),
                b.get(k).unwrap_or(&empty).iter().cloned(),
            );
            if !x.is_equal() {
                reads.unstable = Some(format!(
                    "key {} read differently twice, {} ms apart: the table is changing",
                    cells::show_row(k),
                    settle
                ));
                break;
            }
        }
    }
    reads
}

/// The table's active parts before, the whole table, the parts after.
pub(super) struct Whole {
    pub parts_before: Result<Vec<String>, ReadFailure>,
    pub rows: Result<Vec<Row>, ReadFailure>,
    pub parts_after: Result<Vec<String>, ReadFailure>,
}

pub(super) fn read_whole(reader: &mut Reader<'_>, columns: &[ReadColumn]) -> Whole {
    let parts_before = reader.active_parts();
    let rows = reader.whole_table(columns);
    let parts_after = reader.active_parts();
    Whole { parts_before, rows, parts_after }
}
