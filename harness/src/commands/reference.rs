//! `clink reference`: the example job's expected output, computed
//! independently of the engine.

use std::path::PathBuf;

use clap::Args;
use clink_basics::exit::Exit;
use clink_reference::example::{compute, ReferenceParams};
use serde_json::json;

use super::Output;

/// The example job's expected output, computed independently of the engine.
///
/// Computes the windows and idle rows from the input alone, into
/// <OUT>/windows.txt and <OUT>/idle.txt.
#[derive(Args, Debug)]
pub struct ReferenceArgs {
    /// The input the job read (segment-NNNN.txt files).
    #[arg(long, value_name = "DIR")]
    input_dir: PathBuf,
    /// Where windows.txt and idle.txt are written.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// The window size the job's specification gives.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(i64).range(1..=1 << 40))]
    window_size_ms: i64,
    /// The idle timeout the job's specification gives.
    #[arg(long, default_value_t = 30_000, value_parser = clap::value_parser!(i64).range(1..=1 << 40))]
    idle_timeout_ms: i64,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

pub fn main(args: ReferenceArgs) -> Exit {
    let out = Output::new("reference", args.json);
    let params = ReferenceParams { window_ms: args.window_size_ms, idle_timeout_ms: args.idle_timeout_ms };
    let output = match compute(&args.input_dir, params) {
        Ok(output) => output,
        Err(e) => return out.refuse(e),
    };
    let write = |name: &str, lines: &[String]| {
        let mut text = lines.join("\n");
        if !text.is_empty() {
            text.push('\n');
        }
        std::fs::write(args.out.join(name), text)
    };
    let written = std::fs::create_dir_all(&args.out)
        .and_then(|()| write("windows.txt", &output.windows))
        .and_then(|()| write("idle.txt", &output.idle));
    if let Err(e) = written {
        return out.refuse(format!("{}: {e}", args.out.display()));
    }
    let doc = json!({
        "format": "clink-reference-summary", "version": 1,
        "windows": output.windows.len(), "idle": output.idle.len(), "out": args.out.display().to_string(),
    });
    let text = || {
        format!(
            "reference: {} window rows, {} idle rows in {}",
            output.windows.len(),
            output.idle.len(),
            args.out.display()
        )
    };
    out.report(doc, text, Exit::Passed)
}
