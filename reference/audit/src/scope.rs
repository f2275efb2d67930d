//! The scope document (`clink-audit-scope`, versions 1 to 3), read with
//! this crate's own code: only what the reference needs, every field typed.

use std::collections::BTreeMap;

use serde_json::Value as Json;

use crate::Failure;

/// One partition's range `[from, to)`; `from` is absent when the scope
/// starts at the run's start, whose offsets the checkpoints do not record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Range {
    pub partition: i32,
    pub from: Option<i64>,
    pub to: i64,
    /// Where a bounded source stops reading the partition.
    pub end: Option<i64>,
}

/// A completed checkpoint of the lineage: the source's positions and the
/// sink's recorded watermark (`None`: none yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineagePoint {
    pub checkpoint: u64,
    pub positions: BTreeMap<i32, i64>,
    pub watermark: Option<i64>,
}

#[derive(Debug, Clone)]
pub struct ScopeDoc {
    pub raw: Json,
    pub version: u64,
    pub job: String,
    pub checkpoint: u64,
    pub topic: String,
    pub cluster_id: Option<String>,
    pub isolation: String,
    pub partitions_in_log: Option<u64>,
    pub ranges: Vec<Range>,
    pub complete: bool,
    pub sha256: String,
    /// Windowed scopes: the completed checkpoints after the start, oldest first.
    pub lineage: Vec<LineagePoint>,
    /// An increment's base.
    pub base: Option<LineagePoint>,
    /// The watermark windows are final by at the audited checkpoint.
    pub finality_watermark: Option<i64>,
}

fn bad(field: &str, why: &str) -> Failure {
    Failure::Usage(format!("the scope document: {field}: {why}"))
}

fn watermark(v: Option<&Json>, field: &str) -> Result<Option<i64>, Failure> {
    match v {
        None | Some(Json::Null) => Ok(None),
        Some(Json::Number(n)) => n.as_i64().map(Some).ok_or_else(|| bad(field, "not a 64-bit integer")),
        _ => Err(bad(field, "expected a number or null")),
    }
}

fn positions(v: Option<&Json>, field: &str) -> Result<BTreeMap<i32, i64>, Failure> {
    let list = v.and_then(Json::as_array).ok_or_else(|| bad(field, "expected [{partition, next}]"))?;
    let mut out = BTreeMap::new();
    for p in list {
        let partition = p.get("partition").and_then(Json::as_i64).and_then(|x| i32::try_from(x).ok());
        let next = p.get("next").and_then(Json::as_i64);
        match (partition, next) {
            (Some(partition), Some(next)) if partition >= 0 && next >= 0 => {
                out.insert(partition, next);
            }
            _ => return Err(bad(field, "a position is not {partition, next}")),
        }
    }
    Ok(out)
}

fn point(v: &Json, field: &str) -> Result<LineagePoint, Failure> {
    Ok(LineagePoint {
        checkpoint: v.get("checkpoint").and_then(Json::as_u64).ok_or_else(|| bad(field, "no checkpoint"))?,
        positions: positions(v.get("positions"), &format!("{field}.positions"))?,
        watermark: watermark(v.get("watermark"), &format!("{field}.watermark"))?,
    })
}

/// The isolation level the job read with: the reference reads with the
/// same, so a scope that does not say is refused, never assumed.
fn isolation(source: &Json) -> Result<String, Failure> {
    let field = "sources[0].isolation";
    match source.get("isolation") {
        None | Some(Json::Null) => Err(bad(field, "missing: the isolation level the job read with is never assumed")),
        Some(Json::String(level)) if level == "read_committed" || level == "read_uncommitted" => Ok(level.clone()),
        Some(other) => Err(bad(field, &format!("{other} is not read_committed or read_uncommitted"))),
    }
}

pub fn parse(bytes: &[u8]) -> Result<ScopeDoc, Failure> {
    let raw: Json =
        serde_json::from_slice(bytes).map_err(|e| Failure::Usage(format!("the scope document is not JSON: {e}")))?;
    if raw.get("format").and_then(Json::as_str) != Some("clink-audit-scope") {
        return Err(bad("format", "not clink-audit-scope"));
    }
    let version = raw.get("version").and_then(Json::as_u64).ok_or_else(|| bad("version", "missing"))?;
    if !(1..=3).contains(&version) {
        return Err(bad("version", "this reference reads versions 1 to 3"));
    }
    let sha256 =
        raw.get("scope_sha256").and_then(Json::as_str).ok_or_else(|| bad("scope_sha256", "missing"))?.to_string();
    let sources = raw.get("sources").and_then(Json::as_array).ok_or_else(|| bad("sources", "missing"))?;
    let [source] = sources.as_slice() else {
        return Err(bad("sources", "this reference reads one Kafka source"));
    };
    let mut ranges = Vec::new();
    for (i, p) in source
        .get("partitions")
        .and_then(Json::as_array)
        .ok_or_else(|| bad("sources[0].partitions", "missing"))?
        .iter()
        .enumerate()
    {
        let field = format!("sources[0].partitions[{i}]");
        let partition =
            p.get("partition").and_then(Json::as_i64).and_then(|x| i32::try_from(x).ok()).filter(|x| *x >= 0);
        let to = p.get("to").and_then(Json::as_i64).filter(|x| *x >= 0);
        let from = match p.get("from") {
            None | Some(Json::Null) => None,
            Some(v) => Some(v.as_i64().filter(|x| *x >= 0).ok_or_else(|| bad(&field, "from is not an offset"))?),
        };
        let end = match p.get("end") {
            None | Some(Json::Null) => None,
            Some(v) => Some(v.as_i64().ok_or_else(|| bad(&field, "end is not an offset"))?),
        };
        match (partition, to) {
            (Some(partition), Some(to)) => ranges.push(Range { partition, from, to, end }),
            _ => return Err(bad(&field, "expected {partition, from, to}")),
        }
    }
    if ranges.is_empty() {
        return Err(bad("sources[0].partitions", "no partition: the source's positions are not in the scope"));
    }
    let mut lineage = Vec::new();
    if let Some(list) = raw.pointer("/lineage/checkpoints").and_then(Json::as_array) {
        for (i, c) in list.iter().enumerate() {
            lineage.push(point(c, &format!("lineage.checkpoints[{i}]"))?);
        }
    }
    let base = match raw.get("base") {
        Some(b) => Some(point(b, "base")?),
        None => None,
    };
    Ok(ScopeDoc {
        version,
        job: raw.pointer("/job/id").and_then(Json::as_str).unwrap_or_default().to_string(),
        checkpoint: raw.get("checkpoint").and_then(Json::as_u64).ok_or_else(|| bad("checkpoint", "missing"))?,
        topic: source
            .get("topic")
            .and_then(Json::as_str)
            .ok_or_else(|| bad("sources[0].topic", "missing"))?
            .to_string(),
        cluster_id: source.pointer("/cluster_id/value").and_then(Json::as_str).map(str::to_string),
        isolation: isolation(source)?,
        partitions_in_log: source.pointer("/log_at_end/partitions").and_then(Json::as_u64),
        ranges,
        complete: raw.get("complete").and_then(Json::as_bool).unwrap_or(false),
        sha256,
        lineage,
        base,
        finality_watermark: watermark(raw.pointer("/finality/watermark"), "finality.watermark")?,
        raw,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn scope(isolation: Option<Json>) -> Vec<u8> {
        let mut source = json!({"topic": "t", "partitions": [{"partition": 0, "from": 5, "to": 9}]});
        if let Some(i) = isolation {
            source["isolation"] = i;
        }
        json!({"format": "clink-audit-scope", "version": 1, "scope_sha256": "x", "checkpoint": 3, "sources": [source]})
            .to_string()
            .into_bytes()
    }

    #[test]
    fn a_scope_without_a_known_isolation_level_is_refused_not_assumed() {
        assert_eq!(parse(&scope(Some(json!("read_committed")))).unwrap().isolation, "read_committed");
        assert_eq!(parse(&scope(Some(json!("read_uncommitted")))).unwrap().isolation, "read_uncommitted");
        for bad in [None, Some(Json::Null), Some(json!("READ_COMMITTED")), Some(json!(1))] {
            match parse(&scope(bad.clone())) {
                Err(Failure::Usage(why)) => assert!(why.contains("sources[0].isolation"), "{bad:?}: {why}"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }
}
