//! The filesystem a child may touch, confined by Landlock: which files it
//! may execute, which it may read, and the one tree it may write.
//!
//! A [`Confinement`] is built in this process (the ruleset and every path's
//! handle opened here) and applied in the child between fork and exec, so
//! it holds from the child's first instruction, for everything the child
//! later starts, and cannot be lifted by it. Where Landlock is missing, a
//! confinement cannot be built and nothing is started under it: the caller
//! says so instead of running the child unconfined.
//!
//! This module never grants anything it was not given, and never treats a
//! rule it could not add as added.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Landlock's access rights on files and directories (`linux/landlock.h`).
mod access {
    pub const EXECUTE: u64 = 1 << 0;
    pub const WRITE_FILE: u64 = 1 << 1;
    pub const READ_FILE: u64 = 1 << 2;
    pub const READ_DIR: u64 = 1 << 3;
    pub const REMOVE_DIR: u64 = 1 << 4;
    pub const REMOVE_FILE: u64 = 1 << 5;
    pub const MAKE_CHAR: u64 = 1 << 6;
    pub const MAKE_DIR: u64 = 1 << 7;
    pub const MAKE_REG: u64 = 1 << 8;
    pub const MAKE_SOCK: u64 = 1 << 9;
    pub const MAKE_FIFO: u64 = 1 << 10;
    pub const MAKE_BLOCK: u64 = 1 << 11;
    pub const MAKE_SYM: u64 = 1 << 12;
    /// ABI 2.
    pub const REFER: u64 = 1 << 13;
    /// ABI 3.
    pub const TRUNCATE: u64 = 1 << 14;
    /// ABI 5.
    pub const IOCTL_DEV: u64 = 1 << 15;
    /// Rights that apply to a file (the rest apply to directories only).
    pub const ON_FILES: u64 = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV;
}

/// ABI 6: signals and abstract Unix sockets reach only the same domain.
const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
const SCOPE_SIGNAL: u64 = 1 << 1;
const CREATE_RULESET_VERSION: u32 = 1 << 0;
const RULE_PATH_BENEATH: libc::c_int = 1;

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// Why a confinement could not be built (nothing may run unconfined instead).
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    #[error("Landlock is not available here ({0}); it needs Linux 5.13 or later with Landlock enabled")]
    Unavailable(String),
    #[error("{path}: {source}")]
    Path {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("the Landlock ruleset: {0}")]
    Ruleset(io::Error),
}

/// What a child is granted; everything else on the filesystem is denied.
#[derive(Debug, Clone, Default)]
pub struct Grants {
    /// Files it may execute and read: its binary, its loader.
    pub execute: Vec<PathBuf>,
    /// Files it may read: its libraries, the loader's cache.
    pub read_files: Vec<PathBuf>,
    /// Directories it may read beneath.
    pub read_trees: Vec<PathBuf>,
    /// Directories beneath which it may create, write and remove regular
    /// files (never links, devices, sockets or directories).
    pub write_trees: Vec<PathBuf>,
}

/// A ruleset ready to be applied to a child.
#[derive(Debug)]
pub struct Confinement {
    ruleset: OwnedFd,
    abi: i64,
    grants: Grants,
}

/// The Landlock ABI version this kernel speaks, or why none.
pub fn abi() -> Result<i64, ConfineError> {
    // SAFETY: a query that takes no pointer (NULL, 0) and returns a number.
    let v = unsafe {
        libc::syscall(libc::SYS_landlock_create_ruleset, std::ptr::null::<RulesetAttr>(), 0, CREATE_RULESET_VERSION)
    };
    if v < 1 {
        return Err(ConfineError::Unavailable(io::Error::last_os_error().to_string()));
    }
    Ok(v)
}

/// Every right this ABI knows, so nothing is left unhandled (and so allowed).
fn handled_fs(abi: i64) -> u64 {
    use access::*;
    let mut rights = EXECUTE
        | WRITE_FILE
        | READ_FILE
        | READ_DIR
        | REMOVE_DIR
        | REMOVE_FILE
        | MAKE_CHAR
        | MAKE_DIR
        | MAKE_REG
        | MAKE_SOCK
        | MAKE_FIFO
        | MAKE_BLOCK
        | MAKE_SYM;
    if abi >= 2 {
        rights |= REFER;
    }
    if abi >= 3 {
        rights |= TRUNCATE;
    }
    if abi >= 5 {
        rights |= IOCTL_DEV;
    }
    rights
}

impl Confinement {
    pub fn new(grants: &Grants) -> Result<Confinement, ConfineError> {
        use access::*;
        let abi = abi()?;
        let handled = handled_fs(abi);
        let attr = RulesetAttr {
            handled_access_fs: handled,
            handled_access_net: 0,
            scoped: if abi >= 6 { SCOPE_SIGNAL | SCOPE_ABSTRACT_UNIX_SOCKET } else { 0 },
        };
        // SAFETY: attr is a live, initialised struct of the size passed.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                &attr as *const RulesetAttr,
                std::mem::size_of::<RulesetAttr>(),
                0u32,
            )
        };
        if fd < 0 {
            return Err(ConfineError::Ruleset(io::Error::last_os_error()));
        }
        // SAFETY: the kernel returned a new descriptor (close-on-exec) that nothing else owns.
        let ruleset = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        let confinement = Confinement { ruleset, abi, grants: grants.clone() };
        let write = READ_FILE | READ_DIR | WRITE_FILE | MAKE_REG | REMOVE_FILE | TRUNCATE;
        for path in &grants.execute {
            confinement.allow(path, EXECUTE | READ_FILE)?;
        }
        for path in &grants.read_files {
            confinement.allow(path, READ_FILE)?;
        }
        for path in &grants.read_trees {
            confinement.allow(path, READ_FILE | READ_DIR)?;
        }
        for path in &grants.write_trees {
            confinement.allow(path, write)?;
        }
        Ok(confinement)
    }

    /// The kernel's Landlock ABI the ruleset was made for.
    pub fn abi(&self) -> i64 {
        self.abi
    }

    pub fn grants(&self) -> &Grants {
        &self.grants
    }

    /// Adds `rights` beneath `path` (a file takes only the rights of files).
    fn allow(&self, path: &Path, rights: u64) -> Result<(), ConfineError> {
        let named = |source| ConfineError::Path { path: path.to_path_buf(), source };
        let c = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| named(io::Error::new(io::ErrorKind::InvalidInput, "a NUL in the path")))?;
        // SAFETY: c is a NUL-terminated path; O_PATH opens no content.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(named(io::Error::last_os_error()));
        }
        // SAFETY: a descriptor just opened, owned by nothing else.
        let handle = unsafe { OwnedFd::from_raw_fd(fd) };
        let is_dir = std::fs::metadata(path).map_err(named)?.is_dir();
        let mut allowed = rights & handled_fs(self.abi);
        if !is_dir {
            allowed &= access::ON_FILES;
        }
        let attr = PathBeneathAttr { allowed_access: allowed, parent_fd: handle.as_raw_fd() };
        // SAFETY: attr is a live, packed struct as the kernel defines it.
        let r = unsafe {
            libc::syscall(
                libc::SYS_landlock_add_rule,
                self.ruleset.as_raw_fd(),
                RULE_PATH_BENEATH,
                &attr as *const PathBeneathAttr,
                0u32,
            )
        };
        if r != 0 {
            return Err(named(io::Error::last_os_error()));
        }
        Ok(())
    }

    /// What the child runs between fork and exec: the ruleset applied to
    /// itself. It allocates nothing and makes two system calls; the
    /// ruleset's descriptor must outlive the spawn it is handed to.
    pub(crate) fn child_hook(&self) -> impl FnMut() -> io::Result<()> + Send + Sync + 'static {
        let ruleset = self.ruleset.as_raw_fd();
        move || {
            // SAFETY: prctl and landlock_restrict_self take plain integers.
            unsafe {
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
                if libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::{Launch, Runner};
    use crate::Bounds;

    /// A shell confined to its own files and one writable tree: what it may
    /// not touch it cannot, and a shell unconfined (the control) can.
    #[test]
    fn a_confined_child_executes_reads_and_writes_only_what_it_was_granted() {
        if abi().is_err() {
            eprintln!("skipped: no Landlock on this kernel");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let (out, secret, mine) = (dir.path().join("out"), dir.path().join("secret"), dir.path().join("mine"));
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(&secret, "s3cret\n").unwrap();
        std::fs::create_dir_all(&mine).unwrap();
        let sh = std::fs::canonicalize("/bin/sh").unwrap();
        // The kernel opens the loader for execution too.
        let loaders = ["/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1"];
        let loader = loaders.iter().find_map(|l| std::fs::canonicalize(l).ok()).expect("a glibc loader");
        let grants = Grants {
            execute: vec![sh.clone(), loader],
            read_files: vec![],
            read_trees: vec!["/lib".into(), "/lib64".into(), "/usr/lib".into(), "/etc".into()]
                .into_iter()
                .filter(|p: &PathBuf| p.exists())
                .collect(),
            write_trees: vec![out.clone()],
        };
        let confinement = Confinement::new(&grants).unwrap();
        let script = format!(
            "echo ok > {o}/w && echo wrote; read -r x < {s} && echo \"read $x\"; echo x > {m}/w && echo wrote-mine; /bin/true && echo ran-true",
            o = out.display(),
            s = secret.display(),
            m = mine.display()
        );
        let logs = tempfile::tempdir().unwrap();
        let mut runner = Runner::new(logs.path(), Bounds::default()).unwrap();
        let confined = Launch { env: Some(&[]), confinement: Some(&confinement) };
        let running = runner.spawn_launch("confined", &sh, &["-c".into(), script.clone()], &confined).unwrap();
        let done = runner.wait(running, None).unwrap();
        assert_eq!(done.stdout.trim(), "wrote", "only the granted write: {done:?}");
        assert_eq!(std::fs::read_to_string(out.join("w")).unwrap(), "ok\n");
        assert!(!mine.join("w").exists());
        let free = runner.run("control", &sh, &["-c".into(), script]).unwrap();
        let lines: Vec<&str> = free.stdout.lines().collect();
        assert_eq!(lines, ["wrote", "read s3cret", "wrote-mine", "ran-true"], "the control");
    }
}
