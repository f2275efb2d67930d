//! clink-reference: what a job's specification says its output must be,
//! computed from the input alone.
//!
//! The reference is independent by construction: this crate depends on
//! neither the engine nor the harness (a test reads `cargo metadata` and fails
//! on such an edge), parses inputs itself, keeps its own arithmetic and
//! renders its own lines. A defect in the engine's operators, encodings or
//! rendering therefore cannot hide by being repeated here, and agreement
//! between two engine builds is never taken for correctness.
//!
//! ```no_run
//! use clink_reference::example::{compute, ReferenceParams};
//! let expected = compute("input".as_ref(), ReferenceParams::default())?;
//! println!("{} window rows, {} idle rows", expected.windows.len(), expected.idle.len());
//! # Ok::<(), clink_reference::ReferenceError>(())
//! ```

pub mod example;
pub mod output;
pub mod records;
pub mod upgrade;

use std::path::PathBuf;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum ReferenceError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{at}: {what}")]
    Input { at: String, what: String },
}
