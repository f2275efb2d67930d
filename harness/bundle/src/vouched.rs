//! Reading what the manifest vouched for.
//!
//! The integrity check (`bundle.artifacts`) hashes every artifact once; the
//! checks after it read the same files again to decide on them. A file
//! replaced between the two would be decided on unvouched. So every artifact
//! a check, a scope or a reconciliation decides on is read through here: by
//! its exact bundle path (never by a short name), with its bytes hashed as
//! they are read and compared with the manifest's size and SHA-256. A file
//! that is unlisted, not a regular file, or not what the manifest says is
//! refused, never returned.
//!
//! This module reads; it never judges what it read, and never follows a link.

use std::io;
use std::path::{Path, PathBuf};

use clink_basics::digest::sha256_hex;
use thiserror::Error;

use crate::manifest::Bundle;
use crate::paths::{check_form, link_on_path, resolve};

/// Why an artifact's bytes could not be handed to a check.
#[derive(Debug, Error)]
pub enum VouchError {
    /// The manifest does not list the path: nothing vouches for it.
    #[error("{path}: not listed in the manifest, so nothing vouches for its bytes")]
    Unlisted { path: String },
    /// The path is not a plain path inside the bundle.
    #[error("{path}: not a plain path inside the bundle: {reason}")]
    NotInBundle { path: String, reason: String },
    /// The bytes on disk are not the ones the manifest lists.
    #[error("{path}: changed since the manifest vouched for it: {reason}")]
    Changed { path: String, reason: String },
    /// The artifact is larger than the reader of its kind accepts.
    #[error("{path}: {size} bytes, over the limit of {limit} for what reads it")]
    TooLarge { path: String, size: u64, limit: u64 },
    #[error("{path}: {source}")]
    Io { path: String, source: io::Error },
}

impl VouchError {
    /// The bundle path the error is about.
    pub fn path(&self) -> &str {
        match self {
            VouchError::Unlisted { path }
            | VouchError::NotInBundle { path, .. }
            | VouchError::Changed { path, .. }
            | VouchError::TooLarge { path, .. }
            | VouchError::Io { path, .. } => path,
        }
    }
}

impl Bundle {
    /// The bytes of the artifact at bundle path `path` (`capture/op-3/...`),
    /// exactly as the manifest lists them, or why not. `limit` is the most the
    /// caller's reader accepts; an artifact listed above it is refused unread.
    pub fn read_vouched(&self, path: &str, limit: u64) -> Result<Vec<u8>, VouchError> {
        check_form(path).map_err(|e| VouchError::NotInBundle { path: path.to_string(), reason: e.0 })?;
        let artifact = self.artifact(path).ok_or_else(|| VouchError::Unlisted { path: path.to_string() })?;
        if artifact.size > limit {
            return Err(VouchError::TooLarge { path: path.to_string(), size: artifact.size, limit });
        }
        if let Some(link) = link_on_path(&self.root, path) {
            return Err(VouchError::NotInBundle {
                path: path.to_string(),
                reason: format!("{} is a symbolic link", link.display()),
            });
        }
        let file = resolve(&self.root, path);
        // One past the listed size, so a file that grew is seen to have grown.
        let bytes = clink_basics::files::read_bounded(&file, artifact.size.saturating_add(1)).map_err(|source| {
            if source.kind() == io::ErrorKind::InvalidData {
                VouchError::Changed { path: path.to_string(), reason: source.to_string() }
            } else {
                VouchError::Io { path: path.to_string(), source }
            }
        })?;
        if bytes.len() as u64 != artifact.size {
            return Err(VouchError::Changed {
                path: path.to_string(),
                reason: format!("{} bytes, the manifest lists {}", bytes.len(), artifact.size),
            });
        }
        let digest = sha256_hex(&bytes);
        if digest != artifact.sha256 {
            return Err(VouchError::Changed {
                path: path.to_string(),
                reason: format!("SHA-256 {digest}, the manifest lists {}", artifact.sha256),
            });
        }
        Ok(bytes)
    }

    /// [`Bundle::read_vouched`] for a file named by its place on disk, as the
    /// engine's layout functions name them (`<root>/checkpoint/_jobs/...`).
    /// A file outside the bundle's root is refused.
    pub fn read_vouched_file(&self, file: &Path, limit: u64) -> Result<Vec<u8>, VouchError> {
        let path = self.bundle_path(file)?;
        self.read_vouched(&path, limit)
    }

    /// The bundle path (`/`-separated, relative to the root) of a file under
    /// the bundle's root.
    pub fn bundle_path(&self, file: &Path) -> Result<String, VouchError> {
        let outside = || VouchError::NotInBundle {
            path: file.display().to_string(),
            reason: format!("not under the bundle's root {}", self.root.display()),
        };
        let relative: PathBuf = file.strip_prefix(&self.root).map_err(|_| outside())?.to_path_buf();
        let mut parts = Vec::new();
        for component in relative.components() {
            match component {
                std::path::Component::Normal(name) => parts.push(name.to_str().ok_or_else(outside)?.to_string()),
                _ => return Err(outside()),
            }
        }
        Ok(parts.join("/"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::{read_bundle, Artifact};
    use std::fs;

    /// A bundle of one listed artifact, built by hand: the manifest reader is
    /// not what these tests are about, so the manifest is replaced after it.
    fn bundle_with(content: &[u8]) -> (tempfile::TempDir, Bundle) {
        let dir = tempfile::tempdir().unwrap();
        let good = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/bundles/good");
        let mut bundle = read_bundle(&good).unwrap();
        fs::create_dir_all(dir.path().join("traces")).unwrap();
        fs::write(dir.path().join("traces/w.ndjson"), content).unwrap();
        bundle.root = dir.path().to_path_buf();
        bundle.manifest.artifacts = vec![Artifact {
            path: "traces/w.ndjson".into(),
            role: "trace".into(),
            size: content.len() as u64,
            sha256: sha256_hex(content),
        }];
        (dir, bundle)
    }

    #[test]
    fn the_listed_bytes_are_returned() {
        let (_dir, bundle) = bundle_with(b"hello\n");
        assert_eq!(bundle.read_vouched("traces/w.ndjson", 1 << 20).unwrap(), b"hello\n");
        let file = bundle.root.join("traces/w.ndjson");
        assert_eq!(bundle.read_vouched_file(&file, 1 << 20).unwrap(), b"hello\n");
    }

    #[test]
    fn a_file_changed_after_listing_is_refused() {
        let (dir, bundle) = bundle_with(b"hello\n");
        fs::write(dir.path().join("traces/w.ndjson"), b"jello\n").unwrap();
        let e = bundle.read_vouched("traces/w.ndjson", 1 << 20).unwrap_err();
        assert!(matches!(e, VouchError::Changed { .. }), "{e}");
        fs::write(dir.path().join("traces/w.ndjson"), b"hello\nmore\n").unwrap();
        let e = bundle.read_vouched("traces/w.ndjson", 1 << 20).unwrap_err();
        assert!(matches!(e, VouchError::Changed { .. }), "{e}");
        fs::write(dir.path().join("traces/w.ndjson"), b"hell").unwrap();
        assert!(matches!(bundle.read_vouched("traces/w.ndjson", 1 << 20), Err(VouchError::Changed { .. })));
    }

    #[test]
    fn unlisted_outside_oversize_and_linked_paths_are_refused() {
        let (dir, bundle) = bundle_with(b"hello\n");
        fs::write(dir.path().join("traces/other.ndjson"), b"x").unwrap();
        assert!(matches!(bundle.read_vouched("traces/other.ndjson", 100), Err(VouchError::Unlisted { .. })));
        assert!(matches!(bundle.read_vouched("traces/../traces/w.ndjson", 100), Err(VouchError::NotInBundle { .. })));
        assert!(matches!(bundle.read_vouched("traces/w.ndjson", 3), Err(VouchError::TooLarge { .. })));
        assert!(matches!(bundle.read_vouched_file(Path::new("/etc/passwd"), 100), Err(VouchError::NotInBundle { .. })));
        fs::rename(dir.path().join("traces"), dir.path().join("real")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("real"), dir.path().join("traces")).unwrap();
        assert!(matches!(bundle.read_vouched("traces/w.ndjson", 100), Err(VouchError::NotInBundle { .. })));
    }
}
