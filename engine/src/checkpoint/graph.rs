//! The job graph a checkpoint was taken of, stored beside the markers.
//!
//! Every COMPLETED marker (version 2) names the graph file and its SHA-256,
//! so evidence collected long after the job ended still says what each
//! participant was: the collector copies the file the marker names, and the
//! checks decode state and cross-check captures against it. The file is
//! content-addressed (`graph-<sha256>.json`), written durably once before the
//! first checkpoint, and never rewritten.

use std::path::{Path, PathBuf};

use clink_basics::digest::{is_sha256_hex, sha256_hex};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::durable::{create_dir_durably, write_durably};
use super::layout::CheckpointLayout;

const GRAPH_PREFIX: &str = "graph-";
const GRAPH_SUFFIX: &str = ".json";
/// A graph file larger than this is refused unread (the job format's own bound).
pub const MAX_GRAPH_BYTES: u64 = 4 * 1024 * 1024;

/// What a marker says about its job graph.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GraphRef {
    /// The file's name in the job's marker directory.
    pub file: String,
    pub sha256: String,
}

#[derive(Debug, Error)]
pub enum GraphError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {reason}")]
    Invalid { path: PathBuf, reason: String },
}

/// The name of the graph file holding bytes with this SHA-256.
pub fn graph_file_name(sha256: &str) -> String {
    format!("{GRAPH_PREFIX}{sha256}{GRAPH_SUFFIX}")
}

/// The SHA-256 a graph file's name claims, if the name is one.
pub fn parse_graph_file_name(name: &str) -> Option<&str> {
    let sha = name.strip_prefix(GRAPH_PREFIX)?.strip_suffix(GRAPH_SUFFIX)?;
    is_sha256_hex(sha).then_some(sha)
}

/// Writes the job graph durably (once: the name is its hash) and returns what
/// the markers name.
pub fn write_graph(layout: &CheckpointLayout, document: &[u8]) -> Result<GraphRef, GraphError> {
    let dir = layout.jobs_dir();
    let sha256 = sha256_hex(document);
    let file = graph_file_name(&sha256);
    let path = dir.join(&file);
    let io = |source| GraphError::Io { path: path.clone(), source };
    create_dir_durably(&dir).map_err(io)?;
    if !path.is_file() {
        write_durably(&dir, &file, document).map_err(io)?;
    }
    Ok(GraphRef { file, sha256 })
}

/// The graph's bytes, read bounded and checked against what the marker
/// names: a well-formed name, the name's hash, and the content's hash all agree.
pub fn read_graph(layout: &CheckpointLayout, graph: &GraphRef) -> Result<Vec<u8>, GraphError> {
    let path = layout.jobs_dir().join(&graph.file);
    check_graph_name(&path, graph)?;
    let bytes = clink_basics::files::read_bounded(&path, MAX_GRAPH_BYTES)
        .map_err(|source| GraphError::Io { path: path.clone(), source })?;
    check_graph_bytes(&path, graph, &bytes)?;
    Ok(bytes)
}

/// Whether the file a marker names for its graph is the name its hash gives.
pub fn check_graph_name(path: &Path, graph: &GraphRef) -> Result<(), GraphError> {
    if parse_graph_file_name(&graph.file) != Some(graph.sha256.as_str()) {
        return Err(GraphError::Invalid {
            path: path.to_path_buf(),
            reason: format!("the marker names file {:?} for SHA-256 {}", graph.file, graph.sha256),
        });
    }
    Ok(())
}

/// Whether a graph's bytes (read from `path`) hash to what the marker names.
pub fn check_graph_bytes(path: &Path, graph: &GraphRef, bytes: &[u8]) -> Result<(), GraphError> {
    check_graph_name(path, graph)?;
    let digest = sha256_hex(bytes);
    if digest != graph.sha256 || bytes.len() as u64 > MAX_GRAPH_BYTES {
        return Err(GraphError::Invalid {
            path: path.to_path_buf(),
            reason: format!("SHA-256 {digest}, the marker vouches for {}", graph.sha256),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_graph_reads_back_only_as_the_marker_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let layout = CheckpointLayout::new(dir.path(), 7);
        let r = write_graph(&layout, b"{\"format\":\"clink-job\"}").unwrap();
        assert_eq!(read_graph(&layout, &r).unwrap(), b"{\"format\":\"clink-job\"}");
        assert_eq!(write_graph(&layout, b"{\"format\":\"clink-job\"}").unwrap(), r, "written once, by its hash");
        let wrong = GraphRef { file: r.file.clone(), sha256: sha256_hex(b"other") };
        assert!(read_graph(&layout, &wrong).unwrap_err().to_string().contains("names file"));
        std::fs::write(layout.jobs_dir().join(&r.file), b"{}").unwrap();
        assert!(read_graph(&layout, &r).unwrap_err().to_string().contains("vouches for"));
        let escape = GraphRef { file: "../x".into(), sha256: r.sha256.clone() };
        assert!(read_graph(&layout, &escape).is_err());
    }
}
