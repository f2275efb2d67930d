//! `clink capture push|fetch`: captures (with their checkpoint files) or
//! incident bundles in and out of a content-addressed store
//! (`clink_store`). This module says which trees a source is and what its
//! manifest names; the store does the rest.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use clink_basics::exit::Exit;
use clink_engine::capture::{subtask_dir, OpSpecFile, OP_SPEC_NAME};
use clink_engine::checkpoint::CheckpointLayout;
use clink_store::backend::Store;
use clink_store::manifest::{EpochEntry, SourceKind, CAPTURE_ROOT, CHECKPOINT_ROOT};
use clink_store::push::{PushReport, PushRequest};
use clink_store::source::Tree;
use clink_store::{Bounds, StoreError};
use serde_json::json;

use super::{decimal_u64, Output};

/// Move captures between machines through a content-addressed store.
///
/// A store is `file:///DIR` (or a plain directory path) or
/// `s3://BUCKET[/PREFIX]` (endpoint and credentials from the standard AWS
/// variables: AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
/// AWS_REGION, AWS_ALLOW_HTTP=true for a plain-HTTP endpoint). Every file is
/// stored once, as `objects/sha256/<digest>`; each push adds one manifest,
/// `manifests/sha256/<REF>`, written last.
#[derive(Args, Debug)]
pub struct CaptureArgs {
    #[command(subcommand)]
    command: CaptureCommand,
}

#[derive(Subcommand, Debug)]
enum CaptureCommand {
    Push(PushArgs),
    Fetch(FetchArgs),
}

/// How much one push or fetch may move; over either bound it is refused, never cut.
#[derive(Args, Debug)]
struct BoundArgs {
    /// The most files to move.
    #[arg(long, value_name = "N", default_value = "100000", value_parser = decimal_u64)]
    max_files: u64,
    /// The most bytes to move (the files' sizes added up).
    #[arg(long, value_name = "N", default_value = "68719476736", value_parser = decimal_u64)]
    max_bytes: u64,
}

impl BoundArgs {
    fn bounds(&self) -> Bounds {
        Bounds { max_files: self.max_files, max_bytes: self.max_bytes }
    }
}

/// Push a capture (with its checkpoint files) or an incident bundle; print its REF.
///
/// Either --capture-dir and --checkpoint-dir (the flight recorder's directory
/// and the job's checkpoint directory: the whole capture directory is pushed,
/// with the job's markers and snapshots, which are what `clink replay` needs
/// to start each epoch), or --bundle (an incident bundle directory, read and
/// checked by the bundle reader: format, paths, no link). A link or special file in
/// the source is refused. A bundle is pushed only as its manifest vouches for
/// it: a file missing, unlisted, or of another size or SHA-256 refuses the
/// push (exit 2), naming the file, and no REF is written. A file already in
/// the store is not sent again only when the stored bytes hash to its name;
/// the manifest goes last, so a push cut short leaves no REF. The REF (the
/// manifest's SHA-256) is the last line printed. Exit 0 pushed; 2 refused
/// (bad source, a bound exceeded); 3 the store did not answer.
#[derive(Args, Debug)]
struct PushArgs {
    #[command(flatten)]
    source: super::EvidenceArgs,
    /// The store: file:///DIR, DIR, or s3://BUCKET[/PREFIX]. A local store's directory is made if missing.
    store: String,
    #[command(flatten)]
    bounds: BoundArgs,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

/// Fetch what a REF names into a new directory DEST, every object verified.
///
/// Every object is checked against the manifest's size and SHA-256 as it is
/// written, into a temporary directory beside DEST renamed into place at the
/// end. A pushed capture comes back as DEST/capture and DEST/checkpoint (for
/// `clink replay ... --capture-dir DEST/capture --checkpoint-dir
/// DEST/checkpoint --job J`), a bundle as DEST itself. A missing, truncated
/// or altered object, a manifest of another format or version or with a
/// hostile path, or a bound exceeded is refused (exit 2), naming it, and
/// nothing is left at DEST. DEST must not exist. Exit 0 fetched; 2 refused;
/// 3 the store did not answer.
#[derive(Args, Debug)]
struct FetchArgs {
    /// The store: file:///DIR, DIR, or s3://BUCKET[/PREFIX].
    store: String,
    /// The reference `capture push` printed (the manifest's SHA-256).
    reference: String,
    /// The directory to create.
    dest: PathBuf,
    #[command(flatten)]
    bounds: BoundArgs,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

pub fn main(args: CaptureArgs) -> Exit {
    match args.command {
        CaptureCommand::Push(a) => push(a),
        CaptureCommand::Fetch(a) => fetch(a),
    }
}

fn stop(out: &Output, e: StoreError) -> Exit {
    match e {
        StoreError::Unavailable(_) => out.stop(Exit::NotEstablished, e),
        e => out.refuse(e),
    }
}

/// The trees and names of a capture directory and its job's checkpoint files.
fn capture_request(capture_dir: &Path, checkpoint_dir: &Path, job: u64, bounds: Bounds) -> Result<PushRequest, String> {
    let captured = clink_replay::list_captured(capture_dir).map_err(|e| e.to_string())?;
    if captured.is_empty() {
        return Err(format!("{}: no captured epoch (op-<id>/subtask-<s>/epoch-<n>.cap)", capture_dir.display()));
    }
    let mut subtasks = BTreeSet::new();
    let mut epochs = Vec::new();
    for (at, _) in &captured {
        subtasks.insert((at.operator, at.subtask));
        epochs.push(EpochEntry { operator: at.operator.to_string(), subtask: at.subtask, epoch: at.epoch });
    }
    for (op, subtask) in &subtasks {
        let path = subtask_dir(capture_dir, *op, *subtask).join(OP_SPEC_NAME);
        let spec = OpSpecFile::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        if spec.job_id() != job {
            return Err(format!("{}: names job {}, not --job {job}", path.display(), spec.job));
        }
    }
    let layout = CheckpointLayout::new(checkpoint_dir, job);
    let relative = |p: &Path| -> Result<String, String> {
        let rel = p.strip_prefix(checkpoint_dir).map_err(|e| e.to_string())?;
        rel.to_str().map(str::to_string).ok_or_else(|| format!("{}: not UTF-8", p.display()))
    };
    let mut trees = vec![Tree { root: capture_dir.to_path_buf(), sub: String::new(), prefix: CAPTURE_ROOT.into() }];
    let jobs_dir = layout.jobs_dir();
    if !jobs_dir.is_dir() {
        return Err(format!("{}: no checkpoint of job {job} (no {})", checkpoint_dir.display(), jobs_dir.display()));
    }
    trees.push(Tree { root: checkpoint_dir.to_path_buf(), sub: relative(&jobs_dir)?, prefix: CHECKPOINT_ROOT.into() });
    if layout.state_root().is_dir() {
        let sub = relative(&layout.state_root())?;
        trees.push(Tree { root: checkpoint_dir.to_path_buf(), sub, prefix: CHECKPOINT_ROOT.into() });
    }
    let operators = subtasks.iter().map(|(op, _)| op.0).collect();
    Ok(PushRequest { source: SourceKind::Capture, job, operators, epochs, trees, bounds, vouched: None })
}

/// The tree and names of an incident bundle.
fn bundle_request(dir: &Path, bounds: Bounds) -> Result<PushRequest, String> {
    let bundle = clink_bundle::read_bundle(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let epochs: Vec<EpochEntry> = bundle
        .manifest
        .epochs
        .iter()
        .map(|e| EpochEntry { operator: e.operator.clone(), subtask: e.subtask, epoch: e.epoch })
        .collect();
    let operators = bundle.manifest.epochs.iter().map(|e| e.operator_id().0).collect();
    let tree = Tree { root: dir.to_path_buf(), sub: String::new(), prefix: String::new() };
    // Only what the bundle's manifest vouches for is pushed, each file held
    // to its size and SHA-256 as it is read for the push.
    let vouched = bundle.manifest.artifacts.iter().map(|a| (a.path.clone(), (a.size, a.sha256.clone()))).collect();
    Ok(PushRequest {
        source: SourceKind::Bundle,
        job: bundle.job_id(),
        operators,
        epochs,
        trees: vec![tree],
        bounds,
        vouched: Some(vouched),
    })
}

fn push(args: PushArgs) -> Exit {
    let out = Output::new("capture push", args.json);
    let bounds = args.bounds.bounds();
    let source = &args.source;
    let request = match (&source.capture_dir, &source.checkpoint_dir, &source.bundle) {
        (Some(c), Some(k), None) => capture_request(c, k, source.job, bounds),
        (None, None, Some(b)) => bundle_request(b, bounds),
        _ => return out.refuse("give either --capture-dir and --checkpoint-dir, or --bundle"),
    };
    let request = match request {
        Ok(r) => r,
        Err(e) => return out.refuse(e),
    };
    let store = match Store::open(&args.store, true) {
        Ok(s) => s,
        Err(e) => return stop(&out, e),
    };
    match clink_store::push::push(&store, &request) {
        Ok(r) => out.report(push_doc(&store, &request, &r), || push_text(&store, &r), Exit::Passed),
        Err(e) => stop(&out, e),
    }
}

fn push_doc(store: &Store, request: &PushRequest, r: &PushReport) -> serde_json::Value {
    json!({
        "format": "clink-capture-push", "version": 1, "store": store.url(), "reference": r.reference,
        "source": request.source.as_str(), "job": request.job.to_string(), "epochs": request.epochs.len(),
        "files": r.files, "bytes": r.bytes, "objects_written": r.objects_written, "bytes_written": r.bytes_written,
        "objects_present": r.objects_present, "manifest_written": r.manifest_written, "exit_code": 0,
    })
}

fn push_text(store: &Store, r: &PushReport) -> String {
    format!(
        "capture push: {} files, {} bytes to {}: {} new objects ({} bytes), {} already present; {}\n{}",
        r.files,
        r.bytes,
        store.url(),
        r.objects_written,
        r.bytes_written,
        r.objects_present,
        if r.manifest_written { "manifest written" } else { "the same manifest was already there" },
        r.reference
    )
}

fn fetch(args: FetchArgs) -> Exit {
    let out = Output::new("capture fetch", args.json);
    let store = match Store::open(&args.store, false) {
        Ok(s) => s,
        Err(e) => return stop(&out, e),
    };
    let r = match clink_store::fetch::fetch(&store, &args.reference, &args.dest, args.bounds.bounds()) {
        Ok(r) => r,
        Err(e) => return stop(&out, e),
    };
    let m = &r.manifest;
    let dest = r.dest.display().to_string();
    let doc = json!({
        "format": "clink-capture-fetch", "version": 1, "store": store.url(), "reference": args.reference,
        "dest": dest, "source": m.source.as_str(), "job": m.job, "operators": m.operators,
        "epochs": m.epochs.len(), "files": r.files, "bytes": r.bytes, "exit_code": 0,
    });
    let text = || {
        let mut text = format!(
            "capture fetch: {} into {dest}: {} files, {} bytes, every one verified ({} of job {})",
            args.reference,
            r.files,
            r.bytes,
            m.source.as_str(),
            m.job
        );
        if m.source == SourceKind::Capture {
            text.push_str(&format!(
                "\nreplay it: clink replay sweep --capture-dir {dest}/{CAPTURE_ROOT} --checkpoint-dir {dest}/{CHECKPOINT_ROOT} --job {}",
                m.job
            ));
        }
        text
    };
    out.report(doc, text, Exit::Passed)
}
