//! A candidate build pinned: every byte of code it can run, named by hash,
//! kept where it cannot change them, and hashed again after every run.
//!
//! What is pinned: a copy of the binary (in a directory of the caller's
//! that the candidate is never granted), and for a dynamically linked
//! binary its loader and every shared library that loader resolves for it
//! with an empty environment (`LOADER --list COPY`, run confined). The
//! candidate then runs under a [`Confinement`] that lets it execute only
//! its copy and its loader, read only those, its libraries and the evidence
//! trees it is handed, and write only its output tree: it cannot replace
//! its code, start another program, or load a library nobody hashed.
//!
//! What is refused, because no hash could name what would run: an
//! interpreter script, anything that is not an ELF executable for this
//! machine, a library its loader cannot find.
//!
//! After every run each pinned file is hashed again, but for the copy when
//! it is held unwritten ([`HeldUnwritten`]): a read lease granted before it
//! was hashed and never broken proves no one opened it for writing since,
//! without reading its bytes again (a release build with its debug
//! information is 138 MB: hashed after each of a 900-epoch A/B's runs, that
//! was 70 GB of SHA-256, most of the A/B's time). A broken lease refuses as
//! a changed hash does; where no lease is granted the copy is hashed again.
//!
//! This module never runs the candidate unconfined and never reports a hash
//! it did not take from the bytes that ran.

use std::io::Read;
use std::path::{Path, PathBuf};

use clink_basics::digest::{copy_hashed, sha256_file};
use serde::Serialize;

use crate::confine::{ConfineError, Confinement, Grants};
use crate::elf::{read_prefix, Binary, PREFIX_BYTES};
use crate::lease::HeldUnwritten;
use crate::runner::{Launch, Runner};

/// The largest binary or library pinned.
pub const MAX_FILE_BYTES: u64 = 4 << 30;

/// Data the loader reads to resolve libraries (never code): readable, not pinned.
const LOADER_DATA: &[&str] = &["/etc/ld.so.cache", "/etc/ld.so.preload"];

/// Why a build was not pinned.
#[derive(Debug, thiserror::Error)]
pub enum PinError {
    /// The build cannot be pinned (exit 2).
    #[error("{0}")]
    Refused(String),
    /// Pinning could not be done here (exit 3): nothing may run instead.
    #[error("{0}")]
    Unavailable(String),
}

/// What a pinned file is to the build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    Binary,
    Loader,
    Library,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PinnedFile {
    pub role: Role,
    /// Absolute, links resolved: the file the kernel maps.
    pub path: PathBuf,
    pub bytes: u64,
    pub sha256: String,
}

/// A build's code, pinned.
#[derive(Debug)]
pub struct PinnedBuild {
    /// The binary as named on the command line.
    pub given: PathBuf,
    /// The copy that runs.
    pub binary: PathBuf,
    /// The copy first, then the loader and the libraries.
    pub files: Vec<PinnedFile>,
    /// The copy's read lease, taken before it was hashed, when one was granted.
    held: Option<HeldUnwritten>,
}

fn refused(what: &Path, why: impl std::fmt::Display) -> PinError {
    PinError::Refused(format!("{}: {why}", what.display()))
}

/// Hashes a file (links followed: the file the kernel maps), bounded.
fn pin_file(role: Role, path: &Path) -> Result<PinnedFile, PinError> {
    let resolved = std::fs::canonicalize(path).map_err(|e| refused(path, e))?;
    let meta = std::fs::metadata(&resolved).map_err(|e| refused(path, e))?;
    if !meta.is_file() {
        return Err(refused(path, "not a regular file"));
    }
    let digest = sha256_file(&resolved, MAX_FILE_BYTES).map_err(|e| refused(path, e))?;
    if digest.bytes > MAX_FILE_BYTES {
        return Err(refused(path, format!("larger than {MAX_FILE_BYTES} bytes")));
    }
    Ok(PinnedFile { role, path: resolved, bytes: digest.bytes, sha256: digest.sha256 })
}

/// Copies the given binary to `dir/name`, readable and executable by its
/// owner only; returns the copy's path.
fn copy_in(given: &Path, dir: &Path, name: &str) -> Result<PathBuf, PinError> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let meta = std::fs::metadata(given).map_err(|e| refused(given, e))?;
    if !meta.is_file() {
        return Err(refused(given, "not a regular file"));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(refused(given, format!("larger than {MAX_FILE_BYTES} bytes")));
    }
    std::fs::create_dir_all(dir).map_err(|e| refused(dir, e))?;
    let copy = dir.join(name);
    let source = std::fs::File::open(given).map_err(|e| refused(given, e))?;
    let target = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o700)
        .open(&copy)
        .map_err(|e| refused(&copy, e))?;
    let copied = copy_hashed(source.take(MAX_FILE_BYTES + 1), &target).map_err(|e| refused(given, e))?;
    if copied.bytes > MAX_FILE_BYTES {
        return Err(refused(given, format!("larger than {MAX_FILE_BYTES} bytes")));
    }
    target.sync_all().map_err(|e| refused(&copy, e))?;
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o500)).map_err(|e| refused(&copy, e))?;
    Ok(copy)
}

impl PinnedBuild {
    /// Copies `given` into `dir` (a directory the build will never be
    /// granted), reads what it is, and pins it with its loader and libraries.
    /// `runner` runs the loader's listing, confined, with an empty environment.
    pub fn take(given: &Path, dir: &Path, runner: &mut Runner) -> Result<PinnedBuild, PinError> {
        let copy = copy_in(given, dir, "clink")?;
        // Before the copy is hashed: no write after the lease can go unseen.
        let held = HeldUnwritten::take(&copy).ok();
        let prefix = read_start(&copy)?;
        let kind = read_prefix(&prefix).map_err(|why| refused(given, format!("cannot be pinned: {why}")))?;
        let binary = pin_file(Role::Binary, &copy)?;
        let mut files = vec![binary];
        if let Binary::Dynamic { loader } = kind {
            let loader = pin_file(Role::Loader, Path::new(&loader))
                .map_err(|e| refused(given, format!("its loader cannot be pinned: {e}")))?;
            let listed = list_libraries(runner, &loader.path, &copy)?;
            files.push(loader);
            for library in listed {
                let pinned = pin_file(Role::Library, &library)
                    .map_err(|e| refused(given, format!("a library it loads cannot be pinned: {e}")))?;
                if !files.iter().any(|f| f.path == pinned.path) {
                    files.push(pinned);
                }
            }
        }
        Ok(PinnedBuild { given: given.to_path_buf(), binary: copy, files, held })
    }

    /// The copy's SHA-256.
    pub fn binary_sha256(&self) -> &str {
        &self.files[0].sha256
    }

    /// One SHA-256 over every pinned file (role, path and hash, one line
    /// each, in order): it changes when any byte of code that can run does.
    pub fn code_sha256(&self) -> String {
        let lines: String =
            self.files.iter().map(|f| format!("{:?}\t{}\t{}\n", f.role, f.path.display(), f.sha256)).collect();
        clink_basics::digest::sha256_hex(lines.as_bytes())
    }

    /// A confinement for running the build: it may execute its copy and
    /// loader, read its libraries and `read_trees`, write beneath `write_trees`.
    pub fn confinement(&self, read_trees: &[PathBuf], write_trees: &[PathBuf]) -> Result<Confinement, PinError> {
        let mut grants = Grants {
            execute: vec![self.binary.clone()],
            read_trees: read_trees.to_vec(),
            write_trees: write_trees.to_vec(),
            ..Grants::default()
        };
        for f in &self.files[1..] {
            match f.role {
                Role::Loader => grants.execute.push(f.path.clone()),
                _ => grants.read_files.push(f.path.clone()),
            }
        }
        grants.read_files.extend(loader_data());
        Confinement::new(&grants).map_err(confine_error)
    }

    /// Every pinned file hashed again, the copy only when no lease holds it
    /// unwritten: `Err` names each that changed (or could no longer be
    /// read, or whose lease was broken) since it was pinned.
    pub fn still_same(&self) -> Result<(), String> {
        let changed: Vec<String> = self
            .files
            .iter()
            .filter_map(|f| match (&self.held, f.role) {
                (Some(held), Role::Binary) => {
                    held.still_unwritten(&f.path).err().map(|why| format!("{}: {why}", f.path.display()))
                }
                _ => self.hashed_again(f),
            })
            .collect();
        if changed.is_empty() {
            Ok(())
        } else {
            Err(changed.join("; "))
        }
    }

    /// Whether the copy is held unwritten by a lease (else it is hashed again).
    pub fn copy_held(&self) -> bool {
        self.held.is_some()
    }

    /// A pinned file hashed again: `Some` names how it changed.
    fn hashed_again(&self, f: &PinnedFile) -> Option<String> {
        match sha256_file(&f.path, MAX_FILE_BYTES) {
            Ok(d) if d.sha256 == f.sha256 && d.bytes == f.bytes => None,
            Ok(d) => Some(format!("{} now has SHA-256 {}, not {}", f.path.display(), d.sha256, f.sha256)),
            Err(e) => Some(format!("{} can no longer be read: {e}", f.path.display())),
        }
    }
}

fn confine_error(e: ConfineError) -> PinError {
    match e {
        ConfineError::Unavailable(_) => PinError::Unavailable(format!("the candidate cannot be confined: {e}")),
        other => PinError::Unavailable(format!("the candidate's confinement could not be built: {other}")),
    }
}

fn loader_data() -> Vec<PathBuf> {
    LOADER_DATA.iter().map(PathBuf::from).filter(|p| p.is_file()).collect()
}

/// The first bytes of the copy, where its headers are.
fn read_start(copy: &Path) -> Result<Vec<u8>, PinError> {
    let file = std::fs::File::open(copy).map_err(|e| refused(copy, e))?;
    let mut prefix = Vec::with_capacity(PREFIX_BYTES);
    file.take(PREFIX_BYTES as u64).read_to_end(&mut prefix).map_err(|e| refused(copy, e))?;
    Ok(prefix)
}

/// The libraries the loader resolves for the copy, as it lists them: the
/// loader runs confined (it may execute itself, read anything, write
/// nothing) with an empty environment, so no variable steers it.
fn list_libraries(runner: &mut Runner, loader: &Path, copy: &Path) -> Result<Vec<PathBuf>, PinError> {
    let grants = Grants { execute: vec![loader.to_path_buf()], read_trees: vec!["/".into()], ..Grants::default() };
    let confinement = Confinement::new(&grants).map_err(confine_error)?;
    let args = ["--list".to_string(), copy.display().to_string()];
    let launch = Launch { env: Some(&[]), confinement: Some(&confinement) };
    let running = runner
        .spawn_launch("libraries", loader, &args, &launch)
        .map_err(|e| PinError::Unavailable(format!("the loader's listing of the candidate's libraries: {e}")))?;
    let finished = runner
        .wait(running, None)
        .map_err(|e| PinError::Unavailable(format!("the loader's listing of the candidate's libraries: {e}")))?;
    if !finished.ok() {
        return Err(refused(
            copy,
            format!(
                "cannot be pinned: its loader {} --list ended with {}: {}",
                loader.display(),
                finished.describe(),
                finished.last_error_line()
            ),
        ));
    }
    parse_listing(&finished.stdout).map_err(|why| refused(copy, format!("cannot be pinned: {why}")))
}

/// The files named in a glibc loader's `--list` output: `NAME => PATH
/// (0xADDR)`, `PATH (0xADDR)` (the loader itself), `NAME (0xADDR)` (the
/// kernel's vDSO, no file). A library not found, or a line of another
/// shape, refuses the listing.
pub fn parse_listing(text: &str) -> Result<Vec<PathBuf>, String> {
    let mut found = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if line == "statically linked" {
            continue;
        }
        let shape = || format!("its loader listed a line of unknown shape: {line:?}");
        if let Some((name, rest)) = line.split_once(" => ") {
            if rest.trim() == "not found" {
                return Err(format!("its loader finds no library {name:?}"));
            }
            let (path, _) = rest.rsplit_once(" (0x").ok_or_else(shape)?;
            if !path.starts_with('/') {
                return Err(shape());
            }
            found.push(PathBuf::from(path));
        } else {
            let (name, addr) = line.rsplit_once(" (0x").ok_or_else(shape)?;
            if !addr.ends_with(')') || name.contains(char::is_whitespace) {
                return Err(shape());
            }
            if name.starts_with('/') {
                found.push(PathBuf::from(name));
            }
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Bounds;
    use proptest::prelude::*;

    #[test]
    fn a_listing_names_its_files_and_refuses_a_missing_library_or_an_odd_line() {
        let text = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x00007f84)\n\t/lib64/ld-linux-x86-64.so.2 (0x00007f85)\n";
        let found = parse_listing(text).unwrap();
        assert_eq!(found, [PathBuf::from("/lib/x86_64-linux-gnu/libz.so.1"), "/lib64/ld-linux-x86-64.so.2".into()]);
        assert!(parse_listing("\tlibq.so => not found\n").unwrap_err().contains("libq.so"));
        assert!(parse_listing("\tlibq.so => relative/libq.so (0x1)\n").is_err());
        assert!(parse_listing("something else\n").is_err());
        assert_eq!(parse_listing("\tstatically linked\n").unwrap(), Vec::<PathBuf>::new());
    }

    /// This test binary pinned with its loader and libraries, each hashed
    /// as the file it is; a byte changed in the copy is seen afterwards.
    #[test]
    fn a_build_is_pinned_with_its_libraries_and_a_changed_copy_is_seen() {
        if crate::confine::abi().is_err() {
            eprintln!("skipped: no Landlock on this kernel");
            return;
        }
        let work = tempfile::tempdir().unwrap();
        let mut runner = Runner::new(work.path(), Bounds::default()).unwrap();
        let me = std::env::current_exe().unwrap();
        let pinned = PinnedBuild::take(&me, &work.path().join("candidate"), &mut runner).unwrap();
        assert_eq!(pinned.files[0].role, Role::Binary);
        assert_eq!(pinned.files[0].sha256, sha256_file(&me, MAX_FILE_BYTES).unwrap().sha256);
        if pinned.files.len() > 1 {
            assert_eq!(pinned.files[1].role, Role::Loader);
            assert!(pinned.files.iter().any(|f| f.role == Role::Library && f.path.to_string_lossy().contains("libc")));
        }
        pinned.still_same().unwrap();
        let code = pinned.code_sha256();
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        std::fs::set_permissions(&pinned.binary, std::fs::Permissions::from_mode(0o700)).unwrap();
        // Without blocking: a lease makes a writer wait for its break (which
        // the attempt starts); without one, the byte is written and hashed.
        let writer = std::fs::OpenOptions::new().append(true).custom_flags(libc::O_NONBLOCK).open(&pinned.binary);
        match writer {
            Ok(mut w) => {
                assert!(!pinned.copy_held(), "a held copy cannot be opened for writing");
                std::io::Write::write_all(&mut w, &[0]).unwrap();
            }
            Err(e) => assert!(pinned.copy_held(), "{e}"),
        }
        let why = pinned.still_same().unwrap_err();
        assert!(why.contains(&pinned.binary.display().to_string()), "{why}");
        assert_eq!(code, pinned.code_sha256(), "the pinned identity is what was taken, not re-read");
    }

    #[test]
    fn a_script_is_refused_and_never_run() {
        let work = tempfile::tempdir().unwrap();
        let script = work.path().join("swaps");
        std::fs::write(&script, "#!/bin/sh\nexec /bin/true\n").unwrap();
        let mut runner = Runner::new(work.path(), Bounds::default()).unwrap();
        let err = PinnedBuild::take(&script, &work.path().join("candidate"), &mut runner).unwrap_err();
        assert!(matches!(&err, PinError::Refused(why) if why.contains("interpreter script")), "{err}");
        assert!(runner.commands.is_empty(), "nothing was started");
    }

    proptest! {
        #[test]
        fn any_listing_is_read_or_refused_never_a_panic(text in "[ -~\t\n=>()]{0,200}") {
            let _ = parse_listing(&text);
        }
    }
}
