//! What the collector learns about the job itself: its manifest from the HA
//! directory while it runs, and the sinks' delivery guarantees from its graph.

use std::fs;

use serde_json::Value as Json;

use clink_engine::job_manifest;

use crate::manifest::{Note, SinkDelivery};

use super::copy::Builder;
use super::refusal::{refusal, Refusal, RefusalKind};

pub(super) fn read_job_manifest(b: &mut Builder<'_>) -> Result<Option<job_manifest::JobManifest>, Refusal> {
    let Some(ha) = &b.options.ha_dir else {
        b.absent.push(Note { what: "job/manifest.json".into(), why: "no --ha-dir".into() });
        return Ok(None);
    };
    let dir = job_manifest::job_dir(ha, b.options.job);
    let path = dir.join(job_manifest::MANIFEST_NAME);
    if !path.exists() {
        let status = fs::read_to_string(dir.join(job_manifest::STATUS_NAME))
            .ok()
            .and_then(|t| serde_json::from_str::<Json>(&t).ok())
            .and_then(|v| v["terminal"].as_str().map(str::to_string));
        let why = match status {
            Some(s) => format!("the job ended ({s}); its manifest is removed at the end"),
            None => format!("{} holds no manifest of job {}", ha.display(), b.options.job),
        };
        b.absent.push(Note { what: "job/manifest.json".into(), why });
        return Ok(None);
    }
    job_manifest::read(&path).map(Some).map_err(|e| refusal(RefusalKind::Other, e))
}

/// The sinks and the guarantee each gives, from the job's graph (or, without
/// it, from the captured sinks' specs).
pub(super) fn delivery(
    b: &mut Builder<'_>,
    manifest: Option<&job_manifest::JobManifest>,
) -> Result<Vec<SinkDelivery>, Refusal> {
    let Some(m) = manifest else {
        b.absent.push(Note { what: "delivery report".into(), why: "no job manifest to read the sinks from".into() });
        return Ok(Vec::new());
    };
    let graph = clink_engine::job::parse_job(&m.graph.to_string())
        .map_err(|e| refusal(RefusalKind::Other, format!("the job manifest's graph: {e}")))?;
    Ok(graph
        .operators
        .iter()
        .filter_map(|o| {
            // The sink says its family; the type's name says nothing.
            let family = o.spec.descriptor.sink_family()?;
            Some(SinkDelivery {
                operator: o.spec.id.to_string(),
                uid: o.spec.uid.clone(),
                type_name: o.spec.type_name.clone(),
                family: family.as_str().into(),
                guarantee: family.guarantee().into(),
            })
        })
        .collect())
}
