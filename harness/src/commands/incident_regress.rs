//! `clink incident-regress`: freeze one epoch of a bundle as a regression bundle.

use std::path::PathBuf;

use clap::Args;
use clink_engine::job::OperatorId;
use clink_harness::bundle::read_bundle;
use clink_harness::regress::{regress, RegressError};

use super::{refuse, EXIT_FAILED, EXIT_OK};

/// Freeze one epoch of an incident bundle as a regression test.
///
/// Writes the regression bundle `clink replay --emit-test` writes, from a
/// bundle whose artifacts verify, and runs it once before returning. Exit 0
/// when the bundle is written and passes on this build, 1 when refused.
#[derive(Args, Debug)]
pub struct IncidentRegressArgs {
    bundle: PathBuf,
    #[arg(long, value_name = "ID")]
    op: String,
    #[arg(long, value_name = "S", default_value_t = 0)]
    subtask: u32,
    #[arg(long, value_name = "N")]
    epoch: u64,
    /// The regression bundle directory to create.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

pub fn main(args: IncidentRegressArgs) -> u8 {
    let Some(op) = OperatorId::parse(&args.op) else {
        return refuse(format!("--op {:?}: expected a decimal operator id", args.op));
    };
    let bundle = match read_bundle(&args.bundle) {
        Ok(b) => b,
        Err(e) => return refuse(format!("{}: the bundle is refused: {e}", args.bundle.display())),
    };
    match regress(&bundle, op, args.subtask, args.epoch, &args.out) {
        Ok(m) => {
            println!(
                "regression bundle {}: operator {} subtask {} epoch {}, {} golden emissions; it passes on this build; run it with clink replay --run-test {}",
                args.out.display(),
                m.operator,
                m.subtask,
                m.epoch,
                m.golden_emissions,
                args.out.display()
            );
            EXIT_OK
        }
        Err(RegressError(why)) => {
            eprintln!("clink: incident-regress refused: {why}");
            EXIT_FAILED
        }
    }
}
