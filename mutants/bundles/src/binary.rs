//! Mutants of the binary formats, each re-encoded coherently with the
//! engine's own writers so the file agrees with itself (and a snapshot with
//! its sidecar): a capture's header fields and its events (dropped,
//! duplicated, swapped, a value one more or changed, another subtask's
//! events under this header), a snapshot's header, its run and its slots
//! (dropped, another version, another checkpoint's or subtask's bytes).

use clink_bundle::paths::ArtifactKind;
use clink_engine::capture::format::{encode_header, read_capture, CaptureHeader, EventEncoder, CAPTURE_VERSION};
use clink_engine::checkpoint::backend::{parse_snapshot_meta, verify_snapshot_bytes};
use clink_engine::checkpoint::identity::{LineageId, RunIdentity};
use clink_engine::checkpoint::snapshot::{encode_snapshot_by, SnapshotHeader, SnapshotMeta, StateSlots};
use clink_engine::codec::Writer;
use clink_engine::event::Event;
use clink_engine::value::{Decimal, Value};

use super::json::{changed, instances, short};
use super::{Base, Edit, Mutant, Part};

pub(crate) fn mutants(base: &Base, out: &mut Vec<Mutant>) {
    captures(base, out);
    snapshots(base, out);
    lineage(base, out);
}

/// A capture's bytes: its header as given (counts and all) and its events.
fn encode(header: &CaptureHeader, events: &[Event]) -> Vec<u8> {
    let mut h = header.clone();
    h.version = CAPTURE_VERSION;
    let mut bytes = encode_header(&h);
    let (mut w, mut encoder) = (Writer::new(), EventEncoder::new());
    events.iter().for_each(|e| encoder.encode(&mut w, e));
    bytes.extend(w.into_bytes());
    bytes
}

/// The header's counts for `events`, as the recorder writes them (nothing dropped).
fn counted(header: &CaptureHeader, events: &[Event]) -> CaptureHeader {
    let records = events.iter().filter(|e| matches!(e, Event::Record(_))).count() as u64;
    CaptureHeader {
        true_events: events.len() as u64,
        true_records: records,
        stored_events: events.len() as u64,
        truncated: false,
        ..header.clone()
    }
}

fn another_run(run: &RunIdentity) -> RunIdentity {
    RunIdentity {
        lineage: LineageId::parse(&changed(run.lineage.as_str())).unwrap_or(run.lineage.clone()),
        incarnation: run.incarnation,
    }
}

fn captures(base: &Base, out: &mut Vec<Mutant>) {
    let operator_epochs: Vec<String> = base.manifest["epochs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["role"] == "operator")
        .filter_map(|e| e["path"].as_str().map(str::to_string))
        .collect();
    for path in instances(base, |k| matches!(k, ArtifactKind::Capture { .. })) {
        let Ok(capture) = read_capture(&base.files[&path]) else { continue };
        let (h, events) = (&capture.header, &capture.events);
        let artifact = short(&path);
        let write = |bytes: Vec<u8>| vec![Edit::Write { path: path.clone(), bytes, role: base.role(&path) }];
        let mut header_edit = |field: &str, mutation: &str, edited: CaptureHeader| {
            out.push(base.mutant(
                "capture",
                &artifact,
                &format!("header/{field}"),
                mutation,
                Part::Contents,
                write(encode(&edited, events)),
            ));
        };
        header_edit("job", "plus_one", CaptureHeader { job: h.job + 1, ..h.clone() });
        header_edit("operator", "plus_one", CaptureHeader { operator: h.operator + 1, ..h.clone() });
        header_edit("subtask", "plus_one", CaptureHeader { subtask: h.subtask + 1, ..h.clone() });
        header_edit("epoch", "plus_one", CaptureHeader { epoch: h.epoch + 1, ..h.clone() });
        header_edit("epoch", "minus_one", CaptureHeader { epoch: h.epoch.saturating_sub(1), ..h.clone() });
        header_edit("bound", "plus_one", CaptureHeader { bound: h.bound + 1, ..h.clone() });
        header_edit("bound", "minus_one", CaptureHeader { bound: h.bound.saturating_sub(1), ..h.clone() });
        header_edit("truncated", "flipped", CaptureHeader { truncated: !h.truncated, ..h.clone() });
        header_edit("true_events", "plus_one", CaptureHeader { true_events: h.true_events + 1, ..h.clone() });
        header_edit("true_records", "plus_one", CaptureHeader { true_records: h.true_records + 1, ..h.clone() });
        header_edit(
            "true_records",
            "minus_one",
            CaptureHeader { true_records: h.true_records.saturating_sub(1), ..h.clone() },
        );
        header_edit(
            "stored_events",
            "minus_one",
            CaptureHeader { stored_events: h.stored_events.saturating_sub(1), ..h.clone() },
        );
        if let Some(run) = &h.run {
            header_edit(
                "run/incarnation",
                "plus_one",
                CaptureHeader {
                    run: Some(RunIdentity { incarnation: run.incarnation + 1, ..run.clone() }),
                    ..h.clone()
                },
            );
            header_edit(
                "run/incarnation",
                "minus_one",
                CaptureHeader {
                    run: Some(RunIdentity { incarnation: run.incarnation.saturating_sub(1), ..run.clone() }),
                    ..h.clone()
                },
            );
            header_edit("run/lineage", "from_another", CaptureHeader { run: Some(another_run(run)), ..h.clone() });
            header_edit("run", "dropped", CaptureHeader { run: None, ..h.clone() });
        }
        // The events, the header counting them as the recorder would.
        let part = if operator_epochs.contains(&path) { Part::OperatorEvents } else { Part::Contents };
        let mut event_edit = |field: String, mutation: &str, edited: Vec<Event>| {
            let bytes = encode(&counted(h, &edited), &edited);
            if bytes != base.files[&path] {
                out.push(base.mutant("capture", &artifact, &field, mutation, part, write(bytes)));
            }
        };
        let first_record = events.iter().position(|e| matches!(e, Event::Record(_)));
        let first_watermark = events.iter().position(|e| matches!(e, Event::Watermark { .. }));
        let picks: Vec<(&str, usize)> = [
            ("first_record", first_record),
            ("first_watermark", first_watermark),
            ("last_event", events.len().checked_sub(1)),
        ]
        .into_iter()
        .filter_map(|(n, i)| Some((n, i?)))
        .collect();
        for (name, i) in &picks {
            let mut dropped = events.clone();
            dropped.remove(*i);
            event_edit(format!("events/{name}"), "dropped", dropped);
            let mut twice = events.clone();
            twice.insert(*i, events[*i].clone());
            event_edit(format!("events/{name}"), "duplicated", twice);
            if i + 1 < events.len() {
                let mut swapped = events.clone();
                swapped.swap(*i, i + 1);
                event_edit(format!("events/{name}"), "swapped_with_next", swapped);
            }
            for (field, mutation, value) in event_values(&events[*i]) {
                let mut edited = events.clone();
                edited[*i] = value;
                event_edit(format!("events/{name}/{field}"), mutation, edited);
            }
        }
        // Another subtask's (or epoch's) events under this header.
        let sibling = base
            .of_kind(|k| matches!(k, ArtifactKind::Capture { .. }))
            .into_iter()
            .map(|(p, _)| p.clone())
            .find(|p| *p != path && same_operator(p, &path));
        if let Some(other) = sibling.and_then(|p| read_capture(&base.files[&p]).ok()) {
            if other.events != *events {
                event_edit("events".into(), "from_another", other.events.clone());
            }
        }
    }
}

fn same_operator(a: &str, b: &str) -> bool {
    a.split('/').nth(1) == b.split('/').nth(1)
}

/// One event's values changed: each column of a record, a watermark's time
/// and idleness, a clock position.
fn event_values(event: &Event) -> Vec<(String, &'static str, Event)> {
    let mut out = Vec::new();
    match event {
        Event::Record(row) => {
            for (i, v) in row.iter().enumerate() {
                let edited = match v {
                    Value::Int(n) => Some(Value::Int(n.wrapping_add(1))),
                    Value::Timestamp(t) => Some(Value::Timestamp(t.wrapping_add(1))),
                    Value::Decimal(d) => Some(Value::Decimal(Decimal { unscaled: d.unscaled + 1, scale: d.scale })),
                    Value::Str(s) => Some(Value::Str(changed(s))),
                    Value::Bool(b) => Some(Value::Bool(!b)),
                    Value::Float(f) => Some(Value::Float(f + 1.0)),
                    Value::Null => None,
                };
                if let Some(e) = edited {
                    let mut r = row.clone();
                    r[i] = e;
                    out.push((format!("column{i}"), "changed", Event::Record(r)));
                }
            }
        }
        Event::Watermark { time, idle } => {
            out.push(("time".into(), "plus_one", Event::Watermark { time: time + 1, idle: *idle }));
            out.push(("time".into(), "minus_one", Event::Watermark { time: time - 1, idle: *idle }));
            out.push(("idle".into(), "flipped", Event::Watermark { time: *time, idle: !idle }));
        }
        Event::ProcessingTime(t) => out.push(("time".into(), "plus_one", Event::ProcessingTime(t + 1))),
    }
    out
}

/// A snapshot and its sidecar, both written as the engine writes them.
fn coherent(
    path: &str,
    role: &str,
    header: &SnapshotHeader,
    participant: &str,
    slots: &StateSlots,
    run: Option<&RunIdentity>,
) -> Vec<Edit> {
    let bytes = encode_snapshot_by(header, slots, run);
    let meta = SnapshotMeta::describe(header, participant, slots, &bytes).written_by(run.cloned());
    vec![
        Edit::Write { path: path.to_string(), bytes, role: role.to_string() },
        Edit::Write {
            path: format!("{path}.meta"),
            bytes: serde_json::to_vec_pretty(&meta).unwrap_or_default(),
            role: role.to_string(),
        },
    ]
}

/// The verified snapshot at a path (with its sidecar beside it in the bundle).
fn read_snapshot(base: &Base, path: &str) -> Option<clink_engine::checkpoint::backend::VerifiedSnapshot> {
    let meta_bytes = base.files.get(&format!("{path}.meta"))?;
    let meta = parse_snapshot_meta(std::path::Path::new(path), meta_bytes).ok()?;
    verify_snapshot_bytes(std::path::Path::new(path), base.files.get(path)?, meta).ok()
}

fn snapshots(base: &Base, out: &mut Vec<Mutant>) {
    let all: Vec<(String, ArtifactKind)> =
        base.of_kind(|k| matches!(k, ArtifactKind::Snapshot { .. })).into_iter().map(|(p, k)| (p.clone(), k)).collect();
    for path in instances(base, |k| matches!(k, ArtifactKind::Snapshot { .. })) {
        let Some(s) = read_snapshot(base, &path) else { continue };
        let Some((_, ArtifactKind::Snapshot { participant, checkpoint, .. })) = all.iter().find(|(p, _)| *p == path)
        else {
            continue;
        };
        let (artifact, role, h, run) = (short(&path), base.role(&path), &s.header, s.run.as_ref());
        let mut push = |field: &str, mutation: &str, edits: Vec<Edit>| {
            out.push(base.mutant("snapshot", &artifact, field, mutation, Part::Contents, edits));
        };
        push(
            "header/checkpoint",
            "plus_one",
            coherent(
                &path,
                &role,
                &SnapshotHeader { checkpoint: h.checkpoint + 1, ..h.clone() },
                participant,
                &s.slots,
                run,
            ),
        );
        push(
            "header/subtask",
            "plus_one",
            coherent(&path, &role, &SnapshotHeader { subtask: h.subtask + 1, ..h.clone() }, participant, &s.slots, run),
        );
        push(
            "header/job",
            "plus_one",
            coherent(&path, &role, &SnapshotHeader { job: h.job + 1, ..h.clone() }, participant, &s.slots, run),
        );
        if let Some(r) = run {
            let later = RunIdentity { incarnation: r.incarnation + 1, ..r.clone() };
            push("run/incarnation", "plus_one", coherent(&path, &role, h, participant, &s.slots, Some(&later)));
            push(
                "run/lineage",
                "from_another",
                coherent(&path, &role, h, participant, &s.slots, Some(&another_run(r))),
            );
            push("run", "dropped", coherent(&path, &role, h, participant, &s.slots, None));
        }
        for (name, slot) in &s.slots.0 {
            let mut dropped = s.slots.clone();
            dropped.0.remove(name);
            push(&format!("slots/{name}"), "dropped", coherent(&path, &role, h, participant, &dropped, run));
            let mut versioned = s.slots.clone();
            if let Some(v) = versioned.0.get_mut(name) {
                v.version += 1;
            }
            push(&format!("slots/{name}/version"), "plus_one", coherent(&path, &role, h, participant, &versioned, run));
            if !slot.bytes.is_empty() {
                let mut flipped = s.slots.clone();
                if let Some(v) = flipped.0.get_mut(name) {
                    let last = v.bytes.len() - 1;
                    v.bytes[last] ^= 1;
                }
                push(
                    &format!("slots/{name}/bytes"),
                    "last_bit_flipped",
                    coherent(&path, &role, h, participant, &flipped, run),
                );
            }
        }
        // The same participant's state of another checkpoint, and another
        // subtask's of this one, under this header.
        for (other, what) in [
            (all.iter().find(|(p, k)| *p != path && matches!(k, ArtifactKind::Snapshot { participant: q, .. } if q == participant)), "from_another_checkpoint"),
            (all.iter().find(|(p, k)| *p != path && matches!(k, ArtifactKind::Snapshot { checkpoint: c, participant: q, .. } if c == checkpoint && q.rsplit_once('-').map(|x| x.0) == participant.rsplit_once('-').map(|x| x.0) && q != participant)), "from_another_subtask"),
        ] {
            if let Some(o) = other.and_then(|(p, _)| read_snapshot(base, p)) {
                if o.slots != s.slots {
                    push("slots", what, coherent(&path, &role, h, participant, &o.slots, run));
                }
            }
        }
    }
}

/// The LINEAGE record: another lineage's id.
fn lineage(base: &Base, out: &mut Vec<Mutant>) {
    for (path, _) in base.of_kind(|k| matches!(k, ArtifactKind::LineageRecord { .. })) {
        let text = String::from_utf8_lossy(&base.files[path]).trim_end().to_string();
        let bytes = format!("{}\n", changed(&text)).into_bytes();
        let edits = vec![Edit::Write { path: path.clone(), bytes, role: base.role(path) }];
        out.push(base.mutant("lineage_record", &short(path), "id", "from_another", Part::Contents, edits));
    }
}
