//! The formal suite: one trial per model (`model::`), per mutant
//! (`mutant::`, and `mutant::<name>::unguarded` for an accepted one: with its
//! guard taken out TLC must refute it), per trace example and recorded trace
//! (`trace::`), per recorded trace's restart count (`trace::restarts::`), per
//! run of the built `clink` this suite makes and validates itself
//! (`trace::run::`), per trace a fault matrix left when its directory is
//! named in CLINK_FAULT_MATRIX_TRACES (`trace::testrun::`), the agreement of the trace vocabulary
//! (`vocabulary::agreement`), its pending engine changes
//! (`vocabulary::pending`, ignored while any is pending), and the engine's
//! switches against the mutants and recorded traces (`switches::`). Without
//! Java or the pinned TLA+ jar every TLC trial is ignored as `tlc` (the reason
//! printed once); never passed. A selection that matches no trial exits 2.

mod common;

use common::copy_dir;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use clink_formal::pins::parse_pins;
use clink_formal::suite::{
    check_example, check_model_pinned, check_mutant, check_mutant_unguarded, check_recorded, configs, module_record,
    read_trace_expectation, subdirs, TraceExpectation,
};
use clink_formal::tlc::{parse_expected, Expectation};
use clink_formal::tools::ToolsError;
use clink_formal::trace::{coordinator_event, read_and_merge, read_vocabulary, Vocabulary};
use clink_formal::{locate, FormalTools};
use libtest_mimic::{Arguments, Failed, Trial};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn tlc_trial<E: std::fmt::Display>(
    name: String,
    tools: &Result<FormalTools, ToolsError>,
    f: impl FnOnce(&FormalTools) -> Result<(), E> + Send + 'static,
) -> Trial {
    match tools {
        Ok(tools) => {
            let tools = tools.clone();
            Trial::test(name, move || f(&tools).map_err(|e| Failed::from(e.to_string())))
        }
        // The kind is a constant word so trial names are stable across
        // machines; main prints the reason once.
        Err(_) => Trial::test(name, || Ok(())).with_ignored_flag(true).with_kind("tlc"),
    }
}

fn vocabulary() -> Result<Vocabulary, String> {
    read_vocabulary(&repo().join("formal")).map_err(|e| e.to_string())
}

/// The emitter, events.txt and the trace module agree: the engine emits
/// exactly the vocabulary's entries (names and the fields every line carries,
/// in order, each event from the role the reader expects), and the module
/// handles every event of the vocabulary and its pending additions and reads
/// every field of each (EventFields: the fields a line carries, less those a
/// pending change drops; OccasionalFields: the optional ones, `name?`;
/// OptionalFields: the pending additions).
fn vocabulary_agreement() -> Result<(), Failed> {
    let v = vocabulary()?;
    let emitted: Vec<(String, Vec<String>)> = clink_engine::trace::TraceEvent::ALL
        .iter()
        .map(|e| (e.name().to_string(), e.fields().iter().map(|f| f.to_string()).collect()))
        .collect();
    let listed: Vec<(String, Vec<String>)> =
        v.events.iter().filter(|(_, s)| !s.pending).map(|(n, s)| (n.clone(), s.fields.clone())).collect();
    let emitted_sorted: BTreeMap<_, _> = emitted.iter().cloned().collect();
    let listed_sorted: BTreeMap<_, _> = listed.iter().cloned().collect();
    if emitted_sorted != listed_sorted {
        return Err(format!(
            "engine/src/trace.rs and formal/trace/events.txt disagree:\n  emitted: {emitted:?}\n  events.txt: {listed:?}"
        )
        .into());
    }
    for e in clink_engine::trace::TraceEvent::ALL {
        let coordinator = e.role() == clink_engine::trace::Role::Coordinator;
        if coordinator_event(e.name()) != coordinator {
            return Err(format!(
                "the engine writes {} to its {} file; the trace reader expects it in the other",
                e.name(),
                e.role().name()
            )
            .into());
        }
    }
    for (name, spec) in &v.events {
        if spec.pending && emitted_sorted.contains_key(name) {
            return Err(format!("the engine emits {name}: move it out of events.txt's pending changes").into());
        }
        if let Some(fields) = emitted_sorted.get(name) {
            if let Some(f) = spec.added.iter().find(|f| fields.contains(f)) {
                return Err(format!("the engine emits {name}.{f}: move it out of the pending changes").into());
            }
        }
    }
    let module =
        std::fs::read_to_string(repo().join("formal/trace/TraceExactlyOnce.tla")).map_err(|e| e.to_string())?;
    let required = module_record(&module, "EventFields");
    let occasional = module_record(&module, "OccasionalFields");
    let optional = module_record(&module, "OptionalFields");
    let events: BTreeSet<&String> = v.events.keys().collect();
    if required.keys().collect::<BTreeSet<_>>() != events {
        return Err(format!(
            "TraceExactlyOnce.tla's EventFields handles {:?}, events.txt lists {events:?}",
            required.keys().collect::<Vec<_>>()
        )
        .into());
    }
    for (name, spec) in &v.events {
        let read: BTreeSet<String> = spec.read().cloned().collect();
        if required[name] != read {
            return Err(format!("{name}: the module reads {:?}, the vocabulary has {read:?}", required[name]).into());
        }
        let added: BTreeSet<String> = spec.added.iter().cloned().collect();
        let module_added = optional.get(name).cloned().unwrap_or_default();
        if module_added != added {
            return Err(format!("{name}: OptionalFields has {module_added:?}, the pending additions {added:?}").into());
        }
        let marked: BTreeSet<String> = spec.optional.iter().cloned().collect();
        let module_marked = occasional.get(name).cloned().unwrap_or_default();
        if module_marked != marked {
            return Err(
                format!("{name}: OccasionalFields has {module_marked:?}, events.txt's optional {marked:?}").into()
            );
        }
    }
    for (record, names) in [("OptionalFields", &optional), ("OccasionalFields", &occasional)] {
        if let Some(extra) = names.keys().find(|k| !v.events.contains_key(*k)) {
            return Err(format!("{record} names {extra}, which events.txt does not list").into());
        }
    }
    Ok(())
}

/// One recorded trace's `expected.txt` lines beyond the verdict.
struct RecordedNotes {
    /// `restarts N`: the RestartOnError events its injected faults explain.
    restarts: Option<usize>,
    /// `pending <reason>`: a recording known to be wrong. No longer allowed:
    /// the trace is re-recorded instead, so a pending line fails its trial.
    pending: Option<String>,
    /// The `# guard:` comment: the rule a verdict stands on.
    guard: Option<String>,
}

fn recorded_notes(dir: &Path) -> RecordedNotes {
    let text = std::fs::read_to_string(dir.join("expected.txt")).unwrap_or_default();
    let mut notes = RecordedNotes { restarts: None, pending: None, guard: None };
    for line in text.lines().map(str::trim) {
        if let Some(guard) = line.strip_prefix("# guard:") {
            notes.guard = Some(guard.trim().to_string());
        } else if line.starts_with('#') {
            continue;
        } else if let Some(n) = line.strip_prefix("restarts ") {
            notes.restarts = n.trim().parse().ok();
        } else if let Some(why) = line.strip_prefix("pending ") {
            notes.pending = Some(why.trim().to_string());
        }
    }
    notes
}

/// A recorded run restarts exactly as often as its injected faults explain:
/// a RestartOnError nothing injected is an engine defect even where the
/// validator accepts the trace.
fn check_restarts(tools: &FormalTools, dir: &Path, want: usize) -> Result<(), String> {
    let merged = read_and_merge(tools, dir, None)?;
    let got: Vec<String> = merged
        .events
        .iter()
        .filter(|e| e.event() == "RestartOnError")
        .map(|e| format!("{}:{} (ckpt {})", e.file, e.seq, e.u64("ckpt").unwrap_or(0)))
        .collect();
    if got.len() == want {
        Ok(())
    } else {
        Err(format!("{} RestartOnError events, {want} explained by the faults injected: {got:?}", got.len()))
    }
}

fn main() {
    let args = Arguments::from_args();
    let tools = locate(None, None);
    match &tools {
        Err(why) => eprintln!("every TLC trial is ignored as `tlc`: {why}"),
        Ok(FormalTools { archive: Some(archive), .. }) => {
            eprintln!("TLC starts with the CDS archive {}", archive.display())
        }
        Ok(FormalTools { no_archive, .. }) => {
            eprintln!("TLC starts without a CDS archive: {}", no_archive.as_ref().map_or("?".into(), |e| e.to_string()))
        }
    }
    let formal = repo().join("formal");
    let mut trials = vec![Trial::test("vocabulary::agreement", vocabulary_agreement)];
    match vocabulary() {
        Ok(v) if !v.pending.is_empty() => {
            trials.push(Trial::test("vocabulary::pending", || Ok(())).with_ignored_flag(true).with_kind({
                eprintln!("vocabulary::pending: ignored as `pending`: {}", v.pending.join("; "));
                "pending"
            }))
        }
        Ok(_) => trials.push(Trial::test("vocabulary::pending", || Ok(()))),
        Err(e) => trials.push(Trial::test("vocabulary::pending", move || Err(e.into()))),
    }

    // Every model's search is pinned: a change in what TLC enumerates fails.
    let pins = std::fs::read_to_string(formal.join("models/expected.txt"))
        .map_err(|e| format!("formal/models/expected.txt: {e}"))
        .and_then(|t| parse_pins(&t).map_err(|e| e.to_string()));
    match pins {
        Err(e) => trials.push(Trial::test("model::expected.txt", move || Err(e.into()))),
        Ok(pins) => {
            let models = configs(&formal.join("models"));
            for stale in pins.keys().filter(|p| !models.contains(p)) {
                let e = format!("formal/models/expected.txt pins {stale}, which has no configuration");
                trials.push(Trial::test(format!("model::{stale}"), move || Err(e.into())));
            }
            for name in models {
                let pin = pins.get(&name).copied();
                trials.push(tlc_trial(format!("model::{name}"), &tools, move |t| {
                    check_model_pinned(t, &name, pin.as_ref()).map(|_| ())
                }));
            }
        }
    }

    let mutants = repo().join("mutants");
    let expected = std::fs::read_to_string(mutants.join("expected.txt"))
        .map_err(|e| e.to_string())
        .and_then(|t| parse_expected(&t).map_err(|e| e.to_string()));
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
                if let Expectation::Accepted(guard) = &expectation {
                    let (dir, name, guard) = (dir.clone(), name.clone(), guard.clone());
                    trials.push(tlc_trial(format!("mutant::{name}::unguarded"), &tools, move |t| {
                        check_mutant_unguarded(t, &dir, &name, &guard).map(|_| ())
                    }));
                }
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
        let notes = recorded_notes(&dir);
        let trial_name = format!("trace::restarts::{name}");
        let d = dir.clone();
        trials.push(match (notes.restarts, notes.pending, notes.guard) {
            (_, Some(why), _) => Trial::test(trial_name, move || {
                Err(format!("a pending line ({why}): a recording known to be wrong is re-recorded, not kept").into())
            }),
            (None, _, _) => Trial::test(trial_name, || Err("expected.txt has no `restarts N` line".into())),
            (_, _, None) => Trial::test(trial_name, || Err("expected.txt has no `# guard:` line".into())),
            (Some(want), None, Some(_)) => tlc_trial(trial_name, &tools, move |t| check_restarts(t, &d, want)),
        });
        trials
            .push(tlc_trial(format!("trace::recorded::{name}"), &tools, move |t| check_recorded(t, &dir).map(|_| ())));
    }
    trials.push(tlc_trial("conformance::good-bundle".into(), &tools, |t| conformance(t, false)));
    trials.push(tlc_trial("conformance::doctored-trace".into(), &tools, |t| conformance(t, true)));
    // Runs of the built clink, made and validated here.
    for run in SelfRun::ALL {
        trials.push(tlc_trial(format!("trace::run::{}", run.name()), &tools, move |t| self_run(t, run)));
    }
    // The traces a fault matrix left, only when asked for by naming their
    // directory (CLINK_FAULT_MATRIX_TRACES, e.g. the fault matrix's
    // <target>/tmp/fault-matrix-traces): the suite's own trials never depend
    // on another suite having run, so its trial list is the same everywhere.
    // Asked for and none there fails.
    if let Some(testrun) = std::env::var_os("CLINK_FAULT_MATRIX_TRACES").map(PathBuf::from) {
        let dirs = subdirs(&testrun);
        if dirs.is_empty() {
            let why = format!("CLINK_FAULT_MATRIX_TRACES={}: no trace directory there", testrun.display());
            trials.push(Trial::test("trace::testrun::none-found", move || Err(why.into())));
        }
        for dir in dirs {
            let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            trials.push(tlc_trial(format!("trace::testrun::{name}"), &tools, move |t| check_testrun(t, &dir, &name)));
        }
    }
    trials.push(Trial::test("switches::each-has-a-mutant-and-a-recorded-trace", switches_have_mutants_and_traces));
    trials.push(Trial::test("selection::empty-filter-refused", empty_selection_refused));
    trials.push(tlc_trial("selection::gate-exit-codes".into(), &tools, |_| gate_exit_codes()));
    trials.push(tlc_trial("trace::malformed-refused".into(), &tools, |_| malformed_trace_refused()));

    let list = args.list;
    let conclusion = libtest_mimic::run(&args, trials);
    let ran = conclusion.num_passed + conclusion.num_failed + conclusion.num_ignored + conclusion.num_measured;
    if ran == 0 && !list {
        eprintln!("formal: no trial matches the selection: nothing was checked");
        std::process::exit(2);
    }
    conclusion.exit()
}

/// gates/formal-check's verdicts, run over this very binary: an empty
/// selection exits 2, a passing one 0, one with an ignored trial 3 (a TLC
/// trial with the suite pointed at tools that are not there).
fn gate_exit_codes() -> Result<(), String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    for (filter, tools, want) in [
        ("no-trial-is-named-like-this", None, 2),
        ("vocabulary::agreement", None, 0),
        ("trace::example::happy-two-sinks", Some("/nonexistent"), 3),
    ] {
        let mut gate = std::process::Command::new(repo().join("gates/formal-check"));
        gate.arg(filter).env("CLINK_FORMAL_SUITE_BIN", &me);
        if let Some(dir) = tools {
            gate.env("CLINK_FORMAL_TOOLS_DIR", dir);
        }
        let out = gate.output().map_err(|e| e.to_string())?;
        if out.status.code() != Some(want) {
            return Err(format!(
                "gates/formal-check {filter} exited {:?}, not {want}: {}",
                out.status.code(),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    Ok(())
}

/// A trace whose lines were reordered inside one file, each keeping its own
/// seq and ts, is refused by `clink trace-validate` (exit 2), not validated.
fn malformed_trace_refused() -> Result<(), String> {
    let scratch = tempfile::tempdir().map_err(|e| e.to_string())?;
    copy_dir(&repo().join("formal/trace/examples/happy-two-sinks"), scratch.path());
    let worker = std::fs::read_dir(scratch.path())
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("worker-")))
        .ok_or("no worker file")?;
    let text = std::fs::read_to_string(&worker).map_err(|e| e.to_string())?;
    let mut lines: Vec<&str> = text.lines().collect();
    lines.swap(6, 7);
    std::fs::write(&worker, lines.join("\n") + "\n").map_err(|e| e.to_string())?;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_clink"))
        .arg("trace-validate")
        .arg("--trace")
        .arg(scratch.path())
        .output()
        .map_err(|e| e.to_string())?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(2) if stderr.contains("malformed trace") && stderr.contains("where 7 is due") => Ok(()),
        code => Err(format!("a reordered file: trace-validate exited {code:?}: {stderr}")),
    }
}

/// A selection that matches no trial is refused (exit 2), never a pass: the
/// suite's own binary, run with a filter nothing matches.
fn empty_selection_refused() -> Result<(), Failed> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = std::process::Command::new(me)
        .arg("no-trial-is-named-like-this")
        .env("CLINK_FORMAL_TOOLS_DIR", "/nonexistent")
        .output()
        .map_err(|e| e.to_string())?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(2) if stderr.contains("no trial matches") => Ok(()),
        code => Err(format!("an empty selection exited {code:?}, not 2: {stderr}").into()),
    }
}

/// A fault-matrix trace: a correct run's is accepted; a defect's is judged as
/// the defect's recorded trace is (`traces/defect-<name>/expected.txt`):
/// rejected where the trace can show the defect, accepted where it cannot
/// (the fault matrix's output check catches those). The event and its number
/// depend on the scenario, which differs from the recording's.
fn check_testrun(tools: &FormalTools, dir: &Path, name: &str) -> Result<(), String> {
    use clink_formal::trace::{validate_run, Verdict};
    let validation = validate_run(tools, dir, None)?;
    let rejection_expected = match name.strip_prefix("defect-") {
        None => false,
        Some(defect) => {
            let recorded = repo().join("traces").join(format!("defect-{defect}")).join("expected.txt");
            !matches!(read_trace_expectation(&recorded).map_err(|e| e.to_string())?, TraceExpectation::Accepted)
        }
    };
    match (&validation.verdict, rejection_expected) {
        (Verdict::Accepted { .. }, false) | (Verdict::Rejected { .. }, true) => Ok(()),
        (verdict, _) => Err(format!(
            "{name}: {verdict}, expected {}{}",
            if rejection_expected { "a rejection" } else { "acceptance" },
            validation.modules_dir.map(|d| format!(" (kept in {})", d.display())).unwrap_or_default()
        )),
    }
}

/// Every protocol switch of the engine is a mutant of the specification
/// (`mutants/<name>.cfg`, a line in `mutants/expected.txt`) and a recorded
/// trace (`traces/defect-<name>/`), and every recorded defect trace is of a
/// switch the engine has.
fn switches_have_mutants_and_traces() -> Result<(), Failed> {
    use clink_engine::defects::Defect;
    let expected = std::fs::read_to_string(repo().join("mutants/expected.txt")).map_err(|e| e.to_string())?;
    let listed: BTreeSet<String> = parse_expected(&expected)?.into_iter().map(|(n, _)| n).collect();
    let switches: BTreeSet<&str> = Defect::ALL.iter().filter(|d| d.is_protocol()).map(|d| d.name()).collect();
    let mut problems = Vec::new();
    for name in &switches {
        if !repo().join("mutants").join(format!("{name}.cfg")).is_file() || !listed.contains(*name) {
            problems.push(format!("switch {name} has no mutant (mutants/{name}.cfg and its expected line)"));
        }
        if !repo().join("traces").join(format!("defect-{name}")).join("expected.txt").is_file() {
            problems.push(format!("switch {name} has no recorded trace (traces/defect-{name}/)"));
        }
    }
    for dir in subdirs(&repo().join("traces")) {
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if let Some(defect) = name.strip_prefix("defect-") {
            if !switches.contains(defect) {
                problems.push(format!("traces/{name} is of no switch the engine has"));
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n").into())
    }
}

/// A run of the built `clink` that this suite makes and validates.
#[derive(Clone, Copy, Debug)]
enum SelfRun {
    ToEnd,
    KillSinkBeforeCommit,
    KillAfterMarker,
    SnapshotFailure,
    SourceSnapshotFailure,
    NoBudgetFailsThenResumes,
}

impl SelfRun {
    const ALL: [SelfRun; 6] = [
        SelfRun::ToEnd,
        SelfRun::KillSinkBeforeCommit,
        SelfRun::KillAfterMarker,
        SelfRun::SnapshotFailure,
        SelfRun::SourceSnapshotFailure,
        SelfRun::NoBudgetFailsThenResumes,
    ];

    fn name(self) -> &'static str {
        match self {
            SelfRun::ToEnd => "to-end",
            SelfRun::KillSinkBeforeCommit => "kill-sink.before_commit",
            SelfRun::KillAfterMarker => "kill-coordinator.after_completed_marker",
            SelfRun::SnapshotFailure => "snapshot-failure",
            SelfRun::SourceSnapshotFailure => "source-snapshot-failure",
            SelfRun::NoBudgetFailsThenResumes => "no-budget-fails-then-resumes",
        }
    }

    /// The runs, in order: each its fault, its restart budget and how it must
    /// end (exit code, or killed); then the restarts the faults explain.
    #[allow(clippy::type_complexity)]
    fn plan(self) -> (Vec<(Option<&'static str>, Option<&'static str>, Ending)>, usize) {
        use Ending::{Exit, Killed};
        match self {
            SelfRun::ToEnd => (vec![(None, None, Exit(0))], 0),
            SelfRun::KillSinkBeforeCommit => {
                (vec![(Some("sink.before_commit@2"), None, Killed), (None, None, Exit(0))], 0)
            }
            SelfRun::KillAfterMarker => {
                (vec![(Some("coordinator.after_completed_marker@2"), None, Killed), (None, None, Exit(0))], 0)
            }
            SelfRun::SnapshotFailure => (vec![(Some("checkpoint.snapshot_fails@2"), None, Exit(0))], 1),
            SelfRun::SourceSnapshotFailure => (vec![(Some("source.snapshot_fails@2"), None, Exit(0))], 1),
            SelfRun::NoBudgetFailsThenResumes => {
                (vec![(Some("checkpoint.snapshot_fails@2"), Some("0"), Exit(1)), (None, None, Exit(0))], 0)
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    Exit(i32),
    Killed,
}

/// The input every self-run reads, generated once by the built clink.
fn self_run_input() -> Result<&'static Path, String> {
    static INPUT: OnceLock<Result<(tempfile::TempDir, PathBuf), String>> = OnceLock::new();
    let made = INPUT.get_or_init(|| {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).map_err(|e| e.to_string())?;
        let input = dir.path().join("input");
        let out = Command::new(env!("CARGO_BIN_EXE_clink"))
            .args(["gen-input", "--seed", "4", "--events", "3000", "--accounts", "12", "--segment-events", "1000"])
            .arg("--out")
            .arg(&input)
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!("clink gen-input: {}", String::from_utf8_lossy(&out.stderr)));
        }
        Ok((dir, input))
    });
    made.as_ref().map(|(_, input)| input.as_path()).map_err(Clone::clone)
}

fn ending(out: &Output) -> Ending {
    use std::os::unix::process::ExitStatusExt;
    match (out.status.code(), out.status.signal()) {
        (Some(code), _) => Ending::Exit(code),
        (None, Some(9)) => Ending::Killed,
        _ => Ending::Exit(-1),
    }
}

/// Runs the example job as the plan says, with its protocol trace on, and
/// validates the trace: accepted, with as many restarts as the faults explain.
fn self_run(tools: &FormalTools, run: SelfRun) -> Result<(), String> {
    let input = self_run_input()?;
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).map_err(|e| e.to_string())?;
    let traces = dir.path().join("traces");
    let (runs, restarts) = run.plan();
    for (i, (fault, budget, want)) in runs.into_iter().enumerate() {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_clink"));
        cmd.args(["run", "--quiet", "--checkpoint-every-records", "1000", "--job"])
            .arg(repo().join("fixtures/jobs/example/job.json"))
            .arg("--input-dir")
            .arg(input)
            .arg("--output-dir")
            .arg(dir.path().join("out"))
            .arg("--checkpoint-dir")
            .arg(dir.path().join("ck"))
            .env("CLINK_PROTOCOL_TRACE_DIR", &traces)
            .env_remove("CLINK_FAULT")
            .env_remove("CLINK_TEST_DEFECT");
        if let Some(fault) = fault {
            cmd.env("CLINK_FAULT", fault);
        }
        if let Some(budget) = budget {
            cmd.args(["--restart-budget", budget]);
        }
        let out = cmd.output().map_err(|e| e.to_string())?;
        if ending(&out) != want {
            return Err(format!(
                "run {} ({fault:?}): {:?}, not {want:?}: {}",
                i + 1,
                ending(&out),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    let validation = clink_formal::trace::validate_run(tools, &traces, None)?;
    if !matches!(validation.verdict, clink_formal::trace::Verdict::Accepted { .. }) {
        return Err(format!(
            "{}{}",
            validation.verdict,
            validation.modules_dir.map(|d| format!(" (kept in {})", d.display())).unwrap_or_default()
        ));
    }
    check_restarts(tools, &traces, restarts)
}

/// An incident bundle collected from runs of the built clink (killed at
/// sink.before_commit@2, then resumed to END, with capture, traces and the job
/// manifest on), made once for the conformance trials: the engine's traces of
/// this build, not a fixture another build wrote.
fn fresh_bundle() -> Result<&'static Path, String> {
    static BUNDLE: OnceLock<Result<(tempfile::TempDir, PathBuf), String>> = OnceLock::new();
    let made = BUNDLE.get_or_init(|| {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).map_err(|e| e.to_string())?;
        let d = dir.path();
        let clink = |args: &[&str]| Command::new(env!("CARGO_BIN_EXE_clink")).args(args).current_dir(d).output();
        let gen = ["gen-input", "--seed", "9", "--events", "2000", "--accounts", "16", "--segment-events", "500"];
        let out = clink(&[&gen[..], &["--out", "input"]].concat()).map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!("gen-input: {}", String::from_utf8_lossy(&out.stderr)));
        }
        let job = repo().join("fixtures/jobs/example/job.json");
        let job = job.to_string_lossy();
        let run = [
            "run",
            "--quiet",
            "--job",
            &job,
            "--input-dir",
            "input",
            "--output-dir",
            "out",
            "--checkpoint-dir",
            "ck",
            "--capture-dir",
            "capture",
            "--ha-dir",
            "ha",
            "--checkpoint-every-records",
            "250",
        ];
        for fault in [Some("sink.before_commit@2"), None] {
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_clink"));
            cmd.args(run).current_dir(d).env("CLINK_PROTOCOL_TRACE_DIR", d.join("traces")).env_remove("CLINK_FAULT");
            if let Some(fault) = fault {
                cmd.env("CLINK_FAULT", fault);
            }
            let out = cmd.output().map_err(|e| e.to_string())?;
            if (ending(&out) == Ending::Killed) != fault.is_some() || (fault.is_none() && !out.status.success()) {
                return Err(format!(
                    "clink run ({fault:?}): {:?}: {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
        let collect = [
            "incident-collect",
            "--checkpoint-dir",
            "ck",
            "--ha-dir",
            "ha",
            "--capture-dir",
            "capture",
            "--trace-dir",
            "traces",
            "--include-state",
            "--include-captures",
            "--out",
            "bundle",
        ];
        let out = clink(&collect).map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!("incident-collect: {}", String::from_utf8_lossy(&out.stderr)));
        }
        let bundle = d.join("bundle");
        Ok((dir, bundle))
    });
    made.as_ref().map(|(_, bundle)| bundle.as_path()).map_err(Clone::clone)
}

/// protocol.conformance on a freshly collected bundle (passed) and on a copy
/// whose trace has two events swapped and is re-vouched for (failed, naming it).
fn conformance(tools: &FormalTools, doctor: bool) -> Result<(), String> {
    use clink_bundle::read_bundle;
    use clink_verify::{verify, Profile, Selection, Status, VerifyOptions};
    let scratch = tempfile::tempdir().map_err(|e| e.to_string())?;
    let bundle_dir = scratch.path().join("bundle");
    copy_dir(fresh_bundle()?, &bundle_dir);
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
