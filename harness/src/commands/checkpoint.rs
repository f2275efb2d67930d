//! `clink checkpoint export|verify`: checkpoint datasets
//! (`clink_engine::checkpoint::dataset`).

use std::path::PathBuf;

use clap::{Args, Subcommand};
use clink_basics::exit::Exit;
use clink_engine::checkpoint::dataset::{self, Dataset, Which};
use clink_engine::checkpoint::CheckpointLayout;
use serde_json::json;

use super::Output;

/// Export or verify a checkpoint dataset (one completed checkpoint with a digest index).
#[derive(Args, Debug)]
pub struct CheckpointArgs {
    #[command(subcommand)]
    command: CheckpointCommand,
}

#[derive(Subcommand, Debug)]
enum CheckpointCommand {
    Export(ExportArgs),
    Verify(VerifyArgs),
}

/// Export one completed checkpoint of a job as a dataset.
///
/// Copies the checkpoint's marker, job graph, snapshots and sidecars (each
/// snapshot verified against its sidecar) into a new directory with an index
/// (dataset.json: every file's size and SHA-256), published with one rename.
/// Prints the dataset's digest: the SHA-256 of its index. The job may be
/// running. Exit 0 exported; 2 refused (no such checkpoint, a damaged
/// snapshot, an existing --out).
#[derive(Args, Debug)]
struct ExportArgs {
    /// The job's checkpoint directory.
    #[arg(long, value_name = "DIR")]
    checkpoint_dir: PathBuf,
    /// The job's id.
    #[arg(long, value_name = "ID", value_parser = super::decimal_u64)]
    job_id: u64,
    /// A checkpoint id with a COMPLETED marker, or `latest`.
    #[arg(long, value_name = "ID|latest", value_parser = which)]
    checkpoint: Which,
    /// The dataset's directory (must not exist).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

/// Verify a checkpoint dataset.
///
/// Its digest (when --digest is given), every file its index lists (size
/// and SHA-256), no file it does not list, no link, the marker naming the
/// index's job and checkpoint, and every snapshot against its sidecar.
/// Exit 0 verified; 1 it does not verify; 2 bad usage.
#[derive(Args, Debug)]
struct VerifyArgs {
    /// The dataset's directory.
    #[arg(long, value_name = "DIR")]
    dataset: PathBuf,
    /// The digest the dataset must have (the SHA-256 of its index).
    #[arg(long, value_name = "SHA256")]
    digest: Option<String>,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

fn which(text: &str) -> Result<Which, String> {
    Which::parse(text).ok_or_else(|| format!("{text:?} is neither a checkpoint id nor `latest`"))
}

pub fn main(args: CheckpointArgs) -> Exit {
    match args.command {
        CheckpointCommand::Export(a) => export(a),
        CheckpointCommand::Verify(a) => verify(a),
    }
}

fn summary(d: &Dataset) -> serde_json::Value {
    json!({
        "format": "clink-checkpoint-dataset-summary",
        "version": 1,
        "dataset": d.dir.display().to_string(),
        "digest": d.digest,
        "job": d.index.job,
        "checkpoint": d.index.checkpoint,
        "kind": d.index.kind,
        "participants": d.index.participants.len(),
        "files": d.index.files.len(),
        "bytes": d.index.files.iter().map(|f| f.size).sum::<u64>(),
        "exported_by": d.index.exported_by,
    })
}

fn export(args: ExportArgs) -> Exit {
    let out = Output::new("checkpoint export", args.json);
    let layout = CheckpointLayout::new(&args.checkpoint_dir, args.job_id);
    let checkpoint = match dataset::resolve(&layout, args.checkpoint) {
        Ok(c) => c,
        Err(e) => return out.refuse(e),
    };
    let by = format!("clink {}", clink_engine::defects::build_description());
    match dataset::export(&layout, checkpoint, &args.out, &by) {
        Ok(d) => out.report(
            summary(&d),
            || format!("checkpoint {checkpoint} of job {} exported to {}\n{}", args.job_id, d.dir.display(), d.digest),
            Exit::Passed,
        ),
        Err(e) => out.refuse(e),
    }
}

fn verify(args: VerifyArgs) -> Exit {
    let out = Output::new("checkpoint verify", args.json);
    if let Some(d) = &args.digest {
        if !clink_basics::digest::is_sha256_hex(d) {
            return out.refuse(format!("--digest {d:?} is not a SHA-256 in lowercase hex"));
        }
    }
    match dataset::verify(&args.dataset, args.digest.as_deref()) {
        Ok(d) => out.report(
            summary(&d),
            || format!("{}: verified (checkpoint {}, digest {})", d.dir.display(), d.index.checkpoint, d.digest),
            Exit::Passed,
        ),
        Err(e) => out.stop(Exit::Failed, format!("{}: does not verify: {e}", args.dataset.display())),
    }
}
