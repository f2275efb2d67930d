//! Processes by identity: the start time that tells a recorded child from a
//! later process that reused its pid, stopping a recorded child's whole
//! process group after a crash, and the runner's own CPU and memory.
//!
//! It reads `/proc` and sends signals to process groups the runner itself
//! recorded; it must never signal a group whose leader's start time is not
//! the one recorded (the pid may belong to someone else by now).

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// A child as the ledger records it: its pid (also its process group, since
/// every child leads its own) and its start time in clock ticks since boot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessId {
    pub pid: u32,
    pub start_ticks: u64,
}

/// Fields 3 onwards of `/proc/<pid>/stat` (after the command's closing
/// parenthesis, which the command itself may contain).
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    Some(after.split_whitespace().map(str::to_string).collect())
}

/// The start time of `pid` (field 22), when it is running.
pub fn start_ticks(pid: u32) -> Option<u64> {
    stat_fields(pid)?.get(19)?.parse().ok()
}

/// The identity of a running pid.
pub fn identify(pid: u32) -> Option<ProcessId> {
    Some(ProcessId { pid, start_ticks: start_ticks(pid)? })
}

/// The pids whose process group is `pgid` (field 5), zombies excluded.
pub fn group_members(pgid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter(|pid| {
            stat_fields(*pid)
                .is_some_and(|f| f.first().is_some_and(|s| s != "Z") && f.get(2) == Some(&pgid.to_string()))
        })
        .collect()
}

/// What stopping a recorded child found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Orphan {
    /// Its group had no member left.
    Gone,
    /// Its pid now belongs to another process: nothing was signalled.
    Reused,
    /// Its group was killed; these many members were running.
    Stopped(usize),
    /// Members were still running after the wait.
    Survived(Vec<u32>),
}

/// Stops the process group a crashed runner recorded, when it is still the
/// recorded one, and waits (at most `wait`) until no member is left.
pub fn stop_orphan(child: &ProcessId, wait: Duration) -> Orphan {
    let members = group_members(child.pid);
    if members.is_empty() {
        return Orphan::Gone;
    }
    // The leader may have exited while its children live on in the group; a
    // live leader must be the recorded process.
    if let Some(ticks) = start_ticks(child.pid) {
        if ticks != child.start_ticks {
            return Orphan::Reused;
        }
    }
    // SAFETY: kill(2) of a process group this runner recorded as its child's.
    unsafe {
        libc::kill(-(child.pid as libc::pid_t), libc::SIGKILL);
    }
    let deadline = Instant::now() + wait;
    loop {
        let left = group_members(child.pid);
        if left.is_empty() {
            return Orphan::Stopped(members.len());
        }
        if Instant::now() >= deadline {
            return Orphan::Survived(left);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The runner's own resource use: CPU (user + system) and peak resident
/// memory, of itself and of its waited-for children apart.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    pub cpu_s: f64,
    pub peak_rss_kib: u64,
    pub children_cpu_s: f64,
    pub children_peak_rss_kib: u64,
}

fn rusage(who: libc::c_int) -> (f64, u64) {
    // SAFETY: getrusage(2) writes into the zeroed struct it is given.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(who, &mut r) } != 0 {
        return (0.0, 0);
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (secs(r.ru_utime) + secs(r.ru_stime), r.ru_maxrss.max(0) as u64)
}

pub fn usage() -> Usage {
    let (cpu_s, peak_rss_kib) = rusage(libc::RUSAGE_SELF);
    let (children_cpu_s, children_peak_rss_kib) = rusage(libc::RUSAGE_CHILDREN);
    Usage { cpu_s, peak_rss_kib, children_cpu_s, children_peak_rss_kib }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    #[test]
    fn a_recorded_group_is_stopped_whole_and_a_reused_pid_is_left_alone() {
        // A leader that starts a grandchild in its group, as `isolation run` does.
        let mut child =
            std::process::Command::new("/bin/sh").args(["-c", "sleep 60 & sleep 60"]).process_group(0).spawn().unwrap();
        let pid = child.id();
        let mut id = None;
        for _ in 0..100 {
            if group_members(pid).len() == 3 {
                id = identify(pid);
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let id = id.expect("the group formed");
        let wrong = ProcessId { pid, start_ticks: id.start_ticks + 1 };
        assert_eq!(stop_orphan(&wrong, Duration::from_secs(1)), Orphan::Reused);
        assert_eq!(group_members(pid).len(), 3, "nothing was signalled");
        let stopped = stop_orphan(&id, Duration::from_secs(5));
        let _ = child.wait();
        assert!(matches!(stopped, Orphan::Stopped(n) if n >= 2), "{stopped:?}");
        assert!(group_members(pid).is_empty(), "the grandchild too");
        assert_eq!(stop_orphan(&id, Duration::from_secs(1)), Orphan::Gone);
    }

    #[test]
    fn usage_is_measured() {
        let u = usage();
        assert!(u.cpu_s > 0.0 && u.peak_rss_kib > 0, "{u:?}");
    }
}
