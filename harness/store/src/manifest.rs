//! The push manifest (format `clink-capture-manifest`, version 1): what one
//! push stored, and its reader.
//!
//! A manifest names the kind of source, the job, the operators and the
//! captured epochs, and every file: its path relative to the fetched
//! directory, its size and its SHA-256 (which is also its object's name).
//! Its encoding is canonical (fixed field order, files sorted by path), so
//! the same source always gives the same bytes and the same reference.
//!
//! The reader refuses, naming the field: another format or version, a
//! document over [`MAX_MANIFEST_BYTES`] or nested deeper than [`MAX_DEPTH`],
//! more than [`MAX_FILES`] files, a field of the wrong type or unknown, a
//! digest that is not lowercase SHA-256 hex, and any path that is empty,
//! absolute, has `.`/`..`/empty components, a backslash or a control
//! character, repeats another, or is both a file and a directory of others.
//! It never touches the file system and never panics on input.

use std::collections::BTreeSet;

use clink_basics::digest::is_sha256_hex;
use clink_basics::fields::{depth, FieldError, Fields};
use clink_basics::ids::parse_decimal_u64;
use serde::Serialize;
use serde_json::Value as Json;
use thiserror::Error;

pub const FORMAT: &str = "clink-capture-manifest";
pub const VERSION: u64 = 1;
/// The largest manifest the reader accepts (about 300,000 files' worth).
pub const MAX_MANIFEST_BYTES: u64 = 64 * 1024 * 1024;
pub const MAX_DEPTH: usize = 8;
pub const MAX_FILES: usize = 1_000_000;
/// The longest path a manifest may name, in bytes, and its most components.
pub const MAX_PATH_BYTES: usize = 1024;
pub const MAX_PATH_COMPONENTS: usize = 32;

/// Where the files of each kind of source sit in the fetched directory.
pub const CAPTURE_ROOT: &str = "capture";
pub const CHECKPOINT_ROOT: &str = "checkpoint";

/// What was pushed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    /// A flight recorder's directory (under `capture/`) and the job's
    /// checkpoint files (under `checkpoint/`).
    Capture,
    /// An incident bundle, its manifest at the root.
    Bundle,
}

impl SourceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Capture => "capture",
            SourceKind::Bundle => "bundle",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text {
            "capture" => Some(SourceKind::Capture),
            "bundle" => Some(SourceKind::Bundle),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct EpochEntry {
    /// The operator id, decimal text.
    pub operator: String,
    pub subtask: u32,
    pub epoch: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileEntry {
    pub path: String,
    pub size: u64,
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Manifest {
    pub format: String,
    pub version: u64,
    pub source: SourceKind,
    /// The job id, decimal text.
    pub job: String,
    /// Operator ids, decimal text, ascending.
    pub operators: Vec<String>,
    pub epochs: Vec<EpochEntry>,
    pub files: Vec<FileEntry>,
}

impl Manifest {
    /// A manifest in canonical order: operators by id, epochs and files sorted.
    pub fn new(
        source: SourceKind,
        job: u64,
        operators: &[u64],
        epochs: Vec<EpochEntry>,
        files: Vec<FileEntry>,
    ) -> Self {
        let mut ops: Vec<u64> = operators.to_vec();
        ops.sort_unstable();
        ops.dedup();
        let mut epochs = epochs;
        epochs.sort_by(|a, b| {
            let key = |e: &EpochEntry| (parse_decimal_u64(&e.operator), e.subtask, e.epoch);
            key(a).cmp(&key(b))
        });
        epochs.dedup();
        let mut files = files;
        files.sort_by(|a, b| a.path.cmp(&b.path));
        Manifest {
            format: FORMAT.to_string(),
            version: VERSION,
            source,
            job: job.to_string(),
            operators: ops.iter().map(u64::to_string).collect(),
            epochs,
            files,
        }
    }

    /// The canonical bytes: pretty JSON and a final newline.
    pub fn encode(&self) -> Vec<u8> {
        // Serialising plain strings, numbers and vectors cannot fail.
        let mut bytes = serde_json::to_vec_pretty(self).unwrap_or_default();
        bytes.push(b'\n');
        bytes
    }

    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).fold(0u64, u64::saturating_add)
    }

    pub fn job_id(&self) -> u64 {
        parse_decimal_u64(&self.job).unwrap_or(0)
    }
}

/// Why a manifest was refused: the field at fault and what was wrong.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("manifest: {field}: {message}")]
pub struct ManifestError {
    pub field: String,
    pub message: String,
}

impl From<FieldError> for ManifestError {
    fn from(e: FieldError) -> Self {
        ManifestError { field: e.path, message: e.message }
    }
}

fn refuse(field: impl Into<String>, message: impl Into<String>) -> ManifestError {
    ManifestError { field: field.into(), message: message.into() }
}

/// Parses manifest bytes with every limit, type and path rule.
pub fn parse_manifest(bytes: &[u8]) -> Result<Manifest, ManifestError> {
    if bytes.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(refuse("$", format!("{} bytes, over the {MAX_MANIFEST_BYTES}-byte bound", bytes.len())));
    }
    let doc: Json = serde_json::from_slice(bytes).map_err(|e| refuse("$", format!("not JSON: {e}")))?;
    if depth(&doc) > MAX_DEPTH {
        return Err(refuse("$", format!("nested deeper than {MAX_DEPTH}")));
    }
    let root = Fields::object(&doc, "$")?;
    let format = root.str("format")?;
    if format != FORMAT {
        return Err(refuse("format", format!("{format:?}, not {FORMAT:?}")));
    }
    let version = root.u64("version")?;
    if version != VERSION {
        return Err(refuse("version", format!("{version}; this build reads version {VERSION}")));
    }
    root.only(&["format", "version", "source", "job", "operators", "epochs", "files"])?;
    let source_text = root.str("source")?;
    let source = SourceKind::parse(source_text)
        .ok_or_else(|| refuse("source", format!("{source_text:?}, neither \"capture\" nor \"bundle\"")))?;
    let job = root.decimal_id("job")?;
    let operators = read_operators(&root)?;
    let epochs = root.objects("epochs", read_epoch)?;
    let files = read_files(&root)?;
    check_paths(source, &files)?;
    Ok(Manifest { format: format.to_string(), version, source, job: job.to_string(), operators, epochs, files })
}

fn read_operators(root: &Fields) -> Result<Vec<String>, ManifestError> {
    let ops = root.str_list("operators")?;
    for (i, op) in ops.iter().enumerate() {
        if parse_decimal_u64(op).is_none() {
            return Err(refuse(format!("operators[{i}]"), format!("{op:?} is not an operator id (decimal text)")));
        }
    }
    Ok(ops)
}

fn read_epoch(f: &Fields) -> Result<EpochEntry, FieldError> {
    f.only(&["operator", "subtask", "epoch"])?;
    Ok(EpochEntry {
        operator: f.decimal_id("operator")?.to_string(),
        subtask: f.u32("subtask")?,
        epoch: f.u64("epoch")?,
    })
}

fn read_files(root: &Fields) -> Result<Vec<FileEntry>, ManifestError> {
    let count = root.array("files")?.len();
    if count > MAX_FILES {
        return Err(refuse("files", format!("{count} files, over the {MAX_FILES}-file bound")));
    }
    let files = root.objects("files", |f| {
        f.only(&["path", "size", "sha256"])?;
        let sha256 = f.str("sha256")?;
        if !is_sha256_hex(sha256) {
            return Err(f.error("sha256", format!("{sha256:?} is not a SHA-256 in lowercase hex")));
        }
        Ok(FileEntry { path: f.str("path")?.to_string(), size: f.u64("size")?, sha256: sha256.to_string() })
    })?;
    let mut total = 0u64;
    for (i, file) in files.iter().enumerate() {
        total = total
            .checked_add(file.size)
            .ok_or_else(|| refuse(format!("files[{i}].size"), "the sizes add up past 2^64"))?;
    }
    Ok(files)
}

/// The path rules for one path (see the module doc).
pub fn check_path(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("an empty path".into());
    }
    if path.len() > MAX_PATH_BYTES {
        return Err(format!("a path of {} bytes, over {MAX_PATH_BYTES}", path.len()));
    }
    if path.starts_with('/') {
        return Err(format!("{path:?} is absolute"));
    }
    if let Some(c) = path.chars().find(|c| c.is_control() || *c == '\\') {
        return Err(format!("{path:?} has the character {c:?}"));
    }
    let parts: Vec<&str> = path.split('/').collect();
    if parts.len() > MAX_PATH_COMPONENTS {
        return Err(format!("{path:?} has {} components, over {MAX_PATH_COMPONENTS}", parts.len()));
    }
    match parts.iter().find(|p| p.is_empty() || **p == "." || **p == "..") {
        Some(p) => Err(format!("{path:?} has the component {p:?}")),
        None => Ok(()),
    }
}

/// Every path by the rules, each once, none a directory of another, and a
/// capture source's paths under its two roots only.
fn check_paths(source: SourceKind, files: &[FileEntry]) -> Result<(), ManifestError> {
    let mut seen = BTreeSet::new();
    for (i, file) in files.iter().enumerate() {
        let field = format!("files[{i}].path");
        check_path(&file.path).map_err(|m| refuse(&field, m))?;
        if source == SourceKind::Capture {
            let root = file.path.split('/').next().unwrap_or_default();
            if root != CAPTURE_ROOT && root != CHECKPOINT_ROOT || !file.path.contains('/') {
                return Err(refuse(
                    &field,
                    format!("{:?} is under neither {CAPTURE_ROOT}/ nor {CHECKPOINT_ROOT}/", file.path),
                ));
            }
        }
        if !seen.insert(file.path.as_str()) {
            return Err(refuse(&field, format!("{:?} is listed twice", file.path)));
        }
    }
    for file in files {
        let mut dir = file.path.as_str();
        while let Some((parent, _)) = dir.rsplit_once('/') {
            if seen.contains(parent) {
                return Err(refuse("files", format!("{parent:?} is a file and the directory of {:?}", file.path)));
            }
            dir = parent;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const DIGEST: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    fn sample() -> Manifest {
        Manifest::new(
            SourceKind::Capture,
            1,
            &[3, 2],
            vec![EpochEntry { operator: "3".into(), subtask: 0, epoch: 2 }],
            vec![
                FileEntry { path: "checkpoint/_jobs/1/COMPLETED-1".into(), size: 0, sha256: DIGEST.into() },
                FileEntry { path: "capture/op-3/subtask-0/epoch-2.cap".into(), size: 0, sha256: DIGEST.into() },
            ],
        )
    }

    fn with_file_path(path: &str) -> Vec<u8> {
        let mut m = sample();
        m.files[0].path = path.to_string();
        m.encode()
    }

    #[test]
    fn a_manifest_reads_back_as_it_was_written_in_canonical_order() {
        let m = sample();
        assert_eq!(m.operators, ["2", "3"]);
        assert_eq!(m.files[0].path, "capture/op-3/subtask-0/epoch-2.cap");
        assert_eq!(parse_manifest(&m.encode()).unwrap(), m);
        assert_eq!(sample().encode(), m.encode());
    }

    #[test]
    fn another_format_or_version_is_refused_naming_the_field() {
        let text = String::from_utf8(sample().encode()).unwrap();
        let other = text.replace(FORMAT, "clink-incident-bundle");
        assert_eq!(parse_manifest(other.as_bytes()).unwrap_err().field, "format");
        let newer = text.replace("\"version\": 1", "\"version\": 2");
        assert_eq!(parse_manifest(newer.as_bytes()).unwrap_err().field, "version");
    }

    #[test]
    fn hostile_paths_are_refused_naming_the_path() {
        for bad in [
            "capture/../../etc/passwd",
            "/etc/passwd",
            "capture//x",
            "capture/./x",
            "capture/a\\b",
            "capture/a\nb",
            "elsewhere/x",
            "capture",
            "",
        ] {
            let err = parse_manifest(&with_file_path(bad)).unwrap_err();
            assert!(err.field.starts_with("files["), "{bad:?}: {err}");
        }
        let err = parse_manifest(&with_file_path("checkpoint/_jobs/1/COMPLETED-1")).unwrap_err();
        assert!(err.message.contains("listed twice"), "{err}");
        let err = parse_manifest(&with_file_path("checkpoint/_jobs")).unwrap_err();
        assert!(err.message.contains("is a file and the directory"), "{err}");
    }

    #[test]
    fn a_bundle_may_hold_paths_at_its_root() {
        let mut m = sample();
        m.source = SourceKind::Bundle;
        m.files[0].path = "manifest.json".into();
        assert!(parse_manifest(&m.encode()).is_ok());
    }

    #[test]
    fn bad_digests_unknown_fields_and_deep_nesting_are_refused() {
        let text = String::from_utf8(sample().encode()).unwrap();
        let upper = text.replacen(DIGEST, &DIGEST.to_uppercase(), 1);
        assert!(parse_manifest(upper.as_bytes()).unwrap_err().field.ends_with(".sha256"));
        let extra = text.replacen("\"job\"", "\"jobs\": 1, \"job\"", 1);
        assert_eq!(parse_manifest(extra.as_bytes()).unwrap_err().field, "jobs");
        let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
        assert!(parse_manifest(deep.as_bytes()).is_err());
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = parse_manifest(&bytes);
        }

        #[test]
        fn arbitrary_paths_are_accepted_only_when_safe(path in "[a-z./\\\\\\x00]{0,24}") {
            match parse_manifest(&with_file_path(&format!("capture/{path}"))) {
                Ok(m) => {
                    let p = &m.files[0].path;
                    prop_assert!(!p.split('/').any(|c| c.is_empty() || c == "." || c == ".."));
                    prop_assert!(!p.contains('\\') && !p.contains('\0'));
                }
                Err(e) => prop_assert!(!e.message.is_empty()),
            }
        }

        #[test]
        fn a_mutated_manifest_never_panics(at in 0usize..2048, byte in any::<u8>()) {
            let mut bytes = sample().encode();
            let i = at % bytes.len();
            bytes[i] = byte;
            if let Ok(m) = parse_manifest(&bytes) {
                for f in &m.files {
                    prop_assert!(check_path(&f.path).is_ok());
                }
            }
        }
    }
}
