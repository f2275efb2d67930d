//! What a bundle says the job is: the job graph the selected COMPLETED marker
//! names (recorded with the checkpoints), and the job manifest's graph when
//! the collection caught the job running. Where both are there they must be
//! the same job; a source that is there and does not read is an error, never
//! an absence. [`Bundle::job_graph_at`] reads the graph another completed
//! checkpoint's marker names, every byte vouched for by the manifest.

use clink_engine::checkpoint::graph::{check_graph_bytes, check_graph_name, read_graph, MAX_GRAPH_BYTES};
use clink_engine::checkpoint::markers::{
    check_completed_names, parse_completed_bytes, read_completed, MAX_MARKER_BYTES,
};
use clink_engine::checkpoint::CheckpointLayout;
use clink_engine::job::{parse_job, JobGraph};
use clink_engine::job_manifest::MAX_MANIFEST_BYTES;

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
        self.agreeing(from_marker, from_manifest)
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

    /// The job graph completed checkpoint `checkpoint`'s marker names: the
    /// marker and the graph read through [`Bundle::read_vouched`], the graph
    /// hashed to the name the marker gives. For the selected checkpoint it is
    /// cross-checked with the job manifest's graph as [`Bundle::job_graph`]
    /// does; another checkpoint's may be an earlier deploy's, so a marker
    /// naming none (version 1) leaves it absent.
    pub fn job_graph_at(&self, checkpoint: u64) -> Result<KnownGraph, GraphProblem> {
        let from_marker = self.vouched_marker_graph(checkpoint)?;
        if checkpoint != self.manifest.selection.checkpoint {
            return match from_marker {
                Some(graph) => Ok(KnownGraph { graph, source: format!("the job graph COMPLETED-{checkpoint} names") }),
                None => Err(GraphProblem::Absent(format!(
                    "COMPLETED-{checkpoint} names no job graph (a version 1 marker), and the job manifest's is the selected checkpoint's"
                ))),
            };
        }
        let from_manifest = self.vouched_manifest_graph()?;
        self.agreeing(from_marker, from_manifest)
    }

    fn agreeing(
        &self,
        from_marker: Option<JobGraph>,
        from_manifest: Option<JobGraph>,
    ) -> Result<KnownGraph, GraphProblem> {
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

    fn vouched_marker_graph(&self, checkpoint: u64) -> Result<Option<JobGraph>, GraphProblem> {
        let broken = |why: String| GraphProblem::Broken(why);
        let layout = CheckpointLayout::new(self.checkpoint_dir(), self.job_id());
        let path = layout.completed_marker(checkpoint);
        let bytes = self
            .read_vouched_file(&path, MAX_MARKER_BYTES)
            .map_err(|e| broken(format!("COMPLETED-{checkpoint} does not read: {e}")))?;
        // Errors name files by their bundle paths.
        let named_as =
            |file: &std::path::Path| self.bundle_path(file).map(std::path::PathBuf::from).unwrap_or_default();
        let marker_path = named_as(&path);
        let marker = parse_completed_bytes(&marker_path, &bytes)
            .and_then(|m| check_completed_names(&marker_path, &m, self.job_id(), checkpoint).map(|()| m))
            .map_err(|e| broken(format!("COMPLETED-{checkpoint} does not read: {e}")))?;
        let Some(named) = marker.graph else { return Ok(None) };
        let file = layout.jobs_dir().join(&named.file);
        let graph_path = named_as(&file);
        check_graph_name(&graph_path, &named).map_err(|e| broken(format!("the job graph: {e}")))?;
        let bytes =
            self.read_vouched_file(&file, MAX_GRAPH_BYTES).map_err(|e| broken(format!("the job graph: {e}")))?;
        check_graph_bytes(&graph_path, &named, &bytes).map_err(|e| broken(format!("the job graph: {e}")))?;
        let text =
            String::from_utf8(bytes).map_err(|_| broken(format!("the job graph {} is not UTF-8", named.file)))?;
        parse_job(&text).map(Some).map_err(|e| broken(format!("the job graph {}: {e}", named.file)))
    }

    fn vouched_manifest_graph(&self) -> Result<Option<JobGraph>, GraphProblem> {
        const PATH: &str = "job/manifest.json";
        if self.artifact(PATH).is_none() {
            return Ok(None);
        }
        let broken = |why: String| GraphProblem::Broken(format!("{PATH}: {why}"));
        let bytes = self.read_vouched(PATH, MAX_MANIFEST_BYTES).map_err(|e| broken(e.to_string()))?;
        let manifest =
            clink_engine::job_manifest::parse(&self.root.join(PATH), &bytes).map_err(|e| broken(e.to_string()))?;
        parse_job(&manifest.graph.to_string()).map(Some).map_err(|e| broken(format!("its graph: {e}")))
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
