//! One runner per state directory.
//!
//! A runner holds an exclusive `flock(2)` on `<state>/runner.lock` for as
//! long as it lives, and writes who it is (pid, start time, command line)
//! into the file once it holds the lock, so that a second runner refused the
//! lock can name the holder. The kernel drops the lock when the holder's
//! file is closed, however it ends (SIGKILL included), so a crashed runner
//! never leaves a stale lock behind; a stale *record* is harmless, since the
//! lock, not the record, decides.
//!
//! It never deletes the lock file (deleting it would let two runners lock two
//! different files of the same name) and never waits for a lock.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The lock file's name inside the state directory.
pub const LOCK_FILE: &str = "runner.lock";

/// A record larger than this is not read (the holder is then unnamed).
const MAX_RECORD_BYTES: u64 = 64 * 1024;

/// Who holds the lock, as it wrote itself into the lock file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub pid: u32,
    /// Unix seconds.
    pub started_at: u64,
    pub command: String,
}

impl Holder {
    /// This process.
    pub fn me(started_at: u64) -> Holder {
        Holder { pid: std::process::id(), started_at, command: std::env::args().collect::<Vec<_>>().join(" ") }
    }
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {} (started at unix time {}: {})", self.pid, self.started_at, self.command)
    }
}

#[derive(Debug, Error)]
pub enum LockError {
    /// Another runner holds the state directory (exit 2 for the caller).
    #[error("{}: another runner holds this state directory: {}", path.display(), holder.as_ref().map_or("it left no readable record".to_string(), |h| h.to_string()))]
    Held { path: PathBuf, holder: Option<Holder> },
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
}

/// The held lock: released when dropped (or when the process ends).
#[derive(Debug)]
pub struct RunnerLock {
    path: PathBuf,
    _file: File,
}

impl RunnerLock {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Takes the state directory's lock without waiting, and records `me` in it.
pub fn acquire(state_dir: &Path, me: &Holder) -> Result<RunnerLock, LockError> {
    let path = state_dir.join(LOCK_FILE);
    let io = |source| LockError::Io { path: path.clone(), source };
    let mut file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path).map_err(io)?;
    // SAFETY: flock(2) on a descriptor this function owns; no memory is shared.
    let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if locked != 0 {
        let error = std::io::Error::last_os_error();
        if error.raw_os_error() == Some(libc::EWOULDBLOCK) {
            return Err(LockError::Held { path: path.clone(), holder: read_holder(&mut file) });
        }
        return Err(io(error));
    }
    let record = serde_json::to_vec(me).map_err(|e| io(std::io::Error::other(e)))?;
    file.set_len(0).map_err(io)?;
    file.seek(SeekFrom::Start(0)).map_err(io)?;
    file.write_all(&record).map_err(io)?;
    file.sync_all().map_err(io)?;
    Ok(RunnerLock { path, _file: file })
}

/// Whether a runner holds the state directory now, and its record; the
/// lock file is neither created nor written (status only looks).
pub fn holder(state_dir: &Path) -> Result<Option<Option<Holder>>, LockError> {
    let path = state_dir.join(LOCK_FILE);
    let mut file = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(LockError::Io { path, source }),
    };
    // SAFETY: flock(2) on a descriptor this function owns.
    let free = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } == 0;
    if free {
        // SAFETY: as above; the shared lock is released at once.
        unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_UN) };
        return Ok(None);
    }
    Ok(Some(read_holder(&mut file)))
}

/// The holder's record, when it is there and reads.
fn read_holder(file: &mut File) -> Option<Holder> {
    let mut bytes = Vec::new();
    file.seek(SeekFrom::Start(0)).ok()?;
    file.take(MAX_RECORD_BYTES + 1).read_to_end(&mut bytes).ok()?;
    if bytes.len() as u64 > MAX_RECORD_BYTES {
        return None;
    }
    serde_json::from_slice(&bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    #[test]
    fn a_second_runner_is_refused_naming_the_first_and_the_lock_ends_with_its_holder() {
        let dir = tempfile::tempdir().unwrap();
        let first = acquire(dir.path(), &Holder::me(100)).unwrap();
        match acquire(dir.path(), &Holder::me(200)) {
            Err(LockError::Held { holder: Some(h), .. }) => {
                assert_eq!((h.pid, h.started_at), (std::process::id(), 100), "the first runner is named")
            }
            other => panic!("a second lock was not refused: {other:?}"),
        }
        drop(first);
        assert!(released_soon(dir.path()), "released with its holder");
        let again = acquire(dir.path(), &Holder::me(300)).unwrap();
        assert!(again.path().ends_with(LOCK_FILE));
    }

    #[test]
    fn looking_at_the_lock_neither_takes_it_nor_changes_its_record() {
        let dir = tempfile::tempdir().unwrap();
        assert!(holder(dir.path()).unwrap().is_none(), "no lock file: nobody");
        let me = Holder::me(7);
        let lock = acquire(dir.path(), &me).unwrap();
        assert_eq!(holder(dir.path()).unwrap(), Some(Some(me.clone())));
        assert_eq!(holder(dir.path()).unwrap(), Some(Some(me)), "looking twice changes nothing");
        drop(lock);
        assert!(released_soon(dir.path()), "released");
    }

    /// Whether the lock is seen free within a second. Not at once: another
    /// trial of this process forking a child (for `flock`) at the moment of
    /// the drop gives the child a copy of the descriptor until its exec
    /// closes it, and the lock lives as long as any copy (seen in CI).
    fn released_soon(state_dir: &Path) -> bool {
        let deadline = Instant::now() + Duration::from_secs(1);
        loop {
            if holder(state_dir).unwrap().is_none() {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn a_holder_whose_record_does_not_read_is_refused_all_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let _first = acquire(dir.path(), &Holder::me(1)).unwrap();
        std::fs::write(dir.path().join(LOCK_FILE), b"not a record").unwrap();
        let refused = acquire(dir.path(), &Holder::me(2)).unwrap_err();
        assert!(matches!(refused, LockError::Held { holder: None, .. }));
        assert!(refused.to_string().contains("no readable record"), "{refused}");
    }

    #[test]
    fn a_lock_held_by_another_process_is_refused_and_freed_when_it_is_killed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LOCK_FILE);
        std::fs::write(&path, b"").unwrap();
        // flock(1) takes the same flock(2) lock and leaves no record; -o keeps
        // the lock in flock itself, not in the command it runs.
        let mut holder = Command::new("flock")
            .arg("-o")
            .arg(&path)
            .args(["sleep", "30"])
            .stdout(Stdio::null())
            .spawn()
            .expect("flock(1) runs");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match acquire(dir.path(), &Holder::me(1)) {
                Err(LockError::Held { .. }) => break,
                Ok(lock) if Instant::now() < deadline => {
                    drop(lock);
                    std::thread::sleep(Duration::from_millis(20));
                }
                other => panic!("the other process's lock was never seen: {other:?}"),
            }
        }
        holder.kill().unwrap();
        holder.wait().unwrap();
        // The kernel released it with the process: no stale lock.
        let deadline = Instant::now() + Duration::from_secs(10);
        while acquire(dir.path(), &Holder::me(2)).is_err() {
            assert!(Instant::now() < deadline, "the lock outlived its killed holder");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
