//! clink-bundle: incident bundles. The manifest and its reader ([`manifest`]),
//! the path rules ([`paths`]), the reader of what the manifest vouched for
//! ([`vouched`]) and the typed evidence read from it ([`evidence`]), what the
//! manifest claims derived again from that evidence ([`derive`]), and the
//! collector ([`collect`]), which writes its manifest with the same rules.
//!
//! A bundle keeps the engine's own layout under `checkpoint/` and `capture/`,
//! so the engine's readers (markers, the restore rule, snapshots, captures) run
//! on it unchanged. This crate never judges a bundle: the checks do
//! (`clink-verify`). The reader refuses what is malformed; it never runs or
//! loads anything a manifest names, and never opens a connection. It never
//! depends on replay, the formal side or the verifier.
//!
//! ```no_run
//! let bundle = clink_bundle::read_bundle(std::path::Path::new("incident-1"))?;
//! println!("job {} checkpoint {}", bundle.manifest.job.id, bundle.manifest.selection.checkpoint);
//! # Ok::<(), clink_bundle::ManifestError>(())
//! ```

pub mod collect;
pub mod derive;
pub mod evidence;
pub mod graph;
pub mod manifest;
pub mod model;
pub mod paths;
pub mod vouched;

pub use evidence::{EvidenceError, Markers};
pub use manifest::{read_bundle, Artifact, Bundle, EpochEntry, IncidentManifest, ManifestError};
pub use vouched::VouchError;
