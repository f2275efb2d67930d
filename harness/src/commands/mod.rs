//! One module per `clink` subcommand: argument definitions, and the glue from
//! arguments to the libraries. No rule lives here.

pub mod compare;
pub mod gen_input;
pub mod incident_collect;
pub mod incident_regress;
pub mod incident_verify;
pub mod reference;
pub mod replay;
pub mod run;
pub mod trace_validate;

/// Exit codes shared by every command.
pub const EXIT_OK: u8 = 0;
pub const EXIT_FAILED: u8 = 1;
pub const EXIT_REFUSED: u8 = 2;
pub const EXIT_PARTIAL: u8 = 3;

/// Prints a refusal and returns its exit code.
pub fn refuse(message: impl std::fmt::Display) -> u8 {
    eprintln!("clink: {message}");
    EXIT_REFUSED
}
