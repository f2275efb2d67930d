//! `clink incident-collect`: gathers a job's evidence into a bundle.
//!
//! The checkpoint is chosen by the engine's own restore rule; every state path
//! comes from that one marker. Nothing is pinned while the job runs; instead
//! the markers are listed before and after copying and must not differ, every
//! file is hashed while copied and its size and modification time checked
//! afterwards. The bundle is built in a temporary directory beside `--out` and
//! published with one rename that never replaces anything; every refusal
//! removes the temporary directory.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use clink_engine::capture::{subtask_dir, OpSpecFile};
use clink_engine::checkpoint::backend::read_dir_names;
use clink_engine::checkpoint::layout::{parse_completed_marker_name, parse_confirmed_marker_name, RESTORED_NAME};
use clink_engine::checkpoint::markers::read_completed;
use clink_engine::checkpoint::{restore_point_on_disk_by, CheckpointLayout, RestoreRule};
use clink_engine::job::{parse_decimal_u64, OperatorId};
use clink_engine::job_manifest;
use clink_engine::registry;
use serde_json::Value as Json;
use sha2::{Digest, Sha256};

use super::manifest::{
    capture_path, Artifact, Bounds, Collector, Contents, EpochEntry, IncidentManifest, JobInfo, Note, RestoredInfo,
    Selection, SinkDelivery, FORMAT, MANIFEST_NAME, VERSION,
};
use crate::replay::start::{epoch_start, StartPoint};

/// Test-only: sleep this many milliseconds after the first copied file, so a
/// test can make a checkpoint complete in the middle of a collection.
pub const PAUSE_ENV: &str = "CLINK_TEST_COLLECT_PAUSE_MS";

#[derive(Debug, Clone)]
pub struct CollectOptions {
    pub checkpoint_dir: PathBuf,
    pub job: u64,
    pub ha_dir: Option<PathBuf>,
    pub capture_dir: Option<PathBuf>,
    pub trace_dir: Option<PathBuf>,
    pub include_state: bool,
    pub include_captures: bool,
    pub checkpoint: Option<u64>,
    pub commit_confirmation: Option<bool>,
    pub ops: Option<Vec<OperatorId>>,
    pub epochs: Option<Vec<u64>>,
    pub out: PathBuf,
    pub max_bytes: u64,
    pub max_files: u64,
    pub timeout_s: u64,
}

/// The kinds of refusal `--json` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    /// The evidence changed while it was copied (a checkpoint completed, a file was rewritten).
    Changed,
    /// Evidence the selected checkpoint needs is not there.
    Missing,
    /// A bound (--max-bytes, --max-files) would be passed by required evidence.
    Bound,
    /// --timeout-s passed.
    Timeout,
    Other,
}

impl RefusalKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalKind::Changed => "changed",
            RefusalKind::Missing => "missing",
            RefusalKind::Bound => "bound",
            RefusalKind::Timeout => "timeout",
            RefusalKind::Other => "other",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Refusal {
    pub kind: RefusalKind,
    pub reason: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "refused ({}): {}; nothing was published; collect again, or stop the job first",
            self.kind.as_str(),
            self.reason
        )
    }
}

fn refusal(kind: RefusalKind, reason: impl Into<String>) -> Refusal {
    Refusal { kind, reason: reason.into() }
}

/// What a published bundle holds.
#[derive(Debug, Clone)]
pub struct Collected {
    pub out: PathBuf,
    pub checkpoint: u64,
    pub engine_choice: u64,
    pub files: u64,
    pub bytes: u64,
    pub epochs: usize,
    pub seconds: f64,
}

/// Parameter names that suggest a credential; their values are redacted.
const CREDENTIAL_WORDS: [&str; 8] =
    ["password", "passwd", "secret", "token", "credential", "apikey", "api_key", "private_key"];

pub const REDACTED: &str = "<redacted>";

/// Replaces every value whose key suggests a credential, at any depth.
pub fn redact(value: &mut Json) {
    match value {
        Json::Object(map) => {
            for (k, v) in map.iter_mut() {
                let lower = k.to_ascii_lowercase();
                if CREDENTIAL_WORDS.iter().any(|w| lower.contains(w)) || lower == "access_key" {
                    *v = Json::String(REDACTED.into());
                } else {
                    redact(v);
                }
            }
        }
        Json::Array(items) => items.iter_mut().for_each(redact),
        _ => {}
    }
}

/// The state of one source file before it was copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    size: u64,
    modified: Option<SystemTime>,
}

fn stamp(path: &Path) -> io::Result<Stamp> {
    let m = fs::symlink_metadata(path)?;
    if !m.is_file() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"));
    }
    Ok(Stamp { size: m.len(), modified: m.modified().ok() })
}

struct Builder<'a> {
    options: &'a CollectOptions,
    staging: PathBuf,
    started: Instant,
    artifacts: Vec<Artifact>,
    absent: Vec<Note>,
    excluded: Vec<Note>,
    bytes: u64,
    paused: bool,
}

/// Whether a file is evidence the selected checkpoint needs (a bound refuses)
/// or optional (a bound excludes it).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Need {
    Required,
    Optional,
}

impl Builder<'_> {
    fn check_time(&self) -> Result<(), Refusal> {
        if self.started.elapsed() > Duration::from_secs(self.options.timeout_s) {
            return Err(refusal(RefusalKind::Timeout, format!("--timeout-s {} passed", self.options.timeout_s)));
        }
        Ok(())
    }

    /// Copies `src` to `rel` in the bundle, hashing while copying.
    fn copy(&mut self, src: &Path, rel: &str, role: &str, need: Need) -> Result<bool, Refusal> {
        self.check_time()?;
        let before = match stamp(src) {
            Ok(s) => s,
            Err(e) if need == Need::Required => {
                return Err(refusal(RefusalKind::Missing, format!("{}: {e}", src.display())))
            }
            Err(e) => {
                self.absent.push(Note { what: rel.into(), why: format!("not readable: {e}") });
                return Ok(false);
            }
        };
        if let Some(why) = self.passes_bound(before.size) {
            if need == Need::Required {
                return Err(refusal(RefusalKind::Bound, format!("{rel}: {why}")));
            }
            self.excluded.push(Note { what: rel.into(), why });
            return Ok(false);
        }
        let dest = super::paths::resolve(&self.staging, rel);
        if let Some(parent) = dest.parent() {
            fs::create_dir_all(parent)
                .map_err(|e| refusal(RefusalKind::Other, format!("{}: {e}", parent.display())))?;
        }
        let (size, sha256) = copy_hashed(src, &dest).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => {
                refusal(RefusalKind::Missing, format!("{} disappeared while copied", src.display()))
            }
            _ => refusal(RefusalKind::Other, format!("{}: {e}", src.display())),
        })?;
        let after = stamp(src)
            .map_err(|_| refusal(RefusalKind::Changed, format!("{} disappeared while copied", src.display())))?;
        if after != before || size != before.size {
            return Err(refusal(RefusalKind::Changed, format!("{} changed while it was copied", src.display())));
        }
        self.record(rel, role, size, sha256);
        self.pause_once();
        Ok(true)
    }

    /// Writes a document the collector derived (a redacted spec or manifest).
    fn write(&mut self, rel: &str, role: &str, bytes: &[u8], need: Need) -> Result<(), Refusal> {
        self.check_time()?;
        if let Some(why) = self.passes_bound(bytes.len() as u64) {
            if need == Need::Required {
                return Err(refusal(RefusalKind::Bound, format!("{rel}: {why}")));
            }
            self.excluded.push(Note { what: rel.into(), why });
            return Ok(());
        }
        let dest = super::paths::resolve(&self.staging, rel);
        if let Some(parent) = dest.parent() {
            fs::create_dir_all(parent)
                .map_err(|e| refusal(RefusalKind::Other, format!("{}: {e}", parent.display())))?;
        }
        fs::write(&dest, bytes).map_err(|e| refusal(RefusalKind::Other, format!("{rel}: {e}")))?;
        self.record(rel, role, bytes.len() as u64, clink_engine::checkpoint::snapshot::sha256_hex(bytes));
        Ok(())
    }

    fn record(&mut self, rel: &str, role: &str, size: u64, sha256: String) {
        self.bytes += size;
        self.artifacts.push(Artifact { path: rel.into(), role: role.into(), size, sha256 });
    }

    fn passes_bound(&self, size: u64) -> Option<String> {
        if self.artifacts.len() as u64 + 1 > self.options.max_files {
            return Some(format!("more than --max-files {}", self.options.max_files));
        }
        if self.bytes + size > self.options.max_bytes {
            return Some(format!("more than --max-bytes {}", self.options.max_bytes));
        }
        None
    }

    fn pause_once(&mut self) {
        if self.paused {
            return;
        }
        self.paused = true;
        if let Some(ms) = std::env::var(PAUSE_ENV).ok().and_then(|v| v.parse::<u64>().ok()) {
            std::thread::sleep(Duration::from_millis(ms));
        }
    }
}

/// Copies a file while hashing it; returns the bytes copied and their SHA-256.
fn copy_hashed(src: &Path, dest: &Path) -> io::Result<(u64, String)> {
    let mut input = File::open(src)?;
    let mut output = File::create(dest)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    loop {
        let n = input.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        output.write_all(&buf[..n])?;
        total += n as u64;
    }
    output.sync_all()?;
    Ok((total, clink_engine::checkpoint::snapshot::hex(&hasher.finalize())))
}

/// The job's marker files: name to stamp, exact names only.
fn list_markers(layout: &CheckpointLayout) -> Result<BTreeMap<String, Stamp>, Refusal> {
    let dir = layout.jobs_dir();
    let names = read_dir_names(&dir).map_err(|e| refusal(RefusalKind::Other, e.to_string()))?;
    let mut markers = BTreeMap::new();
    for name in names {
        let is_marker = parse_completed_marker_name(&name).is_some()
            || parse_confirmed_marker_name(&name).is_some()
            || name == RESTORED_NAME;
        if is_marker {
            let s = stamp(&dir.join(&name)).map_err(|e| refusal(RefusalKind::Changed, format!("{name}: {e}")))?;
            markers.insert(name, s);
        }
    }
    Ok(markers)
}

/// Collects a bundle at `options.out`.
pub fn collect(options: &CollectOptions) -> Result<Collected, Refusal> {
    let started = Instant::now();
    if options.out.exists() || fs::symlink_metadata(&options.out).is_ok() {
        return Err(refusal(
            RefusalKind::Other,
            format!("{} exists; a bundle is never written over", options.out.display()),
        ));
    }
    let parent = match options.out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    fs::create_dir_all(&parent).map_err(|e| refusal(RefusalKind::Other, format!("{}: {e}", parent.display())))?;
    let staging = tempfile::Builder::new()
        .prefix(".incident-collect-")
        .tempdir_in(&parent)
        .map_err(|e| refusal(RefusalKind::Other, format!("{}: {e}", parent.display())))?;
    let mut builder = Builder {
        options,
        staging: staging.path().to_path_buf(),
        started,
        artifacts: Vec::new(),
        absent: Vec::new(),
        excluded: Vec::new(),
        bytes: 0,
        paused: false,
    };
    let layout = CheckpointLayout::new(&options.checkpoint_dir, options.job);
    let markers_before = if layout.jobs_dir().is_dir() { list_markers(&layout)? } else { BTreeMap::new() };
    let manifest = match gather(&mut builder, &markers_before) {
        // Evidence that vanished while the markers moved on was pruned by the
        // running job: the collection raced it.
        Err(r) if r.kind == RefusalKind::Missing && list_markers(&layout).is_ok_and(|now| now != markers_before) => {
            return Err(refusal(RefusalKind::Changed, format!("{}, while the job's markers changed", r.reason)))
        }
        other => other?,
    };
    let json = serde_json::to_vec_pretty(&manifest).map_err(|e| refusal(RefusalKind::Other, e.to_string()))?;
    fs::write(staging.path().join(MANIFEST_NAME), json).map_err(|e| refusal(RefusalKind::Other, e.to_string()))?;
    publish(staging.path(), &options.out)?;
    // Published: the temporary directory is now the bundle; do not remove it.
    let _ = staging.keep();
    Ok(Collected {
        out: options.out.clone(),
        checkpoint: manifest.selection.checkpoint,
        engine_choice: manifest.selection.engine_choice,
        files: manifest.artifacts.len() as u64 + 1,
        bytes: builder.bytes,
        epochs: manifest.epochs.len(),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Renames the staging directory to `out`, never replacing anything there.
fn publish(staging: &Path, out: &Path) -> Result<(), Refusal> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let from = CString::new(staging.as_os_str().as_bytes()).map_err(|e| refusal(RefusalKind::Other, e.to_string()))?;
    let to = CString::new(out.as_os_str().as_bytes()).map_err(|e| refusal(RefusalKind::Other, e.to_string()))?;
    // SAFETY: both arguments are valid NUL-terminated paths that outlive the call.
    let rc =
        unsafe { libc::renameat2(libc::AT_FDCWD, from.as_ptr(), libc::AT_FDCWD, to.as_ptr(), libc::RENAME_NOREPLACE) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return Err(refusal(RefusalKind::Other, format!("publishing {}: {e}", out.display())));
    }
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        let _ = clink_engine::checkpoint::durable::sync_dir(parent);
    }
    Ok(())
}

fn gather(b: &mut Builder<'_>, markers_before: &BTreeMap<String, Stamp>) -> Result<IncidentManifest, Refusal> {
    let options = b.options;
    let layout = CheckpointLayout::new(&options.checkpoint_dir, options.job);
    if !layout.jobs_dir().is_dir() {
        return Err(refusal(
            RefusalKind::Missing,
            format!("{} holds no job {}", options.checkpoint_dir.display(), options.job),
        ));
    }
    // The job manifest: the graph and the restore rule, while the job runs.
    let job_manifest = read_job_manifest(b)?;
    let confirmation = job_manifest.as_ref().map(|m| m.requires_commit_confirmation).or(options.commit_confirmation);
    let rule = confirmation.map(RestoreRule::for_confirmation);
    let (engine_choice, rule_name, restored) = match rule {
        Some(rule) => {
            let point = restore_point_on_disk_by(&layout, rule).map_err(|e| refusal(RefusalKind::Other, e.to_string()))?;
            (point.checkpoint, rule.name().to_string(), point.restored)
        }
        None if options.checkpoint.is_some() => {
            let restored = clink_engine::checkpoint::markers::read_restored(&layout)
                .map_err(|e| refusal(RefusalKind::Other, e.to_string()))?;
            (0, "unknown".to_string(), restored)
        }
        None => {
            return Err(refusal(
                RefusalKind::Other,
                "no job manifest says whether the sinks need commit confirmation; pass --commit-confirmation=yes|no, or --checkpoint",
            ))
        }
    };
    let selected = options.checkpoint.unwrap_or(engine_choice);
    if selected == 0 {
        return Err(refusal(
            RefusalKind::Missing,
            format!("job {} has no completed checkpoint to collect", options.job),
        ));
    }
    let marker = read_completed(&layout, selected).map_err(|e| refusal(RefusalKind::Missing, e.to_string()))?;

    // Markers and the RESTORED record.
    let jobs_rel = format!("checkpoint/_jobs/{}", options.job);
    for name in markers_before.keys() {
        let role = if name == RESTORED_NAME {
            "restored_record"
        } else if name.starts_with("CONFIRMED-") {
            "confirmed_marker"
        } else {
            "completed_marker"
        };
        b.copy(&layout.jobs_dir().join(name), &format!("{jobs_rel}/{name}"), role, Need::Required)?;
    }

    // Every participant's sidecar (and snapshot) of the selected checkpoint.
    let generation = marker.generation;
    let state_rel =
        |participant: &str, file: &str| format!("checkpoint/_state/{}/v{generation}/{participant}/{file}", options.job);
    for participant in &marker.participants {
        let meta = layout.snapshot_meta(generation, participant, selected);
        let file = meta.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
        b.copy(&meta, &state_rel(participant, &file), "snapshot_meta", Need::Required)?;
        if options.include_state {
            let snap = layout.snapshot(generation, participant, selected);
            let file = snap.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
            b.copy(&snap, &state_rel(participant, &file), "snapshot", Need::Required)?;
        }
    }

    // Captured epochs, their operator specs, and their starting state.
    let restored_info = restored.as_ref().map(|r| RestoredInfo { restored_from: r.restored_from, next: r.next });
    let epochs = if options.include_captures {
        gather_captures(b, &layout, selected, restored_info, generation)?
    } else {
        b.absent.push(Note { what: "captures".into(), why: "not asked for (--include-captures)".into() });
        Vec::new()
    };

    // Traces.
    let mut traces = false;
    if let Some(dir) = &options.trace_dir {
        let names = read_dir_names(dir).map_err(|e| refusal(RefusalKind::Other, e.to_string()))?;
        for name in names.iter().filter(|n| n.ends_with(".ndjson") && !n.starts_with('.')) {
            traces |= b.copy(&dir.join(name), &format!("traces/{name}"), "trace", Need::Optional)?;
        }
        if !traces {
            b.absent.push(Note { what: "traces".into(), why: format!("{} holds no trace file", dir.display()) });
        }
    } else {
        b.absent.push(Note { what: "traces".into(), why: "no --trace-dir".into() });
    }

    // The job manifest, redacted.
    let delivery = delivery(b, job_manifest.as_ref())?;
    let mut job_manifest_included = false;
    if let Some(m) = &job_manifest {
        let mut doc = serde_json::to_value(m).map_err(|e| refusal(RefusalKind::Other, e.to_string()))?;
        redact(&mut doc);
        let bytes = serde_json::to_vec_pretty(&doc).map_err(|e| refusal(RefusalKind::Other, e.to_string()))?;
        b.write("job/manifest.json", "job_manifest", &bytes, Need::Optional)?;
        job_manifest_included = true;
    }

    let markers_after = list_markers(&layout)?;
    if markers_after != *markers_before {
        let added: Vec<&String> = markers_after.keys().filter(|k| !markers_before.contains_key(*k)).collect();
        let removed: Vec<&String> = markers_before.keys().filter(|k| !markers_after.contains_key(*k)).collect();
        return Err(refusal(
            RefusalKind::Changed,
            format!("the job's markers changed while collecting (added {added:?}, removed {removed:?}, or rewritten)"),
        ));
    }

    Ok(IncidentManifest {
        format: FORMAT.into(),
        version: VERSION,
        collector: Collector {
            name: "clink incident-collect".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            collected_at_ms: clink_engine::timers::wall_clock_ms() as u64,
        },
        job: JobInfo {
            id: options.job.to_string(),
            name: job_manifest.as_ref().map(|m| m.name.clone()),
            requires_commit_confirmation: confirmation,
        },
        selection: Selection {
            checkpoint: selected,
            engine_choice,
            named: options.checkpoint,
            rule: rule_name,
            generation,
            participants: marker.participants.clone(),
            restored: restored_info,
            participant_state: "file".into(),
        },
        delivery,
        contents: Contents {
            state: options.include_state,
            captures: options.include_captures,
            traces,
            job_manifest: job_manifest_included,
        },
        bounds: Bounds { max_bytes: options.max_bytes, max_files: options.max_files, timeout_s: options.timeout_s },
        epochs,
        artifacts: std::mem::take(&mut b.artifacts),
        absent: std::mem::take(&mut b.absent),
        excluded: std::mem::take(&mut b.excluded),
    })
}

fn read_job_manifest(b: &mut Builder<'_>) -> Result<Option<job_manifest::JobManifest>, Refusal> {
    let Some(ha) = &b.options.ha_dir else {
        b.absent.push(Note { what: "job/manifest.json".into(), why: "no --ha-dir".into() });
        return Ok(None);
    };
    let dir = job_manifest::job_dir(ha, b.options.job);
    let path = dir.join(job_manifest::MANIFEST_NAME);
    if !path.exists() {
        let status = fs::read_to_string(dir.join(job_manifest::STATUS_NAME))
            .ok()
            .and_then(|t| serde_json::from_str::<Json>(&t).ok())
            .and_then(|v| v["terminal"].as_str().map(str::to_string));
        let why = match status {
            Some(s) => format!("the job ended ({s}); its manifest is removed at the end"),
            None => format!("{} holds no manifest of job {}", ha.display(), b.options.job),
        };
        b.absent.push(Note { what: "job/manifest.json".into(), why });
        return Ok(None);
    }
    job_manifest::read(&path).map(Some).map_err(|e| refusal(RefusalKind::Other, e))
}

/// The sinks and the guarantee each gives, from the job's graph (or, without
/// it, from the captured sinks' specs).
fn delivery(b: &mut Builder<'_>, manifest: Option<&job_manifest::JobManifest>) -> Result<Vec<SinkDelivery>, Refusal> {
    let Some(m) = manifest else {
        b.absent.push(Note { what: "delivery report".into(), why: "no job manifest to read the sinks from".into() });
        return Ok(Vec::new());
    };
    let graph = clink_engine::job::parse_job(&m.graph.to_string())
        .map_err(|e| refusal(RefusalKind::Other, format!("the job manifest's graph: {e}")))?;
    Ok(graph
        .operators
        .iter()
        .filter(|o| o.spec.kind == registry::OperatorKind::Sink)
        .map(|o| {
            let (family, guarantee) = match o.spec.type_name.as_str() {
                clink_engine::operators::staged_sink::TYPE => ("recoverable", "exactly_once"),
                _ => ("at_least_once", "at_least_once"),
            };
            SinkDelivery {
                operator: o.spec.id.to_string(),
                uid: o.spec.uid.clone(),
                type_name: o.spec.type_name.clone(),
                family: family.into(),
                guarantee: guarantee.into(),
            }
        })
        .collect())
}

fn gather_captures(
    b: &mut Builder<'_>,
    layout: &CheckpointLayout,
    selected: u64,
    restored: Option<RestoredInfo>,
    generation: u32,
) -> Result<Vec<EpochEntry>, Refusal> {
    let options = b.options;
    let Some(capture_dir) = &options.capture_dir else {
        b.absent.push(Note { what: "captures".into(), why: "no --capture-dir".into() });
        return Ok(Vec::new());
    };
    let wanted: BTreeSet<u64> = match &options.epochs {
        Some(list) => list.iter().copied().collect(),
        None => {
            let mut e: BTreeSet<u64> = [selected, selected + 1].into();
            if let Some(r) = restored.filter(|r| r.restored_from == selected) {
                e.insert(r.next);
            }
            e
        }
    };
    let known_restores: Vec<(u64, u64)> = restored.map(|r| (r.restored_from, r.next)).into_iter().collect();
    let mut entries = Vec::new();
    let ops = read_dir_names(capture_dir).map_err(|e| refusal(RefusalKind::Other, e.to_string()))?;
    for op_name in ops {
        let Some(op) = op_name.strip_prefix("op-").and_then(OperatorId::parse) else { continue };
        if options.ops.as_ref().is_some_and(|ops| !ops.contains(&op)) {
            b.excluded.push(Note { what: format!("capture/{op_name}"), why: "outside --op".into() });
            continue;
        }
        let subtasks =
            read_dir_names(&capture_dir.join(&op_name)).map_err(|e| refusal(RefusalKind::Other, e.to_string()))?;
        for sub_name in subtasks {
            let Some(subtask) =
                sub_name.strip_prefix("subtask-").and_then(parse_decimal_u64).and_then(|s| u32::try_from(s).ok())
            else {
                continue;
            };
            let dir = subtask_dir(capture_dir, op, subtask);
            let rel_dir = format!("capture/{op_name}/{sub_name}");
            let spec = match OpSpecFile::read(&dir.join(clink_engine::capture::OP_SPEC_NAME)) {
                Ok(spec) => spec,
                Err(e) => {
                    b.absent.push(Note { what: format!("{rel_dir}/op.json"), why: e });
                    continue;
                }
            };
            let mut spec_doc = serde_json::to_value(&spec).map_err(|e| refusal(RefusalKind::Other, e.to_string()))?;
            redact(&mut spec_doc);
            let bytes = serde_json::to_vec_pretty(&spec_doc).map_err(|e| refusal(RefusalKind::Other, e.to_string()))?;
            b.write(&format!("{rel_dir}/op.json"), "op_spec", &bytes, Need::Optional)?;
            let is_sink = registry::kind_of(&spec.type_name) == Some(registry::OperatorKind::Sink);
            let names = read_dir_names(&dir).map_err(|e| refusal(RefusalKind::Other, e.to_string()))?;
            let mut outside = Vec::new();
            for name in names {
                let Some(epoch) = clink_engine::capture::parse_epoch_file_name(&name) else { continue };
                if !wanted.contains(&epoch) {
                    outside.push(epoch);
                    continue;
                }
                let rel = capture_path(op, subtask, epoch);
                if !b.copy(&dir.join(&name), &rel, "capture", Need::Optional)? {
                    continue;
                }
                let evidence = clink_engine::capture::sink_evidence_name(epoch);
                if dir.join(&evidence).exists() {
                    b.copy(&dir.join(&evidence), &format!("{rel_dir}/{evidence}"), "sink_evidence", Need::Optional)?;
                }
                entries.push(EpochEntry {
                    operator: op.to_string(),
                    subtask,
                    epoch,
                    path: rel,
                    role: if is_sink { "sink" } else { "operator" }.into(),
                });
                if options.include_state && !is_sink {
                    starting_state(b, layout, op, subtask, epoch, &known_restores, generation)?;
                }
            }
            if !outside.is_empty() {
                b.excluded.push(Note {
                    what: format!("{rel_dir}: {} epochs", outside.len()),
                    why: "outside the selected epochs".into(),
                });
            }
            for epoch in &wanted {
                if !entries.iter().any(|e| e.operator_id() == op && e.subtask == subtask && e.epoch == *epoch) {
                    b.absent.push(Note {
                        what: capture_path(op, subtask, *epoch),
                        why: "not captured (or not yet: the epoch had not ended)".into(),
                    });
                }
            }
        }
    }
    Ok(entries)
}

/// Copies the snapshot a captured epoch's replay starts from.
fn starting_state(
    b: &mut Builder<'_>,
    layout: &CheckpointLayout,
    op: OperatorId,
    subtask: u32,
    epoch: u64,
    known_restores: &[(u64, u64)],
    generation: u32,
) -> Result<(), Refusal> {
    let participant = clink_engine::checkpoint::participant_name(op, subtask);
    let start = match epoch_start(layout, epoch, known_restores) {
        Ok(StartPoint::Checkpoint(c)) => c,
        Ok(StartPoint::Empty) => return Ok(()),
        Err(why) => {
            b.absent.push(Note { what: format!("the starting state of {participant} epoch {epoch}"), why });
            return Ok(());
        }
    };
    for (path, role) in [
        (layout.snapshot_meta(generation, &participant, start), "snapshot_meta"),
        (layout.snapshot(generation, &participant, start), "snapshot"),
    ] {
        let file = path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
        let rel = format!("checkpoint/_state/{}/v{generation}/{participant}/{file}", layout.job());
        if b.artifacts.iter().any(|a| a.path == rel) {
            continue;
        }
        b.copy(&path, &rel, role, Need::Optional)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_like_parameters_are_redacted_at_any_depth() {
        let mut v = serde_json::json!({
            "operators": [{"params": {"key": ["account"], "password": "hunter2", "nested": {"API_KEY": "k", "token_ttl": 3}}}]
        });
        redact(&mut v);
        let params = &v["operators"][0]["params"];
        assert_eq!(params["key"], serde_json::json!(["account"]));
        assert_eq!(params["password"], REDACTED);
        assert_eq!(params["nested"]["API_KEY"], REDACTED);
        assert_eq!(params["nested"]["token_ttl"], REDACTED);
    }
}
