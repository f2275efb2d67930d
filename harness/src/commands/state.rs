//! `clink state-cat`, `clink state-diff` and `clink check-savepoint`: a
//! dataset's state read logically, compared raw, and checked against a
//! job's restore paths (`clink_engine::inspect`).

use std::path::{Path, PathBuf};

use clap::Args;
use clink_basics::exit::Exit;
use clink_engine::checkpoint::dataset::{self, Dataset};
use clink_engine::inspect;
use clink_engine::job::load_job;

use super::Output;

/// List a checkpoint dataset's state as typed rows.
///
/// Each participant's slots decoded in the job's documented encodings: the
/// source's position, each open window's count and sum, last_seen,
/// idle_count, timers and watermarks, the sinks' pending handles. A slot or
/// timer in no documented encoding is listed under `undocumented`, never
/// dropped; a keyed row held by a subtask that does not own its key is
/// listed under `misplaced`. The dataset is verified first. Exit 0 listed;
/// 1 the dataset does not verify; 2 bad usage.
#[derive(Args, Debug)]
pub struct StateCatArgs {
    /// The dataset's directory.
    #[arg(long, value_name = "DIR")]
    dataset: PathBuf,
    /// The digest the dataset must have.
    #[arg(long, value_name = "SHA256")]
    digest: Option<String>,
    /// Print the listing as JSON (format clink-state-listing, version 1).
    #[arg(long)]
    json: bool,
}

/// Compare two checkpoint datasets' state byte for byte, slot by slot.
///
/// Participants are matched by operator uid and subtask (by participant
/// name where a dataset names no graph). Raw bytes may differ where the
/// logical state is the same (another encoding of one value); `clink
/// state-cat` compares logically. Exit 0 equal; 1 they differ; 2 refused.
#[derive(Args, Debug)]
pub struct StateDiffArgs {
    /// The first dataset.
    a: PathBuf,
    /// The second dataset.
    b: PathBuf,
    /// Only these operators (by uid; repeatable).
    #[arg(long, value_name = "UID")]
    uid: Vec<String>,
    /// Print the comparison as JSON (format clink-state-diff, version 1).
    #[arg(long)]
    json: bool,
}

/// Check that a job's restore paths accept every snapshot of a dataset.
///
/// The dataset's state must map onto the job (every operator that holds
/// state present with the same id, uid and parallelism), and every restored
/// snapshot must decode through its operator's restore path. Exit 0
/// accepted; 1 refused (naming each snapshot and operator); 2 bad usage.
#[derive(Args, Debug)]
pub struct CheckSavepointArgs {
    /// The dataset's directory.
    #[arg(long, value_name = "DIR")]
    dataset: PathBuf,
    /// The job file that would restore it.
    #[arg(long, value_name = "FILE")]
    expected: PathBuf,
    /// Print the verdict as JSON (format clink-savepoint-check, version 1).
    #[arg(long)]
    json: bool,
}

fn open(out: &Output, dir: &Path, digest: Option<&str>) -> Result<Dataset, Exit> {
    if let Some(d) = digest {
        if !clink_basics::digest::is_sha256_hex(d) {
            return Err(out.refuse(format!("--digest {d:?} is not a SHA-256 in lowercase hex")));
        }
    }
    dataset::verify(dir, digest).map_err(|e| out.stop(Exit::Failed, format!("{}: does not verify: {e}", dir.display())))
}

fn to_json<T: serde::Serialize>(value: &T) -> serde_json::Value {
    serde_json::to_value(value).unwrap_or_else(|e| serde_json::json!({ "error": e.to_string() }))
}

fn render_values(values: &[serde_json::Value]) -> String {
    values
        .iter()
        .map(|v| match v.as_object().and_then(|o| o.iter().next()) {
            Some((_, serde_json::Value::String(s))) => s.clone(),
            Some((_, serde_json::Value::Null)) => "null".into(),
            Some((_, other)) => other.to_string(),
            None => v.to_string(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

pub fn cat(args: StateCatArgs) -> Exit {
    let out = Output::new("state-cat", args.json);
    let dataset = match open(&out, &args.dataset, args.digest.as_deref()) {
        Ok(d) => d,
        Err(exit) => return exit,
    };
    let listing = match inspect::list(&dataset) {
        Ok(l) => l,
        Err(e) => return out.stop(Exit::Failed, e),
    };
    let text = || {
        let mut lines = vec![format!(
            "job {} checkpoint {} ({}): {} rows, {} misplaced, {} undocumented",
            listing.job,
            listing.checkpoint,
            listing.kind,
            listing.rows.len(),
            listing.misplaced.len(),
            listing.undocumented.len()
        )];
        for row in &listing.rows {
            let uid = row.uid.as_deref().unwrap_or("?");
            lines.push(format!("{uid}[{}] {} {}", row.subtask, row.kind, render_values(&row.values)));
        }
        for row in &listing.misplaced {
            let uid = row.uid.as_deref().unwrap_or("?");
            lines.push(format!("MISPLACED {uid}[{}] {} {}", row.subtask, row.kind, render_values(&row.values)));
        }
        for u in &listing.undocumented {
            let uid = u.uid.as_deref().unwrap_or("?");
            lines.push(format!("UNDOCUMENTED {uid}[{}] slot {} ({} bytes): {}", u.subtask, u.slot, u.bytes, u.reason));
        }
        lines.join("\n")
    };
    out.report(to_json(&listing), text, Exit::Passed)
}

pub fn diff(args: StateDiffArgs) -> Exit {
    let out = Output::new("state-diff", args.json);
    let a = match open(&out, &args.a, None) {
        Ok(d) => d,
        Err(exit) => return exit,
    };
    let b = match open(&out, &args.b, None) {
        Ok(d) => d,
        Err(exit) => return exit,
    };
    let diff = match inspect::raw_diff(&a, &b, &args.uid) {
        Ok(d) => d,
        Err(e) => return out.stop(Exit::Failed, e),
    };
    let exit = if diff.equal { Exit::Passed } else { Exit::Failed };
    let text = || {
        let mut lines =
            vec![if diff.equal { "equal, byte for byte".to_string() } else { "the raw state differs".into() }];
        for p in diff.participants.iter().filter(|p| p.status != "equal") {
            let slots: Vec<String> =
                p.slots.iter().filter(|s| s.status != "equal").map(|s| format!("{} {}", s.slot, s.status)).collect();
            lines.push(format!("  {} {}: {}", p.participant, p.status, slots.join(", ")));
        }
        lines.join("\n")
    };
    out.report(to_json(&diff), text, exit)
}

pub fn check_savepoint(args: CheckSavepointArgs) -> Exit {
    let out = Output::new("check-savepoint", args.json);
    let job = match load_job(&args.expected) {
        Ok(j) => j,
        Err(e) => return out.refuse(format!("--expected: job refused: {e}")),
    };
    let dataset = match open(&out, &args.dataset, None) {
        Ok(d) => d,
        Err(exit) => return exit,
    };
    let check = match inspect::check_savepoint(&dataset, &job) {
        Ok(c) => c,
        Err(e) => return out.stop(Exit::Failed, e),
    };
    let exit = if check.accepted { Exit::Passed } else { Exit::Failed };
    let text = || {
        let mut lines = vec![format!(
            "checkpoint {}: {}",
            check.checkpoint,
            if check.accepted { "every snapshot accepted" } else { "refused" }
        )];
        if let Some(r) = &check.refusal {
            lines.push(format!("  {r}"));
        }
        for s in check.snapshots.iter().filter(|s| s.status == "refused") {
            lines.push(format!("  {}: {}", s.participant, s.reason));
        }
        lines.join("\n")
    };
    out.report(to_json(&check), text, exit)
}
