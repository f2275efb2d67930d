//! The formal suite: one trial per model (`model::`), per mutant
//! (`mutant::`), per trace example and recorded trace (`trace::`), per trace
//! the engine's own test run left (`trace::testrun::`), and the agreement of
//! the trace vocabulary (`vocabulary::agreement`). Without Java or the pinned
//! TLA+ jar every TLC trial is ignored, with the reason as its kind; never
//! passed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use clink_harness::formal::suite::{
    check_example, check_model, check_mutant, check_recorded, configs, module_events, subdirs,
};
use clink_harness::formal::tlc::parse_expected;
use clink_harness::formal::{locate, FormalTools};
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
    // The traces the fault matrix of this test run left: defects rejected, the rest accepted.
    let testrun = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fault-matrix-traces");
    for dir in subdirs(&testrun) {
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        trials.push(tlc_trial(format!("trace::testrun::{name}"), &tools, move |t| check_testrun(t, &dir, &name)));
    }
    libtest_mimic::run(&args, trials).exit();
}

fn check_testrun(tools: &FormalTools, dir: &Path, name: &str) -> Result<(), String> {
    use clink_harness::formal::trace::{validate_run, Verdict};
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
