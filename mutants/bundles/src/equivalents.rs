//! The committed list of bundle mutants that change no claim
//! (`mutants/bundles/equivalents.txt`): each line a pattern of mutants'
//! names (`*` matches any text) and the reason no verdict depends on what
//! they change. A mutant the verifier does not refute is a defect unless a
//! line here names it; a line that names no surviving mutant is stale.

/// One line of the list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Equivalent {
    pub pattern: String,
    pub reason: String,
    /// Its line number in the file.
    pub line: usize,
}

/// The whole list.
#[derive(Debug, Clone, Default)]
pub struct Equivalents(pub Vec<Equivalent>);

impl Equivalents {
    /// Parses the list: `<pattern> | <reason>` per line; `#` comments and
    /// blank lines skipped; a line without a reason is refused.
    pub fn parse(text: &str) -> Result<Equivalents, String> {
        let mut list = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line_no = i + 1;
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((pattern, reason)) = line.split_once(" | ") else {
                return Err(format!("line {line_no}: expected `<pattern> | <reason>`"));
            };
            if reason.trim().is_empty() || pattern.trim().is_empty() {
                return Err(format!("line {line_no}: a pattern needs its reason"));
            }
            list.push(Equivalent {
                pattern: pattern.trim().to_string(),
                reason: reason.trim().to_string(),
                line: line_no,
            });
        }
        Ok(Equivalents(list))
    }

    /// The line that names a mutant, if one does.
    pub fn find(&self, name: &str) -> Option<&Equivalent> {
        self.0.iter().find(|e| matches(&e.pattern, name))
    }
}

/// Whether `name` matches `pattern`, `*` matching any text (none too).
pub fn matches(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, rest) = match parts.split_first() {
        Some(x) => x,
        None => return name.is_empty(),
    };
    let Some(mut left) = name.strip_prefix(first) else { return false };
    let Some((last, middle)) = rest.split_last() else { return left.is_empty() };
    for part in middle {
        match left.find(part) {
            Some(at) => left = &left[at + part.len()..],
            None => return false,
        }
    }
    left.len() >= last.len() && left.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_with_stars_only() {
        assert!(matches("good::*::pid::*", "good::run_record::1/RUN-2::pid::plus_one"));
        assert!(matches("a", "a") && !matches("a", "ab") && matches("a*", "ab") && matches("*b", "ab"));
        assert!(!matches("*::x::*", "good::y::z"));
        let list = Equivalents::parse("# c\n\ngood::* | all\n").unwrap();
        assert_eq!(list.find("good::q").map(|e| e.line), Some(3));
        assert!(Equivalents::parse("good::*\n").is_err());
    }
}
