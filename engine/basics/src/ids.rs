//! Operator ids and other 64-bit numbers written as canonical decimal text.
//!
//! JSON numbers lose precision past 2^53 in many readers, so every 64-bit id
//! in a document of ours is a string of ASCII digits, without sign or leading
//! zero. One parser decides what is canonical.

use std::fmt;

/// A 64-bit operator id, written in JSON as decimal text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OperatorId(pub u64);

impl fmt::Display for OperatorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl OperatorId {
    /// Parses canonical decimal text: digits only, no sign, no leading zero.
    pub fn parse(text: &str) -> Option<OperatorId> {
        parse_decimal_u64(text).map(OperatorId)
    }
}

/// Canonical decimal text of a u64: ASCII digits, no sign, no leading zeros.
pub fn parse_decimal_u64(text: &str) -> Option<u64> {
    let canonical =
        !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) && (text == "0" || !text.starts_with('0'));
    if canonical {
        text.parse().ok()
    } else {
        None
    }
}

/// Canonical decimal text of a u32 (a subtask index, a generation).
pub fn parse_decimal_u32(text: &str) -> Option<u32> {
    parse_decimal_u64(text).and_then(|v| u32::try_from(v).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn only_canonical_text_parses() {
        assert_eq!(parse_decimal_u64("0"), Some(0));
        assert_eq!(parse_decimal_u64("18446744073709551615"), Some(u64::MAX));
        for bad in ["", "00", "01", "+1", "-1", " 1", "1 ", "1e3", "18446744073709551616", "0x1"] {
            assert_eq!(parse_decimal_u64(bad), None, "{bad:?}");
        }
        assert_eq!(parse_decimal_u32("4294967296"), None);
    }

    proptest! {
        #[test]
        fn every_u64_round_trips(v in any::<u64>()) {
            prop_assert_eq!(parse_decimal_u64(&v.to_string()), Some(v));
        }
    }
}
