//! The `upgrade` suite: one trial per scenario directory under
//! `fixtures/upgrade/scenarios/`, each running the real `clink upgrade
//! check` (real processes, real files, isolated by the command's own
//! `unshare -rn`) against evidence recorded once by `clink upgrade record`
//! with this build, and comparing the exit code and every check's status
//! with what the scenario declares.
//!
//! A scenario names its builds (baseline, candidate, tools): `current` (this
//! build), a wrapper of it (`forgets-restore`, `no-capabilities`,
//! `non-utf8-state-cat`: shell scripts in the scenario's scratch directory
//! that change how the build is driven, never the engine), or a build the
//! gate provides (`variant:<feature>`, `release:<name>`) under
//! $CLINK_UPGRADE_BUILDS/<name>/clink. A scenario whose provided build is
//! absent is not generated; the suite prints which and why
//! (gates/upgrade-gate builds them and runs every scenario).
//!
//! Tampering either breaks the set (`truncate-input`, `wrong-digest`) or
//! doctors it and seals it again (`reseal-*`), as whoever doctored it would:
//! then every hash holds and only what the check reads of the contents can
//! catch it. Whether this machine can isolate a build is asked of the one
//! proof, `clink isolation prove`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::Value as Json;

/// The checks of `upgrade check`, as the report and its page name them.
const CHECK_NAMES: [&str; 4] = ["evidence.integrity", "isolation", "builds.identity", "restore.candidate"];

fn clink() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_clink"))
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/upgrade")
}

/// The evidence every scenario checks against, recorded once.
struct Recorded {
    _dir: tempfile::TempDir,
    evidence: PathBuf,
    digest: String,
}

/// Runs `clink upgrade record` with a baseline and a tools build: its exit code and report.
fn record(out: &Path, baseline: &Path, job: &str, tools: &Path) -> Result<(Option<i32>, Json), String> {
    let done = Command::new(clink())
        .args(["upgrade", "record", "--json", "--test"])
        .arg(root().join("test.json"))
        .arg("--out")
        .arg(out)
        .arg("--tools-clink")
        .arg(tools)
        .arg("--baseline-clink")
        .arg(baseline)
        .arg("--baseline-job")
        .arg(root().join("jobs").join(job))
        .output()
        .map_err(|e| e.to_string())?;
    let report: Json = serde_json::from_slice(&done.stdout)
        .map_err(|e| format!("record printed no report ({e}): {}", String::from_utf8_lossy(&done.stderr)))?;
    Ok((done.status.code(), report))
}

/// Records evidence; `record_exit` is the exit the recording must have (it
/// publishes the set either way: a baseline already wrong at the cut exits 1).
fn recorded_by(
    dir: tempfile::TempDir,
    baseline: &Path,
    job: &str,
    tools: &Path,
    record_exit: i32,
) -> Result<Recorded, String> {
    let out = dir.path().join("record");
    let (code, report) = record(&out, baseline, job, tools)?;
    if code != Some(record_exit) {
        return Err(format!("record exited {code:?}: {report:#}"));
    }
    let digest = report["facts"]["evidence_digest"].as_str().ok_or("no digest in the record report")?.to_string();
    Ok(Recorded { evidence: out.join("evidence"), digest, _dir: dir })
}

fn recorded() -> Result<&'static Recorded, String> {
    static ONCE: OnceLock<Result<Recorded, String>> = OnceLock::new();
    ONCE.get_or_init(|| {
        recorded_by(tempfile::tempdir().map_err(|e| e.to_string())?, &clink(), "example.json", &clink(), 0)
    })
    .as_ref()
    .map_err(Clone::clone)
}

#[derive(Debug, Clone)]
struct Scenario {
    name: String,
    doc: Json,
}

fn provided(build: &str) -> Option<PathBuf> {
    let name = build.split_once(':').map(|(_, n)| n)?;
    let dir = std::env::var_os("CLINK_UPGRADE_BUILDS")?;
    let path = PathBuf::from(dir).join(name).join("clink");
    path.is_file().then_some(path)
}

/// A wrapper of this build, written into `dir`.
fn wrapper(dir: &Path, kind: &str) -> Result<PathBuf, String> {
    let real = clink().display().to_string();
    let body = match kind {
        // A submission that forgets the restore: the job starts fresh.
        "forgets-restore" => format!(
            "#!/usr/bin/env python3\nimport os, sys\nreal = {real:?}\nargs = sys.argv[1:]\nif args[:1] == ['run']:\n    kept, i = [], 0\n    while i < len(args):\n        if args[i] in ('--restore-from-dir', '--restore-from-checkpoint-id'):\n            i += 2\n            continue\n        kept.append(args[i])\n        i += 1\n    args = kept\nos.execv(real, [real] + args)\n"
        ),
        // A build whose job takes its time to start: the interrupt lands while it runs.
        "slow-start" => format!("#!/bin/sh\nif [ \"$1\" = run ]; then sleep 120; fi\nexec \"{real}\" \"$@\"\n"),
        // A build that predates the capabilities report and has no savepoint request.
        "no-capabilities" => format!(
            "#!/bin/sh\nif [ \"$1\" = capabilities ]; then echo \"error: unrecognized subcommand 'capabilities'\" >&2; exit 2; fi\nif [ \"$1\" = --help ]; then \"{real}\" --help | grep -v '^  savepoint'; exit 0; fi\nexec \"{real}\" \"$@\"\n"
        ),
        // A tools build whose listing of the check's copy of the evidence is
        // not text (the recording's own listings are untouched).
        "non-utf8-state-cat" => format!(
            "#!/bin/sh\ncase \"$*\" in *state-cat*/work/tools/dataset*) printf 'not text: \\377\\n'; exit 0;; esac\nexec \"{real}\" \"$@\"\n"
        ),
        other => return Err(format!("no wrapper {other:?}")),
    };
    let path = dir.join(format!("clink-{kind}"));
    std::fs::write(&path, body).map_err(|e| e.to_string())?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())?;
    Ok(path)
}

fn build_path(dir: &Path, build: &str) -> Result<PathBuf, String> {
    match build {
        "current" => Ok(clink()),
        b if b.starts_with("wrapper:") => wrapper(dir, &b["wrapper:".len()..]),
        b => provided(b).ok_or_else(|| format!("build {b} is not provided")),
    }
}

/// A copy of the evidence with the scenario's tampering: the directory and the digest to give.
fn tampered(dir: &Path, rec: &Recorded, tamper: &str) -> Result<(PathBuf, String), String> {
    let copy = dir.join("evidence");
    copy_dir(&rec.evidence, &copy)?;
    let sha = |p: &Path| -> Result<String, String> {
        let out = Command::new("sha256sum").arg(p).output().map_err(|e| e.to_string())?;
        Ok(String::from_utf8_lossy(&out.stdout).split_whitespace().next().unwrap_or("").to_string())
    };
    match tamper {
        "none" => Ok((copy, rec.digest.clone())),
        "wrong-digest" => Ok((copy, sha(&root().join("test.json"))?)),
        "truncate-input" => {
            let seg = copy.join("input/segment-0004.txt");
            let text = std::fs::read(&seg).map_err(|e| e.to_string())?;
            std::fs::write(&seg, &text[..text.len() / 2]).map_err(|e| e.to_string())?;
            Ok((copy, rec.digest.clone()))
        }
        kind if kind.starts_with("reseal-") => reseal(&copy, kind),
        "evidence-version-2" => {
            let index = copy.join("evidence.json");
            let text = std::fs::read_to_string(&index).map_err(|e| e.to_string())?;
            std::fs::write(&index, text.replacen("\"version\": 1", "\"version\": 2", 1)).map_err(|e| e.to_string())?;
            Ok((copy.clone(), sha(&index)?))
        }
        other => Err(format!("unknown tampering {other:?}")),
    }
}

/// A doctored set sealed again, as whoever doctored it would: every file
/// hashes as its new index says and the new digest is the one given. Only
/// what the check reads of the contents can catch it.
fn reseal(copy: &Path, kind: &str) -> Result<(PathBuf, String), String> {
    use clink_upgrade::evidence::{seal, Index, INDEX};
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let mut index: Index =
        serde_json::from_slice(&std::fs::read(copy.join(INDEX)).map_err(|x| e(&x))?).map_err(|x| e(&x))?;
    let edit_file = |rel: &str, f: &dyn Fn(String) -> String| -> Result<(), String> {
        let path = copy.join(rel);
        let text = std::fs::read_to_string(&path).map_err(|x| e(&x))?;
        std::fs::write(&path, f(text)).map_err(|x| e(&x))
    };
    match kind {
        "reseal-record-failed" | "reseal-record-missing" => {
            let state = |c: &Json| c["name"] == "record.state";
            if kind == "reseal-record-failed" {
                index.record_checks.iter_mut().filter(|c| state(c)).for_each(|c| c["status"] = "failed".into());
            } else {
                index.record_checks.retain(|c| !state(c));
            }
        }
        "reseal-input" => edit_file("input/segment-0004.txt", &|t| t.replacen("acct-", "acct-9", 1))?,
        "reseal-input-extra" => std::fs::write(copy.join("input/segment-0099.txt"), "END\n").map_err(|x| e(&x))?,
        "reseal-reference" => edit_file("reference.json", &|t| {
            let mut doc: Json = serde_json::from_str(&t).unwrap_or_default();
            if let Some(rows) = doc["at_end"]["windows"].as_array_mut() {
                rows.pop();
            }
            serde_json::to_string_pretty(&doc).unwrap_or_default()
        })?,
        "reseal-output" => edit_file("output/windows-out/committed.txt", &|t| {
            let mut lines: Vec<&str> = t.lines().collect();
            lines.pop();
            lines.iter().map(|l| format!("{l}\n")).collect()
        })?,
        "reseal-watermark" => index.savepoint.last_watermark = index.savepoint.last_watermark.map(|w| w + 1),
        "reseal-job" => index.savepoint.job = "7".into(),
        "reseal-checkpoint" => index.savepoint.checkpoint += 1,
        "reseal-operators" => {
            index.savepoint.operators.iter_mut().filter(|o| o.uid == "windows").for_each(|o| o.subtasks += 1)
        }
        "reseal-tools" => index.tools.clink.sha256 = "0".repeat(64),
        other => return Err(format!("unknown tampering {other:?}")),
    }
    let digest = seal(copy, index)?;
    Ok((copy.to_path_buf(), digest))
}

fn copy_dir(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::create_dir_all(to).map_err(|e| e.to_string())?;
    for entry in std::fs::read_dir(from).map_err(|e| e.to_string())?.flatten() {
        let dest = to.join(entry.file_name());
        if entry.file_type().map_err(|e| e.to_string())?.is_dir() {
            copy_dir(&entry.path(), &dest)?;
        } else {
            std::fs::copy(entry.path(), dest).map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// The statuses of a report's checks, by name: (status, reason).
fn statuses(report: &Json) -> BTreeMap<String, (String, String)> {
    report["checks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| {
            Some((
                c["name"].as_str()?.to_string(),
                (c["status"].as_str()?.to_string(), c["reason"].as_str().unwrap_or("").to_string()),
            ))
        })
        .collect()
}

/// The report's exit code and every check's status, as an insta snapshot
/// (reasons hold ports, digests and paths, so only statuses are kept).
/// Scenarios whose statuses depend on timing (bounds, the interrupt) say
/// `"snapshot": false` and are judged by their declared statuses alone.
fn snapshot(name: &str, report: &Json, d: &Json) {
    if d.get("snapshot").and_then(Json::as_bool) == Some(false) {
        return;
    }
    let mut text = format!(
        "{} {}: exit {}\n",
        report["command"].as_str().unwrap_or("?"),
        report["result"].as_str().unwrap_or("?"),
        report["exit_code"]
    );
    for c in report["checks"].as_array().into_iter().flatten() {
        let (status, check) = (c["status"].as_str().unwrap_or("?"), c["name"].as_str().unwrap_or("?"));
        text.push_str(&format!("{status:<12} {check}\n"));
    }
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/upgrade"));
    settings.set_prepend_module_to_snapshot(false);
    settings.bind(|| insta::assert_snapshot!(name.to_string(), text));
}

fn compare(
    name: &str,
    code: Option<i32>,
    report: &Json,
    d: &Json,
    exit_key: &str,
    checks_key: &str,
) -> Result<(), Failed> {
    let mut problems = Vec::new();
    let want_exit = d.get(exit_key).and_then(Json::as_i64).unwrap_or(-1);
    if code.map(i64::from) != Some(want_exit) {
        problems.push(format!("exit {code:?}, expected {want_exit}"));
    }
    let statuses = statuses(report);
    for (check, want) in d.get(checks_key).and_then(Json::as_object).into_iter().flatten() {
        let want = want.as_str().unwrap_or("");
        match statuses.get(check) {
            Some((got, _)) if got == want => {}
            Some((got, why)) => problems.push(format!("{check}: {got} ({why}), expected {want}")),
            None => problems.push(format!("{check}: not in the report, expected {want}")),
        }
    }
    if let Some(needle) = d.get("refusal_contains").and_then(Json::as_str) {
        let reason = report["reason"].as_str().unwrap_or("");
        if report["result"] != "refused" || !reason.contains(needle) {
            problems.push(format!("expected a refusal mentioning {needle:?}: {report}"));
        }
    }
    for (check, needle) in d.get("reasons_contain").and_then(Json::as_object).into_iter().flatten() {
        let needle = needle.as_str().unwrap_or("");
        if !statuses.get(check).is_some_and(|(_, why)| why.contains(needle)) {
            problems.push(format!("{check}: the reason does not mention {needle:?}: {:?}", statuses.get(check)));
        }
    }
    if !problems.is_empty() {
        return Err(format!("{name}:\n  {}", problems.join("\n  ")).into());
    }
    snapshot(name, report, d);
    Ok(())
}

fn run_scenario(s: &Scenario) -> Result<(), Failed> {
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let dir = tmp.path();
    let d = &s.doc;
    let get = |k: &str, default: &str| d.get(k).and_then(Json::as_str).unwrap_or(default).to_string();
    let own;
    let rec = match d.get("record_baseline").and_then(Json::as_str) {
        Some(build) => {
            let baseline = build_path(dir, build)?;
            let tools = build_path(dir, &get("tools", "current"))?;
            if d.get("expected_record_exit").is_some() {
                // The scenario is about the recording itself.
                let job = get("baseline_job", "example.json");
                let (code, report) = record(&dir.join("record"), &baseline, &job, &tools)?;
                return compare(&s.name, code, &report, d, "expected_record_exit", "expected_record");
            }
            let record_exit = d.get("record_exit").and_then(Json::as_i64).unwrap_or(0) as i32;
            let job = get("baseline_job", "example.json");
            own = recorded_by(tempfile::tempdir().map_err(|e| e.to_string())?, &baseline, &job, &tools, record_exit)?;
            &own
        }
        None => recorded()?,
    };
    let (evidence, digest) = tampered(dir, rec, &get("tamper", "none"))?;
    let test = match d.get("test").and_then(Json::as_str) {
        Some(t) => root().join(t),
        None => root().join("test.json"),
    };
    let out = dir.join("check");
    let mut cmd = Command::new(clink());
    cmd.args(["upgrade", "check", "--json", "--test"])
        .arg(&test)
        .arg("--evidence")
        .arg(&evidence)
        .arg("--evidence-digest")
        .arg(&digest)
        .arg("--out")
        .arg(&out)
        .arg("--tools-clink")
        .arg(build_path(dir, &get("tools", "current"))?)
        .arg("--baseline-clink")
        .arg(build_path(dir, &get("baseline", "current"))?)
        .arg("--baseline-job")
        .arg(root().join("jobs").join(get("baseline_job", "example.json")))
        .arg("--candidate-clink")
        .arg(build_path(dir, &get("candidate", "current"))?)
        .arg("--candidate-job")
        .arg(root().join("jobs").join(get("candidate_job", "example.json")))
        .arg("--html")
        .arg(dir.join("report.html"));
    if let Some(bounds) = d.get("bounds").and_then(Json::as_object) {
        for (k, v) in bounds {
            cmd.arg(format!("--{k}")).arg(v.to_string());
        }
    }
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = cmd.spawn().map_err(|e| e.to_string())?;
    if let Some(after) = d.get("interrupt_after_s").and_then(Json::as_f64) {
        std::thread::sleep(Duration::from_secs_f64(after));
        // SAFETY: a plain kill(2) of our own child.
        unsafe {
            libc::kill(child.id() as libc::pid_t, libc::SIGINT);
        }
    }
    let done = child.wait_with_output().map_err(|e| e.to_string())?;
    let stderr = String::from_utf8_lossy(&done.stderr);
    let report: Json = match std::fs::read(out.join("report.json")) {
        Ok(bytes) => {
            // Whenever the report is written, so is its page, every check on it.
            let page = std::fs::read_to_string(dir.join("report.html")).map_err(|e| format!("--html: {e}"))?;
            if let Some(missing) = CHECK_NAMES.iter().find(|n| !page.contains(**n)) {
                return Err(format!("the HTML report lacks {missing}").into());
            }
            serde_json::from_slice(&bytes).map_err(|e| format!("report.json: {e}"))?
        }
        Err(_) => serde_json::from_slice(&done.stdout).map_err(|e| {
            format!("no report ({e}); stderr: {stderr}; stdout: {}", String::from_utf8_lossy(&done.stdout))
        })?,
    };
    compare(&s.name, done.status.code(), &report, d, "expected_exit", "expected")
}

/// Whether this machine can isolate a build: the one proof, `clink isolation prove`.
fn isolation_possible() -> bool {
    Command::new(clink()).args(["isolation", "prove"]).stdout(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// Where isolation is impossible, recording is not established and runs nothing.
fn without_isolation() -> Result<(), Failed> {
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let (code, report) = record(&tmp.path().join("record"), &clink(), "example.json", &clink())?;
    let d = serde_json::json!({
        "expected_exit": 3,
        "expected": {"isolation": "unavailable", "builds.capabilities": "unavailable", "record.savepoint": "unavailable"}
    });
    compare("without-isolation", code, &report, &d, "expected_exit", "expected")?;
    if report["commands"].as_array().is_some_and(|c| !c.is_empty()) {
        return Err(format!("a build ran without isolation: {:#}", report["commands"]).into());
    }
    Ok(())
}

fn main() {
    let args = Arguments::from_args();
    if !isolation_possible() {
        eprintln!("upgrade suite: this machine cannot isolate a build (no unshare -rn, interfaces besides lo): the scenarios cannot run here; only the refusal to run without isolation is checked");
        let trials = vec![Trial::test("upgrade::without-isolation", without_isolation)];
        libtest_mimic::run(&args, trials).exit();
    }
    let dir = root().join("scenarios");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .map(|r| r.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    names.sort();
    let mut trials: Vec<Trial> = Vec::new();
    // CLINK_UPGRADE_SCENARIOS (the gate): the scenarios to run, or `all`;
    // a selected scenario whose build is missing fails instead of being left out.
    let selected: Option<Vec<String>> = std::env::var("CLINK_UPGRADE_SCENARIOS")
        .ok()
        .filter(|s| s != "all")
        .map(|s| s.split(',').map(str::to_string).collect());
    let required = std::env::var_os("CLINK_UPGRADE_SCENARIOS").is_some();
    if let Some(sel) = &selected {
        for want in sel.iter().filter(|w| !names.contains(w)) {
            let want = want.clone();
            trials.push(Trial::test(format!("upgrade::{want}"), move || Err(format!("no scenario {want}").into())));
        }
        names.retain(|n| sel.contains(n));
    }
    let mut absent = Vec::new();
    for name in names {
        let path = dir.join(&name).join("scenario.json");
        let doc: Json = match std::fs::read(&path).ok().and_then(|b| serde_json::from_slice(&b).ok()) {
            Some(doc) => doc,
            None => {
                let shown = path.display().to_string();
                trials.push(Trial::test(format!("upgrade::{name}"), move || {
                    Err(format!("{shown}: not a readable scenario").into())
                }));
                continue;
            }
        };
        let needs: Vec<String> = ["baseline", "candidate", "record_baseline", "tools"]
            .iter()
            .filter_map(|k| doc.get(*k).and_then(Json::as_str))
            .filter(|b| b.starts_with("variant:") || b.starts_with("release:"))
            .filter(|b| provided(b).is_none())
            .map(str::to_string)
            .collect();
        if !needs.is_empty() && required {
            let why = format!("the gate selected it but these builds are missing: {}", needs.join(", "));
            trials.push(Trial::test(format!("upgrade::{name}"), move || Err(why.into())));
            continue;
        }
        if !needs.is_empty() {
            absent.push(format!("{name} (needs {})", needs.join(", ")));
            continue;
        }
        let scenario = Scenario { name: name.clone(), doc };
        trials.push(Trial::test(format!("upgrade::{name}"), move || run_scenario(&scenario)));
    }
    if trials.is_empty() {
        trials.push(Trial::test("upgrade::none_found", || Err("no scenario: an empty suite proves nothing".into())));
    }
    if !absent.is_empty() {
        eprintln!(
            "upgrade suite: not generated here (their builds come from gates/upgrade-gate via $CLINK_UPGRADE_BUILDS): {}",
            absent.join("; ")
        );
    }
    libtest_mimic::run(&args, trials).exit();
}
