//! The trace vocabulary (`formal/trace/events.txt`): the events, their
//! fields and their types, and the pending changes the engine does not make
//! yet. Parsing is strict: an unknown field type or a malformed entry refuses
//! the whole file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use thiserror::Error;

/// The JSON type of a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldType {
    Number,
    Text,
    Bool,
}

/// The type of every field name the vocabulary may use.
pub fn field_type(name: &str) -> Option<FieldType> {
    Some(match name {
        "job" | "ckpt" | "epoch" | "worker" | "restore" | "next" | "completed" | "confirmed" | "recommitted" => {
            FieldType::Number
        }
        "sub" | "family" | "kind" | "outcome" | "role" | "cause" => FieldType::Text,
        "fenced" | "withheld" | "accepted" | "ok" | "staged" | "source" => FieldType::Bool,
        _ => return None,
    })
}

/// One event of the vocabulary: the fields a line must carry, and those it may.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventSpec {
    /// Fields every line of the event carries (the engine emits them today).
    pub fields: Vec<String>,
    /// Fields a pending change adds: read when present.
    pub added: Vec<String>,
    /// Fields a pending change drops: tolerated, not read.
    pub dropped: Vec<String>,
    /// The whole event is a pending addition (the engine does not emit it yet).
    pub pending: bool,
}

impl EventSpec {
    /// The fields the trace module reads: the vocabulary's, less the dropped.
    pub fn read(&self) -> impl Iterator<Item = &String> {
        self.fields.iter().filter(|f| !self.dropped.contains(f))
    }
}

/// `formal/trace/events.txt`, parsed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Vocabulary {
    pub events: BTreeMap<String, EventSpec>,
    /// Every pending change, in short (`add event JobEnds`, `Placement: add role`).
    pub pending: Vec<String>,
}

fn field_names(spec: &str) -> Vec<String> {
    spec.split_whitespace().map(|f| f.split('(').next().unwrap_or(f).to_string()).collect()
}

/// Why `formal/trace/events.txt` does not read.
#[derive(Debug, Error)]
pub enum VocabularyError {
    #[error("{}: {error}", path.display())]
    Read { path: PathBuf, error: std::io::Error },
    /// Line `line` (from 1), whose text is `text`, is wrong as `problem` says.
    #[error("events.txt:{line}: {problem}: {text:?}")]
    Line { line: usize, text: String, problem: VocabularyProblem },
}

/// What is wrong with a line of the vocabulary.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum VocabularyProblem {
    #[error("not an event name")]
    NotAnEventName,
    #[error("field {0} has no known type")]
    UnknownFieldType(String),
    #[error("the first field must be job")]
    JobNotFirst,
    #[error("listed twice")]
    ListedTwice,
    #[error("expected NAME | emitter | fields | step")]
    NotAnEntry,
    /// A pending field change names an event the vocabulary does not list.
    #[error("no such event")]
    NoSuchEvent,
    #[error("{event} has no field {field} to drop")]
    NoFieldToDrop { event: String, field: String },
}

/// Parses the vocabulary: entries `NAME | emitter | fields | step`, and the
/// pending changes `#+ NAME | emitter | fields | step` (a new event),
/// `#+ NAME | field(values)` (a new field), `#- NAME | field` (a field to drop).
pub fn parse_vocabulary(text: &str) -> Result<Vocabulary, VocabularyError> {
    let mut v = Vocabulary::default();
    let mut later = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let at = |problem: VocabularyProblem| VocabularyError::Line { line: i + 1, text: raw.to_string(), problem };
        let (mark, line) = if let Some(rest) = raw.strip_prefix("#+") {
            ('+', rest)
        } else if let Some(rest) = raw.strip_prefix("#-") {
            ('-', rest)
        } else if raw.starts_with('#') || raw.trim().is_empty() {
            continue;
        } else {
            (' ', raw)
        };
        let parts: Vec<&str> = line.split('|').map(str::trim).collect();
        let name = parts[0].to_string();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(at(VocabularyProblem::NotAnEventName));
        }
        match (mark, parts.len()) {
            (' ' | '+', 4) => {
                let fields = field_names(parts[2]);
                if let Some(bad) = fields.iter().find(|f| field_type(f).is_none()) {
                    return Err(at(VocabularyProblem::UnknownFieldType(bad.clone())));
                }
                if fields.first().map(String::as_str) != Some("job") {
                    return Err(at(VocabularyProblem::JobNotFirst));
                }
                let spec = EventSpec { fields, pending: mark == '+', ..EventSpec::default() };
                if v.events.insert(name.clone(), spec).is_some() {
                    return Err(at(VocabularyProblem::ListedTwice));
                }
                if mark == '+' {
                    v.pending.push(format!("add event {name}"));
                }
            }
            ('+' | '-', 2) => later.push((mark, name, field_names(parts[1]), i + 1, raw)),
            _ => return Err(at(VocabularyProblem::NotAnEntry)),
        }
    }
    for (mark, name, fields, line, raw) in later {
        let at = |problem: VocabularyProblem| VocabularyError::Line { line, text: raw.to_string(), problem };
        let spec = v.events.get_mut(&name).ok_or_else(|| at(VocabularyProblem::NoSuchEvent))?;
        for f in fields {
            if field_type(&f).is_none() {
                return Err(at(VocabularyProblem::UnknownFieldType(f)));
            }
            if mark == '+' {
                spec.added.push(f.clone());
                v.pending.push(format!("{name}: add {f}"));
            } else {
                if !spec.fields.contains(&f) {
                    return Err(at(VocabularyProblem::NoFieldToDrop { event: name.clone(), field: f }));
                }
                spec.dropped.push(f.clone());
                v.pending.push(format!("{name}: drop {f}"));
            }
        }
    }
    Ok(v)
}

/// Reads `<formal>/trace/events.txt`.
pub fn read_vocabulary(formal_dir: &Path) -> Result<Vocabulary, VocabularyError> {
    let path = formal_dir.join("trace/events.txt");
    let text = std::fs::read_to_string(&path).map_err(|error| VocabularyError::Read { path: path.clone(), error })?;
    parse_vocabulary(&text)
}
