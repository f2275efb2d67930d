//! The independent reference for the record-wise Kafka job
//! (`fixtures/jobs/kafka-clickhouse`): the credits, every event whose amount
//! is above zero, as `id,account,amount,time` lines, computed from the
//! seeded input's segment files. Event `id` is the event's index in the input
//! (from 0), as `clink produce` numbers the messages it publishes.

use std::fs;
use std::path::Path;

use crate::example::{parse_cents, parse_time, render_cents};
use crate::ReferenceError;

pub fn credits(input_dir: &Path) -> Result<Vec<String>, ReferenceError> {
    let names = crate::example::segment_names(input_dir)?;
    let mut out = Vec::new();
    let mut id = 0u64;
    for name in names {
        let path = input_dir.join(&name);
        let text = fs::read_to_string(&path).map_err(|source| ReferenceError::Io { path: path.clone(), source })?;
        for (i, line) in text.lines().enumerate() {
            let bad = |what: String| ReferenceError::Input { at: format!("{}:{}", path.display(), i + 1), what };
            let fields: Vec<&str> = line.split(',').collect();
            if let ["E", t, account, amount] = fields[..] {
                let t = parse_time(t).ok_or_else(|| bad("bad time".into()))?;
                let cents = parse_cents(amount).ok_or_else(|| bad(format!("bad amount {amount:?}")))?;
                if cents > 0 {
                    out.push(format!("{id},{account},{},{t}", render_cents(cents)));
                }
                id += 1;
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credits_keep_positive_amounts_numbered_by_their_place_in_the_input() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("segment-0000.txt"), "E,10,a,1.5\nE,20,b,-2\nW,5\nE,30,a,0\n").unwrap();
        fs::write(dir.path().join("segment-0001.txt"), "E,40,c,3\nEND\n").unwrap();
        assert_eq!(credits(dir.path()).unwrap(), ["0,a,1.50,10", "3,c,3.00,40"]);
    }
}
