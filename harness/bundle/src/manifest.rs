//! The incident bundle manifest (`manifest.json`, format
//! `clink-incident-bundle`, version 1) and its reader.
//!
//! The reader is the gate every bundle passes before any check reads it: it
//! refuses an unknown format or a newer version, a manifest over 16 MiB or
//! nested deeper than 64, more than 100,000 artifacts, any field of the wrong
//! type (naming the field), any path that breaks the path rules or has a link
//! on it, and a capture that is not where replay reads its operator, subtask
//! and epoch. Operator ids are decimal text.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use clink_basics::digest::is_sha256_hex;
use clink_basics::fields::{depth, FieldError, Fields};
use clink_basics::ids::{parse_decimal_u64, OperatorId};
use serde::Serialize;
use serde_json::Value as Json;
use thiserror::Error;

use clink_engine::checkpoint::layout::{parse_participant_name, participant_name};

use super::paths::{check_form, kind_of, link_on_path};

pub const FORMAT: &str = "clink-incident-bundle";
pub const VERSION: u64 = 1;
pub const MANIFEST_NAME: &str = "manifest.json";
pub const MAX_MANIFEST_BYTES: u64 = 16 * 1024 * 1024;
pub const MAX_DEPTH: usize = 64;
pub const MAX_ARTIFACTS: usize = 100_000;

/// The artifact roles a bundle holds.
pub const ROLES: [&str; 17] = [
    // The checkpoint directory's lineage, and each run's record of itself
    // (its incarnation, its process and its trace files' stamp).
    "lineage_record",
    "run_record",
    "completed_marker",
    "confirmed_marker",
    "restored_record",
    // The checkpoint a run imported from a dataset: what vouches for a
    // CONFIRMED marker confirmed by the import.
    "imported_record",
    // The commit-confirmed family's receipts, and the handles a stopped
    // in-doubt walk left for the sinks' opens.
    "commit_receipt",
    "unresolved_marker",
    "snapshot_meta",
    "snapshot",
    // The snapshots (and sidecars) of the completed checkpoints that bound a
    // collected sink interval: where the sources stood at each end.
    "interval_state",
    "op_spec",
    "capture",
    "sink_evidence",
    "trace",
    "job_manifest",
    "job_graph",
];

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IncidentManifest {
    pub format: String,
    pub version: u64,
    pub collector: Collector,
    pub job: JobInfo,
    pub selection: Selection,
    pub delivery: Vec<SinkDelivery>,
    pub contents: Contents,
    pub bounds: Bounds,
    pub epochs: Vec<EpochEntry>,
    pub artifacts: Vec<Artifact>,
    pub absent: Vec<Note>,
    pub excluded: Vec<Note>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Collector {
    pub name: String,
    pub version: String,
    pub collected_at_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobInfo {
    /// The job id, decimal text.
    pub id: String,
    pub name: Option<String>,
    /// From the job manifest or --commit-confirmation; `None` when neither said.
    pub requires_commit_confirmation: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Selection {
    /// The checkpoint the bundle is about.
    pub checkpoint: u64,
    /// What the engine's restore rule chose over the markers at collection;
    /// `None` when no rule was known (a checkpoint named without one).
    pub engine_choice: Option<u64>,
    /// The checkpoint --checkpoint named, when one was.
    pub named: Option<u64>,
    pub rule: String,
    pub generation: u32,
    /// Every participant the selected checkpoint's marker records.
    pub participants: Vec<String>,
    pub restored: Option<RestoredInfo>,
    /// How participants' state was written (`file`: snapshot plus sidecar).
    pub participant_state: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RestoredInfo {
    pub restored_from: u64,
    pub next: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SinkDelivery {
    pub operator: String,
    pub uid: String,
    #[serde(rename = "type")]
    pub type_name: String,
    pub family: String,
    pub guarantee: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Contents {
    pub state: bool,
    pub captures: bool,
    pub traces: bool,
    pub job_manifest: bool,
    /// The job graph the selected marker names (absent from bundles of
    /// version 1 markers, which name none).
    pub job_graph: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Bounds {
    pub max_bytes: u64,
    pub max_files: u64,
    pub timeout_s: u64,
}

/// One captured epoch the bundle holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EpochEntry {
    pub operator: String,
    pub subtask: u32,
    pub epoch: u64,
    pub path: String,
    /// `operator` (a transform's events) or `sink` (a sink's recorded input).
    pub role: String,
}

impl EpochEntry {
    pub fn operator_id(&self) -> OperatorId {
        // The reader accepted `operator` as a decimal id (`decimal_text`).
        OperatorId::parse(&self.operator).unwrap_or(OperatorId(0))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Artifact {
    pub path: String,
    pub role: String,
    pub size: u64,
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Note {
    pub what: String,
    pub why: String,
}

/// A bundle the reader accepted.
#[derive(Debug, Clone)]
pub struct Bundle {
    pub root: PathBuf,
    pub manifest: IncidentManifest,
}

impl Bundle {
    pub fn job_id(&self) -> u64 {
        // The reader accepted `job.id` as a decimal id (`decimal_text`).
        parse_decimal_u64(&self.manifest.job.id).unwrap_or(0)
    }

    /// The bundle's copy of the checkpoint directory.
    pub fn checkpoint_dir(&self) -> PathBuf {
        self.root.join("checkpoint")
    }

    pub fn capture_dir(&self) -> PathBuf {
        self.root.join("capture")
    }

    pub fn traces_dir(&self) -> PathBuf {
        self.root.join("traces")
    }

    pub fn artifact(&self, path: &str) -> Option<&Artifact> {
        self.manifest.artifacts.iter().find(|a| a.path == path)
    }
}

/// Why the reader refused a bundle: the field at fault and what was wrong.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("{MANIFEST_NAME}: {field}: {message}")]
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

/// The canonical capture path replay reads for an operator, subtask and epoch.
pub fn capture_path(operator: OperatorId, subtask: u32, epoch: u64) -> String {
    format!("capture/op-{operator}/subtask-{subtask}/epoch-{epoch}.cap")
}

/// Parses a canonical capture path back into its operator, subtask and epoch.
pub fn parse_capture_path(path: &str) -> Option<(OperatorId, u32, u64)> {
    let parts: Vec<&str> = path.split('/').collect();
    let [root, op, sub, file] = parts.as_slice() else {
        return None;
    };
    let op = OperatorId::parse(op.strip_prefix("op-")?)?;
    let sub = u32::try_from(parse_decimal_u64(sub.strip_prefix("subtask-")?)?).ok()?;
    let epoch = clink_engine::capture::parse_epoch_file_name(file)?;
    (*root == "capture" && capture_path(op, sub, epoch) == path).then_some((op, sub, epoch))
}

/// Reads and checks a bundle's manifest.
pub fn read_bundle(root: &Path) -> Result<Bundle, ManifestError> {
    let meta = std::fs::symlink_metadata(root).map_err(|e| refuse("$", format!("{}: {e}", root.display())))?;
    if !meta.is_dir() {
        return Err(refuse("$", format!("{} is not a directory", root.display())));
    }
    if let Some(marker) = clink_basics::files::interrupted_fetch(root) {
        return Err(refuse(
            "$",
            format!(
                "an interrupted `clink capture fetch` left {} ({} is there): fetch again",
                root.display(),
                marker.display()
            ),
        ));
    }
    let path = root.join(MANIFEST_NAME);
    let bytes = clink_basics::files::read_bounded(&path, MAX_MANIFEST_BYTES)
        .map_err(|e| refuse("$", format!("cannot read: {e}")))?;
    let manifest = parse_manifest(&bytes)?;
    check_paths_on_disk(root, &manifest)?;
    Ok(Bundle { root: root.to_path_buf(), manifest })
}

/// Parses manifest bytes with every limit and type rule (no filesystem access).
pub fn parse_manifest(bytes: &[u8]) -> Result<IncidentManifest, ManifestError> {
    let doc: Json = serde_json::from_slice(bytes).map_err(|e| {
        if e.to_string().contains("recursion limit") {
            refuse("$", format!("nested deeper than {MAX_DEPTH} levels"))
        } else {
            refuse("$", format!("not JSON: {e}"))
        }
    })?;
    if depth(&doc) > MAX_DEPTH {
        return Err(refuse("$", format!("nested deeper than {MAX_DEPTH} levels")));
    }
    let root = Fields::object(&doc, "$")?;
    let format = root.str("format")?;
    if format != FORMAT {
        return Err(refuse("format", format!("expected {FORMAT:?}, found {format:?}")));
    }
    let version = root.u64("version")?;
    if version > VERSION {
        return Err(refuse("version", format!("version {version} is newer than this build reads ({VERSION})")));
    }
    if version == 0 {
        return Err(refuse("version", "version 0 does not exist"));
    }
    root.only(&[
        "format",
        "version",
        "collector",
        "job",
        "selection",
        "delivery",
        "contents",
        "bounds",
        "epochs",
        "artifacts",
        "absent",
        "excluded",
    ])?;
    let artifacts = root.array("artifacts")?;
    if artifacts.len() > MAX_ARTIFACTS {
        return Err(refuse("artifacts", format!("{} artifacts exceed the limit of {MAX_ARTIFACTS}", artifacts.len())));
    }
    let manifest = IncidentManifest {
        format: format.to_string(),
        version,
        collector: collector(&root.child("collector")?)?,
        job: job_info(&root.child("job")?)?,
        selection: selection(&root.child("selection")?)?,
        delivery: root.objects("delivery", sink_delivery)?,
        contents: contents(&root.child("contents")?)?,
        bounds: bounds(&root.child("bounds")?)?,
        epochs: root.objects("epochs", epoch_entry)?,
        artifacts: root.objects("artifacts", artifact)?,
        absent: root.objects("absent", note)?,
        excluded: root.objects("excluded", note)?,
    };
    refuse_duplicates(&manifest)?;
    check_kinds(&manifest)?;
    Ok(manifest)
}

/// Every artifact is what its path says: a path no collector writes, a role
/// the path contradicts, or another job's path is malformed. The checks find
/// evidence by path, so a label can never hide a file from them or pass one
/// off as another.
fn check_kinds(m: &IncidentManifest) -> Result<(), ManifestError> {
    let job = parse_decimal_u64(&m.job.id);
    for (i, a) in m.artifacts.iter().enumerate() {
        let Some(kind) = kind_of(&a.path) else {
            return Err(refuse(
                format!("artifacts[{i}].path"),
                format!("{:?} is not a path the collector writes (the engine's layout under checkpoint/ and capture/, traces/<role>-<pid>-<start>.ndjson, job/manifest.json)", a.path),
            ));
        };
        if !kind.roles().contains(&a.role.as_str()) {
            return Err(refuse(
                format!("artifacts[{i}].role"),
                format!(
                    "{:?} is listed as {:?}, but its path says it is a {} ({})",
                    a.path,
                    a.role,
                    kind.roles()[0],
                    kind.roles().join(" or ")
                ),
            ));
        }
        if let Some(named) = kind.job() {
            if Some(named) != job {
                return Err(refuse(
                    format!("artifacts[{i}].path"),
                    format!("{:?} is a path of job {named}; the bundle is of job {}", a.path, m.job.id),
                ));
            }
        }
    }
    for (i, e) in m.epochs.iter().enumerate() {
        if m.artifacts.iter().all(|a| a.path != e.path) {
            return Err(refuse(format!("epochs[{i}].path"), format!("{:?} is not a listed artifact", e.path)));
        }
    }
    Ok(())
}

/// A list that names one thing twice is malformed: which entry counts would be a guess.
fn refuse_duplicates(m: &IncidentManifest) -> Result<(), ManifestError> {
    fn first_repeat<K: Ord>(keys: impl Iterator<Item = K>) -> Option<usize> {
        let mut seen = BTreeSet::new();
        for (i, key) in keys.enumerate() {
            if !seen.insert(key) {
                return Some(i);
            }
        }
        None
    }
    let checks: [(&str, Option<usize>); 6] = [
        ("artifacts", first_repeat(m.artifacts.iter().map(|a| a.path.as_str()))),
        ("epochs", first_repeat(m.epochs.iter().map(|e| e.path.as_str()))),
        ("selection.participants", first_repeat(m.selection.participants.iter())),
        ("delivery", first_repeat(m.delivery.iter().map(|d| d.operator.as_str()))),
        ("absent", first_repeat(m.absent.iter())),
        ("excluded", first_repeat(m.excluded.iter())),
    ];
    match checks.into_iter().find_map(|(list, at)| at.map(|i| (list, i))) {
        Some((list, i)) => {
            Err(refuse(format!("{list}[{i}]"), "repeats an earlier entry; a list names each thing once"))
        }
        None => Ok(()),
    }
}

fn decimal_text(f: &Fields<'_>, field: &str) -> Result<String, FieldError> {
    Ok(f.decimal_id(field)?.to_string())
}

fn collector(f: &Fields<'_>) -> Result<Collector, FieldError> {
    f.only(&["name", "version", "collected_at_ms"])?;
    Ok(Collector {
        name: f.str("name")?.into(),
        version: f.str("version")?.into(),
        collected_at_ms: f.u64("collected_at_ms")?,
    })
}

fn job_info(f: &Fields<'_>) -> Result<JobInfo, FieldError> {
    f.only(&["id", "name", "requires_commit_confirmation"])?;
    Ok(JobInfo {
        id: decimal_text(f, "id")?,
        name: f.optional("name", |f, k| Ok(f.str(k)?.to_string()))?,
        requires_commit_confirmation: f.optional("requires_commit_confirmation", |f, k| f.boolean(k))?,
    })
}

fn selection(f: &Fields<'_>) -> Result<Selection, FieldError> {
    f.only(&[
        "checkpoint",
        "engine_choice",
        "named",
        "rule",
        "generation",
        "participants",
        "restored",
        "participant_state",
    ])?;
    let restored = f.optional("restored", |f, k| {
        let r = f.child(k)?;
        r.only(&["restored_from", "next"])?;
        Ok(RestoredInfo { restored_from: r.u64("restored_from")?, next: r.u64("next")? })
    })?;
    let participants = f.str_list("participants")?;
    for (i, p) in participants.iter().enumerate() {
        // A participant's name becomes a directory name: only the canonical form.
        let canonical = parse_participant_name(p).map(|(op, s)| participant_name(op, s));
        if canonical.as_deref() != Some(p.as_str()) {
            return Err(FieldError::new(
                format!("selection.participants[{i}]"),
                format!("{p:?} is not a participant name (op-<operator id>-<subtask>)"),
            ));
        }
    }
    Ok(Selection {
        checkpoint: f.u64("checkpoint")?,
        engine_choice: f.optional("engine_choice", |f, k| f.u64(k))?,
        named: f.optional("named", |f, k| f.u64(k))?,
        rule: f.str("rule")?.into(),
        generation: f.u32("generation")?,
        participants,
        restored,
        participant_state: f.str("participant_state")?.into(),
    })
}

fn sink_delivery(f: &Fields<'_>) -> Result<SinkDelivery, FieldError> {
    f.only(&["operator", "uid", "type", "family", "guarantee"])?;
    Ok(SinkDelivery {
        operator: decimal_text(f, "operator")?,
        uid: f.str("uid")?.into(),
        type_name: f.str("type")?.into(),
        family: f.str("family")?.into(),
        guarantee: f.str("guarantee")?.into(),
    })
}

fn contents(f: &Fields<'_>) -> Result<Contents, FieldError> {
    f.only(&["state", "captures", "traces", "job_manifest", "job_graph"])?;
    Ok(Contents {
        state: f.boolean("state")?,
        captures: f.boolean("captures")?,
        traces: f.boolean("traces")?,
        job_manifest: f.boolean("job_manifest")?,
        job_graph: f.optional("job_graph", |f, k| f.boolean(k))?.unwrap_or(false),
    })
}

fn bounds(f: &Fields<'_>) -> Result<Bounds, FieldError> {
    f.only(&["max_bytes", "max_files", "timeout_s"])?;
    Ok(Bounds { max_bytes: f.u64("max_bytes")?, max_files: f.u64("max_files")?, timeout_s: f.u64("timeout_s")? })
}

fn epoch_entry(f: &Fields<'_>) -> Result<EpochEntry, FieldError> {
    f.only(&["operator", "subtask", "epoch", "path", "role"])?;
    let entry = EpochEntry {
        operator: decimal_text(f, "operator")?,
        subtask: f.u32("subtask")?,
        epoch: f.u64("epoch")?,
        path: f.str("path")?.into(),
        role: f.str("role")?.into(),
    };
    check_form(&entry.path).map_err(|e| f.error("path", e.0))?;
    let canonical = capture_path(entry.operator_id(), entry.subtask, entry.epoch);
    if entry.path != canonical {
        return Err(f.error("path", format!("{:?} is not where replay reads this epoch ({canonical:?})", entry.path)));
    }
    if !["operator", "sink"].contains(&entry.role.as_str()) {
        return Err(f.error("role", format!("{:?} is not operator or sink", entry.role)));
    }
    Ok(entry)
}

fn artifact(f: &Fields<'_>) -> Result<Artifact, FieldError> {
    f.only(&["path", "role", "size", "sha256"])?;
    let a = Artifact {
        path: f.str("path")?.into(),
        role: f.str("role")?.into(),
        size: f.u64("size")?,
        sha256: f.str("sha256")?.into(),
    };
    check_form(&a.path).map_err(|e| f.error("path", e.0))?;
    if !ROLES.contains(&a.role.as_str()) {
        return Err(f.error("role", format!("unknown role {:?}", a.role)));
    }
    if !is_sha256_hex(&a.sha256) {
        return Err(f.error("sha256", "expected 64 lowercase hex digits"));
    }
    Ok(a)
}

fn note(f: &Fields<'_>) -> Result<Note, FieldError> {
    f.only(&["what", "why"])?;
    Ok(Note { what: f.str("what")?.into(), why: f.str("why")?.into() })
}

/// Refuses a bundle whose listed paths run through a link.
fn check_paths_on_disk(root: &Path, manifest: &IncidentManifest) -> Result<(), ManifestError> {
    for (i, a) in manifest.artifacts.iter().enumerate() {
        if let Some(link) = link_on_path(root, &a.path) {
            return Err(refuse(
                format!("artifacts[{i}].path"),
                format!("{:?} runs through a symbolic link at {}", a.path, link.display()),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const GOOD: &str = include_str!("../../../fixtures/bundles/good/manifest.json");

    #[test]
    fn the_fixture_manifest_reads() {
        let m = parse_manifest(GOOD.as_bytes()).unwrap();
        assert!(!m.artifacts.is_empty() && !m.epochs.is_empty());
    }

    #[test]
    fn limits_are_enforced_by_field() {
        let deep = format!("{}{}", "[".repeat(70), "]".repeat(70));
        assert!(parse_manifest(deep.as_bytes()).unwrap_err().message.contains("deeper than 64"));
        let mut doc: Json = serde_json::from_str(GOOD).unwrap();
        let one = doc["artifacts"][0].clone();
        doc["artifacts"] = Json::Array(vec![one; MAX_ARTIFACTS + 1]);
        assert_eq!(parse_manifest(doc.to_string().as_bytes()).unwrap_err().field, "artifacts");
        let mut doc: Json = serde_json::from_str(GOOD).unwrap();
        doc["epochs"][0]["operator"] = Json::from(3);
        let err = parse_manifest(doc.to_string().as_bytes()).unwrap_err();
        assert_eq!(err.field, "epochs[0].operator", "{err}");
        let mut doc: Json = serde_json::from_str(GOOD).unwrap();
        doc["epochs"][0]["path"] = Json::from("capture/op-1/subtask-0/epoch-999.cap");
        assert_eq!(parse_manifest(doc.to_string().as_bytes()).unwrap_err().field, "epochs[0].path");
    }

    /// Every path to a value in a JSON document.
    fn paths(value: &Json, at: String, out: &mut Vec<String>) {
        out.push(at.clone());
        match value {
            Json::Object(map) => map.iter().for_each(|(k, v)| paths(v, format!("{at}/{k}"), out)),
            Json::Array(items) => items.iter().enumerate().for_each(|(i, v)| paths(v, format!("{at}/{i}"), out)),
            _ => {}
        }
    }

    fn hostile() -> impl Strategy<Value = Json> {
        prop_oneof![
            Just(Json::Null),
            any::<bool>().prop_map(Json::Bool),
            any::<i64>().prop_map(Json::from),
            any::<u64>().prop_map(Json::from),
            ".{0,16}".prop_map(Json::String),
            Just(Json::String("../../etc/passwd".into())),
            Just(Json::String("/abs".into())),
            Just(Json::String("capture/op-1/subtask-0/epoch-1.cap".into())),
            Just(serde_json::json!([])),
            Just(serde_json::json!({})),
            Just(serde_json::json!([[[[]]]])),
        ]
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = parse_manifest(&bytes);
        }

        #[test]
        fn a_mutated_manifest_is_read_or_refused_naming_a_field(pick in any::<prop::sample::Index>(), value in hostile()) {
            let mut doc: Json = serde_json::from_str(GOOD).unwrap();
            let mut all = Vec::new();
            paths(&doc, String::new(), &mut all);
            let pointer = pick.get(&all).clone();
            if let Some(slot) = doc.pointer_mut(&pointer) {
                *slot = value;
            }
            match parse_manifest(doc.to_string().as_bytes()) {
                Ok(m) => prop_assert_eq!(m.format, FORMAT),
                Err(e) => {
                    prop_assert!(!e.field.is_empty());
                    prop_assert!(e.to_string().contains(&e.field));
                }
            }
        }

        #[test]
        fn removing_any_field_never_panics(pick in any::<prop::sample::Index>()) {
            let mut doc: Json = serde_json::from_str(GOOD).unwrap();
            let mut all = Vec::new();
            paths(&doc, String::new(), &mut all);
            let pointer = pick.get(&all).clone();
            if let Some((parent, key)) = pointer.rsplit_once('/') {
                if let Some(Json::Object(map)) = doc.pointer_mut(parent) {
                    map.remove(key);
                }
            }
            let _ = parse_manifest(doc.to_string().as_bytes());
        }
    }

    #[test]
    fn capture_paths_round_trip_and_only_canonical_ones_parse() {
        let p = capture_path(OperatorId(u64::MAX), 3, 12);
        assert_eq!(p, "capture/op-18446744073709551615/subtask-3/epoch-12.cap");
        assert_eq!(parse_capture_path(&p), Some((OperatorId(u64::MAX), 3, 12)));
        for bad in [
            "capture/op-03/subtask-0/epoch-1.cap",
            "capture/op-3/subtask-0/epoch-1.snap",
            "checkpoint/op-3/subtask-0/epoch-1.cap",
        ] {
            assert_eq!(parse_capture_path(bad), None, "{bad}");
        }
    }
}
