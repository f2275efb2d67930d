//! `incident-regress`: one captured epoch of a bundle whose artifacts verify,
//! frozen as a regression bundle and run once before it is handed back.

use std::path::Path;

use clink_engine::job::OperatorId;

use crate::bundle::Bundle;
use crate::replay::regression::{emit_bundle, BundleManifest};
use crate::replay::EpochRef;
use crate::verify::replay_checks::load_epoch_from_bundle;
use crate::verify::Status;

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
    let artifacts = crate::verify::artifacts_check(bundle);
    if artifacts.status != Status::Passed {
        return Err(RegressError(format!("bundle.artifacts {}: {}", artifacts.status.as_str(), artifacts.reason)));
    }
    let path = crate::bundle::manifest::capture_path(op, subtask, epoch);
    if !bundle.manifest.epochs.iter().any(|e| e.path == path && e.role == "operator") {
        return Err(RegressError(format!("the bundle holds no captured operator epoch at {path}")));
    }
    let at = EpochRef { operator: op, subtask, epoch };
    let evidence = load_epoch_from_bundle(bundle, &at).map_err(RegressError)?;
    if evidence.spec.type_name.contains("lookup") || evidence.spec.type_name.contains("predict") {
        return Err(RegressError(format!(
            "operator {op} ({}) calls an external system per record; a regression bundle would not be self-contained",
            evidence.spec.type_name
        )));
    }
    emit_bundle(&evidence, out).map_err(|e| RegressError(e.to_string()))
}
