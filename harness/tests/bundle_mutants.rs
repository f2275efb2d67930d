//! The bundle mutants (`mutants/bundles/`), as generated tests: one trial per
//! mutant of the real bundles under `fixtures/bundles/` (the example job,
//! Kafka→Kafka, Kafka→ClickHouse, each killed and resumed). A trial
//! writes its mutant (every byte it changed re-vouched in the manifest) and
//! verifies it as `clink incident-verify` does (the bundle reader, then the
//! verifier) under every profile up to the one that examines what it
//! changed. It is killed when that profile exits 1 or 2 (or a lower one
//! already did: every higher profile runs every check a lower one does);
//! a profile below it may pass only when its report lists that part as not
//! examined. A mutant not killed fails its trial unless
//! `mutants/bundles/equivalents.txt` names it with the reason it changes no
//! claim.
//!
//! By default a seeded sample runs (`CLINK_BUNDLE_MUTANTS_SAMPLE`, 32 by
//! default; the seed printed, `CLINK_BUNDLE_MUTANTS_SEED` repeats it), and a
//! few of its mutants are verified again by the real binary, which must
//! exit alike. `CLINK_BUNDLE_MUTANTS=all` (gates/bundle-mutants) runs every
//! mutant, draws progress on standard error, checks that no equivalents line
//! is stale, and prints the kill rate per artifact kind. Trials that need
//! TLC are ignored, with the reason, where Java or the pinned jar is missing.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use clink_bundle_mutants::{generate, materialize, Equivalents, Mutant, Part};
use clink_verify::{verify, Profile, Selection, VerifyOptions};
use libtest_mimic::{Arguments, Failed, Trial};

const BUNDLES: [&str; 3] = ["good", "kafka-kafka", "kafka-clickhouse"];
const PROFILES: [Profile; 4] = [Profile::Integrity, Profile::Consistency, Profile::Replay, Profile::Full];

/// Mutants that run at every run, beside the sample: each survived until
/// the model compared what it changes, so each is the test of that fix.
const PINNED: [&str; 9] = [
    // A ClickHouse interval's destination against another subtask's of the same run.
    "kafka-clickhouse::sink_evidence::op-4/subtask-0/epoch-3.sink.json::/sink/destination/server/host_name/value::changed",
    // Every field of an INSERT ledger entry, with its type.
    "kafka-clickhouse::sink_evidence::op-4/subtask-0/epoch-3.sink.json::/sink/interval/inserts/0/resent_in_doubt::dropped",
    // The write rules recorded against THE insert rules over the destination described.
    "kafka-clickhouse::sink_evidence::op-4/subtask-0/epoch-3.sink.json::/sink/writes/one_block/holds::flipped",
    // A Kafka sink's account says what it still owed.
    "kafka-kafka::sink_evidence::op-4/subtask-0/epoch-12.sink.json::/sink/rows_still_owed::dropped",
    // A sink prepares only once opened in its deployment.
    "kafka-clickhouse::trace::worker-10424-1796671272549847.ndjson::SinkOpens::swapped_with_SinkPrepare",
    // A commit delivered is taken when the process went on.
    "kafka-clickhouse::trace::worker-10358-1796671272007631.ndjson::SinkCommit::dropped",
    // An open that restored nothing re-commits nothing.
    "kafka-clickhouse::trace::worker-10358-1796671272007631.ndjson::SinkOpens/recommitted::plus_one",
    // No checkpoint triggered before the job is deployed.
    "kafka-clickhouse::trace::coordinator-10424-1796671272549847.ndjson::Redeploy::swapped_with_Trigger",
    // Every deployment places every subtask once.
    "kafka-clickhouse::trace::worker-10424-1796671272549847.ndjson::Placement::dropped",
];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// What became of one mutant.
#[derive(Debug, Clone)]
enum Outcome {
    Killed { profile: &'static str, exit: u8 },
    Equivalent { line: usize },
    Survived { why: String },
}

struct Shared {
    scratch: tempfile::TempDir,
    formal: Option<clink_formal::FormalTools>,
    no_formal: Option<String>,
    equivalents: Equivalents,
    outcomes: Mutex<Vec<(String, String, Outcome)>>,
    done: AtomicUsize,
    total: usize,
    progress: bool,
    started: Instant,
}

/// Each base bundle copied once into the scratch directory (mutants are
/// hard-linked from the copy, so the fixtures are never at risk).
fn base(shared: &Shared, bundle: &str) -> PathBuf {
    shared.scratch.path().join("base").join(bundle)
}

/// `clink incident-verify <dir> --profile <p>`, in process: the reader's
/// refusal or the verifier's is exit 2; otherwise the report's exit.
fn incident_verify(dir: &Path, profile: Profile, formal: Option<&clink_formal::FormalTools>) -> (u8, Vec<String>) {
    let bundle = match clink_bundle::read_bundle(dir) {
        Ok(b) => b,
        Err(_) => return (2, Vec::new()),
    };
    let options = VerifyOptions { profile, selection: Selection::default(), expected: None, formal: formal.cloned() };
    match verify(&bundle, &options) {
        Err(_) => (2, Vec::new()),
        Ok(report) => (report.exit_code, report.not_examined.iter().map(|n| n.what.clone()).collect()),
    }
}

/// What a lower profile's report must say it left unexamined, for a part.
fn says_not_examined(part: Part, notes: &[String]) -> bool {
    let wanted = match part {
        Part::Listing => return false,
        Part::Claims => "the manifest's claims",
        Part::Contents => "the contents of",
        Part::OperatorEvents => "the events of captured operator epochs",
        Part::Traces => "behaviour of the protocol",
    };
    notes.iter().any(|n| n.contains(wanted))
}

fn rank(profile: Profile) -> usize {
    PROFILES.iter().position(|p| *p == profile).unwrap_or(0)
}

fn examining(part: Part) -> Profile {
    Profile::parse(part.examined_by()).unwrap_or(Profile::Full)
}

/// Verifies a written mutant profile by profile up to the one that examines
/// what it changed; `Err` says why it is not killed.
fn judge(dir: &Path, part: Part, shared: &Shared, every_profile: bool) -> Result<Outcome, String> {
    let target = rank(examining(part));
    let mut killed: Option<(&'static str, u8)> = None;
    let mut exits = Vec::new();
    for (i, profile) in PROFILES.iter().enumerate() {
        if i > target && !every_profile {
            break;
        }
        let (exit, notes) = incident_verify(dir, *profile, shared.formal.as_ref());
        exits.push(format!("{} {exit}", profile.as_str()));
        match (exit, killed) {
            (1 | 2, None) => {
                killed = Some((profile.as_str(), exit));
                if !every_profile {
                    break;
                }
            }
            (1 | 2, Some(_)) => {}
            (_, Some((by, _))) => {
                return Err(format!(
                    "{by} refuted it and {} passed it (exit {exit}): a higher profile must run every lower check",
                    profile.as_str()
                ));
            }
            (_, None) if i < target && !says_not_examined(part, &notes) => {
                return Err(format!(
                    "{} passed it (exit {exit}) without listing what it changed as not examined",
                    profile.as_str()
                ));
            }
            (_, None) => {}
        }
    }
    match killed {
        Some((profile, exit)) => Ok(Outcome::Killed { profile, exit }),
        None => Err(format!("not refuted: {}", exits.join(", "))),
    }
}

fn run_one(mutant: &Mutant, shared: &Shared, every_profile: bool, binary_too: bool) -> Result<(), Failed> {
    let n = shared.done.fetch_add(1, Ordering::Relaxed);
    let dir = shared.scratch.path().join("m").join(n.to_string());
    std::fs::create_dir_all(dir.parent().ok_or("no parent")?).map_err(|e| e.to_string())?;
    materialize(&base(shared, &mutant.bundle), mutant, &dir)?;
    let judged = judge(&dir, mutant.part, shared, every_profile);
    if binary_too {
        // The real binary at the examining profile exits as the in-process verification did.
        let profile = examining(mutant.part);
        let (expected, _) = incident_verify(&dir, profile, shared.formal.as_ref());
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_clink"));
        cmd.args(["incident-verify", "--json", "--profile", profile.as_str()]).arg(&dir);
        cmd.arg("--formal-dir").arg(repo().join("formal"));
        let out = cmd.output().map_err(|e| e.to_string())?;
        if out.status.code() != Some(i32::from(expected)) {
            return Err(format!("clink incident-verify exited {:?}, in process {expected}", out.status.code()).into());
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let outcome = match judged {
        Ok(o) => o,
        Err(why) => match shared.equivalents.find(&mutant.name) {
            Some(e) => Outcome::Equivalent { line: e.line },
            None => Outcome::Survived { why },
        },
    };
    shared.outcomes.lock().unwrap_or_else(|p| p.into_inner()).push((
        mutant.bundle.clone(),
        mutant.kind.clone(),
        outcome.clone(),
    ));
    if shared.progress {
        draw_progress(shared, n + 1);
    }
    match outcome {
        Outcome::Survived { why } => {
            Err(format!("{}: a survivor (a defect, or a line of mutants/bundles/equivalents.txt): {why}", mutant.name)
                .into())
        }
        _ => Ok(()),
    }
}

fn draw_progress(shared: &Shared, done: usize) {
    if !done.is_multiple_of(50) && done != shared.total {
        return;
    }
    let outcomes = shared.outcomes.lock().unwrap_or_else(|p| p.into_inner());
    let count = |f: fn(&Outcome) -> bool| outcomes.iter().filter(|(_, _, o)| f(o)).count();
    let (killed, equivalent, survived) = (
        count(|o| matches!(o, Outcome::Killed { .. })),
        count(|o| matches!(o, Outcome::Equivalent { .. })),
        count(|o| matches!(o, Outcome::Survived { .. })),
    );
    let width = 30;
    let filled = done * width / shared.total.max(1);
    eprintln!(
        "bundle-mutants [{}{}] {done}/{} killed {killed} equivalent {equivalent} survived {survived} ({:.0} s)",
        "#".repeat(filled),
        "-".repeat(width - filled),
        shared.total,
        shared.started.elapsed().as_secs_f64()
    );
}

/// The kill rate per bundle and artifact kind, and the totals.
fn summary(shared: &Shared) {
    let outcomes = shared.outcomes.lock().unwrap_or_else(|p| p.into_inner());
    let mut rows: BTreeMap<(String, String), [usize; 3]> = BTreeMap::new();
    for (bundle, kind, o) in outcomes.iter() {
        let row = rows.entry((bundle.clone(), kind.clone())).or_default();
        row[match o {
            Outcome::Killed { .. } => 0,
            Outcome::Equivalent { .. } => 1,
            Outcome::Survived { .. } => 2,
        }] += 1;
    }
    println!("\nbundle mutants: kill rate per artifact kind");
    println!(
        "{:<18} {:<18} {:>7} {:>7} {:>7} {:>7} {:>8}",
        "bundle", "kind", "mutants", "killed", "equiv", "survive", "killed%"
    );
    let mut total = [0usize; 3];
    for ((bundle, kind), [k, e, s]) in &rows {
        let n = k + e + s;
        println!("{bundle:<18} {kind:<18} {n:>7} {k:>7} {e:>7} {s:>7} {:>7.1}%", 100.0 * *k as f64 / n as f64);
        total[0] += k;
        total[1] += e;
        total[2] += s;
    }
    let mut by_profile: BTreeMap<&str, usize> = BTreeMap::new();
    let mut refused = 0;
    for (_, _, o) in outcomes.iter() {
        if let Outcome::Killed { profile, exit } = o {
            *by_profile.entry(profile).or_default() += 1;
            refused += usize::from(*exit == 2);
        }
    }
    println!("killed at: {by_profile:?}; of them refused (exit 2) {refused}, failed (exit 1) {}", total[0] - refused);
    let n: usize = total.iter().sum();
    println!(
        "{:<37} {n:>7} {:>7} {:>7} {:>7} {:>7.1}%  ({:.0} s)",
        "all",
        total[0],
        total[1],
        total[2],
        100.0 * total[0] as f64 / n.max(1) as f64,
        shared.started.elapsed().as_secs_f64()
    );
}

/// A seeded choice of `n` of `all` (SplitMix64; the seed printed).
fn sample(all: Vec<Mutant>, n: usize, seed: u64) -> Vec<Mutant> {
    let mut state = seed;
    let mut next = move || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut pool = all;
    let mut chosen = Vec::new();
    while chosen.len() < n && !pool.is_empty() {
        let i = (next() % pool.len() as u64) as usize;
        chosen.push(pool.swap_remove(i));
    }
    chosen
}

fn main() {
    let args = Arguments::from_args();
    let all_mode = std::env::var("CLINK_BUNDLE_MUTANTS").is_ok_and(|v| v == "all");
    let scratch = tempfile::Builder::new()
        .prefix("clink-bundle-mutants-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("a scratch directory");
    let mut mutants = Vec::new();
    let mut problems = Vec::new();
    for bundle in BUNDLES {
        let from = repo().join("fixtures/bundles").join(bundle);
        common::copy_dir(&from, &scratch.path().join("base").join(bundle));
        match generate(&from, bundle) {
            Ok(m) => mutants.extend(m),
            Err(e) => problems.push(format!("{bundle}: {e}")),
        }
    }
    let equivalents = std::fs::read_to_string(repo().join("mutants/bundles/equivalents.txt"))
        .map_err(|e| e.to_string())
        .and_then(|t| Equivalents::parse(&t));
    let (equivalents, equivalents_problem) = match equivalents {
        Ok(e) => (e, None),
        Err(e) => (Equivalents::default(), Some(e)),
    };
    let generated = mutants.len();
    let seed = std::env::var("CLINK_BUNDLE_MUTANTS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
    });
    if !all_mode {
        let n = std::env::var("CLINK_BUNDLE_MUTANTS_SAMPLE").ok().and_then(|s| s.parse().ok()).unwrap_or(32);
        let pinned: Vec<Mutant> = mutants.iter().filter(|m| PINNED.contains(&m.name.as_str())).cloned().collect();
        let lost: Vec<&str> = PINNED.iter().copied().filter(|p| !pinned.iter().any(|m| m.name == *p)).collect();
        if !lost.is_empty() {
            problems.push(format!("pinned mutants no longer generated: {}", lost.join(", ")));
        }
        mutants.retain(|m| !PINNED.contains(&m.name.as_str()));
        mutants = sample(mutants, n, seed);
        mutants.extend(pinned);
        eprintln!("bundle-mutants: a sample of {n} of {generated} mutants and {} pinned, seed {seed} (CLINK_BUNDLE_MUTANTS_SEED={seed} repeats it; CLINK_BUNDLE_MUTANTS=all runs every one)", PINNED.len());
    } else {
        eprintln!("bundle-mutants: every one of {generated} mutants of {} bundles", BUNDLES.len());
    }
    let (formal, no_formal) = match clink_formal::locate(Some(&repo().join("formal")), None) {
        Ok(t) => (Some(t), None),
        Err(e) => (None, Some(e.to_string())),
    };
    let shared = Arc::new(Shared {
        scratch,
        formal,
        no_formal,
        equivalents,
        outcomes: Mutex::new(Vec::new()),
        done: AtomicUsize::new(0),
        total: mutants.len(),
        progress: all_mode,
        started: Instant::now(),
    });
    static SHARED: OnceLock<Arc<Shared>> = OnceLock::new();
    let _ = SHARED.set(Arc::clone(&shared));
    let mut trials: Vec<Trial> = Vec::new();
    for (i, mutant) in mutants.into_iter().enumerate() {
        let s = Arc::clone(&shared);
        let needs_tlc = mutant.part == Part::Traces;
        let binary_too = !all_mode && i % 12 == 0;
        let trial =
            Trial::test(format!("mutant::{}", mutant.name), move || run_one(&mutant, &s, !all_mode, binary_too));
        trials.push(match (&shared.no_formal, needs_tlc) {
            (Some(why), true) => trial.with_ignored_flag(true).with_kind(format!("tlc: {why}")),
            _ => trial,
        });
    }
    trials.push(Trial::test("suite::bundles-generate", move || match problems.as_slice() {
        [] if generated >= 2000 => Ok(()),
        [] => Err(format!("{generated} mutants: fewer than 2,000 calibrate nothing").into()),
        found => Err(found.join("; ").into()),
    }));
    trials.push(Trial::test("suite::equivalents-parse", move || match &equivalents_problem {
        None => Ok(()),
        Some(e) => Err(format!("mutants/bundles/equivalents.txt: {e}").into()),
    }));
    let conclusion = libtest_mimic::run(&args, trials);
    if all_mode {
        summary(&shared);
    }
    // Staleness is judged only over every mutant: a selection leaves lines unused.
    if all_mode && args.filter.is_none() && args.skip.is_empty() {
        let used: std::collections::BTreeSet<usize> = shared
            .outcomes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter_map(|(_, _, o)| if let Outcome::Equivalent { line } = o { Some(*line) } else { None })
            .collect();
        let stale: Vec<String> = shared
            .equivalents
            .0
            .iter()
            .filter(|e| !used.contains(&e.line))
            .map(|e| format!("line {}: {}", e.line, e.pattern))
            .collect();
        if !stale.is_empty() {
            eprintln!("bundle-mutants: equivalents lines no surviving mutant matches (stale): {}", stale.join("; "));
            std::process::exit(101);
        }
    }
    conclusion.exit();
}
