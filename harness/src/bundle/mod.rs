//! Incident bundles: the manifest and its reader, the path rules, and the
//! collector.
//!
//! A bundle keeps the engine's own layout under `checkpoint/` and `capture/`,
//! so the engine's readers (markers, the restore rule, snapshots, captures) run
//! on it unchanged. This module never judges a bundle: the checks do
//! (`crate::verify`). The reader refuses what is malformed; it never runs or
//! loads anything a manifest names.

pub mod collect;
pub mod manifest;
pub mod paths;

pub use manifest::{read_bundle, Artifact, Bundle, EpochEntry, IncidentManifest, ManifestError};
