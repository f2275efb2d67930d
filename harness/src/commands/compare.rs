//! `clink compare`: does a sink's committed output hold exactly the expected
//! lines, as a multiset?

use std::path::PathBuf;

use clap::Args;
use clink_basics::exit::Exit;
use clink_basics::multiset::{describe, multiset_diff};
use clink_reference::output::{read_lines, read_output_lines};
use serde_json::json;

use super::Output;

/// Compare a sink's committed lines with an expected file, as multisets.
///
/// Reads every line of the regular, non-hidden files in the sink's folder.
/// Exit 0 when equal, 1 when they differ, 2 when either side is unreadable.
#[derive(Args, Debug)]
pub struct CompareArgs {
    /// The expected lines, one per line (clink reference writes them).
    #[arg(long, value_name = "FILE")]
    expected: PathBuf,
    /// A sink's output folder, <output-dir>/<uid>.
    #[arg(long, value_name = "DIR")]
    actual: PathBuf,
    /// Print the result as JSON (format clink-compare-report, version 1).
    #[arg(long)]
    json: bool,
}

pub fn main(args: CompareArgs) -> Exit {
    let out = Output::new("compare", args.json);
    let expected = match read_lines(&args.expected) {
        Ok(lines) => lines,
        Err(e) => return out.refuse(format!("--expected {}: {e}", args.expected.display())),
    };
    let actual = match read_output_lines(&args.actual) {
        Ok(lines) => lines,
        Err(e) => return out.refuse(format!("--actual {}: {e}", args.actual.display())),
    };
    let diff = multiset_diff(expected, actual);
    let copies = |items: &[(String, usize)]| {
        items.iter().take(20).map(|(l, n)| json!({"line": l, "copies": n})).collect::<Vec<_>>()
    };
    let exit = if diff.is_equal() { Exit::Passed } else { Exit::Failed };
    let doc = json!({
        "format": "clink-compare-report",
        "version": 1,
        "equal": diff.is_equal(),
        "expected": diff.expected_total,
        "actual": diff.actual_total,
        "missing": copies(&diff.missing),
        "unexpected": copies(&diff.unexpected),
        "exit_code": exit.code(),
    });
    out.report(doc, || format!("{}: {}", args.actual.display(), describe(&diff, 5)), exit)
}
