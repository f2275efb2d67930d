//! clink-verify: `clink incident-verify`, the checks a bundle is judged by,
//! and `incident-regress`, which freezes one of its epochs as a test.
//!
//! Each check reports passed, failed, unavailable (its evidence is not in the
//! bundle, or a tool it needs is not here) or unsupported (this build cannot
//! make it for this evidence), with its evidence, reason and next action. A
//! profile says which checks are required; the run concludes failed (exit 1)
//! when any required check failed, partial (exit 3) when none failed but one is
//! unavailable or unsupported, and passed (exit 0) only when every required
//! check passed. Verification reads the bundle, writes only to the system's
//! temporary directory, and opens no connection. It never runs or loads
//! anything a bundle names, and never passes a check on evidence it could not
//! read.
//!
//! [`verify_observed`] tells a [`VerifyProgress`] as each check starts and
//! ends (the command line draws a bar with it); [`html::page`] turns a report
//! into a page of the shared HTML frame, with the bundle's protocol timeline.
//!
//! ```no_run
//! use clink_verify::{verify, Profile, Selection, VerifyOptions};
//! let bundle = clink_bundle::read_bundle(std::path::Path::new("incident-1")).expect("a bundle");
//! let options = VerifyOptions { profile: Profile::Replay, selection: Selection::default(), expected: None, formal: None };
//! let report = verify(&bundle, &options).expect("a report");
//! std::process::exit(report.exit_code.into());
//! ```

mod expected;
pub mod html;
mod integrity;
mod parallel;
pub mod progress;
mod protocol;
pub mod regress;
pub mod replay_checks;
pub mod report;
mod state;

use std::num::NonZeroUsize;
use std::path::PathBuf;

use clink_basics::exit::Exit;
use clink_basics::ids::OperatorId;
use clink_bundle::model::{Depth, Evidence};
use clink_bundle::Bundle;
use serde::Serialize;

pub use clink_basics::status::Status;
pub use progress::{Quiet, VerifyProgress};
pub use report::{render_json, render_text};

/// A replay check's selection and what became of it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub selected: usize,
    pub checked: usize,
    pub passed: usize,
    pub failed: usize,
    pub unavailable: usize,
    pub unsupported: usize,
    pub omitted: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckResult {
    pub name: &'static str,
    pub status: Status,
    pub evidence: Vec<String>,
    pub reason: String,
    pub next_action: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counts: Option<Counts>,
    pub details: Vec<String>,
    /// protocol.conformance's rejection: the first diverging event, 1-based in
    /// the merged trace of the bundle's job. For the HTML report's timeline;
    /// not part of the JSON report (the reason names the event).
    #[serde(skip)]
    pub diverged_at: Option<usize>,
}

impl CheckResult {
    pub fn new(name: &'static str, status: Status, reason: impl Into<String>) -> Self {
        CheckResult {
            name,
            status,
            evidence: Vec::new(),
            reason: reason.into(),
            next_action: String::new(),
            counts: None,
            details: Vec::new(),
            diverged_at: None,
        }
    }

    pub fn evidence(mut self, items: impl IntoIterator<Item = String>) -> Self {
        self.evidence.extend(items);
        self
    }

    pub fn next(mut self, action: impl Into<String>) -> Self {
        self.next_action = action.into();
        self
    }

    pub fn details(mut self, items: impl IntoIterator<Item = String>) -> Self {
        self.details.extend(items);
        self
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Profile {
    Integrity,
    Consistency,
    Replay,
    Full,
}

impl Profile {
    pub fn parse(text: &str) -> Option<Profile> {
        Some(match text {
            "integrity" => Profile::Integrity,
            "consistency" => Profile::Consistency,
            "replay" => Profile::Replay,
            "full" => Profile::Full,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Profile::Integrity => "integrity",
            Profile::Consistency => "consistency",
            Profile::Replay => "replay",
            Profile::Full => "full",
        }
    }

    fn includes(self, level: Profile) -> bool {
        let rank = |p: Profile| match p {
            Profile::Integrity => 0,
            Profile::Consistency => 1,
            Profile::Replay => 2,
            Profile::Full => 3,
        };
        rank(self) >= rank(level)
    }
}

/// Which captured epochs the replay checks answer for.
#[derive(Debug, Clone)]
pub struct Selection {
    pub ops: Option<Vec<OperatorId>>,
    pub subtasks: Option<Vec<u32>>,
    pub epochs: Option<Vec<u64>>,
    /// At most this many epochs are replayed; the rest are counted as omitted.
    pub max_replays: NonZeroUsize,
}

/// How many epochs a verification replays unless told otherwise.
pub const DEFAULT_MAX_REPLAYS: NonZeroUsize = match NonZeroUsize::new(64) {
    Some(n) => n,
    None => unreachable!(),
};

impl Default for Selection {
    fn default() -> Self {
        Selection { ops: None, subtasks: None, epochs: None, max_replays: DEFAULT_MAX_REPLAYS }
    }
}

#[derive(Debug, Clone)]
pub struct VerifyOptions {
    pub profile: Profile,
    pub selection: Selection,
    /// Expected rows (NDJSON) for replay.expected_output.
    pub expected: Option<PathBuf>,
    /// Where protocol.conformance finds the formal directory and the TLA+ tools.
    pub formal: Option<clink_formal::FormalTools>,
}

/// The overall conclusion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Conclusion {
    Passed,
    Failed,
    Partial,
}

impl Conclusion {
    pub fn exit(self) -> Exit {
        match self {
            Conclusion::Passed => Exit::Passed,
            Conclusion::Failed => Exit::Failed,
            Conclusion::Partial => Exit::NotEstablished,
        }
    }

    pub fn exit_code(self) -> u8 {
        self.exit().code()
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub format: &'static str,
    pub version: u64,
    /// The build that verified (says so when it is a test build with defect switches).
    pub verifier: String,
    pub bundle: String,
    pub job: String,
    pub checkpoint: u64,
    pub profile: Profile,
    /// What this profile left unexamined (empty under `full`).
    pub not_examined: Vec<NotExamined>,
    pub checks: Vec<CheckResult>,
    pub result: Conclusion,
    pub exit_code: u8,
}

pub const REPORT_FORMAT: &str = "clink-verify-report";
/// Version 2 lists what the profile did not examine (`not_examined`).
pub const REPORT_VERSION: u64 = 2;

/// A request the bundle cannot answer (exit 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Reports name paths inside the bundle relative to it, so a report reads
/// the same wherever the bundle was copied.
fn relativize(checks: &mut [CheckResult], root: &std::path::Path) {
    let prefix = format!("{}/", root.display());
    let fix = |s: &mut String| {
        if s.contains(&prefix) {
            *s = s.replace(&prefix, "");
        }
    };
    for c in checks {
        fix(&mut c.reason);
        fix(&mut c.next_action);
        c.evidence.iter_mut().for_each(fix);
        c.details.iter_mut().for_each(fix);
    }
}

/// bundle.artifacts alone: whether every file is what the manifest vouches for.
pub fn artifacts_check(bundle: &Bundle) -> CheckResult {
    integrity::artifacts(bundle)
}

/// The three bundle.* checks, in order (bundle.manifest, bundle.artifacts,
/// bundle.completeness): what every command that reads a bundle's evidence
/// runs first. When one fails, nothing else may be read. Once the artifacts
/// are what the manifest vouches for, completeness judges THE reader's model
/// of every artifact (a bundle the model refuses fails it, with the reason).
pub fn integrity_checks(bundle: &Bundle) -> Vec<CheckResult> {
    let artifacts = integrity::artifacts(bundle);
    let completeness = if artifacts.status == Status::Passed {
        match read_evidence(bundle, Depth::Contents) {
            Ok(evidence) => integrity::completeness(bundle, &evidence),
            Err(refused) => CheckResult::new("bundle.completeness", Status::Failed, refused.0),
        }
    } else {
        integrity::completeness(bundle, &Evidence::default())
    };
    let mut checks = vec![integrity::manifest(bundle), artifacts, completeness];
    relativize(&mut checks, &bundle.root);
    checks
}

/// THE reader's model of the bundle, to `depth` (a refusal names why).
pub fn read_evidence(bundle: &Bundle, depth: Depth) -> Result<Evidence, UsageError> {
    Evidence::read(bundle, depth).map_err(|refused| UsageError(format!("the bundle is refused: {refused}")))
}

/// Whether the manifest's claims (the job, the selection, delivery,
/// contents, the epoch index, the bounds) are what the bundle's evidence
/// says, field by field (`clink_bundle::derive`). Every command that reads a
/// bundle's evidence calls it once bundle.artifacts has passed: a field the
/// evidence contradicts refuses the bundle (exit 2), naming the field and
/// both values. Evidence a field is derived from that does not read (or two
/// pieces of it that disagree, as a job graph and a job manifest naming two
/// families) refuses it too: a claim that cannot be derived is never taken
/// as one that holds.
pub fn claims_hold(bundle: &Bundle) -> Result<(), UsageError> {
    match clink_bundle::derive::disagreements(bundle) {
        Ok(found) if found.is_empty() => Ok(()),
        Ok(found) => Err(UsageError(format!(
            "the manifest disagrees with the bundle's evidence ({} fields; edited by hand?): {}",
            found.len(),
            found.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
        ))),
        Err(why) => Err(UsageError(format!(
            "the manifest's claims cannot be derived from the bundle's evidence, so none of them is taken: {why}"
        ))),
    }
}

/// Runs the profile's checks over a bundle the reader accepted.
pub fn verify(bundle: &Bundle, options: &VerifyOptions) -> Result<Report, UsageError> {
    verify_observed(bundle, options, &mut progress::Quiet)
}

/// The checks a profile reports, in order, as one list grows.
struct Checks<'p> {
    list: Vec<CheckResult>,
    progress: &'p mut dyn progress::VerifyProgress,
}

impl Checks<'_> {
    fn run(&mut self, name: &str, check: impl FnOnce() -> CheckResult) {
        self.progress.started(name);
        let result = check();
        self.progress.finished(&result);
        self.list.push(result);
    }

    fn push(&mut self, result: CheckResult) {
        self.progress.finished(&result);
        self.list.push(result);
    }
}

/// [`verify`], telling `progress` as each check starts and ends and as
/// epochs are replayed.
pub fn verify_observed(
    bundle: &Bundle,
    options: &VerifyOptions,
    progress: &mut dyn progress::VerifyProgress,
) -> Result<Report, UsageError> {
    let profile = options.profile;
    let planned = 3
        + if profile.includes(Profile::Consistency) { 4 } else { 0 }
        + if profile.includes(Profile::Replay) { 2 + usize::from(options.expected.is_some()) } else { 0 }
        + if profile.includes(Profile::Full) { 2 } else { 0 };
    progress.planned(planned);
    let mut checks = Checks { list: Vec::new(), progress };
    checks.run("bundle.manifest", || integrity::manifest(bundle));
    checks.run("bundle.artifacts", || integrity::artifacts(bundle));
    let intact = checks.list.last().is_some_and(|a| a.status == Status::Passed);
    // What the profile reads, read once by THE reader: nothing of the
    // contents for integrity, every artifact from consistency on. The
    // manifest's claims, a mix of lineages and two files claiming one
    // process refuse the bundle before any check judges it.
    let depth = if profile.includes(Profile::Consistency) { Depth::Contents } else { Depth::Listing };
    let evidence = if intact {
        if depth == Depth::Contents {
            claims_hold(bundle)?;
        }
        let evidence = read_evidence(bundle, depth)?;
        protocol::refuse_shared_processes(&evidence)?;
        evidence
    } else {
        Evidence::default()
    };
    checks.run("bundle.completeness", || integrity::completeness(bundle, &evidence));
    let behind = |name: &'static str| {
        CheckResult::new(
            name,
            Status::Unavailable,
            "bundle.artifacts failed: the evidence is not what the manifest vouches for",
        )
        .next("collect the bundle again, or find the copy that matches its manifest")
    };
    // What the job is, read once; the checks cross-check against it.
    let graph = bundle.job_graph();
    if intact && profile.includes(Profile::Replay) {
        bundle
            .check_epoch_roles(graph.as_ref().ok().map(|k| &k.graph))
            .map_err(|why| UsageError(format!("the bundle is malformed: {why}")))?;
    }
    if profile.includes(Profile::Consistency) {
        if intact {
            checks.run("checkpoint.marker", || state::marker(bundle, &evidence, &graph));
            checks.run("checkpoint.restore_rule", || state::restore_rule(bundle, &evidence));
            checks.run("checkpoint.participants", || state::participants(bundle, &evidence, &graph));
            checks.run("state.decode", || state::decode(bundle, &evidence));
        } else {
            for name in ["checkpoint.marker", "checkpoint.restore_rule", "checkpoint.participants", "state.decode"] {
                checks.push(behind(name));
            }
        }
    }
    if profile.includes(Profile::Replay) {
        if intact {
            checks.progress.started("replay.determinism");
            let results = replay_checks::run_observed(
                bundle,
                &evidence,
                &graph,
                &options.selection,
                options.expected.as_deref(),
                &mut *checks.progress,
            )?;
            for r in results {
                checks.push(r);
            }
        } else {
            checks.push(behind("replay.determinism"));
            checks.push(behind("replay.recorded_output"));
            if options.expected.is_some() {
                checks.push(behind("replay.expected_output"));
            }
        }
    }
    if profile.includes(Profile::Full) {
        if intact {
            checks.run("protocol.trace_structure", || protocol::trace_structure(bundle, &evidence));
            checks.run("protocol.conformance", || protocol::conformance(bundle, &evidence, options.formal.as_ref()));
        } else {
            checks.push(behind("protocol.trace_structure"));
            checks.push(behind("protocol.conformance"));
        }
    }
    let mut checks = checks.list;
    relativize(&mut checks, &bundle.root);
    let result = if checks.iter().any(|c| c.status == Status::Failed) {
        Conclusion::Failed
    } else if checks.iter().all(|c| c.status == Status::Passed) {
        Conclusion::Passed
    } else {
        Conclusion::Partial
    };
    Ok(Report {
        format: REPORT_FORMAT,
        version: REPORT_VERSION,
        verifier: format!("clink {}", clink_engine::defects::build_description()),
        bundle: bundle.root.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        job: bundle.manifest.job.id.clone(),
        checkpoint: bundle.manifest.selection.checkpoint,
        profile,
        not_examined: not_examined(bundle, profile),
        checks,
        result,
        exit_code: result.exit_code(),
    })
}

/// What a profile leaves unexamined of the evidence the manifest vouches
/// for, and which profile examines it: a profile never passes on evidence
/// it did not read, and says what it did not. `full` examines everything.
fn not_examined(bundle: &Bundle, profile: Profile) -> Vec<NotExamined> {
    let mut out: Vec<NotExamined> = Vec::new();
    if !profile.includes(Profile::Consistency) {
        out.push(NotExamined {
            what: "the manifest's claims (the job, the selection, delivery, contents, the epoch index, the bounds), compared with the evidence".into(),
            count: 1,
            examined_by: Profile::Consistency,
        });
        out.extend(
            clink_bundle::model::unexamined(bundle, Depth::Listing).into_iter().map(|(what, count, _)| NotExamined {
                what,
                count,
                examined_by: Profile::Consistency,
            }),
        );
    }
    let operator_epochs = bundle.manifest.epochs.iter().filter(|e| e.role == "operator").count();
    if !profile.includes(Profile::Replay) && operator_epochs > 0 {
        out.push(NotExamined {
            what: "the events of captured operator epochs, replayed and compared with production's".into(),
            count: operator_epochs,
            examined_by: Profile::Replay,
        });
    }
    let traces = bundle.trace_artifacts().len();
    if !profile.includes(Profile::Full) && traces > 0 {
        out.push(NotExamined {
            what: "the traces' events as a behaviour of the protocol's specification (TLC)".into(),
            count: traces,
            examined_by: Profile::Full,
        });
    }
    out
}

/// Evidence a profile did not examine, and the profile that does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NotExamined {
    pub what: String,
    pub count: usize,
    pub examined_by: Profile,
}
