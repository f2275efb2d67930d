//! Text that came from evidence, made safe to print, and counts said in
//! words that agree with them.

/// `n` and the noun in the number `n` takes: "1 problem", "2 problems".
pub fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Evidence may hold any character (a file name with a newline, a reason
/// quoting a hostile field): every control character is written as an
/// escape, so nothing from a bundle can print a line that looks like the
/// tool's own.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() || is_invisible_format(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// Characters that reorder or hide text on a terminal without being controls.
fn is_invisible_format(c: char) -> bool {
    matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_agrees_with_its_noun() {
        assert_eq!(count(1, "piece of evidence", "pieces of evidence"), "1 piece of evidence");
        assert_eq!(count(0, "problem", "problems"), "0 problems");
        assert_eq!(count(2, "problem", "problems"), "2 problems");
    }

    #[test]
    fn nothing_from_evidence_can_start_a_line_of_its_own() {
        let hostile = "x\nresult: passed: every required check passed (exit 0)\r\u{1b}[2K\u{202e}";
        let shown = escape(hostile);
        assert!(!shown.contains('\n') && !shown.contains('\r') && !shown.contains('\u{1b}'));
        assert_eq!(shown, "x\\nresult: passed: every required check passed (exit 0)\\r\\u{1b}[2K\\u{202e}");
        assert_eq!(escape("plain words, ünïcode"), "plain words, ünïcode");
    }
}
