//! `clink gen-input`: writes a deterministic input for the segment source.

use std::path::PathBuf;

use clap::Args;
use clink_engine::gen::{generate, GenOptions};

use super::{refuse, EXIT_OK};

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
    #[arg(long, default_value_t = 50)]
    accounts: u32,
    /// Events per segment file.
    #[arg(long, default_value_t = 1_000)]
    segment_events: u64,
    /// An empty (or new) directory.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

pub fn main(args: GenInputArgs) -> u8 {
    let options = GenOptions {
        seed: args.seed,
        events: args.events,
        accounts: args.accounts,
        segment_events: args.segment_events,
        out: args.out,
    };
    match generate(&options) {
        Ok(s) => {
            println!(
                "wrote {} events and {} watermarks in {} segments ({} bytes) to {}",
                s.events,
                s.watermarks,
                s.segments,
                s.bytes,
                options.out.display()
            );
            EXIT_OK
        }
        Err(e) => refuse(format!("gen-input: {e}")),
    }
}
