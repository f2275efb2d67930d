//! The formal suite: one trial per model (`model::`), per mutant
//! (`mutant::`), per trace example and recorded trace (`trace::`), per trace
//! the engine's own test run left (`trace::testrun::`), and the agreement of
//! the trace vocabulary (`vocabulary::agreement`). Without Java or the pinned
//! TLA+ jar every TLC trial is ignored, with the reason as its kind; never
//! passed.

mod common;

use common::copy_dir;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use clink_formal::suite::{check_example, check_model, check_mutant, check_recorded, configs, module_events, subdirs};
use clink_formal::tlc::parse_expected;
use clink_formal::{locate, FormalTools};
use libtest_mimic::{Arguments, Failed, Trial};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn tlc_trial(
    name: String,
    tools: &Result<FormalTools, String>,
    f: impl FnOnce(&FormalTools) -> Result<(), String> + Send + 'static,
) -> Trial {
    match tools {
        Ok(tools) => {
            let tools = tools.clone();
            Trial::test(name, move || f(&tools).map_err(Failed::from))
        }
        Err(why) => Trial::test(name, || Ok(())).with_ignored_flag(true).with_kind(format!("needs TLC: {why}")),
    }
}

fn vocabulary_agreement() -> Result<(), Failed> {
    let emitted: Vec<String> = clink_engine::trace::TraceEvent::ALL.iter().map(|e| e.name().to_string()).collect();
    let text = std::fs::read_to_string(repo().join("formal/trace/events.txt")).map_err(|e| e.to_string())?;
    let listed: Vec<String> = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split('|').next().map(|n| n.trim().to_string()))
        .collect();
    let module =
        std::fs::read_to_string(repo().join("formal/trace/TraceExactlyOnce.tla")).map_err(|e| e.to_string())?;
    let handled = module_events(&module);
    let (e, l, h): (BTreeSet<_>, BTreeSet<_>, BTreeSet<_>) =
        (emitted.iter().collect(), listed.iter().collect(), handled.iter().collect());
    if e != l || l != h {
        return Err(format!(
            "the emitter, events.txt and the trace module disagree:\n  emitted: {e:?}\n  events.txt: {l:?}\n  module: {h:?}"
        )
        .into());
    }
    Ok(())
}

fn main() {
    let args = Arguments::from_args();
    let tools = locate(None, None);
    let formal = repo().join("formal");
    let mut trials = vec![Trial::test("vocabulary::agreement", vocabulary_agreement)];

    for name in configs(&formal.join("models")) {
        trials.push(tlc_trial(format!("model::{name}"), &tools, move |t| check_model(t, &name).map(|_| ())));
    }

    let mutants = repo().join("mutants");
    let expected = std::fs::read_to_string(mutants.join("expected.txt"))
        .map_err(|e| e.to_string())
        .and_then(|t| parse_expected(&t));
    match expected {
        Err(e) => trials.push(Trial::test("mutant::expected.txt", move || Err(e.into()))),
        Ok(expected) => {
            let listed: BTreeSet<String> = expected.iter().map(|(n, _)| n.clone()).collect();
            for name in configs(&mutants) {
                if !listed.contains(&name) {
                    let msg = format!("mutants/{name}.cfg has no line in mutants/expected.txt");
                    trials.push(Trial::test(format!("mutant::{name}"), move || Err(msg.into())));
                }
            }
            for (name, expectation) in expected {
                let dir = mutants.clone();
                trials.push(tlc_trial(format!("mutant::{name}"), &tools, move |t| {
                    check_mutant(t, &dir, &name, &expectation).map(|_| ())
                }));
            }
        }
    }

    for dir in subdirs(&formal.join("trace/examples")) {
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        trials.push(tlc_trial(format!("trace::example::{name}"), &tools, move |t| check_example(t, &dir).map(|_| ())));
    }
    for dir in subdirs(&repo().join("traces")) {
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        trials
            .push(tlc_trial(format!("trace::recorded::{name}"), &tools, move |t| check_recorded(t, &dir).map(|_| ())));
    }
    trials.push(tlc_trial("conformance::good-bundle".into(), &tools, |t| conformance(t, false)));
    trials.push(tlc_trial("conformance::doctored-trace".into(), &tools, |t| conformance(t, true)));
    // The traces the fault matrix of this test run left: defects rejected, the rest accepted.
    let testrun = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fault-matrix-traces");
    for dir in subdirs(&testrun) {
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        trials.push(tlc_trial(format!("trace::testrun::{name}"), &tools, move |t| check_testrun(t, &dir, &name)));
    }
    libtest_mimic::run(&args, trials).exit();
}

fn check_testrun(tools: &FormalTools, dir: &Path, name: &str) -> Result<(), String> {
    use clink_formal::trace::{validate_run, Verdict};
    let validation = validate_run(tools, dir, None)?;
    let defect = name.starts_with("defect-");
    match (&validation.verdict, defect) {
        (Verdict::Accepted { .. }, false) | (Verdict::Rejected { .. }, true) => Ok(()),
        (verdict, _) => Err(format!(
            "{name}: {verdict}, expected {}{}",
            if defect { "a rejection" } else { "acceptance" },
            validation.modules_dir.map(|d| format!(" (kept in {})", d.display())).unwrap_or_default()
        )),
    }
}

/// protocol.conformance on the fixture bundle (passed) and on a copy whose
/// trace has two events swapped and is re-vouched for (failed, naming it).
fn conformance(tools: &FormalTools, doctor: bool) -> Result<(), String> {
    use clink_bundle::read_bundle;
    use clink_verify::{verify, Profile, Selection, Status, VerifyOptions};
    let scratch = tempfile::tempdir().map_err(|e| e.to_string())?;
    let bundle_dir = scratch.path().join("bundle");
    copy_dir(&repo().join("fixtures/bundles/good"), &bundle_dir);
    if doctor {
        swap_write_and_broadcast(&bundle_dir)?;
    }
    let bundle = read_bundle(&bundle_dir).map_err(|e| e.to_string())?;
    let options = VerifyOptions {
        profile: Profile::Full,
        selection: Selection::default(),
        expected: None,
        formal: Some(tools.clone()),
    };
    let report = verify(&bundle, &options).map_err(|e| e.to_string())?;
    let check = report.checks.iter().find(|c| c.name == "protocol.conformance").ok_or("no protocol.conformance")?;
    match (doctor, check.status) {
        (false, Status::Passed) if report.exit_code == 0 => Ok(()),
        (true, Status::Failed) if report.exit_code == 1 && check.reason.contains("\"event\":\"Broadcast\"") => Ok(()),
        _ => Err(format!("doctored {doctor}: {:?}: {} (exit {})", check.status, check.reason, report.exit_code)),
    }
}

/// Swaps the first WriteCompleted and the Broadcast of the same checkpoint in
/// the coordinator's trace (keeping seq, ts and proc in place), and updates
/// the manifest's size and SHA-256 for the file.
fn swap_write_and_broadcast(bundle: &Path) -> Result<(), String> {
    use serde_json::Value as Json;
    let manifest_path = bundle.join("manifest.json");
    let mut manifest: Json = serde_json::from_slice(&std::fs::read(&manifest_path).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    let rel = manifest["artifacts"]
        .as_array()
        .and_then(|a| {
            a.iter().find(|a| a["role"] == "trace" && a["path"].as_str().is_some_and(|p| p.contains("coordinator")))
        })
        .and_then(|a| a["path"].as_str())
        .ok_or("no coordinator trace in the bundle")?
        .to_string();
    let path = bundle.join(&rel);
    let mut lines: Vec<Json> = std::fs::read_to_string(&path)
        .map_err(|e| e.to_string())?
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let w = lines.iter().position(|l| l["event"] == "WriteCompleted").ok_or("no WriteCompleted")?;
    let c = lines[w]["ckpt"].clone();
    let b = lines.iter().position(|l| l["event"] == "Broadcast" && l["ckpt"] == c).ok_or("no Broadcast")?;
    let keep = ["seq", "ts", "proc"];
    let payload = |l: &Json| -> serde_json::Map<String, Json> {
        l.as_object()
            .unwrap()
            .iter()
            .filter(|(k, _)| !keep.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    let (pw, pb) = (payload(&lines[w]), payload(&lines[b]));
    for (i, p) in [(w, pb), (b, pw)] {
        let mut obj: serde_json::Map<String, Json> =
            keep.iter().map(|k| (k.to_string(), lines[i][*k].clone())).collect();
        obj.extend(p);
        lines[i] = Json::Object(obj);
    }
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&path, &text).map_err(|e| e.to_string())?;
    for a in manifest["artifacts"].as_array_mut().unwrap() {
        if a["path"] == rel.as_str() {
            a["size"] = text.len().into();
            a["sha256"] = clink_basics::digest::sha256_hex(text.as_bytes()).into();
        }
    }
    std::fs::write(&manifest_path, serde_json::to_vec_pretty(&manifest).unwrap()).map_err(|e| e.to_string())
}
