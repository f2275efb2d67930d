//! The capture store: a content-addressed store of captures, their
//! checkpoint files, or incident bundles, so they can leave the machine that
//! recorded them and come back byte for byte.
//!
//! Every file is an object named by its SHA-256; each push adds one
//! manifest ([`manifest`], `clink-capture-manifest` version 1) naming the
//! job, operators, epochs and every file's path, size and digest, written
//! last; the manifest's own SHA-256 is the reference a fetch takes. The
//! objects live behind `object_store` ([`backend`]): `file://` and `s3://`.
//!
//! ```no_run
//! # use clink_store::*;
//! let store = backend::Store::open("file:///srv/captures", true)?;
//! let fetched = fetch::fetch(&store, "<64 hex digits>", "restored".as_ref(), Bounds::default())?;
//! # Ok::<(), StoreError>(())
//! ```
//!
//! It never interprets what it stores (no capture, snapshot or bundle is
//! parsed here: the caller says which trees to push and what the manifest
//! names), never follows a link, never writes outside a fetch's new
//! directory, and never leaves a half-written DEST or a manifest whose
//! objects are not all in the store.

pub mod backend;
pub mod fetch;
pub mod manifest;
pub mod push;
pub mod source;

use thiserror::Error;

/// How much one push or fetch may move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub max_files: u64,
    pub max_bytes: u64,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds { max_files: 100_000, max_bytes: 64 * 1024 * 1024 * 1024 }
    }
}

#[derive(Debug, Error)]
pub enum StoreError {
    /// Bad input: a source, manifest, object or bound that is refused (exit 2).
    #[error("{0}")]
    Refused(String),
    /// An object the store does not hold (the callers name what it was for).
    #[error("object {0} is missing from the store")]
    Missing(String),
    /// The store could not be reached or did not answer (exit 3).
    #[error("{0}")]
    Unavailable(String),
}
