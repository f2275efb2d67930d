//! `clink gen-input`: writes a deterministic input for the segment source.

use std::path::PathBuf;

use clap::Args;
use clink_basics::exit::Exit;
use clink_engine::gen::{generate, GenOptions};
use serde_json::json;

use super::Output;

/// Generate a seeded input: segment-NNNN.txt files of events, watermarks and END.
#[derive(Args, Debug)]
pub struct GenInputArgs {
    /// The same seed, events and accounts always give the same bytes.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// How many E lines to write (the input ends with END).
    #[arg(long, default_value_t = 24_000)]
    events: u64,
    /// How many distinct accounts (a few frequent, most rare).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    accounts: u32,
    /// Events per segment file.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..))]
    segment_events: u64,
    /// An empty (or new) directory.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

pub fn main(args: GenInputArgs) -> Exit {
    let out = Output::new("gen-input", args.json);
    let options = GenOptions {
        seed: args.seed,
        events: args.events,
        accounts: args.accounts,
        segment_events: args.segment_events,
        out: args.out,
    };
    match generate(&options) {
        Ok(s) => {
            let doc = json!({
                "format": "clink-gen-input-summary", "version": 1, "events": s.events, "watermarks": s.watermarks,
                "segments": s.segments, "bytes": s.bytes, "out": options.out.display().to_string(),
            });
            let text = || {
                format!(
                    "wrote {} events and {} watermarks in {} segments ({} bytes) to {}",
                    s.events,
                    s.watermarks,
                    s.segments,
                    s.bytes,
                    options.out.display()
                )
            };
            out.report(doc, text, Exit::Passed)
        }
        Err(e) => out.refuse(e),
    }
}
