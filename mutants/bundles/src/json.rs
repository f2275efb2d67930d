//! Mutants of every field of every JSON format a bundle holds (markers,
//! records, receipts, sidecars, op.json, sink evidence, the job manifest,
//! the job graph) and of the bundle manifest itself: each leaf one more or
//! one less, flipped, taken from the same field of another artifact of its
//! kind (another subtask, checkpoint or run), or changed; each key dropped;
//! each list's first entry dropped or duplicated, the list reversed.

use std::collections::BTreeSet;

use clink_basics::digest::sha256_hex;
use clink_bundle::paths::{kind_of, ArtifactKind};
use serde_json::Value as Json;

use super::{kind_label, Base, Edit, Mutant, Part};

/// The JSON kinds, and the instances of each a mutant is made of: the
/// first, the selected checkpoint's, the last.
pub(crate) fn instances(base: &Base, wanted: impl Fn(&ArtifactKind) -> bool) -> Vec<String> {
    let all: Vec<String> = base.of_kind(wanted).into_iter().map(|(p, _)| p.clone()).collect();
    let selected = base.selected();
    let of_selected = all
        .iter()
        .find(|p| p.ends_with(&format!("-{selected}")) || p.contains(&format!("checkpoint-{selected}.")))
        .cloned();
    let mut chosen: Vec<String> =
        [all.first().cloned(), of_selected, all.last().cloned()].into_iter().flatten().collect();
    let mut seen = BTreeSet::new();
    chosen.retain(|p| seen.insert(p.clone()));
    chosen
}

fn is_json_kind(k: &ArtifactKind) -> bool {
    !matches!(
        k,
        ArtifactKind::Snapshot { .. }
            | ArtifactKind::Capture { .. }
            | ArtifactKind::Trace { .. }
            | ArtifactKind::LineageRecord { .. }
    )
}

pub(crate) fn mutants(base: &Base, out: &mut Vec<Mutant>) {
    let kinds: BTreeSet<&'static str> = base.of_kind(is_json_kind).into_iter().map(|(p, _)| kind_label(p)).collect();
    for kind in kinds {
        let paths = instances(base, |k| is_json_kind(k) && label(k) == kind);
        let siblings: Vec<Json> = base
            .of_kind(|k| label(k) == kind)
            .into_iter()
            .filter_map(|(p, _)| serde_json::from_slice(&base.files[p]).ok())
            .collect();
        for path in paths {
            let Ok(doc) = serde_json::from_slice::<Json>(&base.files[&path]) else { continue };
            for (pointer, edited, mutation) in edits(&doc, &siblings) {
                let artifact = short(&path);
                let edits = if kind == "job_graph" {
                    regraph(base, &path, &edited)
                } else {
                    vec![Edit::Write { path: path.clone(), bytes: pretty(&edited), role: base.role(&path) }]
                };
                out.push(base.mutant(kind, &artifact, &pointer, mutation, Part::Contents, edits));
            }
        }
    }
    manifest_mutants(base, out);
}

/// A kind's short name (what mutants' names and the per-kind rates say).
pub(crate) fn label(k: &ArtifactKind) -> &'static str {
    match k {
        ArtifactKind::CompletedMarker { .. } => "completed_marker",
        ArtifactKind::ConfirmedMarker { .. } => "confirmed_marker",
        ArtifactKind::RestoredRecord { .. } => "restored_record",
        ArtifactKind::LineageRecord { .. } => "lineage_record",
        ArtifactKind::RunRecord { .. } => "run_record",
        ArtifactKind::ImportedRecord { .. } => "imported_record",
        ArtifactKind::CommitReceipt { .. } => "commit_receipt",
        ArtifactKind::UnresolvedMarker { .. } => "unresolved_marker",
        ArtifactKind::JobGraph { .. } => "job_graph",
        ArtifactKind::Snapshot { .. } => "snapshot",
        ArtifactKind::SnapshotMeta { .. } => "sidecar",
        ArtifactKind::OpSpec { .. } => "op_spec",
        ArtifactKind::Capture { .. } => "capture",
        ArtifactKind::SinkEvidence { .. } => "sink_evidence",
        ArtifactKind::Trace { .. } => "trace",
        ArtifactKind::JobManifest => "job_manifest",
    }
}

/// A path shortened for a mutant's name.
pub(crate) fn short(path: &str) -> String {
    path.trim_start_matches("checkpoint/_jobs/")
        .trim_start_matches("checkpoint/_state/")
        .trim_start_matches("capture/")
        .trim_start_matches("traces/")
        .to_string()
}

pub(crate) fn pretty(doc: &Json) -> Vec<u8> {
    serde_json::to_vec_pretty(doc).unwrap_or_default()
}

/// Every edit of a document: `(pointer, the edited document, the mutation)`.
pub(crate) fn edits(doc: &Json, siblings: &[Json]) -> Vec<(String, Json, &'static str)> {
    let mut out = Vec::new();
    walk(doc, String::new(), &mut |pointer, value| {
        for (mutation, new) in leaf_edits(&pointer, value, siblings) {
            let mut edited = doc.clone();
            match (&new, pointer.rsplit_once('/')) {
                (Edited::Drop, Some((parent, key))) => {
                    if let Some(Json::Object(map)) = edited.pointer_mut(parent) {
                        map.remove(key);
                    }
                }
                (Edited::Value(v), _) => {
                    if let Some(slot) = edited.pointer_mut(&pointer) {
                        *slot = v.clone();
                    }
                }
                _ => continue,
            }
            if edited != *doc {
                out.push((pointer.clone(), edited, mutation));
            }
        }
    });
    out
}

enum Edited {
    Value(Json),
    Drop,
}

/// Visits every value of a document with its pointer (a list: its first
/// and last entries only, so a long list of digests is not a thousand mutants).
fn walk(value: &Json, at: String, visit: &mut dyn FnMut(String, &Json)) {
    if !at.is_empty() {
        visit(at.clone(), value);
    }
    match value {
        Json::Object(map) => map.iter().for_each(|(k, v)| walk(v, format!("{at}/{k}"), visit)),
        Json::Array(items) => {
            let mut seen = BTreeSet::new();
            for i in [0, items.len().saturating_sub(1)] {
                if i < items.len() && seen.insert(i) {
                    walk(&items[i], format!("{at}/{i}"), visit);
                }
            }
        }
        _ => {}
    }
}

/// The mutations of one value at `pointer`.
fn leaf_edits(pointer: &str, value: &Json, siblings: &[Json]) -> Vec<(&'static str, Edited)> {
    let mut out = Vec::new();
    let parent_is_object = pointer.rsplit('/').next().is_none_or(|k| k.parse::<usize>().is_err());
    if parent_is_object {
        out.push(("dropped", Edited::Drop));
    }
    let sibling = siblings.iter().filter_map(|s| s.pointer(pointer)).find(|v| *v != value && !v.is_null()).cloned();
    match value {
        Json::Number(n) => {
            if let Some(u) = n.as_u64() {
                out.push(("plus_one", Edited::Value(Json::from(u.saturating_add(1)))));
                if u > 0 {
                    out.push(("minus_one", Edited::Value(Json::from(u - 1))));
                }
            } else if let Some(i) = n.as_i64() {
                out.push(("plus_one", Edited::Value(Json::from(i.saturating_add(1)))));
                out.push(("minus_one", Edited::Value(Json::from(i.saturating_sub(1)))));
            }
            if let Some(s) = sibling.filter(Json::is_number) {
                out.push(("from_another", Edited::Value(s)));
            }
        }
        Json::String(s) => {
            match sibling.filter(Json::is_string) {
                Some(other) => out.push(("from_another", Edited::Value(other))),
                None => out.push(("changed", Edited::Value(Json::String(changed(s))))),
            }
            if sibling_changed_too(s) {
                out.push(("changed", Edited::Value(Json::String(changed(s)))));
            }
        }
        Json::Bool(b) => out.push(("flipped", Edited::Value(Json::Bool(!b)))),
        Json::Null => {
            if let Some(s) = sibling {
                out.push(("from_another", Edited::Value(s)));
            }
        }
        Json::Array(items) if !items.is_empty() => {
            let mut dropped = items.clone();
            dropped.remove(0);
            out.push(("first_dropped", Edited::Value(Json::Array(dropped))));
            let mut twice = items.clone();
            twice.insert(0, items[0].clone());
            out.push(("first_duplicated", Edited::Value(Json::Array(twice))));
            if items.len() > 1 {
                out.push(("reversed", Edited::Value(Json::Array(items.iter().rev().cloned().collect()))));
            }
        }
        Json::Object(_) | Json::Array(_) => {}
    }
    out
}

/// Whether a string gets a changed value besides another artifact's (for
/// text whose form carries meaning: ids, hashes, names of places).
fn sibling_changed_too(s: &str) -> bool {
    s.chars().any(|c| c.is_ascii_digit())
}

/// A string changed in its own form: a number one more, a hex digest or id
/// with its last digit changed, other text with a suffix.
pub(crate) fn changed(s: &str) -> String {
    if let Ok(n) = s.parse::<u64>() {
        return (n + 1).to_string();
    }
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit()) {
        let mut t: Vec<u8> = s.bytes().collect();
        let last = t.len() - 1;
        t[last] = if t[last] == b'0' { b'1' } else { b'0' };
        return String::from_utf8(t).unwrap_or_default();
    }
    match s.rsplit_once('-') {
        Some((head, tail)) if tail.parse::<u64>().is_ok() => format!("{head}-{}", tail.parse::<u64>().unwrap_or(0) + 1),
        _ => format!("{s}-x"),
    }
}

/// A job graph edited: written under its new hash, and every marker that
/// named the old file pointed at it, so the graph and its references agree.
fn regraph(base: &Base, path: &str, edited: &Json) -> Vec<Edit> {
    let bytes = pretty(edited);
    let sha = sha256_hex(&bytes);
    let old = path.rsplit('/').next().unwrap_or_default().to_string();
    let dir = path.rsplit_once('/').map_or("", |(d, _)| d);
    let file = format!("graph-{sha}.json");
    let mut edits = vec![Edit::Remove { path: path.to_string() }];
    edits.push(Edit::Write { path: format!("{dir}/{file}"), bytes, role: "job_graph".into() });
    for (p, k) in
        base.of_kind(|k| matches!(k, ArtifactKind::CompletedMarker { .. } | ArtifactKind::ConfirmedMarker { .. }))
    {
        let _ = k;
        let Ok(mut m) = serde_json::from_slice::<Json>(&base.files[p]) else { continue };
        if m["graph"]["file"] == old.as_str() {
            m["graph"] = serde_json::json!({"file": file, "sha256": sha});
            edits.push(Edit::Write { path: p.clone(), bytes: pretty(&m), role: base.role(p) });
        }
    }
    edits
}

/// The manifest: its claims (the job, the selection, delivery, contents,
/// bounds, the epoch index, the notes, the collector), and its listing (the
/// format, and each kind's first artifact entry).
fn manifest_mutants(base: &Base, out: &mut Vec<Mutant>) {
    let doc = &base.manifest;
    let claims = ["job", "selection", "delivery", "contents", "bounds", "epochs", "absent", "excluded", "collector"];
    for (pointer, edited, mutation) in edits(doc, &[]) {
        let top = pointer.trim_start_matches('/').split('/').next().unwrap_or_default();
        let part = if claims.contains(&top) {
            Part::Claims
        } else if top == "artifacts" {
            continue;
        } else {
            Part::Listing
        };
        out.push(base.mutant("manifest", "manifest.json", &pointer, mutation, part, vec![Edit::Manifest(edited)]));
    }
    // The listing: one artifact entry of each kind, each field.
    let Some(list) = doc["artifacts"].as_array() else { return };
    let mut kinds = BTreeSet::new();
    for (i, a) in list.iter().enumerate() {
        let path = a["path"].as_str().unwrap_or_default();
        if kind_of(path).is_none() || !kinds.insert(kind_label(path)) {
            continue;
        }
        let others: Vec<Json> = list.iter().filter(|b| b != &a).cloned().collect();
        for (pointer, edited_entry, mutation) in edits(a, &others) {
            let mut edited = doc.clone();
            edited["artifacts"][i] = edited_entry;
            let name = format!("artifacts/{}{pointer}", kind_label(path));
            out.push(base.mutant(
                "manifest",
                "manifest.json",
                &name,
                mutation,
                Part::Listing,
                vec![Edit::Manifest(edited)],
            ));
        }
        let mut unlisted = doc.clone();
        if let Some(l) = unlisted["artifacts"].as_array_mut() {
            l.remove(i);
        }
        let name = format!("artifacts/{}", kind_label(path));
        out.push(base.mutant(
            "manifest",
            "manifest.json",
            &name,
            "entry_dropped",
            Part::Listing,
            vec![Edit::Manifest(unlisted)],
        ));
        let mut twice = doc.clone();
        if let Some(l) = twice["artifacts"].as_array_mut() {
            l.push(a.clone());
        }
        out.push(base.mutant(
            "manifest",
            "manifest.json",
            &name,
            "entry_duplicated",
            Part::Listing,
            vec![Edit::Manifest(twice)],
        ));
    }
}
