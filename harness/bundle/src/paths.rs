//! The path rules of a bundle: every artifact sits in an evidence directory on
//! a plain relative path, and nothing on the path is a link.

use std::path::{Path, PathBuf};

/// The directories evidence may sit in.
pub const EVIDENCE_DIRS: [&str; 4] = ["checkpoint", "capture", "traces", "job"];

/// A path that breaks the rules, and which rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PathRuleError(pub String);

/// Checks a manifest path's form: relative, `/`-separated, no empty, `.` or
/// `..` component, no backslash or NUL, under an evidence directory.
pub fn check_form(path: &str) -> Result<(), PathRuleError> {
    if path.is_empty() {
        return Err(PathRuleError("the path is empty".into()));
    }
    if path.starts_with('/') {
        return Err(PathRuleError(format!("{path:?} is absolute")));
    }
    if path.contains('\\') {
        return Err(PathRuleError(format!("{path:?} contains a backslash")));
    }
    if path.contains('\0') {
        return Err(PathRuleError(format!("{path:?} contains a NUL")));
    }
    for component in path.split('/') {
        match component {
            "" => return Err(PathRuleError(format!("{path:?} has an empty component"))),
            "." | ".." => return Err(PathRuleError(format!("{path:?} has a {component:?} component"))),
            _ => {}
        }
    }
    let first = path.split('/').next().unwrap_or("");
    if !EVIDENCE_DIRS.contains(&first) || !path.contains('/') {
        return Err(PathRuleError(format!(
            "{path:?} is not inside an evidence directory ({})",
            EVIDENCE_DIRS.join(", ")
        )));
    }
    Ok(())
}

/// Whether any existing component of `root/path` is a symbolic link.
/// Components that do not exist are not links (a missing file is reported by
/// the artifact check, not here).
pub fn link_on_path(root: &Path, path: &str) -> Option<PathBuf> {
    let mut at = root.to_path_buf();
    for component in path.split('/') {
        at.push(component);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => return Some(at),
            Ok(_) => {}
            Err(_) => return None,
        }
    }
    None
}

/// Joins a checked manifest path to the bundle root.
pub fn resolve(root: &Path, path: &str) -> PathBuf {
    path.split('/').fold(root.to_path_buf(), |at, c| at.join(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_relative_evidence_paths_only() {
        assert!(check_form("checkpoint/_jobs/1/COMPLETED-3").is_ok());
        for bad in [
            "",
            "/etc/passwd",
            "checkpoint/../x",
            "checkpoint/./x",
            "checkpoint//x",
            "checkpoint\\x",
            "checkpoint/x\0",
            "other/x",
            "checkpoint",
            "checkpoint/",
        ] {
            assert!(check_form(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_link_anywhere_on_the_path_is_found() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("capture/real")).unwrap();
        std::fs::write(dir.path().join("capture/real/f"), b"x").unwrap();
        std::os::unix::fs::symlink(dir.path().join("capture/real"), dir.path().join("capture/link")).unwrap();
        assert!(link_on_path(dir.path(), "capture/real/f").is_none());
        assert!(link_on_path(dir.path(), "capture/link/f").is_some());
        assert!(link_on_path(dir.path(), "capture/missing/f").is_none());
    }
}
