//! The only ways a name or a value reaches a statement: an identifier in
//! backquotes and a string literal in single quotes, each with every
//! character the server's lexer treats specially escaped.

/// `name` as a quoted identifier: backquotes, with backslash and backquote
/// escaped (so no name can end the quoting early).
pub fn identifier(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 2);
    out.push('`');
    for c in name.chars() {
        match c {
            '`' => out.push_str("\\`"),
            '\\' => out.push_str("\\\\"),
            '\0' => out.push_str("\\0"),
            c => out.push(c),
        }
    }
    out.push('`');
    out
}

/// `database`.`table`, both quoted.
pub fn qualified(database: &str, table: &str) -> String {
    format!("{}.{}", identifier(database), identifier(table))
}

/// `text` as a string literal: single quotes, with backslash, quote and
/// control characters escaped.
pub fn string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('\'');
    for c in text.chars() {
        match c {
            '\'' => out.push_str("\\'"),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\0' => out.push_str("\\0"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn hostile_names_and_values_stay_inside_their_quotes() {
        assert_eq!(identifier("a`; DROP TABLE t; --"), "`a\\`; DROP TABLE t; --`");
        assert_eq!(identifier("x\\`y"), "`x\\\\\\`y`");
        assert_eq!(string("it's'; DROP TABLE t; --"), "'it\\'s\\'; DROP TABLE t; --'");
        assert_eq!(string("a\\' OR 1=1"), "'a\\\\\\' OR 1=1'");
    }

    /// Reads a quoted token back as the server's lexer would: the content
    /// ends at the first unescaped closing quote.
    fn unquote(quoted: &str, quote: char) -> Option<(String, usize)> {
        let mut chars = quoted.char_indices();
        if chars.next()?.1 != quote {
            return None;
        }
        let mut out = String::new();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    let (_, e) = chars.next()?;
                    out.push(match e {
                        'n' => '\n',
                        'r' => '\r',
                        't' => '\t',
                        '0' => '\0',
                        other => other,
                    });
                }
                c if c == quote => return Some((out, i + 1)),
                c => out.push(c),
            }
        }
        None
    }

    proptest! {
        #[test]
        fn any_text_round_trips_and_the_quote_ends_at_the_end(text in any::<String>()) {
            for (quoted, q) in [(identifier(&text), '`'), (string(&text), '\'')] {
                let (back, end) = unquote(&quoted, q).expect("closed");
                prop_assert_eq!(&back, &text);
                prop_assert_eq!(end, quoted.len(), "the quoting ended early in {}", quoted);
            }
        }
    }
}
