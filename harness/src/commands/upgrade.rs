//! `clink upgrade record` and `clink upgrade check`: the command line over
//! `clink_upgrade`. Isolation is established here, before anything runs,
//! by `clink_isolation` (the proof `clink isolation run` makes): the command
//! re-executes itself once under the proven isolation, and the process
//! inside confirms the claim it is handed before it starts any build.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use clink_basics::exit::Exit;
use clink_isolation::claim::claimed;
use clink_isolation::Proof;
use clink_upgrade::check::{check, CheckArgs};
use clink_upgrade::record::{record, RecordArgs};
use clink_upgrade::{Bounds, Build};

use super::Output;

/// Upgrade validation: record evidence with a baseline build, check a candidate against it.
#[derive(Args, Debug)]
pub struct UpgradeArgs {
    #[command(subcommand)]
    command: UpgradeCommand,
}

#[derive(Subcommand, Debug)]
enum UpgradeCommand {
    Record(RecordCli),
    Check(CheckCli),
}

#[derive(Args, Debug)]
struct BoundsCli {
    /// Wall time of any one process the command starts.
    #[arg(long, value_name = "SECONDS", default_value_t = 120)]
    run_timeout_s: u64,
    /// Resident memory of any one process.
    #[arg(long, value_name = "MIB", default_value_t = 2048)]
    max_rss_mib: u64,
    /// Bytes written under --out.
    #[arg(long, value_name = "MIB", default_value_t = 1024)]
    max_output_mib: u64,
    /// The whole command.
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    timeout_s: u64,
    /// Print the report as JSON (format clink-upgrade-report, version 1).
    #[arg(long)]
    json: bool,
}

impl BoundsCli {
    fn bounds(&self) -> Bounds {
        Bounds {
            run_timeout_s: self.run_timeout_s,
            max_rss_mib: self.max_rss_mib,
            max_output_mib: self.max_output_mib,
            timeout_s: self.timeout_s,
        }
    }
}

/// Record upgrade evidence with the baseline build.
///
/// Runs the baseline's job over the definition's input up to its cut, takes
/// a savepoint there while the job runs, exports it with the tools build,
/// stops the job, and writes the evidence set (clink-upgrade-evidence v1)
/// under <out>/evidence. Prints the set's digest (the SHA-256 of its
/// evidence.json): keep it where the set is not. Compares the baseline's
/// committed output and the savepoint's state with the reference at the
/// cut and publishes either way. Exit 0 recorded and the baseline agrees
/// with the reference; 1 it does not; 2 bad usage (an existing --out, an
/// unsupported definition); 3 not established (a bound, an interrupt, a
/// capability missing, isolation not proven).
#[derive(Args, Debug)]
struct RecordCli {
    /// The test definition (clink-upgrade-test version 1).
    #[arg(long, value_name = "FILE")]
    test: PathBuf,
    /// A fresh directory for the evidence, the logs and the report.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// The clink that exports, verifies and lists checkpoint datasets.
    #[arg(long, value_name = "FILE")]
    tools_clink: PathBuf,
    /// The baseline build's clink binary: the build whose state is recorded.
    #[arg(long, value_name = "FILE")]
    baseline_clink: PathBuf,
    /// The job file the baseline runs.
    #[arg(long, value_name = "FILE")]
    baseline_job: PathBuf,
    #[command(flatten)]
    bounds: BoundsCli,
}

/// Check a candidate build against recorded upgrade evidence.
///
/// Verifies the evidence against --evidence-digest before anything runs,
/// restores the baseline and the candidate each from its own copy of the
/// savepoint, takes a savepoint of each restored job before it reads
/// anything new, publishes the continuation, runs to END and compares:
/// output rows as typed multisets, state logically (the tools build's
/// state-cat), both against the independent reference too. Every command,
/// its exit status and its log are kept under --out, with report.json
/// (clink-upgrade-report v1) and report.txt. Exit 0 every required check
/// passed; 1 a required check failed; 2 bad usage; 3 not established.
#[derive(Args, Debug)]
struct CheckCli {
    /// The test definition (clink-upgrade-test version 1).
    #[arg(long, value_name = "FILE")]
    test: PathBuf,
    /// The evidence set (`<record --out>/evidence`).
    #[arg(long, value_name = "DIR")]
    evidence: PathBuf,
    /// The digest `record` printed.
    #[arg(long, value_name = "SHA256")]
    evidence_digest: String,
    /// A fresh directory for the logs, the scratch copies and the report.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// The clink that exports, verifies and lists checkpoint datasets.
    #[arg(long, value_name = "FILE")]
    tools_clink: PathBuf,
    /// The baseline build's clink binary (the one that recorded the evidence).
    #[arg(long, value_name = "FILE")]
    baseline_clink: PathBuf,
    /// The job file the baseline runs.
    #[arg(long, value_name = "FILE")]
    baseline_job: PathBuf,
    /// The candidate build's clink binary: the build being checked.
    #[arg(long, value_name = "FILE")]
    candidate_clink: PathBuf,
    /// The job file the candidate runs (it may differ from the baseline's).
    #[arg(long, value_name = "FILE")]
    candidate_job: PathBuf,
    /// Also write the report as one self-contained HTML file (the verdict,
    /// every check, every command run with how it ended).
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    #[command(flatten)]
    bounds: BoundsCli,
}

/// Refuses an existing --out before anything re-executes (so the refusal is
/// reported once), then establishes isolation for the whole command.
fn isolate_self(out: &Output, fresh_out: &std::path::Path) -> Result<Proof, Exit> {
    if claimed().is_none() && fresh_out.exists() {
        return Err(out.refuse(format!("--out {} exists; give a fresh directory", fresh_out.display())));
    }
    super::isolation::isolate_this_command()
}

pub fn main(args: UpgradeArgs) -> Exit {
    match args.command {
        UpgradeCommand::Record(a) => {
            let out = Output::new("upgrade record", a.bounds.json);
            let proof = match isolate_self(&out, &a.out) {
                Ok(p) => p,
                Err(exit) => return exit,
            };
            clink_upgrade::runner::catch_interrupts();
            let args = RecordArgs {
                test: a.test,
                out: a.out.clone(),
                tools: a.tools_clink,
                baseline: Build { clink: a.baseline_clink, job: a.baseline_job },
                bounds: a.bounds.bounds(),
            };
            match record(&args, proof) {
                Ok(o) => finish(&out, &a.out, o.text, o.exit),
                Err(e) => out.refuse(e),
            }
        }
        UpgradeCommand::Check(a) => {
            let out = Output::new("upgrade check", a.bounds.json);
            let proof = match isolate_self(&out, &a.out) {
                Ok(p) => p,
                Err(exit) => return exit,
            };
            clink_upgrade::runner::catch_interrupts();
            let args = CheckArgs {
                test: a.test,
                evidence: a.evidence,
                digest: a.evidence_digest,
                out: a.out.clone(),
                tools: a.tools_clink,
                baseline: Build { clink: a.baseline_clink, job: a.baseline_job },
                candidate: Build { clink: a.candidate_clink, job: a.candidate_job },
                bounds: a.bounds.bounds(),
                html: a.html,
            };
            match check(&args, proof) {
                Ok(o) => finish(&out, &a.out, o.text, o.exit),
                Err(e) => out.refuse(e),
            }
        }
    }
}

fn finish(out: &Output, dir: &std::path::Path, text: String, exit: Exit) -> Exit {
    if out.json {
        match std::fs::read_to_string(dir.join("report.json")) {
            Ok(doc) => println!("{doc}"),
            Err(e) => return out.stop(Exit::NotEstablished, format!("report.json: {e}")),
        }
    } else {
        print!("{text}");
    }
    exit
}
