//! `events.ndjson`: one JSON object per line for whatever monitors the host.
//!
//! The runner appends each event with a single `write` of a whole line to a
//! file opened for appending, then syncs it, so a reader sees whole events
//! and, after a crash, at most one torn last line. The reader says so
//! instead of dropping it: a torn tail is reported, and a line in the middle
//! that does not parse is an error naming its line number.
//!
//! It never sends anything anywhere, and never writes a value the caller did
//! not hand it (credentials are named in the configuration, never held here).

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value as Json};
use thiserror::Error;

/// The events file's name inside the state directory.
pub const EVENTS_FILE: &str = "events.ndjson";

/// One event line longer than this is refused, written or read.
pub const MAX_EVENT_BYTES: usize = 64 * 1024;

#[derive(Debug, Error)]
pub enum EventError {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{}: line {line}: {why}", path.display())]
    Malformed { path: PathBuf, line: usize, why: String },
    #[error("event {event}: {why}")]
    Refused { event: String, why: String },
}

/// Appends events to one state directory's file.
#[derive(Debug, Clone)]
pub struct Events {
    path: PathBuf,
}

impl Events {
    pub fn new(state_dir: &Path) -> Events {
        Events { path: state_dir.join(EVENTS_FILE) }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `{"ts_ms": .., "event": name, ..fields}` as one line and syncs it.
    /// `fields` may not name `ts_ms` or `event`.
    pub fn append(&self, ts_ms: u64, event: &str, fields: Map<String, Json>) -> Result<(), EventError> {
        let refused = |why: &str| EventError::Refused { event: event.to_string(), why: why.to_string() };
        if event.is_empty() || !event.bytes().all(|b| b.is_ascii_lowercase() || b == b'-' || b == b'_') {
            return Err(refused("an event name is lowercase letters, '-' and '_'"));
        }
        if fields.contains_key("ts_ms") || fields.contains_key("event") {
            return Err(refused("the fields may not set ts_ms or event"));
        }
        let mut object = Map::new();
        object.insert("ts_ms".into(), ts_ms.into());
        object.insert("event".into(), event.into());
        object.extend(fields);
        let mut line = serde_json::to_vec(&Json::Object(object)).map_err(|e| refused(&e.to_string()))?;
        line.push(b'\n');
        if line.len() > MAX_EVENT_BYTES {
            return Err(refused(&format!("{} bytes, more than {MAX_EVENT_BYTES}", line.len())));
        }
        let io = |source| EventError::Io { path: self.path.clone(), source };
        let mut file = OpenOptions::new().create(true).append(true).open(&self.path).map_err(io)?;
        file.write_all(&line).map_err(io)?;
        file.sync_data().map_err(io)
    }
}

/// What the events file holds.
#[derive(Debug, Clone, PartialEq)]
pub struct EventLog {
    pub events: Vec<Map<String, Json>>,
    /// The last line has no newline (a write a crash cut short); its bytes
    /// are not counted as an event.
    pub torn_tail: bool,
}

/// Reads the events file whole (at most `max_bytes`); a missing file holds
/// no events.
pub fn read_events(state_dir: &Path, max_bytes: u64) -> Result<EventLog, EventError> {
    let path = state_dir.join(EVENTS_FILE);
    let bytes = match clink_basics::files::read_bounded(&path, max_bytes) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(EventLog { events: Vec::new(), torn_tail: false })
        }
        Err(source) => return Err(EventError::Io { path, source }),
    };
    let torn_tail = !bytes.is_empty() && !bytes.ends_with(b"\n");
    let whole = match bytes.iter().rposition(|&b| b == b'\n') {
        Some(last) => &bytes[..=last],
        None => &[][..],
    };
    let mut events = Vec::new();
    for (i, line) in whole.split(|&b| b == b'\n').enumerate().filter(|(_, l)| !l.is_empty()) {
        let malformed = |why: String| EventError::Malformed { path: path.clone(), line: i + 1, why };
        if line.len() > MAX_EVENT_BYTES {
            return Err(malformed(format!("{} bytes, more than {MAX_EVENT_BYTES}", line.len())));
        }
        match serde_json::from_slice::<Json>(line) {
            Ok(Json::Object(object)) if object.get("event").is_some_and(Json::is_string) => events.push(object),
            Ok(_) => return Err(malformed("not an object with an event name".into())),
            Err(e) => return Err(malformed(e.to_string())),
        }
    }
    Ok(EventLog { events, torn_tail })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(v: Json) -> Map<String, Json> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn events_append_as_whole_lines_and_read_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let events = Events::new(dir.path());
        assert_eq!(read_events(dir.path(), 1 << 20).unwrap().events.len(), 0, "no file, no events");
        events.append(1, "audit-started", fields(json!({"checkpoint": 4}))).unwrap();
        events.append(2, "audit-published", fields(json!({"checkpoint": 4, "outcome": "passed"}))).unwrap();
        let log = read_events(dir.path(), 1 << 20).unwrap();
        assert!(!log.torn_tail);
        assert_eq!(log.events.len(), 2);
        assert_eq!(log.events[1]["outcome"], "passed");
        assert_eq!(log.events[0]["ts_ms"], 1);
    }

    #[test]
    fn a_torn_last_line_is_reported_and_a_torn_middle_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let events = Events::new(dir.path());
        events.append(1, "cycle-started", Map::new()).unwrap();
        let mut f = OpenOptions::new().append(true).open(events.path()).unwrap();
        f.write_all(br#"{"ts_ms":2,"event":"cyc"#).unwrap();
        let log = read_events(dir.path(), 1 << 20).unwrap();
        assert_eq!((log.events.len(), log.torn_tail), (1, true));
        f.write_all(b"\n").unwrap();
        events.append(3, "cycle-ended", Map::new()).unwrap();
        match read_events(dir.path(), 1 << 20) {
            Err(EventError::Malformed { line: 2, .. }) => {}
            other => panic!("a torn line in the middle was not refused: {other:?}"),
        }
    }

    #[test]
    fn bad_events_are_refused_before_anything_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let events = Events::new(dir.path());
        assert!(events.append(1, "Bad Name", Map::new()).is_err());
        assert!(events.append(1, "x", fields(json!({"event": "other"}))).is_err());
        assert!(events.append(1, "x", fields(json!({"blob": "a".repeat(MAX_EVENT_BYTES)}))).is_err());
        assert!(!events.path().exists(), "nothing was written");
        assert!(read_events(dir.path(), 0).unwrap().events.is_empty());
    }

    proptest::proptest! {
        #[test]
        fn the_reader_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..400)) {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join(EVENTS_FILE), &bytes).unwrap();
            let _ = read_events(dir.path(), 1 << 20);
        }
    }
}
