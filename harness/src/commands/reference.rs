//! `clink reference`: the example job's expected output, computed
//! independently of the engine.

use std::path::PathBuf;

use clap::Args;
use clink_harness::reference::{compute, ReferenceParams};

use super::{refuse, EXIT_OK};

/// The example job's expected output, computed independently of the engine.
///
/// Computes the windows and idle rows from the input alone, into
/// <OUT>/windows.txt and <OUT>/idle.txt.
#[derive(Args, Debug)]
pub struct ReferenceArgs {
    #[arg(long, value_name = "DIR")]
    input_dir: PathBuf,
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    #[arg(long, default_value_t = 10_000)]
    window_size_ms: i64,
    #[arg(long, default_value_t = 30_000)]
    idle_timeout_ms: i64,
}

pub fn main(args: ReferenceArgs) -> u8 {
    let params = ReferenceParams { window_ms: args.window_size_ms, idle_timeout_ms: args.idle_timeout_ms };
    let output = match compute(&args.input_dir, params) {
        Ok(output) => output,
        Err(e) => return refuse(format!("reference: {e}")),
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
        return refuse(format!("reference: {}: {e}", args.out.display()));
    }
    println!(
        "reference: {} window rows, {} idle rows in {}",
        output.windows.len(),
        output.idle.len(),
        args.out.display()
    );
    EXIT_OK
}
