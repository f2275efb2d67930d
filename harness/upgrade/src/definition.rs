//! The upgrade test definition (`clink-upgrade-test` version 1), as the gate
//! reads it: the operators' uids, the sinks' output directories, the
//! capabilities a build must report, and (through the reference) the
//! semantics and the seeded input with its cut. Another format or version
//! is refused, never guessed at.
//!
//! It never runs anything and never decides a check.

use std::collections::BTreeMap;
use std::path::Path;

use clink_basics::digest::sha256_hex;
use clink_reference::upgrade::{self, Semantics};
use serde_json::Value as Json;

use crate::UsageError;

/// The largest definition read.
const MAX_BYTES: u64 = 1 << 20;

#[derive(Debug, Clone)]
pub struct Definition {
    pub bytes: Vec<u8>,
    pub sha256: String,
    pub semantics: Semantics,
    /// Role (`source`, `windows`, `idle`) to the operator's uid.
    pub uids: BTreeMap<String, String>,
    /// Role (`windows`, `idle`) to the sink's output directory name.
    pub sinks: BTreeMap<String, String>,
    pub capabilities: Vec<String>,
}

pub const ROLES: [&str; 3] = ["source", "windows", "idle"];

fn strings(doc: &Json, field: &str, keys: &[&str]) -> Result<BTreeMap<String, String>, UsageError> {
    let mut out = BTreeMap::new();
    for key in keys {
        let v = doc
            .get(field)
            .and_then(|o| o.get(*key))
            .and_then(Json::as_str)
            .filter(|s| !s.is_empty() && !s.contains('/') && *s != ".." && *s != ".")
            .ok_or_else(|| UsageError::Bad(format!("test definition: {field}.{key} must be a plain name")))?;
        out.insert((*key).to_string(), v.to_string());
    }
    Ok(out)
}

/// The capabilities a build must report: every entry a name, none dropped.
fn capabilities(doc: &Json) -> Result<Vec<String>, UsageError> {
    let list = doc
        .get("capabilities")
        .and_then(Json::as_array)
        .ok_or_else(|| UsageError::Bad("test definition: capabilities must be a list of names".into()))?;
    list.iter()
        .enumerate()
        .map(|(i, c)| match c.as_str() {
            Some(name) if !name.trim().is_empty() => Ok(name.to_string()),
            _ => Err(UsageError::Bad(format!("test definition: capabilities[{i}] is {c}, not a capability's name"))),
        })
        .collect()
}

impl Definition {
    pub fn read(path: &Path) -> Result<Definition, UsageError> {
        let io = |source| UsageError::Io { path: path.to_path_buf(), source };
        let meta = std::fs::symlink_metadata(path).map_err(io)?;
        if !meta.is_file() || meta.len() > MAX_BYTES {
            return Err(UsageError::Bad(format!(
                "{}: a test definition is a regular file of at most {MAX_BYTES} bytes",
                path.display()
            )));
        }
        let bytes = std::fs::read(path).map_err(io)?;
        Definition::parse(bytes)
    }

    pub fn parse(bytes: Vec<u8>) -> Result<Definition, UsageError> {
        let semantics = upgrade::semantics(&bytes).map_err(|e| UsageError::Bad(e.to_string()))?;
        let doc: Json = serde_json::from_slice(&bytes).map_err(|e| UsageError::Bad(e.to_string()))?;
        let uids = strings(&doc, "uids", &ROLES)?;
        let sinks = strings(&doc, "sinks", &["windows", "idle"])?;
        let capabilities = capabilities(&doc)?;
        Ok(Definition { sha256: sha256_hex(&bytes), bytes, semantics, uids, sinks, capabilities })
    }

    /// The role of an operator uid, when the definition names it.
    pub fn role_of(&self, uid: &str) -> Option<&str> {
        self.uids.iter().find(|(_, u)| u.as_str() == uid).map(|(r, _)| r.as_str())
    }

    /// The input's segments, `(name, text)`; the first `cut_after` precede the cut.
    pub fn input(&self) -> Vec<(String, String)> {
        upgrade::generate_input(&self.semantics)
    }

    pub fn cut(&self) -> usize {
        self.semantics.cut_after as usize
    }

    /// The greatest watermark of the input before the cut: what the
    /// savepoint at the cut records as its last.
    pub fn last_watermark_at_cut(&self) -> Option<i64> {
        self.input()[..self.cut()]
            .iter()
            .flat_map(|(_, t)| t.lines())
            .filter_map(|l| l.strip_prefix("W,"))
            .filter_map(|t| t.parse().ok())
            .max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURE: &str = include_str!("../../../fixtures/upgrade/test.json");

    #[test]
    fn the_fixture_reads_and_another_version_is_refused() {
        let d = Definition::parse(FIXTURE.as_bytes().to_vec()).unwrap();
        assert_eq!(d.uids["windows"], "windows");
        assert!(d.capabilities.iter().any(|c| c == "savepoint.request"));
        assert!(d.cut() >= 1);
        let other = FIXTURE.replace("\"version\": 1", "\"version\": 2");
        assert!(Definition::parse(other.into_bytes()).is_err());
        let bad_uid = FIXTURE.replace("\"idle\": \"idle\"", "\"idle\": \"../x\"");
        assert!(Definition::parse(bad_uid.into_bytes()).is_err());
    }

    #[test]
    fn a_capability_that_is_not_a_name_is_refused_never_dropped() {
        for bad in ["42", "null", "\"\"", "{\"name\": \"job.run\"}"] {
            let doc = FIXTURE.replace("\"job.run\",", &format!("\"job.run\", {bad},"));
            let err = Definition::parse(doc.into_bytes()).unwrap_err().to_string();
            assert!(err.contains("capabilities[1]"), "{bad}: {err}");
        }
    }
}
