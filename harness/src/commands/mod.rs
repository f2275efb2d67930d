//! One module per `clink` subcommand: argument definitions, and the glue from
//! arguments to the libraries. No rule lives here.
//!
//! Every command returns an [`Exit`]; every command a gate or a script reads
//! takes `--json`, and prints its refusals as JSON too, so nothing parses
//! prose.

pub mod capabilities;
pub mod capture;
pub mod checkpoint;
pub mod compare;
pub mod gen_input;
pub mod incident_collect;
pub mod incident_reconcile;
pub mod incident_regress;
pub mod incident_scope;
pub mod incident_verify;
pub mod isolation;
pub mod job_requests;
pub mod produce;
pub mod reference;
pub mod replay;
pub mod replay_ab;
pub mod run;
pub mod state;
pub mod trace_validate;
pub mod upgrade;

use std::path::PathBuf;

use clink_basics::exit::Exit;
use clink_basics::ids::{parse_decimal_u32, parse_decimal_u64, OperatorId};
use serde_json::json;

/// Where a command's result goes: text for people, or one JSON document.
#[derive(Debug, Clone, Copy)]
pub struct Output {
    pub command: &'static str,
    pub json: bool,
}

impl Output {
    pub fn new(command: &'static str, json: bool) -> Self {
        Output { command, json }
    }

    /// Prints a refusal (to standard error, or as JSON on standard output) and returns exit 2.
    pub fn refuse(&self, reason: impl std::fmt::Display) -> Exit {
        self.stop(Exit::Refused, reason)
    }

    /// Prints why the command stopped with `exit` and returns it.
    pub fn stop(&self, exit: Exit, reason: impl std::fmt::Display) -> Exit {
        if self.json {
            let doc = json!({
                "format": "clink-command-result",
                "version": 1,
                "command": self.command,
                "result": exit.as_str(),
                "exit_code": exit.code(),
                "reason": reason.to_string(),
            });
            println!("{doc}");
        } else {
            eprintln!("clink {}: {}", self.command, clink_basics::text::escape(&reason.to_string()));
        }
        exit
    }

    /// Prints a result: the JSON document, or the text.
    pub fn report(&self, json: serde_json::Value, text: impl FnOnce() -> String, exit: Exit) -> Exit {
        if self.json {
            println!("{json}");
        } else {
            let text = text();
            if !text.is_empty() {
                println!("{text}");
            }
        }
        exit
    }
}

/// Writes an HTML report: to a temporary name beside `path`, then renamed
/// over it, so a reader never sees half a report.
pub fn write_html(path: &std::path::Path, html: &str) -> Result<(), String> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    let fail = |e: std::io::Error| format!("--html {}: {e}", path.display());
    let mut tmp = tempfile::Builder::new().prefix(".clink-report-").suffix(".html").tempfile_in(dir).map_err(fail)?;
    std::io::Write::write_all(&mut tmp, html.as_bytes()).map_err(fail)?;
    // A report is for sharing: readable by others, as a plain file would be.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        tmp.as_file().set_permissions(std::fs::Permissions::from_mode(0o644)).map_err(fail)?;
    }
    tmp.persist(path).map_err(|e| fail(e.error))?;
    Ok(())
}

/// Where the formal tools are: the repository's formal/ directory and the
/// pinned TLA+ jar.
#[derive(clap::Args, Debug)]
pub struct FormalArgs {
    /// The repository's formal/ directory (default: CLINK_FORMAL_DIR, else the build's).
    #[arg(long, value_name = "DIR")]
    pub formal_dir: Option<std::path::PathBuf>,
    /// Where the pinned TLA+ jar is installed (default: CLINK_FORMAL_TOOLS_DIR,
    /// else ${CLINK_DEPS_PREFIX:-~/.clink-deps}/formal-tools). TLC starts with
    /// the CDS archive beside it (tla2tools.jsa, made by gates/fetch-tools)
    /// only when its sidecar verifies.
    #[arg(long, value_name = "DIR")]
    pub formal_tools_dir: Option<std::path::PathBuf>,
}

impl FormalArgs {
    pub fn locate(&self) -> Result<clink_formal::FormalTools, clink_formal::tools::ToolsError> {
        clink_formal::locate(self.formal_dir.as_deref(), self.formal_tools_dir.as_deref())
    }
}

/// Which captured epoch: an operator, its subtask, an epoch.
#[derive(clap::Args, Debug)]
pub struct Which {
    /// Operator id (decimal).
    #[arg(long, value_name = "ID", value_parser = operator_id)]
    pub op: OperatorId,
    /// The operator's subtask.
    #[arg(long, value_name = "S", default_value = "0", value_parser = decimal_u32)]
    pub subtask: u32,
    /// The epoch: the events between checkpoints N-1 and N.
    #[arg(long, value_name = "N", value_parser = decimal_u64)]
    pub epoch: u64,
}

/// Where a command's captured evidence is: a run's capture and checkpoint
/// directories, or an incident bundle (`capture push`, `replay ab`).
#[derive(clap::Args, Debug)]
pub struct EvidenceArgs {
    /// The flight recorder's directory (clink run --capture-dir), with --checkpoint-dir.
    #[arg(long, value_name = "DIR", requires = "checkpoint_dir", conflicts_with = "bundle")]
    pub capture_dir: Option<PathBuf>,
    /// The job's checkpoint directory (the starting states).
    #[arg(long, value_name = "DIR", requires = "capture_dir")]
    pub checkpoint_dir: Option<PathBuf>,
    /// The job id (decimal), with --capture-dir.
    #[arg(long, value_name = "ID", default_value = "1", value_parser = decimal_u64)]
    pub job: u64,
    /// An incident bundle directory (clink incident-collect --out), instead of --capture-dir.
    #[arg(long, value_name = "DIR", required_unless_present = "capture_dir")]
    pub bundle: Option<PathBuf>,
}

/// clap's parser of an operator id (canonical decimal text).
pub fn operator_id(text: &str) -> Result<OperatorId, String> {
    OperatorId::parse(text).ok_or_else(|| format!("{text:?} is not an operator id (decimal digits, no leading zero)"))
}

/// clap's parser of a 64-bit id or number written as canonical decimal text.
pub fn decimal_u64(text: &str) -> Result<u64, String> {
    parse_decimal_u64(text)
        .ok_or_else(|| format!("{text:?} is not a decimal number (digits, no sign, no leading zero)"))
}

/// clap's parser of a subtask index.
pub fn decimal_u32(text: &str) -> Result<u32, String> {
    parse_decimal_u32(text).ok_or_else(|| format!("{text:?} is not a 32-bit decimal number"))
}
