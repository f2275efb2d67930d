//! A run's identity as the artifacts it writes carry it: the lineage of the
//! checkpoint directory and the incarnation (fencing epoch) of the process.
//!
//! Every artifact a run leaves (markers, records, receipts, sidecars and
//! snapshots, captures, sink evidence, op.json, the job manifest) names the
//! run that wrote it, so a verifier can tell a bundle's own evidence from
//! another run's file of the same job id and checkpoint number, and refuse a
//! mix. This module holds the identity's types, its JSON and binary forms,
//! and [`RunCell`], through which the run that holds a directory's lock
//! hands its identity to every writer sharing that directory's layout. It
//! reads and writes no file.

use std::fmt;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::codec::{DecodeError, Reader, Writer};

/// The text of a lineage id: this many lowercase hex digits.
pub const LINEAGE_HEX_DIGITS: usize = 32;

/// A lineage id: 32 lowercase hex digits, checked on every way in.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LineageId(String);

impl LineageId {
    /// The id written as `text`, if it is one.
    pub fn parse(text: &str) -> Option<LineageId> {
        let well_formed =
            text.len() == LINEAGE_HEX_DIGITS && text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        well_formed.then(|| LineageId(text.to_string()))
    }

    /// A new id, from the operating system's randomness.
    pub(super) fn fresh() -> Result<LineageId, String> {
        let mut bytes = [0u8; LINEAGE_HEX_DIGITS / 2];
        getrandom::fill(&mut bytes).map_err(|e| e.to_string())?;
        Ok(LineageId(bytes.iter().map(|b| format!("{b:02x}")).collect()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for LineageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for LineageId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for LineageId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        LineageId::parse(&text).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "{text:?} is not a lineage id ({LINEAGE_HEX_DIGITS} lowercase hex digits)"
            ))
        })
    }
}

/// Which run this is: the lineage it continues and its incarnation of it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunIdentity {
    pub lineage: LineageId,
    /// The fencing epoch this process took (1 for the lineage's first run).
    pub incarnation: u64,
}

impl fmt::Display for RunIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "lineage {} incarnation {}", self.lineage, self.incarnation)
    }
}

/// Appends an optional identity to a binary format: a flag byte, then the
/// lineage's text and the incarnation.
pub fn encode_run(w: &mut Writer, run: Option<&RunIdentity>) {
    match run {
        None => {
            w.u8(0);
        }
        Some(run) => {
            w.u8(1).str(run.lineage.as_str()).u64(run.incarnation);
        }
    }
}

/// Reads what [`encode_run`] wrote; a lineage that is not one is refused.
pub fn decode_run(r: &mut Reader<'_>) -> Result<Option<RunIdentity>, DecodeError> {
    match r.u8()? {
        0 => Ok(None),
        1 => {
            let text = r.str()?;
            let lineage = LineageId::parse(text).ok_or_else(|| r.invalid("lineage", format!("{text:?}")))?;
            Ok(Some(RunIdentity { lineage, incarnation: r.u64()? }))
        }
        other => Err(r.invalid("run identity flag", format!("{other}"))),
    }
}

/// The identity of the run writing through a layout, set once by the run
/// that takes the directory's lock and shared by every clone of the layout
/// (the coordinator's, its backend's, each subtask's): writers stamp what
/// they write with it. A layout no run holds (a reader's, a tool's) has none.
#[derive(Debug, Clone, Default)]
pub struct RunCell(Arc<OnceLock<RunIdentity>>);

impl RunCell {
    /// The run writing, if one holds the directory.
    pub fn get(&self) -> Option<RunIdentity> {
        self.0.get().cloned()
    }

    /// Records the run that took the lock; a second, other run is refused
    /// (one layout is one process's).
    pub(super) fn set(&self, run: RunIdentity) -> Result<(), String> {
        match self.0.set(run.clone()) {
            Ok(()) => Ok(()),
            Err(_) if self.0.get() == Some(&run) => Ok(()),
            Err(_) => Err(format!("this layout is already written by {:?}, not {run}", self.0.get())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run() -> RunIdentity {
        RunIdentity { lineage: LineageId::parse("0123456789abcdef0123456789abcdef").unwrap(), incarnation: 3 }
    }

    #[test]
    fn the_identity_round_trips_in_json_and_binary() {
        let json = serde_json::to_string(&run()).unwrap();
        assert_eq!(json, r#"{"lineage":"0123456789abcdef0123456789abcdef","incarnation":3}"#);
        assert_eq!(serde_json::from_str::<RunIdentity>(&json).unwrap(), run());
        for bad in [r#"{"lineage":"XYZ","incarnation":3}"#, r#"{"lineage":"0123456789abcdef0123456789abcdef"}"#] {
            assert!(serde_json::from_str::<RunIdentity>(bad).is_err(), "{bad}");
        }
        for value in [None, Some(run())] {
            let mut w = Writer::new();
            encode_run(&mut w, value.as_ref());
            let bytes = w.into_bytes();
            let mut r = Reader::new(&bytes);
            assert_eq!(decode_run(&mut r).unwrap(), value);
            r.finish().unwrap();
        }
    }

    #[test]
    fn clones_share_the_cell_and_it_is_set_once() {
        let cell = RunCell::default();
        let clone = cell.clone();
        assert_eq!(clone.get(), None);
        cell.set(run()).unwrap();
        assert_eq!(clone.get(), Some(run()));
        assert!(cell.set(RunIdentity { incarnation: 4, ..run() }).is_err());
    }
}
