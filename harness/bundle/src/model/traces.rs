//! The protocol traces: every trace file read whole and held to its shape
//! (one process, the name's role and pid, `seq` from 1 without a gap, `ts`
//! strictly increasing, each line an event of the vocabulary with exactly its
//! fields), tied to the run that wrote it (the run record naming its
//! `<pid>-<start>`), and what it says happened compared with the rest of the
//! evidence: the checkpoints its coordinator wrote and how each was
//! triggered, the restores it redeployed from, the subtasks it placed and
//! acked, and what each sink prepared.

use std::collections::{BTreeMap, BTreeSet};

use clink_basics::ndjson::{parse_objects, Line};
use clink_engine::checkpoint::layout::parse_participant_name;
use clink_engine::operators::OperatorKind;
use clink_engine::trace::{Role, TraceEvent};
use serde_json::Value as Json;

use super::checkpoints::deployed;
use super::{Evidence, Fact, Refused};
use crate::manifest::Bundle;
use crate::paths::parse_trace_file_name;

/// A trace file larger than this is refused unread.
pub const MAX_TRACE_BYTES: u64 = 256 << 20;

pub type TraceLine = Line;

/// One trace file of the bundle, read and checked line by line.
#[derive(Debug, Clone)]
pub struct TraceFile {
    /// `traces/<role>-<pid>-<start>.ndjson`.
    pub path: String,
    pub role: String,
    pub pid: u64,
    pub start: u64,
    pub lines: Vec<TraceLine>,
}

impl TraceFile {
    /// Each line's event name and fields.
    pub fn events(&self) -> impl Iterator<Item = (&str, &serde_json::Map<String, Json>)> {
        self.lines.iter().map(|(_, v)| (v.get("event").and_then(Json::as_str).unwrap_or(""), v))
    }

    /// `<pid>-<start>`, as the run record of the process names it.
    pub fn stamp(&self) -> String {
        format!("{}-{}", self.pid, self.start)
    }

    /// The first and last stamp of the file: the span the process it claims was alive.
    pub fn span(&self) -> (u64, u64) {
        let ts = |l: Option<&Line>| l.and_then(|(_, v)| v.get("ts")?.as_u64()).unwrap_or(0);
        (ts(self.lines.first()), ts(self.lines.last()))
    }
}

pub(super) fn read(bundle: &Bundle, e: &mut Evidence) {
    for a in bundle.trace_artifacts() {
        let read = bundle
            .read_vouched(&a.path, MAX_TRACE_BYTES)
            .map_err(|w| w.to_string())
            .and_then(|bytes| parse_objects(&bytes).map_err(|w| format!("{}: {w}", a.path)))
            .and_then(|lines| shaped(&a.path, lines).map_err(|w| format!("{}: {w}", a.path)));
        match read {
            Ok(file) => {
                for (_, v) in &file.lines {
                    if v.get("event").and_then(Json::as_str) == Some("Redeploy")
                        && v.get("job").and_then(Json::as_u64) == Some(e.job)
                    {
                        if let (Some(r), Some(n)) =
                            (v.get("restore").and_then(Json::as_u64), v.get("next").and_then(Json::as_u64))
                        {
                            e.restores.insert((r, n));
                        }
                    }
                }
                e.traces.push(file);
            }
            Err(why) => e.find(Fact::Unread, why),
        }
    }
}

/// A file's lines, held to the shape every trace file has.
fn shaped(path: &str, lines: Vec<Line>) -> Result<TraceFile, String> {
    let name = path.strip_prefix("traces/").and_then(parse_trace_file_name);
    let Some((role, pid, start)) = name else {
        return Err("not named <coordinator|worker>-<pid>-<start>.ndjson".into());
    };
    let named = format!("{role}:{pid}");
    let mut last_ts = None;
    for (at, v) in &lines {
        let seq = v.get("seq").and_then(Json::as_u64).ok_or_else(|| format!("line {at}: no seq"))?;
        if seq != *at as u64 {
            return Err(format!("line {at}: seq {seq}, expected {at} (sequence numbers run from 1 without gaps)"));
        }
        let ts = v.get("ts").and_then(Json::as_u64).ok_or_else(|| format!("line {at}: no ts"))?;
        if last_ts.is_some_and(|last| ts <= last) {
            return Err(format!("line {at}: ts {ts} does not increase (a process stamps strictly increasing times)"));
        }
        last_ts = Some(ts);
        v.get("job").and_then(Json::as_u64).ok_or_else(|| format!("line {at}: no job"))?;
        let proc_ = v.get("proc").and_then(Json::as_str).ok_or_else(|| format!("line {at}: no proc"))?;
        if proc_ != named {
            return Err(format!("line {at}: proc {proc_:?}, but the file's name says {named:?}"));
        }
        let name = v.get("event").and_then(Json::as_str).ok_or_else(|| format!("line {at}: no event"))?;
        let event = TraceEvent::ALL
            .iter()
            .find(|e| e.name() == name)
            .ok_or_else(|| format!("line {at}: {name:?} is no event of the vocabulary"))?;
        if event.role().name() != role {
            return Err(format!("line {at}: {name} is a {} event, in a {role} file", event.role().name()));
        }
        let fields: BTreeSet<&str> =
            v.keys().map(String::as_str).filter(|k| !matches!(*k, "seq" | "ts" | "proc" | "event")).collect();
        let own: BTreeSet<&str> = event.fields().iter().copied().collect();
        let with: BTreeSet<&str> = own.iter().chain(event.optional_fields()).copied().collect();
        if fields != own && (event.optional_fields().is_empty() || fields != with) {
            return Err(format!("line {at}: {name} carries fields {fields:?}; the vocabulary lists {own:?}"));
        }
        // Values this engine always writes (formal/trace/events.txt).
        for (field, always) in [("fenced", false), ("withheld", false), ("accepted", true), ("resolving", true)] {
            if v.get(field).is_some_and(|x| x != &Json::Bool(always)) {
                return Err(format!("line {at}: {name} says {field} {}; this engine always writes {always}", v[field]));
            }
        }
    }
    Ok(TraceFile { path: path.to_string(), role: role.to_string(), pid, start, lines })
}

/// The number a line gives for `field`.
fn num(v: &serde_json::Map<String, Json>, field: &str) -> Option<u64> {
    v.get(field).and_then(Json::as_u64)
}

pub(super) fn compare(bundle: &Bundle, e: &mut Evidence) -> Result<(), Refused> {
    if bundle.trace_artifacts().is_empty() {
        return Ok(());
    }
    // Every traced run's files are here, or the collection says why not.
    let noted: BTreeSet<&str> =
        bundle.manifest.absent.iter().chain(&bundle.manifest.excluded).map(|n| n.what.as_str()).collect();
    let missing: Vec<String> = e
        .runs
        .values()
        .filter_map(|r| r.trace.as_ref())
        .flat_map(|stamp| ["coordinator", "worker"].map(|role| format!("traces/{role}-{stamp}.ndjson")))
        .filter(|p| bundle.artifact(p).is_none() && !noted.contains(p.as_str()))
        .collect();
    for path in missing {
        e.find(Fact::Unread, format!("{path}: a run of the bundle traced (its run record names the file), and the bundle neither holds it nor says why"));
    }
    let by_stamp: BTreeMap<String, u64> = e.runs.iter().filter_map(|(n, r)| Some((r.trace.clone()?, *n))).collect();
    let identified = !e.runs.is_empty();
    let mut found = Vec::new();
    let mut written: BTreeMap<u64, u64> = BTreeMap::new();
    let mut last_redeploy: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    let deployed_anywhere: BTreeSet<String> = e.graphs.values().flat_map(|g| deployed(g)).collect();
    for file in &e.traces {
        let incarnation = by_stamp.get(&file.stamp()).copied();
        if identified && incarnation.is_none() {
            return Err(Refused(format!(
                "{} was written by process {}, which no run record of the bundle's lineage names: another run's trace",
                file.path,
                file.stamp()
            )));
        }
        for (at, v) in &file.lines {
            let event = v.get("event").and_then(Json::as_str).unwrap_or("");
            if num(v, "job") != Some(e.job) {
                found.push((
                    Fact::Trace,
                    format!(
                        "{} line {at}: {event} of job {:?}; the process ran job {}",
                        file.path,
                        num(v, "job"),
                        e.job
                    ),
                ));
                continue;
            }
            if let (Some(inc), Some(epoch)) = (incarnation, num(v, "epoch")) {
                // The coordinator's lines and the source's barriers carry the run's epoch.
                if epoch != inc && (file.role == Role::Coordinator.name() || event == "DeliverBarrier") {
                    found.push((Fact::Writer, format!("{} line {at}: {event} says epoch {epoch}; the process is incarnation {inc} (its run record)", file.path)));
                }
            }
            let ckpt = num(v, "ckpt");
            let sub = v.get("sub").and_then(Json::as_str);
            match event {
                "WriteCompleted" => {
                    if let (Some(c), Some(inc)) = (ckpt, incarnation.or(num(v, "epoch"))) {
                        written.insert(c, inc);
                        match e.completed.get(&c) {
                            None => found.push((Fact::Marker, format!("{} line {at}: the coordinator wrote COMPLETED-{c}; the bundle holds no such marker", file.path))),
                            Some(m) if m.run.as_ref().is_some_and(|r| r.incarnation != inc) => found.push((Fact::Marker, format!(
                                "{} line {at}: incarnation {inc} wrote COMPLETED-{c}; the marker names incarnation {}",
                                file.path,
                                m.run.as_ref().map_or(0, |r| r.incarnation)
                            ))),
                            Some(_) => {}
                        }
                    }
                }
                "Trigger" => {
                    if let (Some(c), Some(kind)) = (ckpt, v.get("kind").and_then(Json::as_str)) {
                        if let Some(m) = e.completed.get(&c) {
                            if m.kind.as_str() != kind
                                && incarnation.is_none_or(|i| m.run.as_ref().is_none_or(|r| r.incarnation == i))
                            {
                                found.push((Fact::Marker, format!("COMPLETED-{c} says the checkpoint was {}, the trace's Trigger of {c} says {kind}", m.kind.as_str())));
                            }
                        }
                    }
                }
                "CoordComplete" if v.get("outcome").and_then(Json::as_str) == Some("completed") => {
                    // Killed between deciding and writing the marker, a
                    // process's decision is its file's last line; any later
                    // line means it went on without writing it.
                    let last = file.lines.last().map(|(n, _)| *n) == Some(*at);
                    if let Some(c) = ckpt.filter(|_| !last) {
                        if !e.completed.contains_key(&c) {
                            found.push((Fact::Marker, format!("{} line {at}: the coordinator decided checkpoint {c} completed and went on; the bundle holds no COMPLETED-{c}", file.path)));
                        }
                    }
                }
                "Broadcast" | "DeliverCommit" | "SinkCommit" => {
                    // A commit follows its checkpoint's marker, and reaches only its sinks.
                    if let Some(c) = ckpt {
                        match e.completed.get(&c) {
                            None => found.push((Fact::Marker, format!("{} line {at}: {event} of checkpoint {c}, whose COMPLETED marker the bundle does not hold", file.path))),
                            Some(m) => {
                                if let Some(s) = sub {
                                    let sink = parse_participant_name(s).and_then(|(op, _)| e.graph_at(c)?.operator(op)).map(|o| o.spec.descriptor.kind());
                                    if !m.participants.iter().any(|p| p == s) || sink.is_some_and(|k| k != OperatorKind::Sink) {
                                        found.push((Fact::Participants, format!("{} line {at}: {event} of {s}, which is not a sink COMPLETED-{c} records", file.path)));
                                    }
                                }
                            }
                        }
                    }
                }
                "CoordRecovers" => {
                    // What the recovering coordinator found: the newest
                    // checkpoints earlier runs completed and confirmed.
                    if let (Some(inc), Some(completed)) = (incarnation, num(v, "completed")) {
                        let before = e
                            .completed
                            .iter()
                            .filter(|(_, m)| m.run.as_ref().is_some_and(|r| r.incarnation < inc))
                            .map(|(c, _)| *c)
                            .max()
                            .unwrap_or(0);
                        if completed != before && e.completed.values().all(|m| m.run.is_some()) {
                            found.push((Fact::Marker, format!("{} line {at}: the recovery found checkpoint {completed} completed; the markers earlier runs wrote end at {before}", file.path)));
                        }
                    }
                }
                "WriteConfirmed" => {
                    if let Some(c) = ckpt {
                        if !e.confirmed.contains_key(&c) {
                            found.push((Fact::Restore, format!("{} line {at}: the coordinator wrote CONFIRMED-{c}; the bundle holds no such marker", file.path)));
                        }
                    }
                }
                "Redeploy" => {
                    if let (Some(r), Some(n), Some(inc)) = (num(v, "restore"), num(v, "next"), incarnation) {
                        last_redeploy.insert(inc, (r, n));
                        if r > 0 && !e.completed.contains_key(&r) {
                            found.push((Fact::Restore, format!("{} line {at}: a redeploy from checkpoint {r}, which no COMPLETED marker of the bundle records", file.path)));
                        }
                    }
                }
                "Placement" => {
                    if let Some(s) = sub {
                        placement(
                            e,
                            s,
                            v.get("role").and_then(Json::as_str),
                            v.get("source").and_then(Json::as_bool),
                            &deployed_anywhere,
                            &file.path,
                            *at,
                            &mut found,
                        );
                    }
                }
                "SubtaskAck" => {
                    if let (Some(s), Some(c)) = (sub, ckpt) {
                        if v.get("ok").and_then(Json::as_bool) == Some(true) {
                            if let Some(m) = e.completed.get(&c) {
                                if !m.participants.iter().any(|p| p == s) {
                                    found.push((Fact::Participants, format!("{} line {at}: {s} acked checkpoint {c}; COMPLETED-{c} records no ack of it", file.path)));
                                }
                            }
                        }
                    }
                }
                "SinkPrepare" | "SinkOpens" => {
                    if let Some(s) = sub {
                        sink_line(e, s, ckpt, v, &file.path, *at, &mut found);
                    }
                }
                _ => {}
            }
        }
    }
    // Every marker the runs the traces cover wrote is in their traces.
    // (A run's coordinator file says what its coordinator wrote.)
    let traced: BTreeSet<u64> = e
        .traces
        .iter()
        .filter(|f| f.role == Role::Coordinator.name())
        .filter_map(|f| by_stamp.get(&f.stamp()).copied())
        .collect();
    for (c, m) in &e.completed {
        if let Some(run) = &m.run {
            if traced.contains(&run.incarnation)
                && written.get(c) != Some(&run.incarnation)
                && e.imported.as_ref().is_none_or(|i| i.checkpoint != *c)
            {
                found.push((
                    Fact::Marker,
                    format!(
                        "COMPLETED-{c} names incarnation {}, whose trace shows no WriteCompleted of it",
                        run.incarnation
                    ),
                ));
            }
        }
    }
    // The RESTORED record is the last redeploy of the run that wrote it.
    if let Some(r) = &e.restored {
        if let Some(run) = r.run.as_ref().filter(|run| traced.contains(&run.incarnation)) {
            match last_redeploy.get(&run.incarnation) {
                Some(&(from, next)) if (from, next) == (r.restored_from, r.next) => {}
                Some(&(from, next)) => found.push((Fact::Restore, format!(
                    "the RESTORED record says incarnation {} restored from {} and numbered from {}; its trace's last Redeploy says from {from}, next {next}",
                    run.incarnation, r.restored_from, r.next
                ))),
                None => found.push((Fact::Restore, format!("the RESTORED record names incarnation {}, whose trace shows no Redeploy", run.incarnation))),
            }
        }
    }
    for (fact, detail) in found {
        e.find(fact, detail);
    }
    Ok(())
}

/// A Placement line: a subtask some graph of the bundle deploys, in its role.
#[allow(clippy::too_many_arguments)]
fn placement(
    e: &Evidence,
    sub: &str,
    role: Option<&str>,
    source: Option<bool>,
    deployed: &BTreeSet<String>,
    path: &str,
    at: usize,
    found: &mut Vec<(Fact, String)>,
) {
    if !deployed.is_empty() && !deployed.contains(sub) {
        found.push((
            Fact::Participants,
            format!("{path} line {at}: it places {sub}, which no job graph of the bundle deploys"),
        ));
        return;
    }
    let kind = parse_participant_name(sub)
        .and_then(|(op, _)| e.graphs.values().find_map(|g| g.operator(op)).map(|o| o.spec.descriptor.kind()));
    if (role == Some("source")) != (source == Some(true)) {
        found.push((
            Fact::Participants,
            format!(
                "{path} line {at}: it places {sub} as a {role:?} with source {source:?}: a source is placed as one"
            ),
        ));
    }
    let expected = match kind {
        Some(OperatorKind::Source) => "source",
        Some(OperatorKind::Sink) => "sink",
        Some(OperatorKind::Transform) => "transform",
        None => return,
    };
    if role != Some(expected) {
        found.push((
            Fact::Participants,
            format!("{path} line {at}: it places {sub} as a {role:?}; the job graph's operator is a {expected}"),
        ));
    }
}

/// A sink's SinkPrepare or SinkOpens line: the family its graph gives it,
/// and (SinkPrepare) whether it staged anything, as its interval's evidence says.
fn sink_line(
    e: &Evidence,
    sub: &str,
    ckpt: Option<u64>,
    v: &serde_json::Map<String, Json>,
    path: &str,
    at: usize,
    found: &mut Vec<(Fact, String)>,
) {
    let Some((op, s)) = parse_participant_name(sub) else {
        found.push((Fact::Trace, format!("{path} line {at}: {sub:?} is not a participant name")));
        return;
    };
    let family = v.get("family").and_then(Json::as_str);
    let planned = ckpt
        .and_then(|c| e.graph_at(c))
        .or_else(|| e.graphs.values().next().map(|g| g.as_ref()))
        .and_then(|g| g.operator(op));
    if let Some(o) = planned {
        let expected = o.spec.descriptor.sink_family().map(|f| f.as_str());
        if family != expected {
            found.push((Fact::Restore, format!("{path} line {at}: {sub} says it is of the {family:?} family; the job graph's operator {op} is of the {expected:?}")));
        }
    }
    // A sink opens from nothing or from a checkpoint the markers record.
    if let Some(restore) = v.get("restore").and_then(Json::as_u64) {
        if restore > 0 && !e.completed.contains_key(&restore) {
            found.push((Fact::Restore, format!("{path} line {at}: {sub} opened from checkpoint {restore}, which no COMPLETED marker of the bundle records")));
        }
    }
    let (Some(c), Some(staged)) = (ckpt, v.get("staged").and_then(Json::as_bool)) else { return };
    let Some(doc) = e.sink_evidence.get(&(op, s, c)) else { return };
    let said = match doc.sink.get("type").and_then(Json::as_str) {
        Some("staged_file_sink") => doc.sink.get("staged").and_then(Json::as_bool),
        Some("clickhouse_sink") => doc.sink.pointer("/interval/rows").and_then(Json::as_u64).map(|r| r > 0),
        Some("kafka_sink") => Some(true),
        _ => None,
    };
    if said.is_some_and(|said| said != staged) {
        found.push((Fact::Capture, format!("{path} line {at}: {sub} prepared checkpoint {c} with staged {staged}; its interval's evidence says {said:?}")));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn line(seq: u64, ts: u64, proc_: &str) -> String {
        format!("{{\"seq\":{seq},\"ts\":{ts},\"proc\":\"{proc_}\",\"event\":\"Trigger\",\"job\":1,\"ckpt\":1,\"epoch\":1,\"kind\":\"periodic\"}}\n")
    }

    fn check(text: &str) -> Result<TraceFile, String> {
        shaped("traces/coordinator-7-9.ndjson", parse_objects(text.as_bytes()).map_err(|e| e.to_string())?)
    }

    #[test]
    fn a_gap_a_second_process_a_stamp_that_does_not_increase_or_a_line_off_the_vocabulary_is_refused() {
        assert!(check(&(line(1, 1, "coordinator:7") + &line(2, 2, "coordinator:7"))).is_ok());
        assert!(check(&(line(1, 1, "coordinator:7") + &line(3, 2, "coordinator:7"))).unwrap_err().contains("seq 3"));
        assert!(check(&(line(1, 1, "coordinator:7") + &line(2, 2, "coordinator:8"))).unwrap_err().contains("proc"));
        assert!(check(&(line(1, 5, "coordinator:7") + &line(2, 5, "coordinator:7")))
            .unwrap_err()
            .contains("does not increase"));
        let unknown = line(1, 1, "coordinator:7").replace("Trigger", "Hello");
        assert!(check(&unknown).unwrap_err().contains("no event of the vocabulary"));
        let extra = line(1, 1, "coordinator:7").replace("\"job\":1", "\"job\":1,\"note\":2");
        assert!(check(&extra).unwrap_err().contains("the vocabulary lists"));
        let worker = line(1, 1, "coordinator:7").replace("Trigger", "SinkCommit");
        assert!(check(&worker).unwrap_err().contains("worker event"));
        assert!(check("").is_err(), "an empty file is not a trace");
        assert!(check(line(1, 1, "coordinator:7").trim_end()).unwrap_err().contains("cut short"));
    }

    proptest! {
        #[test]
        fn arbitrary_text_never_panics(text in "\\PC{0,300}") {
            let _ = check(&text);
        }
    }
}
