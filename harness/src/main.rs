//! `clink`: the command line of clink-rs.
//!
//! Exit codes are a contract ([`clink_basics::exit::Exit`]): 0 success; 1 a
//! job or a check failed; 2 bad usage or a refused input; 3 nothing failed but
//! something required could not be checked.

mod allocator;
mod commands;
mod progress;

use std::process::ExitCode;

/// Rows cross threads on every edge; glibc's malloc serialises their frees on
/// its arena locks, mimalloc does not (ARCHITECTURE.md, "Performance").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand};
use clink_basics::exit::Exit;

#[derive(Parser)]
#[command(name = "clink", version = clink_engine::defects::build_description(), about = "Run the clink engine and verify what it did.")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Run(commands::run::RunArgs),
    GenInput(commands::gen_input::GenInputArgs),
    Produce(commands::produce::ProduceArgs),
    Reference(commands::reference::ReferenceArgs),
    Compare(commands::compare::CompareArgs),
    Replay(commands::replay::ReplayArgs),
    /// Compare two emission dumps (the same as `clink replay diff`).
    ReplayDiff(commands::replay::DiffArgs),
    IncidentCollect(commands::incident_collect::IncidentCollectArgs),
    IncidentVerify(commands::incident_verify::IncidentVerifyArgs),
    IncidentRegress(commands::incident_regress::IncidentRegressArgs),
    IncidentScope(commands::incident_scope::IncidentScopeArgs),
    IncidentReconcile(commands::incident_reconcile::IncidentReconcileArgs),
    TraceValidate(commands::trace_validate::TraceValidateArgs),
    Savepoint(commands::job_requests::SavepointArgs),
    Stop(commands::job_requests::StopArgs),
    Checkpoint(commands::checkpoint::CheckpointArgs),
    StateCat(commands::state::StateCatArgs),
    StateDiff(commands::state::StateDiffArgs),
    CheckSavepoint(commands::state::CheckSavepointArgs),
    Capabilities(commands::capabilities::CapabilitiesArgs),
    Upgrade(commands::upgrade::UpgradeArgs),
    Isolation(commands::isolation::IsolationArgs),
    Capture(commands::capture::CaptureArgs),
}

fn main() -> ExitCode {
    restore_default_sigpipe();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help and --version are not usage errors.
            let _ = e.print();
            return Exit::Passed.into();
        }
        Err(e) => return refuse_usage(&e).into(),
    };
    if replays_captures(&cli.command) {
        allocator::keep_freed_pages();
    }
    let exit = match cli.command {
        Command::Run(args) => commands::run::main(args),
        Command::GenInput(args) => commands::gen_input::main(args),
        Command::Produce(args) => commands::produce::main(args),
        Command::Reference(args) => commands::reference::main(args),
        Command::Compare(args) => commands::compare::main(args),
        Command::Replay(args) => commands::replay::main(args),
        Command::ReplayDiff(args) => commands::replay::diff_main(args),
        Command::IncidentCollect(args) => commands::incident_collect::main(args),
        Command::IncidentVerify(args) => commands::incident_verify::main(args),
        Command::IncidentRegress(args) => commands::incident_regress::main(args),
        Command::IncidentScope(args) => commands::incident_scope::main(args),
        Command::IncidentReconcile(args) => commands::incident_reconcile::main(args),
        Command::TraceValidate(args) => commands::trace_validate::main(args),
        Command::Savepoint(args) => commands::job_requests::savepoint(args),
        Command::Stop(args) => commands::job_requests::stop(args),
        Command::Checkpoint(args) => commands::checkpoint::main(args),
        Command::StateCat(args) => commands::state::cat(args),
        Command::StateDiff(args) => commands::state::diff(args),
        Command::CheckSavepoint(args) => commands::state::check_savepoint(args),
        Command::Capabilities(args) => commands::capabilities::main(args),
        Command::Upgrade(args) => commands::upgrade::main(args),
        Command::Isolation(args) => commands::isolation::main(args),
        Command::Capture(args) => commands::capture::main(args),
    };
    exit.into()
}

/// Commands that decode and drop captures by the hundred, then exit.
fn replays_captures(command: &Command) -> bool {
    matches!(command, Command::IncidentVerify(_) | Command::IncidentRegress(_) | Command::Replay(_))
}

/// A usage error: clap's text, or with `--json` anywhere on the line, the
/// same refusal as one JSON document, as every other refusal is.
fn refuse_usage(e: &clap::Error) -> Exit {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.iter().any(|a| a == "--json") {
        let _ = e.print();
        return Exit::Refused;
    }
    let command = args.iter().find(|a| !a.starts_with('-')).map_or("clink", String::as_str);
    let reason = e.render().to_string();
    let doc = serde_json::json!({
        "format": "clink-command-result",
        "version": 1,
        "command": command,
        "result": Exit::Refused.as_str(),
        "exit_code": Exit::Refused.code(),
        "reason": reason.trim_end(),
    });
    println!("{doc}");
    Exit::Refused
}

/// A closed pipe on standard output (`clink ... | head`) ends the process
/// quietly, as it does for other command-line tools, instead of a panic in
/// `println!`.
#[cfg(unix)]
fn restore_default_sigpipe() {
    // SAFETY: setting a signal's disposition to the default has no
    // preconditions; it runs before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[cfg(not(unix))]
fn restore_default_sigpipe() {}
