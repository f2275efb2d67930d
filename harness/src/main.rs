//! `clink`: the command line of clink-rs.
//!
//! Exit codes are a contract: 0 success; 1 a job or a check failed; 2 bad usage
//! or a refused input; 3 nothing failed but something required could not be
//! checked.

mod commands;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "clink", version, about = "Run the clink engine and verify what it did.")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Run(commands::run::RunArgs),
    GenInput(commands::gen_input::GenInputArgs),
    Reference(commands::reference::ReferenceArgs),
    Compare(commands::compare::CompareArgs),
    Replay(commands::replay::ReplayArgs),
    IncidentCollect(commands::incident_collect::IncidentCollectArgs),
    IncidentVerify(commands::incident_verify::IncidentVerifyArgs),
    IncidentRegress(commands::incident_regress::IncidentRegressArgs),
    TraceValidate(commands::trace_validate::TraceValidateArgs),
    ReplayDiff(commands::replay::ReplayDiffArgs),
}

fn main() -> ExitCode {
    restore_default_sigpipe();
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Run(args) => commands::run::main(args),
        Command::GenInput(args) => commands::gen_input::main(args),
        Command::Reference(args) => commands::reference::main(args),
        Command::Compare(args) => commands::compare::main(args),
        Command::Replay(args) => commands::replay::main(args),
        Command::IncidentCollect(args) => commands::incident_collect::main(args),
        Command::IncidentVerify(args) => commands::incident_verify::main(args),
        Command::IncidentRegress(args) => commands::incident_regress::main(args),
        Command::TraceValidate(args) => commands::trace_validate::main(args),
        Command::ReplayDiff(args) => commands::replay::diff_main(args),
    };
    ExitCode::from(code)
}

/// A closed pipe on standard output (`clink ... | head`) ends the process
/// quietly, as it does for other command-line tools, instead of a panic in
/// `println!`.
fn restore_default_sigpipe() {
    // SAFETY: setting a signal's disposition to the default has no
    // preconditions; it runs before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
