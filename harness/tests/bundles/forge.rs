//! Recipe actions that forge evidence the engine's own writers would accept:
//! a file written and listed, two subtasks' state exchanged with headers and
//! sidecars made to match, trace lines of one event edited, a marker pointed
//! at a second job graph. Each re-vouches for what it wrote, so only a
//! comparison of the evidence with itself can catch it.

use std::fs;
use std::path::Path;

use clink_basics::digest::sha256_hex;
use clink_engine::checkpoint::snapshot::{encode_snapshot_by, SnapshotMeta};
use clink_engine::checkpoint::{CheckpointLayout, FileStateBackend, GENERATION};
use serde_json::Value as Json;

use super::{manifest, placed, revouch, save_manifest};

/// Applies a forging action; `false` when `op` is not one of them.
pub fn apply(dir: &Path, op: &str, action: &Json) -> bool {
    match op {
        "write_file" => write_file(dir, action),
        "exchange_state" => exchange_state(dir, action),
        "trace_event" => trace_event(dir, action),
        "marker_graph" => marker_graph(dir, action),
        "json_append" => {
            // Appends a value to an array of a JSON artifact, re-vouched.
            let m = manifest(dir);
            let rel = placed(&m, action["path"].as_str().unwrap());
            let mut doc: Json = serde_json::from_slice(&fs::read(dir.join(&rel)).unwrap()).unwrap();
            let list = doc.pointer_mut(action["pointer"].as_str().unwrap()).and_then(Json::as_array_mut).unwrap();
            list.push(action["value"].clone());
            fs::write(dir.join(&rel), serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
            revouch(dir, &rel);
        }
        "unlist" => {
            let m = manifest(dir);
            let rel = placed(&m, action["path"].as_str().unwrap());
            fs::remove_file(dir.join(&rel)).unwrap();
            super::unlist(dir, &rel);
        }
        _ => return false,
    }
    true
}

/// Writes `content` (a string as is, anything else as pretty JSON) at a path
/// (`{job}` and `{checkpoint}` filled in), listed with `role` and its hash.
fn write_file(dir: &Path, action: &Json) {
    let m = manifest(dir);
    let rel = placed(&m, action["path"].as_str().unwrap());
    let bytes = match &action["content"] {
        Json::String(text) => placed(&m, text).into_bytes(),
        doc => placed(&m, &serde_json::to_string_pretty(doc).unwrap()).into_bytes(),
    };
    fs::create_dir_all(dir.join(&rel).parent().unwrap()).unwrap();
    fs::write(dir.join(&rel), bytes).unwrap();
    list(dir, &rel, action["role"].as_str().unwrap());
}

/// Lists a path (or keeps its entry) and vouches for what is on disk.
fn list(dir: &Path, rel: &str, role: &str) {
    let mut m = manifest(dir);
    let artifacts = m["artifacts"].as_array_mut().unwrap();
    if !artifacts.iter().any(|a| a["path"] == rel) {
        artifacts.push(serde_json::json!({"path": rel, "role": role, "size": 0, "sha256": ""}));
    }
    save_manifest(dir, &m);
    revouch(dir, rel);
}

/// Two participants' snapshots of the selected checkpoint exchanged, each
/// written back in the engine's own encoding under the other's header and
/// the run that wrote it, with a sidecar that agrees, so header, sidecar,
/// run and path all name where each now sits.
fn exchange_state(dir: &Path, action: &Json) {
    let m = manifest(dir);
    let job: u64 = m["job"]["id"].as_str().unwrap().parse().unwrap();
    let checkpoint = m["selection"]["checkpoint"].as_u64().unwrap();
    let layout = CheckpointLayout::new(dir.join("checkpoint"), job);
    let backend = FileStateBackend::new(layout.clone());
    let (a, b) = (action["a"].as_str().unwrap(), action["b"].as_str().unwrap());
    let read = |p: &str| backend.read(GENERATION, p, checkpoint).unwrap();
    let (sa, sb) = (read(a), read(b));
    for (p, own, other) in [(a, &sa, &sb), (b, &sb, &sa)] {
        let bytes = encode_snapshot_by(&own.header, &other.slots, own.run.as_ref());
        let meta = SnapshotMeta::describe(&own.header, p, &other.slots, &bytes).written_by(own.run.clone());
        fs::write(layout.snapshot(GENERATION, p, checkpoint), &bytes).unwrap();
        fs::write(layout.snapshot_meta(GENERATION, p, checkpoint), serde_json::to_vec_pretty(&meta).unwrap()).unwrap();
        let base = format!("checkpoint/_state/{job}/v{GENERATION}/{p}/checkpoint-{checkpoint}.snap");
        revouch(dir, &base);
        revouch(dir, &format!("{base}.meta"));
    }
}

/// Sets fields on every trace line of one event (optionally only where
/// `where` matches), re-vouched for.
fn trace_event(dir: &Path, action: &Json) {
    let m = manifest(dir);
    let event = action["event"].as_str().unwrap();
    let mut edited = 0;
    let traces: Vec<String> = m["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["role"] == "trace")
        .map(|a| a["path"].as_str().unwrap().to_string())
        .collect();
    for rel in traces {
        let text = fs::read_to_string(dir.join(&rel)).unwrap();
        let mut out = String::new();
        for line in text.lines() {
            let mut v: Json = serde_json::from_str(line).unwrap();
            let wanted = v["event"] == event
                && action["where"].as_object().is_none_or(|w| w.iter().all(|(k, want)| &v[k] == want));
            if wanted && (edited == 0 || action["first_only"] != true) {
                for (k, value) in action["set"].as_object().unwrap() {
                    v[k] = value.clone();
                }
                edited += 1;
            }
            out.push_str(&v.to_string());
            out.push('\n');
        }
        fs::write(dir.join(&rel), out).unwrap();
        revouch(dir, &rel);
    }
    assert!(edited > 0, "no {event} line matched {action}");
}

/// A second job graph (the selected one with one field set), written under
/// its own hash and listed, and COMPLETED-`checkpoint` pointed at it.
fn marker_graph(dir: &Path, action: &Json) {
    let m = manifest(dir);
    let job = m["job"]["id"].as_str().unwrap().to_string();
    let selected = format!("checkpoint/_jobs/{job}/COMPLETED-{}", m["selection"]["checkpoint"]);
    let marker: Json = serde_json::from_slice(&fs::read(dir.join(&selected)).unwrap()).unwrap();
    let graph_rel = format!("checkpoint/_jobs/{job}/{}", marker["graph"]["file"].as_str().unwrap());
    let mut graph: Json = serde_json::from_slice(&fs::read(dir.join(&graph_rel)).unwrap()).unwrap();
    *graph.pointer_mut(action["pointer"].as_str().unwrap()).unwrap() = action["value"].clone();
    let bytes = serde_json::to_vec_pretty(&graph).unwrap();
    let sha = sha256_hex(&bytes);
    let file = format!("graph-{sha}.json");
    let rel = format!("checkpoint/_jobs/{job}/{file}");
    fs::write(dir.join(&rel), bytes).unwrap();
    list(dir, &rel, "job_graph");
    let target = format!("checkpoint/_jobs/{job}/COMPLETED-{}", action["checkpoint"].as_u64().unwrap());
    let mut doc: Json = serde_json::from_slice(&fs::read(dir.join(&target)).unwrap()).unwrap();
    doc["graph"] = serde_json::json!({"file": file, "sha256": sha});
    fs::write(dir.join(&target), serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
    revouch(dir, &target);
}
