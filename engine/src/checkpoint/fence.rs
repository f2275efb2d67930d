//! Fencing: at most one live run owns a job's checkpoint directory.
//!
//! A run takes an exclusive lock on `_jobs/<job>/LOCK` before it reads or
//! writes anything of the job, and holds it for the life of the process; the
//! kernel drops it when the process dies, so a resume after a kill proceeds,
//! while a second run over a directory a live run owns is refused naming the
//! owner. Each run that takes the lock numbers itself one above the last
//! (`_jobs/<job>/EPOCH`, written durably): the epoch the protocol trace
//! stamps on the coordinator's lines and the source's barriers, and the
//! incarnation of the directory's lineage (`lineage.rs`), which the lock's
//! holder begins when the directory records none.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::PathBuf;

use thiserror::Error;

use super::durable::{create_dir_durably, write_durably};
use super::layout::CheckpointLayout;
use super::lineage::{continue_or_begin, write_run_record, LineageError, LineageId, RunIdentity, RunRecord};

pub const LOCK_NAME: &str = "LOCK";
pub const EPOCH_NAME: &str = "EPOCH";

#[derive(Debug, Error)]
pub enum FenceError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("job {job}'s checkpoint directory is owned by a live run ({owner}); a second run over it is refused")]
    Owned { job: u64, owner: String },
    #[error("{path}: {reason}")]
    Invalid { path: PathBuf, reason: String },
    #[error("the job's lineage: {0}")]
    Lineage(#[from] LineageError),
}

/// The lock this run holds, and the epoch it took.
#[derive(Debug)]
pub struct Fence {
    /// Held open: closing it (or the process ending) releases the lock.
    _lock: File,
    pub epoch: u64,
    pub lineage: LineageId,
}

impl Fence {
    /// This run: the directory's lineage, and the epoch as its incarnation.
    pub fn identity(&self) -> RunIdentity {
        RunIdentity { lineage: self.lineage.clone(), incarnation: self.epoch }
    }
}

/// Takes the job's lock and the next epoch, or says who owns the directory.
pub fn acquire(layout: &CheckpointLayout) -> Result<Fence, FenceError> {
    let dir = layout.jobs_dir();
    let io = |path: PathBuf| move |source| FenceError::Io { path, source };
    create_dir_durably(&dir).map_err(io(dir.clone()))?;
    let path = dir.join(LOCK_NAME);
    let mut lock =
        OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path).map_err(io(path.clone()))?;
    if !try_lock_exclusive(&lock).map_err(io(path.clone()))? {
        let mut owner = String::new();
        let _ = lock.read_to_string(&mut owner);
        let owner = match owner.trim() {
            "" => "an unknown process".to_string(),
            pid => format!("pid {pid}"),
        };
        return Err(FenceError::Owned { job: layout.job(), owner });
    }
    // Who holds it, for the message a refused second run prints.
    lock.set_len(0).and_then(|()| lock.seek(SeekFrom::Start(0))).map_err(io(path.clone()))?;
    writeln!(lock, "{}", std::process::id()).map_err(io(path.clone()))?;
    let epoch = last_epoch(layout)? + 1;
    write_durably(&dir, EPOCH_NAME, format!("{epoch}\n").as_bytes()).map_err(io(dir.join(EPOCH_NAME)))?;
    let lineage = continue_or_begin(layout)?;
    let fence = Fence { _lock: lock, epoch, lineage };
    // Every writer sharing this layout stamps what it writes with this run,
    // and the run's record ties its trace files to it.
    layout.set_writer(fence.identity()).map_err(|reason| FenceError::Invalid { path: dir.clone(), reason })?;
    let record = RunRecord::of_this_process(layout.job(), fence.identity(), crate::trace::process_stamp());
    write_run_record(layout, &record)?;
    Ok(fence)
}

/// The epoch the newest run took (0: none has).
pub fn last_epoch(layout: &CheckpointLayout) -> Result<u64, FenceError> {
    let path = layout.jobs_dir().join(EPOCH_NAME);
    match clink_basics::files::read_bounded_text(&path, 64) {
        Ok(text) => clink_basics::ids::parse_decimal_u64(text.trim())
            .ok_or_else(|| FenceError::Invalid { path, reason: format!("{:?} is not an epoch", text.trim()) }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(0),
        Err(source) => Err(FenceError::Io { path, source }),
    }
}

/// Who owns the job's directory now: `Some(owner)` while a live run holds
/// its lock, `None` when no run does. It only looks: the lock is taken for
/// an instant and released, and no epoch is claimed.
pub fn live_owner(layout: &CheckpointLayout) -> Result<Option<String>, FenceError> {
    let path = layout.jobs_dir().join(LOCK_NAME);
    let mut lock = match OpenOptions::new().read(true).open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(FenceError::Io { path, source }),
    };
    if try_lock_exclusive(&lock).map_err(|source| FenceError::Io { path: path.clone(), source })? {
        return Ok(None);
    }
    let mut owner = String::new();
    let _ = lock.read_to_string(&mut owner);
    Ok(Some(match owner.trim() {
        "" => "an unknown process".to_string(),
        pid => format!("pid {pid}"),
    }))
}

fn try_lock_exclusive(file: &File) -> io::Result<bool> {
    match file.try_lock() {
        Ok(()) => Ok(true),
        Err(std::fs::TryLockError::WouldBlock) => Ok(false),
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_live_run_per_directory_and_each_run_a_higher_epoch() {
        let dir = tempfile::tempdir().unwrap();
        let layout = CheckpointLayout::new(dir.path(), 3);
        let first = acquire(&layout).unwrap();
        assert_eq!(first.epoch, 1);
        let first_lineage = first.lineage.clone();
        let refused = acquire(&layout).unwrap_err();
        assert!(refused.to_string().contains(&format!("pid {}", std::process::id())), "{refused}");
        assert_eq!(layout.writer(), Some(first.identity()), "what the run writes through its layout names it");
        drop(first);
        // The resume is another process, with a layout of its own.
        let resumed = CheckpointLayout::new(dir.path(), 3);
        let second = acquire(&resumed).unwrap();
        assert_eq!(second.epoch, 2, "a resume after the owner ended takes the next epoch");
        assert_eq!(second.lineage, first_lineage, "and continues the lineage");
        assert_eq!(second.identity().incarnation, 2);
        assert_eq!(last_epoch(&layout).unwrap(), 2);
        // Each run recorded itself, under its incarnation.
        for n in [1, 2] {
            let path = layout.jobs_dir().join(crate::checkpoint::lineage::run_record_name(n));
            let record =
                crate::checkpoint::lineage::parse_run_record_bytes(&path, &std::fs::read(&path).unwrap(), 3, n)
                    .unwrap();
            assert_eq!(record.run.lineage, first_lineage);
            assert_eq!(record.pid, std::process::id());
        }
    }

    #[test]
    fn the_live_owner_is_seen_without_claiming_an_epoch() {
        let dir = tempfile::tempdir().unwrap();
        let layout = CheckpointLayout::new(dir.path(), 3);
        assert_eq!(live_owner(&layout).unwrap(), None, "no directory: no owner");
        let run = acquire(&layout).unwrap();
        let owner = live_owner(&layout).unwrap().unwrap();
        assert!(owner.contains(&std::process::id().to_string()), "{owner}");
        drop(run);
        assert_eq!(live_owner(&layout).unwrap(), None);
        assert_eq!(last_epoch(&layout).unwrap(), 1, "looking claimed no epoch");
    }
}
