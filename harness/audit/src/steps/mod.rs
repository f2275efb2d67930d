//! The five steps of one audit as child processes: the argument list each
//! child is given, the environment it may receive, and what its exit and
//! its JSON output mean for the audit.
//!
//! It owns the reading of the children's results, by field and by exit
//! code, never by the text of a message: a collection refusal is read by
//! its `kind`, a verification by its report (which must say it ran under
//! enforced isolation), a reconciliation by its report's findings. It never
//! starts a process itself (the runner does) and adds no check of its own:
//! every verdict it returns is one a child reached.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clink_upgrade::runner::{Finished, Stopped};
use serde_json::Value as Json;

use crate::config::{AuditConfig, ChildKind};
use crate::ledger::{Finding, Step};
use crate::outcome::{Outcome, Relationship};

mod artifacts;

use artifacts::first_line;
pub use artifacts::{collected_marker_sha256, reference_rows, scope_facts, spanned, ScopeFacts};

/// The verification profile every audit runs. `full` adds TLC's
/// protocol.conformance, which models the recoverable and commit-confirmed
/// sink families only: for the at-least-once ClickHouse sink it is
/// `unsupported`, so an audit under `full` could never pass.
pub const VERIFY_PROFILE: &str = "replay";

/// The variables every child receives beside its own credentials: how to
/// find programs and the formal tools, nothing secret.
const BASE_ENV: [&str; 9] = [
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "TMPDIR",
    "CLINK_FORMAL_DIR",
    "CLINK_FORMAL_TOOLS_DIR",
    "CLINK_DEPS_PREFIX",
    "JAVA_HOME",
];

/// The files of one audit, inside its directory under the state directory.
#[derive(Debug, Clone)]
pub struct AuditFiles {
    pub dir: PathBuf,
    pub bundle: PathBuf,
    pub scope: PathBuf,
    pub reference: PathBuf,
    pub state_out: PathBuf,
    pub verify: PathBuf,
    pub reconcile: PathBuf,
    pub report: PathBuf,
}

impl AuditFiles {
    pub fn new(dir: PathBuf) -> AuditFiles {
        AuditFiles {
            bundle: dir.join("bundle"),
            scope: dir.join("scope.json"),
            reference: dir.join("reference.ndjson"),
            state_out: dir.join("state-out.json"),
            verify: dir.join("verify.json"),
            reconcile: dir.join("reconcile.json"),
            report: dir.join("report.json"),
            dir,
        }
    }

    /// What a step writes, removed before the step runs again.
    pub fn outputs(&self, step: Step) -> Vec<&Path> {
        match step {
            Step::Collect => vec![&self.bundle],
            Step::Scope => vec![&self.scope],
            Step::Reference => vec![&self.reference, &self.state_out],
            Step::Verify => vec![&self.verify],
            Step::Reconcile => vec![&self.reconcile],
        }
    }
}

/// The largest held reference state read or hashed.
pub const MAX_STATE_BYTES: u64 = 1 << 30;

/// A windowed increment's base: the held state of an earlier verified
/// audit, and the SHA-256 recorded when it was held (the only hash that
/// vouches for it: the file's bytes now vouch for nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldState {
    pub checkpoint: u64,
    pub path: PathBuf,
    pub sha256: String,
}

/// What one audit's steps need to know.
pub struct StepContext<'a> {
    pub config: &'a AuditConfig,
    pub clink: &'a Path,
    pub checkpoint: u64,
    pub files: &'a AuditFiles,
    /// Collect these epochs (none: collection's default).
    pub epochs: Option<Vec<u64>>,
    /// A windowed increment's base: the held state to start from.
    pub since: Option<HeldState>,
    /// The SHA-256 of the COMPLETED marker the audit was selected by: the
    /// collected bundle must hold that checkpoint, not another of its id.
    pub marker_sha256: Option<String>,
}

/// A child to start.
pub struct Child {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, OsString)>,
    /// Variables the configuration names that are not set here.
    pub unset: Vec<String>,
}

/// What a step's result means for the audit.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// The step did its part; the note says what it established.
    Continue(String),
    /// The step decided the audit.
    Decided(Outcome, String, Vec<Finding>),
    /// Collection was refused because the job moved on mid-copy: collect again.
    CollectAgain(String),
    /// The increment's base is not on the lineage (a restore went below it):
    /// try the next older held state.
    OtherBase(String),
}

fn env_for(config: &AuditConfig, kind: ChildKind) -> (Vec<(String, OsString)>, Vec<String>) {
    let mut env: Vec<(String, OsString)> =
        BASE_ENV.iter().filter_map(|n| std::env::var_os(n).map(|v| (n.to_string(), v))).collect();
    let mut unset = Vec::new();
    for name in config.child_env(kind) {
        match std::env::var_os(name) {
            Some(v) => env.push((name.to_string(), v)),
            None => unset.push(name.to_string()),
        }
    }
    (env, unset)
}

fn path_arg(p: &Path) -> String {
    p.display().to_string()
}

/// The child of `step`.
pub fn child(step: Step, ctx: &StepContext) -> Child {
    let c = ctx.config;
    let f = ctx.files;
    let n = ctx.checkpoint.to_string();
    let clink = ctx.clink.to_path_buf();
    let since = ctx.since.as_ref().map(|h| h.checkpoint.to_string());
    let (kind, program, args) = match step {
        Step::Collect => {
            let mut a = vec![
                "incident-collect".into(),
                "--job".into(),
                c.job.id.clone(),
                "--checkpoint-dir".into(),
                c.job.checkpoint_dir.clone(),
                "--ha-dir".into(),
                c.job.ha_dir.clone(),
                "--capture-dir".into(),
                c.job.capture_dir.clone(),
                "--trace-dir".into(),
                c.job.trace_dir.clone(),
                "--include-state".into(),
                "--include-captures".into(),
                "--checkpoint".into(),
                n,
                "--out".into(),
                path_arg(&f.bundle),
                "--max-bytes".into(),
                c.bounds.bundle_bytes.to_string(),
                "--max-files".into(),
                c.bounds.bundle_files.to_string(),
                "--timeout-s".into(),
                c.bounds.child_timeout_s.to_string(),
                "--json".into(),
            ];
            if let Some(epochs) = &ctx.epochs {
                a.push("--epochs".into());
                a.push(epochs.iter().map(u64::to_string).collect::<Vec<_>>().join(","));
            }
            (ChildKind::Collect, clink, a)
        }
        Step::Scope => {
            let mut a = vec!["incident-scope".into(), path_arg(&f.bundle), "--checkpoint".into(), n];
            if let Some(m) = since {
                a.extend(["--since".into(), m]);
            }
            a.extend(["--out".into(), path_arg(&f.scope), "--json".into()]);
            (ChildKind::Scope, clink, a)
        }
        Step::Reference => {
            let mut argv: Vec<String> = c.reference.argv.clone();
            if ctx.since.is_some() {
                argv.extend(c.reference.with_state_in.iter().cloned());
            } else if scope_facts(&f.scope).is_ok_and(|s| s.from_run_start) {
                argv.extend(c.reference.from_run_start.iter().cloned());
            }
            let state_in = ctx.since.as_ref().map(|h| path_arg(&h.path)).unwrap_or_default();
            let args = argv[1..].iter().map(|a| substitute(a, f, &state_in)).collect();
            (ChildKind::Reference, PathBuf::from(&argv[0]), args)
        }
        Step::Verify => {
            let a = vec![
                "incident-verify".into(),
                path_arg(&f.bundle),
                "--isolated".into(),
                "--profile".into(),
                VERIFY_PROFILE.into(),
                "--json".into(),
            ];
            (ChildKind::Verify, clink, a)
        }
        Step::Reconcile => {
            let d = &c.destination;
            let mut a = vec!["incident-reconcile".into(), path_arg(&f.bundle), "--checkpoint".into(), n];
            if let Some(m) = since {
                a.extend(["--since".into(), m]);
            }
            a.extend(["--host-env".into(), d.endpoint_env.clone()]);
            if let Some(u) = &d.user_env {
                a.extend(["--user-env".into(), u.clone()]);
            }
            if let Some(p) = &d.password_env {
                a.extend(["--password-env".into(), p.clone()]);
            }
            match d.table.split_once('.') {
                Some((db, table)) => a.extend(["--database".into(), db.into(), "--table".into(), table.into()]),
                None => a.extend(["--table".into(), d.table.clone()]),
            }
            if !d.key.is_empty() {
                a.extend(["--key".into(), d.key.join(",")]);
            }
            a.extend([
                "--reference".into(),
                path_arg(&f.reference),
                "--query-timeout-ms".into(),
                (c.bounds.query_timeout_s * 1000).to_string(),
                "--max-rows-per-query".into(),
                c.bounds.rows.to_string(),
                "--max-artifact-bytes".into(),
                c.bounds.bundle_bytes.to_string(),
                "--settle-ms".into(),
                "200".into(),
                "--report".into(),
                path_arg(&f.reconcile),
                "--json".into(),
            ]);
            (ChildKind::Reconcile, clink, a)
        }
    };
    let (env, unset) = env_for(c, kind);
    Child { program, args, env, unset }
}

/// One argument with the fixed placeholders replaced; anything else is kept
/// as written (the reader refused any other `{...}`), and nothing is ever
/// split or interpreted.
fn substitute(arg: &str, f: &AuditFiles, state_in: &str) -> String {
    arg.replace("{scope}", &path_arg(&f.scope))
        .replace("{out}", &path_arg(&f.reference))
        .replace("{state_out}", &path_arg(&f.state_out))
        .replace("{state_in}", state_in)
}

/// A child the runner stopped: a bound reached is partial, anything else an error.
pub fn stopped(step: Step, why: &Stopped) -> Verdict {
    let outcome = match why {
        Stopped::RunTimeout { .. } | Stopped::Rss { .. } | Stopped::Output { .. } | Stopped::Deadline { .. } => {
            Outcome::Partial
        }
        _ => Outcome::Error,
    };
    Verdict::Decided(outcome, format!("{}: {why}", step.as_str()), Vec::new())
}

fn parse(stdout: &str) -> Option<Json> {
    serde_json::from_str(stdout.trim()).ok()
}

fn field<'a>(j: &'a Json, name: &str) -> Option<&'a str> {
    j.get(name).and_then(Json::as_str)
}

fn error(step: Step, done: &Finished, what: &str) -> Verdict {
    Verdict::Decided(
        Outcome::Error,
        format!("{}: {} ({what}): {}", step.as_str(), done.describe(), why_it_failed(done)),
        Vec::new(),
    )
}

/// For the operator: a `--json` child's refusal says why on stdout
/// (`clink-command-result`'s `reason`), anything else on stderr.
fn why_it_failed(done: &Finished) -> String {
    parse(&done.stdout)
        .filter(|j| field(j, "format") == Some("clink-command-result"))
        .and_then(|j| field(&j, "reason").map(str::to_string))
        .unwrap_or_else(|| done.last_error_line())
}

/// What a finished child means.
pub fn judge(step: Step, done: &Finished, ctx: &StepContext) -> Verdict {
    match step {
        Step::Collect => judge_collect(done, ctx),
        Step::Scope => judge_scope(done, ctx),
        Step::Reference => judge_reference(done, ctx),
        Step::Verify => judge_verify(done),
        Step::Reconcile => judge_reconcile(done, ctx),
    }
}

fn judge_collect(done: &Finished, ctx: &StepContext) -> Verdict {
    let step = Step::Collect;
    let Some(j) = parse(&done.stdout) else { return error(step, done, "no JSON result") };
    let reason = field(&j, "reason").unwrap_or("").to_string();
    match (field(&j, "result"), field(&j, "kind"), done.code) {
        (Some("published"), _, Some(0)) => match the_audits_checkpoint(ctx) {
            Err(why) => Verdict::Decided(Outcome::Error, format!("collect: {why}"), Vec::new()),
            Ok(()) => Verdict::Continue(format!(
                "collected {} files, {} bytes",
                j.get("files").and_then(Json::as_u64).unwrap_or(0),
                j.get("bytes").and_then(Json::as_u64).unwrap_or(0)
            )),
        },
        (Some("refused"), Some("changed"), _) => Verdict::CollectAgain(reason),
        // The marker was listed when the audit was selected: what is
        // missing now is its state, purged by the job's retention.
        (Some("refused"), Some("missing"), _) => Verdict::Decided(
            Outcome::Expired,
            format!(
                    "collect: the state is gone: {reason} (the job's retention removed it before the runner \
                     reached it: keep more checkpoints, clink run --retain-checkpoints N, or run the runner more often)"
                ),
            Vec::new(),
        ),
        (Some("refused"), Some("bound" | "timeout"), _) => {
            Verdict::Decided(Outcome::Partial, format!("collect: a bound was reached: {reason}"), Vec::new())
        }
        (Some("refused"), Some(kind), _) => {
            Verdict::Decided(Outcome::Error, format!("collect refused ({kind}): {reason}"), Vec::new())
        }
        _ => error(step, done, "an unexpected result"),
    }
}

/// The bundle holds the checkpoint the audit was selected by: its manifest
/// vouches for a COMPLETED marker of that id with the marker's hash the
/// runner saw (a job directory reset between selection and collection
/// would put another checkpoint of the same id there).
fn the_audits_checkpoint(ctx: &StepContext) -> Result<(), String> {
    let (job, ck) = (&ctx.config.job.id, ctx.checkpoint);
    let Some(seen) = &ctx.marker_sha256 else {
        return Err(format!("no identity of checkpoint {ck} was recorded to hold the bundle to"));
    };
    let collected = collected_marker_sha256(&ctx.files.bundle, job, ck)?;
    if &collected != seen {
        return Err(format!(
            "the bundle holds another checkpoint {ck} than the audit's: its COMPLETED-{ck} has SHA-256 {collected}, \
             the marker the audit was selected by {seen} (the job directory was reset?)"
        ));
    }
    Ok(())
}

fn judge_scope(done: &Finished, ctx: &StepContext) -> Verdict {
    let step = Step::Scope;
    let written = ctx.files.scope.is_file();
    match done.code {
        Some(0) if written => Verdict::Continue("the scope is whole".into()),
        Some(3) if written => {
            let j = parse(&done.stdout);
            let missing = j.as_ref().and_then(|j| j.get("incomplete")).map(|v| v.to_string()).unwrap_or_default();
            // Evidence the job's retention removed never comes back: a gap, not a retry.
            let capture_dir = Path::new(&ctx.config.job.capture_dir);
            match crate::job::captures_purged(capture_dir, ctx.checkpoint) {
                Some(gone) => Verdict::Decided(Outcome::Expired, format!("scope: {gone}: {missing}"), Vec::new()),
                None => Verdict::Decided(
                    Outcome::Partial,
                    format!("scope: the evidence is not whole: {missing}"),
                    Vec::new(),
                ),
            }
        }
        Some(3) => Verdict::Decided(
            Outcome::Unsupported,
            format!("scope: not a job the audit supports: {}", done.last_error_line()),
            Vec::new(),
        ),
        Some(2) if ctx.since.is_some() => Verdict::OtherBase(done.last_error_line()),
        _ => error(step, done, "no scope written"),
    }
}

fn judge_reference(done: &Finished, ctx: &StepContext) -> Verdict {
    let step = Step::Reference;
    let written = ctx.files.reference.is_file();
    match done.code {
        Some(0) if written => {}
        Some(3) => {
            return Verdict::Decided(
                Outcome::Partial,
                format!("reference: incomplete: {}", done.last_error_line()),
                Vec::new(),
            )
        }
        _ => return error(step, done, "no complete artifact"),
    }
    if let Some(held) = &ctx.since {
        // Against the hash recorded when the state was held, never the file's bytes now.
        let claimed = first_line(&ctx.files.reference)
            .and_then(|h| h.pointer("/state_in/sha256").and_then(Json::as_str).map(str::to_string));
        if held.sha256.is_empty() || claimed.as_deref() != Some(held.sha256.as_str()) {
            return Verdict::Decided(
                Outcome::Error,
                format!(
                    "reference: the artifact does not say it started from the held state of checkpoint {} \
                     (held {}, artifact {})",
                    held.checkpoint,
                    if held.sha256.is_empty() { "none recorded" } else { &held.sha256 },
                    claimed.unwrap_or_else(|| "none".into())
                ),
                Vec::new(),
            );
        }
    }
    let rows = reference_rows(&ctx.files.reference);
    Verdict::Continue(format!("the reference computed {} rows", rows.map_or("?".into(), |r| r.to_string())))
}

fn judge_verify(done: &Finished) -> Verdict {
    let step = Step::Verify;
    let report = parse(&done.stdout).filter(|j| field(j, "format") == Some("clink-verify-report"));
    let Some(report) = report else {
        if done.code == Some(3) {
            return Verdict::Decided(
                Outcome::Partial,
                format!("verify: isolation was not enforced: {}", done.last_error_line()),
                Vec::new(),
            );
        }
        return error(step, done, "no verification report");
    };
    if report.pointer("/isolation/enforced").and_then(Json::as_bool) != Some(true) {
        return Verdict::Decided(
            Outcome::Partial,
            "verify: the report does not show enforced isolation".into(),
            Vec::new(),
        );
    }
    let checks = report.get("checks").and_then(Json::as_array).cloned().unwrap_or_default();
    let with_status = |s: &str| -> Vec<&Json> { checks.iter().filter(|c| field(c, "status") == Some(s)).collect() };
    match done.code {
        Some(0) if !checks.is_empty() && with_status("passed").len() == checks.len() => {
            Verdict::Continue(format!("{} checks passed under isolation", checks.len()))
        }
        Some(1) => {
            let findings: Vec<Finding> = with_status("failed")
                .into_iter()
                .map(|c| {
                    let name = field(c, "name").unwrap_or("?").to_string();
                    let relationship =
                        if name.starts_with("replay.") { Relationship::Transformation } else { Relationship::Evidence };
                    let first = c.get("findings").and_then(Json::as_array).map_or(Vec::new(), |f| {
                        f.iter().take(5).map(|x| x.as_str().map_or(x.to_string(), str::to_string)).collect()
                    });
                    Finding { relationship, summary: field(c, "reason").unwrap_or("").to_string(), named: name, first }
                })
                .collect();
            Verdict::Decided(Outcome::Discrepancy, "verify: a check failed".into(), findings)
        }
        Some(3) => {
            let names: Vec<&str> = checks
                .iter()
                .filter(|c| field(c, "status") != Some("passed"))
                .filter_map(|c| field(c, "name"))
                .collect();
            Verdict::Decided(Outcome::Partial, format!("verify: not established: {}", names.join(", ")), Vec::new())
        }
        _ => error(step, done, "an unexpected verification result"),
    }
}

fn judge_reconcile(done: &Finished, ctx: &StepContext) -> Verdict {
    let step = Step::Reconcile;
    let report = parse(&done.stdout).filter(|j| field(j, "format") == Some("clink-reconcile-report"));
    let Some(report) = report else { return error(step, done, "no reconciliation report") };
    let checks = report.get("checks").and_then(Json::as_array).cloned().unwrap_or_default();
    if done.code == Some(3) && is_empty(&report, &checks, &ctx.files.reference) {
        return Verdict::Decided(
            Outcome::Empty,
            "the scope's whole source range held no record the job turns into a row: the reference computed none \
             and the sink received none"
                .into(),
            Vec::new(),
        );
    }
    match done.code {
        Some(0) => Verdict::Continue(format!("{} checks passed", checks.len())),
        Some(1) => {
            let findings = report
                .get("findings")
                .and_then(Json::as_array)
                .map_or(Vec::new(), |all| all.iter().map(reconcile_finding).collect());
            Verdict::Decided(Outcome::Discrepancy, "reconcile: a check failed".into(), findings)
        }
        Some(3) => {
            let names: Vec<String> = checks
                .iter()
                .filter(|c| field(c, "status") != Some("passed"))
                .map(|c| format!("{} ({})", field(c, "name").unwrap_or("?"), field(c, "reason").unwrap_or("")))
                .collect();
            Verdict::Decided(Outcome::Partial, format!("reconcile: not established: {}", names.join("; ")), Vec::new())
        }
        _ => error(step, done, "an unexpected reconciliation result"),
    }
}

/// `empty`, established positively: nothing failed; the evidence, the
/// destination and the artifact's binding passed; the reference is complete
/// with no row; and no key was selected, so the sink's recorded input held
/// no row either (the selected keys are the union of both sides').
fn is_empty(report: &Json, checks: &[Json], reference: &Path) -> bool {
    let status = |name: &str| checks.iter().find(|c| field(c, "name") == Some(name)).and_then(|c| field(c, "status"));
    let required =
        ["bundle.manifest", "bundle.artifacts", "bundle.completeness", "reconcile.destination", "reference.scope"];
    let none_failed = checks.iter().all(|c| field(c, "status") != Some("failed"));
    let complete = report.pointer("/reference/complete").and_then(Json::as_bool) == Some(true);
    let no_keys = report.pointer("/coverage/keys_selected").and_then(Json::as_u64) == Some(0);
    none_failed
        && required.iter().all(|n| status(n) == Some("passed"))
        && complete
        && no_keys
        && reference_rows(reference) == Some(0)
}

fn reconcile_finding(f: &Json) -> Finding {
    let named = field(f, "relationship").unwrap_or("?").to_string();
    let relationship = match named.as_str() {
        "transformation" => Relationship::Transformation,
        "delivery" => Relationship::Delivery,
        "reference-destination" => Relationship::ReferenceDestination,
        _ => Relationship::Evidence,
    };
    let first = f
        .get("first")
        .and_then(Json::as_array)
        .map_or(Vec::new(), |v| v.iter().take(20).map(|x| x.as_str().map_or(x.to_string(), str::to_string)).collect());
    Finding { relationship, named, summary: field(f, "summary").unwrap_or("").to_string(), first }
}
