//! The reference artifact's reader (`clink-reference-result`, versions 1 to
//! 3): NDJSON of a header (the scope verbatim, the implementation's identity
//! and configuration, for windows its declared semantics), one line per
//! expected row in canonical cells (copies kept as repeated lines), for
//! windows one line per window left out, and an end line with the counts,
//! the hashes, completeness and its reason, and what the writer verified
//! and recorded.
//!
//! It refuses, naming the line or field: a malformed artifact, one with no
//! end line or anything after it, one that does not hash to its end line, a
//! cell that is not canonical for its column, and one bound to another
//! scope (the first field that differs). Nothing the artifact names is run,
//! loaded or connected to. Its hashes show it is whole as its writer
//! finished it, not who wrote it.

use std::collections::BTreeSet;

use serde_json::{Map, Value as Json};
use sha2::{Digest, Sha256};
use thiserror::Error;

use crate::cells::{self, Cell, CellKind};

pub const ARTIFACT_FORMAT: &str = "clink-reference-result";
pub const ARTIFACT_VERSION: u64 = 3;
/// One line longer than this is refused.
pub const MAX_LINE_BYTES: usize = 4 << 20;
/// How deep a line's JSON may nest.
const MAX_DEPTH: usize = 64;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("the reference artifact is refused: {0}")]
pub struct ArtifactError(pub String);

fn refuse(message: impl Into<String>) -> ArtifactError {
    ArtifactError(message.into())
}

/// A window the reference leaves out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftOut {
    pub identity: Vec<Cell>,
    /// `open` or `undetermined`.
    pub status: String,
    pub why: String,
}

/// A bound the reference computed from the source (`source_bounds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Bound {
    /// No watermark is possible yet.
    NegInf,
    At(i64),
    /// The source has ended: every window may close.
    PosInf,
}

impl Bound {
    pub fn parse(json: &Json) -> Option<Bound> {
        match json {
            Json::String(s) if s == "-inf" => Some(Bound::NegInf),
            Json::String(s) if s == "+inf" => Some(Bound::PosInf),
            Json::Number(n) => n.as_i64().map(Bound::At),
            _ => None,
        }
    }

    /// Whether a recorded watermark (`None`: none yet) is at or below this bound.
    pub fn allows(self, watermark: Option<i64>) -> bool {
        match (watermark, self) {
            (None, _) | (_, Bound::PosInf) => true,
            (Some(_), Bound::NegInf) => false,
            (Some(w), Bound::At(b)) => w <= b,
        }
    }

    /// Whether a window ending at `end` may have closed by this bound.
    pub fn may_close(self, end: i64) -> bool {
        match self {
            Bound::NegInf => false,
            Bound::PosInf => true,
            Bound::At(b) => end <= b,
        }
    }
}

impl std::fmt::Display for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Bound::NegInf => f.write_str("-inf"),
            Bound::PosInf => f.write_str("+inf"),
            Bound::At(b) => write!(f, "{b}"),
        }
    }
}

/// An artifact the reader accepted.
#[derive(Debug, Clone)]
pub struct Artifact {
    pub version: u64,
    pub header: Map<String, Json>,
    pub header_sha256: String,
    pub rows: Vec<Vec<Cell>>,
    pub left_out: Vec<LeftOut>,
    pub complete: bool,
    pub incomplete_reason: Option<String>,
    pub end: Map<String, Json>,
    /// `source_bounds`: the reference's bound at each checkpoint of the lineage.
    pub source_bounds: Vec<(u64, Bound)>,
}

impl Artifact {
    pub fn implementation(&self) -> Json {
        self.header.get("implementation").cloned().unwrap_or(Json::Null)
    }

    pub fn semantics(&self) -> Option<&Json> {
        self.header.get("semantics")
    }

    pub fn state_in(&self) -> Option<&Json> {
        self.header.get("state_in").filter(|s| !s.is_null())
    }

    pub fn state_out(&self) -> Option<&Json> {
        self.end.get("state_out").filter(|s| !s.is_null())
    }

    pub fn bound_at(&self, checkpoint: u64) -> Option<Bound> {
        self.source_bounds.iter().find(|(c, _)| *c == checkpoint).map(|(_, b)| *b)
    }
}

/// Reads an artifact bound to `scope` (the audit's own scope document),
/// whose rows are of `kinds` and whose window identities of `identity`.
pub fn parse_artifact(
    bytes: &[u8],
    scope: &Json,
    kinds: &[CellKind],
    identity: &[CellKind],
) -> Result<Artifact, ArtifactError> {
    let text = std::str::from_utf8(bytes).map_err(|e| refuse(format!("not UTF-8 at byte {}", e.valid_up_to())))?;
    if text.is_empty() {
        return Err(refuse("the file is empty: no header, no end line"));
    }
    let Some(body) = text.strip_suffix('\n') else {
        return Err(refuse("it does not end with a newline: it was cut short, and has no whole end line"));
    };
    let mut lines = body.split('\n').enumerate();
    let Some((_, header_line)) = lines.next() else {
        return Err(refuse("no header"));
    };
    let header = object(header_line, 1)?;
    let format = header.get("format").and_then(Json::as_str);
    if format != Some(ARTIFACT_FORMAT) {
        return Err(refuse(format!("line 1: format {format:?}, expected {ARTIFACT_FORMAT:?}")));
    }
    let version = header.get("version").and_then(Json::as_u64).ok_or_else(|| refuse("line 1: no version"))?;
    if version == 0 || version > ARTIFACT_VERSION {
        return Err(refuse(format!("line 1: version {version}; this build reads 1 to {ARTIFACT_VERSION}")));
    }
    if header.get("type").and_then(Json::as_str) != Some("header") {
        return Err(refuse("line 1: the first line is not the header (type \"header\")"));
    }
    if !header.get("implementation").is_some_and(Json::is_object) {
        return Err(refuse("line 1: implementation: expected an object (name, version, configuration)"));
    }
    let header_sha256 = clink_basics::digest::sha256_hex(header_line.as_bytes());
    let mut rows_hash = Sha256::new();
    let mut windows_hash = Sha256::new();
    let mut row_lines: Vec<(usize, Vec<Json>)> = Vec::new();
    let mut window_lines: Vec<(usize, Map<String, Json>)> = Vec::new();
    let mut end: Option<(usize, Map<String, Json>)> = None;
    for (i, line) in lines {
        let n = i + 1;
        if let Some((at, _)) = &end {
            return Err(refuse(format!("line {n}: a line after the end line (line {at})")));
        }
        let obj = object(line, n)?;
        match obj.get("type").and_then(Json::as_str) {
            Some("row") => {
                let cells = obj.get("cells").and_then(Json::as_array).cloned();
                let cells = cells.ok_or_else(|| refuse(format!("line {n}: a row without its cells array")))?;
                if obj.len() != 2 {
                    return Err(refuse(format!("line {n}: a row holds fields besides type and cells")));
                }
                rows_hash.update(line.as_bytes());
                rows_hash.update(b"\n");
                row_lines.push((n, cells));
            }
            Some("window") if version >= 2 => {
                windows_hash.update(line.as_bytes());
                windows_hash.update(b"\n");
                window_lines.push((n, obj));
            }
            Some("end") => end = Some((n, obj)),
            other => {
                return Err(refuse(format!("line {n}: type {other:?} is not a line of a version {version} artifact")))
            }
        }
    }
    let Some((end_line, end)) = end else {
        return Err(refuse("no end line: the artifact is not whole as its writer finished it"));
    };
    // The hashes and counts bind the lines to the end line.
    let want = |field: &str| -> Result<&Json, ArtifactError> {
        end.get(field).ok_or_else(|| refuse(format!("line {end_line} (end): no {field}")))
    };
    let count = |field: &str| -> Result<u64, ArtifactError> {
        want(field)?.as_u64().ok_or_else(|| refuse(format!("line {end_line} (end): {field}: expected a count")))
    };
    let digest = |field: &str| -> Result<String, ArtifactError> {
        let v = want(field)?.as_str().unwrap_or_default().to_string();
        if clink_basics::digest::is_sha256_hex(&v) {
            Ok(v)
        } else {
            Err(refuse(format!("line {end_line} (end): {field}: expected 64 lowercase hex digits")))
        }
    };
    if digest("header_sha256")? != header_sha256 {
        return Err(refuse("the header does not hash to the end line's header_sha256"));
    }
    if count("rows")? != row_lines.len() as u64 {
        return Err(refuse(format!(
            "the end line counts {} rows; the artifact holds {}",
            count("rows")?,
            row_lines.len()
        )));
    }
    if digest("rows_sha256")? != clink_basics::digest::hex(&rows_hash.finalize()) {
        return Err(refuse("the row lines do not hash to the end line's rows_sha256"));
    }
    if version >= 2 {
        if count("windows")? != window_lines.len() as u64 {
            return Err(refuse(format!(
                "the end line counts {} windows; the artifact holds {}",
                count("windows")?,
                window_lines.len()
            )));
        }
        if digest("windows_sha256")? != clink_basics::digest::hex(&windows_hash.finalize()) {
            return Err(refuse("the window lines do not hash to the end line's windows_sha256"));
        }
    }
    let complete = want("complete")?
        .as_bool()
        .ok_or_else(|| refuse(format!("line {end_line} (end): complete: expected true or false")))?;
    let incomplete_reason = end.get("incomplete_reason").and_then(Json::as_str).map(str::to_string);
    if !complete && incomplete_reason.as_deref().is_none_or(str::is_empty) {
        return Err(refuse(format!("line {end_line} (end): incomplete, and incomplete_reason does not say why")));
    }
    // Bound to this scope: the header holds the audit's own scope document.
    let theirs = header.get("scope").ok_or_else(|| refuse("line 1: no scope"))?;
    if let Some((path, a, b)) = first_difference(theirs, scope, "scope") {
        return Err(refuse(format!(
            "it names another scope: {path} is {} in the artifact, {} in the audit's scope",
            short(&a),
            short(&b)
        )));
    }
    let scope_version = scope.get("version").and_then(Json::as_u64).unwrap_or(0);
    if version != scope_version {
        return Err(refuse(format!("a version {version} artifact for a version {scope_version} scope")));
    }
    // Every cell canonical for its column.
    let mut rows = Vec::with_capacity(row_lines.len());
    for (n, cells_json) in row_lines {
        if cells_json.len() != kinds.len() {
            return Err(refuse(format!(
                "line {n}: a row of {} cells; the sink writes {} columns",
                cells_json.len(),
                kinds.len()
            )));
        }
        let row: Result<Vec<Cell>, _> = cells_json.iter().zip(kinds).map(|(c, k)| cells::check(c, *k)).collect();
        rows.push(row.map_err(|e| refuse(format!("line {n}: {e}")))?);
    }
    let mut left_out = Vec::new();
    let mut seen: BTreeSet<Vec<Cell>> = BTreeSet::new();
    for (n, obj) in window_lines {
        let ids = obj
            .get("identity")
            .and_then(Json::as_array)
            .ok_or_else(|| refuse(format!("line {n}: a window without its identity")))?;
        if ids.len() != identity.len() {
            return Err(refuse(format!(
                "line {n}: an identity of {} cells; the key has {}",
                ids.len(),
                identity.len()
            )));
        }
        let id: Result<Vec<Cell>, _> = ids.iter().zip(identity).map(|(c, k)| cells::check(c, *k)).collect();
        let id = id.map_err(|e| refuse(format!("line {n}: {e}")))?;
        let status = obj.get("status").and_then(Json::as_str).unwrap_or_default().to_string();
        if status != "open" && status != "undetermined" {
            return Err(refuse(format!("line {n}: status {status:?} is not open or undetermined")));
        }
        let why = obj.get("why").and_then(Json::as_str).unwrap_or_default().to_string();
        if !seen.insert(id.clone()) {
            return Err(refuse(format!("line {n}: a window listed twice")));
        }
        left_out.push(LeftOut { identity: id, status, why });
    }
    let mut source_bounds = Vec::new();
    if version >= 2 && complete {
        let list = end.get("source_bounds").and_then(Json::as_array).ok_or_else(|| {
            refuse(format!("line {end_line} (end): a complete windowed reference gives its source_bounds"))
        })?;
        for (i, b) in list.iter().enumerate() {
            let c = b.get("checkpoint").and_then(Json::as_u64);
            let bound = b.get("bound").and_then(Bound::parse);
            match (c, bound) {
                (Some(c), Some(bound)) => source_bounds.push((c, bound)),
                _ => {
                    return Err(refuse(format!(
                        "line {end_line} (end): source_bounds[{i}] is not {{checkpoint, bound}}"
                    )))
                }
            }
        }
    }
    Ok(Artifact { version, header, header_sha256, rows, left_out, complete, incomplete_reason, end, source_bounds })
}

fn object(line: &str, n: usize) -> Result<Map<String, Json>, ArtifactError> {
    if line.len() > MAX_LINE_BYTES {
        return Err(refuse(format!("line {n}: longer than {MAX_LINE_BYTES} bytes")));
    }
    let value: Json = serde_json::from_str(line).map_err(|e| refuse(format!("line {n}: not JSON: {e}")))?;
    if clink_basics::fields::depth(&value) > MAX_DEPTH {
        return Err(refuse(format!("line {n}: nested deeper than {MAX_DEPTH}")));
    }
    match value {
        Json::Object(map) => Ok(map),
        _ => Err(refuse(format!("line {n}: not a JSON object"))),
    }
}

fn short(v: &Option<Json>) -> String {
    match v {
        None => "absent".into(),
        Some(v) => {
            let text = v.to_string();
            if text.len() > 120 {
                format!("{}…", &text[..text.char_indices().nth(117).map_or(text.len(), |(i, _)| i)])
            } else {
                text
            }
        }
    }
}

/// The first field where two documents differ (the most telling fields of
/// a scope first), with both values.
pub fn first_difference(a: &Json, b: &Json, path: &str) -> Option<(String, Option<Json>, Option<Json>)> {
    match (a, b) {
        (Json::Object(x), Json::Object(y)) => {
            const FIRST: [&str; 8] = ["format", "version", "checkpoint", "job", "sink", "start", "sources", "columns"];
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect::<BTreeSet<_>>().into_iter().collect();
            keys.sort_by_key(|k| (FIRST.iter().position(|f| f == k).unwrap_or(FIRST.len()), (*k).clone()));
            for k in keys {
                let sub = format!("{path}.{k}");
                match (x.get(k), y.get(k)) {
                    (Some(p), Some(q)) => {
                        if let Some(d) = first_difference(p, q, &sub) {
                            return Some(d);
                        }
                    }
                    (p, q) => return Some((sub, p.cloned(), q.cloned())),
                }
            }
            None
        }
        (Json::Array(x), Json::Array(y)) => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                if let Some(d) = first_difference(p, q, &format!("{path}[{i}]")) {
                    return Some(d);
                }
            }
            if x.len() != y.len() {
                return Some((format!("{path} (length)"), Some(Json::from(x.len())), Some(Json::from(y.len()))));
            }
            None
        }
        _ if a == b => None,
        _ => Some((path.to_string(), Some(a.clone()), Some(b.clone()))),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    pub fn scope() -> Json {
        json!({"format": "clink-audit-scope", "version": 1, "checkpoint": 5, "sources": [{"topic": "t", "partitions": [{"partition": 0, "from": 0, "to": 9}]}], "scope_sha256": "x"})
    }

    /// Writes an artifact as a reference would.
    pub fn write(scope: &Json, version: u64, rows: &[Vec<Json>], windows: &[Json], complete: bool) -> Vec<u8> {
        let header = json!({"format": ARTIFACT_FORMAT, "version": version, "type": "header", "scope": scope, "implementation": {"name": "test", "version": "0", "configuration": {}}}).to_string();
        let mut out = format!("{header}\n");
        let mut rh = Sha256::new();
        for r in rows {
            let line = json!({"type": "row", "cells": r}).to_string();
            rh.update(line.as_bytes());
            rh.update(b"\n");
            out.push_str(&line);
            out.push('\n');
        }
        let mut wh = Sha256::new();
        for w in windows {
            let line = w.to_string();
            wh.update(line.as_bytes());
            wh.update(b"\n");
            out.push_str(&line);
            out.push('\n');
        }
        let end = json!({
            "type": "end", "rows": rows.len(), "rows_sha256": clink_basics::digest::hex(&rh.finalize()),
            "windows": windows.len(), "windows_sha256": clink_basics::digest::hex(&wh.finalize()),
            "header_sha256": clink_basics::digest::sha256_hex(header.as_bytes()),
            "complete": complete, "incomplete_reason": if complete { Json::Null } else { json!("a deadline") },
            "source_bounds": [], "verified": [], "recorded": {}
        });
        out.push_str(&end.to_string());
        out.push('\n');
        out.into_bytes()
    }

    const KINDS: [CellKind; 2] = [CellKind::Int, CellKind::String];

    #[test]
    fn a_whole_artifact_reads_with_its_copies() {
        let rows = vec![vec![json!("1"), json!("a")], vec![json!("1"), json!("a")], vec![json!("2"), Json::Null]];
        let a = parse_artifact(&write(&scope(), 1, &rows, &[], true), &scope(), &KINDS, &[]).unwrap();
        assert_eq!(a.rows.len(), 3, "copies are kept");
        assert!(a.complete);
        let a = parse_artifact(&write(&scope(), 1, &rows, &[], false), &scope(), &KINDS, &[]).unwrap();
        assert!(!a.complete && a.incomplete_reason.is_some());
    }

    #[test]
    fn each_refusal_names_what_is_wrong() {
        let good = write(&scope(), 1, &[vec![json!("1"), json!("a")]], &[], true);
        let text = String::from_utf8(good.clone()).unwrap();
        let no_end: String = text.lines().take(2).map(|l| format!("{l}\n")).collect();
        let tampered = text.replace("\"a\"", "\"b\"");
        let mut other = scope();
        other["checkpoint"] = json!(4);
        let another = write(&other, 1, &[vec![json!("1"), json!("a")]], &[], true);
        let mut range = scope();
        range["sources"][0]["partitions"][0]["to"] = json!(8);
        let another_range = write(&range, 1, &[vec![json!("1"), json!("a")]], &[], true);
        let not_canonical = write(&scope(), 1, &[vec![json!("01"), json!("a")]], &[], true);
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (b"not json\n".to_vec(), "line 1: not JSON"),
            (no_end.into_bytes(), "no end line"),
            (good[..good.len() - 1].to_vec(), "cut short"),
            (tampered.into_bytes(), "do not hash"),
            (another, "scope.checkpoint is 4 in the artifact, 5"),
            (another_range, "scope.sources[0].partitions[0].to is 8"),
            (not_canonical, "line 2: \"01\" is not a canonical int"),
            (format!("{text}{{\"type\":\"row\",\"cells\":[]}}\n").into_bytes(), "after the end line"),
        ];
        for (bytes, why) in cases {
            let e = parse_artifact(&bytes, &scope(), &KINDS, &[]).unwrap_err().to_string();
            assert!(e.contains(why), "{e} should say {why}");
        }
    }

    proptest! {
        #[test]
        fn any_bytes_are_read_or_refused_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = parse_artifact(&bytes, &scope(), &KINDS, &[CellKind::String]);
        }

        #[test]
        fn any_changed_byte_of_a_whole_artifact_is_refused_or_reads_the_same(at in any::<prop::sample::Index>(), to in any::<u8>()) {
            let rows = vec![vec![json!("7"), json!("x")], vec![json!("-3"), json!("")]];
            let mut bytes = write(&scope(), 1, &rows, &[], true);
            let i = at.index(bytes.len());
            prop_assume!(bytes[i] != to);
            bytes[i] = to;
            if let Ok(a) = parse_artifact(&bytes, &scope(), &KINDS, &[]) {
                // Only a change JSON does not see (whitespace outside the hashed lines cannot exist) could pass.
                prop_assert_eq!(a.rows.len(), 2);
                prop_assert_eq!(a.rows[0].clone(), vec![Some("7".to_string()), Some("x".to_string())]);
            }
        }

        #[test]
        fn arbitrary_lines_after_a_header_never_panic(lines in proptest::collection::vec(".{0,60}", 0..6)) {
            let mut text = String::from_utf8(write(&scope(), 1, &[], &[], true)).unwrap();
            for l in lines { text.push_str(&l); text.push('\n'); }
            let _ = parse_artifact(text.as_bytes(), &scope(), &KINDS, &[]);
        }
    }
}
