//! `clink incident-verify`: check a bundle offline.

use std::path::PathBuf;

use clap::Args;
use clink_engine::job::{parse_decimal_u64, OperatorId};
use clink_harness::bundle::read_bundle;
use clink_harness::verify::{render_json, render_text, verify, Profile, Selection, VerifyOptions};

use super::refuse;

/// Verify an incident bundle: integrity, restore point, state, traces, replay.
///
/// Profiles: integrity (bundle.*), consistency (default: + checkpoint.*,
/// state.decode), replay (+ replay.determinism, replay.recorded_output, and
/// replay.expected_output with --expected), full (+ protocol.*). Exit 0 every
/// required check passed; 1 one failed; 3 none failed but one is unavailable
/// or unsupported (never a pass); 2 bad usage or a bundle the reader refuses.
/// Verification reads the bundle, writes only to the temporary directory and
/// opens no connection.
#[derive(Args, Debug)]
pub struct IncidentVerifyArgs {
    /// The bundle directory.
    bundle: PathBuf,
    /// Which checks are required.
    #[arg(long, default_value = "consistency", value_parser = ["integrity", "consistency", "replay", "full"])]
    profile: String,
    /// Select these operators' captured epochs (comma-separated decimal ids).
    #[arg(long, value_name = "IDS")]
    op: Option<String>,
    /// Select these subtasks' captured epochs (comma-separated).
    #[arg(long, value_name = "S,...")]
    subtask: Option<String>,
    /// Select these epochs (comma-separated).
    #[arg(long, value_name = "N,...")]
    epoch: Option<String>,
    /// At most this many epochs are replayed; the rest are counted as omitted.
    #[arg(long, value_name = "N", default_value_t = 64)]
    max_replays: usize,
    /// Expected rows of one operator (NDJSON: one JSON array of cells per line,
    /// decimals as strings, timestamps as epoch ms) for replay.expected_output.
    #[arg(long, value_name = "FILE")]
    expected: Option<PathBuf>,
    /// The repository's formal/ directory (default: CLINK_FORMAL_DIR, else the build's).
    #[arg(long, value_name = "DIR")]
    formal_dir: Option<PathBuf>,
    /// Where the pinned TLA+ jar is installed (default: CLINK_FORMAL_TOOLS_DIR, else
    /// ${CLINK_DEPS_PREFIX:-~/.clink-deps}/formal-tools).
    #[arg(long, value_name = "DIR")]
    formal_tools_dir: Option<PathBuf>,
    /// Print the versioned JSON report instead of text.
    #[arg(long)]
    json: bool,
}

fn list<T>(text: &Option<String>, parse: impl Fn(&str) -> Option<T>, flag: &str) -> Result<Option<Vec<T>>, String> {
    match text {
        None => Ok(None),
        Some(t) => t
            .split(',')
            .map(|s| parse(s.trim()))
            .collect::<Option<Vec<T>>>()
            .map(Some)
            .ok_or_else(|| format!("{flag} {t:?}: expected comma-separated numbers")),
    }
}

pub fn main(args: IncidentVerifyArgs) -> u8 {
    let selection = match (
        list(&args.op, OperatorId::parse, "--op"),
        list(&args.subtask, |s| parse_decimal_u64(s).and_then(|v| u32::try_from(v).ok()), "--subtask"),
        list(&args.epoch, parse_decimal_u64, "--epoch"),
    ) {
        (Ok(ops), Ok(subtasks), Ok(epochs)) => Selection { ops, subtasks, epochs, max_replays: args.max_replays },
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => return refuse(e),
    };
    let Some(profile) = Profile::parse(&args.profile) else {
        return refuse(format!("--profile {:?}", args.profile));
    };
    let bundle = match read_bundle(&args.bundle) {
        Ok(b) => b,
        Err(e) => return refuse(format!("{}: the bundle is refused: {e}", args.bundle.display())),
    };
    let formal = if profile == Profile::Full {
        match clink_harness::formal::locate(args.formal_dir.as_deref(), args.formal_tools_dir.as_deref()) {
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
    match verify(&bundle, &options) {
        Ok(report) => {
            if args.json {
                println!("{}", render_json(&report));
            } else {
                print!("{}", render_text(&report));
            }
            report.exit_code
        }
        Err(e) => refuse(e),
    }
}
