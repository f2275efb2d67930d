//! What the collector learns about the job itself: the job graph its markers
//! name (recorded with the checkpoints, so it is there even after the job
//! ended), its manifest in the HA directory while it runs, which restore rule
//! applies, and the sinks' delivery guarantees.

use std::collections::BTreeMap;
use std::io;

use clink_engine::checkpoint::graph::{read_graph, GraphRef};
use clink_engine::checkpoint::layout::parse_completed_marker_name;
use clink_engine::checkpoint::markers::{read_completed, CompletedMarker, MarkerError};
use clink_engine::checkpoint::CheckpointLayout;
use clink_engine::job::{parse_job, JobGraph};
use clink_engine::job_manifest;
use serde_json::Value as Json;

use crate::manifest::{Note, SinkDelivery};

use super::copy::{Builder, Stamp};
use super::refusal::{refusal, Refusal, RefusalKind};

pub(super) fn read_job_manifest(b: &mut Builder<'_>) -> Result<Option<job_manifest::JobManifest>, Refusal> {
    let Some(ha) = &b.options.ha_dir else {
        b.absent.push(Note { what: "job/manifest.json".into(), why: "no --ha-dir".into() });
        return Ok(None);
    };
    let dir = job_manifest::job_dir(ha, b.options.job);
    let path = dir.join(job_manifest::MANIFEST_NAME);
    if std::fs::symlink_metadata(&path).is_err() {
        let status = clink_basics::files::read_bounded(&dir.join(job_manifest::STATUS_NAME), 1 << 20)
            .ok()
            .and_then(|t| serde_json::from_slice::<Json>(&t).ok())
            .and_then(|v| v["terminal"].as_str().map(str::to_string));
        let why = match status {
            Some(s) => format!("the job ended ({s}); its manifest is removed at the end"),
            None => format!("{} holds no manifest of job {}", ha.display(), b.options.job),
        };
        b.absent.push(Note { what: "job/manifest.json".into(), why });
        return Ok(None);
    }
    job_manifest::read(&path).map(Some).map_err(|e| refusal(RefusalKind::Other, e.to_string()))
}

/// Reads a marker the collection relies on: one that vanished was pruned by
/// the running job (`missing`, which the caller may turn into `changed`); one
/// that is there and does not read is `other`, never retried.
pub(super) fn read_marker(layout: &CheckpointLayout, checkpoint: u64) -> Result<CompletedMarker, Refusal> {
    read_completed(layout, checkpoint).map_err(|e| match &e {
        MarkerError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound => {
            refusal(RefusalKind::Missing, e.to_string())
        }
        _ => refusal(RefusalKind::Other, format!("the selected marker does not read: {e}")),
    })
}

/// The job graph a marker names, read and planned; `None` for a version 1
/// marker, which names none.
pub(super) fn marker_graph(layout: &CheckpointLayout, marker: &CompletedMarker) -> Result<Option<JobGraph>, Refusal> {
    let Some(graph) = &marker.graph else { return Ok(None) };
    planned(layout, graph).map(Some)
}

fn planned(layout: &CheckpointLayout, graph: &GraphRef) -> Result<JobGraph, Refusal> {
    let bytes = read_graph(layout, graph).map_err(|e| refusal(RefusalKind::Other, format!("the job graph: {e}")))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| refusal(RefusalKind::Other, format!("the job graph {} is not UTF-8", graph.file)))?;
    parse_job(&text).map_err(|e| refusal(RefusalKind::Other, format!("the job graph {}: {e}", graph.file)))
}

/// The graph the newest COMPLETED marker names: what the job is now.
pub(super) fn newest_graph(
    layout: &CheckpointLayout,
    markers: &BTreeMap<String, Stamp>,
) -> Result<Option<JobGraph>, Refusal> {
    let Some(newest) = markers.keys().filter_map(|n| parse_completed_marker_name(n)).max() else {
        return Ok(None);
    };
    marker_graph(layout, &read_marker(layout, newest)?)
}

/// Whether the job's sinks need commit confirmation, from every source that
/// says (the rule is [`crate::derive::family`]): when two say different
/// things the collection is refused, since which restore rule applies would
/// be a guess.
pub(super) fn commit_confirmation(
    graph: Option<&JobGraph>,
    manifest: Option<&job_manifest::JobManifest>,
    option: Option<bool>,
) -> Result<Option<bool>, Refusal> {
    crate::derive::family(graph, manifest, option.map(|o| ("--commit-confirmation", o)))
        .map_err(|why| refusal(RefusalKind::Other, format!("{why}: which restore rule applies is unknown")))
}

/// The sinks and the guarantee each gives, from the job's graph.
pub(super) fn delivery(b: &mut Builder<'_>, graph: Option<&JobGraph>) -> Vec<SinkDelivery> {
    let Some(graph) = graph else {
        b.absent.push(Note { what: "delivery report".into(), why: "no job graph to read the sinks from".into() });
        return Vec::new();
    };
    crate::derive::delivery(graph)
}
