//! The broker itself at fault, against a broker of the trial's own
//! (`services::PrivateKafka`): SIGKILLed and started again on the same data
//! while a sink's transaction is open, while a commit request is out, and
//! while the in-doubt walk asks about an orphan; and a transaction the
//! broker expires. Each run is steered with held fault points, so the kill
//! lands where the trial says; the job then resumes, and its output, read
//! `read_committed`, holds exactly the reference's rows.

use std::time::Duration;

use libtest_mimic::Failed;

use super::services::PrivateKafka;
use super::steer::Steered;
use super::{committed_exactly, Scenario};

const HELD: Duration = Duration::from_secs(90);

/// The broker down and back while `at` is held; the job ends, resumed if it
/// failed, and the output is exactly the reference.
fn broker_down_while_held(name: &str, first_kill: Option<&str>, at: &str, release_first: bool) -> Result<(), Failed> {
    let dir = tempfile::tempdir_in(super::scratch())?;
    let broker = PrivateKafka::start(&dir.path().join("broker"))?;
    // The runs' traces go where trace validation judges the fault matrix's.
    let s = Scenario::new(&format!("broker-{}", name.replace(' ', "-")), &broker.bootstrap)?;
    if let Some(kill) = first_kill {
        let out = s.run(Some(kill));
        if !super::services::killed(&out) {
            return Err(format!("the run armed with {kill} was not killed there:\n{}", super::stderr(&out)).into());
        }
    }
    let mut run = Steered::start(s.command("ck", Some(&format!("{at}=hold")), &[]), s.dir.path(), "steered")?;
    run.wait_held(at, HELD)?;
    broker.kill()?;
    if release_first {
        // The held step goes on against a broker that is not there.
        run.release(at)?;
        std::thread::sleep(Duration::from_secs(2));
        broker.restart()?;
    } else {
        broker.restart()?;
        run.release(at)?;
    }
    let steered = run.finish()?;
    let resumed = if steered.status.success() { None } else { Some(s.run(None)) };
    if let Some(out) = &resumed {
        if !out.status.success() {
            return Err(format!(
                "{name}: the run failed ({:?}) and so did its resume:\n{}\n---- resume:\n{}",
                steered.status,
                super::stderr(&steered),
                super::stderr(out)
            )
            .into());
        }
    }
    let exact = committed_exactly(&s)?;
    let how = if resumed.is_some() { "failed, then resumed" } else { "finished" };
    println!("{name}: broker killed at {at} and started again; the run {how}; {exact}");
    Ok(())
}

/// Killed while the sink's transaction is open (records sent, not flushed).
pub fn killed_during_an_open_transaction(_: &str) -> Result<(), Failed> {
    broker_down_while_held("open transaction", None, "sink.before_prepare@7", false)
}

/// Killed with the commit request on its way: the sink sends it to a broker
/// that is gone, and the broker comes back while it waits for the answer.
pub fn killed_between_a_commit_request_and_its_answer(_: &str) -> Result<(), Failed> {
    broker_down_while_held("commit in flight", None, "sink.before_commit@7", true)
}

/// Killed as the in-doubt walk starts asking about checkpoint 7's orphans
/// (the job killed at sink.before_commit@7 before): its probes meet no
/// broker, then the broker that comes back.
pub fn killed_during_the_in_doubt_walk(_: &str) -> Result<(), Failed> {
    broker_down_while_held("in-doubt walk", Some("sink.before_commit@3"), "coordinator.before_in_doubt_walk@2", true)
}

/// A transaction held open past its timeout: the broker aborts it, the
/// sink's late commit is refused, and the job restarts from the confirmed
/// point and replays the interval: nothing is lost, nothing doubled.
pub fn an_expired_transaction_takes_the_refused_commit_path(bootstrap: &str) -> Result<(), Failed> {
    let s = Scenario::new("broker-expiry", bootstrap)?;
    s.edit_sink_params(|p| p["transaction_timeout_ms"] = 2000.into())?;
    let at = "sink.before_commit@7";
    let mut run = Steered::start(s.command("ck", Some(&format!("{at}=hold")), &[]), s.dir.path(), "expiry")?;
    run.wait_held(at, HELD)?;
    // 2 s of timeout, and the coordinator looks for expired transactions every second.
    std::thread::sleep(Duration::from_secs(5));
    run.release(at)?;
    let out = run.finish()?;
    let said = super::stderr(&out);
    let refused =
        said.lines().any(|l| l.contains("commit_transaction") && (l.contains("fenced") || l.contains("refused")));
    if !refused {
        return Err(format!("the late commit of an expired transaction was not refused:\n{said}").into());
    }
    if !out.status.success() {
        let resumed = s.run(None);
        if !resumed.status.success() {
            return Err(format!(
                "neither the run nor its resume finished:\n{said}\n---- resume:\n{}",
                super::stderr(&resumed)
            )
            .into());
        }
    }
    let exact = committed_exactly(&s)?;
    println!("expiry: the commit of checkpoint 7, past its 2 s timeout, was refused; {exact}");
    Ok(())
}
