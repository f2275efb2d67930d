//! Durable, atomic file writes: temporary name, fsync, rename, fsync of the
//! directory. A reader never sees a half-written file under the final name, and
//! once the call returns the file survives a crash.
//!
//! Temporary names start with `.` and contain `.tmp-`, so every scan that looks
//! for markers or snapshots by name passes over them.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `bytes` to `dir/name` durably and atomically.
pub fn write_durably(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    let tmp = dir.join(temp_name(name));
    let result = (|| {
        let mut file = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp, dir.join(name))?;
        sync_dir(dir)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Writes several files into `dir` durably and atomically each, with one
/// fsync of the directory for all of them: each file is written under a
/// temporary name and fsynced, then each is renamed into place in the order
/// given, then the directory is fsynced. A crash before that last fsync may
/// leave any prefix of the renames; a reader that needs them all (a snapshot
/// and its sidecar) finds the set incomplete, never a half-written file.
pub fn write_all_durably(dir: &Path, files: &[(&str, &[u8])]) -> io::Result<()> {
    let mut temps = Vec::with_capacity(files.len());
    let result = (|| {
        for (name, bytes) in files {
            let tmp = dir.join(temp_name(name));
            temps.push(tmp.clone());
            let mut file = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
            file.write_all(bytes)?;
            file.sync_all()?;
        }
        for ((name, _), tmp) in files.iter().zip(&temps) {
            fs::rename(tmp, dir.join(name))?;
        }
        sync_dir(dir)
    })();
    if result.is_err() {
        for tmp in &temps {
            let _ = fs::remove_file(tmp);
        }
    }
    result
}

/// A temporary name for `name`, unique within this process.
pub fn temp_name(name: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!(".{name}.tmp-{}-{n}", std::process::id())
}

/// Whether a file name is one [`temp_name`] made.
pub fn is_temp_name(name: &str) -> bool {
    name.starts_with('.') && name.contains(".tmp-")
}

/// Makes a directory's entries (creations, renames, removals) durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Creates a directory and its missing parents, and makes each new entry durable.
pub fn create_dir_durably(dir: &Path) -> io::Result<()> {
    let mut missing = Vec::new();
    let mut at = Some(dir);
    while let Some(p) = at {
        if p.as_os_str().is_empty() || p.exists() {
            break;
        }
        missing.push(p.to_path_buf());
        at = p.parent();
    }
    if missing.is_empty() {
        return Ok(());
    }
    fs::create_dir_all(dir)?;
    for created in &missing {
        match created.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => sync_dir(parent)?,
            _ => {}
        }
    }
    Ok(())
}

/// Renames `from` to `to` and makes both directories durable.
pub fn rename_durably(from: &Path, to: &Path) -> io::Result<()> {
    fs::rename(from, to)?;
    if let Some(dir) = to.parent() {
        sync_dir(dir)?;
    }
    if let Some(dir) = from.parent() {
        if Some(dir) != to.parent() {
            sync_dir(dir)?;
        }
    }
    Ok(())
}

/// Removes the temporary files a killed writer left in `dir`.
pub fn remove_stale_temps(dir: &Path) -> io::Result<usize> {
    remove_stale_temps_of(dir, "")
}

/// Removes the temporary files of names starting with `prefix` a killed
/// writer left in `dir`: a directory shared by several writers (sibling sink
/// subtasks) is cleaned by each of its own only. A file already gone (removed
/// by another) is done.
pub fn remove_stale_temps_of(dir: &Path, prefix: &str) -> io::Result<usize> {
    let mut removed = 0;
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        if let Some(name) = entry.file_name().to_str() {
            let ours = name.strip_prefix('.').is_some_and(|n| n.starts_with(prefix));
            if ours && is_temp_name(name) && entry.file_type()?.is_file() {
                match fs::remove_file(entry.path()) {
                    Ok(()) => removed += 1,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_replace_atomically_and_leave_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        write_durably(dir.path(), "a", b"one").unwrap();
        write_durably(dir.path(), "a", b"two").unwrap();
        assert_eq!(fs::read(dir.path().join("a")).unwrap(), b"two");
        let names: Vec<_> = fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec!["a"]);
    }

    #[test]
    fn several_files_are_written_whole_with_no_temp_left() {
        let dir = tempfile::tempdir().unwrap();
        write_all_durably(dir.path(), &[("a", b"one"), ("a.meta", b"two")]).unwrap();
        write_all_durably(dir.path(), &[("a", b"three")]).unwrap();
        assert_eq!(fs::read(dir.path().join("a")).unwrap(), b"three");
        assert_eq!(fs::read(dir.path().join("a.meta")).unwrap(), b"two");
        let mut names: Vec<_> = fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        names.sort();
        assert_eq!(names, vec!["a", "a.meta"]);
        // A directory that is gone: an error, and nothing is left behind.
        let gone = dir.path().join("gone");
        assert!(write_all_durably(&gone, &[("x", b"1")]).is_err());
    }

    #[test]
    fn stale_temps_are_recognised_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let tmp = temp_name("COMPLETED-3");
        assert!(is_temp_name(&tmp));
        assert!(!is_temp_name("COMPLETED-3"));
        fs::write(dir.path().join(&tmp), b"half").unwrap();
        assert_eq!(remove_stale_temps(dir.path()).unwrap(), 1);
        assert!(!dir.path().join(&tmp).exists());
        // A writer of a shared directory removes its own temporaries only.
        let (mine, theirs) = (temp_name("part-0-4"), temp_name("part-1-4"));
        fs::write(dir.path().join(&mine), b"x").unwrap();
        fs::write(dir.path().join(&theirs), b"y").unwrap();
        assert_eq!(remove_stale_temps_of(dir.path(), "part-0-").unwrap(), 1);
        assert!(dir.path().join(&theirs).exists());
    }
}
