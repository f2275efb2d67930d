//! What the traces say each completed checkpoint went through, against the
//! markers and against themselves: every step a process takes once for a
//! checkpoint (or a subtask's checkpoint) appears once, and for every
//! checkpoint a traced run completed, its steps are all there in the order
//! the protocol takes them (PROTOCOL.md): triggered, the barrier delivered,
//! every participant's snapshot acked (a sink's after it prepared), decided,
//! the marker written, then the commit broadcast, delivered and taken. One
//! process stamps all its lines from one increasing clock, so the order of
//! its two files' lines is the order it acted in.
//!
//! This holds the trace to the other evidence at the consistency profile;
//! whether the whole history is a behaviour of the specification is TLC's
//! (protocol.conformance).

use std::collections::{BTreeMap, BTreeSet};

use clink_engine::checkpoint::layout::parse_participant_name;
use clink_engine::operators::OperatorKind;
use serde_json::Value as Json;

use super::{Evidence, Fact};

/// Steps a process takes at most once per checkpoint (and subtask).
const ONCE: [&str; 12] = [
    "Trigger",
    "DeliverBarrier",
    "SinkPrepare",
    "SubtaskAck",
    "CoordComplete",
    "WriteCompleted",
    "Broadcast",
    "DeliverCommit",
    "SinkCommit",
    "WriteConfirmed",
    "SinkReceipt",
    "SinkConfirm",
];

/// One process's steps: (event, checkpoint, subtask) → the stamps it took them at.
type Steps = BTreeMap<(String, u64, String), Vec<u64>>;

pub(super) fn compare(e: &mut Evidence) {
    let by_stamp: BTreeMap<String, u64> = e.runs.iter().filter_map(|(n, r)| Some((r.trace.clone()?, *n))).collect();
    let mut processes: BTreeMap<u64, (Steps, BTreeSet<String>)> = BTreeMap::new();
    for file in &e.traces {
        let Some(&run) = by_stamp.get(&file.stamp()) else { continue };
        let (steps, roles) = processes.entry(run).or_default();
        roles.insert(file.role.clone());
        for (_, v) in &file.lines {
            let event = v.get("event").and_then(Json::as_str).unwrap_or_default();
            if !ONCE.contains(&event) || v.get("job").and_then(Json::as_u64) != Some(e.job) {
                continue;
            }
            let ckpt = v.get("ckpt").and_then(Json::as_u64).unwrap_or(0);
            let sub = v.get("sub").and_then(Json::as_str).unwrap_or_default().to_string();
            // A failed ack or decision is a step of its own kind.
            let failed = v.get("ok") == Some(&Json::Bool(false))
                || v.get("outcome").and_then(Json::as_str).is_some_and(|o| o != "completed");
            let name = if failed { format!("{event}!") } else { event.to_string() };
            steps.entry((name, ckpt, sub)).or_default().push(v.get("ts").and_then(Json::as_u64).unwrap_or(0));
        }
    }
    let mut found = Vec::new();
    for (run, (steps, _)) in &processes {
        for ((event, ckpt, sub), stamps) in steps {
            if stamps.len() > 1 {
                found.push(format!("the trace of incarnation {run} shows {event} of checkpoint {ckpt}{} {} times: a process takes it once", at(sub), stamps.len()));
            }
        }
    }
    for (c, marker) in &e.completed {
        let Some(run) = marker.run.as_ref().map(|r| r.incarnation) else { continue };
        let Some((steps, roles)) = processes.get(&run) else { continue };
        if !(roles.contains("coordinator") && roles.contains("worker")) {
            continue;
        }
        let first = |event: &str, sub: &str| {
            steps.get(&(event.to_string(), *c, sub.to_string())).and_then(|s| s.first().copied())
        };
        let mut gaps = Vec::new();
        let mut need = |what: String, t: Option<u64>| -> u64 {
            if t.is_none() {
                gaps.push(format!("COMPLETED-{c} is incarnation {run}'s, whose trace shows no {what}"));
            }
            t.unwrap_or(0)
        };
        let trigger = need("Trigger of it".into(), first("Trigger", ""));
        let barrier = need("DeliverBarrier of it".into(), first("DeliverBarrier", ""));
        let decided = need("CoordComplete of it".into(), first("CoordComplete", ""));
        let written = need("WriteCompleted of it".into(), first("WriteCompleted", ""));
        let mut order = vec![("Trigger", trigger), ("DeliverBarrier", barrier)];
        for p in &marker.participants {
            let ack = need(format!("ack of {p}"), first("SubtaskAck", p));
            if is_sink(e, *c, p) {
                let prepared = need(format!("SinkPrepare of {p}"), first("SinkPrepare", p));
                if prepared >= ack && ack > 0 {
                    found.push(format!("the trace of incarnation {run}: {p} acked checkpoint {c} before it prepared"));
                }
            }
            if ack <= barrier && ack > 0 {
                found.push(format!(
                    "the trace of incarnation {run}: {p} acked checkpoint {c} before the barrier was delivered"
                ));
            }
            if ack >= decided && decided > 0 {
                found.push(format!(
                    "the trace of incarnation {run}: {p}'s ack of checkpoint {c} came after the decision"
                ));
            }
        }
        order.push(("CoordComplete", decided));
        order.push(("WriteCompleted", written));
        if let Some(broadcast) = first("Broadcast", "") {
            order.push(("Broadcast", broadcast));
        }
        for pair in order.windows(2) {
            if pair[0].1 > 0 && pair[1].1 > 0 && pair[0].1 >= pair[1].1 {
                found.push(format!(
                    "the trace of incarnation {run} shows {} of checkpoint {c} after its {}",
                    pair[0].0, pair[1].0
                ));
            }
        }
        found.append(&mut gaps);
        // Commits follow the broadcast, and are taken after they arrive.
        let broadcast = first("Broadcast", "");
        for p in marker.participants.iter().filter(|p| is_sink(e, *c, p)) {
            let (delivered, taken) = (first("DeliverCommit", p), first("SinkCommit", p));
            let late = |a: Option<u64>, b: Option<u64>| matches!((a, b), (Some(a), Some(b)) if a >= b);
            if late(broadcast, delivered) || late(delivered, taken) || (delivered.is_some() && broadcast.is_none()) {
                found.push(format!("the trace of incarnation {run}: {p}'s commit of checkpoint {c} is not broadcast, delivered and taken in that order"));
            }
        }
    }
    for detail in found {
        e.find(Fact::Trace, detail);
    }
}

fn at(sub: &str) -> String {
    if sub.is_empty() {
        String::new()
    } else {
        format!(" for {sub}")
    }
}

fn is_sink(e: &Evidence, checkpoint: u64, participant: &str) -> bool {
    parse_participant_name(participant)
        .and_then(|(op, _)| e.graph_at(checkpoint)?.operator(op))
        .is_some_and(|o| o.spec.descriptor.kind() == OperatorKind::Sink)
}
