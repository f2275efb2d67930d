//! `clink upgrade check`: verifies an evidence set against its digest before
//! anything runs, restores the baseline and the candidate each from its own
//! scratch copy of the savepoint through that build's own restore path,
//! takes a savepoint of each restored job before it reads anything new (a
//! job started fresh holds nothing there and cannot pass), publishes the
//! continuation, runs to END, exports the final checkpoint, and decides
//! every check of [`crate::report::CHECK_TABLE`].
//!
//! A bound reached or an interrupt stops the run: the checks not decided
//! are unavailable and the report is still written. Nothing an evidence set
//! names is ever run; the evidence itself is only read, and re-hashed after
//! the runs.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clink_basics::multiset::multiset_diff;
use serde_json::{json, Value as Json};

use crate::compare::{self, account, LogicalState, Row};
use crate::definition::Definition;
use crate::evidence::{self, FileIdentity, Index, Verdict};
use crate::record::{preflight, Outcome};
use crate::report::{self, Checks, Status, CHECK_TABLE};
use crate::runner::Runner;
use crate::sealed::{self, Sealed};
use crate::steps::{self, RunDirs, StepError};
use crate::{args, Bounds, Build, UsageError};
use clink_isolation::Proof;

#[derive(Debug, Clone)]
pub struct CheckArgs {
    pub test: PathBuf,
    pub evidence: PathBuf,
    pub digest: String,
    pub out: PathBuf,
    pub tools: PathBuf,
    pub baseline: Build,
    pub candidate: Build,
    pub bounds: Bounds,
    /// Also write the report as one self-contained HTML page here.
    pub html: Option<PathBuf>,
}

/// What the tools build needs to report.
const TOOLS_NEEDS: [&str; 4] = ["dataset.export", "dataset.verify", "state.cat", "state.diff"];

pub fn check(a: &CheckArgs, isolation: Proof) -> Result<Outcome, UsageError> {
    if !clink_basics::digest::is_sha256_hex(&a.digest) {
        return Err(UsageError::Bad(format!("--evidence-digest {:?} is not a SHA-256 in lowercase hex", a.digest)));
    }
    preflight(
        &a.out,
        &[
            ("--baseline-clink", &a.baseline.clink),
            ("--baseline-job", &a.baseline.job),
            ("--candidate-clink", &a.candidate.clink),
            ("--candidate-job", &a.candidate.job),
            ("--tools-clink", &a.tools),
        ],
    )?;
    if !a.evidence.is_dir() {
        return Err(UsageError::Bad(format!("--evidence {}: not a directory", a.evidence.display())));
    }
    let def = Definition::read(&a.test)?;
    let started = Instant::now();
    std::fs::create_dir_all(&a.out).map_err(|source| UsageError::Io { path: a.out.clone(), source })?;
    let mut runner = Runner::new(&a.out, a.bounds).map_err(|source| UsageError::Io { path: a.out.clone(), source })?;
    let mut checks = Checks::new(CHECK_TABLE);
    checks.set(
        "replay.determinism",
        Status::Unsupported,
        "the job runs as a build's binary over files and the evidence carries no captures",
    );
    let mut facts = json!({"test_sha256": def.sha256, "evidence_digest": a.digest});
    let mut index = None;
    let outcome = run(a, &def, isolation, &mut runner, &mut checks, &mut facts, &mut index);
    if let Err(e) = &outcome {
        checks.undecided_unavailable(&e.to_string());
    }
    // Whatever happened, the evidence is re-hashed once it was verified.
    if let Some(index) = &index {
        let unchanged = unchanged(&a.evidence, &a.digest, index);
        checks.pass_or_fail("evidence.unchanged", unchanged.is_ok(), unchanged.unwrap_or_else(|e| e));
    }
    if let Some(path) = &a.html {
        let page = crate::html::page("check", &checks, &facts, &runner.commands);
        write_html(path, &clink_html::render(&page)).map_err(UsageError::Bad)?;
    }
    let text = report::write(&a.out, "check", &checks, facts, &runner.commands, started.elapsed().as_secs_f64())
        .map_err(UsageError::Bad)?;
    Ok(Outcome { exit: checks.result(), text, digest: None })
}

/// Written beside its name and renamed into place: never half a page.
fn write_html(path: &Path, html: &str) -> Result<(), String> {
    let fail = |e: std::io::Error| format!("--html {}: {e}", path.display());
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::Builder::new().prefix(".clink-upgrade-").suffix(".html").tempfile_in(dir).map_err(fail)?;
    std::io::Write::write_all(&mut tmp, html.as_bytes()).map_err(fail)?;
    tmp.persist(path).map_err(|e| fail(e.error))?;
    Ok(())
}

fn unchanged(dir: &Path, digest: &str, index: &Index) -> Result<String, String> {
    let mut now = evidence::hash_tree(dir)?;
    let own = now.remove(evidence::INDEX).ok_or("evidence.json is gone")?;
    if own.sha256 != digest {
        return Err(format!("evidence.json now has SHA-256 {}", own.sha256));
    }
    if now != index.files {
        let changed: Vec<&String> = now
            .keys()
            .chain(index.files.keys())
            .filter(|k| now.get(*k) != index.files.get(*k))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        return Err(format!("changed during the check: {changed:?}"));
    }
    Ok(format!("all {} files hash as before the runs", index.files.len() + 1))
}

/// The evidence verified against its digest, then found fit: its
/// recording's own checks passed and everything it sealed agrees with the
/// definition. Decides `evidence.integrity`; nothing has run yet.
fn evidence_fit(
    a: &CheckArgs,
    def: &Definition,
    checks: &mut Checks,
    verified: &mut Option<Index>,
) -> Result<(Index, Sealed), StepError> {
    let index = match evidence::verify(&a.evidence, &a.digest, &def.sha256, &def.bytes) {
        Verdict::Verified(index) => *index,
        Verdict::Failed(why) => {
            checks.set("evidence.integrity", Status::Failed, &why);
            return Err(StepError::Failed("the evidence did not verify; nothing was run".into()));
        }
        Verdict::Unsupported(why) => {
            checks.set("evidence.integrity", Status::Unsupported, &why);
            return Err(StepError::Failed("the evidence is of an unsupported kind; nothing was run".into()));
        }
    };
    *verified = Some(index.clone());
    if let Err(why) = sealed::recording(&index) {
        checks.set(
            "evidence.integrity",
            Status::Unavailable,
            format!("the evidence is intact, but {why}: a recording that failed its own checks establishes nothing about a candidate; record the evidence again"),
        );
        return Err(StepError::Failed("the evidence's recording failed its own checks; nothing was run".into()));
    }
    let sealed = match sealed::contents(&a.evidence, &index, def) {
        Ok(s) => s,
        Err(why) => {
            checks.set("evidence.integrity", Status::Failed, why);
            return Err(StepError::Failed("the evidence contradicts the test definition; nothing was run".into()));
        }
    };
    checks.set(
        "evidence.integrity",
        Status::Passed,
        format!(
            "evidence.json has the digest given; {} files hash as recorded; the dataset has its recorded digest; the recording's checks passed; input, reference and committed output are the definition's",
            index.files.len()
        ),
    );
    Ok((index, sealed))
}

/// One build's run from the evidence.
struct Side {
    restored: Option<(u64, LogicalState, PathBuf)>,
    recovered: Option<(Vec<Row>, LogicalState)>,
}

#[allow(clippy::too_many_arguments)]
fn run(
    a: &CheckArgs,
    def: &Definition,
    isolation: Proof,
    r: &mut Runner,
    checks: &mut Checks,
    facts: &mut Json,
    verified: &mut Option<Index>,
) -> Result<(), StepError> {
    // Proven (or not) before this command started anything.
    checks.set("isolation", report::isolation_status(&isolation), &isolation.reason);
    let (index, sealed) = evidence_fit(a, def, checks, verified)?;
    if !isolation.enforced() {
        return Err(StepError::Failed("isolation was not proven; no build was run".into()));
    }

    // The builds: identity and capabilities.
    let ids = [&a.baseline.clink, &a.baseline.job, &a.candidate.clink, &a.candidate.job, &a.tools]
        .map(|p| FileIdentity::of(p));
    let ids: Vec<FileIdentity> = ids.into_iter().collect::<Result<_, _>>().map_err(StepError::Failed)?;
    facts["builds"] = json!({"baseline": {"clink": ids[0], "job": ids[1]}, "candidate": {"clink": ids[2], "job": ids[3]}, "tools": ids[4]});
    let ids: [FileIdentity; 5] = ids.try_into().map_err(|_| StepError::Failed("five build files".into()))?;
    let identity =
        sealed::identity(&index, &ids, [("--baseline-job", &a.baseline.job), ("--candidate-job", &a.candidate.job)]);
    checks.pass_or_fail("builds.identity", identity.is_ok(), identity.unwrap_or_else(|e| e));
    let base_caps = steps::capabilities(r, "baseline", &a.baseline.clink)?;
    let cand_caps = steps::capabilities(r, "candidate", &a.candidate.clink)?;
    let tools_caps = steps::capabilities(r, "tools", &a.tools)?;
    facts["capabilities_established"] =
        json!({"baseline": base_caps.how, "candidate": cand_caps.how, "tools": tools_caps.how});
    let lacking = |caps: &steps::Capabilities, need: &mut dyn Iterator<Item = &str>| -> Vec<String> {
        need.filter(|c| !caps.names.contains(*c)).map(str::to_string).collect()
    };
    let base_missing = lacking(&base_caps, &mut def.capabilities.iter().map(String::as_str));
    let cand_missing = lacking(&cand_caps, &mut def.capabilities.iter().map(String::as_str));
    let tools_missing = lacking(&tools_caps, &mut TOOLS_NEEDS.into_iter());
    if base_missing.is_empty() && cand_missing.is_empty() && tools_missing.is_empty() {
        checks.set(
            "builds.capabilities",
            Status::Passed,
            format!(
                "every capability required (baseline {}, candidate {}, tools {})",
                base_caps.how, cand_caps.how, tools_caps.how
            ),
        );
    } else {
        checks.set(
            "builds.capabilities",
            Status::Unsupported,
            format!(
                "not reported: baseline {base_missing:?} ({}), candidate {cand_missing:?} ({}), tools {tools_missing:?} ({})",
                base_caps.how, cand_caps.how, tools_caps.how
            ),
        );
        return Err(StepError::Failed("a build lacks a capability the definition requires".into()));
    }

    // The evidence's state, read by the tools build from its own copy.
    let work = a.out.join("work");
    let tools_copy = work.join("tools").join("dataset");
    steps::copy_tree(&a.evidence.join("checkpoint"), &tools_copy).map_err(StepError::Failed)?;
    let verify = r.run(
        "tools-verify",
        &a.tools,
        &args!["checkpoint", "verify", "--dataset", tools_copy.display(), "--digest", index.savepoint.dataset_digest],
    )?;
    let listing = steps::state_cat(r, "tools-state-cat-evidence", &a.tools, &tools_copy);
    let recorded = match listing.and_then(|l| {
        let state = compare::logical_state(&l, def).map_err(StepError::Failed)?;
        Ok((l.get("job").and_then(Json::as_str).map(str::to_string), state))
    }) {
        Ok((job, state)) => {
            if let Err(why) = sealed::listing(&index, job.as_deref(), &state) {
                checks.set("evidence.integrity", Status::Failed, why);
                return Err(StepError::Failed("the evidence's savepoint is not its dataset".into()));
            }
            state
        }
        Err(StepError::Failed(why)) => {
            checks.set("evidence.readable", Status::Failed, why);
            return Err(StepError::Failed("the evidence's state could not be read".into()));
        }
        Err(bound) => return Err(bound),
    };
    // An upgrade that also rescales is two changes judged as one: refused
    // once the savepoint's operators are vouched for (above), never compared.
    let rescaled = match sealed::rescaled(&index, &a.candidate.job) {
        Ok(rescaled) => rescaled,
        Err(why) => {
            checks.set("builds.identity", Status::Failed, format!("--candidate-job does not read: {why}"));
            return Err(StepError::Failed("the candidate job does not read".into()));
        }
    };
    if !rescaled.is_empty() {
        let why = format!(
            "--candidate-job runs {}: an upgrade that also restores at another parallelism is not compared; check the upgrade at the savepoint's parallelism, then rescale the upgraded job",
            rescaled.join(", ")
        );
        checks.set("builds.identity", Status::Failed, &why);
        return Err(StepError::Failed("the candidate job rescales the savepoint; no build was run".into()));
    }
    let readable = verify.ok() && recorded.undocumented.is_empty();
    checks.pass_or_fail(
        "evidence.readable",
        readable,
        if !verify.ok() {
            format!("the tools build does not verify the dataset: {}", verify.last_error_line())
        } else if !recorded.undocumented.is_empty() {
            format!("rows in no documented encoding: {}", recorded.undocumented.join("; "))
        } else {
            format!(
                "verified; {} state rows decode, {} misplaced rows counted",
                recorded.rows.len(),
                recorded.misplaced
            )
        },
    );
    facts["evidence_state"] = json!({"rows": recorded.rows.len(), "misplaced": recorded.misplaced});

    // The candidate's own schema check.
    let cand_copy = work.join("candidate").join("dataset");
    steps::copy_tree(&a.evidence.join("checkpoint"), &cand_copy).map_err(StepError::Failed)?;
    let schema = r.run(
        "candidate-check-savepoint",
        &a.candidate.clink,
        &args!["check-savepoint", "--dataset", cand_copy.display(), "--expected", a.candidate.job.display()],
    )?;
    match schema.code {
        Some(0) => {
            checks.set("schema.candidate", Status::Passed, "the candidate's check-savepoint accepts every snapshot")
        }
        Some(1) => {
            let said = format!("{} {}", schema.stdout.trim(), schema.stderr.trim());
            checks.set("schema.candidate", Status::Failed, format!("refused: {}", said.trim().replace('\n', "; ")))
        }
        _ => checks.set("schema.candidate", Status::Unavailable, format!("check-savepoint: {}", schema.describe())),
    }

    // Each build from its own copy.
    let input = def.input();
    let continuation = &input[def.cut()..];
    let base = side(r, "baseline", &a.baseline, a, def, &index, &recorded, continuation, checks, facts)?;
    let cand = side(r, "candidate", &a.candidate, a, def, &index, &recorded, continuation, checks, facts)?;

    // Behaviour and the reference (sealed, and equal to what the reference computes).
    let Sealed { at_end: (end_rows, end_state), at_cut_rows: cut_rows, committed } = sealed;
    // The continuation's rows the reference expects: END's rows less those committed at the cut.
    let expected_continuation: Vec<Row> = multiset_diff(cut_rows.iter().cloned(), end_rows.iter().cloned())
        .unexpected
        .into_iter()
        .flat_map(|(row, n)| std::iter::repeat_n(row, n))
        .collect();
    let agrees = |b_ok: bool, c_ok: bool| match (b_ok, c_ok) {
        (true, false) => "the reference agrees with the baseline",
        (false, true) => "the reference agrees with the candidate",
        (true, true) => "the reference agrees with both",
        (false, false) => "the reference agrees with neither",
    };
    match (&base.recovered, &cand.recovered) {
        (Some((b_rows, b_state)), Some((c_rows, c_state))) => {
            let out = compare::diff_rows(b_rows, c_rows);
            let b_ref = compare::diff_rows(&expected_continuation, b_rows).is_equal();
            let c_ref = compare::diff_rows(&expected_continuation, c_rows).is_equal();
            let why = format!("the candidate's continuation rows against the baseline's: {}", account(&out));
            let why = if out.is_equal() { why } else { format!("{why}; {}", agrees(b_ref, c_ref)) };
            checks.pass_or_fail("behaviour.output", out.is_equal(), why);
            let st = compare::diff_state(&b_state.rows, &c_state.rows);
            let bs = compare::diff_state(&end_state, &b_state.rows).is_equal();
            let cs = compare::diff_state(&end_state, &c_state.rows).is_equal();
            let why = format!("the candidate's final logical state against the baseline's: {}", account(&st));
            let why = if st.is_equal() { why } else { format!("{why}; {}", agrees(bs, cs)) };
            checks.pass_or_fail("behaviour.state", st.is_equal(), why);
        }
        _ => {
            let why = "a build did not run the continuation to END";
            checks.set("behaviour.output", Status::Unavailable, why);
            checks.set("behaviour.state", Status::Unavailable, why);
        }
    }
    for (name, s) in [("reference.candidate", &cand), ("reference.baseline", &base)] {
        match &s.recovered {
            Some((rows, state)) => {
                let all: Vec<Row> = committed.iter().chain(rows.iter()).cloned().collect();
                let rd = compare::diff_rows(&end_rows, &all);
                let sd = compare::diff_state(&end_state, &state.rows);
                checks.pass_or_fail(
                    name,
                    rd.is_equal() && sd.is_equal(),
                    format!(
                        "the committed rows plus the continuation's against the reference: {}; the final state: {}",
                        account(&rd),
                        account(&sd)
                    ),
                );
            }
            None => checks.set(name, Status::Unavailable, "the build did not run the continuation to END"),
        }
    }

    // Raw bytes, informational.
    match &cand.restored {
        Some((_, _, restored)) => {
            // The operators the definition names (a sink's handles of the
            // imported checkpoint are the recording run's, never restored).
            let mut diff_args = args!["state-diff", tools_copy.display(), restored.display()].to_vec();
            for uid in def.uids.values() {
                diff_args.extend(args!["--uid", uid]);
            }
            let raw = r.run("tools-state-diff", &a.tools, &diff_args)?;
            match raw.code {
                Some(0) => checks.set(
                    "state.raw",
                    Status::Passed,
                    "the restored savepoint equals the evidence's, byte for byte",
                ),
                Some(1) => {
                    checks.set("state.raw", Status::Failed, raw.stdout.lines().take(4).collect::<Vec<_>>().join("; "))
                }
                _ => checks.set("state.raw", Status::Unavailable, format!("state-diff: {}", raw.describe())),
            }
        }
        None => checks.set("state.raw", Status::Unavailable, "the candidate has no restored savepoint"),
    }
    Ok(())
}

/// Restores one build from its own copy, takes a savepoint before anything
/// new is read, publishes the continuation, runs to END.
#[allow(clippy::too_many_arguments)]
fn side(
    r: &mut Runner,
    name: &str,
    build: &Build,
    a: &CheckArgs,
    def: &Definition,
    index: &Index,
    recorded: &LogicalState,
    continuation: &[(String, String)],
    checks: &mut Checks,
    facts: &mut Json,
) -> Result<Side, StepError> {
    let restore_check: &'static str = if name == "baseline" { "restore.baseline" } else { "restore.candidate" };
    let recovery_check: &'static str = if name == "baseline" { "recovery.baseline" } else { "recovery.candidate" };
    let dir = a.out.join("work").join(name);
    let copy = dir.join("restore-from");
    steps::copy_tree(&a.evidence.join("checkpoint"), &copy).map_err(StepError::Failed)?;
    let dirs = RunDirs::under(&dir);
    std::fs::create_dir_all(&dirs.input).map_err(|e| StepError::Failed(e.to_string()))?;
    let job = steps::job_id(&build.job).map_err(StepError::Failed)?;
    let mut running =
        steps::start_job(r, &format!("{name}-run"), build, &dirs, Some((&copy, index.savepoint.checkpoint)))?;
    let none = Side { restored: None, recovered: None };
    let restored_id = match steps::savepoint(r, &format!("{name}-savepoint"), build, &dirs, job, &mut running) {
        Ok(id) => id,
        Err(StepError::Failed(why)) => {
            let ended = r.wait(running, None)?;
            let reason = format!("{why}: the run ended with {}: {}", ended.describe(), ended.last_error_line());
            checks.set(restore_check, Status::Failed, reason);
            checks.set(recovery_check, Status::Unavailable, "the restore did not complete");
            return Ok(none);
        }
        Err(bound) => return Err(bound),
    };
    let restored = dir.join("restored");
    let tools_name = format!("tools-export-{name}-restored");
    steps::export(r, &tools_name, &a.tools, &dirs.checkpoints, job, &restored_id.to_string(), &restored)?;
    let listing = steps::state_cat(r, &format!("tools-state-cat-{name}-restored"), &a.tools, &restored)?;
    let state = compare::logical_state(&listing, def).map_err(StepError::Failed)?;
    let diff = compare::diff_state(&recorded.rows, &state.rows);
    let before = compare::stateful(&recorded.operators);
    let after: BTreeSet<(String, String)> = state.operators.iter().map(|o| (o.id.clone(), o.uid.clone())).collect();
    let lost: Vec<String> = before
        .iter()
        .filter(|op| !after.contains(*op))
        .map(|(id, uid)| format!("operator {id} (uid {uid:?})"))
        .collect();
    let ok = diff.is_equal() && lost.is_empty() && state.undocumented.is_empty();
    let mut why = format!("restored savepoint {restored_id} against the evidence's state: {}", account(&diff));
    if !lost.is_empty() {
        why.push_str(&format!("; state not under the same id and uid: {}", lost.join(", ")));
    }
    if !state.undocumented.is_empty() {
        why.push_str(&format!("; undocumented: {}", state.undocumented.join("; ")));
    }
    checks.pass_or_fail(restore_check, ok, why);
    facts[format!("{name}_misplaced_rows")] = json!(state.misplaced);

    steps::publish(&dirs.input, continuation).map_err(StepError::Failed)?;
    let ended = r.wait(running, None)?;
    if !ended.ok() {
        checks.set(
            recovery_check,
            Status::Failed,
            format!("the continuation's run ended with {}: {}", ended.describe(), ended.last_error_line()),
        );
        return Ok(Side { restored: Some((restored_id, state, restored)), recovered: None });
    }
    let last = dir.join("final");
    let (_, final_id) =
        steps::export(r, &format!("tools-export-{name}-final"), &a.tools, &dirs.checkpoints, job, "latest", &last)?;
    let final_listing = steps::state_cat(r, &format!("tools-state-cat-{name}-final"), &a.tools, &last)?;
    let final_state = compare::logical_state(&final_listing, def).map_err(StepError::Failed)?;
    let after_restore = final_id > restored_id;
    checks.pass_or_fail(
        recovery_check,
        after_restore,
        format!("ran to END; final checkpoint {final_id}, after the restored savepoint {restored_id}"),
    );
    let rows = compare::committed_rows(&dirs.output, def).map_err(StepError::Failed)?;
    Ok(Side { restored: Some((restored_id, state, restored)), recovered: Some((rows, final_state)) })
}
