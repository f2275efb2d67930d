//! Two incarnations of one sink on one transactional id, as real processes:
//! the old one is a run held at a fault point and still alive, as a worker
//! declared lost may be; the new one is a run over a copy of the old one's
//! checkpoint directory taken while it is held, the state a coordinator
//! that gave the old worker up acts on. Both write through the same
//! transactional ids into the same topic, and the trial releases them in
//! the order the scenario names. The old incarnation has no restart budget
//! and does only the step it had on its wire (it is killed right after a
//! commit it was let through), as the specification's lost worker does.
//! Every scenario ends with the output, read `read_committed`, holding
//! exactly the reference's rows; each defect switch a scenario guards is
//! shown making that output wrong.
//!
//! The seed's pinned scenarios (its `TxnResumeLive` tests):
//! - an orphan committed during the open is receipted before the fence
//!   (`orphan_left_to_init` publishes it twice), and one committed between
//!   the walk and the open likewise (`blind_fence`);
//! - an orphan aborted by the open refuses the old incarnation's commit and
//!   its interval is replayed once;
//! - a commit without its receipt is receipted at a restart from nothing,
//!   and an orphan raced at a restart from nothing is settled before the
//!   fence (`open_skips_restore_zero`);
//! - a zombie's late produce and commit are refused by the broker
//!   (`no_fencing`).

use std::process::{Command, Output};
use std::time::Duration;

use libtest_mimic::Failed;

use super::steer::Steered;
use super::{committed_exactly, services::killed, stderr, Scenario};

const HELD: Duration = Duration::from_secs(90);
const NOT_THE_REFERENCE: &str = "read_committed is not the reference";
/// Checkpoints far enough apart that the first interval holds window rows.
const FAR_APART: &str = "2500";
/// Which interval first holds window rows depends on how the source's four
/// partitions interleave, which a loaded machine changes; a race over a
/// transaction of no rows shows nothing, so such a race is run again.
const RACES: usize = 3;
const NO_ROWS: &str = "holds no rows";

fn text(e: &Failed) -> String {
    e.message().unwrap_or_default().to_string()
}

fn with_defect(mut cmd: Command, defect: Option<&str>) -> Command {
    if let Some(d) = defect {
        cmd.env("CLINK_TEST_DEFECT", d);
    }
    cmd
}

/// The old incarnation: the job over `ck`, armed with `fault`, no restart budget.
fn old_incarnation(s: &Scenario, fault: &str, defect: Option<&str>) -> Result<Steered, Failed> {
    let cmd = s.command("ck", Some(fault), &["--restart-budget", "0"]);
    Steered::start(with_defect(cmd, defect), s.dir.path(), "old")
}

/// The new incarnation, over a copy of the old one's directory as it is now.
fn new_incarnation(s: &Scenario, fault: Option<&str>, defect: Option<&str>) -> Result<Steered, Failed> {
    copy_tree(&s.dir.path().join("ck"), &s.dir.path().join("ck-new"))?;
    Steered::start(with_defect(s.command("ck-new", fault, &[]), defect), s.dir.path(), "new")
}

/// Copies a directory the old incarnation may still be writing: a file that
/// goes away between the listing and the copy (a temporary renamed into
/// place, a snapshot pruned) is left out, as a crash at that instant would
/// leave it.
fn copy_tree(from: &std::path::Path, to: &std::path::Path) -> Result<(), Failed> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let kind = match entry.file_type() {
            Ok(kind) => kind,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e.into()),
        };
        if kind.is_dir() {
            copy_tree(&src, &dst)?;
        } else {
            match std::fs::copy(&src, &dst) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(format!("copying {}: {e}", src.display()).into()),
            }
        }
    }
    Ok(())
}

/// Waits until the old incarnation's CONFIRMED-<c> is durable, so that the
/// copy the new one starts from has it.
fn wait_confirmed(s: &Scenario, c: u64) -> Result<(), Failed> {
    if c == 0 {
        return Ok(());
    }
    let marker = s.dir.path().join(format!("ck/_jobs/23/CONFIRMED-{c}"));
    let deadline = std::time::Instant::now() + HELD;
    while !marker.exists() {
        if std::time::Instant::now() > deadline {
            return Err(format!("{} never appeared", marker.display()).into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

fn ended_ok(out: &Output, what: &str) -> Result<(), Failed> {
    if !out.status.success() {
        return Err(format!("{what} failed: {:?}\n{}", out.status, stderr(out)).into());
    }
    Ok(())
}

/// The old incarnation ended refused: its sink's late step was refused by
/// the broker as fenced, and with no budget the run failed.
fn refused_by_the_broker(out: &Output) -> Result<String, Failed> {
    let said = stderr(out);
    let line = said.lines().find(|l| l.contains("kafka_sink") && l.contains("fenced by a later producer"));
    match (out.status.code(), line) {
        (Some(1), Some(line)) => Ok(line.chars().take(240).collect()),
        _ => Err(format!("the old incarnation's late step must be refused as fenced: {:?}\n{said}", out.status).into()),
    }
}

/// The old incarnation holds its commit of `c`; the new one is held at
/// `hold_new` (in its open, or between its walk and its open); the old
/// commit is let through (the old process dies before its receipt); then
/// the new incarnation goes on to its END.
fn commit_lands_while_the_new_one_opens(
    s: &Scenario,
    c: u64,
    hold_new: &str,
    defect: Option<&str>,
) -> Result<String, Failed> {
    let at_commit = format!("sink.before_commit@{c}");
    let mut old = old_incarnation(s, &format!("{at_commit}=hold,sink.between_commit_and_receipt@{c}"), None)?;
    old.wait_held(&at_commit, HELD)?;
    wait_confirmed(s, c - 1)?;
    let mut new = new_incarnation(s, Some(&format!("{hold_new}=hold")), defect)?;
    new.wait_held(hold_new, HELD)?;
    old.release(&at_commit)?;
    let old = old.finish()?;
    if !killed(&old) {
        return Err(
            format!("the old incarnation was not killed after its commit: {:?}\n{}", old.status, stderr(&old)).into()
        );
    }
    let rows = rows_named(&s.dir.path().join("ck-new"), &format!("unresolved-{c}"))?;
    if rows == 0 {
        return Err(format!("the old transaction of checkpoint {c} {NO_ROWS}").into());
    }
    new.release(hold_new)?;
    ended_ok(&new.finish()?, "the new incarnation")?;
    committed_exactly(s)
}

/// The rows of the transactions named by the markers called `name` under
/// `ck` (an unresolved marker the walk left for an orphan, a receipt):
/// positive evidence that a race was over a transaction that carried rows.
fn rows_named(ck: &std::path::Path, name: &str) -> Result<usize, Failed> {
    let mut rows = 0;
    let mut found = 0;
    let mut dirs = vec![ck.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.file_name().is_some_and(|n| n == name) {
                let marker: serde_json::Value = serde_json::from_slice(&std::fs::read(&path)?)?;
                let digests =
                    marker["handle"]["rows"].as_str().ok_or_else(|| format!("{}: no handle.rows", path.display()))?;
                rows += digests.len() / 16;
                found += 1;
            }
        }
    }
    match found {
        0 => Err(format!("{}: no marker {name}: the run left no trace of that transaction", ck.display()).into()),
        _ => Ok(rows),
    }
}

/// `run` on a scenario of one sink subtask (checkpoints every `every`
/// records) gives the exact output, and with `defect` a wrong one.
fn shown_caught(
    name: &str,
    bootstrap: &str,
    every: &str,
    defect: &str,
    run: impl Fn(&Scenario, Option<&str>) -> Result<String, Failed>,
) -> Result<(), Failed> {
    let scenario = || Scenario::single_sink(bootstrap).map(|s| s.with_every(every));
    let with_rows = |defect: Option<&str>| -> Result<String, Failed> {
        let mut said = Vec::new();
        for _ in 0..RACES {
            match run(&scenario()?, defect) {
                Err(e) if text(&e).contains(NO_ROWS) => said.push(text(&e)),
                other => return other,
            }
        }
        Err(format!("{name}: no race over a transaction with rows in {RACES} tries: {}", said.join("; ")).into())
    };
    let exact = with_rows(None)?;
    match with_rows(Some(defect)) {
        Err(e) if text(&e).contains(NOT_THE_REFERENCE) => {
            let wrong: String = text(&e).chars().take(240).collect();
            println!("{name}: {exact}; with {defect}: {wrong}");
            Ok(())
        }
        Err(e) => {
            Err(format!("{name}: with {defect} the runs went wrong before the output could: {}", text(&e)).into())
        }
        Ok(said) => {
            Err(format!("{name}: with {defect} the output is still exact ({said}): the trial cannot see it").into())
        }
    }
}

/// The old commit lands between the open's describe (Ongoing) and its
/// abort: the abort is refused, the open describes again, finds the commit,
/// writes its receipt, and the replay swallows the interval.
pub fn an_orphan_committed_during_the_open_is_receipted_before_the_fence(bootstrap: &str) -> Result<(), Failed> {
    shown_caught("committed during the open", bootstrap, super::EVERY, "orphan_left_to_init", |s, defect| {
        commit_lands_while_the_new_one_opens(s, 7, "sink.orphan_described@7", defect)
    })
}

/// The old commit lands after the walk refused the orphan and before the
/// open: the open's describe finds it committed and receipts it.
pub fn an_orphan_committed_before_the_open_is_receipted_before_the_fence(bootstrap: &str) -> Result<(), Failed> {
    shown_caught("committed before the open", bootstrap, super::EVERY, "blind_fence", |s, defect| {
        commit_lands_while_the_new_one_opens(s, 7, "coordinator.before_restored_record@6", defect)
    })
}

/// The same race at a restart from nothing: nothing is confirmed yet, the
/// restore point is 0, and the open there settles its orphan all the same.
/// Checkpoints are far apart, so that the first interval holds rows.
pub fn an_orphan_raced_at_a_restart_from_nothing_is_settled_before_the_fence(bootstrap: &str) -> Result<(), Failed> {
    shown_caught("raced at a restart from nothing", bootstrap, FAR_APART, "open_skips_restore_zero", |s, defect| {
        commit_lands_while_the_new_one_opens(s, 1, "coordinator.before_restored_record@0", defect)
    })
}

/// The new open aborts the orphan first (it describes it Ongoing and its
/// abort under the orphan's identity is accepted) and runs to its END,
/// replaying the interval once; the old incarnation's commit, let through
/// afterwards, is refused by the broker.
pub fn an_orphan_aborted_by_the_open_refuses_the_old_commit_and_is_replayed_once(
    bootstrap: &str,
) -> Result<(), Failed> {
    let s = Scenario::single_sink(bootstrap)?;
    let (at_commit, at_open) = ("sink.before_commit@7", "sink.orphan_described@7");
    let mut old = old_incarnation(&s, &format!("{at_commit}=hold"), None)?;
    old.wait_held(at_commit, HELD)?;
    wait_confirmed(&s, 6)?;
    let mut new = new_incarnation(&s, Some(&format!("{at_open}=hold")), None)?;
    new.wait_held(at_open, HELD)?;
    new.release(at_open)?;
    ended_ok(&new.finish()?, "the new incarnation")?;
    old.release(at_commit)?;
    let refused = refused_by_the_broker(&old.finish()?)?;
    let exact = committed_exactly(&s)?;
    println!("aborted by the open: the old commit was refused ({refused}); {exact}");
    Ok(())
}

/// Two sinks: one commits checkpoint 1 and the process dies before its
/// receipt, while the other still holds its commit. The resume's walk proves
/// the first commit at the broker (a receipt), refuses the second, and
/// restores from nothing; the first sink's open at restore point 0 arms
/// suppression from that receipt, so its interval is not published twice.
pub fn a_commit_without_its_receipt_is_receipted_at_a_restart_from_nothing(bootstrap: &str) -> Result<(), Failed> {
    let run = |defect: Option<&str>| -> Result<String, Failed> {
        let s = Scenario::private(bootstrap)?.with_every(FAR_APART);
        let fault = "sink.before_commit@1=hold,sink.between_commit_and_receipt@1";
        let killed_run = Steered::start(s.command("ck", Some(fault), &[]), s.dir.path(), "killed")?.finish()?;
        if !killed(&killed_run) {
            return Err(format!("the run was not killed after one sink's commit of 1:\n{}", stderr(&killed_run)).into());
        }
        let resumed = super::run_bounded(&mut with_defect(s.command("ck", None, &[]), defect), s.dir.path());
        ended_ok(&resumed, "the resume")?;
        if rows_named(&s.dir.path().join("ck"), "receipt-1")? == 0 {
            return Err(format!("the commit of checkpoint 1 {NO_ROWS}").into());
        }
        committed_exactly(&s)
    };
    let with_rows = |defect: Option<&str>| -> Result<String, Failed> {
        let mut said = Vec::new();
        for _ in 0..RACES {
            match run(defect) {
                Err(e) if text(&e).contains(NO_ROWS) => said.push(text(&e)),
                other => return other,
            }
        }
        Err(format!("no commit with rows in {RACES} tries: {}", said.join("; ")).into())
    };
    let exact = with_rows(None)?;
    match with_rows(Some("open_skips_restore_zero")) {
        Err(e) if text(&e).contains(NOT_THE_REFERENCE) => {
            println!("receipted at a restart from nothing: {exact}; with open_skips_restore_zero: {}", text(&e));
            Ok(())
        }
        Err(e) => {
            Err(format!("with open_skips_restore_zero the runs went wrong before the output could: {}", text(&e))
                .into())
        }
        Ok(said) => Err(format!("with open_skips_restore_zero the output is still exact ({said})").into()),
    }
}

/// A zombie: the old incarnation holds checkpoint 7's transaction open
/// (records sent, not flushed) while the new one, over the copy, runs to its
/// END (its init fences the id and aborts the open transaction). Let go,
/// the zombie's flush is refused as fenced. With `no_fencing` (each process
/// its own transactional id) nothing refuses the zombie, and its interval is
/// published twice.
pub fn a_zombies_late_produce_and_commit_are_refused_by_the_broker(bootstrap: &str) -> Result<(), Failed> {
    let run = |defect: Option<&str>| -> Result<String, Failed> {
        let s = Scenario::single_sink(bootstrap)?;
        let at = "sink.before_prepare@7";
        let mut old = old_incarnation(&s, &format!("{at}=hold"), defect)?;
        old.wait_held(at, HELD)?;
        wait_confirmed(&s, 6)?;
        ended_ok(&new_incarnation(&s, None, defect)?.finish()?, "the new incarnation")?;
        old.release(at)?;
        let old = old.finish()?;
        let refused = match defect {
            None => refused_by_the_broker(&old)?,
            Some(_) => format!("the old incarnation ended {:?}", old.status),
        };
        Ok(format!("{refused}; {}", committed_exactly(&s)?))
    };
    let exact = run(None)?;
    match run(Some("no_fencing")) {
        Err(e) if text(&e).contains(NOT_THE_REFERENCE) => {
            println!("zombie: {exact}; with no_fencing: {}", text(&e));
            Ok(())
        }
        Err(e) => Err(format!("with no_fencing the runs went wrong before the output could: {}", text(&e)).into()),
        Ok(said) => Err(format!("with no_fencing the zombie's interval must be published twice, yet: {said}").into()),
    }
}
