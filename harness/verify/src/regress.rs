//! `incident-regress`: one captured epoch of a bundle whose artifacts verify,
//! frozen as a regression bundle and run once before it is handed back.

use std::path::Path;

use clink_basics::ids::OperatorId;

use clink_bundle::Bundle;
use clink_replay::bundle::{epoch_entry, load_bundle_epoch, BundleEpochs};
use clink_replay::regression::{emit_bundle, BundleManifest};
use clink_replay::EpochRef;

use crate::Status;

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct RegressError(pub String);

pub fn regress(
    bundle: &Bundle,
    op: OperatorId,
    subtask: u32,
    epoch: u64,
    out: &Path,
) -> Result<BundleManifest, RegressError> {
    let artifacts = crate::artifacts_check(bundle);
    if artifacts.status != Status::Passed {
        return Err(RegressError(format!("bundle.artifacts {}: {}", artifacts.status.as_str(), artifacts.reason)));
    }
    crate::claims_hold(bundle).map_err(|e| RegressError(e.0))?;
    let path = clink_bundle::manifest::capture_path(op, subtask, epoch);
    if !bundle.manifest.epochs.iter().any(|e| e.path == path && e.role == "operator") {
        return Err(RegressError(format!("the bundle holds no captured operator epoch at {path}")));
    }
    let at = EpochRef { operator: op, subtask, epoch };
    let entry = epoch_entry(bundle, &at).map_err(|e| RegressError(e.to_string()))?;
    let graph = match bundle.job_graph() {
        Ok(known) => Some(known.graph),
        Err(clink_bundle::graph::GraphProblem::Absent(_)) => None,
        Err(broken) => return Err(RegressError(format!("the job graph does not hold: {broken}"))),
    };
    let evidence = load_bundle_epoch(bundle, entry, &BundleEpochs::read(bundle), graph.as_ref())
        .map_err(|e| RegressError(e.to_string()))?;
    if clink_replay::bundle::calls_out(&evidence.spec.type_name) {
        return Err(RegressError(format!(
            "operator {op} ({}) calls an external system per record; a regression bundle would not be self-contained",
            evidence.spec.type_name
        )));
    }
    emit_bundle(&evidence, out).map_err(|e| RegressError(e.to_string()))
}
