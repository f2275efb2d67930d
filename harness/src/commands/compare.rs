//! `clink compare`: does a sink's committed output hold exactly the expected
//! lines, as a multiset?

use std::path::PathBuf;

use clap::Args;
use clink_harness::compare::{describe, multiset_diff, read_lines, read_output_lines};

use super::{refuse, EXIT_FAILED, EXIT_OK};

/// Compare a sink's committed lines with an expected file, as multisets.
///
/// Reads every line of the regular, non-hidden files in the sink's folder.
/// Exit 0 when equal, 1 when they differ, 2 when either side is unreadable.
#[derive(Args, Debug)]
pub struct CompareArgs {
    #[arg(long, value_name = "FILE")]
    expected: PathBuf,
    /// A sink's output folder, <output-dir>/<uid>.
    #[arg(long, value_name = "DIR")]
    actual: PathBuf,
    #[arg(long)]
    json: bool,
}

pub fn main(args: CompareArgs) -> u8 {
    let expected = match read_lines(&args.expected) {
        Ok(lines) => lines,
        Err(e) => return refuse(format!("--expected {}: {e}", args.expected.display())),
    };
    let actual = match read_output_lines(&args.actual) {
        Ok(lines) => lines,
        Err(e) => return refuse(format!("--actual {}: {e}", args.actual.display())),
    };
    let diff = multiset_diff(expected, actual);
    if args.json {
        let json = serde_json::json!({
            "format": "clink-compare-report",
            "version": 1,
            "equal": diff.is_equal(),
            "expected": diff.expected_total,
            "actual": diff.actual_total,
            "missing": diff.missing.iter().take(20).map(|(l, n)| serde_json::json!({"line": l, "copies": n})).collect::<Vec<_>>(),
            "unexpected": diff.unexpected.iter().take(20).map(|(l, n)| serde_json::json!({"line": l, "copies": n})).collect::<Vec<_>>(),
        });
        println!("{json}");
    } else {
        println!("{}: {}", args.actual.display(), describe(&diff, 5));
    }
    if diff.is_equal() {
        EXIT_OK
    } else {
        EXIT_FAILED
    }
}
