//! Reading a file that an input names: a regular file (never followed
//! through a link), read in full only when it is within a size limit. Every
//! reader of a document (markers, sidecars, specs, manifests, jobs) goes
//! through [`read_bounded`], so none can be made to allocate what a hostile
//! file asks for.

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

fn too_large(len: u64, max: u64) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("{len} bytes exceed the limit of {max}"))
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
