//! `clink incident-collect`: gathers a job's evidence into a bundle.
//!
//! The checkpoint is chosen by the engine's own restore rule; every state path
//! comes from that one marker. Nothing is pinned while the job runs; instead
//! the markers are listed before and after copying and must not differ, every
//! file is hashed while copied and its size and modification time checked
//! afterwards. The bundle is built in a temporary directory beside `--out` and
//! published with one rename that never replaces anything; every refusal
//! removes the temporary directory.

mod captures;
mod copy;
mod job;
mod refusal;

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clink_basics::ids::OperatorId;
use clink_engine::checkpoint::commits::{list_receipts, list_unresolved};
use clink_engine::checkpoint::layout::{parse_completed_marker_name, RECEIPT_PREFIX, RESTORED_NAME, UNRESOLVED_PREFIX};
use clink_engine::checkpoint::lineage::{parse_run_record_name, LINEAGE_NAME};
use clink_engine::checkpoint::{restore_point_on_disk_by, CheckpointLayout, RestoreRule};

use crate::manifest::{
    Bounds, Collector, IncidentManifest, JobInfo, Note, RestoredInfo, Selection, FORMAT, MANIFEST_NAME, VERSION,
};

pub use clink_basics::redact::{redact, REDACTED};
use copy::{list_markers, Builder, Need, Stamp};
use refusal::refusal;
pub use refusal::{Refusal, RefusalKind};

/// Test-only: sleep this many milliseconds after the first copied file, so a
/// test can make a checkpoint complete in the middle of a collection. Only a
/// build with the `defects` feature reads it; a default build refuses it.
pub const PAUSE_ENV: &str = "CLINK_TEST_COLLECT_PAUSE_MS";

/// The test pause, in a build that has it.
fn test_pause_ms() -> Option<u64> {
    if cfg!(feature = "defects") {
        std::env::var(PAUSE_ENV).ok().and_then(|v| v.parse().ok())
    } else {
        None
    }
}

/// A test-only setting given to a build without it is refused, never ignored.
fn refuse_test_settings() -> Result<(), Refusal> {
    if !cfg!(feature = "defects") && std::env::var_os(PAUSE_ENV).is_some() {
        return Err(refusal(
            RefusalKind::Other,
            format!("{PAUSE_ENV} is set, but this build has no test switches (built without the `defects` feature)"),
        ));
    }
    Ok(())
}

/// Which captured epochs a collection keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EpochSelection {
    /// The selected checkpoint's epoch, the next unless it is the job's
    /// final, a restored run's first, and each sink's reconciliation scope.
    Default,
    /// Exactly these.
    Only(Vec<u64>),
    /// Every epoch the capture directory still holds (a whole run's scope).
    All,
}

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
    pub epochs: EpochSelection,
    pub out: PathBuf,
    pub max_bytes: u64,
    pub max_files: u64,
    pub timeout_s: u64,
}

/// What a published bundle holds.
#[derive(Debug, Clone)]
pub struct Collected {
    pub out: PathBuf,
    pub checkpoint: u64,
    pub engine_choice: Option<u64>,
    pub files: u64,
    pub bytes: u64,
    pub epochs: usize,
    pub seconds: f64,
    /// What the manifest records as absent, and why.
    pub absent: Vec<Note>,
}

/// What a collection tells whoever watches it while it copies. The
/// collector only calls these methods; showing them (or not) is the caller's
/// business. Every method has an empty default.
pub trait CollectProgress {
    /// A part of the evidence is next: markers, state, captures, traces, job manifest.
    fn phase(&mut self, _what: &str) {}
    /// A file was copied (or written) into the bundle: its path there, and
    /// the files and bytes copied so far.
    fn copied(&mut self, _path: &str, _files: u64, _bytes: u64) {}
}

/// Shows nothing.
pub struct Quiet;

impl CollectProgress for Quiet {}

/// Collects a bundle at `options.out`.
pub fn collect(options: &CollectOptions) -> Result<Collected, Refusal> {
    collect_observed(options, &mut Quiet)
}

/// [`collect`], telling `progress` what it copies.
pub fn collect_observed(options: &CollectOptions, progress: &mut dyn CollectProgress) -> Result<Collected, Refusal> {
    let started = Instant::now();
    refuse_test_settings()?;
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
        progress,
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
        absent: manifest.absent.clone(),
    })
}

/// Renames the staging directory to `out`, never replacing anything there.
fn publish(staging: &Path, out: &Path) -> Result<(), Refusal> {
    rename_no_replace(staging, out)
        .map_err(|e| refusal(RefusalKind::Other, format!("publishing {}: {e}", out.display())))?;
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        let _ = clink_engine::checkpoint::durable::sync_dir(parent);
    }
    Ok(())
}

/// One rename that fails when `to` exists (Linux's `RENAME_NOREPLACE`).
#[cfg(target_os = "linux")]
fn rename_no_replace(from: &Path, to: &Path) -> io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let invalid = |e| io::Error::new(io::ErrorKind::InvalidInput, e);
    let from = CString::new(from.as_os_str().as_bytes()).map_err(invalid)?;
    let to = CString::new(to.as_os_str().as_bytes()).map_err(invalid)?;
    // SAFETY: both arguments are valid NUL-terminated paths that outlive the call.
    let rc =
        unsafe { libc::renameat2(libc::AT_FDCWD, from.as_ptr(), libc::AT_FDCWD, to.as_ptr(), libc::RENAME_NOREPLACE) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Elsewhere: refuse an existing destination, then rename. A destination
/// created between the two is a race this fallback cannot close; Linux's
/// path above closes it.
#[cfg(not(target_os = "linux"))]
fn rename_no_replace(from: &Path, to: &Path) -> io::Result<()> {
    if fs::symlink_metadata(to).is_ok() {
        return Err(io::Error::new(io::ErrorKind::AlreadyExists, "the destination exists"));
    }
    fs::rename(from, to)
}

/// The `<pid>-<start>` of every traced run of the directory's lineage, from
/// the run records; `None` when the directory records no run (a build
/// before run identities): every trace file is collected then.
fn run_trace_stamps(layout: &CheckpointLayout) -> Option<std::collections::BTreeSet<String>> {
    let names = clink_engine::checkpoint::backend::read_dir_names(&layout.jobs_dir()).ok()?;
    let mut stamps = std::collections::BTreeSet::new();
    let mut any = false;
    for name in names {
        let Some(n) = parse_run_record_name(&name) else { continue };
        any = true;
        let path = layout.jobs_dir().join(&name);
        let bytes =
            clink_basics::files::read_bounded(&path, clink_engine::checkpoint::lineage::MAX_RUN_RECORD_BYTES).ok()?;
        let record = clink_engine::checkpoint::lineage::parse_run_record_bytes(&path, &bytes, layout.job(), n).ok()?;
        stamps.extend(record.trace);
    }
    any.then_some(stamps)
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
    // What the job is: the graph its newest marker names, and its manifest
    // while it runs. Together with --commit-confirmation they say which
    // restore rule applies; they must not disagree.
    let job_manifest = job::read_job_manifest(b)?;
    let newest_graph = job::newest_graph(&layout, markers_before)?;
    let confirmation =
        job::commit_confirmation(newest_graph.as_ref(), job_manifest.as_ref(), options.commit_confirmation)?;
    let rule = confirmation.map(RestoreRule::for_confirmation);
    let rule_name = crate::derive::rule_name(confirmation);
    let (engine_choice, restored) = match rule {
        Some(rule) => {
            let point = restore_point_on_disk_by(&layout, rule).map_err(|e| refusal(RefusalKind::Other, e.to_string()))?;
            (Some(point.checkpoint), point.restored)
        }
        None if options.checkpoint.is_some() => {
            // No rule is known, so the engine made no choice to record.
            let restored = clink_engine::checkpoint::markers::read_restored(&layout)
                .map_err(|e| refusal(RefusalKind::Other, e.to_string()))?;
            (None, restored)
        }
        None => {
            return Err(refusal(
                RefusalKind::Other,
                "nothing says whether the sinks need commit confirmation (no marker names a job graph, no job manifest); pass --commit-confirmation=yes|no, or --checkpoint",
            ))
        }
    };
    let selected = match options.checkpoint.or(engine_choice) {
        Some(c) if c > 0 => c,
        _ => {
            return Err(refusal(
                RefusalKind::Missing,
                format!("job {} has no completed checkpoint to collect", options.job),
            ))
        }
    };
    let marker = job::read_marker(&layout, selected)?;
    let graph = job::marker_graph(&layout, &marker)?;

    // Markers and the RESTORED record.
    b.progress.phase("markers");
    let jobs_rel = format!("checkpoint/_jobs/{}", options.job);
    for name in markers_before.keys() {
        let role = if name == RESTORED_NAME {
            "restored_record"
        } else if name.starts_with("CONFIRMED-") {
            "confirmed_marker"
        } else if parse_run_record_name(name).is_some() {
            "run_record"
        } else {
            "completed_marker"
        };
        b.copy(&layout.jobs_dir().join(name), &format!("{jobs_rel}/{name}"), role, Need::Required)?;
    }

    // The directory's lineage: what every artifact's writer is of.
    let lineage = layout.jobs_dir().join(LINEAGE_NAME);
    if lineage.is_file() {
        b.copy(&lineage, &format!("{jobs_rel}/{LINEAGE_NAME}"), "lineage_record", Need::Required)?;
    } else {
        b.absent.push(Note {
            what: format!("{jobs_rel}/{LINEAGE_NAME}"),
            why: "the checkpoint directory records no lineage (written by a build before run identities)".into(),
        });
    }

    // The record of a checkpoint the run imported from a dataset: it is what
    // vouches for a CONFIRMED marker confirmed by that import.
    if layout.imported_record().is_file() {
        b.copy(
            &layout.imported_record(),
            &format!("{jobs_rel}/{}", clink_engine::checkpoint::layout::IMPORTED_NAME),
            "imported_record",
            Need::Required,
        )?;
    }

    // The commit-confirmed family's receipts (never removed by the job) and
    // unresolved markers (a reopening sink clears its own), per participant.
    for participant in &marker.participants {
        let receipts = list_receipts(&layout, participant).map_err(|e| refusal(RefusalKind::Other, e.to_string()))?;
        for c in receipts {
            let name = format!("receipts/{participant}/{RECEIPT_PREFIX}{c}");
            b.copy(&layout.receipt(participant, c), &format!("{jobs_rel}/{name}"), "commit_receipt", Need::Required)?;
        }
        let unresolved =
            list_unresolved(&layout, participant).map_err(|e| refusal(RefusalKind::Other, e.to_string()))?;
        for c in unresolved {
            let name = format!("unresolved/{participant}/{UNRESOLVED_PREFIX}{c}");
            b.copy(
                &layout.unresolved(participant, c),
                &format!("{jobs_rel}/{name}"),
                "unresolved_marker",
                Need::Optional,
            )?;
        }
    }

    // The job graph the selected marker names: always collected, it says
    // what every participant is.
    match &marker.graph {
        Some(g) => {
            let rel = format!("{jobs_rel}/{}", g.file);
            b.copy(&layout.jobs_dir().join(&g.file), &rel, "job_graph", Need::Required)?;
            let copied = b.artifacts.last().map(|a| a.sha256.as_str());
            if copied != Some(g.sha256.as_str()) {
                return Err(refusal(
                    RefusalKind::Other,
                    format!("{rel} does not hash to the SHA-256 COMPLETED-{selected} names ({})", g.sha256),
                ));
            }
        }
        None => {
            b.absent.push(Note {
                what: "the job graph".into(),
                why: format!("COMPLETED-{selected} is a version {} marker, which names none", marker.version),
            });
        }
    }

    // The graphs the other collected markers name, where a redeploy changed
    // the job: a scope of an earlier checkpoint reads its own marker's.
    let mut graphs: std::collections::BTreeSet<String> = marker.graph.iter().map(|g| g.file.clone()).collect();
    for id in markers_before.keys().filter_map(|n| parse_completed_marker_name(n)).filter(|id| *id != selected) {
        // A marker that does not read is collected all the same (below, with
        // every marker): the verifier reads it and refuses it.
        let Some(g) = job::read_marker(&layout, id).ok().and_then(|m| m.graph) else { continue };
        if graphs.insert(g.file.clone()) {
            b.copy(&layout.jobs_dir().join(&g.file), &format!("{jobs_rel}/{}", g.file), "job_graph", Need::Optional)?;
        }
    }

    // Every participant's sidecar (and snapshot) of the selected checkpoint.
    b.progress.phase("state");
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
        b.progress.phase("captures");
        captures::gather_captures(
            b,
            &layout,
            selected,
            marker.kind == clink_engine::checkpoint::markers::CheckpointKind::Final,
            restored_info,
            generation,
            graph.as_ref(),
        )?
    } else {
        b.absent.push(Note { what: "captures".into(), why: "not asked for (--include-captures)".into() });
        Vec::new()
    };

    // Traces.
    if let Some(dir) = &options.trace_dir {
        b.progress.phase("traces");
        let listing = clink_basics::files::list_dir(dir)
            .map_err(|e| refusal(RefusalKind::Other, format!("--trace-dir {}: {e}", dir.display())))?;
        // The files of this lineage's runs, as their records name them: a
        // trace directory other jobs or checkpoint directories share holds
        // their processes' files too, which are not this job's evidence.
        let stamps = run_trace_stamps(&layout);
        let mut traces = false;
        for name in listing.names.iter().filter(|n| n.ends_with(".ndjson") && !n.starts_with('.')) {
            let stamp = crate::paths::parse_trace_file_name(name).map(|(_, pid, start)| format!("{pid}-{start}"));
            if let (Some(stamps), Some(stamp)) = (&stamps, &stamp) {
                if !stamps.contains(stamp) {
                    continue;
                }
            }
            traces |= b.copy(&dir.join(name), &format!("traces/{name}"), "trace", Need::Optional)?;
        }
        for stamp in stamps.iter().flatten() {
            for role in ["coordinator", "worker"] {
                let name = format!("{role}-{stamp}.ndjson");
                if !listing.names.contains(&name) {
                    b.absent.push(Note {
                        what: format!("traces/{name}"),
                        why: "a run of this lineage traced (its run record names the file), and the trace directory does not hold it".into(),
                    });
                }
            }
        }
        // A file whose name is not UTF-8 cannot be named in a bundle: say it was there.
        for name in &listing.not_utf8 {
            b.absent.push(Note {
                what: format!("traces/{name}"),
                why: "its name is not UTF-8; it could not be listed".into(),
            });
        }
        if !traces {
            b.absent.push(Note { what: "traces".into(), why: format!("{} holds no trace file", dir.display()) });
        }
    } else {
        b.absent.push(Note { what: "traces".into(), why: "no --trace-dir".into() });
    }

    // The job manifest, redacted.
    let manifest_graph = match &job_manifest {
        Some(m) => Some(
            clink_engine::job::parse_job(&m.graph.to_string())
                .map_err(|e| refusal(RefusalKind::Other, format!("the job manifest's graph: {e}")))?,
        ),
        None => None,
    };
    let delivery = job::delivery(b, graph.as_ref().or(manifest_graph.as_ref()));
    if let Some(m) = &job_manifest {
        let mut doc = serde_json::to_value(m).map_err(|e| refusal(RefusalKind::Other, e.to_string()))?;
        redact(&mut doc);
        let bytes = serde_json::to_vec_pretty(&doc).map_err(|e| refusal(RefusalKind::Other, e.to_string()))?;
        b.write(crate::derive::JOB_MANIFEST_PATH, "job_manifest", &bytes, Need::Optional)?;
    }
    // What the bundle holds is what it lists, by the rule the verifier
    // derives it with: a part asked for and left out (under a bound, or
    // never there) is said absent, never claimed.
    let contents = crate::derive::contents(
        &b.artifacts,
        &options.job.to_string(),
        generation,
        selected,
        &marker.participants,
        marker.graph.as_ref().map(|g| g.file.as_str()),
    );
    if options.include_captures && !contents.captures {
        b.absent.push(Note { what: "captures".into(), why: "asked for, and no captured epoch was collected".into() });
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
            version: clink_engine::defects::build_description().into(),
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
        contents,
        bounds: Bounds { max_bytes: options.max_bytes, max_files: options.max_files, timeout_s: options.timeout_s },
        epochs,
        artifacts: std::mem::take(&mut b.artifacts),
        absent: distinct(std::mem::take(&mut b.absent)),
        excluded: distinct(std::mem::take(&mut b.excluded)),
    })
}

/// The notes, each once, in the order first noted. Two parts of a collection
/// can meet the same missing file (an epoch's starting state and the state
/// bounding a sink interval), and a manifest that repeats an entry is refused.
fn distinct(notes: Vec<Note>) -> Vec<Note> {
    let mut seen = std::collections::HashSet::new();
    notes.into_iter().filter(|n| seen.insert((n.what.clone(), n.why.clone()))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_met_twice_is_listed_once_in_the_order_first_met() {
        let note = |what: &str, why: &str| Note { what: what.into(), why: why.into() };
        let notes = vec![note("a", "gone"), note("b", "gone"), note("a", "gone"), note("a", "other")];
        assert_eq!(distinct(notes), vec![note("a", "gone"), note("b", "gone"), note("a", "other")]);
    }
}
