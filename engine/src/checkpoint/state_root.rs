//! Where a run keeps its participants' state and which backend writes it:
//! `clink run --state file:///abs/path | rocksdb:///abs/path`, or (no flag)
//! files under the checkpoint directory.
//!
//! This module owns the flag's grammar and the refusals (a relative path,
//! another scheme, a root that is not a directory) and the name a marker
//! records for a root. It never creates or reads state.

use std::fmt;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Which backend writes a participant's checkpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendKind {
    /// `checkpoint-<id>.snap` and its sidecar.
    #[default]
    File,
    /// A RocksDB checkpoint directory `<participant>.cp-<id>/` and its sidecar.
    Rocksdb,
}

impl BackendKind {
    pub fn scheme(self) -> &'static str {
        match self {
            BackendKind::File => "file",
            BackendKind::Rocksdb => "rocksdb",
        }
    }
}

/// A run's state root: its backend and, when `--state` named one, the
/// absolute directory its `_state/<job>/` lives in (else the checkpoint
/// directory's).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateRoot {
    pub backend: BackendKind,
    /// The directory named by `--state`; absent for the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<PathBuf>,
}

impl StateRoot {
    pub fn kind(&self) -> BackendKind {
        self.backend
    }

    /// Whether this is the default: files under the checkpoint directory.
    pub fn is_default(&self) -> bool {
        *self == StateRoot::default()
    }

    /// The directory `_state/` lives in: the named root, else `checkpoint_dir`.
    pub fn base<'a>(&'a self, checkpoint_dir: &'a Path) -> &'a Path {
        self.root.as_deref().unwrap_or(checkpoint_dir)
    }
}

impl fmt::Display for StateRoot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.root {
            Some(root) => write!(f, "{}://{}", self.kind().scheme(), root.display()),
            None => write!(f, "{} state under the checkpoint directory", self.kind().scheme()),
        }
    }
}

/// Parses `--state`: `file:///abs/path` or `rocksdb:///abs/path`. The path
/// must be absolute, plain (no `.` or `..`), and a directory if it exists.
/// Every refusal names the flag and what was expected.
pub fn parse_state_flag(text: &str) -> Result<StateRoot, String> {
    let expected = "expected file:///ABSOLUTE/PATH or rocksdb:///ABSOLUTE/PATH";
    let Some((scheme, rest)) = text.split_once("://") else {
        return Err(format!("--state {text:?}: no scheme; {expected}"));
    };
    let kind = match scheme {
        "file" => BackendKind::File,
        "rocksdb" => BackendKind::Rocksdb,
        other => return Err(format!("--state {text:?}: the scheme {other:?} is not supported; {expected}")),
    };
    let path = Path::new(rest);
    if !path.is_absolute() {
        return Err(format!("--state {text:?}: the path {rest:?} is relative; {expected}"));
    }
    if path.components().any(|c| matches!(c, Component::ParentDir | Component::CurDir)) || rest.contains('\0') {
        return Err(format!("--state {text:?}: the path has a `.` or `..` component; {expected}"));
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) if !meta.is_dir() => {
            return Err(format!("--state {text:?}: {rest} exists and is not a directory; {expected}, a directory"))
        }
        _ => {}
    }
    Ok(StateRoot { backend: kind, root: Some(path.to_path_buf()) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_schemes_parse_to_absolute_roots() {
        let file = parse_state_flag("file:///tmp/x").unwrap();
        assert_eq!((file.kind(), file.root.as_deref()), (BackendKind::File, Some(Path::new("/tmp/x"))));
        let rocks = parse_state_flag("rocksdb:///var/state").unwrap();
        assert_eq!(rocks.kind(), BackendKind::Rocksdb);
        assert_eq!(rocks.to_string(), "rocksdb:///var/state");
        assert!(StateRoot::default().is_default());
    }

    #[test]
    fn bad_values_are_refused_naming_the_flag() {
        let dir = std::env::temp_dir().join(format!("clink-state-root-{}", std::process::id()));
        std::fs::write(&dir, b"x").unwrap();
        let a_file = format!("rocksdb://{}", dir.display());
        for bad in ["rocksdb://rel/path", "s3:///bucket", "/abs/no/scheme", "file:///a/../b", a_file.as_str()] {
            let err = parse_state_flag(bad).unwrap_err();
            assert!(err.starts_with("--state") && err.contains("expected"), "{bad}: {err}");
        }
        std::fs::remove_file(&dir).unwrap();
    }
}
