//! The canonical cells the artifact holds, written by this crate's own code
//! from the published rules (`clink-canonical-cells-v1`): NULL as `null`;
//! integers and timestamps (milliseconds) as decimal integers without a
//! leading zero or a sign on zero; decimals as the unscaled integer at the
//! column's scale; strings as themselves.

use serde_json::Value as Json;

/// An exact decimal read from the message's text at a fixed scale, as its
/// unscaled integer. `-?digits[.digits]`, at most `scale` fraction digits.
pub fn parse_decimal(text: &str, scale: u32) -> Option<i128> {
    let (negative, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (whole, fraction) = match body.find('.') {
        Some(dot) => (&body[..dot], &body[dot + 1..]),
        None => (body, ""),
    };
    if whole.is_empty() || !whole.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    if body.contains('.') && fraction.is_empty() {
        return None;
    }
    if !fraction.chars().all(|c| c.is_ascii_digit()) || fraction.len() > scale as usize {
        return None;
    }
    let mut value: i128 = 0;
    for c in whole.chars() {
        value = value.checked_mul(10)?.checked_add(i128::from(c.to_digit(10)?))?;
    }
    for i in 0..scale as usize {
        let digit = fraction.chars().nth(i).and_then(|c| c.to_digit(10)).unwrap_or(0);
        value = value.checked_mul(10)?.checked_add(i128::from(digit))?;
    }
    Some(if negative { -value } else { value })
}

pub fn int(v: i128) -> Json {
    Json::String(v.to_string())
}

pub fn text(s: &str) -> Json {
    Json::String(s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn decimals_are_read_exactly_at_the_scale() {
        assert_eq!(parse_decimal("12.5", 2), Some(1250));
        assert_eq!(parse_decimal("-0.05", 2), Some(-5));
        assert_eq!(parse_decimal("7", 2), Some(700));
        assert_eq!(int(-0), Json::String("0".into()));
        for bad in ["", "-", "1.", ".5", "1.234", "1e2", "+1", "1,5", "--1"] {
            assert_eq!(parse_decimal(bad, 2), None, "{bad}");
        }
    }

    proptest! {
        #[test]
        fn any_text_is_read_or_refused_without_panicking(t in ".{0,30}") {
            let _ = parse_decimal(&t, 2);
        }

        #[test]
        fn printed_decimals_read_back(unscaled in -10i128.pow(20)..10i128.pow(20)) {
            let sign = if unscaled < 0 { "-" } else { "" };
            let a = unscaled.unsigned_abs();
            let text = format!("{sign}{}.{:02}", a / 100, a % 100);
            prop_assert_eq!(parse_decimal(&text, 2), Some(unscaled));
        }
    }
}
