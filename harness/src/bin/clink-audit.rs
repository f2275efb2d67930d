//! `clink-audit`: continuous audits of a running job (the command line is
//! `clink_audit::cli`; the binary lives here so the suites can run it).

fn main() -> std::process::ExitCode {
    clink_audit::cli::main()
}
