//! Bundle mutants: the verifier calibrated as the formal side calibrates its
//! model. From a real incident bundle, every artifact kind and every field of
//! its format is edited semantically (the same field of another subtask,
//! checkpoint or run of the job; one more, one less; dropped; duplicated;
//! reordered; an artifact added that should not be there; two files'
//! contents exchanged; a binary file re-encoded coherently with one field or
//! one event changed), and the manifest re-vouches for every byte written,
//! so integrity passes and only the evidence compared with itself can refute
//! the mutant. Each mutant names the part of the evidence it changes and the
//! profile that examines that part.
//!
//! This crate makes mutants and writes them into directories; it never
//! verifies (the `bundle_mutants` suite runs incident-verify on each), never
//! reads outside the bundle it is given, and never changes that bundle.

mod binary;
mod equivalents;
mod files;
mod json;
mod traces;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use clink_basics::digest::sha256_hex;
use clink_bundle::paths::{kind_of, ArtifactKind};
use serde_json::Value as Json;

pub use equivalents::{Equivalent, Equivalents};

/// What part of the evidence a mutant changes, and so which profile must
/// examine (and refute) it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Part {
    /// Which files the manifest lists, with which sizes and hashes.
    Listing,
    /// The manifest's claims about the job, the selection and the contents.
    Claims,
    /// An artifact's contents (a marker, a record, a sidecar, a snapshot, a
    /// capture's header, op.json, sink evidence, a graph, the job manifest).
    Contents,
    /// The events of a captured operator epoch (what replay replays).
    OperatorEvents,
    /// A trace file's lines (their history, which TLC judges).
    Traces,
}

impl Part {
    /// The lowest profile that examines this part whole.
    pub fn examined_by(self) -> &'static str {
        match self {
            Part::Listing => "integrity",
            Part::Claims | Part::Contents => "consistency",
            Part::OperatorEvents => "replay",
            Part::Traces => "full",
        }
    }
}

/// One change to a bundle directory.
#[derive(Debug, Clone)]
pub enum Edit {
    /// Writes a file and lists it (with `role` when it is new) under its
    /// size and SHA-256.
    Write { path: String, bytes: Vec<u8>, role: String },
    /// Removes a file and its manifest entry.
    Remove { path: String },
    /// Writes a file and leaves the manifest's entry as it was.
    Unvouched { path: String, bytes: Vec<u8> },
    /// Replaces the manifest itself (after every other edit).
    Manifest(Json),
    /// Replaces the manifest's epoch index (a capture added is indexed).
    IndexEpochs(Json),
}

/// A mutant of one bundle.
#[derive(Debug, Clone)]
pub struct Mutant {
    /// Stable and filterable: `<bundle>::<kind>::<artifact>::<field>::<mutation>`.
    pub name: String,
    pub bundle: String,
    /// The artifact kind it changes (`manifest` for the manifest's claims).
    pub kind: String,
    pub part: Part,
    pub edits: Vec<Edit>,
}

/// A bundle read for mutating: its manifest, and every listed file's bytes.
pub(crate) struct Base {
    pub name: String,
    pub manifest: Json,
    pub files: BTreeMap<String, Vec<u8>>,
    pub roles: BTreeMap<String, String>,
}

impl Base {
    fn read(dir: &Path, name: &str) -> Result<Base, String> {
        let manifest: Json = serde_json::from_slice(&fs::read(dir.join("manifest.json")).map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
        let mut files = BTreeMap::new();
        let mut roles = BTreeMap::new();
        for a in manifest["artifacts"].as_array().ok_or("the manifest lists no artifacts")? {
            let path = a["path"].as_str().ok_or("an artifact without a path")?.to_string();
            files.insert(path.clone(), fs::read(dir.join(&path)).map_err(|e| format!("{path}: {e}"))?);
            roles.insert(path, a["role"].as_str().unwrap_or_default().to_string());
        }
        Ok(Base { name: name.to_string(), manifest, files, roles })
    }

    /// The listed paths of a kind, in order.
    pub fn of_kind(&self, wanted: impl Fn(&ArtifactKind) -> bool) -> Vec<(&String, ArtifactKind)> {
        self.files.keys().filter_map(|p| kind_of(p).filter(|k| wanted(k)).map(|k| (p, k))).collect()
    }

    pub fn role(&self, path: &str) -> String {
        self.roles.get(path).cloned().unwrap_or_default()
    }

    pub fn job(&self) -> u64 {
        self.manifest["job"]["id"].as_str().and_then(|j| j.parse().ok()).unwrap_or(0)
    }

    pub fn selected(&self) -> u64 {
        self.manifest["selection"]["checkpoint"].as_u64().unwrap_or(0)
    }

    pub fn mutant(
        &self,
        kind: &str,
        artifact: &str,
        field: &str,
        mutation: &str,
        part: Part,
        edits: Vec<Edit>,
    ) -> Mutant {
        let clean = |s: &str| s.replace("::", ":").replace(' ', "_");
        Mutant {
            name: format!("{}::{kind}::{}::{}::{}", self.name, clean(artifact), clean(field), clean(mutation)),
            bundle: self.name.clone(),
            kind: kind.to_string(),
            part,
            edits,
        }
    }
}

/// Every mutant of the bundle at `dir` (named `name` in the mutants' names).
pub fn generate(dir: &Path, name: &str) -> Result<Vec<Mutant>, String> {
    let base = Base::read(dir, name)?;
    let mut out = Vec::new();
    json::mutants(&base, &mut out);
    binary::mutants(&base, &mut out);
    traces::mutants(&base, &mut out);
    files::mutants(&base, &mut out);
    // One name, one mutant: a generator that names two alike would hide one.
    let mut seen = std::collections::BTreeSet::new();
    out.retain(|m| seen.insert(m.name.clone()));
    Ok(out)
}

/// The short kind name of a path, for mutants' names and the per-kind rates.
pub fn kind_label(path: &str) -> &'static str {
    kind_of(path).as_ref().map_or("unknown", json::label)
}

/// Writes the mutant of the bundle at `base` into `dest` (which must not
/// exist): unchanged files hard-linked where the file system allows (copied
/// otherwise; the verifier never writes), the edits applied, and the
/// manifest re-vouching every file written.
pub fn materialize(base: &Path, mutant: &Mutant, dest: &Path) -> Result<(), String> {
    link_tree(base, dest).map_err(|e| format!("{}: {e}", dest.display()))?;
    let mut manifest: Json = serde_json::from_slice(&fs::read(dest.join("manifest.json")).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    let mut replacement = None;
    for edit in &mutant.edits {
        match edit {
            Edit::Write { path, bytes, role } => {
                write_new(&dest.join(path), bytes)?;
                vouch(&mut manifest, path, role, bytes);
            }
            Edit::Unvouched { path, bytes } => write_new(&dest.join(path), bytes)?,
            Edit::Remove { path } => {
                fs::remove_file(dest.join(path)).map_err(|e| format!("{path}: {e}"))?;
                if let Some(list) = manifest["artifacts"].as_array_mut() {
                    list.retain(|a| a["path"] != path.as_str());
                }
                if let Some(list) = manifest["epochs"].as_array_mut() {
                    list.retain(|e| e["path"] != path.as_str());
                }
            }
            Edit::Manifest(doc) => replacement = Some(doc.clone()),
            Edit::IndexEpochs(list) => manifest["epochs"] = list.clone(),
        }
    }
    let manifest = replacement.unwrap_or(manifest);
    write_new(&dest.join("manifest.json"), &serde_json::to_vec_pretty(&manifest).map_err(|e| e.to_string())?)
}

/// The manifest entry of `path`, added when missing, vouching for `bytes`.
fn vouch(manifest: &mut Json, path: &str, role: &str, bytes: &[u8]) {
    let Some(list) = manifest["artifacts"].as_array_mut() else { return };
    let entry = serde_json::json!({"path": path, "role": role, "size": bytes.len(), "sha256": sha256_hex(bytes)});
    match list.iter_mut().find(|a| a["path"] == path) {
        Some(a) => {
            a["size"] = entry["size"].clone();
            a["sha256"] = entry["sha256"].clone();
        }
        None => list.push(entry),
    }
}

/// Replaces a file by a new one (never writing through a hard link).
fn write_new(path: &Path, bytes: &[u8]) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let _ = fs::remove_file(path);
    fs::write(path, bytes).map_err(|e| format!("{}: {e}", path.display()))
}

fn link_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    fs::create_dir(to)?;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if entry.file_type()?.is_dir() {
            link_tree(&src, &dst)?;
        } else if fs::hard_link(&src, &dst).is_err() {
            fs::copy(&src, &dst)?;
        }
    }
    Ok(())
}
