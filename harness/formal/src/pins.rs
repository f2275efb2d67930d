//! The pinned size of each model's search: `formal/models/expected.txt`
//! gives every model the distinct states and the depth TLC must report, so
//! that a change to the specification or a model that changes what TLC
//! enumerates fails the suite instead of passing on a different search.
//!
//! It never runs TLC itself and never passes a model whose counts TLC did not
//! print: a count that could not be read is a mismatch, not a match.

use std::collections::BTreeMap;

use thiserror::Error;

use super::tlc::Outcome;

/// What one model's search must come to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelPin {
    pub distinct_states: u64,
    pub depth: u64,
}

/// A line of `formal/models/expected.txt` that does not read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("formal/models/expected.txt line {line}: {reason}")]
pub struct PinLineError {
    pub line: usize,
    pub reason: String,
}

/// Reads `<model> states <N> depth <D>` lines; `#` starts a comment, blank
/// lines are skipped, and a model pinned twice is refused.
pub fn parse_pins(text: &str) -> Result<BTreeMap<String, ModelPin>, PinLineError> {
    let mut pins = BTreeMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let err = |reason: String| PinLineError { line: i + 1, reason };
        let words: Vec<&str> = line.split_whitespace().collect();
        let [name, "states", states, "depth", depth] = words.as_slice() else {
            return Err(err(format!("expected `<model> states <N> depth <D>`, found {line:?}")));
        };
        let number = |w: &str| w.replace(',', "").parse::<u64>().map_err(|_| err(format!("{w:?} is not a count")));
        let pin = ModelPin { distinct_states: number(states)?, depth: number(depth)? };
        if pins.insert(name.to_string(), pin).is_some() {
            return Err(err(format!("{name} is pinned twice")));
        }
    }
    Ok(pins)
}

/// How a passing model's search differs from its pin.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PinMismatch {
    #[error("TLC printed no {what}: the search cannot be compared with its pin")]
    Unread { what: &'static str },
    #[error(
        "the search changed: {distinct_states} distinct states, depth {depth}; pinned {pin_states}, depth {pin_depth}"
    )]
    Changed { distinct_states: u64, depth: u64, pin_states: u64, pin_depth: u64 },
    #[error("not a passing model check: {0}")]
    NotPassed(String),
}

/// Whether a model's outcome is a pass with exactly the pinned search.
pub fn matches_pin(pin: &ModelPin, outcome: &Outcome) -> Result<(), PinMismatch> {
    let Outcome::NoError { distinct_states, depth } = outcome else {
        return Err(PinMismatch::NotPassed(outcome.to_string()));
    };
    let states = distinct_states.ok_or(PinMismatch::Unread { what: "distinct-state count" })?;
    let depth = depth.ok_or(PinMismatch::Unread { what: "search depth" })?;
    if states == pin.distinct_states && depth == pin.depth {
        Ok(())
    } else {
        Err(PinMismatch::Changed {
            distinct_states: states,
            depth,
            pin_states: pin.distinct_states,
            pin_depth: pin.depth,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn passed(states: Option<u64>, depth: Option<u64>) -> Outcome {
        Outcome::NoError { distinct_states: states, depth }
    }

    #[test]
    fn pins_read_with_reasons() {
        let pins = parse_pins("# c\n\nMC_A states 7,799 depth 32 # 7 s\nMC_B states 10 depth 3\n").unwrap();
        assert_eq!(pins["MC_A"], ModelPin { distinct_states: 7799, depth: 32 });
        assert_eq!(pins.len(), 2);
        let e = parse_pins("MC_A states 1\n").unwrap_err();
        assert_eq!(e.line, 1);
        assert!(parse_pins("MC_A states x depth 3").unwrap_err().reason.contains("not a count"));
        assert!(parse_pins("MC_A states 1 depth 2\nMC_A states 1 depth 2").unwrap_err().reason.contains("twice"));
    }

    #[test]
    fn a_changed_or_unread_search_fails_its_pin() {
        let pin = ModelPin { distinct_states: 100, depth: 9 };
        assert_eq!(matches_pin(&pin, &passed(Some(100), Some(9))), Ok(()));
        assert!(matches!(matches_pin(&pin, &passed(Some(101), Some(9))), Err(PinMismatch::Changed { .. })));
        assert!(matches!(matches_pin(&pin, &passed(Some(100), Some(8))), Err(PinMismatch::Changed { .. })));
        assert_eq!(
            matches_pin(&pin, &passed(None, Some(9))),
            Err(PinMismatch::Unread { what: "distinct-state count" })
        );
        assert_eq!(matches_pin(&pin, &passed(Some(100), None)), Err(PinMismatch::Unread { what: "search depth" }));
        assert!(matches!(matches_pin(&pin, &Outcome::Deadlock), Err(PinMismatch::NotPassed(_))));
    }
}
