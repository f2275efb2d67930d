//! Names that become file or directory names (a sink's folder from its uid, a
//! staged file from its handle): never a separator, never `..`, never hidden.

/// Whether a name is 1-128 characters of `A-Z a-z 0-9 . _ -`, not starting with `.`.
pub fn is_safe_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separators_dots_and_empties_are_unsafe() {
        assert!(is_safe_name("windows-out"));
        for bad in ["", ".", "..", ".hidden", "a/b", "a\\b", "a b", "é"] {
            assert!(!is_safe_name(bad), "{bad:?}");
        }
        assert!(!is_safe_name(&"a".repeat(129)));
    }
}
