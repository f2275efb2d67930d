//! The steps `record` and `check` take with a build, each one process run
//! through the [`Runner`]: what a build can do (`clink capabilities --json`,
//! or its `--help` probed for a build that predates the report), starting
//! its job, a savepoint of the running job, exporting and listing a dataset
//! with the tools build, publishing segments.
//!
//! A step never decides a check; it reports what happened: a bound reached
//! ([`StepError::Bound`], the check is unavailable) or the process's own
//! failure ([`StepError::Failed`]).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value as Json;

use crate::args;
use crate::runner::{Finished, Runner, Running, Stopped};
use crate::Build;

#[derive(Debug, Clone, thiserror::Error)]
pub enum StepError {
    #[error(transparent)]
    Bound(#[from] Stopped),
    #[error("{0}")]
    Failed(String),
}

/// What a build reports it can do, and how that was established.
#[derive(Debug, Clone)]
pub struct Capabilities {
    pub names: BTreeSet<String>,
    /// `reported` (clink capabilities --json) or `probed` (its --help).
    pub how: &'static str,
    pub build: Option<String>,
}

/// Asks a build what it can do; a build without the report is probed.
pub fn capabilities(r: &mut Runner, name: &str, clink: &Path) -> Result<Capabilities, StepError> {
    let out = r.run(&format!("{name}-capabilities"), clink, &args!["capabilities", "--json"])?;
    if out.ok() {
        let doc: Json = serde_json::from_str(&out.stdout)
            .map_err(|e| StepError::Failed(format!("{name}: clink capabilities --json printed no JSON: {e}")))?;
        let names = doc
            .get("capabilities")
            .and_then(Json::as_array)
            .into_iter()
            .flatten()
            .filter_map(|c| c.get("name").and_then(Json::as_str))
            .map(str::to_string)
            .collect();
        let build = doc.get("build").and_then(Json::as_str).map(str::to_string);
        return Ok(Capabilities { names, how: "reported", build });
    }
    let help = r.run(&format!("{name}-help"), clink, &args!["--help"])?;
    let run_help = r.run(&format!("{name}-run-help"), clink, &args!["run", "--help"])?;
    if !help.ok() {
        return Err(StepError::Failed(format!(
            "{name}: neither `capabilities` nor `--help` answers ({})",
            help.describe()
        )));
    }
    let commands: BTreeSet<&str> = help.stdout.lines().filter_map(|l| l.split_whitespace().next()).collect();
    let run_flags = if run_help.ok() { run_help.stdout.clone() } else { String::new() };
    let mut names = BTreeSet::new();
    let mut has = |cap: &str, yes: bool| {
        if yes {
            names.insert(cap.to_string());
        }
    };
    has("job.run", commands.contains("run"));
    has("state.backend.file", commands.contains("run"));
    has("input.follow", run_flags.contains("--follow-input"));
    has("savepoint.request", commands.contains("savepoint"));
    has("stop.request", commands.contains("stop"));
    has("restore.dataset", run_flags.contains("--restore-from-dir"));
    has("restore.refuses_unmapped_state", run_flags.contains("--allow-non-restored-state"));
    has("dataset.export", commands.contains("checkpoint"));
    has("dataset.verify", commands.contains("checkpoint"));
    has("state.cat", commands.contains("state-cat"));
    has("state.diff", commands.contains("state-diff"));
    has("schema.check_savepoint", commands.contains("check-savepoint"));
    Ok(Capabilities { names, how: "probed", build: None })
}

/// The job id a job file names (`job_id`, default 1).
pub fn job_id(job: &Path) -> Result<u64, String> {
    let text = std::fs::read_to_string(job).map_err(|e| format!("{}: {e}", job.display()))?;
    let doc: Json = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", job.display()))?;
    match doc.get("job_id") {
        None => Ok(1),
        Some(Json::String(s)) => s.parse().map_err(|_| format!("{}: job_id {s:?} is not decimal", job.display())),
        Some(other) => Err(format!("{}: job_id {other} is not a decimal string", job.display())),
    }
}

/// Where one run of a build keeps its things.
#[derive(Debug, Clone)]
pub struct RunDirs {
    pub input: PathBuf,
    pub output: PathBuf,
    pub checkpoints: PathBuf,
}

impl RunDirs {
    pub fn under(dir: &Path) -> RunDirs {
        RunDirs { input: dir.join("input"), output: dir.join("output"), checkpoints: dir.join("checkpoints") }
    }
}

/// Starts a build's job following its input; `restore` is a dataset and
/// its checkpoint.
pub fn start_job(
    r: &mut Runner,
    name: &str,
    build: &Build,
    dirs: &RunDirs,
    restore: Option<(&Path, u64)>,
) -> Result<Running, StepError> {
    let mut a = args![
        "run",
        "--quiet",
        "--follow-input",
        "--job",
        build.job.display(),
        "--input-dir",
        dirs.input.display(),
        "--output-dir",
        dirs.output.display(),
        "--checkpoint-dir",
        dirs.checkpoints.display()
    ]
    .to_vec();
    if let Some((dataset, checkpoint)) = restore {
        a.extend(args!["--restore-from-dir", dataset.display(), "--restore-from-checkpoint-id", checkpoint]);
    }
    Ok(r.spawn(name, &build.clink, &a)?)
}

/// Takes a savepoint of a running job: its checkpoint id. Retries while no
/// live run owns the directory yet; fails when the job has exited.
pub fn savepoint(
    r: &mut Runner,
    name: &str,
    build: &Build,
    dirs: &RunDirs,
    job: u64,
    running: &mut Running,
) -> Result<u64, StepError> {
    let give_up = Instant::now() + Duration::from_secs(r.bounds().run_timeout_s);
    loop {
        r.check_bounds(name)?;
        let a = args!["savepoint", "--checkpoint-dir", dirs.checkpoints.display(), "--job-id", job, "--json"];
        let out = r.run(name, &build.clink, &a)?;
        if out.ok() {
            let doc: Json = serde_json::from_str(&out.stdout)
                .map_err(|e| StepError::Failed(format!("{name}: clink savepoint printed no JSON: {e}")))?;
            return doc
                .get("checkpoint")
                .and_then(Json::as_u64)
                .ok_or_else(|| StepError::Failed(format!("{name}: the answer names no checkpoint: {doc}")));
        }
        if out.code != Some(2) {
            return Err(StepError::Failed(format!("{name}: savepoint {}: {}", out.describe(), out.last_error_line())));
        }
        if r.exited(running) {
            return Err(StepError::Failed(format!("{name}: the job exited before it took a savepoint")));
        }
        if Instant::now() >= give_up {
            return Err(StepError::Bound(Stopped::RunTimeout { name: name.into(), seconds: r.bounds().run_timeout_s }));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Exports a checkpoint (an id or `latest`) with the tools build: the digest.
pub fn export(
    r: &mut Runner,
    name: &str,
    tools: &Path,
    checkpoints: &Path,
    job: u64,
    checkpoint: &str,
    out: &Path,
) -> Result<(String, u64), StepError> {
    let a = args![
        "checkpoint",
        "export",
        "--checkpoint-dir",
        checkpoints.display(),
        "--job-id",
        job,
        "--checkpoint",
        checkpoint,
        "--out",
        out.display(),
        "--json"
    ];
    let done = r.run(name, tools, &a)?;
    let doc = json_of(name, &done)?;
    // The export's digest and checkpoint are what the evidence records: a
    // result without them is a failed export, never an empty digest.
    let digest = doc
        .get("digest")
        .and_then(Json::as_str)
        .filter(|d| clink_basics::digest::is_sha256_hex(d))
        .ok_or_else(|| StepError::Failed(format!("{name}: the export names no SHA-256 digest: {doc}")))?
        .to_string();
    let id = doc
        .get("checkpoint")
        .and_then(Json::as_u64)
        .ok_or_else(|| StepError::Failed(format!("{name}: the export names no checkpoint: {doc}")))?;
    Ok((digest, id))
}

/// Lists a dataset with the tools build (`clink state-cat --json`).
pub fn state_cat(r: &mut Runner, name: &str, tools: &Path, dataset: &Path) -> Result<Json, StepError> {
    let done = r.run(name, tools, &args!["state-cat", "--dataset", dataset.display(), "--json"])?;
    json_of(name, &done)
}

/// A successful run's JSON output.
pub fn json_of(name: &str, done: &Finished) -> Result<Json, StepError> {
    if !done.ok() {
        return Err(StepError::Failed(format!("{name}: {}: {}", done.describe(), done.last_error_line())));
    }
    serde_json::from_str(&done.stdout).map_err(|e| StepError::Failed(format!("{name}: printed no JSON: {e}")))
}

/// Publishes segments whole: written under a hidden name, then renamed.
pub fn publish(dir: &Path, segments: &[(String, String)]) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for (name, text) in segments {
        let tmp = dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, text).map_err(|e| format!("{}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, dir.join(name)).map_err(|e| format!("{name}: {e}"))?;
    }
    Ok(())
}

/// Copies a directory tree (regular files and directories; a link is refused).
pub fn copy_tree(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::create_dir_all(to).map_err(|e| format!("{}: {e}", to.display()))?;
    for entry in std::fs::read_dir(from).map_err(|e| format!("{}: {e}", from.display()))? {
        let entry = entry.map_err(|e| e.to_string())?;
        let kind = entry.file_type().map_err(|e| e.to_string())?;
        let dest = to.join(entry.file_name());
        if kind.is_dir() {
            copy_tree(&entry.path(), &dest)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &dest).map_err(|e| format!("{}: {e}", entry.path().display()))?;
        } else {
            return Err(format!("{}: not a file or directory", entry.path().display()));
        }
    }
    Ok(())
}

/// The source position row of a listing: (segment, line).
pub fn source_position(listing: &Json) -> Option<(String, u64)> {
    listing
        .get("rows")?
        .as_array()?
        .iter()
        .find(|r| r.get("kind").and_then(Json::as_str) == Some("source.position"))
        .and_then(|r| {
            let v = r.get("values")?.as_array()?;
            let segment = v.first()?.get("string")?.as_str()?.to_string();
            let line = v.get(1)?.get("int")?.as_str()?.parse().ok()?;
            Some((segment, line))
        })
}
