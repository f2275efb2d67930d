//! The state backends' error and the directory listing they share
//! (`backend`, `rocks`): kept apart so neither backend module depends on the
//! other for them.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::codec::DecodeError;

#[derive(Debug, Error)]
pub enum StateError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path}: the snapshot has no sidecar (.snap.meta); it cannot be verified")]
    MetaMissing { path: PathBuf },
    #[error("{path}: invalid sidecar: {reason}")]
    MetaInvalid { path: PathBuf, reason: String },
    #[error("{path}: {reason}")]
    Mismatch { path: PathBuf, reason: String },
    #[error("{path}: cannot decode: {source}")]
    Decode {
        path: PathBuf,
        #[source]
        source: DecodeError,
    },
}

pub(super) fn io_error(path: &Path) -> impl FnOnce(io::Error) -> StateError + '_ {
    move |source| StateError::Io { path: path.to_path_buf(), source }
}

/// Names in a directory; a missing directory has none.
pub fn read_dir_names(dir: &Path) -> Result<Vec<String>, StateError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_error(dir)(e)),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io_error(dir))?;
        if let Ok(name) = entry.file_name().into_string() {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}
