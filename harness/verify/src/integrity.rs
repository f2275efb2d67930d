//! The integrity checks: bundle.manifest, bundle.artifacts, bundle.completeness.

use clink_basics::text::count;
use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use clink_basics::digest::sha256_file;

use super::{CheckResult, Status};
use clink_bundle::paths::{resolve, ArtifactKind, EVIDENCE_DIRS};
use clink_bundle::Bundle;

/// The reader accepted the manifest: report what it holds.
pub fn manifest(bundle: &Bundle) -> CheckResult {
    let m = &bundle.manifest;
    CheckResult::new(
        "bundle.manifest",
        Status::Passed,
        "the manifest parses, is a known format and version, and every path in it is plain and relative",
    )
    .evidence([
        format!("{} version {}", m.format, m.version),
        format!("{} artifacts, {} captured epochs", m.artifacts.len(), m.epochs.len()),
        // Nothing in the bundle can confirm who collected it: said as the manifest's claim.
        format!("the manifest says it was collected by {} {}", m.collector.name, m.collector.version),
    ])
}

/// Files the artifact check ignores: what macOS leaves behind.
fn ignorable(name: &str) -> bool {
    name == ".DS_Store" || name.starts_with("._")
}

/// What is wrong with one listed artifact on disk, if anything.
fn artifact_problem(bundle: &Bundle, a: &clink_bundle::Artifact) -> Option<String> {
    let path = resolve(&bundle.root, &a.path);
    match fs::symlink_metadata(&path) {
        Err(e) => Some(format!("{}: missing ({e})", a.path)),
        Ok(m) if !m.is_file() => Some(format!("{}: not a regular file", a.path)),
        Ok(m) if m.len() != a.size => Some(format!("{}: {} bytes, listed as {}", a.path, m.len(), a.size)),
        // Streamed, and never past the listed size: an artifact that grew
        // is reported as what it is, whatever it now holds.
        Ok(_) => match sha256_file(&path, a.size) {
            Err(e) => Some(format!("{}: unreadable ({e})", a.path)),
            Ok(d) if d.bytes != a.size => Some(format!("{}: {} bytes read, listed as {}", a.path, d.bytes, a.size)),
            Ok(d) if d.sha256 != a.sha256 => Some(format!("{}: SHA-256 {}, listed as {}", a.path, d.sha256, a.sha256)),
            Ok(_) => None,
        },
    }
}

pub fn artifacts(bundle: &Bundle) -> CheckResult {
    // Each file on its own: hashed on every core, reported in the manifest's order.
    let found = crate::parallel::map_ordered(&bundle.manifest.artifacts, |a| artifact_problem(bundle, a), |_| {});
    let mut problems: Vec<String> = found.into_iter().flatten().collect();
    let listed: BTreeSet<&str> = bundle.manifest.artifacts.iter().map(|a| a.path.as_str()).collect();
    let mut files = 0;
    for dir in EVIDENCE_DIRS {
        walk(&bundle.root.join(dir), dir, &listed, &mut files, &mut problems);
    }
    if problems.is_empty() {
        CheckResult::new(
            "bundle.artifacts",
            Status::Passed,
            "every artifact exists as a regular file with its listed size and SHA-256, and nothing unlisted sits in an evidence directory",
        )
        .evidence([format!("{} artifacts verified; {files} files in the evidence directories", listed.len())])
    } else {
        CheckResult::new(
            "bundle.artifacts",
            Status::Failed,
            format!(
                "{}: the bundle is not what its manifest vouches for",
                count(problems.len(), "artifact problem", "artifact problems")
            ),
        )
        .next("do not trust this copy: collect the bundle again, or find the copy whose files match the manifest")
        .details(problems.into_iter().take(20))
    }
}

/// Walks an evidence directory for files the manifest does not list.
fn walk(dir: &Path, rel: &str, listed: &BTreeSet<&str>, files: &mut usize, problems: &mut Vec<String>) {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
        Err(e) => {
            problems.push(format!("{rel}/: cannot be listed in full ({e})"));
            return;
        }
    };
    let mut names = Vec::new();
    for entry in entries {
        match entry {
            Ok(e) => names.push((e.file_name().to_string_lossy().into_owned(), e.file_type())),
            Err(e) => problems.push(format!("{rel}/: cannot be listed in full ({e})")),
        }
    }
    names.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, kind) in names {
        if ignorable(&name) {
            continue;
        }
        let child = format!("{rel}/{name}");
        match kind {
            Ok(k) if k.is_dir() => walk(&dir.join(&name), &child, listed, files, problems),
            Ok(k) if k.is_file() => {
                *files += 1;
                if !listed.contains(child.as_str()) {
                    problems.push(format!("{child}: not listed in the manifest"));
                }
            }
            Ok(_) => problems.push(format!("{child}: neither a regular file nor a directory")),
            Err(e) => problems.push(format!("{child}: {e}")),
        }
    }
}

pub fn completeness(bundle: &Bundle) -> CheckResult {
    let m = &bundle.manifest;
    let sel = &m.selection;
    let job = &m.job.id;
    let mut missing = Vec::new();
    let mut need = |path: String, why: &str| {
        if bundle.artifact(&path).is_none() {
            missing.push(format!("{path} ({why})"));
        }
    };
    need(format!("checkpoint/_jobs/{job}/COMPLETED-{}", sel.checkpoint), "the selected checkpoint's marker");
    for p in &sel.participants {
        let base = format!("checkpoint/_state/{job}/v{}/{p}/checkpoint-{}.snap", sel.generation, sel.checkpoint);
        need(format!("{base}.meta"), "a participant's sidecar");
        if m.contents.state {
            need(base, "a participant's snapshot: the manifest says state is included");
        }
    }
    for e in &m.epochs {
        need(e.path.clone(), "a captured epoch the manifest lists");
    }
    // Every captured epoch is read, selected for a replay or not: its header
    // names what its path says, and it says of itself only what its bytes
    // bear out.
    let present: Vec<&clink_bundle::EpochEntry> =
        m.epochs.iter().filter(|e| bundle.artifact(&e.path).is_some()).collect();
    let held = crate::parallel::map_ordered(&present, |e| capture_holds_together(bundle, e), |_| {});
    let mut contradictions: Vec<String> = present
        .iter()
        .zip(held)
        .filter_map(|(e, held)| held.err().map(|problem| format!("{}: {problem}", e.path)))
        .collect();
    // And every op.json and sink interval evidence, against its path, the
    // job graph and the capture it accounts for. A graph that is named and
    // does not hold is a contradiction, never "no graph to compare with".
    let graph = match bundle.job_graph() {
        Ok(known) => Some(known.graph),
        Err(clink_bundle::graph::GraphProblem::Absent(_)) => None,
        Err(clink_bundle::graph::GraphProblem::Broken(why)) => {
            contradictions.push(format!("the job graph: {why}"));
            None
        }
    };
    for (a, kind) in
        bundle.artifacts_of_kind(|k| matches!(k, ArtifactKind::OpSpec { .. } | ArtifactKind::SinkEvidence { .. }))
    {
        let held = match kind {
            ArtifactKind::OpSpec { operator, subtask } => op_spec_agrees(bundle, graph.as_ref(), operator, subtask),
            ArtifactKind::SinkEvidence { operator, subtask, epoch } => {
                sink_evidence_agrees(bundle, graph.as_ref(), operator, subtask, epoch)
            }
            _ => Ok(()),
        };
        if let Err(problem) = held {
            contradictions.push(format!("{}: {problem}", a.path));
        }
    }
    if m.contents.captures && m.epochs.is_empty() {
        missing.push("captured epochs (the manifest says captures are included and lists none)".into());
    }
    if m.contents.traces && bundle.trace_artifacts().is_empty() {
        missing.push("trace files (the manifest says traces are included)".into());
    }
    if m.contents.job_manifest && bundle.artifact("job/manifest.json").is_none() {
        missing.push("job/manifest.json (the manifest says the job manifest is included)".into());
    }
    let absences: Vec<String> = m.absent.iter().map(|n| format!("absent: {}: {}", n.what, n.why)).collect();
    if !contradictions.is_empty() {
        return CheckResult::new(
            "bundle.completeness",
            Status::Failed,
            format!(
                "{} {} its path, the job graph or its own header",
                count(contradictions.len(), "piece of capture evidence", "pieces of capture evidence"),
                if contradictions.len() == 1 { "contradicts" } else { "contradict" }
            ),
        )
        .next("do not take this evidence: the engine writes none like it; collect again")
        .details(contradictions.into_iter().chain(missing).take(30));
    }
    if missing.is_empty() {
        CheckResult::new(
            "bundle.completeness",
            Status::Passed,
            "the selected checkpoint's marker, every participant's sidecar, and everything the manifest claims are listed",
        )
        .evidence([format!(
            "checkpoint {}, {} participants; state {}, captures {} ({} epochs), traces {}, job manifest {}",
            sel.checkpoint,
            sel.participants.len(),
            m.contents.state,
            m.contents.captures,
            m.epochs.len(),
            m.contents.traces,
            m.contents.job_manifest
        )])
        .details(absences)
    } else {
        CheckResult::new(
            "bundle.completeness",
            Status::Failed,
            format!("{} missing", count(missing.len(), "piece of evidence is", "pieces of evidence are")),
        )
        .next("collect again with the options that include them")
        .details(missing.into_iter().chain(absences).take(30))
    }
}

/// A captured epoch, read whole from vouched bytes: its header names the
/// job, operator, subtask and epoch of its path, and its counts, bound,
/// truncation flag and events agree.
fn capture_holds_together(bundle: &Bundle, e: &clink_bundle::EpochEntry) -> Result<(), String> {
    let (op, subtask, epoch) = (e.operator_id(), e.subtask, e.epoch);
    // Listed, so it must read: a file over the reader's bound, or not what
    // the manifest vouches for, is a problem here too (never "fine").
    let bytes = bundle.capture_bytes(op, subtask, epoch, clink_replay::MAX_CAPTURE_BYTES).map_err(|e| e.to_string())?;
    let shape = clink_engine::capture::read_capture_shape(&bytes).map_err(|e| e.to_string())?;
    shape.header.check_names(bundle.job_id(), op.0, subtask, epoch).map_err(|e| e.to_string())?;
    match shape.inconsistencies().as_slice() {
        [] => Ok(()),
        found => Err(found.join("; ")),
    }
}

/// A captured op.json describes the operator and subtask its path names, as
/// the job graph has them (every field the graph names).
fn op_spec_agrees(
    bundle: &Bundle,
    graph: Option<&clink_engine::job::JobGraph>,
    operator: clink_basics::ids::OperatorId,
    subtask: u32,
) -> Result<(), String> {
    let spec = bundle.op_spec(operator, subtask).map_err(|e| e.to_string())?;
    if spec.operator_id() != operator.0 || spec.subtask != subtask || spec.job != bundle.manifest.job.id {
        return Err(format!(
            "the op.json names job {} operator {} subtask {}; its path says job {} operator {operator} subtask {subtask}",
            spec.job, spec.id, spec.subtask, bundle.manifest.job.id
        ));
    }
    match graph {
        Some(graph) => clink_replay::bundle::spec_agrees_with_graph(&spec, graph, subtask).map_err(|e| e.0),
        None => Ok(()),
    }
}

/// A sink's interval evidence names the job, operator, subtask and epoch of
/// its path and a sink of the job graph, and accounts for the capture of
/// that epoch as the capture's own header does.
fn sink_evidence_agrees(
    bundle: &Bundle,
    graph: Option<&clink_engine::job::JobGraph>,
    operator: clink_basics::ids::OperatorId,
    subtask: u32,
    epoch: u64,
) -> Result<(), String> {
    let doc = bundle.sink_evidence(operator, subtask, epoch).map_err(|e| e.to_string())?;
    let placed = (bundle.manifest.job.id.as_str(), operator.to_string(), subtask, epoch);
    if (doc.job.as_str(), doc.operator.clone(), doc.subtask, doc.epoch) != placed {
        return Err(format!(
            "the sink evidence names job {} operator {} subtask {} epoch {}; its path says job {} operator {} subtask {} epoch {}",
            doc.job, doc.operator, doc.subtask, doc.epoch, placed.0, placed.1, placed.2, placed.3
        ));
    }
    if doc.previous_barrier >= epoch {
        return Err(format!("its previous barrier {} is not before its epoch {epoch}", doc.previous_barrier));
    }
    if let Some(graph) = graph {
        let Some(op) = graph.operator(operator) else {
            return Err(format!("the job graph has no operator {operator}"));
        };
        if op.spec.descriptor.sink_family().is_none() {
            return Err(format!("operator {operator} is a {}, not a sink", op.spec.type_name));
        }
        if op.spec.uid != doc.uid {
            return Err(format!(
                "the sink evidence names uid {}; the job graph's operator {operator} is {}",
                doc.uid, op.spec.uid
            ));
        }
    }
    let capture = clink_bundle::manifest::capture_path(operator, subtask, epoch);
    if doc.capture.file != capture.rsplit('/').next().unwrap_or_default() && doc.capture.file != capture {
        return Err(format!("it accounts for capture {:?}, not {capture}", doc.capture.file));
    }
    if bundle.artifact(&capture).is_some() {
        let bytes = bundle
            .capture_bytes(operator, subtask, epoch, clink_replay::MAX_CAPTURE_BYTES)
            .map_err(|e| e.to_string())?;
        let h = clink_engine::capture::format::read_capture_header(&bytes).map_err(|e| e.to_string())?;
        let account = (doc.capture.records, doc.capture.events, doc.capture.stored_events, doc.capture.truncated);
        let header = (h.true_records, h.true_events, h.stored_events, h.truncated);
        if account != header {
            return Err(format!(
                "it accounts for {} records, {} events, {} stored, truncated {}; the capture's header says {} records, {} events, {} stored, truncated {}",
                account.0, account.1, account.2, account.3, header.0, header.1, header.2, header.3
            ));
        }
    }
    Ok(())
}
