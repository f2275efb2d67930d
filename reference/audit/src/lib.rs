//! clink-reference-audit: an independent reference for `clink
//! incident-reconcile --reference`.
//!
//! It reads a scope document (`clink-audit-scope`), reads the scope's exact
//! Kafka ranges on a connection the operator gives (with librdkafka, through
//! the rdkafka crate; never through clink's connectors), applies the job's
//! specification as this crate writes it from the job's documentation
//! (`credits`: record-wise; `windows`: keyed tumbling windows, with each
//! record's fate and each window's finality), and writes the reference
//! artifact (`clink-reference-result`). It depends on nothing of the
//! engine's or the harness's, not even their leaf helpers: a reference that
//! shared code with what it checks could repeat its defect.
//!
//! What it cannot establish (expired history, a recreated topic or another
//! cluster, a log that ends early, an error, a deadline, a bound) leaves the
//! artifact incomplete with the reason, never complete over what remains.
//!
//! ```no_run
//! let code = clink_reference_audit::main_with(
//!     ["--scope", "scope.json", "--bootstrap", "127.0.0.1:9092", "--transform", "credits",
//!      "--run-start-offset", "ALL=0", "--out", "reference.ndjson"].iter().map(Into::into).collect(),
//! );
//! assert!(code == 0 || code == 3);
//! ```

pub mod cells;
pub mod log;
pub mod scope;
pub mod transform;
pub mod windows;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Parser, ValueEnum};
use serde_json::{json, Value as Json};
use sha2::{Digest, Sha256};
use thiserror::Error;

pub const NAME: &str = "clink-reference-audit";
pub const ARTIFACT_FORMAT: &str = "clink-reference-result";
const MAX_SCOPE_BYTES: u64 = 64 << 20;
const MAX_STATE_BYTES: u64 = 256 << 20;

#[derive(Debug, Error)]
pub enum Failure {
    /// Bad usage or an input refused (exit 2).
    #[error("{0}")]
    Usage(String),
    /// The artifact could not be written (exit 1).
    #[error("{0}")]
    Write(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Transform {
    /// Record-wise: messages with amount > 0, as id, account, amount, time.
    Credits,
    /// Per account, 10 s tumbling windows with their count and sum, watermark lag 2 s.
    Windows,
}

/// Compute a reference artifact from a scope's exact Kafka ranges.
///
/// Exit 0 a complete artifact is written; 3 an incomplete one is written
/// (with the reason); 2 bad usage or a scope it refuses; 1 it could not
/// write.
#[derive(Parser, Debug)]
#[command(name = NAME, version)]
pub struct Args {
    /// The scope document (clink incident-scope --out).
    #[arg(long, value_name = "FILE")]
    scope: PathBuf,
    /// The Kafka brokers (HOST:PORT[,HOST:PORT...]).
    #[arg(long, value_name = "HOSTS")]
    bootstrap: String,
    /// The job's specification this reference applies.
    #[arg(long, value_enum)]
    transform: Transform,
    /// The run's first offsets, which checkpoints do not record: ALL=<offset>
    /// or <partition>=<offset>, comma-separated. Recorded as the operator's.
    #[arg(long, value_name = "P=OFFSET,...")]
    run_start_offset: Option<String>,
    /// A windowed increment: the reference's state at the scope's base.
    #[arg(long, value_name = "FILE")]
    state_in: Option<PathBuf>,
    /// A windowed scope: where to write the reference's state at the audited checkpoint.
    #[arg(long, value_name = "FILE")]
    state_out: Option<PathBuf>,
    /// How long the whole read may take.
    #[arg(long, value_name = "MS", default_value_t = 120_000)]
    deadline_ms: u64,
    /// The most records the ranges may hold.
    #[arg(long, value_name = "N", default_value_t = 50_000_000)]
    max_records: u64,
    /// Where to write the artifact.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
}

/// Runs the command line; returns the exit code.
pub fn main_with(args: Vec<OsString>) -> u8 {
    let argv = std::iter::once(OsString::from(NAME)).chain(args);
    let args = match Args::try_parse_from(argv) {
        Ok(a) => a,
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return 0;
        }
        Err(e) => {
            let _ = e.print();
            return 2;
        }
    };
    match run(&args) {
        Ok((complete, summary)) => {
            eprintln!("{NAME}: {summary}");
            if complete {
                0
            } else {
                3
            }
        }
        Err(Failure::Usage(why)) => {
            eprintln!("{NAME}: refused: {why}");
            2
        }
        Err(Failure::Write(why)) => {
            eprintln!("{NAME}: {why}");
            1
        }
    }
}

fn read_file(path: &Path, max: u64, what: &str) -> Result<Vec<u8>, Failure> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| Failure::Usage(format!("{what} {}: {e}", path.display())))?;
    let mut bytes = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Failure::Usage(format!("{what} {}: {e}", path.display())))?;
    if bytes.len() as u64 > max {
        return Err(Failure::Usage(format!("{what} {} is larger than {max} bytes", path.display())));
    }
    Ok(bytes)
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// Options the scope gives no use for are refused, never dropped.
fn refused_options(args: &Args, scope: &scope::ScopeDoc) -> Result<(), Failure> {
    if let (Some(_), Some(r)) = (&args.run_start_offset, scope.ranges.iter().find(|r| r.from.is_some())) {
        return Err(Failure::Usage(format!(
            "--run-start-offset: the scope gives partition {}'s range from offset {}; run-start offsets are for a scope from the run's start, whose offsets the checkpoints do not record: leave --run-start-offset out for this scope, or write one from the run's start (clink incident-scope --from-run-start)",
            r.partition,
            r.from.unwrap_or_default()
        )));
    }
    if args.state_out.is_some() && args.transform == Transform::Credits {
        return Err(Failure::Usage(
            "--state-out is for a windowed reference (--transform windows): the record-wise one keeps no state".into(),
        ));
    }
    Ok(())
}

/// `ALL=0` or `0=12,1=40`.
fn run_start_offsets(text: Option<&str>) -> Result<(Option<i64>, BTreeMap<i32, i64>), Failure> {
    let mut all = None;
    let mut each = BTreeMap::new();
    let Some(text) = text else { return Ok((all, each)) };
    for part in text.split(',') {
        let (p, o) = part
            .split_once('=')
            .ok_or_else(|| Failure::Usage(format!("--run-start-offset {part:?} is not P=OFFSET")))?;
        let o: i64 = o
            .parse()
            .ok()
            .filter(|o| *o >= 0)
            .ok_or_else(|| Failure::Usage(format!("--run-start-offset: {o:?} is not an offset")))?;
        if p == "ALL" {
            all = Some(o);
        } else {
            let p: i32 = p
                .parse()
                .ok()
                .filter(|p| *p >= 0)
                .ok_or_else(|| Failure::Usage(format!("--run-start-offset: {p:?} is not a partition")))?;
            each.insert(p, o);
        }
    }
    Ok((all, each))
}

fn run(args: &Args) -> Result<(bool, String), Failure> {
    let scope_bytes = read_file(&args.scope, MAX_SCOPE_BYTES, "--scope")?;
    let scope = scope::parse(&scope_bytes)?;
    let windowed = scope.version >= 2;
    match (args.transform, windowed) {
        (Transform::Credits, true) => {
            return Err(Failure::Usage("--transform credits for a windowed scope (version 2 or 3)".into()))
        }
        (Transform::Windows, false) => {
            return Err(Failure::Usage("--transform windows for a record-wise scope (version 1)".into()))
        }
        _ => {}
    }
    refused_options(args, &scope)?;
    let (all, each) = run_start_offsets(args.run_start_offset.as_deref())?;
    let mut ranges = Vec::new();
    let mut supplied = BTreeMap::new();
    for r in &scope.ranges {
        let from = match r.from {
            Some(f) => f,
            None => {
                let given = each.get(&r.partition).copied().or(all).ok_or_else(|| {
                    Failure::Usage(format!(
                        "the scope starts at the run's start, whose offsets the checkpoints do not record: give partition {}'s with --run-start-offset",
                        r.partition
                    ))
                })?;
                supplied.insert(r.partition.to_string(), given);
                given
            }
        };
        ranges.push((r.partition, from, r.to));
    }
    // An increment starts from the reference's own state at the base.
    let state_in = match (&args.state_in, scope.version) {
        (Some(path), 3) => {
            let bytes = read_file(path, MAX_STATE_BYTES, "--state-in")?;
            let state = windows::State::parse(&bytes)
                .map_err(|e| Failure::Usage(format!("--state-in {}: {e}", path.display())))?;
            let base =
                scope.base.as_ref().ok_or_else(|| Failure::Usage("a version 3 scope without its base".into()))?;
            if state.checkpoint != base.checkpoint || state.positions != base.positions || state.topic != scope.topic {
                return Err(Failure::Usage(format!(
                    "--state-in is the state at checkpoint {} of topic {:?}; the increment's base is checkpoint {} of {:?} (positions must match too)",
                    state.checkpoint, state.topic, base.checkpoint, scope.topic
                )));
            }
            Some((state, sha256_hex(&bytes)))
        }
        (None, 3) => {
            return Err(Failure::Usage(
                "an increment (version 3 scope) needs the reference's state at its base: --state-in".into(),
            ))
        }
        (Some(_), _) => return Err(Failure::Usage("--state-in is for an increment (a version 3 scope)".into())),
        (None, _) => None,
    };
    let read = log::read(&log::Request {
        bootstrap: &args.bootstrap,
        topic: &scope.topic,
        isolation: &scope.isolation,
        cluster_id: scope.cluster_id.as_deref(),
        partitions_in_log: scope.partitions_in_log,
        ranges: ranges.clone(),
        deadline: Duration::from_millis(args.deadline_ms),
        max_records: args.max_records,
    });
    let mut incomplete = read.incomplete.clone();
    if !scope.complete && incomplete.is_none() {
        incomplete = Some("the scope document says its evidence is not whole".into());
    }
    // Every record read, through the job's specification.
    let mut rows: Vec<Vec<Json>> = Vec::new();
    let mut left_out = Vec::new();
    let mut extra_end = serde_json::Map::new();
    let mut state_out = None;
    let mut events: BTreeMap<i32, Vec<(i64, transform::Event)>> = BTreeMap::new();
    let mut filtered = 0u64;
    if incomplete.is_none() {
        for (p, records) in &read.records {
            for r in records {
                match transform::read_event(&r.payload) {
                    Ok(e) => events.entry(*p).or_default().push((r.offset, e)),
                    Err(why) => {
                        incomplete = Some(format!(
                            "partition {p} offset {}: the message is not one of the job's records: {why}",
                            r.offset
                        ));
                        break;
                    }
                }
            }
        }
    }
    let rules = transform::WindowRules::default();
    if incomplete.is_none() {
        match args.transform {
            Transform::Credits => {
                for e in events.values().flatten().map(|(_, e)| e) {
                    match transform::credit(e) {
                        Some(row) => rows.push(row),
                        None => filtered += 1,
                    }
                }
                extra_end.insert("fates".into(), json!({"written": rows.len(), "filtered": filtered}));
            }
            Transform::Windows => match windows::compute(&rules, &scope, events, state_in.as_ref().map(|(s, _)| s)) {
                Ok(out) => {
                    rows = out.rows;
                    left_out = out.left_out;
                    extra_end.insert("source_bounds".into(), windows::bounds_json(&out.bounds));
                    extra_end.insert(
                        "fates".into(),
                        json!({"folded": out.fates.folded, "dropped_late": out.fates.dropped_late, "undetermined": out.fates.undetermined, "filtered": out.fates.filtered}),
                    );
                    state_out = Some(out.state_out);
                }
                Err(why) => incomplete = Some(format!("the windows could not be computed: {why}")),
            },
        }
    }
    if incomplete.is_some() {
        rows.clear();
        left_out.clear();
        state_out = None;
    }
    // The state it leaves, for the next increment.
    if let (Some(state), Some(path)) = (&state_out, &args.state_out) {
        let bytes = serde_json::to_vec_pretty(&state.to_json()).map_err(|e| Failure::Write(e.to_string()))?;
        write_beside(path, &bytes).map_err(|e| Failure::Write(format!("--state-out {}: {e}", path.display())))?;
        extra_end.insert("state_out".into(), json!({"checkpoint": state.checkpoint, "sha256": sha256_hex(&bytes)}));
    }
    // The artifact: header, rows, windows left out, end.
    let mut header = json!({
        "format": ARTIFACT_FORMAT,
        "version": scope.version,
        "type": "header",
        "scope": scope.raw,
        "implementation": {
            "name": NAME,
            "version": env!("CARGO_PKG_VERSION"),
            "configuration": {"transform": format!("{:?}", args.transform).to_lowercase(), "deadline_ms": args.deadline_ms, "max_records": args.max_records},
            "client": format!("librdkafka {}", rdkafka::util::get_rdkafka_version().1),
        },
        "run_start_offsets": if supplied.is_empty() { Json::Null } else { json!(supplied) },
    });
    if windowed {
        header["semantics"] = rules.declared();
    }
    if let Some((state, sha)) = &state_in {
        header["state_in"] = json!({"checkpoint": state.checkpoint, "sha256": sha});
    }
    let header_line = header.to_string();
    let mut text = String::with_capacity(rows.len() * 64 + header_line.len() + 512);
    text.push_str(&header_line);
    text.push('\n');
    let mut rows_hash = Sha256::new();
    for row in &rows {
        let line = json!({"type": "row", "cells": row}).to_string();
        rows_hash.update(line.as_bytes());
        rows_hash.update(b"\n");
        text.push_str(&line);
        text.push('\n');
    }
    let mut windows_hash = Sha256::new();
    for (identity, status, why) in &left_out {
        let line = json!({"type": "window", "identity": identity, "status": status, "why": why}).to_string();
        windows_hash.update(line.as_bytes());
        windows_hash.update(b"\n");
        text.push_str(&line);
        text.push('\n');
    }
    let hex = |h: Sha256| h.finalize().iter().map(|b| format!("{b:02x}")).collect::<String>();
    let mut end = json!({
        "type": "end",
        "rows": rows.len(),
        "rows_sha256": hex(rows_hash),
        "header_sha256": sha256_hex(header_line.as_bytes()),
        "complete": incomplete.is_none(),
        "incomplete_reason": incomplete,
        "verified": read.verified,
        "recorded": {"unverified": read.unverified, "bootstrap": args.bootstrap, "ranges": ranges.iter().map(|(p, f, t)| json!({"partition": p, "from": f, "to": t})).collect::<Vec<_>>()},
    });
    if windowed {
        end["windows"] = json!(left_out.len());
        end["windows_sha256"] = json!(hex(windows_hash));
    }
    if let Json::Object(m) = &mut end {
        m.extend(extra_end);
    }
    text.push_str(&end.to_string());
    text.push('\n');
    write_beside(&args.out, text.as_bytes())
        .map_err(|e| Failure::Write(format!("--out {}: {e}", args.out.display())))?;
    let summary = match &incomplete {
        None => {
            format!("wrote {}: complete, {} rows, {} windows left out", args.out.display(), rows.len(), left_out.len())
        }
        Some(why) => format!("wrote {}: INCOMPLETE ({why})", args.out.display()),
    };
    Ok((incomplete.is_none(), summary))
}

/// Writes beside the name, then renames into place.
fn write_beside(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "out".into());
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A record-wise scope whose one range starts at `from` (none: the run's start).
    fn scope_file(dir: &Path, from: Option<i64>) -> PathBuf {
        let doc = json!({
            "format": "clink-audit-scope", "version": 1, "scope_sha256": "x", "checkpoint": 3, "complete": true,
            "sources": [{"topic": "t", "isolation": "read_committed", "partitions": [{"partition": 0, "from": from, "to": 9}]}],
        });
        let path = dir.join("scope.json");
        std::fs::write(&path, doc.to_string()).unwrap();
        path
    }

    /// The exit code of a run refused before any broker is asked (the
    /// address is one nothing listens on).
    fn exit(args: &[&str]) -> u8 {
        main_with(["--bootstrap", "127.0.0.1:9", "--deadline-ms", "1"].iter().chain(args).map(Into::into).collect())
    }

    /// `refused_options` for a record-wise reference given `ALL=0` over the scope at `scope`.
    fn offsets_given(scope: &Path, out: &str) -> Result<(), Failure> {
        let scope_arg = scope.to_str().unwrap();
        let argv = [
            "x",
            "--scope",
            scope_arg,
            "--bootstrap",
            "b",
            "--transform",
            "credits",
            "--out",
            out,
            "--run-start-offset",
            "ALL=0",
        ];
        refused_options(&Args::try_parse_from(argv).unwrap(), &scope::parse(&std::fs::read(scope).unwrap()).unwrap())
    }

    #[test]
    fn options_the_scope_gives_no_use_for_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.ndjson");
        let out = out.to_str().unwrap();
        let from_checkpoint = scope_file(dir.path(), Some(5));
        let scope = from_checkpoint.to_str().unwrap();
        let given = ["--scope", scope, "--transform", "credits", "--out", out, "--run-start-offset", "ALL=0"];
        assert_eq!(exit(&given), 2, "--run-start-offset over a scope that has its from offsets");
        let state = dir.path().join("state.json");
        let state_out =
            ["--scope", scope, "--transform", "credits", "--out", out, "--state-out", state.to_str().unwrap()];
        assert_eq!(exit(&state_out), 2, "--state-out with --transform credits");
        assert!(!std::path::Path::new(out).exists() && !state.exists(), "a refusal writes nothing");
        let refused = offsets_given(&from_checkpoint, out);
        assert!(matches!(refused, Err(Failure::Usage(why))
            if why.contains("partition 0's range from offset 5")
                && why.contains("leave --run-start-offset out for this scope")
                && why.contains("incident-scope --from-run-start")));
        // From the run's start, the offsets are needed and taken.
        let from_start = scope_file(dir.path(), None);
        assert!(offsets_given(&from_start, out).is_ok());
    }
}
