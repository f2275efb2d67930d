//! The path rules of a bundle: every artifact sits in an evidence directory on
//! a plain relative path, and nothing on the path is a link.

use std::path::{Path, PathBuf};

use clink_basics::ids::{parse_decimal_u64, OperatorId};
use clink_engine::checkpoint::graph::parse_graph_file_name;
use clink_engine::checkpoint::layout;

/// The directories evidence may sit in.
pub const EVIDENCE_DIRS: [&str; 4] = ["checkpoint", "capture", "traces", "job"];

/// A path that breaks the rules, and which rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PathRuleError(pub String);

/// Checks a manifest path's form: relative, `/`-separated, no empty, `.` or
/// `..` component, no backslash or NUL, under an evidence directory.
pub fn check_form(path: &str) -> Result<(), PathRuleError> {
    if path.is_empty() {
        return Err(PathRuleError("the path is empty".into()));
    }
    if path.starts_with('/') {
        return Err(PathRuleError(format!("{path:?} is absolute")));
    }
    if path.contains('\\') {
        return Err(PathRuleError(format!("{path:?} contains a backslash")));
    }
    if path.contains('\0') {
        return Err(PathRuleError(format!("{path:?} contains a NUL")));
    }
    for component in path.split('/') {
        match component {
            "" => return Err(PathRuleError(format!("{path:?} has an empty component"))),
            "." | ".." => return Err(PathRuleError(format!("{path:?} has a {component:?} component"))),
            _ => {}
        }
    }
    let first = path.split('/').next().unwrap_or("");
    if !EVIDENCE_DIRS.contains(&first) || !path.contains('/') {
        return Err(PathRuleError(format!(
            "{path:?} is not inside an evidence directory ({})",
            EVIDENCE_DIRS.join(", ")
        )));
    }
    Ok(())
}

/// Whether any existing component of `root/path` is a symbolic link.
/// Components that do not exist are not links (a missing file is reported by
/// the artifact check, not here); a component that cannot be examined is
/// named as one, since nothing shows it is not.
pub fn link_on_path(root: &Path, path: &str) -> Option<PathBuf> {
    let mut at = root.to_path_buf();
    for component in path.split('/') {
        at.push(component);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => return Some(at),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(_) => return Some(at),
        }
    }
    None
}

/// Joins a checked manifest path to the bundle root.
pub fn resolve(root: &Path, path: &str) -> PathBuf {
    path.split('/').fold(root.to_path_buf(), |at, c| at.join(c))
}

/// What a bundle path is, read from the path alone: the engine's layout
/// under `checkpoint/` and `capture/`, the collector's under `traces/` and
/// `job/`. An artifact's role is a label; its kind is what the path says, and
/// the reader requires the two to agree, so relabelling a file cannot move it
/// out of the checks that read its kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArtifactKind {
    CompletedMarker {
        job: u64,
        checkpoint: u64,
    },
    ConfirmedMarker {
        job: u64,
        checkpoint: u64,
    },
    RestoredRecord {
        job: u64,
    },
    /// `checkpoint/_jobs/<job>/LINEAGE`: the directory's lineage id.
    LineageRecord {
        job: u64,
    },
    /// `checkpoint/_jobs/<job>/RUN-<incarnation>`: one run's record of itself.
    RunRecord {
        job: u64,
        incarnation: u64,
    },
    /// `checkpoint/_jobs/<job>/IMPORTED`: the checkpoint a run imported from
    /// a dataset, whose CONFIRMED marker it vouches for.
    ImportedRecord {
        job: u64,
    },
    /// `checkpoint/_jobs/<job>/receipts/<participant>/receipt-<c>`: a
    /// commit-confirmed sink's commit receipt.
    CommitReceipt {
        job: u64,
        participant: String,
        checkpoint: u64,
    },
    /// `checkpoint/_jobs/<job>/unresolved/<participant>/unresolved-<c>`: a
    /// handle the in-doubt walk left for the sink's open.
    UnresolvedMarker {
        job: u64,
        participant: String,
        checkpoint: u64,
    },
    JobGraph {
        job: u64,
        sha256: String,
    },
    Snapshot {
        job: u64,
        generation: u32,
        participant: String,
        checkpoint: u64,
    },
    SnapshotMeta {
        job: u64,
        generation: u32,
        participant: String,
        checkpoint: u64,
    },
    OpSpec {
        operator: OperatorId,
        subtask: u32,
    },
    Capture {
        operator: OperatorId,
        subtask: u32,
        epoch: u64,
    },
    SinkEvidence {
        operator: OperatorId,
        subtask: u32,
        epoch: u64,
    },
    /// `traces/<role>-<pid>-<start>.ndjson`, directly under `traces/`.
    Trace {
        file: String,
    },
    JobManifest,
}

impl ArtifactKind {
    /// The manifest roles an artifact of this kind may carry. A snapshot is
    /// collected as the selected checkpoint's (`snapshot`) or as one that
    /// bounds a sink interval or starts an epoch (`interval_state`); either
    /// way it is the same file and read by the same checks.
    pub fn roles(&self) -> &'static [&'static str] {
        match self {
            ArtifactKind::CompletedMarker { .. } => &["completed_marker"],
            ArtifactKind::ConfirmedMarker { .. } => &["confirmed_marker"],
            ArtifactKind::RestoredRecord { .. } => &["restored_record"],
            ArtifactKind::LineageRecord { .. } => &["lineage_record"],
            ArtifactKind::RunRecord { .. } => &["run_record"],
            ArtifactKind::ImportedRecord { .. } => &["imported_record"],
            ArtifactKind::CommitReceipt { .. } => &["commit_receipt"],
            ArtifactKind::UnresolvedMarker { .. } => &["unresolved_marker"],
            ArtifactKind::JobGraph { .. } => &["job_graph"],
            ArtifactKind::Snapshot { .. } => &["snapshot", "interval_state"],
            ArtifactKind::SnapshotMeta { .. } => &["snapshot_meta", "interval_state"],
            ArtifactKind::OpSpec { .. } => &["op_spec"],
            ArtifactKind::Capture { .. } => &["capture"],
            ArtifactKind::SinkEvidence { .. } => &["sink_evidence"],
            ArtifactKind::Trace { .. } => &["trace"],
            ArtifactKind::JobManifest => &["job_manifest"],
        }
    }

    /// The job the path names, where it names one.
    pub fn job(&self) -> Option<u64> {
        match self {
            ArtifactKind::CompletedMarker { job, .. }
            | ArtifactKind::ConfirmedMarker { job, .. }
            | ArtifactKind::RestoredRecord { job }
            | ArtifactKind::LineageRecord { job }
            | ArtifactKind::RunRecord { job, .. }
            | ArtifactKind::ImportedRecord { job }
            | ArtifactKind::CommitReceipt { job, .. }
            | ArtifactKind::UnresolvedMarker { job, .. }
            | ArtifactKind::JobGraph { job, .. }
            | ArtifactKind::Snapshot { job, .. }
            | ArtifactKind::SnapshotMeta { job, .. } => Some(*job),
            _ => None,
        }
    }
}

/// The kind of a bundle path, or `None` for a path no collector writes.
/// Every number in a path must be canonical decimal text, so one file has
/// one name.
pub fn kind_of(path: &str) -> Option<ArtifactKind> {
    let parts: Vec<&str> = path.split('/').collect();
    match parts.as_slice() {
        ["checkpoint", "_jobs", job, name] => {
            let job = parse_decimal_u64(job)?;
            if let Some(checkpoint) = layout::parse_completed_marker_name(name) {
                Some(ArtifactKind::CompletedMarker { job, checkpoint })
            } else if let Some(checkpoint) = layout::parse_confirmed_marker_name(name) {
                Some(ArtifactKind::ConfirmedMarker { job, checkpoint })
            } else if *name == layout::RESTORED_NAME {
                Some(ArtifactKind::RestoredRecord { job })
            } else if *name == layout::IMPORTED_NAME {
                Some(ArtifactKind::ImportedRecord { job })
            } else if *name == clink_engine::checkpoint::lineage::LINEAGE_NAME {
                Some(ArtifactKind::LineageRecord { job })
            } else if let Some(incarnation) = clink_engine::checkpoint::lineage::parse_run_record_name(name) {
                Some(ArtifactKind::RunRecord { job, incarnation })
            } else {
                let sha256 = parse_graph_file_name(name)?.to_string();
                Some(ArtifactKind::JobGraph { job, sha256 })
            }
        }
        ["checkpoint", "_jobs", job, dir @ ("receipts" | "unresolved"), participant, name] => {
            let job = parse_decimal_u64(job)?;
            let (op, subtask) = layout::parse_participant_name(participant)?;
            if layout::participant_name(op, subtask) != *participant {
                return None;
            }
            let participant = participant.to_string();
            let prefix = if *dir == "receipts" { layout::RECEIPT_PREFIX } else { layout::UNRESOLVED_PREFIX };
            let checkpoint = parse_decimal_u64(name.strip_prefix(prefix)?).filter(|&c| c > 0)?;
            Some(match *dir {
                "receipts" => ArtifactKind::CommitReceipt { job, participant, checkpoint },
                _ => ArtifactKind::UnresolvedMarker { job, participant, checkpoint },
            })
        }
        ["checkpoint", "_state", job, generation, participant, name] => {
            let job = parse_decimal_u64(job)?;
            let generation = u32::try_from(parse_decimal_u64(generation.strip_prefix('v')?)?).ok()?;
            let (op, subtask) = layout::parse_participant_name(participant)?;
            if layout::participant_name(op, subtask) != *participant {
                return None;
            }
            let participant = participant.to_string();
            match name.strip_suffix(".meta") {
                Some(snap) => {
                    let checkpoint = layout::parse_snapshot_name(snap)?;
                    Some(ArtifactKind::SnapshotMeta { job, generation, participant, checkpoint })
                }
                None => {
                    let checkpoint = layout::parse_snapshot_name(name)?;
                    Some(ArtifactKind::Snapshot { job, generation, participant, checkpoint })
                }
            }
        }
        ["capture", op, subtask, name] => {
            let operator = OperatorId::parse(op.strip_prefix("op-")?)?;
            let subtask = u32::try_from(parse_decimal_u64(subtask.strip_prefix("subtask-")?)?).ok()?;
            if format!("op-{operator}") != *op {
                return None;
            }
            if *name == "op.json" {
                return Some(ArtifactKind::OpSpec { operator, subtask });
            }
            if let Some(epoch) = clink_engine::capture::parse_epoch_file_name(name) {
                return Some(ArtifactKind::Capture { operator, subtask, epoch });
            }
            let epoch = parse_decimal_u64(name.strip_prefix("epoch-")?.strip_suffix(".sink.json")?)?;
            Some(ArtifactKind::SinkEvidence { operator, subtask, epoch })
        }
        ["traces", file] => parse_trace_file_name(file).map(|_| ArtifactKind::Trace { file: file.to_string() }),
        ["job", "manifest.json"] => Some(ArtifactKind::JobManifest),
        _ => None,
    }
}

/// The role, pid and start stamp of a trace file name
/// `<coordinator|worker>-<pid>-<start>.ndjson`, each number canonical.
pub fn parse_trace_file_name(name: &str) -> Option<(&str, u64, u64)> {
    let stem = name.strip_suffix(".ndjson")?;
    let mut parts = stem.split('-');
    let (role, pid, start) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || !matches!(role, "coordinator" | "worker") {
        return None;
    }
    Some((role, parse_decimal_u64(pid)?, parse_decimal_u64(start)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_relative_evidence_paths_only() {
        assert!(check_form("checkpoint/_jobs/1/COMPLETED-3").is_ok());
        for bad in [
            "",
            "/etc/passwd",
            "checkpoint/../x",
            "checkpoint/./x",
            "checkpoint//x",
            "checkpoint\\x",
            "checkpoint/x\0",
            "other/x",
            "checkpoint",
            "checkpoint/",
        ] {
            assert!(check_form(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_link_anywhere_on_the_path_is_found() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("capture/real")).unwrap();
        std::fs::write(dir.path().join("capture/real/f"), b"x").unwrap();
        std::os::unix::fs::symlink(dir.path().join("capture/real"), dir.path().join("capture/link")).unwrap();
        assert!(link_on_path(dir.path(), "capture/real/f").is_none());
        assert!(link_on_path(dir.path(), "capture/link/f").is_some());
        assert!(link_on_path(dir.path(), "capture/missing/f").is_none());
    }

    #[test]
    fn a_path_says_what_it_is() {
        let graph = format!("checkpoint/_jobs/1/graph-{}.json", "a".repeat(64));
        let cases: Vec<(&str, ArtifactKind)> = vec![
            ("checkpoint/_jobs/1/COMPLETED-3", ArtifactKind::CompletedMarker { job: 1, checkpoint: 3 }),
            ("checkpoint/_jobs/1/RESTORED", ArtifactKind::RestoredRecord { job: 1 }),
            ("checkpoint/_jobs/1/IMPORTED", ArtifactKind::ImportedRecord { job: 1 }),
            ("checkpoint/_jobs/1/LINEAGE", ArtifactKind::LineageRecord { job: 1 }),
            ("checkpoint/_jobs/1/RUN-2", ArtifactKind::RunRecord { job: 1, incarnation: 2 }),
            (&graph, ArtifactKind::JobGraph { job: 1, sha256: "a".repeat(64) }),
            (
                "checkpoint/_state/1/v1/op-4-0/checkpoint-2.snap.meta",
                ArtifactKind::SnapshotMeta { job: 1, generation: 1, participant: "op-4-0".into(), checkpoint: 2 },
            ),
            (
                "capture/op-3/subtask-1/epoch-7.cap",
                ArtifactKind::Capture { operator: OperatorId(3), subtask: 1, epoch: 7 },
            ),
            (
                "capture/op-3/subtask-1/epoch-7.sink.json",
                ArtifactKind::SinkEvidence { operator: OperatorId(3), subtask: 1, epoch: 7 },
            ),
            ("traces/worker-12-34.ndjson", ArtifactKind::Trace { file: "worker-12-34.ndjson".into() }),
            ("job/manifest.json", ArtifactKind::JobManifest),
            (
                "checkpoint/_jobs/1/receipts/op-4-1/receipt-12",
                ArtifactKind::CommitReceipt { job: 1, participant: "op-4-1".into(), checkpoint: 12 },
            ),
            (
                "checkpoint/_jobs/1/unresolved/op-4-0/unresolved-3",
                ArtifactKind::UnresolvedMarker { job: 1, participant: "op-4-0".into(), checkpoint: 3 },
            ),
        ];
        for (path, kind) in cases {
            assert_eq!(kind_of(path), Some(kind), "{path}");
        }
        for other in [
            "checkpoint/_jobs/01/COMPLETED-3",
            "checkpoint/_jobs/1/COMPLETED-03",
            "checkpoint/_jobs/1/notes.txt",
            "checkpoint/_jobs/1/RUN-0",
            "checkpoint/_jobs/1/RUN-02",
            "checkpoint/_jobs/1/EPOCH",
            "checkpoint/_state/1/v01/op-4-0/checkpoint-2.snap",
            "checkpoint/_state/1/v1/op-04-0/checkpoint-2.snap",
            "capture/op-3/subtask-01/epoch-7.cap",
            "capture/op-3/worker-12-34.ndjson",
            "traces/sub/worker-12-34.ndjson",
            "traces/worker-012-34.ndjson",
            "traces/worker-12-34-copy.ndjson",
            "traces/notes.ndjson",
            "job/other.json",
            "checkpoint/_jobs/1/receipts/op-4-1/receipt-012",
            "checkpoint/_jobs/1/receipts/op-4-1/receipt-0",
            "checkpoint/_jobs/1/receipts/op-04-1/receipt-12",
            "checkpoint/_jobs/1/receipts/op-4-1/unresolved-12",
            "checkpoint/_jobs/1/unresolved/op-4-1/receipt-12",
            "checkpoint/_jobs/1/receipts/receipt-12",
            "checkpoint/_jobs/1/other/op-4-1/receipt-12",
        ] {
            assert_eq!(kind_of(other), None, "{other}");
        }
    }
}
