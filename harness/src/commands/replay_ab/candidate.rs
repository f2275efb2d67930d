//! The candidate build as `replay ab` runs it: pinned before it first runs
//! (its copy, loader and libraries hashed, `clink_upgrade::pin`), started
//! only confined (it may execute its copy and loader, read its libraries
//! and the evidence, write only its dumps) with an empty environment, and
//! checked again after every run it makes (`PinnedBuild::still_same`).
//!
//! Whatever the report names by hash is every byte of code that produced
//! the candidate's dumps: a run after which any pinned file changed ends
//! the whole A/B as refused, whatever the comparisons said.

use std::path::{Path, PathBuf};

use clink_basics::exit::Exit;
use clink_replay::ab::{parse_declared, Declared};
use clink_upgrade::confine::Confinement;
use clink_upgrade::pin::{PinError, PinnedBuild};
use clink_upgrade::runner::{Launch, Runner, Running};
use serde_json::{json, Value as Json};

pub(super) struct Candidate {
    pinned: PinnedBuild,
    confinement: Confinement,
    /// Runs after which every pinned file was hashed again and was the same.
    checked_runs: usize,
}

impl Candidate {
    /// Pins the build named by --candidate-clink into `dir` (never granted
    /// to it), confined to read `evidence` and write `dumps`.
    pub(super) fn pin(
        given: &Path,
        dir: &Path,
        runner: &mut Runner,
        evidence: &[PathBuf],
        dumps: &Path,
    ) -> Result<Candidate, (Exit, String)> {
        let stop = |e: PinError| match e {
            PinError::Refused(why) => (Exit::Refused, format!("--candidate-clink {why}")),
            PinError::Unavailable(why) => (Exit::NotEstablished, format!("{why}; so no candidate was run")),
        };
        let pinned = PinnedBuild::take(given, dir, runner).map_err(stop)?;
        let confinement = pinned.confinement(evidence, &[dumps.to_path_buf()]).map_err(stop)?;
        Ok(Candidate { pinned, confinement, checked_runs: 0 })
    }

    pub(super) fn spawn(&self, runner: &mut Runner, name: &str, args: &[String]) -> Result<Running, String> {
        let launch = Launch { env: Some(&[]), confinement: Some(&self.confinement) };
        runner.spawn_launch(name, &self.pinned.binary, args, &launch).map_err(|e| e.to_string())
    }

    /// The candidate's declaration, or why there is none.
    pub(super) fn declared(&self, runner: &mut Runner) -> Result<Declared, String> {
        let args = ["capabilities".to_string(), "--json".to_string()];
        let running = self.spawn(runner, "capabilities", &args)?;
        let finished = runner.wait(running, None).map_err(|e| e.to_string())?;
        if !finished.ok() {
            return Err(format!(
                "capabilities --json ended with {}: {}",
                finished.describe(),
                finished.last_error_line()
            ));
        }
        parse_declared(finished.stdout.as_bytes()).map_err(|e| e.to_string())
    }

    /// After a run: every pinned file hashed again, or the A/B is refused.
    pub(super) fn still_pinned(&mut self, after: &str) -> Result<(), (Exit, String)> {
        self.pinned.still_same().map_err(|changed| {
            (
                Exit::Refused,
                format!(
                    "the candidate's code changed during its run ({after}): {changed}; what ran is not what the report would name, so nothing is reported"
                ),
            )
        })?;
        self.checked_runs += 1;
        Ok(())
    }

    /// What the report says of the candidate.
    pub(super) fn to_json(&self, declared: &Result<Declared, String>) -> Json {
        let grants = self.confinement.grants();
        let shown = |paths: &[PathBuf]| paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>();
        json!({
            "path": self.pinned.given.display().to_string(),
            "ran": self.pinned.binary.display().to_string(),
            "sha256": self.pinned.binary_sha256(),
            "code_sha256": self.pinned.code_sha256(),
            "code": self.pinned.files.iter().map(|f| json!({
                "role": f.role, "path": f.path.display().to_string(), "bytes": f.bytes, "sha256": f.sha256,
            })).collect::<Vec<_>>(),
            "build": declared.as_ref().map(|d| d.build.clone()).ok(),
            "confinement": {
                "mechanism": "landlock",
                "abi": self.confinement.abi(),
                "may_execute": shown(&grants.execute),
                "may_read": shown(&[grants.read_files.clone(), grants.read_trees.clone()].concat()),
                "may_write": shown(&grants.write_trees),
                "environment": "empty",
            },
            "runs_checked_unchanged": self.checked_runs,
            // How the copy was found unchanged after each run: its read
            // lease never broken, or its bytes hashed again.
            "copy_checked_by": if self.pinned.copy_held() { "read-lease" } else { "sha256" },
        })
    }
}
