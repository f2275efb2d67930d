//! Reading a run's trace files: each line checked against the vocabulary,
//! each file against the engine's naming and numbering. Reading refuses,
//! never skips: an entry of the directory that is not a plain readable file
//! refuses the run, naming it.

use std::path::Path;

use serde_json::{Map, Value as Json};
use thiserror::Error;

use super::vocabulary::{field_type, FieldType, Vocabulary};
use super::Malformed;

/// One event of a trace file.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceLine {
    pub file: String,
    pub seq: u64,
    pub ts: u64,
    /// The process that wrote it (`<pid>-<start>` of its file name).
    pub process: String,
    pub fields: Map<String, Json>,
}

impl TraceLine {
    pub fn event(&self) -> &str {
        self.fields.get("event").and_then(Json::as_str).unwrap_or("")
    }

    pub fn u64(&self, field: &str) -> Option<u64> {
        self.fields.get(field).and_then(Json::as_u64)
    }

    pub fn str(&self, field: &str) -> Option<&str> {
        self.fields.get(field).and_then(Json::as_str)
    }
}

/// The role, pid and start stamp of a trace file name `<role>-<pid>-<start>.ndjson`.
fn parse_file_name(name: &str) -> Option<(&str, &str, &str)> {
    let stem = name.strip_suffix(".ndjson")?;
    let mut parts = stem.split('-');
    let (role, pid, start) = (parts.next()?, parts.next()?, parts.next()?);
    // Canonical decimals only, so one process has one file name.
    let digits = |s: &str| clink_basics::ids::parse_decimal_u64(s).is_some();
    (parts.next().is_none() && matches!(role, "coordinator" | "worker") && digits(pid) && digits(start))
        .then_some((role, pid, start))
}

/// Why a line does not fit the vocabulary.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LineError {
    #[error("no event")]
    NoEvent,
    #[error("unknown event {0:?}")]
    UnknownEvent(String),
    #[error("{event} without job")]
    NoJob { event: String },
    #[error("{event} without {field}")]
    Missing { event: String, field: String },
    #[error("{event} has a field {field} the vocabulary does not list")]
    Unlisted { event: String, field: String },
    /// `expected` is the field's type, `None` for a field of no known type.
    #[error("field {field} is {value}, not a {expected:?}")]
    WrongType { field: String, value: Json, expected: Option<FieldType> },
}

fn check_value(field: &str, v: &Json) -> Result<(), LineError> {
    let ok = match field_type(field) {
        Some(FieldType::Number) => v.as_u64().is_some(),
        Some(FieldType::Text) => v.is_string(),
        Some(FieldType::Bool) => v.is_boolean(),
        None => false,
    };
    if ok {
        Ok(())
    } else {
        Err(LineError::WrongType { field: field.to_string(), value: v.clone(), expected: field_type(field) })
    }
}

/// Checks one line against the vocabulary: a known event with every field it
/// must carry, no field it may not (an optional one, `name?`, it may carry or
/// not), each of its type.
pub fn check_line(vocabulary: &Vocabulary, fields: &Map<String, Json>) -> Result<(), LineError> {
    let event = fields.get("event").and_then(Json::as_str).ok_or(LineError::NoEvent)?;
    let spec = vocabulary.events.get(event).ok_or_else(|| LineError::UnknownEvent(event.to_string()))?;
    if !fields.contains_key("job") {
        return Err(LineError::NoJob { event: event.to_string() });
    }
    for f in &spec.fields {
        if !spec.dropped.contains(f) && !fields.contains_key(f) {
            return Err(LineError::Missing { event: event.to_string(), field: f.clone() });
        }
    }
    for (k, v) in fields {
        if matches!(k.as_str(), "seq" | "ts" | "proc" | "event") {
            continue;
        }
        if !spec.fields.contains(k) && !spec.added.contains(k) && !spec.optional.contains(k) {
            return Err(LineError::Unlisted { event: event.to_string(), field: k.clone() });
        }
        check_value(k, v)?;
    }
    Ok(())
}

/// Reads and checks one trace file's text.
pub fn read_file(vocabulary: &Vocabulary, name: &str, text: &str) -> Result<Vec<TraceLine>, Malformed> {
    let bad = |line: usize, why: String| Malformed(format!("{name}:{line}: {why}"));
    let (role, pid, start) = parse_file_name(name)
        .ok_or_else(|| Malformed(format!("{name}: not a trace file name (<role>-<pid>-<start>.ndjson)")))?;
    let proc = format!("{role}:{pid}");
    let mut lines = Vec::new();
    let mut last_ts = None;
    if !text.is_empty() && !text.ends_with('\n') {
        return Err(bad(text.lines().count(), "the last line is not terminated (a line cut short)".into()));
    }
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let v: Json = serde_json::from_str(line).map_err(|e| bad(n, format!("not JSON: {e}")))?;
        let Json::Object(fields) = v else {
            return Err(bad(n, "not a JSON object".into()));
        };
        let seq = fields.get("seq").and_then(Json::as_u64).ok_or_else(|| bad(n, "no seq".into()))?;
        let ts = fields.get("ts").and_then(Json::as_u64).ok_or_else(|| bad(n, "no ts".into()))?;
        if seq != n as u64 {
            return Err(bad(n, format!("seq {seq} where {n} is due: a line missing, added or moved")));
        }
        if last_ts.is_some_and(|t| ts <= t) {
            return Err(bad(n, format!("ts {ts} does not increase (the line before has {})", last_ts.unwrap_or(0))));
        }
        last_ts = Some(ts);
        if fields.get("proc").and_then(Json::as_str) != Some(proc.as_str()) {
            return Err(bad(n, format!("proc is {:?}, the file is {proc:?}'s", fields.get("proc"))));
        }
        check_line(vocabulary, &fields).map_err(|e| bad(n, e.to_string()))?;
        let event = fields.get("event").and_then(Json::as_str).unwrap_or("");
        if coordinator_event(event) != (role == "coordinator") {
            return Err(bad(n, format!("a {} event in a {role} file", fields["event"])));
        }
        lines.push(TraceLine { file: name.to_string(), seq, ts, process: format!("{pid}-{start}"), fields });
    }
    Ok(lines)
}

/// Whether an event is the coordinator's (otherwise a worker's).
pub fn coordinator_event(event: &str) -> bool {
    matches!(
        event,
        "Trigger"
            | "CoordComplete"
            | "WriteCompleted"
            | "Broadcast"
            | "CoordRecovers"
            | "Redeploy"
            | "RestartOnError"
            | "JobEnds"
            | "Rescale"
            | "WriteConfirmed"
            | "RestartProceeds"
            | "WalkSkips"
            | "WalkReadsReceipt"
            | "WalkProbes"
            | "WalkRetries"
            | "WalkExhausted"
            | "WalkCancelled"
            | "WalkDecides"
            | "WalkFinishes"
    )
}

/// A trace file larger than this is refused unread.
pub const MAX_TRACE_FILE_BYTES: u64 = 256 << 20;

/// Reads every `*.ndjson` file directly in `dir`. Every entry of the
/// directory is looked at: a link, anything but a regular file or a
/// directory, an entry that cannot be read or whose name is not UTF-8 refuses
/// the run with its name, so nothing is validated while something beside it
/// went unread. Other regular files (an `expected.txt`) are not trace files
/// and are not read. Two files that claim one process (one role and pid,
/// alive over the same time) are refused with both named.
pub fn read_run(vocabulary: &Vocabulary, dir: &Path) -> Result<Vec<TraceLine>, Malformed> {
    let names = trace_file_names(dir)?;
    if names.is_empty() {
        return Err(Malformed(format!("{} holds no trace file (*.ndjson)", dir.display())));
    }
    let mut files = Vec::new();
    for name in names {
        let bytes = clink_basics::files::read_bounded(&dir.join(&name), MAX_TRACE_FILE_BYTES)
            .map_err(|e| Malformed(format!("{name}: cannot be read: {e}")))?;
        let text = String::from_utf8(bytes)
            .map_err(|e| Malformed(format!("{name}: not UTF-8 (at byte {})", e.utf8_error().valid_up_to())))?;
        files.push((name.clone(), read_file(vocabulary, &name, &text)?));
    }
    refuse_shared_processes(&files)?;
    Ok(files.into_iter().flat_map(|(_, lines)| lines).collect())
}

/// The `*.ndjson` names of a trace directory, sorted, once every entry of it
/// is known to be plain.
fn trace_file_names(dir: &Path) -> Result<Vec<String>, Malformed> {
    let entries = std::fs::read_dir(dir).map_err(|e| Malformed(format!("{}: {e}", dir.display())))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Malformed(format!("{}: an entry cannot be read: {e}", dir.display())))?;
        let name = entry
            .file_name()
            .into_string()
            .map_err(|raw| Malformed(format!("{:?} in {}: a name that is not UTF-8", raw, dir.display())))?;
        let kind = entry.file_type().map_err(|e| Malformed(format!("{name}: cannot be read: {e}")))?;
        if kind.is_symlink() {
            return Err(Malformed(format!("{name}: a symbolic link; a trace directory holds plain files only")));
        }
        if kind.is_dir() && !name.ends_with(".ndjson") {
            continue;
        }
        if !kind.is_file() {
            return Err(Malformed(format!("{name}: not a regular file; a trace directory holds plain files only")));
        }
        if name.ends_with(".ndjson") {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// Two files of one role and pid whose stamps overlap claim one process: a
/// process writes one file per role, so one of them is not what it says.
fn refuse_shared_processes(files: &[(String, Vec<TraceLine>)]) -> Result<(), Malformed> {
    let span = |lines: &[TraceLine]| (lines.first().map_or(0, |l| l.ts), lines.last().map_or(0, |l| l.ts));
    for (i, (a, lines_a)) in files.iter().enumerate() {
        for (b, lines_b) in &files[i + 1..] {
            let (Some((role_a, pid_a, _)), Some((role_b, pid_b, _))) = (parse_file_name(a), parse_file_name(b)) else {
                continue;
            };
            let ((a0, a1), (b0, b1)) = (span(lines_a), span(lines_b));
            if (role_a, pid_a) == (role_b, pid_b) && a0 <= b1 && b0 <= a1 {
                return Err(Malformed(format!(
                    "{a} and {b} both claim {role_a} process {pid_a} over the same time; one process writes one file per role"
                )));
            }
        }
    }
    Ok(())
}
