//! `clink trace-validate`: check one run's protocol trace against the
//! specification with TLC.

use std::path::PathBuf;

use clap::Args;
use clink_basics::exit::Exit;
use clink_formal::trace::{merge, read_run, read_vocabulary, validate_trace, ValidationError, Verdict};
use clink_html::trace_validation::{trace_validation_page, TraceOutcome};
use serde_json::json;

use super::{decimal_u64, write_html, FormalArgs, Output};

/// Validate a run's protocol trace against the TLA+ specification.
///
/// Merges the run's per-process files (CLINK_PROTOCOL_TRACE_DIR), keeps one
/// job, generates the trace modules and runs TLC on formal/ExactlyOnce.tla.
/// Exit 0 accepted; 1 rejected (naming the first event no step could produce);
/// 3 when Java or the pinned jar is missing, or TLC did not finish (a timeout,
/// a crash); 2 on bad usage or a trace that cannot be read (a directory
/// holding a link, a non-regular file or an unreadable entry is refused, with
/// its name). Every path is taken against the working directory. With --html, the verdict and a timeline of the trace (the
/// first diverging event highlighted) are also written as one self-contained
/// HTML file, also when TLC is missing (exit 3).
#[derive(Args, Debug)]
pub struct TraceValidateArgs {
    /// The directory holding the run's *.ndjson trace files.
    #[arg(long, value_name = "DIR")]
    trace: PathBuf,
    /// The job to validate (default: the only job in the trace).
    #[arg(long, value_name = "ID", value_parser = decimal_u64)]
    job: Option<u64>,
    #[command(flatten)]
    formal: FormalArgs,
    /// Print the verdict as JSON (format clink-trace-validation, version 1).
    #[arg(long)]
    json: bool,
    /// Also write the verdict and the trace's protocol timeline as one
    /// self-contained HTML file.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// When the trace is not accepted, keep the generated trace modules and
    /// TLC's output in a temporary directory (named in the result) to read;
    /// without it they are removed.
    #[arg(long)]
    keep_modules: bool,
}

pub fn main(args: TraceValidateArgs) -> Exit {
    let out = Output::new("trace-validate", args.json);
    let shown = args.trace.display().to_string();
    // The trace is read (and refused when it does not read) before anything
    // is asked of TLC: a malformed trace is bad input whatever tools are here.
    let formal_dir = clink_formal::tools::formal_dir(args.formal.formal_dir.as_deref());
    let trace = read_vocabulary(&formal_dir)
        .map_err(|e| e.to_string())
        .and_then(|v| read_run(&v, &args.trace).map_err(String::from))
        .and_then(|lines| merge(lines, args.job).map_err(String::from));
    let trace = match trace {
        Ok(trace) => trace,
        Err(e) => return out.refuse(format!("{shown}: {e}")),
    };
    let tools = match args.formal.locate() {
        Ok(t) => t,
        Err(why) => {
            // Without TLC the trace can still be drawn.
            if let Some(path) = &args.html {
                let page = trace_validation_page(&shown, &trace, TraceOutcome::Unavailable(why.to_string()));
                if let Err(e) = write_html(path, &clink_html::render(&page)) {
                    return out.refuse(e);
                }
            }
            return out.stop(Exit::NotEstablished, format!("trace validation unavailable: {why}"));
        }
    };
    let validation = match validate_trace(&tools, &trace) {
        Ok(v) => v,
        // The trace read; the tools did not finish (TLC timed out, crashed or
        // could not start, or no scratch space): nothing was established.
        Err(e @ (ValidationError::Tlc(_) | ValidationError::Scratch { .. })) => {
            return out.stop(Exit::NotEstablished, format!("{shown}: trace validation did not finish: {e}"))
        }
        // Skipped and counted, never judged: unsupported, not a pass.
        Err(ValidationError::OutOfScope(scope)) => {
            return out.stop(Exit::NotEstablished, format!("{shown}: skipped, {scope}"))
        }
        Err(e) => return out.refuse(format!("{shown}: {e}")),
    };
    for tie in &validation.ties {
        eprintln!("clink trace-validate: {shown}: timestamp tie (ordered by file name): {tie}");
    }
    if let (Some(path), false) = (&args.html, matches!(validation.verdict, Verdict::Error(_))) {
        let page = trace_validation_page(&shown, &trace, TraceOutcome::Validated(&validation));
        if let Err(e) = write_html(path, &clink_html::render(&page)) {
            return out.refuse(e);
        }
    }
    let modules = match (&validation.modules_dir, args.keep_modules) {
        (Some(dir), false) => {
            // Best effort: a scratch directory left behind is untidy, not wrong.
            let _ = std::fs::remove_dir_all(dir);
            None
        }
        (dir, _) => dir.as_ref().map(|d| d.display().to_string()),
    };
    let hint = match (&validation.modules_dir, &modules) {
        (_, Some(d)) => format!("the generated modules and TLC's output are kept in {d}"),
        (Some(_), None) => "--keep-modules keeps the generated modules and TLC's output".to_string(),
        (None, None) => String::new(),
    };
    let kept = || if hint.is_empty() { String::new() } else { format!("\n  {hint}") };
    let (verdict, exit, text) = match &validation.verdict {
        Verdict::Accepted { events } => (
            json!({"verdict": "accepted"}),
            Exit::Passed,
            format!(
                "{}: accepted: {events} events are a behaviour of the specification ({:.2}s)",
                args.trace.display(),
                validation.seconds
            ),
        ),
        Verdict::Rejected { k, event } => (
            json!({"verdict": "rejected", "event_index": k, "event": event}),
            Exit::Failed,
            format!(
                "{}: REJECTED at event {k} of {}: no step of the specification produces {event}{}",
                args.trace.display(),
                validation.events,
                kept()
            ),
        ),
        Verdict::Violated { invariant, k } => (
            json!({"verdict": "violated", "event_index": k, "invariant": invariant}),
            Exit::Failed,
            format!(
                "{}: VIOLATED: the state after event {k} of {} breaks the invariant {invariant}{}",
                args.trace.display(),
                validation.events,
                kept()
            ),
        ),
        Verdict::Error(e) => {
            let kept = if hint.is_empty() { String::new() } else { format!("; {hint}") };
            return out.stop(
                Exit::NotEstablished,
                format!("{}: TLC did not check the trace: {e}{kept}", args.trace.display()),
            );
        }
    };
    let mut doc = json!({
        "format": "clink-trace-validation", "version": 1, "trace": args.trace.display().to_string(),
        "events": validation.events, "seconds": validation.seconds, "modules_dir": modules, "exit_code": exit.code(),
        "invariants_checked": validation.checked, "ties": validation.ties,
    });
    if let (Some(doc), Some(v)) = (doc.as_object_mut(), verdict.as_object()) {
        doc.extend(v.clone());
    }
    out.report(doc, || text, exit)
}
