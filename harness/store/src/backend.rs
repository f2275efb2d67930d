//! The store's objects, through `object_store`: `file://` (LocalFileSystem)
//! or `s3://` (AmazonS3, configured from the standard `AWS_*` variables),
//! behind one interface, driven by a small current-thread runtime.
//!
//! Layout inside the store:
//! ```text
//! objects/sha256/<hex>     a file's bytes, named by their SHA-256
//! manifests/sha256/<hex>   a push's manifest, named by its SHA-256 (the REF)
//! ```
//! This module owns the names and the calls; it knows no manifest field and
//! decides nothing about what is pushed or fetched.

use std::sync::Arc;

use futures_util::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use crate::StoreError;

/// Parts of a large object are sent this big (S3 wants at least 5 MiB).
pub const PART_BYTES: usize = 8 * 1024 * 1024;

/// An opened store.
pub struct Store {
    inner: Arc<dyn ObjectStore>,
    runtime: tokio::runtime::Runtime,
    url: String,
}

/// What the store holds under a name, if anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presence {
    Absent,
    Present { size: u64 },
}

pub fn object_name(sha256: &str) -> String {
    format!("objects/sha256/{sha256}")
}

pub fn manifest_name(sha256: &str) -> String {
    format!("manifests/sha256/{sha256}")
}

/// Where a store is: `file:///dir`, a plain directory path, or `s3://bucket[/prefix]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    Local(std::path::PathBuf),
    S3 { bucket: String, prefix: String },
}

impl Location {
    pub fn parse(url: &str) -> Result<Location, StoreError> {
        if let Some(rest) = url.strip_prefix("file://") {
            if !rest.starts_with('/') {
                return Err(StoreError::Refused(format!("store {url:?}: a file:// URL needs an absolute path")));
            }
            return Ok(Location::Local(rest.into()));
        }
        if let Some(rest) = url.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(StoreError::Refused(format!("store {url:?}: no bucket")));
            }
            return Ok(Location::S3 { bucket: bucket.into(), prefix: prefix.trim_matches('/').into() });
        }
        if url.contains("://") {
            return Err(StoreError::Refused(format!("store {url:?}: only file:// and s3:// stores are supported")));
        }
        if url.is_empty() {
            return Err(StoreError::Refused("store: an empty location".into()));
        }
        Ok(Location::Local(url.into()))
    }
}

impl Store {
    /// Opens a store; `create` makes a local store's directory when it is missing.
    pub fn open(url: &str, create: bool) -> Result<Store, StoreError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| StoreError::Unavailable(format!("store {url}: no runtime: {e}")))?;
        let inner: Arc<dyn ObjectStore> = match Location::parse(url)? {
            Location::Local(dir) => Arc::new(open_local(url, &dir, create)?),
            Location::S3 { bucket, prefix } => open_s3(url, &bucket, &prefix)?,
        };
        Ok(Store { inner, runtime, url: url.to_string() })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    fn path(name: &str) -> Result<ObjectPath, StoreError> {
        ObjectPath::parse(name).map_err(|e| StoreError::Refused(format!("object name {name:?}: {e}")))
    }

    fn failed(&self, name: &str, e: object_store::Error) -> StoreError {
        match e {
            object_store::Error::NotFound { .. } => StoreError::Missing(name.to_string()),
            e => StoreError::Unavailable(format!("store {}: {name}: {e}", self.url)),
        }
    }

    /// Whether an object exists, and its size.
    pub fn presence(&self, name: &str) -> Result<Presence, StoreError> {
        let path = Self::path(name)?;
        match self.runtime.block_on(self.inner.head(&path)) {
            Ok(meta) => Ok(Presence::Present { size: meta.size }),
            Err(object_store::Error::NotFound { .. }) => Ok(Presence::Absent),
            Err(e) => Err(self.failed(name, e)),
        }
    }

    /// Stores bytes under a name in one request (the store makes it appear whole).
    pub fn put(&self, name: &str, bytes: Vec<u8>) -> Result<(), StoreError> {
        let path = Self::path(name)?;
        self.runtime.block_on(self.inner.put(&path, PutPayload::from(bytes))).map_err(|e| self.failed(name, e))?;
        Ok(())
    }

    /// Stores a large object part by part: `next_part` yields the parts and
    /// `accept` is asked, after the last, whether to publish it; a refusal
    /// (or any error) aborts the upload so nothing appears under the name.
    pub fn put_parts(
        &self,
        name: &str,
        mut next_part: impl FnMut() -> Result<Option<Vec<u8>>, StoreError>,
        accept: impl FnOnce() -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let path = Self::path(name)?;
        self.runtime.block_on(async {
            let mut upload = self.inner.put_multipart(&path).await.map_err(|e| self.failed(name, e))?;
            let sent = async {
                while let Some(part) = next_part()? {
                    upload.put_part(PutPayload::from(part)).await.map_err(|e| self.failed(name, e))?;
                }
                accept()
            }
            .await;
            match sent {
                Ok(()) => upload.complete().await.map(|_| ()).map_err(|e| self.failed(name, e)),
                Err(e) => {
                    let _ = upload.abort().await;
                    Err(e)
                }
            }
        })
    }

    /// Streams an object's bytes to `sink`, chunk by chunk; `sink` may stop it with an error.
    /// Whether the object `name` is there and its bytes are `size` bytes
    /// hashing to `sha256`: read back and hashed, never taken from its name
    /// or its size alone.
    pub fn holds(&self, name: &str, size: u64, sha256: &str) -> Result<bool, StoreError> {
        if self.presence(name)? != (Presence::Present { size }) {
            return Ok(false);
        }
        let mut hasher = <sha2::Sha256 as sha2::Digest>::new();
        let mut read = 0u64;
        match self.get(name, |chunk| {
            read += chunk.len() as u64;
            sha2::Digest::update(&mut hasher, chunk);
            Ok(())
        }) {
            Ok(()) => {}
            Err(StoreError::Missing(_)) => return Ok(false),
            Err(e) => return Err(e),
        }
        Ok(read == size && clink_basics::digest::hex(&sha2::Digest::finalize(hasher)) == sha256)
    }

    pub fn get(&self, name: &str, mut sink: impl FnMut(&[u8]) -> Result<(), StoreError>) -> Result<(), StoreError> {
        let path = Self::path(name)?;
        self.runtime.block_on(async {
            let got = self.inner.get(&path).await.map_err(|e| self.failed(name, e))?;
            let mut stream = got.into_stream();
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| self.failed(name, e))?;
                sink(&chunk)?;
            }
            Ok(())
        })
    }
}

fn open_local(
    url: &str,
    dir: &std::path::Path,
    create: bool,
) -> Result<object_store::local::LocalFileSystem, StoreError> {
    if create {
        std::fs::create_dir_all(dir).map_err(|e| StoreError::Refused(format!("store {url}: {e}")))?;
    }
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(StoreError::Refused(format!("store {url}: not a directory"))),
        Err(e) => return Err(StoreError::Refused(format!("store {url}: {e}"))),
    }
    object_store::local::LocalFileSystem::new_with_prefix(dir)
        .map_err(|e| StoreError::Refused(format!("store {url}: {e}")))
}

fn open_s3(url: &str, bucket: &str, prefix: &str) -> Result<Arc<dyn ObjectStore>, StoreError> {
    // reqwest is built without a TLS provider of its own (see the workspace's
    // Cargo.toml); the process-wide one is ring's. An error only says one is
    // installed already, which serves as well.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let s3 = object_store::aws::AmazonS3Builder::from_env()
        .with_bucket_name(bucket)
        .build()
        .map_err(|e| StoreError::Refused(format!("store {url}: {e}")))?;
    if prefix.is_empty() {
        return Ok(Arc::new(s3));
    }
    let prefix = ObjectPath::parse(prefix).map_err(|e| StoreError::Refused(format!("store {url}: {e}")))?;
    Ok(Arc::new(object_store::prefix::PrefixStore::new(s3, prefix)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_parse_and_other_schemes_are_refused() {
        assert_eq!(Location::parse("file:///tmp/s").unwrap(), Location::Local("/tmp/s".into()));
        assert_eq!(Location::parse("rel/dir").unwrap(), Location::Local("rel/dir".into()));
        assert_eq!(Location::parse("s3://b/a/b/").unwrap(), Location::S3 { bucket: "b".into(), prefix: "a/b".into() });
        assert!(Location::parse("file://relative").is_err());
        assert!(Location::parse("gs://b").is_err());
        assert!(Location::parse("s3:///x").is_err());
    }

    #[test]
    fn an_object_round_trips_and_a_missing_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().to_str().unwrap(), false).unwrap();
        assert_eq!(store.presence("objects/sha256/ab").unwrap(), Presence::Absent);
        store.put("objects/sha256/ab", b"hello".to_vec()).unwrap();
        assert_eq!(store.presence("objects/sha256/ab").unwrap(), Presence::Present { size: 5 });
        let mut got = Vec::new();
        store
            .get("objects/sha256/ab", |c| {
                got.extend_from_slice(c);
                Ok(())
            })
            .unwrap();
        assert_eq!(got, b"hello");
        match store.get("objects/sha256/cd", |_| Ok(())) {
            Err(StoreError::Missing(name)) => assert_eq!(name, "objects/sha256/cd"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_refused_multipart_upload_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().to_str().unwrap(), false).unwrap();
        let mut parts = vec![vec![1u8; 10], vec![2u8; 10]];
        let refused =
            store.put_parts("objects/sha256/x", || Ok(parts.pop()), || Err(StoreError::Refused("changed".into())));
        assert!(refused.is_err());
        assert_eq!(store.presence("objects/sha256/x").unwrap(), Presence::Absent);
        let mut parts = vec![vec![1u8; 10], vec![2u8; 10]];
        store.put_parts("objects/sha256/y", || Ok(parts.pop()), || Ok(())).unwrap();
        assert_eq!(store.presence("objects/sha256/y").unwrap(), Presence::Present { size: 20 });
    }
}
