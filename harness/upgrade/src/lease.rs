//! A file held unwritten: a read lease (`fcntl(F_SETLEASE, F_RDLCK)`) on a
//! pinned copy, so that "unchanged since it was hashed" is the kernel's
//! answer instead of a new hash of every byte.
//!
//! The kernel grants a read lease only while no one holds the file open for
//! writing (a writable shared mapping keeps it open), and breaks it as soon
//! as anyone opens the file for writing or truncates it. So a lease granted
//! before the file was hashed, still held on the inode its path still names,
//! proves that the bytes hashed are the bytes there now. Where no lease can
//! be had (a file system without leases, leases switched off, a file we do
//! not own) the caller hashes again instead.
//!
//! This module never takes a broken, pending or missing lease for an
//! unchanged file, and never learns of a break by a signal: the break's
//! signal is SIGURG, which a process ignores by default (SIGIO, the kernel's
//! default for leases, would end it), and the holder asks the kernel.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// `F_SETSIG` (`<bits/fcntl-linux.h>`; the libc crate does not export it).
const F_SETSIG: libc::c_int = 10;

/// A read lease held on one file, with the inode it was granted on.
#[derive(Debug)]
pub struct HeldUnwritten {
    file: File,
    dev: u64,
    ino: u64,
}

impl HeldUnwritten {
    /// Opens `path` read-only and takes a read lease on it: `Err` when the
    /// kernel refuses it (someone holds it open for writing, or leases are
    /// not to be had here).
    pub fn take(path: &Path) -> io::Result<HeldUnwritten> {
        let file = File::open(path)?;
        let fd = file.as_raw_fd();
        // SAFETY: fcntl on a descriptor this function owns, integer arguments only.
        if unsafe { libc::fcntl(fd, F_SETSIG, libc::SIGURG) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: as above.
        if unsafe { libc::fcntl(fd, libc::F_SETLEASE, libc::F_RDLCK) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let meta = file.metadata()?;
        Ok(HeldUnwritten { dev: meta.dev(), ino: meta.ino(), file })
    }

    /// `Ok` when the lease is still held, unbroken and not being broken, and
    /// `path` still names the file it was granted on; otherwise why not.
    pub fn still_unwritten(&self, path: &Path) -> Result<(), String> {
        // SAFETY: fcntl on the descriptor this value owns.
        let lease = unsafe { libc::fcntl(self.file.as_raw_fd(), libc::F_GETLEASE) };
        if lease != libc::F_RDLCK {
            return Err("it was opened for writing or truncated after it was pinned (its read lease was broken)".into());
        }
        match std::fs::symlink_metadata(path) {
            Ok(now) if now.dev() == self.dev && now.ino() == self.ino => Ok(()),
            Ok(_) => Err("its path now names another file".into()),
            Err(e) => Err(format!("its path can no longer be read: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::OpenOptionsExt;

    /// Opening for writing without blocking: the attempt alone starts the
    /// lease's break (and fails while the lease is held).
    fn try_open_for_writing(path: &Path) -> io::Result<File> {
        std::fs::OpenOptions::new().write(true).custom_flags(libc::O_NONBLOCK).open(path)
    }

    #[test]
    fn a_lease_holds_until_someone_opens_the_file_for_writing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("copy");
        std::fs::write(&path, b"code").unwrap();
        let Ok(held) = HeldUnwritten::take(&path) else {
            eprintln!("skipped: no read lease to be had here");
            return;
        };
        held.still_unwritten(&path).unwrap();
        std::fs::read(&path).unwrap();
        held.still_unwritten(&path).expect("reading breaks nothing");
        assert!(try_open_for_writing(&path).is_err(), "a writer waits for the lease's break");
        let why = held.still_unwritten(&path).unwrap_err();
        assert!(why.contains("read lease was broken"), "{why}");
    }

    #[test]
    fn a_file_open_for_writing_gets_no_lease_and_a_replaced_one_is_seen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("copy");
        let writer = File::create(&path).unwrap();
        assert!(HeldUnwritten::take(&path).is_err(), "no lease while a writer holds it");
        drop(writer);
        let Ok(held) = HeldUnwritten::take(&path) else {
            eprintln!("skipped: no read lease to be had here");
            return;
        };
        let other = dir.path().join("other");
        std::fs::write(&other, b"other code").unwrap();
        std::fs::rename(&other, &path).unwrap();
        let why = held.still_unwritten(&path).unwrap_err();
        assert!(why.contains("another file"), "{why}");
    }
}
