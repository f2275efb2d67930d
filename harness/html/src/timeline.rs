//! The protocol timeline: one job's merged trace laid out for drawing.
//!
//! One lane per process role and per subtask: a coordinator process's events
//! on its own lane (`coordinator:<pid>`), a worker event that names a subtask
//! (`sub`, such as `op-5-0`) on that subtask's lane, any other worker event on
//! its process's lane. Checkpoints become bands from their `Trigger` to their
//! `CoordComplete` (completed, failed or discarded; open when the trace ends
//! first), with the COMPLETED marker, the commit broadcast and the last sink
//! commit marked; recoveries, redeploys and restarts become marks across every
//! lane; a rejected trace's first diverging event is kept with the reason.
//!
//! The data is embedded in the page as one compact JSON document (columns of
//! small integers, repeated strings interned) that the page's script draws,
//! only the part in view. Event indexes are positions in the merged trace, so
//! a validator's "event k" is index k - 1 here.

use std::collections::BTreeMap;

use clink_formal::trace::{MergedTrace, TraceLine};
use serde_json::{json, Value as Json};

/// Fields the timeline shows elsewhere (lane, time, name) or not at all.
const HIDDEN_FIELDS: &[&str] = &["seq", "ts", "event", "job", "ckpt"];

/// How many events before the diverging one the page lists.
pub const EVENTS_BEFORE: usize = 8;

/// One event, as the page shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Microseconds since the trace's first event.
    pub t: u64,
    pub lane: usize,
    pub name: String,
    /// The checkpoint the event names (`ckpt`), if any.
    pub ckpt: Option<u64>,
    /// The event's other fields, `key=value` separated by spaces.
    pub detail: String,
}

impl Event {
    /// Every field shown: the checkpoint first, then the rest.
    pub fn fields(&self) -> String {
        match self.ckpt {
            Some(c) if self.detail.is_empty() => format!("ckpt={c}"),
            Some(c) => format!("ckpt={c} {}", self.detail),
            None => self.detail.clone(),
        }
    }
}

/// A checkpoint's band.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Band {
    pub ckpt: u64,
    pub triggered: u64,
    /// `CoordComplete`'s time; `None` when the trace ends before a decision
    /// (its process died or restarted first): then the band ends at `last`.
    pub decided: Option<u64>,
    /// completed, failed, discarded, or open (never decided in the trace).
    pub outcome: String,
    /// The COMPLETED marker became durable (`WriteCompleted`).
    pub marker: Option<u64>,
    /// The commit was broadcast (`Broadcast`).
    pub broadcast: Option<u64>,
    /// The last sink published its handles (`SinkCommit`).
    pub committed: Option<u64>,
    /// The last event that names this checkpoint: where an undecided band ends.
    pub last: u64,
}

/// A recovery, redeploy or restart: drawn across every lane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    pub t: u64,
    pub kind: String,
    pub label: String,
}

/// Where validation left the protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Divergence {
    /// 0-based index into the events; equal to their count when the trace
    /// ended without being accepted.
    pub index: usize,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timeline {
    pub job: u64,
    /// The first event's timestamp (µs since the epoch); times are relative to it.
    pub origin_us: u64,
    pub lanes: Vec<String>,
    pub events: Vec<Event>,
    pub bands: Vec<Band>,
    pub marks: Vec<Mark>,
    /// Each trace file and how many of the job's events it holds.
    pub files: Vec<(String, usize)>,
    /// What could not be drawn, and why.
    pub notes: Vec<String>,
    pub divergence: Option<Divergence>,
}

/// The lane an event belongs on.
fn lane_of(e: &TraceLine) -> String {
    let proc_ = e.fields.get("proc").and_then(Json::as_str).unwrap_or("");
    let role = proc_.split(':').next().unwrap_or("");
    match e.fields.get("sub").and_then(Json::as_str) {
        Some(sub) if role != "coordinator" => sub.to_string(),
        _ if proc_.is_empty() => format!("({})", e.file),
        _ => proc_.to_string(),
    }
}

/// Lanes in reading order: coordinator processes, other processes, then
/// subtasks by operator id and index (`op-10-0` after `op-9-1`).
fn lane_order(name: &str, first_t: u64) -> (u8, u64, u64, u64, String) {
    if name.starts_with("coordinator") {
        return (0, first_t, 0, 0, name.to_string());
    }
    let parts: Vec<&str> = name.split('-').collect();
    if let ["op", op, sub] = parts.as_slice() {
        if let (Ok(op), Ok(sub)) = (op.parse::<u64>(), sub.parse::<u64>()) {
            return (2, 0, op, sub, name.to_string());
        }
    }
    (1, first_t, 0, 0, name.to_string())
}

fn detail_of(e: &TraceLine) -> String {
    e.fields
        .iter()
        .filter(|(k, _)| !HIDDEN_FIELDS.contains(&k.as_str()))
        .map(|(k, v)| match v {
            Json::String(s) => format!("{k}={s}"),
            other => format!("{k}={other}"),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

impl Timeline {
    /// Lays out a merged trace (`clink_formal::trace::merge`'s order is kept).
    pub fn from_trace(trace: &MergedTrace) -> Timeline {
        let origin_us = trace.events.first().map_or(0, |e| e.ts);
        let mut first_seen: BTreeMap<String, u64> = BTreeMap::new();
        let mut files: BTreeMap<String, usize> = BTreeMap::new();
        for e in &trace.events {
            first_seen.entry(lane_of(e)).or_insert(e.ts.saturating_sub(origin_us));
            *files.entry(e.file.clone()).or_default() += 1;
        }
        let mut lanes: Vec<String> = first_seen.keys().cloned().collect();
        lanes.sort_by_key(|l| lane_order(l, first_seen.get(l).copied().unwrap_or(0)));
        let lane_index: BTreeMap<&str, usize> = lanes.iter().enumerate().map(|(i, l)| (l.as_str(), i)).collect();

        let mut events = Vec::with_capacity(trace.events.len());
        let mut bands: Vec<Band> = Vec::new();
        let mut open: BTreeMap<u64, usize> = BTreeMap::new();
        let mut marks = Vec::new();
        let mut notes = Vec::new();
        let mut last_t = 0;
        for e in &trace.events {
            // merge orders by timestamp; a trace that does not is drawn in its order.
            let t = e.ts.saturating_sub(origin_us).max(last_t);
            if e.ts.saturating_sub(origin_us) < last_t && notes.is_empty() {
                notes.push(format!("{}: timestamps go backwards; drawn in the merged order", e.file));
            }
            last_t = t;
            let lane = lane_index.get(lane_of(e).as_str()).copied().unwrap_or(0);
            let name = e.event().to_string();
            let ckpt = e.u64("ckpt");
            let band_of = |bands: &mut Vec<Band>, open: &mut BTreeMap<u64, usize>, c: u64| -> usize {
                match open.get(&c) {
                    Some(&i) => i,
                    None => {
                        bands.push(Band {
                            ckpt: c,
                            triggered: t,
                            decided: None,
                            outcome: "open".into(),
                            marker: None,
                            broadcast: None,
                            committed: None,
                            last: t,
                        });
                        open.insert(c, bands.len() - 1);
                        bands.len() - 1
                    }
                }
            };
            if let Some(i) = ckpt.and_then(|c| open.get(&c).copied()) {
                bands[i].last = t;
            }
            match (name.as_str(), ckpt) {
                ("Trigger", Some(c)) => {
                    open.remove(&c);
                    band_of(&mut bands, &mut open, c);
                }
                ("CoordComplete", Some(c)) => {
                    let i = band_of(&mut bands, &mut open, c);
                    bands[i].decided = Some(t);
                    bands[i].outcome = e.fields.get("outcome").and_then(Json::as_str).unwrap_or("decided").to_string();
                }
                ("WriteCompleted", Some(c)) => {
                    let i = band_of(&mut bands, &mut open, c);
                    bands[i].marker = Some(t);
                }
                ("Broadcast", Some(c)) => {
                    let i = band_of(&mut bands, &mut open, c);
                    bands[i].broadcast = Some(t);
                }
                ("SinkCommit", Some(c)) => {
                    let i = band_of(&mut bands, &mut open, c);
                    bands[i].committed = Some(t);
                }
                ("CoordRecovers", _) => marks.push(Mark {
                    t,
                    kind: name.clone(),
                    label: format!("recovery: restore point {}", e.u64("completed").unwrap_or(0)),
                }),
                ("Redeploy", _) => marks.push(Mark {
                    t,
                    kind: name.clone(),
                    label: format!(
                        "redeploy from {}, next {}",
                        e.u64("restore").unwrap_or(0),
                        e.u64("next").unwrap_or(0)
                    ),
                }),
                ("RestartOnError", _) => marks.push(Mark {
                    t,
                    kind: name.clone(),
                    label: format!(
                        "restart (checkpoint {}): {}",
                        e.u64("ckpt").unwrap_or(0),
                        e.fields.get("cause").and_then(Json::as_str).unwrap_or("")
                    ),
                }),
                _ => {}
            }
            events.push(Event { t, lane, name, ckpt, detail: detail_of(e) });
        }
        Timeline {
            job: trace.job,
            origin_us,
            lanes,
            events,
            bands,
            marks,
            files: files.into_iter().collect(),
            notes,
            divergence: None,
        }
    }

    /// Marks event `k` (1-based, as validators number them) as the first
    /// diverging one.
    pub fn diverging_at(mut self, k: usize, reason: impl Into<String>) -> Timeline {
        let index = k.saturating_sub(1).min(self.events.len());
        self.divergence = Some(Divergence { index, reason: reason.into() });
        self
    }

    pub fn note(mut self, note: impl Into<String>) -> Timeline {
        self.notes.push(note.into());
        self
    }

    /// The data the page's script draws: columns of integers and interned
    /// strings. `ev` holds five integers per event: time since the previous
    /// event (µs), lane, name, detail (the fields but the checkpoint, which
    /// would make every detail distinct), checkpoint (-1 for none).
    ///
    /// `bands` holds one array per checkpoint: id, triggered, decided,
    /// outcome, marker, broadcast, committed, last (-1 for never).
    pub fn data(&self) -> Json {
        let mut names: Vec<&str> = Vec::new();
        let mut name_ix: BTreeMap<&str, usize> = BTreeMap::new();
        let mut details: Vec<&str> = Vec::new();
        let mut detail_ix: BTreeMap<&str, usize> = BTreeMap::new();
        let mut ev: Vec<Json> = Vec::with_capacity(self.events.len() * 5);
        let mut prev = 0;
        for e in &self.events {
            let n = *name_ix.entry(e.name.as_str()).or_insert_with(|| {
                names.push(e.name.as_str());
                names.len() - 1
            });
            let d = *detail_ix.entry(e.detail.as_str()).or_insert_with(|| {
                details.push(e.detail.as_str());
                details.len() - 1
            });
            ev.extend([
                Json::from(e.t - prev),
                Json::from(e.lane),
                Json::from(n),
                Json::from(d),
                e.ckpt.map_or(Json::from(-1), Json::from),
            ]);
            prev = e.t;
        }
        let opt = |v: Option<u64>| v.map_or(Json::from(-1), Json::from);
        let bands: Vec<Json> = self
            .bands
            .iter()
            .map(|b| {
                json!([
                    b.ckpt,
                    b.triggered,
                    opt(b.decided),
                    b.outcome,
                    opt(b.marker),
                    opt(b.broadcast),
                    opt(b.committed),
                    b.last
                ])
            })
            .collect();
        let marks: Vec<Json> = self.marks.iter().map(|m| json!([m.t, m.kind, m.label])).collect();
        json!({
            "v": 1,
            "job": self.job,
            "origin_us": self.origin_us,
            "lanes": self.lanes,
            "names": names,
            "details": details,
            "ev": ev,
            "bands": bands,
            "marks": marks,
            "div": self.divergence.as_ref().map(|d| json!({"i": d.index, "reason": d.reason})),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(file: &str, seq: u64, ts: u64, v: Json) -> TraceLine {
        let Json::Object(fields) = v else { unreachable!() };
        let process = file.trim_end_matches(".ndjson").split_once('-').map_or("", |(_, p)| p).to_string();
        TraceLine { file: file.into(), seq, ts, process, fields }
    }

    fn sample() -> MergedTrace {
        let c = "coordinator-1-1.ndjson";
        let w = "worker-1-1.ndjson";
        let events = vec![
            line(w, 1, 100, json!({"event": "Placement", "job": 1, "proc": "worker:1", "sub": "op-10-0", "worker": 1})),
            line(w, 2, 101, json!({"event": "Placement", "job": 1, "proc": "worker:1", "sub": "op-9-1", "worker": 1})),
            line(c, 1, 110, json!({"event": "Trigger", "job": 1, "proc": "coordinator:1", "ckpt": 1})),
            line(w, 3, 120, json!({"event": "DeliverBarrier", "job": 1, "proc": "worker:1", "ckpt": 1})),
            line(
                c,
                2,
                130,
                json!({"event": "CoordComplete", "job": 1, "proc": "coordinator:1", "ckpt": 1, "outcome": "completed"}),
            ),
            line(c, 3, 140, json!({"event": "Broadcast", "job": 1, "proc": "coordinator:1", "ckpt": 1})),
            line(w, 4, 150, json!({"event": "SinkCommit", "job": 1, "proc": "worker:1", "sub": "op-10-0", "ckpt": 1})),
            line(
                c,
                4,
                160,
                json!({"event": "RestartOnError", "job": 1, "proc": "coordinator:1", "ckpt": 0, "cause": "op-10-0 failed"}),
            ),
            line(c, 5, 170, json!({"event": "Trigger", "job": 1, "proc": "coordinator:1", "ckpt": 2})),
        ];
        MergedTrace { job: 1, events, ties: Vec::new() }
    }

    #[test]
    fn lanes_bands_and_marks() {
        let t = Timeline::from_trace(&sample());
        assert_eq!(t.lanes, vec!["coordinator:1", "worker:1", "op-9-1", "op-10-0"]);
        assert_eq!(t.events[0].lane, 3);
        assert_eq!(t.events[3].lane, 1, "a worker event without a subtask is on its process's lane");
        assert_eq!(t.bands.len(), 2);
        assert_eq!(
            t.bands[0],
            Band {
                ckpt: 1,
                triggered: 10,
                decided: Some(30),
                outcome: "completed".into(),
                marker: None,
                broadcast: Some(40),
                committed: Some(50),
                last: 50
            }
        );
        assert_eq!(t.bands[1].outcome, "open");
        assert_eq!(t.marks.len(), 1);
        assert!(t.marks[0].label.contains("op-10-0 failed"));
        assert_eq!(t.files, vec![("coordinator-1-1.ndjson".into(), 5), ("worker-1-1.ndjson".into(), 4)]);
    }

    #[test]
    fn data_is_columns_with_interned_strings() {
        let t = Timeline::from_trace(&sample()).diverging_at(6, "no step produces Broadcast");
        let d = t.data();
        let ev = d["ev"].as_array().unwrap();
        assert_eq!(ev.len(), 5 * 9);
        assert_eq!(&ev[0..5], &[json!(0), json!(3), json!(0), json!(0), json!(-1)]);
        assert_eq!(&ev[10..15], &[json!(9), json!(0), json!(1), json!(2), json!(1)]);
        assert_eq!(d["names"][0], "Placement");
        assert_eq!(d["details"][0], "proc=worker:1 sub=op-10-0 worker=1");
        assert_eq!(d["div"]["i"], 5);
        assert_eq!(d["bands"][1], json!([2, 70, -1, "open", -1, -1, -1, 70]));
        let past = Timeline::from_trace(&sample()).diverging_at(99, "the trace ended early");
        assert_eq!(past.divergence.unwrap().index, 9);
    }
}
