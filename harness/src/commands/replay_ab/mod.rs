//! `clink replay ab`: the same captured epochs, the same starting states,
//! two builds; per epoch `identical` or the first emission where they part.
//!
//! This build replays in process. The candidate is a binary run as a child,
//! one `replay epoch --out` per epoch, in its own process group, with a time
//! limit, a memory bound and a bound on the bytes it may write, under the
//! loopback-only isolation the whole command re-executes itself into (the one
//! proof of `clink isolation`), pinned and confined (`candidate.rs`). Before the candidate is asked to replay an
//! epoch, its `capabilities --json` must declare everything the epoch needs
//! ([`clink_replay::ab`]); an epoch it cannot declare is refused, never tried.
//!
//! It never writes into the capture or checkpoint directory, never runs the
//! candidate without enforced isolation, and never counts an epoch the
//! candidate did not replay, or whose dump names another epoch, as identical.

mod candidate;
mod page;
mod source;

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use candidate::Candidate;
use clap::Args;
use clink_basics::exit::Exit;
use clink_basics::ids::OperatorId;
use clink_isolation::Proof;
use clink_replay::ab::{compare, missing, needs, Comparison, Declared};
use clink_replay::emissions::read_dump;
use clink_replay::{replay, EpochRef, ReplayError, ReplayOutcome};
use clink_upgrade::runner::{Runner, Running, Stopped};
use clink_upgrade::Bounds;
use serde_json::Value as Json;

use super::{decimal_u32, decimal_u64, operator_id, Output};
use source::Source;

/// How many emissions of each build a divergence shows from its first difference.
const CONTEXT_ROWS: usize = 20;

/// Replay captured epochs with this build and with a candidate build, from
/// the same starting state and the same captured events, and report per
/// epoch `identical` or the first differing emission (its index and both
/// rows), with totals.
///
/// The candidate runs its own `replay epoch --out` under proven
/// loopback-only network isolation, and only for epochs whose capture
/// format, state encodings and operator type its `capabilities --json`
/// declares. A bundle (--bundle) is hashed against its manifest before
/// anything runs and again after, and this build replays its vouched bytes.
/// The candidate judged is the candidate that ran: it must be an ELF
/// executable (a script is refused: what would run is its interpreter and
/// whatever it reads); it is copied where it may not write, and the copy,
/// its loader and every shared library the loader resolves for it are
/// hashed. It runs with an empty environment, confined by Landlock: it may
/// execute only its copy and loader, read only those, its libraries and the
/// evidence, and write only its dumps. Every pinned file is hashed again
/// after every run; a change refuses the whole A/B. The report names each
/// file by SHA-256, and all of them by one `code_sha256`.
/// Exit 0 every selected epoch compared and identical, and at least one
/// emission compared; 1 an epoch diverged; 2 bad usage, malformed
/// evidence, a candidate that cannot be pinned, or pinned code that changed
/// during a run; 3 not established (isolation not proven, a capability missing,
/// the candidate killed at a bound or failing, an epoch this build cannot
/// replay (unless --allow-unsupported), nothing emitted in any selected
/// epoch, so nothing was compared, or no Landlock to confine the candidate).
#[derive(Args, Debug)]
pub struct AbArgs {
    #[command(flatten)]
    source: super::EvidenceArgs,
    /// The candidate build's clink binary: an ELF executable for this
    /// machine (a script is refused: no hash of it names what would run).
    #[arg(long, value_name = "FILE")]
    candidate_clink: PathBuf,
    /// Only this operator (decimal id).
    #[arg(long, value_name = "ID", value_parser = operator_id)]
    op: Option<OperatorId>,
    /// Only this subtask.
    #[arg(long, value_name = "S", value_parser = decimal_u32)]
    subtask: Option<u32>,
    /// Only this epoch.
    #[arg(long, value_name = "N", value_parser = decimal_u64)]
    epoch: Option<u64>,
    /// Wall time of one candidate process; past it the process group is killed.
    #[arg(long, value_name = "SECONDS", default_value_t = 120)]
    run_timeout_s: u64,
    /// Resident memory of one candidate process.
    #[arg(long, value_name = "MIB", default_value_t = 2048)]
    max_rss_mib: u64,
    /// Bytes the candidate may write (its dumps and logs, together).
    #[arg(long, value_name = "MIB", default_value_t = 4096)]
    max_output_mib: u64,
    /// The whole command.
    #[arg(long, value_name = "SECONDS", default_value_t = 3600)]
    timeout_s: u64,
    /// Candidate processes run at once (default: the machine's cores).
    #[arg(long, value_name = "N", value_parser = decimal_u64)]
    jobs: Option<u64>,
    /// Keep the candidate's pinned copy (DIR/candidate) and its dumps and
    /// logs (DIR/run) in DIR, a fresh directory; otherwise they go to a
    /// temporary directory that is removed.
    #[arg(long, value_name = "DIR")]
    keep: Option<PathBuf>,
    /// Also write the report as one self-contained HTML file: a row per
    /// epoch and, for a divergence, both builds' emissions side by side from
    /// the first difference, the differing cells marked.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Let epochs this build cannot replay (a sink's, one with several
    /// inputs) stand aside: without it any such epoch leaves the run not
    /// established (exit 3).
    #[arg(long)]
    allow_unsupported: bool,
    /// Print the report as JSON (format clink-replay-ab, version 1).
    #[arg(long)]
    json: bool,
}

/// What became of one selected epoch.
#[derive(Debug, Clone)]
pub(crate) enum Status {
    Identical {
        emissions: usize,
    },
    Diverged {
        index: usize,
        ours: Vec<Vec<String>>,
        theirs: Vec<Vec<String>>,
        counts: (usize, usize),
    },
    /// The candidate does not declare what the epoch needs: never run.
    MissingCapability(Vec<String>),
    /// The candidate was run and gave no comparable dump (killed at a bound,
    /// failed, wrote another epoch's dump).
    Candidate(String),
    /// This build cannot replay it here either (a sink, several inputs).
    Unsupported(String),
    /// Evidence replay needs is missing.
    Unavailable(String),
    /// The evidence is malformed.
    Refused(String),
}

impl Status {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Status::Identical { .. } => "identical",
            Status::Diverged { .. } => "diverged",
            Status::MissingCapability(_) => "missing-capability",
            Status::Candidate(_) => "candidate-failed",
            Status::Unsupported(_) => "unsupported",
            Status::Unavailable(_) => "unavailable",
            Status::Refused(_) => "refused",
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct EpochResult {
    pub(crate) at: EpochRef,
    pub(crate) operator_type: String,
    pub(crate) status: Status,
}

/// The exit of a whole run, and when it is not 0 or 1 the reason in one
/// line: a divergence is a finding; malformed evidence is refused; anything
/// not compared (an epoch unsupported here, unless allowed) leaves the run
/// not established, and so does a run that compared no emission at all.
pub(crate) fn exit_of(results: &[EpochResult], allow_unsupported: bool) -> (Exit, Option<String>) {
    let any = |f: fn(&Status) -> bool| results.iter().any(|r| f(&r.status));
    let count = |f: fn(&Status) -> bool| results.iter().filter(|r| f(&r.status)).count();
    let emitted: usize =
        results.iter().map(|r| if let Status::Identical { emissions } = r.status { emissions } else { 0 }).sum();
    let unsupported = count(|s| matches!(s, Status::Unsupported(_)));
    if any(|s| matches!(s, Status::Diverged { .. })) {
        (Exit::Failed, None)
    } else if any(|s| matches!(s, Status::Refused(_))) {
        (Exit::Refused, Some("the evidence of an epoch is malformed".into()))
    } else if any(|s| matches!(s, Status::MissingCapability(_) | Status::Candidate(_) | Status::Unavailable(_))) {
        (
            Exit::NotEstablished,
            Some(
                "an epoch was not compared (a capability missing, the candidate failing, or its evidence unavailable)"
                    .into(),
            ),
        )
    } else if unsupported > 0 && !allow_unsupported {
        let n = clink_basics::text::count(unsupported, "epoch", "epochs");
        (
            Exit::NotEstablished,
            Some(format!("{n} this build cannot replay stood aside uncompared (--allow-unsupported lets them)")),
        )
    } else if !any(|s| matches!(s, Status::Identical { .. })) {
        (Exit::NotEstablished, Some("no selected epoch was compared".into()))
    } else if emitted == 0 {
        (
            Exit::NotEstablished,
            Some("every compared epoch emitted nothing in both builds: no emission was compared".into()),
        )
    } else {
        (Exit::Passed, None)
    }
}

pub fn main(args: AbArgs) -> Exit {
    let out = Output::new("replay ab", args.json);
    if let Err(why) = check_usage(&args) {
        return out.refuse(why);
    }
    let proof = match super::isolation::isolate_this_command() {
        Ok(p) => p,
        Err(exit) => return exit,
    };
    if !proof.enforced() {
        return out.stop(
            Exit::NotEstablished,
            format!("isolation was not proven, so no candidate was run: {}", proof.line()),
        );
    }
    clink_upgrade::runner::catch_interrupts();
    let scratch;
    let work = match &args.keep {
        Some(dir) => dir.clone(),
        None => match tempfile::Builder::new().prefix("clink-replay-ab-").tempdir() {
            Ok(d) => {
                scratch = d;
                scratch.path().to_path_buf()
            }
            Err(e) => return out.stop(Exit::NotEstablished, format!("a temporary directory: {e}")),
        },
    };
    match run(&args, &work, &proof) {
        Ok(report) => finish(&out, &args, report),
        Err((exit, why)) => out.stop(exit, why),
    }
}

/// Bad usage, found before anything re-executes or runs.
fn check_usage(args: &AbArgs) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let candidate = &args.candidate_clink;
    match std::fs::metadata(candidate) {
        Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => {}
        Ok(_) => return Err(format!("--candidate-clink {}: not an executable file", candidate.display())),
        Err(e) => return Err(format!("--candidate-clink {}: {e}", candidate.display())),
    }
    if let Some(keep) = &args.keep {
        if clink_isolation::claim::claimed().is_none() && keep.exists() {
            return Err(format!("--keep {} exists; give a fresh directory", keep.display()));
        }
    }
    if args.run_timeout_s == 0 || args.timeout_s == 0 {
        return Err("--run-timeout-s and --timeout-s must be at least 1".into());
    }
    Ok(())
}

/// Everything the report is made of.
pub(crate) struct Report {
    pub(crate) candidate: Json,
    pub(crate) isolation: Json,
    pub(crate) capabilities: Result<Declared, String>,
    pub(crate) results: Vec<EpochResult>,
    pub(crate) seconds: f64,
    pub(crate) job: u64,
    pub(crate) evidence: String,
}

fn run(args: &AbArgs, work: &Path, proof: &Proof) -> Result<Report, (Exit, String)> {
    let refused = |why: String| (Exit::Refused, why);
    let started = Instant::now();
    let given = &args.source;
    let source = match (&given.bundle, &given.capture_dir, &given.checkpoint_dir) {
        (Some(root), _, _) => Source::open_bundle(root).map_err(refused)?,
        (None, Some(capture), Some(checkpoint)) => {
            Source::Dirs { capture: capture.clone(), checkpoint: checkpoint.clone(), job: given.job }
        }
        _ => return Err(refused("give --capture-dir with --checkpoint-dir, or --bundle".into())),
    };
    let selected = select(args, &source).map_err(refused)?;
    let bounds = Bounds {
        run_timeout_s: args.run_timeout_s,
        max_rss_mib: args.max_rss_mib,
        max_output_mib: args.max_output_mib,
        timeout_s: args.timeout_s,
    };
    // The output bound counts what the candidate writes (its dumps, its
    // logs) under `run/`, never its own copy beside it.
    let out = work.join("run");
    let mut runner = Runner::new(&out, bounds).map_err(|e| refused(format!("{}: {e}", out.display())))?;
    let dumps = out.join("dumps");
    std::fs::create_dir_all(&dumps).map_err(|e| refused(format!("{}: {e}", dumps.display())))?;
    // What runs is a copy of its own, in a directory it is never granted,
    // with its loader and libraries pinned beside it.
    let evidence = [source.capture_dir(), source.checkpoint_dir()];
    let mut candidate = Candidate::pin(&args.candidate_clink, &work.join("candidate"), &mut runner, &evidence, &dumps)?;
    let capabilities = candidate.declared(&mut runner);
    candidate.still_pinned("capabilities --json")?;
    let progress = crate::progress::Progress::bar(args.json, "A/B", "epochs");
    progress.set_length(selected.len() as u64);
    // Up to `jobs` candidates run at once; each result keeps its place.
    let jobs = match args.jobs {
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX).max(1),
        None => std::thread::available_parallelism().map_or(1, usize::from),
    };
    let mut results: Vec<Option<EpochResult>> = vec![None; selected.len()];
    let mut in_flight: VecDeque<(usize, Box<Pending>)> = VecDeque::new();
    for (i, at) in selected.into_iter().enumerate() {
        progress.message(at.to_string());
        match start_epoch(&mut runner, &candidate, &source, &dumps, &capabilities, at) {
            Started::Done(r) => {
                results[i] = Some(r);
                progress.inc();
            }
            Started::Running(p) => in_flight.push_back((i, p)),
        }
        while in_flight.len() >= jobs {
            let Some((k, p)) = in_flight.pop_front() else { break };
            results[k] = Some(finish_checked(&mut runner, &mut candidate, args, &source, *p)?);
            progress.inc();
        }
    }
    while let Some((k, p)) = in_flight.pop_front() {
        results[k] = Some(finish_checked(&mut runner, &mut candidate, args, &source, *p)?);
        progress.inc();
    }
    drop(progress);
    let results: Vec<EpochResult> = results.into_iter().flatten().collect();
    source.still_vouched().map_err(refused)?;
    Ok(Report {
        candidate: candidate.to_json(&capabilities),
        isolation: proof.to_json(),
        capabilities,
        results,
        seconds: started.elapsed().as_secs_f64(),
        job: source.job(),
        evidence: source.describe(),
    })
}

/// The captured epochs the selection names, in operator, subtask, epoch order.
fn select(args: &AbArgs, source: &Source) -> Result<Vec<EpochRef>, String> {
    let chosen: Vec<EpochRef> = source
        .epochs()?
        .into_iter()
        .filter(|at| args.op.is_none_or(|op| op == at.operator))
        .filter(|at| args.subtask.is_none_or(|s| s == at.subtask))
        .filter(|at| args.epoch.is_none_or(|e| e == at.epoch))
        .collect();
    if chosen.is_empty() {
        return Err(format!("{}: no captured epoch matches the selection", source.describe()));
    }
    Ok(chosen)
}

/// An epoch whose candidate process is running, with this build's replay of it.
struct Pending {
    result: EpochResult,
    running: Running,
    dump: PathBuf,
    ours: Result<ReplayOutcome, ReplayError>,
}

/// An epoch started: decided already (refused, unsupported, unavailable), or
/// with its candidate running.
enum Started {
    Done(EpochResult),
    Running(Box<Pending>),
}

/// Loads the epoch, gates it on the candidate's declaration, starts the
/// candidate on it, and replays it with this build while the candidate runs.
fn start_epoch(
    runner: &mut Runner,
    candidate: &Candidate,
    source: &Source,
    dumps: &Path,
    capabilities: &Result<Declared, String>,
    at: EpochRef,
) -> Started {
    let done = |operator_type: &str, status| {
        Started::Done(EpochResult { at: at.clone(), operator_type: operator_type.to_string(), status })
    };
    let evidence = match source.load(&at) {
        Ok(e) => e,
        Err(e) => return done("", replay_failure(e)),
    };
    let operator_type = evidence.spec.type_name.as_str();
    if let Err(e) = clink_replay::replayable(&evidence.spec) {
        return done(operator_type, replay_failure(e));
    }
    let lacking = match capabilities {
        Ok(declared) => missing(&needs(&evidence), declared),
        Err(why) => vec![format!("any declaration ({why})")],
    };
    if !lacking.is_empty() {
        return done(operator_type, Status::MissingCapability(lacking));
    }
    let dump = dumps.join(format!("op-{}-subtask-{}-epoch-{}.emit", at.operator, at.subtask, at.epoch));
    let name = format!("candidate-{}-{}-{}", at.operator, at.subtask, at.epoch);
    let running = match candidate.spawn(runner, &name, &candidate_args(source, &at, &dump)) {
        Ok(r) => r,
        Err(e) => return done(operator_type, Status::Candidate(e)),
    };
    let ours = replay(&evidence);
    let result = EpochResult {
        at: at.clone(),
        operator_type: operator_type.to_string(),
        status: Status::Unavailable(String::new()),
    };
    Started::Running(Box::new(Pending { result, running, dump, ours }))
}

/// [`finish_epoch`], then every pinned file of the candidate hashed again.
fn finish_checked(
    runner: &mut Runner,
    candidate: &mut Candidate,
    args: &AbArgs,
    source: &Source,
    pending: Pending,
) -> Result<EpochResult, (Exit, String)> {
    let result = finish_epoch(runner, args, source, pending);
    candidate.still_pinned(&format!("replay epoch {}", result.at))?;
    Ok(result)
}

/// Waits for the candidate within its limits and compares its dump with
/// this build's emissions.
fn finish_epoch(runner: &mut Runner, args: &AbArgs, source: &Source, pending: Pending) -> EpochResult {
    let Pending { mut result, running, dump, ours } = pending;
    let finished = runner.wait(running, Some(Duration::from_secs(args.run_timeout_s)));
    let at = &result.at;
    result.status = match (ours, finished) {
        (Err(e), _) => replay_failure(e),
        (Ok(_), Err(stopped)) => Status::Candidate(stopped_reason(&stopped)),
        (Ok(_), Ok(f)) if !f.ok() => {
            Status::Candidate(format!("replay epoch ended with {}: {}", f.describe(), f.last_error_line()))
        }
        (Ok(ours), Ok(_)) => match read_dump(&dump) {
            Err(e) => Status::Candidate(format!("its dump: {e}")),
            Ok(theirs) => match compare(source.job(), at, &ours.emissions, &theirs) {
                Err(wrong) => Status::Candidate(wrong.to_string()),
                Ok(Comparison::Identical { emissions }) => Status::Identical { emissions },
                Ok(Comparison::Diverged { difference, ours: n_ours, theirs: n_theirs }) => {
                    let window = |rows: &[clink_engine::value::Row]| {
                        rows.iter().skip(difference.index).take(CONTEXT_ROWS).map(cells).collect()
                    };
                    Status::Diverged {
                        index: difference.index,
                        ours: window(&ours.emissions),
                        theirs: window(&theirs.rows),
                        counts: (n_ours, n_theirs),
                    }
                }
            },
        },
    };
    // The dump has been read; it would only count against the output bound.
    if args.keep.is_none() {
        let _ = std::fs::remove_file(&dump);
    }
    result
}

fn candidate_args(source: &Source, at: &EpochRef, dump: &Path) -> Vec<String> {
    vec![
        "replay".into(),
        "epoch".into(),
        "--capture-dir".into(),
        source.capture_dir().display().to_string(),
        "--checkpoint-dir".into(),
        source.checkpoint_dir().display().to_string(),
        "--job".into(),
        source.job().to_string(),
        "--op".into(),
        at.operator.to_string(),
        "--subtask".into(),
        at.subtask.to_string(),
        "--epoch".into(),
        at.epoch.to_string(),
        "--out".into(),
        dump.display().to_string(),
    ]
}

fn stopped_reason(stopped: &Stopped) -> String {
    match stopped {
        Stopped::RunTimeout { seconds, .. } => {
            format!("killed: no exit within --run-timeout-s {seconds} (its process group was killed)")
        }
        other => format!("stopped: {other}"),
    }
}

fn replay_failure(e: ReplayError) -> Status {
    match e {
        ReplayError::Unsupported(why) => Status::Unsupported(why),
        ReplayError::Unavailable(why) => Status::Unavailable(why),
        ReplayError::Refused(why) => Status::Refused(why),
        ReplayError::Failed(why) => Status::Refused(format!("this build failed to replay it: {why}")),
    }
}

/// A row as cells people read: each value with its type, so a string "1"
/// and an integer 1 never look alike, and a timestamp as the UTC time it is
/// (the engine's one rendering of epoch milliseconds), not a count of them.
fn cells(row: &clink_engine::value::Row) -> Vec<String> {
    use clink_engine::value::Value;
    row.iter()
        .map(|v| match v {
            Value::Null => "Null".to_string(),
            Value::Str(s) => format!("Str({s:?})"),
            Value::Bool(_) => format!("Bool({v})"),
            Value::Int(_) => format!("Int({v})"),
            Value::Float(x) => format!("Float({x:?})"),
            Value::Decimal(_) => format!("Decimal({v})"),
            Value::Timestamp(ms) => {
                format!("Timestamp({} UTC)", clink_engine::operators::clickhouse_sink::datetime64_millis(*ms))
            }
        })
        .collect()
}

fn finish(out: &Output, args: &AbArgs, report: Report) -> Exit {
    let (exit, why) = exit_of(&report.results, args.allow_unsupported);
    if let Some(why) = &why {
        eprintln!("replay ab: exit {}: {why}", exit.code());
    }
    let mut doc = page::json(&report, exit);
    doc["exit_reason"] = why.clone().map_or(Json::Null, Json::from);
    if let Some(path) = &args.html {
        if let Err(e) = super::write_html(path, &page::html(&report, exit)) {
            return out.refuse(format!("--html {}: {e}", path.display()));
        }
    }
    out.report(doc, || page::text(&report), exit)
}

/// One row's cells as the JSON report and the text show them.
pub(crate) fn row_text(cells: &[String]) -> String {
    format!("[{}]", cells.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An epoch's result for the module's tests (page.rs's too).
    pub(super) fn result(epoch: u64, status: Status) -> EpochResult {
        EpochResult {
            at: EpochRef { operator: OperatorId(2), subtask: 0, epoch },
            operator_type: "tumbling_window".into(),
            status,
        }
    }

    #[test]
    fn identical_epochs_that_emitted_something_pass() {
        let results = [result(1, Status::Identical { emissions: 0 }), result(2, Status::Identical { emissions: 4 })];
        assert_eq!(exit_of(&results, false), (Exit::Passed, None));
    }

    #[test]
    fn identical_epochs_that_all_emitted_nothing_establish_nothing() {
        let results = [result(1, Status::Identical { emissions: 0 }), result(2, Status::Identical { emissions: 0 })];
        let (exit, why) = exit_of(&results, false);
        assert_eq!(exit, Exit::NotEstablished);
        assert!(why.is_some_and(|w| w.contains("no emission was compared")));
    }

    #[test]
    fn an_unsupported_epoch_is_not_established_unless_allowed() {
        let results = [result(1, Status::Identical { emissions: 2 }), result(2, Status::Unsupported("a sink".into()))];
        let (exit, why) = exit_of(&results, false);
        assert_eq!(exit, Exit::NotEstablished);
        assert!(why.is_some_and(|w| w.contains("1 epoch") && w.contains("--allow-unsupported")));
        assert_eq!(exit_of(&results, true), (Exit::Passed, None));
    }

    #[test]
    fn a_divergence_fails_whatever_else_stood_aside() {
        let diverged = Status::Diverged { index: 0, ours: vec![], theirs: vec![], counts: (1, 0) };
        let results = [result(1, Status::Unavailable("gone".into())), result(2, diverged)];
        assert_eq!(exit_of(&results, true).0, Exit::Failed);
        assert_eq!(exit_of(&[], true).0, Exit::NotEstablished);
    }
}
