//! What a bundle says the job is: the job graph the selected COMPLETED marker
//! names (recorded with the checkpoints), and the job manifest's graph when
//! the collection caught the job running. Where both are there they must be
//! the same job; a source that is there and does not read is an error, never
//! an absence.

use clink_engine::checkpoint::graph::read_graph;
use clink_engine::checkpoint::markers::read_completed;
use clink_engine::checkpoint::CheckpointLayout;
use clink_engine::job::{parse_job, JobGraph};

use crate::Bundle;

/// The job graph and where it came from.
#[derive(Debug, Clone)]
pub struct KnownGraph {
    pub graph: JobGraph,
    /// Which evidence said it (the marker's graph file, the job manifest, or both).
    pub source: String,
}

/// Why the bundle says nothing usable about the job graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GraphProblem {
    /// Nothing in the bundle names a graph (a version 1 marker, no job manifest).
    Absent(String),
    /// A graph is named and does not read, or two sources disagree.
    Broken(String),
}

impl std::fmt::Display for GraphProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GraphProblem::Absent(why) | GraphProblem::Broken(why) => f.write_str(why),
        }
    }
}

/// A graph's document as bundles hold it: the collector redacts the job
/// manifest, so both sides are compared redacted.
fn redacted(graph: &JobGraph) -> serde_json::Value {
    let mut doc = graph.to_document();
    clink_basics::redact::redact(&mut doc);
    doc
}

impl Bundle {
    /// The job graph the bundle's evidence names, every source cross-checked.
    pub fn job_graph(&self) -> Result<KnownGraph, GraphProblem> {
        let from_marker = self.marker_graph()?;
        let from_manifest = self.manifest_graph()?;
        match (from_marker, from_manifest) {
            (Some(a), Some(b)) if redacted(&a) != redacted(&b) => Err(GraphProblem::Broken(format!(
                "the job graph COMPLETED-{} names and the job manifest's graph are different jobs",
                self.manifest.selection.checkpoint
            ))),
            (Some(graph), Some(_)) => {
                Ok(KnownGraph { graph, source: "the marker's job graph, the same as the job manifest's".into() })
            }
            (Some(graph), None) => Ok(KnownGraph { graph, source: "the job graph the marker names".into() }),
            (None, Some(graph)) => Ok(KnownGraph { graph, source: "the job manifest's graph".into() }),
            (None, None) => Err(GraphProblem::Absent(
                "the selected marker names no job graph (a version 1 marker) and the bundle holds no job manifest"
                    .into(),
            )),
        }
    }

    fn marker_graph(&self) -> Result<Option<JobGraph>, GraphProblem> {
        let layout = CheckpointLayout::new(self.checkpoint_dir(), self.job_id());
        let checkpoint = self.manifest.selection.checkpoint;
        let marker = read_completed(&layout, checkpoint)
            .map_err(|e| GraphProblem::Broken(format!("the selected marker does not read: {e}")))?;
        let Some(named) = marker.graph else { return Ok(None) };
        let bytes = read_graph(&layout, &named).map_err(|e| GraphProblem::Broken(format!("the job graph: {e}")))?;
        let text = String::from_utf8(bytes)
            .map_err(|_| GraphProblem::Broken(format!("the job graph {} is not UTF-8", named.file)))?;
        parse_job(&text).map(Some).map_err(|e| GraphProblem::Broken(format!("the job graph {}: {e}", named.file)))
    }

    fn manifest_graph(&self) -> Result<Option<JobGraph>, GraphProblem> {
        if self.artifact("job/manifest.json").is_none() {
            return Ok(None);
        }
        let manifest = clink_engine::job_manifest::read(&self.root.join("job/manifest.json"))
            .map_err(|e| GraphProblem::Broken(format!("job/manifest.json: {e}")))?;
        parse_job(&manifest.graph.to_string())
            .map(Some)
            .map_err(|e| GraphProblem::Broken(format!("job/manifest.json: its graph: {e}")))
    }
}
