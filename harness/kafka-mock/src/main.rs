//! clink-kafka-mock: librdkafka's mock Kafka cluster (the one librdkafka's
//! own transaction tests run against), hosted in this process as a service
//! for the tests of the transactional client and sink.
//!
//! It owns one thing: keeping the mock cluster alive, on 127.0.0.1 only
//! (librdkafka binds its mock brokers to the loopback address; this program
//! refuses to go on if the address it reports is anything else), with all
//! data in memory, until SIGTERM, SIGINT or SIGHUP. It prints
//! `bootstrap=127.0.0.1:PORT`, `librdkafka=VERSION` and `brokers=N` on
//! standard output once the cluster listens. It never writes a file and
//! never connects anywhere.
//!
//! What the mock does and does not implement of transactions is measured by
//! `kafka-txn-probe` and written in ARCHITECTURE.md ("A broker that speaks
//! transactions"); in short, it accepts the requests but keeps no
//! transaction state: aborted records stay visible and nothing is fenced.
//!
//! usage: clink-kafka-mock [--brokers N]   (N in 1..=3, default 1)
//! Exit: 0 stopped by a signal; 1 the cluster could not start, or reported
//! a non-loopback address; 2 bad usage.

use std::io::Write;
use std::process::ExitCode;

use rdkafka::mocking::MockCluster;

fn usage() -> ExitCode {
    eprintln!("usage: clink-kafka-mock [--brokers N]   (N in 1..=3, default 1)");
    ExitCode::from(2)
}

fn parse_brokers(args: &[String]) -> Option<i32> {
    match args {
        [] => Some(1),
        [flag, n] if flag == "--brokers" => n.parse().ok().filter(|n| (1..=3).contains(n)),
        _ => None,
    }
}

/// Every address of a bootstrap list is 127.0.0.1:PORT.
fn all_loopback(bootstrap: &str) -> bool {
    !bootstrap.is_empty()
        && bootstrap.split(',').all(|a| a.strip_prefix("127.0.0.1:").is_some_and(|p| p.parse::<u16>().is_ok()))
}

/// The signals that stop the service, blocked in every thread (librdkafka's
/// threads inherit the mask) so that only `sigwait` receives them.
fn stop_signals() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data, initialised by sigemptyset before use.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

fn wait_for(set: &libc::sigset_t) -> i32 {
    let mut signal = 0;
    // SAFETY: `set` is an initialised signal set; `signal` is written by sigwait.
    unsafe { libc::sigwait(set, &mut signal) };
    signal
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        usage();
        return ExitCode::SUCCESS;
    }
    let Some(brokers) = parse_brokers(&args) else { return usage() };
    let signals = stop_signals();
    let cluster = match MockCluster::new(brokers) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("clink-kafka-mock: the mock cluster did not start: {e}");
            return ExitCode::from(1);
        }
    };
    let bootstrap = cluster.bootstrap_servers();
    if !all_loopback(&bootstrap) {
        eprintln!("clink-kafka-mock: the mock cluster reports {bootstrap:?}, not 127.0.0.1 only; stopping");
        return ExitCode::from(1);
    }
    let (_, version) = rdkafka::util::get_rdkafka_version();
    let mut out = std::io::stdout().lock();
    let printed =
        writeln!(out, "bootstrap={bootstrap}\nlibrdkafka={version}\nbrokers={brokers}").and_then(|()| out.flush());
    drop(out);
    if printed.is_err() {
        return ExitCode::from(1);
    }
    let signal = wait_for(&signals);
    eprintln!("clink-kafka-mock: signal {signal}; stopping the mock cluster");
    drop(cluster);
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_bootstraps_pass() {
        assert!(all_loopback("127.0.0.1:9092"));
        assert!(all_loopback("127.0.0.1:1,127.0.0.1:2"));
        for bad in ["", "0.0.0.0:9092", "localhost:9092", "127.0.0.1:9092,10.0.0.1:9092", "127.0.0.1:x"] {
            assert!(!all_loopback(bad), "{bad}");
        }
    }

    #[test]
    fn broker_counts_are_bounded() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(parse_brokers(&[]), Some(1));
        assert_eq!(parse_brokers(&s(&["--brokers", "3"])), Some(3));
        for bad in [&["--brokers", "0"][..], &["--brokers", "4"], &["--brokers"], &["-x", "1"]] {
            assert_eq!(parse_brokers(&s(bad)), None, "{bad:?}");
        }
    }
}
