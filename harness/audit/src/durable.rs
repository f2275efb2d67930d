//! Durable replacement of the state directory's files: the ledger, the
//! reports, the held reference states, an audit's evidence files.
//!
//! Every such file is written whole to a temporary file, which is synced,
//! renamed over the old one, and the directories are synced: a runner killed
//! at any instant leaves either the previous file or the new one, never a
//! torn one, and a directory others list (`reports/`) never holds a
//! temporary file, since those are written in a directory of their own
//! ([`TMP_DIR`]) when the caller names one.
//!
//! Test-only: a debug or `defects` build pauses at the n-th write point of
//! its process when [`PAUSE_AT_ENV`] is set (after the temporary file is
//! synced, after the rename, after the directory sync), and says so in the
//! file [`PAUSE_FILE_ENV`] names, so a test can SIGKILL the real process
//! between any two writes. A release build without `defects` refuses the
//! variable instead of ignoring it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use thiserror::Error;

/// The directory of the state directory where temporaries of files that
/// other programs list are written (emptied when a runner opens).
pub const TMP_DIR: &str = "tmp";
/// Test-only: pause for good at this write point (counted from 1 in the process).
pub const PAUSE_AT_ENV: &str = "CLINK_TEST_AUDIT_PAUSE_AT";
/// Test-only: where a paused process appends `<n> <phase> <path>`.
pub const PAUSE_FILE_ENV: &str = "CLINK_TEST_AUDIT_PAUSE_FILE";

#[derive(Debug, Error)]
pub enum DurableError {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{PAUSE_AT_ENV} is set, but this build has no test switches (a release build without `defects`)")]
    NoTestSwitches,
    #[error("{PAUSE_AT_ENV}={0:?} is not a write point's number")]
    BadPausePoint(String),
}

/// Writes `bytes` to `path` through a synced temporary file beside it (a
/// name starting with `.`) and a rename, then syncs the directory.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), DurableError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    write_atomically_via(dir, path, bytes)
}

/// As [`write_atomically`], the temporary file written in `tmp_dir` (on the
/// same file system), so `path`'s directory only ever holds whole files.
pub fn write_atomically_via(tmp_dir: &Path, path: &Path, bytes: &[u8]) -> Result<(), DurableError> {
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| DurableError::Io { path: p, source }
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = tmp_dir.join(format!(".{name}.tmp-{}", std::process::id()));
    std::fs::create_dir_all(tmp_dir).map_err(io(tmp_dir))?;
    let mut file = std::fs::File::create(&tmp).map_err(io(&tmp))?;
    file.write_all(bytes).and_then(|_| file.sync_all()).map_err(io(&tmp))?;
    drop(file);
    point("temp-synced", path)?;
    std::fs::rename(&tmp, path).map_err(io(path))?;
    point("renamed", path)?;
    sync_dir(dir)?;
    if tmp_dir != dir {
        sync_dir(tmp_dir)?;
    }
    point("written", path)
}

/// Syncs a directory, so the entries renamed or removed in it are durable.
pub fn sync_dir(dir: &Path) -> Result<(), DurableError> {
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|source| DurableError::Io { path: dir.into(), source })
}

/// Removes whatever a killed writer left in `tmp_dir` (only the runner,
/// holding the lock, writes there).
pub fn clear_temporaries(tmp_dir: &Path) -> Result<(), DurableError> {
    let entries = match std::fs::read_dir(tmp_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => return Err(DurableError::Io { path: tmp_dir.into(), source }),
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_file() {
            std::fs::remove_file(&path).map_err(|source| DurableError::Io { path: path.clone(), source })?;
        }
    }
    Ok(())
}

/// A write point: the test hook of the module's documentation.
fn point(phase: &str, path: &Path) -> Result<(), DurableError> {
    static SEEN: AtomicU64 = AtomicU64::new(0);
    let Some(at) = std::env::var_os(PAUSE_AT_ENV) else { return Ok(()) };
    if !cfg!(any(debug_assertions, feature = "defects")) {
        return Err(DurableError::NoTestSwitches);
    }
    let text = at.to_string_lossy();
    let at: u64 = text.parse().map_err(|_| DurableError::BadPausePoint(text.to_string()))?;
    let n = SEEN.fetch_add(1, Ordering::SeqCst) + 1;
    if n != at {
        return Ok(());
    }
    if let Some(file) = std::env::var_os(PAUSE_FILE_ENV) {
        let line = format!("{n} {phase} {}\n", path.display());
        let said = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&file)
            .and_then(|mut f| f.write_all(line.as_bytes()).and_then(|_| f.sync_all()));
        if let Err(source) = said {
            return Err(DurableError::Io { path: file.into(), source });
        }
    }
    loop {
        std::thread::sleep(std::time::Duration::from_secs(3600));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_replaced_whole_and_the_temporary_is_elsewhere() {
        let dir = tempfile::tempdir().unwrap();
        let reports = dir.path().join("reports");
        std::fs::create_dir(&reports).unwrap();
        let path = reports.join("a.json");
        write_atomically_via(&dir.path().join(TMP_DIR), &path, b"one").unwrap();
        write_atomically_via(&dir.path().join(TMP_DIR), &path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        assert_eq!(std::fs::read_dir(&reports).unwrap().count(), 1);
        std::fs::write(dir.path().join(TMP_DIR).join(".left.tmp-1"), b"x").unwrap();
        clear_temporaries(&dir.path().join(TMP_DIR)).unwrap();
        assert_eq!(std::fs::read_dir(dir.path().join(TMP_DIR)).unwrap().count(), 0);
    }
}
