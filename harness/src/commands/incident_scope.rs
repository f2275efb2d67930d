//! `clink incident-scope`: the scope document a reference computes from.

use std::path::PathBuf;

use clap::Args;
use clink_basics::exit::Exit;
use clink_bundle::read_bundle;
use clink_reconcile::scope_command::{scope_document, Outcome};
use serde_json::json;

use super::{decimal_u64, Output};

/// Write the scope of a completed checkpoint, from the bundle alone.
///
/// The document (format clink-audit-scope) names the job, the sink, the
/// bounding checkpoints, the source's log and each partition's range
/// [from, to), the sink's columns and the comparison's semantics, and its
/// scope_sha256. A record-wise job's scope is version 1 (one interval, or
/// --from-run-start); a windowed job's is its lineage (version 2), or one
/// increment of it with --since (version 3).
///
/// The job graph is the one checkpoint N's marker names, and every artifact
/// is read as the manifest vouched for it and must name the place its path
/// says (job, operator, uid, subtask, epoch).
///
/// Exit 0 the document is written whole; 3 the scope's evidence or source
/// positions are not whole (the document is written, saying what is
/// missing), or the job is not one the audit supports (nothing is written);
/// 2 bad usage or a request the bundle does not fit: --since with
/// --from-run-start, a checkpoint not completed, evidence that changed since
/// the manifest vouched for it or names another job or place.
#[derive(Args, Debug)]
pub struct IncidentScopeArgs {
    /// The bundle directory.
    bundle: PathBuf,
    /// The completed checkpoint to scope.
    #[arg(long, value_name = "N", value_parser = decimal_u64)]
    checkpoint: u64,
    /// A windowed job's increment: from this earlier completed checkpoint of the lineage.
    #[arg(long, value_name = "M", value_parser = decimal_u64)]
    since: Option<u64>,
    /// A scope spanning the run from its start (through restores); not with --since.
    #[arg(long)]
    from_run_start: bool,
    /// Where to write the scope document.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

pub fn main(args: IncidentScopeArgs) -> Exit {
    let out = Output::new("incident-scope", args.json);
    let bundle = match read_bundle(&args.bundle) {
        Ok(b) => b,
        Err(e) => return out.refuse(format!("{}: the bundle is refused: {e}", args.bundle.display())),
    };
    let (doc, exit, problems) = match scope_document(&bundle, args.checkpoint, args.since, args.from_run_start) {
        Outcome::Whole(doc) => (doc, Exit::Passed, Vec::new()),
        Outcome::NotWhole(doc, problems) => (doc, Exit::NotEstablished, problems),
        Outcome::Unsupported(why) => {
            return out.stop(
                Exit::NotEstablished,
                format!("the job is not one the audit supports: {why}; no scope is written"),
            )
        }
        Outcome::Refused(why) => return out.refuse(why),
    };
    let text = match serde_json::to_string_pretty(&doc) {
        Ok(t) => t,
        Err(e) => return out.refuse(e),
    };
    if let Err(e) = write_beside(&args.out, text.as_bytes()) {
        return out.refuse(format!("--out {}: {e}", args.out.display()));
    }
    let sha = doc.get("scope_sha256").cloned().unwrap_or_default();
    let result = json!({
        "format": "clink-command-result",
        "version": 1,
        "command": "incident-scope",
        "result": exit.as_str(),
        "exit_code": exit.code(),
        "out": args.out.display().to_string(),
        "scope_version": doc.get("version"),
        "scope_sha256": sha,
        "incomplete": problems,
    });
    out.report(
        result,
        || {
            let mut text = format!(
                "wrote {} (clink-audit-scope version {}, scope_sha256 {})",
                args.out.display(),
                doc.get("version").cloned().unwrap_or_default(),
                sha.as_str().unwrap_or_default()
            );
            for p in &problems {
                text.push_str(&format!("\nnot whole: {}", clink_basics::text::escape(p)));
            }
            text
        },
        exit,
    )
}

/// Writes a file beside its name and renames it into place.
pub fn write_beside(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut tmp = tempfile::Builder::new().prefix(".clink-").tempfile_in(&dir)?;
    std::io::Write::write_all(&mut tmp, bytes)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
