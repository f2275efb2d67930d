//! `clink incident-regress`: freeze one epoch of a bundle as a regression bundle.

use std::path::PathBuf;

use clap::Args;
use clink_basics::exit::Exit;
use clink_bundle::read_bundle;
use clink_verify::regress::regress;
use serde_json::json;

use super::{Output, Which};

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
    #[command(flatten)]
    which: Which,
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
    let w = &args.which;
    match regress(&bundle, w.op, w.subtask, w.epoch, &args.out) {
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
