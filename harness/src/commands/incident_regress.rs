//! `clink incident-regress`: freeze one epoch of a bundle as a regression bundle.

use std::path::PathBuf;

use clap::Args;
use clink_basics::exit::Exit;
use clink_basics::ids::OperatorId;
use clink_basics::text::count;
use clink_bundle::{read_bundle, Bundle};
use clink_verify::regress::regress;
use serde_json::json;

use super::{decimal_u32, decimal_u64, operator_id, Output};

/// Freeze one epoch of an incident bundle as a regression test.
///
/// Writes the regression bundle `clink replay emit-test` writes, from a
/// bundle whose artifacts verify, and runs it once before returning. Exit 0
/// when the bundle is written and passes on this build, 1 when refused, 2
/// when the bundle cannot be read.
#[derive(Args, Debug)]
pub struct IncidentRegressArgs {
    /// The incident bundle directory.
    bundle: PathBuf,
    /// Operator id (decimal).
    #[arg(long, value_name = "ID", value_parser = operator_id)]
    op: OperatorId,
    /// The operator's subtask.
    #[arg(long, value_name = "S", default_value = "0", value_parser = decimal_u32)]
    subtask: u32,
    /// The epoch (the events between checkpoints N-1 and N); without it,
    /// the one epoch of this operator subtask the bundle holds (refused,
    /// naming them, when it holds several or none).
    #[arg(long, value_name = "N", value_parser = decimal_u64)]
    epoch: Option<u64>,
    /// The regression bundle directory to create (it must not exist).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

pub fn main(args: IncidentRegressArgs) -> Exit {
    let out = Output::new("incident-regress", args.json);
    let bundle = match read_bundle(&args.bundle) {
        Ok(b) => b,
        Err(e) => return out.refuse(format!("{}: the bundle is refused: {e}", args.bundle.display())),
    };
    let epoch = match args.epoch.map_or_else(|| the_one_epoch(&bundle, args.op, args.subtask), Ok) {
        Ok(e) => e,
        Err(why) => return out.refuse(why),
    };
    match regress(&bundle, args.op, args.subtask, epoch, &args.out) {
        Ok(m) => {
            let doc = json!({
                "format": "clink-regress-result", "version": 1, "result": "written",
                "out": args.out.display().to_string(), "operator": m.operator, "subtask": m.subtask,
                "epoch": m.epoch, "golden_emissions": m.golden_emissions,
            });
            let text = || {
                format!(
                    "regression bundle {}: operator {} subtask {} epoch {}, {} golden emissions; it passes on this build; run it with clink replay run-test {}",
                    args.out.display(),
                    m.operator,
                    m.subtask,
                    m.epoch,
                    m.golden_emissions,
                    args.out.display()
                )
            };
            out.report(doc, text, Exit::Passed)
        }
        Err(e) => out.stop(Exit::Failed, format!("refused: {e}")),
    }
}

/// The epoch of `op` subtask `subtask` the bundle holds, when it holds one.
fn the_one_epoch(bundle: &Bundle, op: OperatorId, subtask: u32) -> Result<u64, String> {
    let held: Vec<u64> = bundle
        .manifest
        .epochs
        .iter()
        .filter(|e| e.role == "operator" && e.operator_id() == op && e.subtask == subtask)
        .map(|e| e.epoch)
        .collect();
    match held.as_slice() {
        [one] => Ok(*one),
        [] => {
            Err(format!("--epoch not given, and the bundle holds no captured epoch of operator {op} subtask {subtask}"))
        }
        several => Err(format!(
            "--epoch not given, and the bundle holds {} of operator {op} subtask {subtask}: {several:?}; name one",
            count(several.len(), "epoch", "epochs")
        )),
    }
}
