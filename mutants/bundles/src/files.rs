//! Mutants of whole files: each kind's file dropped, changed without the
//! manifest re-vouching it, copied to the place of another of its kind
//! (another checkpoint, epoch, subtask or process), two of a kind
//! exchanged; and artifacts added that the job's evidence should not hold
//! (commit-confirmed evidence in a job of another family, an import that
//! never happened, a run that never ran).

use std::collections::BTreeSet;

use clink_bundle::paths::ArtifactKind;
use serde_json::Value as Json;

use super::json::{changed, instances, pretty, short};
use super::{kind_label, Base, Edit, Mutant, Part};

pub(crate) fn mutants(base: &Base, out: &mut Vec<Mutant>) {
    let kinds: BTreeSet<&'static str> = base.files.keys().map(|p| kind_label(p)).collect();
    for kind in kinds {
        let chosen = instances(base, |k| super::json::label(k) == kind);
        for path in &chosen {
            let artifact = short(path);
            let mut edits = vec![Edit::Remove { path: path.clone() }];
            // A snapshot goes with its sidecar, as the collector takes them.
            if kind == "snapshot" {
                edits.push(Edit::Remove { path: format!("{path}.meta") });
            }
            out.push(base.mutant(kind, &artifact, "file", "dropped", Part::Contents, edits));
            let mut bytes = base.files[path].clone();
            if let Some(b) = bytes.get_mut(0) {
                *b ^= 0x20;
            }
            out.push(base.mutant(
                kind,
                &artifact,
                "file",
                "changed_not_revouched",
                Part::Listing,
                vec![Edit::Unvouched { path: path.clone(), bytes }],
            ));
            if let Some(to) = elsewhere(path) {
                if !base.files.contains_key(&to) {
                    let mut edits =
                        vec![Edit::Write { path: to.clone(), bytes: base.files[path].clone(), role: base.role(path) }];
                    if kind == "capture" {
                        edits.push(index_entry(base, path, &to));
                    }
                    out.push(base.mutant(
                        kind,
                        &artifact,
                        "file",
                        &format!("copied_to_{}", short(&to)),
                        Part::Contents,
                        edits,
                    ));
                }
            }
        }
        if let [a, b, ..] = chosen.as_slice() {
            if base.files[a] != base.files[b] {
                let edits = vec![
                    Edit::Write { path: a.clone(), bytes: base.files[b].clone(), role: base.role(a) },
                    Edit::Write { path: b.clone(), bytes: base.files[a].clone(), role: base.role(b) },
                ];
                let part = if kind == "trace" { Part::Traces } else { Part::Contents };
                out.push(base.mutant(kind, &format!("{}+{}", short(a), short(b)), "file", "exchanged", part, edits));
            }
        }
    }
    not_there(base, out);
}

/// Where a copy of a file is another of its kind: the number in its name
/// (checkpoint, epoch, incarnation, process) one more.
fn elsewhere(path: &str) -> Option<String> {
    let (dir, name) = path.rsplit_once('/')?;
    // The last run of digits of the name (its checkpoint or epoch), one more.
    let bytes: Vec<char> = name.chars().collect();
    let end = bytes.iter().rposition(|c| c.is_ascii_digit())? + 1;
    let start = bytes[..end].iter().rposition(|c| !c.is_ascii_digit()).map_or(0, |i| i + 1);
    let n: u64 = bytes[start..end].iter().collect::<String>().parse().ok()?;
    let renamed: String =
        bytes[..start].iter().collect::<String>() + &(n + 1).to_string() + &bytes[end..].iter().collect::<String>();
    Some(format!("{dir}/{renamed}"))
}

/// The epoch index entry of a capture copied to `to`.
fn index_entry(base: &Base, from: &str, to: &str) -> Edit {
    let mut m = base.manifest.clone();
    let entry = m["epochs"].as_array().and_then(|l| l.iter().find(|e| e["path"] == from)).cloned();
    if let (Some(mut e), Some(Some((op, sub, epoch)))) = (entry, Some(clink_bundle::manifest::parse_capture_path(to))) {
        e["operator"] = Json::from(op.to_string());
        e["subtask"] = Json::from(sub);
        e["epoch"] = Json::from(epoch);
        e["path"] = Json::from(to);
        if let Some(l) = m["epochs"].as_array_mut() {
            l.push(e);
        }
    }
    Edit::IndexEpochs(m["epochs"].clone())
}

/// Artifacts the job's evidence should not hold.
fn not_there(base: &Base, out: &mut Vec<Mutant>) {
    let job = base.job();
    let selected = base.selected();
    let marker_path = format!("checkpoint/_jobs/{job}/COMPLETED-{selected}");
    let Some(marker) = base.files.get(&marker_path).and_then(|b| serde_json::from_slice::<Json>(b).ok()) else {
        return;
    };
    let run = marker["run"].clone();
    let confirms = base.manifest["job"]["requires_commit_confirmation"] == true;
    let sinks: Vec<String> = base.manifest["delivery"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| d["operator"].as_str().map(str::to_string))
        .flat_map(|op| {
            marker["participants"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p.as_str())
                .filter(move |p| p.starts_with(&format!("op-{op}-")))
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    let mut add = |what: &str, path: String, role: &str, doc: Json| {
        if !base.files.contains_key(&path) {
            let edits = vec![Edit::Write { path: path.clone(), bytes: pretty(&doc), role: role.into() }];
            out.push(base.mutant("added", &short(&path), "file", what, Part::Contents, edits));
        }
    };
    // A CONFIRMED marker: in a job of another family, or of a checkpoint
    // the sinks never confirmed.
    let unconfirmed = if confirms {
        base.of_kind(|k| matches!(k, ArtifactKind::CompletedMarker { .. }))
            .into_iter()
            .filter_map(
                |(_, k)| if let ArtifactKind::CompletedMarker { checkpoint, .. } = k { Some(checkpoint) } else { None },
            )
            .find(|c| !base.files.contains_key(&format!("checkpoint/_jobs/{job}/CONFIRMED-{c}")))
    } else {
        Some(selected)
    };
    if let Some(c) = unconfirmed {
        let doc = serde_json::json!({"format": "clink-confirmed-marker", "version": 2, "job": job.to_string(), "checkpoint": c,
            "sinks": sinks, "confirmed_by": "sinks", "graph": marker["graph"], "run": run});
        add("confirmed_marker_not_confirmed", format!("checkpoint/_jobs/{job}/CONFIRMED-{c}"), "confirmed_marker", doc);
    }
    if let Some(sink) = sinks.first() {
        if !confirms {
            let handle = serde_json::json!({"checkpoint": selected, "transactional_id": "t", "producer_id": 1, "epoch": 0, "rows": []});
            let receipt = serde_json::json!({"format": "clink-commit-receipt", "version": 2, "job": job.to_string(), "participant": sink,
                "proven_by": "sink", "handle": handle, "run": run});
            add(
                "receipt_of_another_family",
                format!("checkpoint/_jobs/{job}/receipts/{sink}/receipt-{selected}"),
                "commit_receipt",
                receipt,
            );
            let unresolved = serde_json::json!({"format": "clink-unresolved-marker", "version": 2, "job": job.to_string(), "participant": sink,
                "handle": handle, "run": run});
            add(
                "unresolved_of_another_family",
                format!("checkpoint/_jobs/{job}/unresolved/{sink}/unresolved-{selected}"),
                "unresolved_marker",
                unresolved,
            );
        }
    }
    // An import that never happened, of the selected checkpoint.
    let imported = serde_json::json!({"format": "clink-imported-record", "version": 1, "job": job.to_string(), "checkpoint": selected,
        "from": run, "run": run});
    add("import_that_never_happened", format!("checkpoint/_jobs/{job}/IMPORTED"), "imported_record", imported);
    // A run that never ran: the next incarnation's record.
    let newest = base
        .of_kind(|k| matches!(k, ArtifactKind::RunRecord { .. }))
        .into_iter()
        .filter_map(|(p, _)| serde_json::from_slice::<Json>(&base.files[p]).ok())
        .max_by_key(|r| r["run"]["incarnation"].as_u64());
    if let Some(mut record) = newest {
        let n = record["run"]["incarnation"].as_u64().unwrap_or(0) + 1;
        record["run"]["incarnation"] = Json::from(n);
        record["trace"] = Json::Null;
        add("run_that_never_ran", format!("checkpoint/_jobs/{job}/RUN-{n}"), "run_record", record);
    }
    // A trace file of a process no run recorded.
    if let Some((path, _)) = base.of_kind(|k| matches!(k, ArtifactKind::Trace { .. })).into_iter().next() {
        let name = path.trim_start_matches("traces/");
        let mut parts: Vec<&str> = name.splitn(3, '-').collect();
        let pid = parts.get(1).map(|p| changed(p)).unwrap_or_default();
        if parts.len() == 3 {
            parts[1] = &pid;
            let to = format!("traces/{}", parts.join("-"));
            let edits = vec![Edit::Write { path: to.clone(), bytes: base.files[path].clone(), role: "trace".into() }];
            out.push(base.mutant("added", &short(&to), "file", "trace_of_another_process", Part::Traces, edits));
        }
    }
}
