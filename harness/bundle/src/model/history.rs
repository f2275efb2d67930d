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
use std::sync::Arc;

use clink_engine::checkpoint::layout::parse_participant_name;
use clink_engine::job::JobGraph;
use clink_engine::operators::{OperatorKind, SinkFamily};
use serde_json::Value as Json;

use super::{Evidence, Fact};

/// Steps a process takes at most once per checkpoint (and subtask).
const ONCE: [&str; 13] = [
    "CoordRecovers",
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

/// A trace line's fields.
type Object = serde_json::Map<String, Json>;

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
    deployments(e, &by_stamp, &processes, &mut found);
    confirmations(e, &processes, &mut found);
    for detail in found {
        e.find(Fact::Trace, detail);
    }
}

/// Each process's deployments against themselves: a run that found
/// history recovered first; every deployment placed every subtask of the
/// job once, and opened each sink once, from the checkpoint it restored;
/// one worker stamped on every placement and barrier; a commit taken only
/// after it was delivered, and delivered only after its broadcast.
fn deployments(
    e: &Evidence,
    by_stamp: &BTreeMap<String, u64>,
    processes: &BTreeMap<u64, (Steps, BTreeSet<String>)>,
    found: &mut Vec<String>,
) {
    let mut lines: BTreeMap<u64, Vec<(u64, &Object)>> = BTreeMap::new();
    for file in &e.traces {
        if let Some(&run) = by_stamp.get(&file.stamp()) {
            lines
                .entry(run)
                .or_default()
                .extend(file.lines.iter().map(|(_, v)| (v.get("ts").and_then(Json::as_u64).unwrap_or(0), v)));
        }
    }
    for (run, mut events) in lines {
        // A process's history is judged whole or not at all: with one of its
        // files unread or left out, what is missing is that file's finding.
        let whole =
            processes.get(&run).is_some_and(|(_, roles)| roles.contains("coordinator") && roles.contains("worker"));
        if !whole {
            continue;
        }
        events.sort_by_key(|(ts, _)| *ts);
        let name = |v: &Object| v.get("event").and_then(Json::as_str).unwrap_or_default().to_string();
        let earlier_markers = e.completed.values().any(|m| m.run.as_ref().is_some_and(|r| r.incarnation < run));
        let recovers: Vec<u64> = events.iter().filter(|(_, v)| name(v) == "CoordRecovers").map(|(t, _)| *t).collect();
        let redeploys: Vec<(u64, u64)> = events
            .iter()
            .filter(|(_, v)| name(v) == "Redeploy")
            .map(|(t, v)| (*t, v.get("restore").and_then(Json::as_u64).unwrap_or(0)))
            .collect();
        // A job whose sinks confirm nothing has nothing confirmed (formal/trace/events.txt).
        if e.family == Some(false)
            && events
                .iter()
                .any(|(_, v)| name(v) == "CoordRecovers" && v.get("confirmed").and_then(Json::as_u64) != Some(0))
        {
            found.push(format!("the trace of incarnation {run}: its recovery found a confirmed checkpoint, in a job whose sinks confirm nothing"));
        }
        if earlier_markers && recovers.len() != 1 {
            found.push(format!(
                "the trace of incarnation {run} shows {} recoveries; a run over earlier runs' markers recovers once",
                recovers.len()
            ));
        }
        if let (Some(r), Some((d, _))) = (recovers.first(), redeploys.first()) {
            if r > d {
                found.push(format!("the trace of incarnation {run} redeploys before it recovers"));
            }
        }
        // A run that recovered deploys by a Redeploy first; a fresh start's
        // first deployment has no such line, and a later Redeploy is a failover.
        if let Some((t, _)) = redeploys.first().filter(|_| !recovers.is_empty()) {
            if events.iter().any(|(ts, v)| name(v) == "Trigger" && ts < t) {
                found.push(format!("the trace of incarnation {run} triggers a checkpoint before it deployed the job"));
            }
        }
        sink_steps(run, &events, found);
        let deployments = redeploys.len() + usize::from(recovers.is_empty());
        let mut placed: BTreeMap<String, usize> = BTreeMap::new();
        let mut opened: BTreeMap<String, usize> = BTreeMap::new();
        let mut workers = BTreeSet::new();
        let mut delivered = BTreeSet::new();
        let mut broadcast = BTreeSet::new();
        for (ts, v) in &events {
            let sub = v.get("sub").and_then(Json::as_str).unwrap_or_default().to_string();
            let ckpt = v.get("ckpt").and_then(Json::as_u64).unwrap_or(0);
            if let Some(w) = v.get("worker").and_then(Json::as_u64) {
                workers.insert(w);
            }
            match name(v).as_str() {
                "Placement" => *placed.entry(sub).or_default() += 1,
                "SinkOpens" => {
                    // Restored from what the deployment it belongs to restored.
                    let restore = redeploys.iter().rev().find(|(t, _)| t < ts).map_or(0, |(_, r)| *r);
                    if v.get("restore").and_then(Json::as_u64) != Some(restore) {
                        found.push(format!("the trace of incarnation {run}: {sub} opened from {:?}; its deployment restored from {restore}", v.get("restore")));
                    }
                    *opened.entry(sub).or_default() += 1;
                }
                "Broadcast" => {
                    broadcast.insert(ckpt);
                }
                "DeliverCommit" => {
                    if !broadcast.contains(&ckpt) {
                        found.push(format!("the trace of incarnation {run}: {sub} took a commit of checkpoint {ckpt} no broadcast of its process sent"));
                    }
                    delivered.insert((sub, ckpt));
                }
                "SinkCommit" if !delivered.contains(&(sub.clone(), ckpt)) => {
                    found.push(format!("the trace of incarnation {run}: {sub} committed checkpoint {ckpt} before any commit of it was delivered"));
                }
                _ => {}
            }
        }
        if workers.len() > 1 {
            found.push(format!("the trace of incarnation {run} names workers {workers:?}: one process is one worker"));
        }
        if !placed.is_empty() {
            // Judged against the graph the run's own markers name; a run that
            // wrote none may have deployed any graph of the bundle (a restore
            // at another parallelism changes it between runs), and must match
            // one of them whole.
            let mut judged: Vec<Vec<String>> = graphs_of_run(e, run)
                .iter()
                .map(|g| placements_against(g, run, deployments, &placed, &opened))
                .collect();
            judged.sort_by_key(Vec::len);
            found.extend(judged.into_iter().next().unwrap_or_default());
        }
    }
}

/// The job graphs a run may have deployed: those its COMPLETED markers name,
/// or when it wrote none, every graph of the bundle, each once.
fn graphs_of_run(e: &Evidence, run: u64) -> Vec<Arc<JobGraph>> {
    let own: Vec<u64> = e
        .completed
        .iter()
        .filter(|(_, m)| m.run.as_ref().is_some_and(|r| r.incarnation == run))
        .map(|(c, _)| *c)
        .collect();
    let named: Vec<&Arc<JobGraph>> =
        if own.is_empty() { e.graphs.values().collect() } else { own.iter().filter_map(|c| e.graphs.get(c)).collect() };
    let mut distinct: Vec<Arc<JobGraph>> = Vec::new();
    for g in named {
        if !distinct.iter().any(|d| Arc::ptr_eq(d, g)) {
            distinct.push(Arc::clone(g));
        }
    }
    distinct
}

/// What a run's placements and sink opens lack or add against one graph:
/// every subtask placed, and every sink subtask opened, once per deployment.
fn placements_against(
    graph: &JobGraph,
    run: u64,
    deployments: usize,
    placed: &BTreeMap<String, usize>,
    opened: &BTreeMap<String, usize>,
) -> Vec<String> {
    let deployed = super::checkpoints::deployed(graph);
    let is_sink = |p: &String| {
        parse_participant_name(p)
            .and_then(|(op, _)| graph.operator(op))
            .is_some_and(|o| o.spec.descriptor.kind() == OperatorKind::Sink)
    };
    let mut found = Vec::new();
    for p in &deployed {
        if placed.get(p).copied().unwrap_or(0) != deployments {
            found.push(format!(
                "the trace of incarnation {run} places {p} {} times in {deployments} deployments",
                placed.get(p).copied().unwrap_or(0)
            ));
        }
    }
    for p in placed.keys().filter(|p| !deployed.contains(*p)) {
        found.push(format!("the trace of incarnation {run} places {p}, which its job graph does not deploy"));
    }
    for s in deployed.iter().filter(|p| is_sink(p)) {
        if opened.get(s).copied().unwrap_or(0) != deployments {
            found.push(format!(
                "the trace of incarnation {run} opens {s} {} times in {deployments} deployments",
                opened.get(s).copied().unwrap_or(0)
            ));
        }
    }
    found
}

/// A sink's steps within one process: it prepares and commits only once
/// opened in the current deployment; an open re-commits nothing where
/// nothing was restored or the family keeps no handles; a commit delivered
/// is taken, unless the deployment wrote nothing more of that subtask
/// (killed, or failed over).
fn sink_steps(run: u64, events: &[(u64, &Object)], found: &mut Vec<String>) {
    let text = |v: &Object, k: &str| v.get(k).and_then(Json::as_str).unwrap_or_default().to_string();
    let mut open = BTreeSet::new();
    for (i, (_, v)) in events.iter().enumerate() {
        let (sub, ckpt) = (text(v, "sub"), v.get("ckpt").and_then(Json::as_u64).unwrap_or(0));
        match text(v, "event").as_str() {
            "Redeploy" => open.clear(),
            "SinkOpens" => {
                let nothing_held = v.get("restore").and_then(Json::as_u64) == Some(0)
                    || text(v, "family") == SinkFamily::AtLeastOnce.as_str();
                if nothing_held && v.get("recommitted").and_then(Json::as_u64) != Some(0) {
                    found.push(format!(
                        "the trace of incarnation {run}: {sub} re-committed {:?} handles at an open that restored none",
                        v.get("recommitted")
                    ));
                }
                open.insert(sub);
            }
            "SinkPrepare" | "SinkCommit" if !open.contains(&sub) => {
                found.push(format!(
                    "the trace of incarnation {run}: {sub} {} checkpoint {ckpt} before it opened in its deployment",
                    text(v, "event")
                ));
            }
            "DeliverCommit" => {
                // What followed in the same deployment (a failover may cut it).
                let rest = &events[i + 1..];
                let end = rest.iter().position(|(_, w)| text(w, "event") == "Redeploy").unwrap_or(rest.len());
                let later = &rest[..end];
                let of_sub = |w: &&(u64, &Object)| text(w.1, "sub") == sub;
                let taken = later.iter().filter(of_sub).any(|(_, w)| {
                    text(w, "event") == "SinkCommit" && w.get("ckpt").and_then(Json::as_u64) == Some(ckpt)
                });
                if !taken && later.iter().any(|w| of_sub(&w)) {
                    found.push(format!("the trace of incarnation {run}: {sub} was delivered checkpoint {ckpt}'s commit, went on, and never took it"));
                }
            }
            _ => {}
        }
    }
}

/// Every CONFIRMED marker a traced run wrote is in its trace, by that run,
/// confirmed as the marker says (each sink's confirmation, or the walk's decision).
fn confirmations(e: &Evidence, processes: &BTreeMap<u64, (Steps, BTreeSet<String>)>, found: &mut Vec<String>) {
    for (c, m) in &e.confirmed {
        let Some(run) = m.run.as_ref().map(|r| r.incarnation) else { continue };
        let Some((steps, roles)) = processes.get(&run) else { continue };
        if !(roles.contains("coordinator") && roles.contains("worker")) {
            continue;
        }
        let has = |event: &str, sub: &str| steps.contains_key(&(event.to_string(), *c, sub.to_string()));
        let by_sinks = m.sinks.iter().all(|s| has("SinkConfirm", s)) && has("WriteConfirmed", "");
        match m.confirmed_by.as_str() {
            "sinks" if !by_sinks => found.push(format!("CONFIRMED-{c} says its sinks confirmed it; the trace of incarnation {run} shows no WriteConfirmed after each sink's confirmation")),
            "walk" if by_sinks || !walked(e, run, *c) => found.push(format!("CONFIRMED-{c} says the walk confirmed it; the trace of incarnation {run} shows {}", if by_sinks { "its sinks confirming it" } else { "no walk deciding it" })),
            _ => {}
        }
    }
}

/// Whether the walk of incarnation `run` decided checkpoint `c` committed.
fn walked(e: &Evidence, run: u64, c: u64) -> bool {
    let stamp = e.runs.get(&run).and_then(|r| r.trace.clone());
    e.traces.iter().filter(|f| Some(f.stamp()) == stamp).flat_map(|f| f.lines.iter()).any(|(_, v)| {
        v.get("event").and_then(Json::as_str) == Some("WalkDecides") && v.get("ckpt").and_then(Json::as_u64) == Some(c)
    })
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
