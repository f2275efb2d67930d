//! The `probe` command: observe from where it runs ([`crate::probe`]),
//! judge, report, and only when isolation is proven here exec the command
//! it was given, handing it the claim ([`crate::claim`]). It sits above
//! both: the claim is confirmed with the probe's observation, and the
//! probe's observation knows nothing of claims.
//!
//! It never runs the command when the isolation is not proven.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::Path;

use crate::claim::{Claim, CLAIM_ENV};
use crate::probe::{judge_inside, observe, write_report};
use crate::{Mechanism, Verdict};

/// What the `probe` command was asked.
#[derive(Debug, Clone)]
pub struct ProbeArgs {
    pub port: u16,
    pub nonce: String,
    pub report: std::path::PathBuf,
    /// The mechanism it runs under (`None`: the probe without isolation).
    pub mechanism: Option<Mechanism>,
    /// Run this, by exec, once the isolation is proven here.
    pub command: Vec<OsString>,
}

/// The `probe` command: observe, report, and run the command only when the
/// isolation is proven from here. Returns its exit code when it does not
/// exec: 0 reported; 1 a command withheld because isolation is not
/// enforced; 3 withheld because nothing could be decided; 2 the command
/// could not be started or the report could not be written.
pub fn probe_main(a: &ProbeArgs) -> i32 {
    let mut report = observe(a.port, &a.nonce);
    let control = format!("127.0.0.1:{}", a.port);
    let Some((program, args)) = a.command.split_first() else {
        return if write_report(&a.report, &report).is_ok() { 0 } else { 2 };
    };
    let (verdict, why) = match a.mechanism {
        Some(m) => judge_inside(m, &report, &control),
        None => (Verdict::Inconclusive, "a command is run only under a mechanism".to_string()),
    };
    if verdict != Verdict::Enforced {
        report.command = format!("withheld: {}: {why}", verdict.as_str());
        // The proof outside reads this report and says why.
        let _ = write_report(&a.report, &report);
        return verdict.exit().code() as i32;
    }
    report.command = "started".into();
    if let Err(e) = write_report(&a.report, &report) {
        eprintln!("clink isolation: the probe's report: {e}; the command was not run");
        return 2;
    }
    let claim = Claim::new(a.mechanism.unwrap_or(Mechanism::UnshareRn), &why, &control, &a.nonce);
    let err = std::process::Command::new(program).args(args).env(CLAIM_ENV, claim.to_env()).exec();
    report.command = format!("not started: {}: {err}", Path::new(program).display());
    let _ = write_report(&a.report, &report);
    eprintln!("clink isolation: {}: {err}", Path::new(program).display());
    2
}
