//! The trace vocabulary (`formal/trace/events.txt`): the events, their
//! fields and their types, which fields are optional (`name?`: on some lines
//! of an event and not on others), and the pending changes the engine does
//! not make yet. Parsing is strict: an unknown field type or a malformed
//! entry refuses the whole file.

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
        "job" | "ckpt" | "epoch" | "worker" | "restore" | "next" | "completed" | "confirmed" | "recommitted"
        | "orphan" | "op" | "from" | "to" => FieldType::Number,
        "sub" | "family" | "kind" | "outcome" | "role" | "cause" | "verdict" | "settled" | "mode" => FieldType::Text,
        "fenced" | "withheld" | "accepted" | "ok" | "staged" | "source" | "resolving" => FieldType::Bool,
        _ => return None,
    })
}

/// One event of the vocabulary: the fields a line must carry, and those it may.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventSpec {
    /// Fields every line of the event carries (the engine emits them today).
    pub fields: Vec<String>,
    /// Fields the vocabulary marks optional (`name?`): the engine writes them
    /// on some lines of the event and not on others; read when present.
    pub optional: Vec<String>,
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

/// One field of an entry: its name, and whether it is optional (`name?`),
/// with its values in parentheses dropped (`settled?(receipt/committed)`).
fn field_token(token: &str) -> (String, bool) {
    let name = token.split('(').next().unwrap_or(token);
    match name.strip_suffix('?') {
        Some(bare) => (bare.to_string(), true),
        None => (name.to_string(), false),
    }
}

fn field_names(spec: &str) -> Vec<(String, bool)> {
    spec.split_whitespace().map(field_token).collect()
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
    /// A field named twice in one entry (required or optional).
    #[error("field {0} listed twice")]
    FieldTwice(String),
    /// `name?` where it means nothing: on `job`, which every line carries, or
    /// in a pending field change (a pending addition is read when present
    /// already, and a field to drop is tolerated absent).
    #[error("field {0} cannot be optional here")]
    OptionalNotAllowed(String),
}

/// Parses the vocabulary: entries `NAME | emitter | fields | step` (a field
/// `name?` is optional, `name(values)` lists its values), and the pending
/// changes `#+ NAME | emitter | fields | step` (a new event),
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
                let tokens = field_names(parts[2]);
                if let Some((bad, _)) = tokens.iter().find(|(f, _)| field_type(f).is_none()) {
                    return Err(at(VocabularyProblem::UnknownFieldType(bad.clone())));
                }
                match tokens.first() {
                    Some((first, false)) if first == "job" => {}
                    Some((first, true)) if first == "job" => {
                        return Err(at(VocabularyProblem::OptionalNotAllowed(first.clone())))
                    }
                    _ => return Err(at(VocabularyProblem::JobNotFirst)),
                }
                let mut seen = std::collections::BTreeSet::new();
                if let Some((twice, _)) = tokens.iter().find(|(f, _)| !seen.insert(f.clone())) {
                    return Err(at(VocabularyProblem::FieldTwice(twice.clone())));
                }
                let (optional, fields): (Vec<_>, Vec<_>) = tokens.into_iter().partition(|(_, opt)| *opt);
                let spec = EventSpec {
                    fields: fields.into_iter().map(|(f, _)| f).collect(),
                    optional: optional.into_iter().map(|(f, _)| f).collect(),
                    pending: mark == '+',
                    ..EventSpec::default()
                };
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
        for (f, optional) in fields {
            if optional {
                return Err(at(VocabularyProblem::OptionalNotAllowed(f)));
            }
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
