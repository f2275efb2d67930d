//! `fetch`: a manifest and every object it names, into a new directory.
//!
//! Everything is written into a temporary directory beside DEST, each object
//! hashed and counted as it is written, and renamed to DEST only when every
//! file has its manifest's size and digest and is durable (every file and
//! directory fsynced). The temporary directory holds a marker
//! ([`clink_basics::files::INCOMPLETE_FETCH`]) from its first write until
//! just before the rename, so what a fetch killed midway leaves is never
//! read as a capture or a bundle (their readers refuse a directory under
//! it). Any refusal (a missing, short,
//! long or altered object, a manifest that is not this format or that names
//! a hostile path, a bound exceeded) removes the temporary directory, so
//! nothing is left at DEST or beside it. DEST must not exist.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use clink_basics::digest::{hex, is_sha256_hex, sha256_hex};
use sha2::{Digest, Sha256};

use crate::backend::{manifest_name, object_name, Presence, Store};
use crate::manifest::{parse_manifest, FileEntry, Manifest, MAX_MANIFEST_BYTES};
use crate::{Bounds, StoreError};

/// What a fetch wrote.
#[derive(Debug, Clone)]
pub struct FetchReport {
    pub manifest: Manifest,
    pub dest: PathBuf,
    pub files: u64,
    pub bytes: u64,
}

/// Reads and checks the manifest a reference names (bounded, digest checked).
pub fn read_manifest(store: &Store, reference: &str) -> Result<Manifest, StoreError> {
    if !is_sha256_hex(reference) {
        return Err(StoreError::Refused(format!("reference {reference:?} is not a SHA-256 in lowercase hex")));
    }
    let name = manifest_name(reference);
    match store.presence(&name)? {
        Presence::Absent => return Err(StoreError::Refused(format!("no manifest {reference} in the store ({name})"))),
        Presence::Present { size } if size > MAX_MANIFEST_BYTES => {
            return Err(StoreError::Refused(format!(
                "manifest {name}: {size} bytes, over the {MAX_MANIFEST_BYTES}-byte bound"
            )))
        }
        Presence::Present { .. } => {}
    }
    let mut bytes = Vec::new();
    store
        .get(&name, |chunk| {
            if (bytes.len() + chunk.len()) as u64 > MAX_MANIFEST_BYTES {
                return Err(StoreError::Refused(format!("manifest {name}: over the {MAX_MANIFEST_BYTES}-byte bound")));
            }
            bytes.extend_from_slice(chunk);
            Ok(())
        })
        .map_err(|e| missing_as_refused(e, &name, "the manifest"))?;
    let digest = sha256_hex(&bytes);
    if digest != reference {
        return Err(StoreError::Refused(format!("manifest {name}: its bytes have SHA-256 {digest}, not {reference}")));
    }
    parse_manifest(&bytes).map_err(|e| StoreError::Refused(format!("{name}: {e}")))
}

fn missing_as_refused(e: StoreError, name: &str, what: &str) -> StoreError {
    match e {
        StoreError::Missing(_) => StoreError::Refused(format!("object {name} ({what}) is missing from the store")),
        e => e,
    }
}

pub fn fetch(store: &Store, reference: &str, dest: &Path, bounds: Bounds) -> Result<FetchReport, StoreError> {
    let parent = check_dest(dest)?;
    let manifest = read_manifest(store, reference)?;
    let files = manifest.files.len() as u64;
    if files > bounds.max_files {
        return Err(StoreError::Refused(format!(
            "the manifest names {files} files, over --max-files {}",
            bounds.max_files
        )));
    }
    let bytes = manifest.total_bytes();
    if bytes > bounds.max_bytes {
        return Err(StoreError::Refused(format!(
            "the manifest names {bytes} bytes, over --max-bytes {}",
            bounds.max_bytes
        )));
    }
    let tmp = tempfile::Builder::new()
        .prefix(".clink-fetch-")
        .tempdir_in(&parent)
        .map_err(|e| StoreError::Refused(format!("{}: cannot make a temporary directory: {e}", parent.display())))?;
    let marker = tmp.path().join(clink_basics::files::INCOMPLETE_FETCH);
    let marked = File::create(&marker).and_then(|f| f.sync_all()).and_then(|()| sync_dir(tmp.path()));
    marked.map_err(|e| StoreError::Refused(format!("{}: {e}", marker.display())))?;
    let pause = test_pause_ms()?;
    for entry in &manifest.files {
        write_object(store, entry, tmp.path())?;
        if let Some(ms) = pause {
            std::thread::sleep(std::time::Duration::from_millis(ms));
        }
    }
    sync_tree(tmp.path()).map_err(|e| StoreError::Refused(format!("{}: {e}", tmp.path().display())))?;
    fs::remove_file(&marker)
        .and_then(|()| sync_dir(tmp.path()))
        .map_err(|e| StoreError::Refused(format!("{}: {e}", marker.display())))?;
    publish(tmp, dest)?;
    sync_dir(&parent).map_err(|e| StoreError::Refused(format!("{}: {e}", parent.display())))?;
    Ok(FetchReport { manifest, dest: dest.to_path_buf(), files, bytes })
}

/// Test-only: sleep this many milliseconds after each object, so a test can
/// kill a fetch midway. Only a build with the `defects` feature reads it; a
/// default build refuses it.
pub const PAUSE_ENV: &str = "CLINK_TEST_FETCH_PAUSE_MS";

fn test_pause_ms() -> Result<Option<u64>, StoreError> {
    match (cfg!(feature = "defects"), std::env::var(PAUSE_ENV).ok()) {
        (_, None) => Ok(None),
        (true, Some(v)) => {
            v.parse().map(Some).map_err(|_| StoreError::Refused(format!("{PAUSE_ENV}={v:?} is not milliseconds")))
        }
        (false, Some(_)) => Err(StoreError::Refused(format!(
            "{PAUSE_ENV} is set, but this build has no test switches (built without the `defects` feature)"
        ))),
    }
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Every directory under `root` (files are synced as they are written).
fn sync_tree(root: &Path) -> std::io::Result<()> {
    for entry in fs::read_dir(root)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            sync_tree(&entry.path())?;
        }
    }
    sync_dir(root)
}

/// DEST must not exist; its parent must be a directory. Returns the parent.
fn check_dest(dest: &Path) -> Result<PathBuf, StoreError> {
    if fs::symlink_metadata(dest).is_ok() {
        return Err(StoreError::Refused(format!("{} already exists; fetch writes a new directory", dest.display())));
    }
    let parent = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    match fs::metadata(&parent) {
        Ok(m) if m.is_dir() => Ok(parent),
        _ => Err(StoreError::Refused(format!("{}: the parent of DEST is not a directory", parent.display()))),
    }
}

/// Streams one object into its file, counting and hashing as it writes.
fn write_object(store: &Store, entry: &FileEntry, root: &Path) -> Result<(), StoreError> {
    let name = object_name(&entry.sha256);
    let path = root.join(&entry.path);
    let io = |e: std::io::Error| StoreError::Refused(format!("{}: {e}", entry.path));
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(io)?;
    }
    let mut out = File::options().write(true).create_new(true).open(&path).map_err(io)?;
    let mut hasher = Sha256::new();
    let mut written = 0u64;
    store
        .get(&name, |chunk| {
            written += chunk.len() as u64;
            if written > entry.size {
                return Err(StoreError::Refused(format!(
                    "object {name} (for {}) is longer than the manifest's {} bytes",
                    entry.path, entry.size
                )));
            }
            hasher.update(chunk);
            out.write_all(chunk).map_err(io)
        })
        .map_err(|e| missing_as_refused(e, &name, &format!("for {}", entry.path)))?;
    if written != entry.size {
        return Err(StoreError::Refused(format!(
            "object {name} (for {}) is truncated: {written} of the manifest's {} bytes",
            entry.path, entry.size
        )));
    }
    let digest = hex(&hasher.finalize());
    if digest != entry.sha256 {
        return Err(StoreError::Refused(format!(
            "object {name} (for {}) is altered: its bytes have SHA-256 {digest}",
            entry.path
        )));
    }
    out.sync_all().map_err(io)
}

/// Renames the finished directory to DEST, never over anything there.
fn publish(tmp: tempfile::TempDir, dest: &Path) -> Result<(), StoreError> {
    if fs::symlink_metadata(dest).is_ok() {
        return Err(StoreError::Refused(format!("{} appeared while fetching; nothing was written", dest.display())));
    }
    let kept = tmp.keep();
    rename_no_replace(&kept, dest).map_err(|e| {
        let _ = fs::remove_dir_all(&kept);
        StoreError::Refused(format!("{}: {e}", dest.display()))
    })
}

/// A rename that fails when the target exists (a plain rename would replace
/// an empty directory made there meanwhile).
#[cfg(target_os = "linux")]
fn rename_no_replace(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| {
        std::ffi::CString::new(p.as_os_str().as_bytes())
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "a NUL in the path"))
    };
    let (from, to) = (c(from)?, c(to)?);
    // SAFETY: both are valid NUL-terminated paths that outlive the call.
    let rc =
        unsafe { libc::renameat2(libc::AT_FDCWD, from.as_ptr(), libc::AT_FDCWD, to.as_ptr(), libc::RENAME_NOREPLACE) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
fn rename_no_replace(from: &Path, to: &Path) -> std::io::Result<()> {
    fs::rename(from, to)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_over_the_bound_is_refused_before_it_is_read() {
        let d = tempfile::tempdir().unwrap();
        let reference = "a".repeat(64);
        let dir = d.path().join("manifests/sha256");
        fs::create_dir_all(&dir).unwrap();
        // Sparse: the bound is checked on the size, so nothing is read.
        File::create(dir.join(&reference)).unwrap().set_len(MAX_MANIFEST_BYTES + 1).unwrap();
        let store = Store::open(d.path().to_str().unwrap(), false).unwrap();
        let err = read_manifest(&store, &reference).unwrap_err().to_string();
        assert!(err.contains("over the 67108864-byte bound"), "{err}");
        let dest = d.path().join("dest");
        assert!(fetch(&store, &reference, &dest, Bounds::default()).is_err());
        assert!(!dest.exists());
    }
}
