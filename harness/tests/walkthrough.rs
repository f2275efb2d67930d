//! README.md, walked: every fenced `sh` block of the sections from "From
//! clone to first incident" to "Reports to look at", as written, in order,
//! in one bash started at the checkout's root, with `TMPDIR` pointing into a
//! temporary directory (so the walkthrough's `mktemp -d` scratch directory is
//! the test's), the built binaries first on `PATH` (this test's own, or the
//! installed ones `CLINK_WALKTHROUGH_BIN` names: CI installs them with
//! `gates/install-clink`, as the README says), the services' env file in
//! `CLINK_SERVICES_ENV`, and no other `CLINK_*` or `AWS_*` variable: what a
//! section needs, its own commands must set up. Every command must exit 0, or
//! the status its `# exits N` comment names, and print the text its
//! `# prints: TEXT` comment names; the walk must leave the checkout's
//! `git status` as it found it, and reuse the services `.ci/run` started.
//!
//! Every `## ` section of the README is declared below, in order, as walked
//! or not with the reason, so a section added or moved is a failing test
//! until it is walked or says why not. One trial per walked section reports
//! its steps and its time; the walk itself runs once, in order, for all of
//! them. Without the services the walk's trials are ignored as `service`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use libtest_mimic::{Arguments, Failed, Trial};

/// Whether the walk runs a section's blocks, and if not, why.
#[derive(Clone, Copy)]
enum Part {
    Walked,
    NotWalked(&'static str),
}

/// Every `## ` heading of README.md, in order.
const SECTIONS: &[(&str, Part)] = &[
    (
        "Getting clink",
        Part::NotWalked("CI runs gates/install-clink --root DIR just before the walk, which runs DIR/bin"),
    ),
    ("The two commands", Part::NotWalked("gates/incident-gate and gates/test are CI steps of their own")),
    ("From clone to first incident", Part::Walked),
    ("Services", Part::Walked),
    ("Kafka and ClickHouse", Part::Walked),
    ("Exactly once into Kafka: the commit-confirmed family", Part::Walked),
    ("Reconciling a destination", Part::Walked),
    ("Continuous audits", Part::Walked),
    ("Before a release", Part::Walked),
    ("Before you deploy: A/B on production bytes", Part::Walked),
    ("Moving captures: the capture store", Part::Walked),
    ("Restore at another parallelism", Part::Walked),
    ("The formal side", Part::Walked),
    (
        "Calibrating the verifier: bundle mutants",
        Part::NotWalked(
            "gates/bundle-mutants runs every mutant for a quarter of an hour; its seeded sample runs in cargo test",
        ),
    ),
    ("Reports to look at", Part::Walked),
    ("With Nix", Part::NotWalked("no Nix here: flake_shape and flake_eval test the flake")),
    ("Performance", Part::NotWalked("gates/bench measures for over half an hour")),
    ("Exit codes", Part::NotWalked("no commands")),
    ("Where things are", Part::NotWalked("no commands")),
];

/// How long the whole walk may take before it is killed.
const WALK_BOUND: Duration = Duration::from_secs(30 * 60);

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn readme() -> String {
    std::fs::read_to_string(workspace().join("README.md")).expect("README.md reads")
}

/// One command of the walk: its text (continuation lines and here-documents
/// joined as the shell joins them), the exit status it is written to end
/// with, and what its output must contain.
#[derive(Debug, PartialEq)]
struct Step {
    text: String,
    exits: i32,
    prints: Option<String>,
}

/// The `## ` sections of `readme`, as (heading, body), in order.
fn sections(readme: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut in_fence = false;
    for line in readme.lines() {
        if line.starts_with("```") {
            in_fence = !in_fence;
        }
        match line.strip_prefix("## ") {
            Some(heading) if !in_fence => out.push((heading.to_string(), String::new())),
            _ => {
                if let Some((_, body)) = out.last_mut() {
                    body.push_str(line);
                    body.push('\n');
                }
            }
        }
    }
    out
}

/// The terminator of a here-document `line` opens (`<<EOF`, `<<'EOF'`,
/// `<<-EOF`), if it opens one.
fn here_document(line: &str) -> Option<String> {
    let rest = line.split_once("<<")?.1.trim_start_matches('-').trim_start();
    let word: String =
        rest.trim_start_matches(['\'', '"']).chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
    (!word.is_empty()).then_some(word)
}

/// The `sh` blocks of one section's body, as steps, in order.
fn steps(body: &str) -> Result<Vec<Step>, String> {
    let mut steps = Vec::new();
    let mut in_block = false;
    let mut pending = String::new();
    let mut heredoc: Option<String> = None;
    for line in body.lines() {
        if !in_block {
            in_block = line.trim_end() == "```sh";
            continue;
        }
        if heredoc.is_none() && line.trim_end() == "```" {
            in_block = false;
            if !pending.is_empty() {
                return Err(format!("a block ends inside a continued command: {pending}"));
            }
            continue;
        }
        pending.push_str(line);
        pending.push('\n');
        if let Some(end) = &heredoc {
            if line == end {
                heredoc = None;
            } else {
                continue;
            }
        } else if let Some(end) = here_document(line) {
            heredoc = Some(end);
            continue;
        }
        if !line.trim_end().ends_with('\\') {
            let text = std::mem::take(&mut pending);
            if !text.trim().is_empty() {
                steps.push(Step { exits: expected_exit(&text)?, prints: expected_print(&text), text });
            }
        }
    }
    if in_block {
        return Err("the last sh block is not closed".into());
    }
    Ok(steps)
}

/// The status a step's `# exits N` comment names, 0 without one.
fn expected_exit(text: &str) -> Result<i32, String> {
    match text.split_once("# exits ") {
        None => Ok(0),
        Some((_, rest)) => {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().map_err(|_| format!("`# exits` names no status: {text}"))
        }
    }
}

/// The text a step's `prints: TEXT` comment names: the rest of its line.
fn expected_print(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let (before, after) = line.split_once("prints: ")?;
        before.contains('#').then(|| after.trim().to_string())
    })
}

/// Single-quoted for bash.
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// The walked sections' steps as one bash script. Each step runs in the
/// script's own shell (a brace group: `cd`, variables and background jobs
/// carry over) with its output in `logs/step-N.out`, then shown; the script
/// records in `logs/marks` when each section starts and ends and which step
/// it is at, and stops at the first step whose status or output is not the
/// one written, saying which.
fn script(walked: &[(String, Vec<Step>)], logs: &Path) -> String {
    let marks = quoted(&logs.join("marks").display().to_string());
    let mut s = String::from("exec </dev/null\n");
    let mut n = 0;
    for (section, (heading, steps)) in walked.iter().enumerate() {
        s.push_str(&format!(
            "echo \"start {section} $EPOCHREALTIME\" >>{marks}\necho {}\n",
            quoted(&format!("== walk: {heading}"))
        ));
        for step in steps {
            n += 1;
            let out = quoted(&logs.join(format!("step-{n}.out")).display().to_string());
            let first = step.text.lines().next().unwrap_or_default();
            // `why` is a shell word: it may expand $__walk_rc.
            let stop = |why: String| {
                format!(
                    "echo \"fail {section} {n}\" >>{marks}; echo {}{why}{} >&2; exit 1",
                    quoted(&format!("walk: step {n} ({heading}) ")),
                    quoted(&format!(": {first}"))
                )
            };
            s.push_str(&format!("echo \"step {section} {n}\" >>{marks}\n{{ {}}} >{out} 2>&1\n", step.text));
            s.push_str(&format!("__walk_rc=$?\ncat {out}\n"));
            let exited = format!("\"exited $__walk_rc\"{}", quoted(&format!(" (written to exit {})", step.exits)));
            s.push_str(&format!("if [ \"$__walk_rc\" != {} ]; then {}; fi\n", step.exits, stop(exited)));
            if let Some(text) = &step.prints {
                let missing = quoted(&format!("did not print {text:?}"));
                s.push_str(&format!("if ! grep -qF -- {} {out}; then {}; fi\n", quoted(text), stop(missing)));
            }
        }
        s.push_str(&format!("echo \"end {section} $EPOCHREALTIME\" >>{marks}\n"));
    }
    s
}

/// What the marks file says of each section: its time, and how it ended.
#[derive(Debug, Default, Clone)]
struct Progress {
    seconds: Option<f64>,
    started: bool,
    failed_at: Option<usize>,
    at_step: Option<usize>,
}

fn progress(marks: &str, sections: usize) -> Vec<Progress> {
    let mut out = vec![Progress::default(); sections];
    let mut started_at: BTreeMap<usize, f64> = BTreeMap::new();
    for line in marks.lines() {
        let mut words = line.split_whitespace();
        let (Some(kind), Some(Ok(section)), value) =
            (words.next(), words.next().map(str::parse::<usize>), words.next())
        else {
            continue;
        };
        let Some(p) = out.get_mut(section) else { continue };
        match (kind, value) {
            ("start", Some(t)) => {
                p.started = true;
                started_at.insert(section, t.parse().unwrap_or(0.0));
            }
            ("end", Some(t)) => p.seconds = Some(t.parse::<f64>().unwrap_or(0.0) - started_at[&section]),
            ("step", Some(step)) => p.at_step = step.parse().ok(),
            ("fail", Some(step)) => p.failed_at = step.parse().ok(),
            _ => {}
        }
    }
    out
}

/// The walk, once: its progress per walked section, everything it printed,
/// and the checkout's status before and after.
struct Walk {
    progress: Vec<Progress>,
    said: String,
    status_before: Option<String>,
    status_after: Option<String>,
    scratch_entries: Vec<String>,
}

fn git_status() -> Option<String> {
    let out = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=all"])
        .current_dir(workspace())
        .output()
        .ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The services' env file, as the suites find it.
fn services_env() -> String {
    std::env::var("CLINK_SERVICES_ENV")
        .unwrap_or_else(|_| format!("{}/clink-services.env", std::env::var("TMPDIR").unwrap_or_else(|_| "/tmp".into())))
}

/// Why the walk cannot run here, if it cannot: the services must be running
/// and answering (the walk must reuse them, never start its own).
fn services_missing(env_file: &str) -> Option<String> {
    let out = Command::new(workspace().join("gates/services"))
        .args(["status", "--env", env_file])
        .output()
        .map_err(|e| e.to_string());
    match out {
        Ok(out) if out.status.success() => None,
        Ok(out) => Some(format!("gates/services status --env {env_file}: {}", String::from_utf8_lossy(&out.stderr))),
        Err(e) => Some(e),
    }
}

/// The directory whose `clink`, `clink-audit` and `clink-reference-audit`
/// the walk runs: CLINK_WALKTHROUGH_BIN, or one made of this test's builds.
fn bin_dir(made: &Path) -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("CLINK_WALKTHROUGH_BIN") {
        return Ok(PathBuf::from(dir));
    }
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).parent().map(Path::to_path_buf).ok_or("no target")?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["build", "--quiet", "--offline", "-p", "clink-reference-audit"])
        .env("CARGO_TARGET_DIR", target.join("audit-reference"))
        .current_dir(workspace())
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("building clink-reference-audit: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let reference = target.join("audit-reference/debug/clink-reference-audit");
    for (name, path) in [
        ("clink", PathBuf::from(env!("CARGO_BIN_EXE_clink"))),
        ("clink-audit", PathBuf::from(env!("CARGO_BIN_EXE_clink-audit"))),
        ("clink-reference-audit", reference),
    ] {
        std::os::unix::fs::symlink(&path, made.join(name)).map_err(|e| format!("{name}: {e}"))?;
    }
    Ok(made.to_path_buf())
}

fn walk(env_file: &str) -> Result<Walk, String> {
    let readme = readme();
    let walked: Vec<(String, Vec<Step>)> = walked_sections(&readme)?;
    let made_bin = tempfile::tempdir().map_err(|e| e.to_string())?;
    let bin = bin_dir(made_bin.path())?;
    for name in ["clink", "clink-audit", "clink-reference-audit"] {
        if !bin.join(name).is_file() {
            return Err(format!("no {name} in {}", bin.display()));
        }
    }
    let scratch = tempfile::tempdir().map_err(|e| e.to_string())?;
    let logs = tempfile::tempdir().map_err(|e| e.to_string())?;
    let status_before = git_status();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let mut cmd = Command::new("bash");
    cmd.args(["--noprofile", "--norc", "-c", &script(&walked, logs.path())])
        .current_dir(workspace())
        .stdout(std::fs::File::create(logs.path().join("walk.out")).map_err(|e| e.to_string())?)
        .stderr(std::fs::File::create(logs.path().join("walk.err")).map_err(|e| e.to_string())?);
    for (key, _) in std::env::vars() {
        if key.starts_with("CLINK_") || key.starts_with("AWS_") {
            cmd.env_remove(key);
        }
    }
    cmd.env("PATH", path).env("TMPDIR", scratch.path()).env("CLINK_SERVICES_ENV", env_file);
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = cmd.spawn().map_err(|e| e.to_string())?;
    let started = Instant::now();
    let timed_out = loop {
        if child.try_wait().map_err(|e| e.to_string())?.is_some() {
            break false;
        }
        if started.elapsed() > WALK_BOUND {
            break true;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // Whatever the walk left running (a background job after a failed step).
    // SAFETY: kill(2) on the walk's own process group, which this test made.
    unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
    let _ = child.wait();
    let read = |name: &str| std::fs::read_to_string(logs.path().join(name)).unwrap_or_default();
    let mut said = format!("{}\n{}", read("walk.out"), read("walk.err"));
    if timed_out {
        said.push_str(&format!("\nwalk: killed after {WALK_BOUND:?}"));
    }
    // Kept for reading after the trials (the trials show only a failure's tail).
    let _ = std::fs::write(Path::new(env!("CARGO_TARGET_TMPDIR")).join("walkthrough.log"), &said);
    let scratch_entries = std::fs::read_dir(scratch.path())
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    Ok(Walk {
        progress: progress(&read("marks"), walked.len()),
        said,
        status_before,
        status_after: git_status(),
        scratch_entries,
    })
}

/// The walked sections' steps, in the README's order.
fn walked_sections(readme: &str) -> Result<Vec<(String, Vec<Step>)>, String> {
    let mut out = Vec::new();
    for (heading, body) in sections(readme) {
        if let Some((_, Part::Walked)) = SECTIONS.iter().find(|(name, _)| *name == heading) {
            out.push((heading.clone(), steps(&body).map_err(|e| format!("{heading}: {e}"))?));
        }
    }
    Ok(out)
}

/// The walk, run once for every trial that reads it.
fn the_walk(env_file: &str) -> &'static Result<Walk, String> {
    static WALK: OnceLock<Result<Walk, String>> = OnceLock::new();
    WALK.get_or_init(|| {
        let walk = walk(env_file);
        if let Ok(w) = &walk {
            eprintln!("{}", summary(w));
            eprintln!("walk: its log: {}/walkthrough.log", env!("CARGO_TARGET_TMPDIR"));
        }
        walk
    })
}

/// Each walked section with its time, and the walk's total.
fn summary(walk: &Walk) -> String {
    let walked: Vec<&str> =
        SECTIONS.iter().filter(|(_, part)| matches!(part, Part::Walked)).map(|(name, _)| *name).collect();
    let mut lines = vec!["walk: each README section's time".to_string()];
    let mut total = 0.0;
    for (name, p) in walked.iter().zip(&walk.progress) {
        let time = match (p.seconds, p.failed_at, p.started) {
            (Some(s), _, _) => {
                total += s;
                format!("{s:7.1} s")
            }
            (None, Some(step), _) => format!("failed at step {step}"),
            (None, None, true) => format!("stopped in step {}", p.at_step.unwrap_or(0)),
            (None, None, false) => "not reached".to_string(),
        };
        lines.push(format!("walk:   {time}  {name}"));
    }
    lines.push(format!("walk: {total:7.1} s  in all"));
    lines.join("\n")
}

/// The last lines of what the walk printed, for a failure message.
fn tail(said: &str) -> String {
    let lines: Vec<&str> = said.lines().collect();
    lines[lines.len().saturating_sub(80)..].join("\n")
}

fn section_trial(index: usize, env_file: &str) -> Result<(), Failed> {
    let walk = the_walk(env_file).as_ref().map_err(|e| Failed::from(e.as_str()))?;
    let p = &walk.progress[index];
    match (p.seconds, p.started) {
        (Some(seconds), _) => {
            println!("section passed in {seconds:.1} s");
            Ok(())
        }
        (None, true) => Err(format!("{}\n\n{}", tail(&walk.said), summary(walk)).into()),
        (None, false) => Err(format!("not reached: a section before it failed\n{}", summary(walk)).into()),
    }
}

fn checkout_trial(env_file: &str) -> Result<(), Failed> {
    let walk = the_walk(env_file).as_ref().map_err(|e| Failed::from(e.as_str()))?;
    if walk.status_after != walk.status_before {
        return Err(format!(
            "the walk wrote into the checkout:\nbefore:\n{:?}\nafter:\n{:?}",
            walk.status_before, walk.status_after
        )
        .into());
    }
    if walk.scratch_entries.len() != 1 {
        return Err(format!("the walk works in one scratch directory; TMPDIR holds {:?}", walk.scratch_entries).into());
    }
    if !walk.said.contains("reusing them") {
        return Err(format!("gates/services start did not reuse the running services:\n{}", tail(&walk.said)).into());
    }
    Ok(())
}

fn declared_sections() -> Result<(), Failed> {
    let readme = readme();
    let found: Vec<String> = sections(&readme).into_iter().map(|(heading, _)| heading).collect();
    let declared: Vec<&str> = SECTIONS.iter().map(|(name, _)| *name).collect();
    if found != declared {
        return Err(format!("README.md's sections differ from the ones declared here:\n{found:#?}").into());
    }
    for (heading, body) in sections(&readme) {
        let steps = steps(&body).map_err(|e| format!("{heading}: {e}"))?;
        match SECTIONS.iter().find(|(name, _)| *name == heading).map(|(_, part)| *part) {
            Some(Part::Walked) if steps.is_empty() => return Err(format!("{heading}: walked, with no sh block").into()),
            Some(Part::NotWalked(why)) if !steps.is_empty() => {
                return Err(format!("{heading}: has sh blocks, but is not walked ({why})").into())
            }
            _ => {}
        }
    }
    Ok(())
}

fn reader_rules() -> Result<(), Failed> {
    let readme =
        "# x\n## Walk\ntext\n```sh\na \\\n  b  # exits 137\nc # prints: it worked\n```\n```text\nnot run\n```\n\
                  ```sh\ncat > f <<'EOF'\n{\"x\": 1}\n}\nEOF\nd\n```\n## Next\n```sh\ne\n```\n";
    let all = sections(readme);
    assert_eq!(all.iter().map(|(h, _)| h.as_str()).collect::<Vec<_>>(), ["Walk", "Next"]);
    let got = steps(&all[0].1)?;
    let step =
        |text: &str, exits, prints: Option<&str>| Step { text: text.into(), exits, prints: prints.map(Into::into) };
    assert_eq!(
        got,
        vec![
            step("a \\\n  b  # exits 137\n", 137, None),
            step("c # prints: it worked\n", 0, Some("it worked")),
            step("cat > f <<'EOF'\n{\"x\": 1}\n}\nEOF\n", 0, None),
            step("d\n", 0, None),
        ]
    );
    let fenced = steps("```sh\ncat <<EOF\n```\nEOF\n```\n")?;
    assert_eq!(fenced.len(), 1, "a fence inside a here-document is its text: {fenced:?}");
    assert!(steps("```sh\na \\\n```\n").is_err(), "a block ending mid-command");
    assert!(steps("```sh\na\n").is_err(), "an unclosed block");
    assert!(steps("```sh\ncat <<EOF\na\n```\n").is_err(), "a here-document never ended");
    assert!(steps("```sh\na # exits x\n```\n").is_err(), "an exit that is no number");
    assert_eq!(expected_print("x=\"${A##*:}\"  # exits 1; prints: REJECTED at"), Some("REJECTED at".into()));
    assert_eq!(expected_print("echo prints: no comment"), None);
    Ok(())
}

fn stops_where_written_otherwise() -> Result<(), Failed> {
    let step = |text: &str, exits, prints: Option<&str>| Step {
        text: format!("{text}\n"),
        exits,
        prints: prints.map(Into::into),
    };
    let run = |steps: Vec<Step>| {
        let logs = tempfile::tempdir().unwrap();
        let out =
            Command::new("bash").args(["-c", &script(&[("S".to_string(), steps)], logs.path())]).output().unwrap();
        let marks = std::fs::read_to_string(logs.path().join("marks")).unwrap_or_default();
        (out, progress(&marks, 1).remove(0))
    };
    let (passes, p) = run(vec![
        step("x=1; cd /", 0, None),
        step("(exit 137) # exits 137", 137, None),
        step("echo \"reached $x $PWD\" # prints: reached 1 /", 0, Some("reached 1 /")),
    ]);
    assert!(passes.status.success(), "{}", String::from_utf8_lossy(&passes.stderr));
    assert!(p.seconds.is_some() && p.failed_at.is_none());
    for (wrong, named) in [
        (step("false", 0, None), "step 2 (S) exited 1 (written to exit 0): false"),
        (step("true # exits 137", 137, None), "step 2 (S) exited 0 (written to exit 137): true # exits 137"),
        (step("echo other # prints: this", 0, Some("this")), "step 2 (S) did not print \"this\""),
    ] {
        let (out, p) = run(vec![step("true", 0, None), wrong, step("echo never", 0, None)]);
        assert_eq!(out.status.code(), Some(1));
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.contains(named), "{said}");
        assert!(!String::from_utf8_lossy(&out.stdout).contains("never"));
        assert_eq!((p.seconds, p.failed_at), (None, Some(2)));
    }
    Ok(())
}

/// A trial that reads the walk, given the services' env file.
type WalkCheck = Box<dyn FnOnce(&str) -> Result<(), Failed> + Send>;

fn main() {
    let args = Arguments::from_args();
    let mut trials = vec![
        Trial::test("readme::every_section_is_walked_or_says_why_not", declared_sections),
        Trial::test("reader::blocks_continuations_heredocs_and_annotations", reader_rules),
        Trial::test(
            "reader::the_script_stops_at_a_step_that_ends_otherwise_than_written",
            stops_where_written_otherwise,
        ),
    ];
    let env_file = services_env();
    let missing = services_missing(&env_file);
    if let Some(why) = &missing {
        eprintln!("the walk's trials are ignored as `service`: {why}");
    }
    let walked = SECTIONS.iter().filter(|(_, part)| matches!(part, Part::Walked)).map(|(name, _)| *name);
    let mut walk_trials: Vec<(String, WalkCheck)> = walked
        .enumerate()
        .map(|(i, name)| {
            let trial: WalkCheck = Box::new(move |env| section_trial(i, env));
            (format!("walk::{i:02}::{name}"), trial)
        })
        .collect();
    walk_trials.push(("walk::the_checkout_is_as_it_was_and_the_services_were_reused".into(), Box::new(checkout_trial)));
    for (name, check) in walk_trials {
        let env = env_file.clone();
        trials.push(match missing {
            None => Trial::test(name, move || check(&env)),
            Some(_) => Trial::test(name, || Ok(())).with_ignored_flag(true).with_kind("service"),
        });
    }
    libtest_mimic::run(&args, trials).exit();
}
