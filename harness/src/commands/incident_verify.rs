//! `clink incident-verify`: check a bundle offline.

use std::num::NonZeroUsize;
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use clink_basics::exit::Exit;
use clink_basics::ids::OperatorId;
use clink_bundle::read_bundle;
use clink_verify::{render_json, render_text, verify_observed, Profile, Selection, VerifyOptions};

use super::{decimal_u32, decimal_u64, operator_id, write_html, FormalArgs, Output};

/// Which checks are required.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProfileArg {
    /// bundle.*: the manifest, every artifact's size and SHA-256, completeness.
    Integrity,
    /// integrity + checkpoint.* and state.decode.
    Consistency,
    /// consistency + replay.determinism, replay.recorded_output (and replay.expected_output).
    Replay,
    /// replay + protocol.trace_structure and protocol.conformance (TLC).
    Full,
}

impl From<ProfileArg> for Profile {
    fn from(p: ProfileArg) -> Profile {
        match p {
            ProfileArg::Integrity => Profile::Integrity,
            ProfileArg::Consistency => Profile::Consistency,
            ProfileArg::Replay => Profile::Replay,
            ProfileArg::Full => Profile::Full,
        }
    }
}

/// Verify an incident bundle: integrity, restore point, state, traces, replay.
///
/// Exit 0 every required check passed; 1 one failed; 3 none failed but one is
/// unavailable or unsupported (never a pass); 2 bad usage or a bundle the
/// reader refuses. Verification reads the bundle, writes only to the
/// temporary directory and opens no connection. With --html, the report is
/// also written as one self-contained HTML file: every check, and a timeline
/// of the bundle's protocol trace.
#[derive(Args, Debug)]
pub struct IncidentVerifyArgs {
    /// The bundle directory.
    bundle: PathBuf,
    /// Which checks are required.
    #[arg(long, value_enum, default_value = "consistency")]
    profile: ProfileArg,
    /// Select these operators' captured epochs (decimal ids, comma-separated).
    #[arg(long, value_name = "ID,...", value_delimiter = ',', value_parser = operator_id)]
    op: Option<Vec<OperatorId>>,
    /// Select these subtasks' captured epochs (comma-separated).
    #[arg(long, value_name = "S,...", value_delimiter = ',', value_parser = decimal_u32)]
    subtask: Option<Vec<u32>>,
    /// Select these epochs (comma-separated).
    #[arg(long, value_name = "N,...", value_delimiter = ',', value_parser = decimal_u64)]
    epoch: Option<Vec<u64>>,
    /// At most this many epochs are replayed; the rest are counted as omitted.
    #[arg(long, value_name = "N", default_value = "64")]
    max_replays: NonZeroUsize,
    /// Expected rows of one operator (NDJSON: one JSON array of cells per line,
    /// decimals as strings, timestamps as epoch ms) for replay.expected_output.
    /// Only a profile that replays (replay, full) reads it.
    #[arg(long, value_name = "FILE")]
    expected: Option<PathBuf>,
    #[command(flatten)]
    formal: FormalArgs,
    /// Print the versioned JSON report (format clink-verify-report) instead of text.
    #[arg(long)]
    json: bool,
    /// Also write the report, with the protocol timeline of the bundle's
    /// traces, as one self-contained HTML file.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Verify under proven loopback-only network isolation: the command
    /// re-executes itself as `clink isolation run` does, confirms the claim
    /// from inside, and records the proof in the report (`isolation`). Where
    /// isolation is not proven nothing is verified (exit 3).
    #[arg(long)]
    isolated: bool,
}

pub fn main(args: IncidentVerifyArgs) -> Exit {
    let out = Output::new("incident-verify", args.json);
    let profile = Profile::from(args.profile);
    if args.expected.is_some() && !matches!(profile, Profile::Replay | Profile::Full) {
        return out.refuse(format!(
            "--expected is read by replay.expected_output, which the {} profile does not run; use --profile=replay or full",
            profile.as_str()
        ));
    }
    let isolation = if args.isolated {
        match super::isolation::isolate_this_command() {
            Ok(proof) if proof.enforced() => Some(proof),
            Ok(proof) => {
                return out.stop(
                    Exit::NotEstablished,
                    format!("isolation was not proven, so nothing was verified: {}", proof.line()),
                )
            }
            Err(exit) => return exit,
        }
    } else {
        None
    };
    let selection =
        Selection { ops: args.op, subtasks: args.subtask, epochs: args.epoch, max_replays: args.max_replays };
    let bundle = match read_bundle(&args.bundle) {
        Ok(b) => b,
        Err(e) => return out.refuse(format!("{}: the bundle is refused: {e}", args.bundle.display())),
    };
    let formal = if profile == Profile::Full {
        match args.formal.locate() {
            Ok(tools) => Some(tools),
            Err(why) => {
                eprintln!("clink: protocol.conformance will be unavailable: {why}");
                None
            }
        }
    } else {
        None
    };
    let options = VerifyOptions { profile, selection, expected: args.expected, formal };
    let mut progress = crate::progress::Progress::bar(args.json, "verifying", "checks");
    let verified = verify_observed(&bundle, &options, &mut progress);
    drop(progress);
    match verified {
        Ok(report) => {
            if let Some(path) = &args.html {
                let page = clink_verify::html::page(&report, &bundle);
                if let Err(e) = write_html(path, &clink_html::render(&page)) {
                    return out.refuse(format!("{e} (the verification concluded {})", report.result.exit().as_str()));
                }
            }
            if args.json {
                println!("{}", with_isolation(render_json(&report), isolation.as_ref()));
            } else {
                print!("{}", render_text(&report));
            }
            report.result.exit()
        }
        Err(e) => out.refuse(e),
    }
}

/// The report with the isolation it ran under (`isolation`: enforced, the
/// mechanism's line), when it ran isolated; unchanged otherwise.
fn with_isolation(json: String, proof: Option<&clink_isolation::Proof>) -> String {
    let Some(proof) = proof else { return json };
    let Ok(serde_json::Value::Object(mut report)) = serde_json::from_str::<serde_json::Value>(&json) else {
        return json;
    };
    report.insert("isolation".into(), serde_json::json!({ "enforced": proof.enforced(), "proof": proof.line() }));
    serde_json::to_string_pretty(&serde_json::Value::Object(report)).unwrap_or(json)
}
