//! The rescale suite's trials on the RocksDB state backend (`--state
//! rocksdb://`, a root outside the checkpoint directory): the example job
//! killed at each protocol fault point and resumed, restored at another
//! parallelism, the `--state` values refused, and hostile RocksDB state (a
//! table file missing or cut short, a CURRENT file pointing elsewhere)
//! refused by name before anything restores. Two trials run on a `file://`
//! root outside the checkpoint directory.

use std::path::{Path, PathBuf};
use std::process::Command;

use libtest_mimic::Trial;

use super::{clink, job_at, killed, rescale_trial_on, shared, stderr, Backend, Before, Scenario, EVERY};

/// The protocol's fault points the rescale suite kills at.
const FAULT_POINTS: [&str; 7] = [
    "sink.before_prepare",
    "sink.after_prepare",
    "sink.before_commit",
    "sink.after_commit",
    "coordinator.before_completed_marker",
    "coordinator.after_completed_marker",
    "coordinator.before_commit_broadcast",
];

pub fn trials() -> Vec<Trial> {
    let mut trials: Vec<Trial> = FAULT_POINTS.iter().map(|point| resume_trial(point)).collect();
    trials.extend([
        rescale_trial_on(Backend::Rocksdb, 2, 3, Before::Killed("coordinator.after_completed_marker@2"), None),
        rescale_trial_on(Backend::Rocksdb, 3, 1, Before::Killed("sink.before_commit@2"), None),
        rescale_trial_on(Backend::Rocksdb, 2, 3, Before::Savepoint, None),
        rescale_trial_on(Backend::Rocksdb, 3, 1, Before::Savepoint, None),
        rescale_trial_on(Backend::FileRoot, 2, 3, Before::Killed("coordinator.after_completed_marker@2"), None),
        rescale_trial_on(Backend::FileRoot, 3, 1, Before::Savepoint, None),
        bad_values_trial(),
        another_root_trial(),
    ]);
    trials.extend(HOSTILE.iter().map(|&(name, harm)| hostile_trial(name, harm)));
    trials
}

/// The state of a scenario's runs went where its backend puts it: under
/// the named root and nothing under the checkpoint directory's `_state/`; for
/// RocksDB, checkpoint directories and sidecars and no snapshot file, for
/// files under a root, snapshots and sidecars and no RocksDB checkpoint; the
/// newest marker naming the backend and the root.
pub fn state_went_to_its_root(s: &Scenario) -> Result<(), String> {
    let scheme = match s.backend {
        Backend::File => return Ok(()),
        Backend::Rocksdb => "rocksdb",
        Backend::FileRoot => "file",
    };
    if s.dir.path().join("ck/_state").exists() {
        return Err("the checkpoint directory holds _state/: the run did not write to --state".into());
    }
    let (mut checkpoints, mut sidecars, mut files) = (0, 0, Vec::new());
    walk(&s.state_base().join("_state/1"), &mut |path| {
        let name = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
        checkpoints += usize::from(name == "CURRENT" && path.to_string_lossy().contains(".cp-"));
        sidecars += usize::from(name.ends_with(".snap.meta"));
        if name.ends_with(".snap") {
            files.push(path.display().to_string());
        }
    });
    let as_expected = match s.backend {
        Backend::FileRoot => checkpoints == 0 && sidecars > 0 && files.len() == sidecars,
        _ => checkpoints > 0 && sidecars > 0 && files.is_empty(),
    };
    if !as_expected {
        return Err(format!(
            "{checkpoints} RocksDB checkpoints, {sidecars} sidecars and {} snapshot files under the root {}",
            files.len(),
            s.state_base().display()
        ));
    }
    let (newest, _, _) = s.newest_marker("5")?;
    let marker = std::fs::read_to_string(s.dir.path().join(format!("ck/_jobs/1/COMPLETED-{newest}")))
        .map_err(|e| e.to_string())?;
    let marker: serde_json::Value = serde_json::from_str(&marker).map_err(|e| e.to_string())?;
    let root = s.state_base().display().to_string();
    if marker["state"] != serde_json::json!({"backend": scheme, "root": root}) {
        return Err(format!("COMPLETED-{newest} names the state {}, not {scheme} at {root}", marker["state"]));
    }
    Ok(())
}

fn walk(dir: &Path, visit: &mut dyn FnMut(&Path)) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            walk(&path, visit);
        } else {
            visit(&path);
        }
    }
}

/// Killed at `point` of checkpoint 2 on RocksDB at parallelism 2, resumed:
/// the reference's output, nothing staged, the state in RocksDB.
fn resume_trial(point: &'static str) -> Trial {
    Trial::test(format!("rocksdb::resume::{point}@2"), move || {
        let s = Scenario::on(Backend::Rocksdb);
        let out = s.run(2, Some(&format!("{point}@2")), &[]);
        if !killed(&out) {
            return Err(
                format!("the run armed with {point}@2 was not killed: {:?}\n{}", out.status, stderr(&out)).into()
            );
        }
        let out = s.run(2, None, &[]);
        if !out.status.success() {
            return Err(format!("the resume failed: {:?}\n{}", out.status, stderr(&out)).into());
        }
        s.check_output()?;
        Ok(state_went_to_its_root(&s)?)
    })
}

/// A relative path, another scheme, no scheme and a root that is a file are
/// refused with exit 2 naming the flag, before anything is written.
fn bad_values_trial() -> Trial {
    Trial::test("rocksdb::refused::bad-state-values", || {
        let s = Scenario::new();
        let a_file = s.dir.path().join("a-file");
        std::fs::write(&a_file, b"x").map_err(|e| e.to_string())?;
        let values = [
            "rocksdb://relative/path".to_string(),
            "s3:///bucket/state".to_string(),
            s.dir.path().join("plain").display().to_string(),
            format!("rocksdb://{}", a_file.display()),
            format!("file://{}/../up", s.dir.path().display()),
        ];
        for value in values {
            let out = s.run(2, None, &["--state", &value]);
            let said = stderr(&out);
            if out.status.code() != Some(2) || !said.contains("--state") || !said.contains("expected") {
                return Err(format!("--state {value}: {:?}\n{said}", out.status).into());
            }
            if s.dir.path().join("ck").exists() {
                return Err(format!("--state {value} was refused after the checkpoint directory was made").into());
            }
        }
        Ok(())
    })
}

/// A resume naming another state root than its checkpoints' (here none:
/// the default) is refused with exit 2, naming both.
fn another_root_trial() -> Trial {
    Trial::test("rocksdb::refused::resume-with-another-root", || {
        let s = Scenario::on(Backend::Rocksdb);
        let out = s.run(2, Some("coordinator.after_completed_marker@2"), &[]);
        if !killed(&out) {
            return Err(format!("not killed: {}", stderr(&out)).into());
        }
        // The same directories, without --state.
        let mut resumed = Command::new(clink());
        resumed
            .args(["run", "--quiet", "--job"])
            .arg(job_at(s.dir.path(), 2))
            .arg("--input-dir")
            .arg(&shared().input)
            .arg("--output-dir")
            .arg(s.output())
            .arg("--checkpoint-dir")
            .arg(s.dir.path().join("ck"))
            .args(["--checkpoint-every-records", EVERY])
            .env_remove("CLINK_FAULT")
            .env_remove("CLINK_TEST_DEFECT");
        let out = resumed.output().map_err(|e| e.to_string())?;
        let said = stderr(&out);
        let root = s.state_base().display().to_string();
        if out.status.code() != Some(2) || !said.contains("--state") || !said.contains(&root) {
            return Err(format!("resumed without --state: {:?}\n{said}", out.status).into());
        }
        Ok(())
    })
}

/// What a hostile trial does to the restore point's RocksDB checkpoint.
type Harm = fn(&Path) -> Result<PathBuf, String>;

const HOSTILE: [(&str, Harm); 3] =
    [("missing-sst", remove_table), ("truncated-sst", truncate_table), ("current-elsewhere", redirect_current)];

fn a_table(cp: &Path) -> Result<PathBuf, String> {
    let mut tables: Vec<PathBuf> = std::fs::read_dir(cp)
        .map_err(|e| format!("{}: {e}", cp.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "sst"))
        .collect();
    tables.sort();
    tables.into_iter().next().ok_or_else(|| format!("{}: no table file", cp.display()))
}

fn remove_table(cp: &Path) -> Result<PathBuf, String> {
    let table = a_table(cp)?;
    std::fs::remove_file(&table).map_err(|e| e.to_string())?;
    Ok(table)
}

fn truncate_table(cp: &Path) -> Result<PathBuf, String> {
    let table = a_table(cp)?;
    let bytes = std::fs::read(&table).map_err(|e| e.to_string())?;
    std::fs::write(&table, &bytes[..bytes.len() / 2]).map_err(|e| e.to_string())?;
    Ok(table)
}

fn redirect_current(cp: &Path) -> Result<PathBuf, String> {
    let current = cp.join("CURRENT");
    std::fs::write(&current, b"MANIFEST-000001\n").map_err(|e| e.to_string())?;
    Ok(current)
}

/// The restore point's checkpoint of a windows subtask harmed: the resume
/// fails naming the harmed file (a damaged snapshot is a failed restore,
/// exit 1, as for the file backend), and restores nothing: no RESTORED
/// record, no marker past the restore point, no output past the kill's.
fn hostile_trial(name: &'static str, harm: Harm) -> Trial {
    Trial::test(format!("rocksdb::hostile::{name}"), move || {
        let s = Scenario::on(Backend::Rocksdb);
        let out = s.run(2, Some("coordinator.after_completed_marker@2"), &[]);
        if !killed(&out) {
            return Err(format!("not killed: {}", stderr(&out)).into());
        }
        let cp = s.state_base().join("_state/1/v1/op-3-0.cp-2");
        let harmed = harm(&cp)?;
        let output_before = listing(&s.output());
        let out = s.run(2, None, &[]);
        let said = stderr(&out);
        if out.status.code() != Some(1)
            || !said.contains("restoring checkpoint 2")
            || !said.contains(&*harmed.to_string_lossy())
        {
            return Err(format!("the resume over {}: {:?}\n{said}", harmed.display(), out.status).into());
        }
        let jobs = s.dir.path().join("ck/_jobs/1");
        if jobs.join("RESTORED").exists() || s.newest_marker("5")?.0 != 2 || listing(&s.output()) != output_before {
            return Err("the refused resume restored something: a RESTORED record, a marker or output".into());
        }
        Ok(())
    })
}

fn listing(dir: &Path) -> Vec<(String, u64)> {
    let mut files = Vec::new();
    walk(dir, &mut |p| files.push((p.display().to_string(), p.metadata().map_or(0, |m| m.len()))));
    files.sort();
    files
}
