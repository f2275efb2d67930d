//! Cross-version A/B: what one epoch asks of a candidate build before the
//! candidate may replay it, and how the candidate's emissions compare with
//! this build's.
//!
//! The gate is the candidate's own declaration (`clink capabilities --json`,
//! format `clink-capabilities` version 1): the capture format version the
//! epoch's file is in, every state encoding (slot and version) its starting
//! snapshot holds, its operator type, and the emission dump it must write.
//! Anything the candidate does not declare is missing, by name; a field it
//! leaves out declares nothing. An epoch with anything missing is never
//! replayed by the candidate.
//!
//! This module starts no process and reads no file: the command runs the
//! candidate and hands its declaration and its dump here.

use std::collections::BTreeSet;

use clink_engine::value::Row;
use serde_json::Value as Json;

use super::emissions::{first_difference, Difference, Dump};
use super::{EpochEvidence, EpochRef, StartState};

/// The capability a candidate must name to be asked for an emission dump.
pub const EPOCH_OUT_CAPABILITY: &str = "replay.epoch_out";

/// What replaying one epoch requires of a build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Needs {
    pub capture_format: u32,
    /// (slot, version) of every slot of the starting snapshot.
    pub state_encodings: BTreeSet<(String, u32)>,
    pub operator_type: String,
}

/// What an epoch needs, read off its evidence.
pub fn needs(evidence: &EpochEvidence) -> Needs {
    let state_encodings = match &evidence.start {
        StartState::Empty => BTreeSet::new(),
        StartState::Snapshot { slots, .. } => slots.0.iter().map(|(name, slot)| (name.clone(), slot.version)).collect(),
    };
    Needs {
        capture_format: evidence.capture.header.version,
        state_encodings,
        operator_type: evidence.spec.type_name.clone(),
    }
}

/// What a build declares it can do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Declared {
    pub build: String,
    pub capabilities: BTreeSet<String>,
    pub capture_formats: BTreeSet<u32>,
    pub state_encodings: BTreeSet<(String, u32)>,
    pub operator_types: BTreeSet<String>,
}

/// Why a capabilities document was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the candidate's capabilities: {0}")]
pub struct DeclaredError(pub String);

/// Reads `clink capabilities --json`. A document of another format or
/// version, or a field of the wrong shape, is refused; a field that is
/// absent declares nothing.
pub fn parse_declared(bytes: &[u8]) -> Result<Declared, DeclaredError> {
    let doc: Json = serde_json::from_slice(bytes).map_err(|e| DeclaredError(format!("not JSON: {e}")))?;
    let format = doc.get("format").and_then(Json::as_str);
    let version = doc.get("version").and_then(Json::as_u64);
    if format != Some("clink-capabilities") || version != Some(1) {
        return Err(DeclaredError(format!(
            "format {format:?} version {version:?}, not \"clink-capabilities\" version 1"
        )));
    }
    let list = |field: &str| -> Result<Vec<Json>, DeclaredError> {
        match doc.get(field) {
            None => Ok(Vec::new()),
            Some(Json::Array(items)) => Ok(items.clone()),
            Some(_) => Err(DeclaredError(format!("field {field} is not an array"))),
        }
    };
    let shape = |field: &str, what: &str| DeclaredError(format!("an entry of {field} is not {what}"));
    let mut declared = Declared {
        build: doc.get("build").and_then(Json::as_str).unwrap_or("(no build named)").to_string(),
        ..Declared::default()
    };
    for item in list("capabilities")? {
        let name = item.get("name").and_then(Json::as_str).ok_or_else(|| shape("capabilities", "a named object"))?;
        declared.capabilities.insert(name.to_string());
    }
    for item in list("capture_formats")? {
        let v = item.as_u64().and_then(|v| u32::try_from(v).ok()).ok_or_else(|| shape("capture_formats", "a u32"))?;
        declared.capture_formats.insert(v);
    }
    for item in list("state_encodings")? {
        let slot = item.get("slot").and_then(Json::as_str);
        let v = item.get("version").and_then(Json::as_u64).and_then(|v| u32::try_from(v).ok());
        match (slot, v) {
            (Some(slot), Some(v)) => declared.state_encodings.insert((slot.to_string(), v)),
            _ => return Err(shape("state_encodings", "{slot, version}")),
        };
    }
    for item in list("operator_types")? {
        let name = item.get("name").and_then(Json::as_str).ok_or_else(|| shape("operator_types", "a named object"))?;
        declared.operator_types.insert(name.to_string());
    }
    Ok(declared)
}

/// Every capability the epoch needs that the build does not declare, named
/// as a person reads it. Empty when the build may replay the epoch.
pub fn missing(needs: &Needs, declared: &Declared) -> Vec<String> {
    let mut missing = Vec::new();
    if !declared.capabilities.contains(EPOCH_OUT_CAPABILITY) {
        missing.push(format!("capability {EPOCH_OUT_CAPABILITY} (replay epoch --out)"));
    }
    if !declared.capture_formats.contains(&needs.capture_format) {
        missing.push(format!("capture format version {}", needs.capture_format));
    }
    for (slot, version) in &needs.state_encodings {
        if !declared.state_encodings.contains(&(slot.clone(), *version)) {
            missing.push(format!("state encoding {slot} version {version}"));
        }
    }
    if !declared.operator_types.contains(&needs.operator_type) {
        missing.push(format!("operator type {}", needs.operator_type));
    }
    missing
}

/// One epoch's A/B comparison.
#[derive(Debug, Clone, PartialEq)]
pub enum Comparison {
    /// Both builds emitted the same rows, byte for byte.
    Identical { emissions: usize },
    /// The first emission that differs, with both builds' counts.
    Diverged { difference: Difference, ours: usize, theirs: usize },
}

/// Why the candidate's dump cannot be compared: it names another epoch (or
/// another job), so it is not evidence about this one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the candidate's dump names {found}, not job {job} {at}")]
pub struct WrongDump {
    pub found: String,
    pub job: u64,
    pub at: String,
}

/// Compares this build's emissions with the candidate's dump of the same
/// epoch, after checking the dump says it is of that epoch.
pub fn compare(job: u64, at: &EpochRef, ours: &[Row], theirs: &Dump) -> Result<Comparison, WrongDump> {
    // The same checks as `replay diff`: a dump that does not name its job (a
    // version 1 dump) cannot be shown to be of this job's epoch.
    let same = theirs.operator == at.operator.0 && theirs.subtask == at.subtask && theirs.epoch == at.epoch;
    if !same || theirs.job != Some(job) {
        return Err(WrongDump { found: theirs.origin(), job, at: at.to_string() });
    }
    Ok(match first_difference(ours, &theirs.rows) {
        None => Comparison::Identical { emissions: ours.len() },
        Some(difference) => Comparison::Diverged { difference, ours: ours.len(), theirs: theirs.rows.len() },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clink_basics::ids::OperatorId;
    use clink_engine::value::Value;

    fn full() -> Declared {
        Declared {
            build: "x".into(),
            capabilities: [EPOCH_OUT_CAPABILITY.to_string()].into(),
            capture_formats: [3].into(),
            state_encodings: [("windows".to_string(), 1)].into(),
            operator_types: ["tumbling_window".to_string()].into(),
        }
    }

    fn need() -> Needs {
        Needs {
            capture_format: 3,
            state_encodings: [("windows".to_string(), 1)].into(),
            operator_type: "tumbling_window".into(),
        }
    }

    type Change = Box<dyn Fn(&mut Declared)>;

    #[test]
    fn every_undeclared_need_is_named() {
        assert!(missing(&need(), &full()).is_empty());
        let cases: [(&str, Change); 4] = [
            ("capability replay.epoch_out (replay epoch --out)", Box::new(|d| d.capabilities.clear())),
            ("capture format version 3", Box::new(|d| d.capture_formats = [2].into())),
            ("state encoding windows version 1", Box::new(|d| d.state_encodings = [("windows".into(), 2)].into())),
            ("operator type tumbling_window", Box::new(|d| d.operator_types.clear())),
        ];
        for (named, change) in cases {
            let mut d = full();
            change(&mut d);
            assert_eq!(missing(&need(), &d), vec![named.to_string()], "{named}");
        }
    }

    #[test]
    fn a_declaration_is_read_and_a_foreign_one_refused() {
        let doc = br#"{"format":"clink-capabilities","version":1,"build":"0.3",
            "capabilities":[{"name":"replay.epoch_out"}],"capture_formats":[1,2,3],
            "state_encodings":[{"slot":"windows","version":1}],"operator_types":[{"name":"tumbling_window"}]}"#;
        let d = parse_declared(doc).unwrap();
        assert!(missing(&need(), &d).is_empty());
        let old = br#"{"format":"clink-capabilities","version":1,"capabilities":[{"name":"job.run"}]}"#;
        assert_eq!(missing(&need(), &parse_declared(old).unwrap()).len(), 3 + 1);
        assert!(parse_declared(br#"{"format":"clink-capabilities","version":2}"#).is_err());
        assert!(parse_declared(br#"{"format":"clink-capabilities","version":1,"capture_formats":"3"}"#).is_err());
        assert!(parse_declared(b"not json").is_err());
    }

    #[test]
    fn a_dump_of_another_epoch_is_never_compared() {
        let at = EpochRef { operator: OperatorId(3), subtask: 0, epoch: 4 };
        let rows = vec![vec![Value::Int(1)]];
        let dump = |job, epoch| Dump { version: 2, job, operator: 3, subtask: 0, epoch, rows: rows.clone() };
        assert_eq!(compare(1, &at, &rows, &dump(Some(1), 4)), Ok(Comparison::Identical { emissions: 1 }));
        assert!(compare(1, &at, &rows, &dump(Some(1), 5)).is_err());
        assert!(compare(1, &at, &rows, &dump(Some(2), 4)).is_err());
        assert!(compare(1, &at, &rows, &dump(None, 4)).is_err(), "a version 1 dump cannot be shown to be of job 1");
        let other = vec![vec![Value::Int(2)]];
        match compare(1, &at, &other, &dump(Some(1), 4)) {
            Ok(Comparison::Diverged { difference, .. }) => assert_eq!(difference.index, 0),
            other => panic!("{other:?}"),
        }
    }

    proptest::proptest! {
        #[test]
        fn the_declaration_reader_never_panics(text in ".{0,300}") {
            let _ = parse_declared(text.as_bytes());
        }
    }
}
