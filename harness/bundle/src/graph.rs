//! What a bundle says the job is: the job graph the selected COMPLETED marker
//! names (recorded with the checkpoints), and the job manifest's graph when
//! the collection caught the job running. Where both are there they must be
//! the same job; a source that is there and does not read is an error, never
//! an absence. Every source is read from the bytes the manifest vouched for.
//! [`Bundle::job_graph_at`] is the graph another completed checkpoint's
//! marker names (a redeploy may have changed the job since).

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

/// Whether two graphs are the same job but for some operators' parallelism.
fn rescale_of(a: &JobGraph, b: &JobGraph) -> bool {
    let without_parallelism = |graph: &JobGraph| {
        let mut doc = redacted(graph);
        for op in doc.get_mut("operators").and_then(|o| o.as_array_mut()).into_iter().flatten() {
            if let Some(op) = op.as_object_mut() {
                op.remove("parallelism");
            }
        }
        doc
    };
    redacted(a) != redacted(b) && without_parallelism(a) == without_parallelism(b)
}

impl Bundle {
    /// The job graph the bundle's evidence names, every source cross-checked.
    pub fn job_graph(&self) -> Result<KnownGraph, GraphProblem> {
        let from_marker = self.marker_graph()?;
        let from_manifest = self.manifest_graph()?;
        match (from_marker, from_manifest) {
            // The job restored from this checkpoint at another parallelism
            // and has not completed a checkpoint since: the checkpoint's own
            // graph is what its state was taken of.
            (Some(a), Some(b)) if rescale_of(&a, &b) && self.restored_from_selected() => Ok(KnownGraph {
                graph: a,
                source: "the marker's job graph; the job manifest's runs the same job at another parallelism (a restore at another parallelism that completed no checkpoint yet)".into(),
            }),
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

    /// The job graph completed checkpoint `checkpoint`'s marker names. For
    /// the selected checkpoint it is [`Bundle::job_graph`], cross-checked with
    /// the job manifest's; another checkpoint's may be an earlier deploy's,
    /// so it is its marker's alone, and a marker naming none (version 1)
    /// leaves it absent.
    pub fn job_graph_at(&self, checkpoint: u64) -> Result<KnownGraph, GraphProblem> {
        if checkpoint == self.manifest.selection.checkpoint {
            return self.job_graph();
        }
        match self.graph_of_marker(checkpoint)? {
            Some(graph) => Ok(KnownGraph { graph, source: format!("the job graph COMPLETED-{checkpoint} names") }),
            None => Err(GraphProblem::Absent(format!(
                "COMPLETED-{checkpoint} names no job graph (a version 1 marker), and the job manifest's is the selected checkpoint's"
            ))),
        }
    }

    /// Whether the RESTORED record (vouched bytes) restores from the selected
    /// checkpoint: the only way a running job's graph can differ from it.
    fn restored_from_selected(&self) -> bool {
        let job = self.job_id();
        let path = format!("checkpoint/_jobs/{job}/RESTORED");
        let Ok(bytes) = self.read_vouched(&path, clink_engine::checkpoint::markers::MAX_MARKER_BYTES) else {
            return false;
        };
        clink_engine::checkpoint::markers::parse_restored_bytes(&self.root.join(&path), &bytes, job)
            .is_ok_and(|r| r.restored_from == self.manifest.selection.checkpoint)
    }

    fn marker_graph(&self) -> Result<Option<JobGraph>, GraphProblem> {
        self.graph_of_marker(self.manifest.selection.checkpoint)
    }

    /// The job graph COMPLETED-`checkpoint` names, read from vouched bytes and
    /// checked against the hash the marker names; `None` for a version 1
    /// marker, which names none.
    pub fn graph_of_marker(&self, checkpoint: u64) -> Result<Option<JobGraph>, GraphProblem> {
        let marker = self
            .completed_marker(checkpoint)
            .map_err(|e| GraphProblem::Broken(format!("COMPLETED-{checkpoint} does not read: {e}")))?;
        let Some(named) = marker.graph else { return Ok(None) };
        let bytes = self.graph_bytes(&named).map_err(|e| GraphProblem::Broken(format!("the job graph: {e}")))?;
        let text = String::from_utf8(bytes)
            .map_err(|_| GraphProblem::Broken(format!("the job graph {} is not UTF-8", named.file)))?;
        parse_job(&text).map(Some).map_err(|e| GraphProblem::Broken(format!("the job graph {}: {e}", named.file)))
    }

    fn manifest_graph(&self) -> Result<Option<JobGraph>, GraphProblem> {
        const PATH: &str = "job/manifest.json";
        if self.artifact(PATH).is_none() {
            return Ok(None);
        }
        let bytes = self
            .read_vouched(PATH, clink_engine::job_manifest::MAX_MANIFEST_BYTES)
            .map_err(|e| GraphProblem::Broken(e.to_string()))?;
        let manifest = clink_engine::job_manifest::parse(&self.root.join(PATH), &bytes)
            .map_err(|e| GraphProblem::Broken(format!("{PATH}: {e}")))?;
        parse_job(&manifest.graph.to_string())
            .map(Some)
            .map_err(|e| GraphProblem::Broken(format!("{PATH}: its graph: {e}")))
    }
}

impl Bundle {
    /// Whether every captured epoch is labelled as what the job graph says
    /// its operator is: a sink's recorded input (`sink`) or an operator's
    /// events (`operator`). The label decides which checks read an epoch, so
    /// one that contradicts the graph would move evidence out of a check:
    /// `Err` names the first.
    pub fn check_epoch_roles(&self, graph: Option<&JobGraph>) -> Result<(), String> {
        for (i, e) in self.manifest.epochs.iter().enumerate() {
            let op = e.operator_id();
            let (type_name, kind) = match graph {
                Some(graph) => {
                    let Some(planned) = graph.operator(op) else {
                        return Err(format!("epochs[{i}] ({}): the job graph has no operator {op}", e.path));
                    };
                    (planned.spec.type_name.clone(), Some(planned.spec.descriptor.kind()))
                }
                // No graph: the captured op.json says what the operator is.
                None => match self.op_spec(op, e.subtask) {
                    Ok(spec) => {
                        let kind = clink_engine::registry::kind_of(&spec.type_name);
                        (spec.type_name, kind)
                    }
                    Err(why) => {
                        return Err(format!("epochs[{i}] ({}): its op.json says what the operator is: {why}", e.path))
                    }
                },
            };
            let Some(kind) = kind else { continue };
            let is_sink = kind == clink_engine::operators::OperatorKind::Sink;
            let label = if is_sink { "sink" } else { "operator" };
            if e.role != label {
                return Err(format!(
                    "epochs[{i}] ({}) is labelled {:?}, but operator {op} is a {} ({type_name})",
                    e.path,
                    e.role,
                    if is_sink { "sink" } else { "transform" },
                ));
            }
        }
        Ok(())
    }
}
