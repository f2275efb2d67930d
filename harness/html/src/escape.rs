//! Escaping for the three places evidence lands in a report: element text,
//! attribute values, and the JSON data block inside a `<script>` element.
//!
//! Everything a report shows that came from evidence (file names, reasons,
//! trace fields) goes through one of these; the page's own markup is the only
//! markup in it.

use serde_json::Value as Json;

/// Text for an element's content or a quoted attribute value: `&`, `<`, `>`,
/// `"` and `'` become character references, so nothing can open or close a
/// tag or leave an attribute. Control and invisible formatting characters
/// (a newline in a file name, a right-to-left override) are first written as
/// visible escapes, as the text report writes them.
pub fn text(s: &str) -> String {
    let shown = clink_basics::text::escape(s);
    let mut out = String::with_capacity(shown.len());
    for c in shown.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A quoted attribute value: the same rules as [`text`].
pub fn attr(s: &str) -> String {
    text(s)
}

/// JSON for a `<script type="application/json">` block. `<`, `>` and `&`
/// (which JSON only holds inside strings) and U+2028/U+2029 are written as
/// `\uXXXX` escapes, so no `</script>` or `<!--` can appear in the block and
/// the text parses to the same value.
pub fn script_json(value: &Json) -> String {
    let raw = value.to_string();
    let mut out = String::with_capacity(raw.len() + 16);
    for c in raw.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn markup_in_evidence_is_text() {
        assert_eq!(text(r#"<script>alert("x")</script>"#), "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;");
        assert_eq!(attr("a' onmouseover='x"), "a&#39; onmouseover=&#39;x");
        assert_eq!(text("a\nb\u{202e}"), "a\\nb\\u{202e}");
        assert_eq!(text("ünïcode & more"), "ünïcode &amp; more");
    }

    #[test]
    fn script_data_cannot_close_its_element() {
        let v = serde_json::json!({"reason": "</script><script>alert(1)</script><!-- \u{2028}&"});
        let s = script_json(&v);
        assert!(!s.contains('<') && !s.contains('>') && !s.contains('&'), "{s}");
        assert!(!s.contains('\u{2028}'));
        assert_eq!(serde_json::from_str::<Json>(&s).unwrap(), v);
    }

    proptest! {
        #[test]
        fn escaped_text_holds_no_markup(s in "\\PC{0,200}") {
            let t = text(&s);
            prop_assert!(!t.contains('<') && !t.contains('>') && !t.contains('"') && !t.contains('\''));
        }

        #[test]
        fn script_json_round_trips_and_never_holds_a_tag(s in "\\PC{0,200}") {
            let v = serde_json::json!([s]);
            let out = script_json(&v);
            prop_assert!(!out.contains('<') && !out.contains('>'));
            prop_assert_eq!(serde_json::from_str::<Json>(&out).unwrap(), v);
        }
    }
}
