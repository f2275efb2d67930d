//! Reading a file that an input names: a regular file (never followed
//! through a link), read in full only when it is within a size limit. Every
//! reader of a document (markers, sidecars, specs, manifests, jobs, traces)
//! goes through [`read_bounded`], so none can be made to allocate what a
//! hostile file asks for.

use std::fs::{self, File};
use std::io::{self, Read};
use std::path::Path;

/// The file's bytes, if it is a regular file of at most `max` bytes.
pub fn read_bounded(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let meta = fs::symlink_metadata(path)?;
    if !meta.is_file() {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "not a regular file"));
    }
    if meta.len() > max {
        return Err(too_large(meta.len(), max));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    File::open(path)?.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        // It grew between the check and the read.
        return Err(too_large(bytes.len() as u64, max));
    }
    Ok(bytes)
}

/// The file's text: [`read_bounded`], then UTF-8 or an error saying where it is not.
pub fn read_bounded_text(path: &Path, max: u64) -> io::Result<String> {
    String::from_utf8(read_bounded(path, max)?).map_err(|e| {
        io::Error::new(io::ErrorKind::InvalidData, format!("not UTF-8 (at byte {})", e.utf8_error().valid_up_to()))
    })
}

fn too_large(len: u64, max: u64) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("{len} bytes exceed the limit of {max}"))
}

/// What a directory holds, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DirListing {
    /// The entries whose names are UTF-8, sorted.
    pub names: Vec<String>,
    /// The entries whose names are not UTF-8 (shown lossily): nothing we
    /// write has such a name, so a scan by exact name never matches them, but
    /// a collector must say they were there.
    pub not_utf8: Vec<String>,
}

/// Lists a directory by name.
pub fn list_dir(dir: &Path) -> io::Result<DirListing> {
    let mut listing = DirListing::default();
    for entry in fs::read_dir(dir)? {
        match entry?.file_name().into_string() {
            Ok(name) => listing.names.push(name),
            Err(raw) => listing.not_utf8.push(raw.to_string_lossy().into_owned()),
        }
    }
    listing.names.sort();
    listing.not_utf8.sort();
    Ok(listing)
}

/// The file a capture fetch writes first into the directory it fills and
/// removes only once every file in it is verified and durable, just before
/// the directory is renamed into place. A directory holding it is what an
/// interrupted fetch left: never evidence.
pub const INCOMPLETE_FETCH: &str = ".clink-fetch-incomplete";

/// Whether `dir`, or the directory above it (a fetched capture's `capture/`
/// and `checkpoint/` sit one level down), is an interrupted fetch's: the
/// marker file's path when it is.
pub fn interrupted_fetch(dir: &Path) -> Option<std::path::PathBuf> {
    let here = dir.join(INCOMPLETE_FETCH);
    if std::fs::symlink_metadata(&here).is_ok() {
        return Some(here);
    }
    let above = dir.parent()?.join(INCOMPLETE_FETCH);
    std::fs::symlink_metadata(&above).is_ok().then_some(above)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn links_directories_and_oversize_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        fs::write(&file, b"12345").unwrap();
        assert_eq!(read_bounded(&file, 5).unwrap(), b"12345");
        assert!(read_bounded(&file, 4).is_err());
        assert!(read_bounded(dir.path(), 100).is_err());
        std::os::unix::fs::symlink(&file, dir.path().join("link")).unwrap();
        assert!(read_bounded(&dir.path().join("link"), 100).is_err());
        assert!(read_bounded(&dir.path().join("missing"), 100).is_err());
    }

    #[cfg(unix)]
    #[test]
    fn names_that_are_not_utf8_are_listed_apart() {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("b"), b"").unwrap();
        fs::write(dir.path().join("a"), b"").unwrap();
        fs::write(dir.path().join(std::ffi::OsStr::from_bytes(b"x\xff")), b"").unwrap();
        let listing = list_dir(dir.path()).unwrap();
        assert_eq!(listing.names, ["a", "b"]);
        assert_eq!(listing.not_utf8.len(), 1);
    }

    #[test]
    fn text_that_is_not_utf8_says_where() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        fs::write(&file, b"ab\xffcd").unwrap();
        let err = read_bounded_text(&file, 100).unwrap_err();
        assert!(err.to_string().contains("at byte 2"), "{err}");
    }
}
