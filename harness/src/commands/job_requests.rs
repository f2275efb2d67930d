//! `clink savepoint` and `clink stop`: requests to a running job, answered
//! by its coordinator (`clink_engine::runtime::requests`).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use clink_basics::exit::Exit;
use clink_engine::checkpoint::CheckpointLayout;
use clink_engine::runtime::requests::{self, Outcome, RequestError, RequestKind, RequestResult};
use serde_json::json;

use super::Output;

/// Take a savepoint of a running job; the job runs on.
///
/// The job's live run takes a checkpoint whose COMPLETED marker says
/// `savepoint` and whose snapshots it never prunes, and answers with its id.
/// Exit 0 the savepoint completed (its id is printed); 1 it failed; 2 no
/// live run owns the directory; 3 no answer within --timeout-s.
#[derive(Args, Debug)]
pub struct SavepointArgs {
    #[command(flatten)]
    target: Target,
}

/// Stop a running job with a savepoint, its state kept.
///
/// The job's source ends its input at its next read; the job takes a
/// savepoint and stops. A later `clink run` over the same directory resumes
/// from it. Exit 0 the job stopped with a savepoint; 1 it ended otherwise;
/// 2 no live run owns the directory; 3 no answer within --timeout-s.
#[derive(Args, Debug)]
pub struct StopArgs {
    #[command(flatten)]
    target: Target,
}

#[derive(Args, Debug)]
struct Target {
    /// The running job's --checkpoint-dir.
    #[arg(long, value_name = "DIR")]
    checkpoint_dir: PathBuf,
    /// The job's id (its job file's job_id).
    #[arg(long, value_name = "ID", value_parser = super::decimal_u64)]
    job_id: u64,
    /// How long to wait for the answer.
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    timeout_s: u64,
    /// Print the answer (or the refusal) as JSON.
    #[arg(long)]
    json: bool,
}

pub fn savepoint(args: SavepointArgs) -> Exit {
    request(Output::new("savepoint", args.target.json), &args.target, RequestKind::Savepoint)
}

pub fn stop(args: StopArgs) -> Exit {
    request(Output::new("stop", args.target.json), &args.target, RequestKind::Stop)
}

fn request(out: Output, target: &Target, kind: RequestKind) -> Exit {
    let layout = CheckpointLayout::new(&target.checkpoint_dir, target.job_id);
    let request = match requests::submit(&layout, kind) {
        Ok(r) => r,
        Err(e @ RequestError::NotRunning { .. }) => return out.refuse(e),
        Err(e) => return out.refuse(format!("the request could not be put: {e}")),
    };
    let answer = match requests::wait_answer(&layout, &request.id, Duration::from_secs(target.timeout_s)) {
        Ok(answer) => answer,
        Err(e @ RequestError::TimedOut { .. }) => return out.stop(Exit::NotEstablished, e),
        Err(e) => return out.stop(Exit::Failed, e),
    };
    if kind == RequestKind::Stop && answer.outcome == Outcome::Stopped {
        // The answer comes as the run ends; its lock goes with the process.
        let _ = requests::wait_until_ended(&layout, Duration::from_secs(target.timeout_s));
    }
    report(out, &answer)
}

fn report(out: Output, answer: &RequestResult) -> Exit {
    let exit = match answer.outcome {
        Outcome::Completed | Outcome::Stopped => Exit::Passed,
        _ => Exit::Failed,
    };
    let doc = json!({
        "format": "clink-request-answer",
        "version": 1,
        "request": answer.id,
        "kind": answer.kind.as_str(),
        "outcome": answer.outcome,
        "checkpoint": answer.checkpoint,
        "reason": answer.reason,
        "exit_code": exit.code(),
    });
    let text = || match (answer.kind, answer.checkpoint) {
        (RequestKind::Savepoint, Some(c)) if exit == Exit::Passed => format!("savepoint {c}: {}", answer.reason),
        _ => format!("{} {:?}: {}", answer.kind.as_str(), answer.outcome, answer.reason),
    };
    out.report(doc, text, exit)
}
