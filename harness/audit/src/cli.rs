//! The `clink-audit` command line (the binary is clink-harness's
//! `src/bin/clink-audit.rs`, so the generated suites can run it).
//!
//! The command line only: it reads the configuration, takes the state
//! directory, and hands the work to [`crate::runner`] and
//! [`crate::view`]. It adds no check; every verdict is one the real
//! `clink` and reference processes reached.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::config::AuditConfig;
use crate::ledger::{acknowledge, published_report_sha256, Ack, Ledger, Step};
use crate::outcome::Outcome;
use crate::runner::{now_ms, CycleEnd, RunError, RunProgress, Runner};
use crate::view::{self, Expectations};
use clap::{Args, Parser, Subcommand};

/// Audit a running job again and again: each completed checkpoint is
/// collected, scoped, computed by the operator's reference, verified under
/// proven network isolation and reconciled with the destination.
///
/// Exit codes: run and poll 0 the cycle(s) ended, 1 a discrepancy was found,
/// 3 the disk budget stopped the runner or it was interrupted, 2 refused (a
/// configuration, another runner holding the state directory). status: the
/// state's code (0 healthy, 1 discrepancy, 3 stopped, incomplete, behind or
/// stale, 5 no eligible scope), 2 refused.
#[derive(Parser)]
#[command(name = "clink-audit", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// One cycle (for cron or another scheduler).
    Run(RunArgs),
    /// Cycles in the foreground until SIGINT or SIGTERM.
    Poll(PollArgs),
    /// What has been verified, what has not, and why (from the state directory alone).
    Status(StatusArgs),
    /// Acknowledge an audit's discrepancy with an operator's note; it stays
    /// listed. Only a discrepancy is acknowledged, and only the report that
    /// says it: the acknowledgement names that report's SHA-256, so a report
    /// published after it (a later attempt, another finding) is
    /// unacknowledged. The configuration is checked as `run` checks it.
    Acknowledge(AckArgs),
}

#[derive(Args)]
struct ConfigArg {
    /// The clink-audit-config version 1 document.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
}

#[derive(Args)]
struct RunArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// The clink binary the children run (default: the one beside clink-audit, else CLINK_BIN).
    #[arg(long, value_name = "PATH")]
    clink: Option<PathBuf>,
    /// Print the cycle's result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct PollArgs {
    #[command(flatten)]
    run: RunArgs,
    /// Seconds between the end of one cycle and the start of the next.
    #[arg(long, value_name = "S", default_value = "5")]
    interval_s: u64,
    /// Stop after this many cycles (default: until stopped).
    #[arg(long, value_name = "N")]
    cycles: Option<u64>,
}

#[derive(Args)]
struct StatusArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Print the status document (clink-audit-status version 1).
    #[arg(long)]
    json: bool,
    /// Also write the status as one self-contained HTML page.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// `stopped` when no runner holds the state directory and no cycle ended within this.
    #[arg(long, value_name = "S", default_value = "600")]
    cycle_within_s: u64,
    /// `stale` when the newest verified checkpoint completed longer ago than this.
    #[arg(long, value_name = "S", default_value = "3600")]
    stale_after_s: u64,
    /// `behind` when more completed checkpoints than this wait for their first attempt.
    #[arg(long, value_name = "N", default_value = "3")]
    behind_after: u64,
}

#[derive(Args)]
struct AckArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// The audit's id (as status lists it).
    #[arg(long, value_name = "ID")]
    audit: String,
    /// The attempt whose discrepancy is acknowledged (default: the one that
    /// found the audit's discrepancy; any other is refused).
    #[arg(long, value_name = "N")]
    attempt: Option<u32>,
    /// The SHA-256 of the report read (status lists it as report_sha256):
    /// refused when the audit's published report is no longer that one.
    #[arg(long, value_name = "HEX")]
    report_sha256: Option<String>,
    /// What the operator knows of it.
    #[arg(long, value_name = "TEXT")]
    note: String,
    /// Who acknowledges (default: $USER).
    #[arg(long, value_name = "NAME")]
    by: Option<String>,
}

fn refuse(why: impl std::fmt::Display) -> ExitCode {
    eprintln!("clink-audit: {why}");
    ExitCode::from(2)
}

fn read_config(arg: &ConfigArg) -> Result<AuditConfig, ExitCode> {
    AuditConfig::read(&arg.config).map_err(|e| refuse(format!("{}: refused: {e}", arg.config.display())))
}

fn clink_path(explicit: &Option<PathBuf>) -> Result<PathBuf, ExitCode> {
    let beside = std::env::current_exe().ok().and_then(|p| p.parent().map(|d| d.join("clink")));
    let candidate = explicit.clone().or_else(|| std::env::var_os("CLINK_BIN").map(PathBuf::from)).or(beside);
    match candidate {
        Some(p) if p.is_file() => Ok(p),
        Some(p) => Err(refuse(format!("{}: no clink binary there (--clink or CLINK_BIN)", p.display()))),
        None => Err(refuse("no clink binary found (--clink or CLINK_BIN)")),
    }
}

/// The current cycle and step on a terminal; nothing otherwise.
struct Progress {
    bar: Option<indicatif::ProgressBar>,
}

impl Progress {
    fn new(json: bool) -> Progress {
        use std::io::IsTerminal;
        let bar = (!json && std::io::stderr().is_terminal()).then(|| {
            let bar = indicatif::ProgressBar::new_spinner();
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        Progress { bar }
    }
}

impl RunProgress for Progress {
    fn step(&mut self, cycle: u64, checkpoint: u64, step: Step) {
        if let Some(bar) = &self.bar {
            bar.set_message(format!("cycle {cycle}: checkpoint {checkpoint}: {}", step.as_str()));
        }
    }

    fn published(&mut self, checkpoint: u64, outcome: Outcome, reason: &str) {
        if let Some(bar) = &self.bar {
            bar.println(outcome_line(&format!("checkpoint {checkpoint}"), Some(outcome), reason));
        }
    }
}

fn open<'a>(config: &'a AuditConfig, args: &RunArgs, command: &str) -> Result<Runner<'a>, ExitCode> {
    let clink = clink_path(&args.clink)?;
    Runner::open(config, &clink, command).map_err(|e| match e {
        RunError::Lock(e) => refuse(e),
        other => refuse(other),
    })
}

fn summary(ledger: &Ledger, end: &CycleEnd, json: bool) {
    let last = ledger.cycles.last();
    if json {
        let doc =
            serde_json::json!({"format": "clink-audit-cycle", "version": 1, "end": format!("{end:?}"), "cycle": last});
        println!("{doc}");
        return;
    }
    if let Some(c) = last {
        for a in &c.audits {
            // The reason of the attempt this cycle made (the ledger's record of it).
            let reason = ledger
                .audits
                .get(&a.checkpoint)
                .and_then(|r| r.attempts.iter().rev().find(|t| t.cycle == c.n))
                .and_then(|t| t.reason.clone())
                .unwrap_or_default();
            println!("{}", outcome_line(&format!("cycle {}: checkpoint {}", c.n, a.checkpoint), a.outcome, &reason));
        }
        if let Some(note) = &c.note {
            println!("cycle {}: {note}", c.n);
        }
    }
}

/// One audit's line: where, the outcome and, unless it passed, why.
fn outcome_line(at: &str, outcome: Option<Outcome>, reason: &str) -> String {
    let name = outcome.map_or("unfinished", |o| o.as_str());
    match outcome {
        Some(Outcome::Passed) | None => format!("{at}: {name}"),
        Some(_) if reason.is_empty() => format!("{at}: {name}"),
        Some(_) => format!("{at}: {name}: {}", clink_basics::text::escape(reason)),
    }
}

fn exit_of(end: &CycleEnd) -> ExitCode {
    match end {
        CycleEnd::Done { discrepancies: 0, .. } => ExitCode::SUCCESS,
        CycleEnd::Done { .. } => ExitCode::from(1),
        CycleEnd::Blocked(_) | CycleEnd::Interrupted => ExitCode::from(3),
    }
}

fn run(args: RunArgs) -> ExitCode {
    let config = match read_config(&args.config) {
        Ok(c) => c,
        Err(code) => return code,
    };
    clink_upgrade::runner::catch_interrupts();
    let mut runner = match open(&config, &args, "clink-audit run") {
        Ok(r) => r,
        Err(code) => return code,
    };
    let mut progress = Progress::new(args.json);
    match runner.cycle(&mut progress) {
        Ok(end) => {
            summary(runner.ledger(), &end, args.json);
            exit_of(&end)
        }
        Err(e) => refuse(e),
    }
}

fn poll(args: PollArgs) -> ExitCode {
    let config = match read_config(&args.run.config) {
        Ok(c) => c,
        Err(code) => return code,
    };
    clink_upgrade::runner::catch_interrupts();
    let mut runner = match open(&config, &args.run, "clink-audit poll") {
        Ok(r) => r,
        Err(code) => return code,
    };
    let mut progress = Progress::new(args.run.json);
    let mut found_discrepancy = false;
    let mut n = 0;
    loop {
        let end = match runner.cycle(&mut progress) {
            Ok(end) => end,
            Err(e) => return refuse(e),
        };
        n += 1;
        summary(runner.ledger(), &end, args.run.json);
        found_discrepancy |= matches!(end, CycleEnd::Done { discrepancies: 1.., .. });
        let interrupted = end == CycleEnd::Interrupted || clink_upgrade::runner::interrupted();
        if interrupted || args.cycles.is_some_and(|max| n >= max) {
            let why = if interrupted { "interrupted (SIGINT or SIGTERM)" } else { "--cycles reached" };
            if let Err(e) = runner.stopped(why) {
                return refuse(e);
            }
            if interrupted {
                return ExitCode::from(3);
            }
            return if found_discrepancy { ExitCode::from(1) } else { ExitCode::SUCCESS };
        }
        let until = Instant::now() + Duration::from_secs(args.interval_s);
        while Instant::now() < until && !clink_upgrade::runner::interrupted() {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn status(args: StatusArgs) -> ExitCode {
    let config = match read_config(&args.config) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let expect = Expectations {
        cycle_within_s: args.cycle_within_s,
        stale_after_s: args.stale_after_s,
        backlog_threshold: args.behind_after,
    };
    let view = match view::status(&config, expect, now_ms()) {
        Ok(v) => v,
        Err(e) => return refuse(format!("{}: {e}", config.state_dir)),
    };
    if let Some(path) = &args.html {
        let page = crate::page::page(&view);
        if let Err(e) = write_new(path, page.as_bytes()) {
            return refuse(format!("{}: {e}", path.display()));
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&view.document).unwrap_or_default());
    } else {
        print!("{}", view::text(&view));
    }
    ExitCode::from(view.state.exit_code())
}

fn write_new(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("html.tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

fn ack(args: AckArgs) -> ExitCode {
    let config = match read_config(&args.config) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let dir = Path::new(&config.state_dir);
    // The same check of the configuration against its state directory as
    // `run` makes (Runner::open): a state directory is one configuration's.
    let ledger = match Ledger::of_config(&config) {
        Ok(l) => l,
        Err(e) => return refuse(e),
    };
    if args.note.trim().is_empty() {
        return refuse("--note: an acknowledgement needs a note");
    }
    let attempt = match acknowledgeable(&ledger, &args.audit, args.attempt, dir) {
        Ok(n) => n,
        Err(why) => return refuse(why),
    };
    let report = match published_report_sha256(dir, &args.audit) {
        Ok(Some(sha)) => sha,
        Ok(None) => {
            return refuse(format!("--audit {}: its report is not published yet; nothing to acknowledge", args.audit))
        }
        Err(e) => return refuse(e),
    };
    if let Some(read) = args.report_sha256.as_deref().filter(|read| *read != report) {
        return refuse(format!(
            "--audit {} --report-sha256 {read}: its published report is now {report}; read it again before acknowledging",
            args.audit
        ));
    }
    let by = args.by.or_else(|| std::env::var("USER").ok()).unwrap_or_else(|| "unknown".into());
    let record = Ack::new(&args.audit, attempt, &report, &args.note, now_ms(), &by);
    match acknowledge(dir, &record) {
        Ok(path) => {
            println!(
                "acknowledged the discrepancy of {} found by attempt {attempt}, report SHA-256 {report} ({}); it stays listed, and a report published after this one is not acknowledged",
                record.audit,
                path.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => refuse(e),
    }
}

/// The attempt whose discrepancy `audit` may acknowledge, or why not: an
/// unknown audit, an outcome that is no discrepancy, another attempt.
fn acknowledgeable(ledger: &Ledger, audit: &str, asked: Option<u32>, dir: &Path) -> Result<u32, String> {
    let Some(rec) = ledger.records().find(|r| r.id == audit) else {
        return Err(format!("--audit {audit}: no such audit in {}", dir.display()));
    };
    let Some(found) = rec.discrepancy_attempt() else {
        let outcome = rec.outcome.map_or("unfinished", |o| o.as_str());
        return Err(format!(
            "--audit {audit}: its outcome is {outcome}, not a discrepancy: only a discrepancy is acknowledged"
        ));
    };
    match asked {
        Some(n) if n != found => {
            Err(format!("--audit {audit} --attempt {n}: the discrepancy is attempt {found}'s; attempt {n} found none"))
        }
        _ => Ok(found),
    }
}

/// The binary's `main`.
pub fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Run(a) => run(a),
        Command::Poll(a) => poll(a),
        Command::Status(a) => status(a),
        Command::Acknowledge(a) => ack(a),
    }
}
