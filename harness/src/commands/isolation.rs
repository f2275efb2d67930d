//! `clink isolation prove|run|probe`: the command line over
//! `clink_isolation`, the one proof of loopback-only network isolation that
//! the gates, `clink upgrade` and every isolated step use.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use clink_basics::exit::Exit;
use clink_isolation::claim::{claimed, confirm_here};
use clink_isolation::probe_command::{probe_main, ProbeArgs};
use clink_isolation::prove::{isolate, Outcome, Probe};
use clink_isolation::{Mechanism, Proof, Verdict};

use super::Output;

/// Loopback-only network isolation: prove it here, or run a command under it.
#[derive(Args, Debug)]
pub struct IsolationArgs {
    #[command(subcommand)]
    command: IsolationCommand,
}

#[derive(Subcommand, Debug)]
enum IsolationCommand {
    Prove(ProveCli),
    Run(RunCli),
    Probe(ProbeCli),
}

/// Prove that loopback-only network isolation is enforced on this machine.
///
/// The mechanism is `unshare -rn` (a new user and network namespace, `lo`
/// brought up inside). A control endpoint (a TCP listener on 127.0.0.1, its
/// port chosen by the system) must answer a probe run without isolation,
/// and the same probe run under `unshare -rn` must leave its own report
/// saying that the connection was refused, that `lo` is its only interface
/// and that loopback works. A wrapper that runs nothing, a probe that
/// crashes or prints nothing, is inconclusive: the absence of an answer is
/// never taken for a refusal. Where `unshare -rn` cannot run but `lo` is
/// already the only interface (a container started with --network none),
/// the environment is the isolation. Nothing outside 127.0.0.0/8 is ever
/// contacted.
///
/// Prints enforced, not-enforced, unavailable or inconclusive, and why.
/// Exit 0 enforced; 1 not enforced (the network was reachable under the
/// mechanism); 3 unavailable (no unshare, or user namespaces denied) or
/// inconclusive.
#[derive(Args, Debug)]
struct ProveCli {
    /// Print the proof as JSON (format clink-isolation-proof, version 1).
    #[arg(long)]
    json: bool,
}

/// Run a command under proven loopback-only network isolation.
///
/// Proves the isolation as `clink isolation prove` does, in the very
/// namespace the command then runs in: the probe inside execs the command
/// only once its own report proves the isolation, and hands it the claim in
/// CLINK_ISOLATION_CLAIM. SIGINT, SIGTERM and SIGHUP are passed on to it.
///
/// Exit: the command's own exit status (128 + the signal that ended it);
/// when the command was not run, 1 isolation not enforced, 3 unavailable or
/// inconclusive (the reason on standard error); 2 the command could not be
/// started.
#[derive(Args, Debug)]
struct RunCli {
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<OsString>,
}

/// The probe that `prove` and `run` start, once without isolation and once
/// under the mechanism (not for people).
///
/// Reads its namespace's interfaces, brings lo up, tries the control
/// endpoint, checks loopback, and writes its report (clink-isolation-probe
/// version 1) to --report. Given a command, execs it only when the report
/// proves the isolation under --mechanism.
#[derive(Args, Debug)]
struct ProbeCli {
    /// The control endpoint's port on 127.0.0.1.
    #[arg(long, value_name = "PORT")]
    control_port: u16,
    /// The proof's nonce: the control endpoint answers with it, the report carries it.
    #[arg(long)]
    nonce: String,
    /// Where the report goes (written beside, then renamed).
    #[arg(long, value_name = "FILE")]
    report: PathBuf,
    /// The mechanism the probe runs under: unshare-rn or environment.
    #[arg(long)]
    mechanism: Option<String>,
    /// A command to exec once the isolation is proven here.
    #[arg(last = true, value_name = "CMD")]
    command: Vec<OsString>,
}

/// Ends the process with a code outside the shared exit codes (a command's own).
fn exit_with(code: i32) -> ! {
    let _ = std::io::stdout().flush();
    std::process::exit(code)
}

fn probe() -> Result<Probe, String> {
    Probe::this_binary(&["isolation", "probe"])
}

pub fn main(args: IsolationArgs) -> Exit {
    match args.command {
        IsolationCommand::Prove(a) => {
            let out = Output::new("isolation prove", a.json);
            let probe = match probe() {
                Ok(p) => p,
                Err(e) => return out.stop(Exit::NotEstablished, e),
            };
            let proof = isolate(&probe, None).proof().clone();
            out.report(proof.to_json(), || proof.text().trim_end().to_string(), proof.verdict.exit())
        }
        IsolationCommand::Run(a) => {
            let out = Output::new("isolation run", false);
            let probe = match probe() {
                Ok(p) => p,
                Err(e) => return out.stop(Exit::NotEstablished, e),
            };
            match isolate(&probe, Some(&a.command)) {
                Outcome::Ran { status, .. } => exit_with(status),
                Outcome::NotRun(proof) | Outcome::Proved(proof) => {
                    out.stop(proof.verdict.exit(), format!("{}; the command was not run", proof.line()))
                }
            }
        }
        IsolationCommand::Probe(a) => {
            let mechanism = match a.mechanism.as_deref().map(|m| Mechanism::from_arg(m).ok_or(m)) {
                None => None,
                Some(Ok(m)) => Some(m),
                Some(Err(m)) => {
                    return Output::new("isolation probe", false)
                        .refuse(format!("--mechanism {m:?}: unshare-rn or environment"))
                }
            };
            let args =
                ProbeArgs { port: a.control_port, nonce: a.nonce, report: a.report, mechanism, command: a.command };
            exit_with(probe_main(&args))
        }
    }
}

/// Runs the rest of this command under the proven isolation, for a command
/// that starts builds it must not trust with the network (`upgrade`,
/// `replay ab`).
///
/// Outside, it re-executes this very command line once under the proof and
/// returns `Err(exit)` with the isolated command's exit once that has
/// finished. Inside, it confirms the claim it was handed from where it runs
/// and returns `Ok(proof)`. Where the command could not be run isolated it
/// returns `Ok` with the proof that says why: the caller then reports it and
/// runs no build.
pub fn isolate_this_command() -> Result<Proof, Exit> {
    if let Some(claim) = claimed() {
        return Ok(confirm_here(claim));
    }
    let command = std::env::current_exe().map(|exe| {
        let mut c: Vec<OsString> = vec![exe.into()];
        c.extend(std::env::args_os().skip(1));
        c
    });
    let (probe, command) = match (Probe::this_binary(&["isolation", "probe"]), command) {
        (Ok(p), Ok(c)) => (p, c),
        (Err(e), _) => return Ok(Proof::new(Verdict::Unavailable, e)),
        (_, Err(e)) => return Ok(Proof::new(Verdict::Unavailable, format!("this program's own path: {e}"))),
    };
    match isolate(&probe, Some(&command)) {
        Outcome::Ran { status, .. } => Err(match status {
            0 => Exit::Passed,
            1 => Exit::Failed,
            2 => Exit::Refused,
            _ => Exit::NotEstablished,
        }),
        Outcome::NotRun(proof) | Outcome::Proved(proof) => Ok(proof),
    }
}
