//! The evidence set (`clink-upgrade-evidence` version 1): its layout, how
//! `record` seals it, and how `check` verifies it before anything runs.
//!
//! ```text
//! evidence.json    the index: the definition's SHA-256, the baseline's identity,
//!                  the savepoint, the record-time checks, every other file's
//!                  SHA-256 and size; its own SHA-256 is the set's digest
//! test.json        the test definition, byte for byte
//! input/           every segment, the continuation included
//! checkpoint/      the savepoint as a checkpoint dataset (clink checkpoint export)
//! output/<sink>/   what the baseline committed before the savepoint
//! reference.json   the reference's expected rows and states
//! ```
//!
//! Verification follows no link, reads no file past a size bound, and
//! accepts no file the index does not list. Nothing in a set is ever run.

use std::collections::BTreeMap;
use std::path::Path;

use clink_basics::digest::{sha256_file, sha256_hex};
use serde::{Deserialize, Serialize};

pub const FORMAT: &str = "clink-upgrade-evidence";
pub const VERSION: u64 = 1;
pub const INDEX: &str = "evidence.json";
/// No file of a set is read past this size.
const MAX_FILE: u64 = 1 << 30;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FileEntry {
    pub sha256: String,
    pub size: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Identity {
    pub clink: FileIdentity,
    pub job: FileIdentity,
    /// What the build says it is (`clink capabilities`), when it says.
    #[serde(default)]
    pub build: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FileIdentity {
    pub path: String,
    pub sha256: String,
    pub size: u64,
}

impl FileIdentity {
    pub fn of(path: &Path) -> Result<FileIdentity, String> {
        let d = sha256_file(path, MAX_FILE).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(FileIdentity { path: path.display().to_string(), sha256: d.sha256, size: d.bytes })
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SavepointOperator {
    pub uid: String,
    pub id: String,
    pub subtasks: u64,
    pub holds_state: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Savepoint {
    pub job: String,
    pub checkpoint: u64,
    pub dataset_digest: String,
    pub last_watermark: Option<i64>,
    pub operators: Vec<SavepointOperator>,
}

/// `evidence.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Index {
    pub format: String,
    pub version: u64,
    pub test_sha256: String,
    pub baseline: Identity,
    pub tools: Identity,
    pub savepoint: Savepoint,
    pub record_checks: Vec<serde_json::Value>,
    pub files: BTreeMap<String, FileEntry>,
}

/// Every regular file under `dir` (relative names with `/`), hashed; a
/// link or anything else that is not a file or directory is refused.
pub fn hash_tree(dir: &Path) -> Result<BTreeMap<String, FileEntry>, String> {
    fn walk(root: &Path, rel: &str, out: &mut BTreeMap<String, FileEntry>) -> Result<(), String> {
        let here = if rel.is_empty() { root.to_path_buf() } else { root.join(rel) };
        let entries = std::fs::read_dir(&here).map_err(|e| format!("{}: {e}", here.display()))?;
        for entry in entries {
            let entry = entry.map_err(|e| format!("{}: {e}", here.display()))?;
            let name = entry
                .file_name()
                .into_string()
                .map_err(|n| format!("{}: a name that is not UTF-8: {n:?}", here.display()))?;
            let path = if rel.is_empty() { name.clone() } else { format!("{rel}/{name}") };
            let kind = entry.file_type().map_err(|e| format!("{path}: {e}"))?;
            if kind.is_symlink() {
                return Err(format!("{path}: a link (never followed)"));
            } else if kind.is_dir() {
                walk(root, &path, out)?;
            } else if kind.is_file() {
                let d = sha256_file(&root.join(&path), MAX_FILE).map_err(|e| format!("{path}: {e}"))?;
                out.insert(path, FileEntry { sha256: d.sha256, size: d.bytes });
            } else {
                return Err(format!("{path}: neither a file nor a directory"));
            }
        }
        Ok(())
    }
    let mut out = BTreeMap::new();
    walk(dir, "", &mut out)?;
    Ok(out)
}

/// Writes `evidence.json` over the files under `dir` and returns its digest.
pub fn seal(dir: &Path, mut index: Index) -> Result<String, String> {
    let mut files = hash_tree(dir)?;
    files.remove(INDEX);
    index.files = files;
    let bytes = serde_json::to_vec_pretty(&index).map_err(|e| e.to_string())?;
    let path = dir.join(INDEX);
    std::fs::write(&path, &bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(sha256_hex(&bytes))
}

/// The verdict on a set, before anything runs.
#[derive(Debug)]
pub enum Verdict {
    Verified(Box<Index>),
    Failed(String),
    /// A set of another format version: not judged.
    Unsupported(String),
}

/// Verifies a set against its digest and the test definition given.
pub fn verify(dir: &Path, digest: &str, test_sha256: &str, test_bytes: &[u8]) -> Verdict {
    let path = dir.join(INDEX);
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.is_file() && m.len() <= MAX_FILE => {}
        Ok(_) => return Verdict::Failed(format!("{INDEX} is not a regular file within the size bound")),
        Err(e) => return Verdict::Failed(format!("{}: {e}", path.display())),
    }
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) => return Verdict::Failed(format!("{}: {e}", path.display())),
    };
    let actual = sha256_hex(&bytes);
    if actual != digest {
        return Verdict::Failed(format!("{INDEX} has SHA-256 {actual}, the digest given is {digest}"));
    }
    let doc: serde_json::Value = match serde_json::from_slice(&bytes) {
        Ok(d) => d,
        Err(e) => return Verdict::Failed(format!("{INDEX}: {e}")),
    };
    if doc.get("format").and_then(|f| f.as_str()) != Some(FORMAT) {
        return Verdict::Unsupported(format!("{INDEX} is not a {FORMAT} document"));
    }
    if doc.get("version").and_then(|v| v.as_u64()) != Some(VERSION) {
        return Verdict::Unsupported(format!(
            "{FORMAT} version {} is unsupported (this gate reads {VERSION})",
            doc["version"]
        ));
    }
    let index: Index = match serde_json::from_value(doc) {
        Ok(i) => i,
        Err(e) => return Verdict::Failed(format!("{INDEX}: {e}")),
    };
    let present = match hash_tree(dir) {
        Ok(mut p) => {
            p.remove(INDEX);
            p
        }
        Err(e) => return Verdict::Failed(e),
    };
    for (name, entry) in &index.files {
        match present.get(name) {
            None => return Verdict::Failed(format!("{name}: listed in {INDEX} but absent")),
            Some(p) if p != entry => {
                return Verdict::Failed(format!(
                    "{name}: {} bytes, SHA-256 {}; the index records {} bytes, SHA-256 {}",
                    p.size, p.sha256, entry.size, entry.sha256
                ))
            }
            Some(_) => {}
        }
    }
    if let Some(extra) = present.keys().find(|n| !index.files.contains_key(*n)) {
        return Verdict::Failed(format!("{extra}: present but not listed in {INDEX}"));
    }
    match index.files.get("checkpoint/dataset.json") {
        Some(e) if e.sha256 == index.savepoint.dataset_digest => {}
        Some(e) => {
            return Verdict::Failed(format!(
                "the dataset's index has SHA-256 {}, the savepoint records {}",
                e.sha256, index.savepoint.dataset_digest
            ))
        }
        None => return Verdict::Failed("the set holds no checkpoint/dataset.json".into()),
    }
    if index.test_sha256 != test_sha256 {
        return Verdict::Failed(format!(
            "the evidence was recorded for test definition {}, not the one given ({test_sha256})",
            index.test_sha256
        ));
    }
    match std::fs::read(dir.join("test.json")) {
        Ok(b) if b == test_bytes => {}
        _ => return Verdict::Failed("test.json is not the test definition given, byte for byte".into()),
    }
    Verdict::Verified(Box::new(index))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(dir: &Path) -> (String, Vec<u8>) {
        let test = b"{\"t\": 1}".to_vec();
        std::fs::write(dir.join("test.json"), &test).unwrap();
        std::fs::create_dir_all(dir.join("checkpoint")).unwrap();
        std::fs::write(dir.join("checkpoint/dataset.json"), b"{}").unwrap();
        let id = FileIdentity { path: "x".into(), sha256: "0".repeat(64), size: 0 };
        let identity = Identity { clink: id.clone(), job: id, build: None };
        let index = Index {
            format: FORMAT.into(),
            version: VERSION,
            test_sha256: sha256_hex(&test),
            baseline: identity.clone(),
            tools: identity,
            savepoint: Savepoint {
                job: "1".into(),
                checkpoint: 1,
                dataset_digest: sha256_hex(b"{}"),
                last_watermark: None,
                operators: vec![],
            },
            record_checks: vec![],
            files: BTreeMap::new(),
        };
        (seal(dir, index).unwrap(), test)
    }

    #[test]
    fn a_sealed_set_verifies_and_any_change_is_caught() {
        let dir = tempfile::tempdir().unwrap();
        let (digest, test) = sample(dir.path());
        let t = sha256_hex(&test);
        assert!(matches!(verify(dir.path(), &digest, &t, &test), Verdict::Verified(_)));
        assert!(matches!(verify(dir.path(), &"0".repeat(64), &t, &test), Verdict::Failed(_)));
        assert!(matches!(verify(dir.path(), &digest, &"1".repeat(64), &test), Verdict::Failed(_)));
        std::fs::write(dir.path().join("extra"), b"x").unwrap();
        let Verdict::Failed(why) = verify(dir.path(), &digest, &t, &test) else { panic!("an extra file verified") };
        assert!(why.contains("extra"), "{why}");
        std::fs::remove_file(dir.path().join("extra")).unwrap();
        std::fs::write(dir.path().join("checkpoint/dataset.json"), b"{").unwrap();
        assert!(matches!(verify(dir.path(), &digest, &t, &test), Verdict::Failed(_)));
    }

    #[test]
    fn a_link_in_the_set_is_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let (digest, test) = sample(dir.path());
        std::os::unix::fs::symlink("/etc/hostname", dir.path().join("input")).unwrap();
        let Verdict::Failed(why) = verify(dir.path(), &digest, &sha256_hex(&test), &test) else {
            panic!("a set with a link verified")
        };
        assert!(why.contains("a link"), "{why}");
    }

    #[test]
    fn another_version_is_unsupported() {
        let dir = tempfile::tempdir().unwrap();
        let (_, test) = sample(dir.path());
        let path = dir.path().join(INDEX);
        let text = std::fs::read_to_string(&path).unwrap().replace("\"version\": 1", "\"version\": 2");
        std::fs::write(&path, &text).unwrap();
        let digest = sha256_hex(text.as_bytes());
        assert!(matches!(verify(dir.path(), &digest, &sha256_hex(&test), &test), Verdict::Unsupported(_)));
    }
}
