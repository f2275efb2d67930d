//! `push`: every file of a source into the store as an object named by its
//! SHA-256, then the manifest, last, so a push cut short at any point leaves
//! no reference (only objects nothing names yet).
//!
//! The bounds are checked on the listing, before anything is written. A file
//! is hashed, then sent and hashed again on the way: if it changed in
//! between, the upload is aborted and the push refused, so an object never
//! holds bytes other than its name says. An object already in the store is
//! not sent again only when its bytes, read back, hash to its name; one that
//! does not is sent again. A source that vouches for its own files (a
//! bundle's manifest) is held to that: a file of another size or digest, or
//! one it does not list, refuses the push, naming the file, before any
//! manifest is written.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::Read;

use clink_basics::digest::{hex, sha256_file, sha256_hex};
use sha2::{Digest, Sha256};

use crate::backend::{manifest_name, object_name, Store, PART_BYTES};
use crate::manifest::{EpochEntry, FileEntry, Manifest, SourceKind};
use crate::source::{list_trees, SourceFile, Tree};
use crate::{Bounds, StoreError};

/// Test-only: sleep this many milliseconds after each object, so a test can
/// kill a push midway. Only a build with the `defects` feature reads it; a
/// default build refuses it.
pub const PAUSE_ENV: &str = "CLINK_TEST_PUSH_PAUSE_MS";

/// What to push, and what the manifest says of it.
#[derive(Debug, Clone)]
pub struct PushRequest {
    pub source: SourceKind,
    pub job: u64,
    pub operators: Vec<u64>,
    pub epochs: Vec<EpochEntry>,
    pub trees: Vec<Tree>,
    pub bounds: Bounds,
    /// What the source vouches for, by path: each file's size and SHA-256
    /// (an incident bundle's manifest). `None`: the source vouches for
    /// nothing of its own (a capture directory).
    pub vouched: Option<std::collections::BTreeMap<String, (u64, String)>>,
}

/// What a push did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushReport {
    /// The manifest's SHA-256.
    pub reference: String,
    pub files: u64,
    pub bytes: u64,
    /// Distinct objects this push sent.
    pub objects_written: u64,
    pub bytes_written: u64,
    /// Distinct objects the store already held.
    pub objects_present: u64,
    /// Whether the manifest was new (false: the same push was made before).
    pub manifest_written: bool,
}

fn test_pause_ms() -> Result<Option<u64>, StoreError> {
    let set = std::env::var(PAUSE_ENV).ok();
    match (cfg!(feature = "defects"), set) {
        (_, None) => Ok(None),
        (true, Some(v)) => {
            v.parse().map(Some).map_err(|_| StoreError::Refused(format!("{PAUSE_ENV}={v:?} is not milliseconds")))
        }
        (false, Some(_)) => Err(StoreError::Refused(format!(
            "{PAUSE_ENV} is set, but this build has no test switches (built without the `defects` feature)"
        ))),
    }
}

pub fn push(store: &Store, request: &PushRequest) -> Result<PushReport, StoreError> {
    let pause = test_pause_ms()?;
    let bounds = request.bounds;
    let files = list_trees(&request.trees, bounds.max_files)?;
    if files.is_empty() {
        return Err(StoreError::Refused("nothing to push: the source holds no file".into()));
    }
    let total = files.iter().map(|f| f.size).fold(0u64, u64::saturating_add);
    if total > bounds.max_bytes {
        return Err(StoreError::Refused(format!(
            "{total} bytes to push, over --max-bytes {} ({} files)",
            bounds.max_bytes,
            files.len()
        )));
    }
    if let Some(vouched) = &request.vouched {
        let listed: BTreeSet<&str> = files.iter().map(|f| f.path.as_str()).collect();
        if let Some(gone) = vouched.keys().find(|p| !listed.contains(p.as_str())) {
            return Err(StoreError::Refused(format!(
                "{gone}: the bundle's manifest vouches for it and it is not there: the bundle is damaged, nothing is pushed"
            )));
        }
    }
    let mut report = PushReport {
        reference: String::new(),
        files: files.len() as u64,
        bytes: total,
        objects_written: 0,
        bytes_written: 0,
        objects_present: 0,
        manifest_written: false,
    };
    let mut entries = Vec::with_capacity(files.len());
    let mut done = BTreeSet::new();
    for file in &files {
        let sha256 = digest_of(file)?;
        if let Some(vouched) = &request.vouched {
            check_vouched(vouched, file, &sha256)?;
        }
        if done.insert(sha256.clone()) {
            let name = object_name(&sha256);
            if store.holds(&name, file.size, &sha256)? {
                report.objects_present += 1;
            } else {
                send(store, &name, file, &sha256)?;
                report.objects_written += 1;
                report.bytes_written += file.size;
                if let Some(ms) = pause {
                    std::thread::sleep(std::time::Duration::from_millis(ms));
                }
            }
        }
        entries.push(FileEntry { path: file.path.clone(), size: file.size, sha256 });
    }
    let manifest = Manifest::new(request.source, request.job, &request.operators, request.epochs.clone(), entries);
    let bytes = manifest.encode();
    report.reference = sha256_hex(&bytes);
    let name = manifest_name(&report.reference);
    if !store.holds(&name, bytes.len() as u64, &report.reference)? {
        store.put(&name, bytes)?;
        report.manifest_written = true;
    }
    Ok(report)
}

/// A file of a source that vouches for its files is the file it vouches for:
/// listed, of that size and digest (the bytes just hashed, which are the
/// bytes sent). The source's own manifest is the one file it cannot list.
fn check_vouched(
    vouched: &std::collections::BTreeMap<String, (u64, String)>,
    file: &SourceFile,
    sha256: &str,
) -> Result<(), StoreError> {
    if file.path == "manifest.json" {
        return Ok(());
    }
    match vouched.get(&file.path) {
        None => Err(StoreError::Refused(format!(
            "{}: the bundle's manifest does not list it; only what it vouches for is pushed",
            file.path
        ))),
        Some((size, digest)) if *size != file.size || digest != sha256 => Err(StoreError::Refused(format!(
            "{}: {} bytes with SHA-256 {sha256}, the bundle's manifest vouches for {size} bytes with {digest}: the bundle is damaged, nothing is pushed",
            file.path, file.size
        ))),
        Some(_) => Ok(()),
    }
}

fn changed(file: &SourceFile) -> StoreError {
    StoreError::Refused(format!("{}: changed while it was being pushed", file.disk.display()))
}

fn digest_of(file: &SourceFile) -> Result<String, StoreError> {
    let d =
        sha256_file(&file.disk, file.size).map_err(|e| StoreError::Refused(format!("{}: {e}", file.disk.display())))?;
    if d.bytes != file.size {
        return Err(changed(file));
    }
    Ok(d.sha256)
}

/// What a file yielded so far on its way to the store.
struct Sending {
    reader: std::io::Take<File>,
    hasher: Sha256,
    sent: u64,
}

impl Sending {
    fn part(&mut self, file: &SourceFile) -> Result<Option<Vec<u8>>, StoreError> {
        let mut part = Vec::with_capacity(PART_BYTES.min(file.size as usize + 1));
        (&mut self.reader)
            .take(PART_BYTES as u64)
            .read_to_end(&mut part)
            .map_err(|e| StoreError::Refused(format!("{}: {e}", file.disk.display())))?;
        if part.is_empty() {
            return Ok(None);
        }
        self.sent += part.len() as u64;
        self.hasher.update(&part);
        Ok(Some(part))
    }

    /// Whether what was sent is what the object is named by.
    fn check(self, file: &SourceFile, sha256: &str) -> Result<(), StoreError> {
        if self.sent != file.size || hex(&self.hasher.finalize()) != sha256 {
            return Err(changed(file));
        }
        Ok(())
    }
}

/// Sends one file, hashing it again on the way; a file that no longer has
/// the digest it was named by is never published.
fn send(store: &Store, name: &str, file: &SourceFile, sha256: &str) -> Result<(), StoreError> {
    let opened = File::open(&file.disk).map_err(|e| StoreError::Refused(format!("{}: {e}", file.disk.display())))?;
    let mut sending = Sending { reader: opened.take(file.size.saturating_add(1)), hasher: Sha256::new(), sent: 0 };
    if file.size <= PART_BYTES as u64 {
        let mut whole = sending.part(file)?.unwrap_or_default();
        if let Some(more) = sending.part(file)? {
            whole.extend_from_slice(&more);
        }
        sending.check(file, sha256)?;
        return store.put(name, whole);
    }
    let state = std::cell::RefCell::new(Some(sending));
    let next_part = || match state.borrow_mut().as_mut() {
        Some(s) => s.part(file),
        None => Ok(None),
    };
    let accept = || match state.borrow_mut().take() {
        Some(s) => s.check(file, sha256),
        None => Err(changed(file)),
    };
    store.put_parts(name, next_part, accept)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Presence;

    /// A file whose bytes no longer have the digest it is sent under is
    /// never published, in one request or in parts.
    #[test]
    fn a_file_that_changed_before_it_was_sent_is_never_published() {
        let d = tempfile::tempdir().unwrap();
        let store = Store::open(d.path().join("store").to_str().unwrap(), true).unwrap();
        for size in [10usize, PART_BYTES + 10] {
            let disk = d.path().join(format!("f{size}"));
            std::fs::write(&disk, vec![7u8; size]).unwrap();
            let file = SourceFile { disk, path: "x".into(), size: size as u64 };
            let right = digest_of(&file).unwrap();
            let wrong = "0".repeat(64);
            let err = send(&store, &object_name(&wrong), &file, &wrong).unwrap_err();
            assert!(err.to_string().contains("changed while it was being pushed"), "{err}");
            assert_eq!(store.presence(&object_name(&wrong)).unwrap(), Presence::Absent);
            send(&store, &object_name(&right), &file, &right).unwrap();
            assert_eq!(store.presence(&object_name(&right)).unwrap(), Presence::Present { size: size as u64 });
        }
    }
}
