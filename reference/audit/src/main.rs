//! `clink-reference-audit`: see the library's documentation.

fn main() -> std::process::ExitCode {
    let code = clink_reference_audit::main_with(std::env::args_os().skip(1).collect());
    std::process::ExitCode::from(code)
}
