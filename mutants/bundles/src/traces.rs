//! Mutants of the protocol traces, each file kept well formed (sequence
//! numbers from 1, timestamps increasing) so only what the lines say can
//! refute it: in every file, the first line of each event has each field
//! changed (one more or less, flipped, another line's value), and is
//! dropped, duplicated, or exchanged with the next line.

use std::collections::BTreeSet;

use clink_bundle::paths::ArtifactKind;
use serde_json::{Map, Value as Json};

use super::json::{changed, short};
use super::{Base, Edit, Mutant, Part};

type Line = Map<String, Json>;

fn lines(bytes: &[u8]) -> Option<Vec<Line>> {
    std::str::from_utf8(bytes).ok()?.lines().map(|l| serde_json::from_str::<Line>(l).ok()).collect()
}

fn text(lines: &[Line]) -> Vec<u8> {
    lines.iter().map(|l| format!("{}\n", Json::Object(l.clone()))).collect::<String>().into_bytes()
}

/// Sequence numbers 1.. again after a line was dropped or added.
fn renumber(lines: &mut [Line]) {
    for (i, l) in lines.iter_mut().enumerate() {
        l.insert("seq".into(), Json::from(i as u64 + 1));
    }
}

pub(crate) fn mutants(base: &Base, out: &mut Vec<Mutant>) {
    let files: Vec<(String, Vec<Line>)> = base
        .of_kind(|k| matches!(k, ArtifactKind::Trace { .. }))
        .into_iter()
        .filter_map(|(p, _)| Some((p.clone(), lines(&base.files[p])?)))
        .collect();
    let every_line: Vec<&Line> = files.iter().flat_map(|(_, l)| l.iter()).collect();
    for (path, original) in &files {
        let artifact = short(path);
        let mut push = |field: String, mutation: &str, edited: Vec<Line>| {
            let bytes = text(&edited);
            if bytes != base.files[path] {
                let edits = vec![Edit::Write { path: path.clone(), bytes, role: base.role(path) }];
                out.push(base.mutant("trace", &artifact, &field, mutation, Part::Traces, edits));
            }
        };
        let mut seen = BTreeSet::new();
        for (i, line) in original.iter().enumerate() {
            let event = line.get("event").and_then(Json::as_str).unwrap_or_default().to_string();
            if !seen.insert(event.clone()) {
                continue;
            }
            for (key, value) in line {
                if key == "seq" {
                    continue;
                }
                let another = every_line
                    .iter()
                    .filter(|l| l.get("event") == line.get("event"))
                    .filter_map(|l| l.get(key))
                    .find(|v| *v != value)
                    .cloned();
                let edits: Vec<(&str, Json)> = match value {
                    Json::Number(n) => n
                        .as_u64()
                        .map(|u| {
                            let mut e = vec![("plus_one", Json::from(u + 1))];
                            if u > 0 {
                                e.push(("minus_one", Json::from(u - 1)));
                            }
                            e
                        })
                        .unwrap_or_default(),
                    Json::Bool(b) => vec![("flipped", Json::Bool(!b))],
                    Json::String(s) => vec![("changed", Json::String(changed(s)))],
                    _ => Vec::new(),
                }
                .into_iter()
                .chain(another.map(|a| ("from_another", a)))
                .collect();
                for (mutation, new) in edits {
                    let mut edited = original.clone();
                    edited[i].insert(key.clone(), new);
                    push(format!("{event}/{key}"), mutation, edited);
                }
            }
            let mut dropped = original.clone();
            dropped.remove(i);
            renumber(&mut dropped);
            push(event.clone(), "dropped", dropped);
            let ts = |l: &Line| l.get("ts").and_then(Json::as_u64).unwrap_or(0);
            let next_ts = original.get(i + 1).map_or(ts(line) + 2, ts);
            if next_ts > ts(line) + 1 {
                let mut twice = original.clone();
                let mut copy = line.clone();
                copy.insert("ts".into(), Json::from(ts(line) + 1));
                twice.insert(i + 1, copy);
                renumber(&mut twice);
                push(event.clone(), "duplicated", twice);
            }
            if i + 1 < original.len() {
                // The two lines' events exchanged, each keeping its place's seq and ts.
                let mut swapped = original.clone();
                let (a, b) = (original[i].clone(), original[i + 1].clone());
                for (at, from) in [(i, b), (i + 1, a)] {
                    let (seq, t) = (swapped[at]["seq"].clone(), swapped[at]["ts"].clone());
                    swapped[at] = from;
                    swapped[at].insert("seq".into(), seq);
                    swapped[at].insert("ts".into(), t);
                }
                // Named by what it exchanged with: whose order carries meaning
                // is then plain from the name.
                let next_event = original[i + 1].get("event").and_then(Json::as_str).unwrap_or_default();
                let whose =
                    if original[i].get("sub") != original[i + 1].get("sub") { "_of_another_subtask" } else { "" };
                push(event.clone(), &format!("swapped_with_{next_event}{whose}"), swapped);
            }
        }
    }
}
