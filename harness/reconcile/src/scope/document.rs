//! The scope document (`clink-audit-scope`, versions 1 to 3) a reference
//! computes from, and its `scope_sha256` over a canonical form.

use clink_connectors::kafka::{LogIdentity, SameLog};
use clink_engine::operators::kafka_source::Position;
use serde_json::{json, Value as Json};

use super::{Scope, ScopeKind, Start};
use crate::cells;

impl Scope {
    /// The scope document (`clink-audit-scope`), with its `scope_sha256`.
    pub fn document(&self) -> Json {
        let version = self.version();
        let sink_columns: Vec<Json> = self
            .shape
            .columns
            .iter()
            .zip(&self.kinds)
            .map(|(c, k)| json!({"name": c.name, "type": c.ty, "cell": k.name()}))
            .collect();
        let n = self.request.checkpoint;
        let start_json = match self.start {
            Start::RunStart => json!({"run_start": true}),
            Start::Checkpoint(c) => json!({"checkpoint": c}),
        };
        let mut doc = json!({
            "format": SCOPE_FORMAT,
            "version": version,
            "job": {
                "id": self.job_id.to_string(),
                "name": self.job_name,
                "graph_sha256": self.graph_sha256,
            },
            "sink": {
                "operator": self.shape.sink.to_string(),
                "uid": self.shape.sink_uid,
                "type": clink_engine::operators::clickhouse_sink::TYPE,
                "subtasks": self.shape.sink_parallelism,
                "database": self.shape.database,
                "table": self.shape.table,
                "runs": self.crossings.iter().map(|c| json!({"restored_from": c.restored_from, "first_interval": c.first_epoch, "recorded": c.recorded})).collect::<Vec<_>>(),
            },
            "checkpoint": n,
            "start": start_json,
            "from_run_start": self.start == Start::RunStart,
            "intervals": self.intervals.iter().map(|i| i.epoch).collect::<Vec<_>>(),
            "sources": [self.source_document()],
            "columns": sink_columns,
            "semantics": cells::SEMANTICS,
            "complete": self.whole(),
            "incomplete": self.problems,
        });
        if let (Some(rules), Some(identity)) = (self.shape.windowed(), self.shape.window_identity()) {
            doc["key"] = json!(identity);
            doc["transform"] = rules.document();
            let lineage: Vec<Json> = self
                .checkpoints
                .iter()
                .filter(|c| !matches!(self.request.kind, ScopeKind::Increment { base } if base == **c))
                .map(|c| {
                    json!({
                        "checkpoint": c,
                        "positions": self.positions.get(c).map(positions_json),
                        "watermark": self.recorded_watermark(*c).map(watermark_json),
                    })
                })
                .collect();
            doc["lineage"] = json!({
                "restores": self.crossings.iter().map(|c| json!({"restored_from": c.restored_from, "first_interval": c.first_epoch, "recorded": c.recorded})).collect::<Vec<_>>(),
                "checkpoints": lineage,
            });
            doc["finality"] = json!({
                "checkpoint": n,
                "watermark": self.recorded_watermark(n).map(watermark_json),
                "allowed_lateness_ms": rules.allowed_lateness_ms,
            });
            if let ScopeKind::Increment { base } = self.request.kind {
                doc["base"] = json!({
                    "checkpoint": base,
                    "positions": self.positions.get(&base).map(positions_json),
                    "watermark": self.base_watermark.map(watermark_json),
                });
            }
        }
        let sha = canonical_sha256(&doc);
        doc["scope_sha256"] = Json::String(sha);
        doc
    }

    fn source_document(&self) -> Json {
        let plan = &self.shape.source_plan;
        let end = self.positions.get(&self.request.checkpoint);
        let start = match self.start {
            Start::Checkpoint(c) => self.positions.get(&c),
            Start::RunStart => None,
        };
        let log = |p: Option<&Position>| p.and_then(|p| serde_json::from_str::<Json>(&p.log).ok());
        let (log_start, log_end) = (log(start), log(end));
        let (same_log, same_log_reason) = same_log(self.start, log_start.as_ref(), log_end.as_ref());
        let partitions: Vec<Json> = end
            .map(|e| {
                e.partitions
                    .iter()
                    .map(|(p, pos)| {
                        json!({
                            "partition": p,
                            "from": start.and_then(|s| s.partitions.get(p)).map(|s| s.next),
                            "to": pos.next,
                            "end": e.end.as_ref().and_then(|end| end.get(p)).copied(),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        let field = |name: &str| log_end.as_ref().and_then(|l| l.get(name)).cloned().unwrap_or(Json::Null);
        json!({
            "operator": self.shape.source.to_string(),
            "uid": self.shape.source_uid,
            "topic": plan.topic,
            "cluster_id": field("cluster_id"),
            "topic_id": field("topic_id"),
            "isolation": plan.isolation.as_str(),
            "event_time_column": plan.columns.0.get(plan.event_time).map(|c| c.name.clone()),
            "columns": plan.columns,
            "log_at_start": log_start,
            "log_at_end": log_end,
            "same_log": same_log,
            "same_log_reason": same_log_reason,
            "partitions": partitions,
        })
    }
}

pub const SCOPE_FORMAT: &str = "clink-audit-scope";

/// Whether the scope's two ends name one log (the logs the source recorded
/// in its checkpoints): `true`, `false`, or `null` when it is not known, and
/// why. A topic id the client could not show leaves it unknown, never "the
/// same log".
fn same_log(start: Start, at_start: Option<&Json>, at_end: Option<&Json>) -> (Json, String) {
    let (Start::Checkpoint(_), Some(a), Some(b)) = (start, at_start, at_end) else {
        let why = match start {
            Start::RunStart => "the scope starts at the run's start, whose log the checkpoints do not record",
            Start::Checkpoint(_) => "the source's log is not recorded at both ends of the scope",
        };
        return (Json::Null, why.into());
    };
    let read = |log: &Json| serde_json::from_value::<LogIdentity>(log.clone());
    match (read(a), read(b)) {
        (Ok(a), Ok(b)) => match a.same_log(&b) {
            SameLog::Same => {
                (Json::Bool(true), "both ends name one log: its topic, partitions, cluster id and topic id".into())
            }
            SameLog::Different(why) => (Json::Bool(false), why),
            SameLog::Unknown(why) => (Json::Null, format!("whether both ends name one log is not known: {why}")),
        },
        (Err(e), _) | (_, Err(e)) => (Json::Null, format!("the log a checkpoint recorded does not read: {e}")),
    }
}

fn positions_json(p: &Position) -> Json {
    Json::Array(p.partitions.iter().map(|(partition, pos)| json!({"partition": partition, "next": pos.next})).collect())
}

/// A recorded watermark: a number, or null when none had arrived.
pub fn watermark_json(w: Option<i64>) -> Json {
    w.map_or(Json::Null, Json::from)
}

/// SHA-256 of a document's canonical form: keys sorted, no whitespace.
pub fn canonical_sha256(doc: &Json) -> String {
    let mut out = Vec::new();
    canonical_into(doc, &mut out);
    clink_basics::digest::sha256_hex(&out)
}

fn canonical_into(doc: &Json, out: &mut Vec<u8>) {
    match doc {
        Json::Object(map) => {
            out.push(b'{');
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(Json::String(k.clone()).to_string().as_bytes());
                out.push(b':');
                if let Some(v) = map.get(k) {
                    canonical_into(v, out);
                }
            }
            out.push(b'}');
        }
        Json::Array(items) => {
            out.push(b'[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                canonical_into(v, out);
            }
            out.push(b']');
        }
        other => out.extend_from_slice(other.to_string().as_bytes()),
    }
}

/// The scope document's hash, recomputed without its `scope_sha256` field.
pub fn document_sha256(doc: &Json) -> Option<String> {
    let mut copy = doc.clone();
    copy.as_object_mut()?.remove("scope_sha256");
    Some(canonical_sha256(&copy))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded(topic_id: serde_json::Value) -> Json {
        json!({"topic": "t", "partitions": 3, "cluster_id": {"value": "c"}, "topic_id": topic_id, "isolation": "read_committed"})
    }

    #[test]
    fn two_ends_are_one_log_only_when_their_topic_ids_say_so() {
        let at = Start::Checkpoint(2);
        let hidden = recorded(json!({"unavailable": "the client cannot show it"}));
        let (same, why) = same_log(at, Some(&hidden), Some(&hidden));
        assert_eq!(same, Json::Null, "a topic id the client cannot show is unknown, never the same log: {why}");
        assert!(why.contains("topic id"), "{why}");
        let zero = recorded(json!({"value": "AAAAAAAAAAAAAAAAAAAAAA"}));
        assert_eq!(same_log(at, Some(&zero), Some(&zero)).0, Json::Null);
        let one = recorded(json!({"value": "Vt0TBgEfS2q3mS2kDN7kYw"}));
        let two = recorded(json!({"value": "q3mS2kDN7kYwVt0TBgEfS2"}));
        assert_eq!(same_log(at, Some(&one), Some(&one)).0, Json::Bool(true));
        assert_eq!(same_log(at, Some(&one), Some(&two)).0, Json::Bool(false));
        assert_eq!(same_log(Start::RunStart, None, Some(&one)).0, Json::Null);
        assert_eq!(same_log(at, Some(&json!({"topic": "t"})), Some(&one)).0, Json::Null, "a log that does not read");
    }

    #[test]
    fn the_canonical_hash_ignores_key_order_and_whitespace() {
        let a: Json = serde_json::from_str(r#"{"b": [1, {"y": 2, "x": "é"}], "a": null}"#).unwrap();
        let b: Json = serde_json::from_str(r#"{"a":null,"b":[1,{"x":"é","y":2}]}"#).unwrap();
        assert_eq!(canonical_sha256(&a), canonical_sha256(&b));
        let c: Json = serde_json::from_str(r#"{"a":null,"b":[1,{"x":"é","y":3}]}"#).unwrap();
        assert_ne!(canonical_sha256(&a), canonical_sha256(&c));
    }
}
