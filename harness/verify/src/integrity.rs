//! The integrity checks: bundle.manifest, bundle.artifacts, bundle.completeness.

use clink_basics::text::count;
use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use clink_basics::digest::sha256_file;

use super::{CheckResult, Status};
use clink_bundle::model::{Depth, Evidence, Fact};
use clink_bundle::paths::{resolve, EVIDENCE_DIRS};
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

pub fn completeness(bundle: &Bundle, evidence: &Evidence) -> CheckResult {
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
    // From consistency on: every artifact read, and what they say together.
    let read = evidence.depth == Some(Depth::Contents);
    let contradictions = if read {
        crate::state::findings(evidence, &[Fact::Unread, Fact::Writer, Fact::Capture, Fact::Trace]).unwrap_or_default()
    } else {
        Vec::new()
    };
    if !contradictions.is_empty() {
        return CheckResult::new(
            name_of_completeness(),
            Status::Failed,
            format!(
                "{} in the bundle's evidence: an artifact that does not read, or two that disagree",
                count(contradictions.len(), "problem", "problems")
            ),
        )
        .next("do not take this evidence: the engine writes none like it; collect again")
        .details(contradictions.into_iter().chain(missing).take(30));
    }
    if !missing.is_empty() {
        return CheckResult::new(
            name_of_completeness(),
            Status::Failed,
            format!("{} missing", count(missing.len(), "piece of evidence is", "pieces of evidence are")),
        )
        .next("collect again with the options that include them")
        .details(missing.into_iter().chain(absences).take(30));
    }
    if read && !evidence.identified {
        return CheckResult::new(
            name_of_completeness(),
            Status::Unavailable,
            "no artifact of the bundle names the run that wrote it (a build before run identities wrote it): nothing establishes that its evidence is one lineage's",
        )
        .next("collect from a checkpoint directory a build with run identities wrote");
    }
    let scope = if read {
        "; every artifact read, and every fact two of them state agrees"
    } else {
        "; the contents are examined from the consistency profile on"
    };
    CheckResult::new(
        name_of_completeness(),
        Status::Passed,
        format!("the selected checkpoint's marker, every participant's sidecar, and everything the manifest claims are listed{scope}"),
    )
    .evidence([format!(
        "checkpoint {}, {} participants; state {}, captures {} ({} epochs), traces {}, job manifest {}{}",
        sel.checkpoint,
        sel.participants.len(),
        m.contents.state,
        m.contents.captures,
        m.epochs.len(),
        m.contents.traces,
        m.contents.job_manifest,
        evidence.lineage.as_ref().map(|l| format!("; lineage {l}, runs {:?}", evidence.runs.keys().collect::<Vec<_>>())).unwrap_or_default()
    )])
    .details(absences)
}

fn name_of_completeness() -> &'static str {
    "bundle.completeness"
}
