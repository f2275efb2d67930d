//! The probe: what a process sees of the network from where it runs, and
//! what the `probe` command (`probe_command`) reports, once without isolation and once
//! under the mechanism.
//!
//! It reads its namespace's interfaces (/proc/net/dev, which is per
//! namespace), brings `lo` up (a new namespace starts with it down), tries
//! the control endpoint, and checks that loopback works; then it writes its
//! report (`clink-isolation-probe` version 1, carrying the proof's nonce)
//! under a temporary name and renames it into place. Given a command, it
//! runs it (by exec, so the command's exit status is the process's own) only
//! when what it saw proves the isolation ([`judge_inside`]).
//!
//! It connects to nothing but 127.0.0.1: the control endpoint and its own
//! loopback listener.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::control::answer_line;
use crate::{Mechanism, Verdict};

pub const REPORT_FORMAT: &str = "clink-isolation-probe";
pub const REPORT_VERSION: u64 = 1;
/// How long the probe waits for the control endpoint.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// What became of a connection to the control endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reach", content = "detail", rename_all = "kebab-case")]
pub enum Reach {
    /// Connected, and the endpoint answered with this proof's nonce.
    Answered,
    /// Connected, but the answer was not the endpoint's (something else listens).
    Connected(String),
    /// Refused before anything was exchanged (connection refused, network
    /// or host unreachable).
    Refused(String),
    /// Neither: a timeout or another error, which proves nothing.
    Undetermined(String),
}

impl Reach {
    pub fn describe(&self) -> String {
        match self {
            Reach::Answered => "the control endpoint answered".into(),
            Reach::Connected(what) => format!("connected to something else: {what}"),
            Reach::Refused(e) => format!("refused ({e})"),
            Reach::Undetermined(e) => format!("undetermined ({e})"),
        }
    }
}

/// Whether one thing the probe tried worked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tried {
    pub ok: bool,
    pub detail: String,
}

/// The probe's report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeReport {
    pub format: String,
    pub version: u64,
    pub nonce: String,
    /// The interfaces of the probe's namespace.
    pub interfaces: Vec<String>,
    /// Why the interfaces could not be read, when they could not.
    pub interfaces_error: Option<String>,
    pub control: Reach,
    /// `lo` up and a connection to a listener of the probe's own answered.
    pub loopback: Tried,
    /// What became of the command it was given: `none`, `started`,
    /// `withheld: <why>` or `not started: <error>`.
    pub command: String,
}

/// The interfaces of this process's namespace.
pub fn interfaces() -> Result<Vec<String>, String> {
    let text = std::fs::read_to_string("/proc/net/dev").map_err(|e| format!("/proc/net/dev: {e}"))?;
    Ok(text
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next())
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .collect())
}

/// Whether this namespace has `lo` and nothing else.
pub fn only_loopback(names: &[String]) -> bool {
    !names.is_empty() && names.iter().all(|n| n == "lo")
}

/// Brings `lo` up in this namespace when it is down.
fn loopback_up() -> Result<(), String> {
    // SAFETY: a datagram socket used only for two interface ioctls on a
    // zeroed, correctly sized ifreq naming "lo"; the descriptor is closed.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0);
        if fd < 0 {
            return Err(format!("socket: {}", std::io::Error::last_os_error()));
        }
        let mut ifr: libc::ifreq = std::mem::zeroed();
        for (i, b) in b"lo".iter().enumerate() {
            ifr.ifr_name[i] = *b as libc::c_char;
        }
        let result = if libc::ioctl(fd, libc::SIOCGIFFLAGS as _, &mut ifr) < 0 {
            Err(format!("SIOCGIFFLAGS lo: {}", std::io::Error::last_os_error()))
        } else if ifr.ifr_ifru.ifru_flags & libc::IFF_UP as libc::c_short != 0 {
            Ok(())
        } else {
            ifr.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            if libc::ioctl(fd, libc::SIOCSIFFLAGS as _, &ifr) < 0 {
                Err(format!("SIOCSIFFLAGS lo up: {}", std::io::Error::last_os_error()))
            } else {
                Ok(())
            }
        };
        libc::close(fd);
        result
    }
}

/// Whether a listener of this process's own on 127.0.0.1 answers it.
fn loopback_works() -> Result<(), String> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|e| format!("bind 127.0.0.1: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let server = std::thread::spawn(move || {
        if let Ok((mut s, _)) = listener.accept() {
            let _ = s.write_all(b"ok");
        }
    });
    let mut stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).map_err(|e| format!("connect {addr}: {e}"))?;
    let _ = stream.set_read_timeout(Some(CONNECT_TIMEOUT));
    let mut buf = [0u8; 2];
    stream.read_exact(&mut buf).map_err(|e| format!("read from {addr}: {e}"))?;
    let _ = server.join();
    (&buf == b"ok").then_some(()).ok_or_else(|| "loopback answered something else".into())
}

fn refused(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::ConnectionRefused
        || matches!(e.raw_os_error(), Some(libc::ENETUNREACH) | Some(libc::EHOSTUNREACH))
}

/// Tries the control endpoint at 127.0.0.1:`port`.
pub fn reach(port: u16, nonce: &str) -> Reach {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
        Ok(s) => s,
        Err(e) if refused(&e) => return Reach::Refused(e.to_string()),
        Err(e) => return Reach::Undetermined(format!("connect {addr}: {e}")),
    };
    let _ = stream.set_read_timeout(Some(CONNECT_TIMEOUT));
    let mut answer = Vec::new();
    let _ = (&mut stream).take(256).read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    if text.trim_end() == answer_line(nonce) {
        Reach::Answered
    } else {
        Reach::Connected(format!("{addr} answered {:?}, not the control endpoint's line", text.trim_end()))
    }
}

/// Everything the probe sees from here. The control endpoint is tried
/// before the probe's own listener exists, so that listener can never be
/// mistaken for the endpoint.
pub fn observe(port: u16, nonce: &str) -> ProbeReport {
    let (interfaces, interfaces_error) = match interfaces() {
        Ok(n) => (n, None),
        Err(e) => (Vec::new(), Some(e)),
    };
    let up = loopback_up();
    let control = reach(port, nonce);
    let loopback = match up.and_then(|()| loopback_works()) {
        Ok(()) => Tried { ok: true, detail: "lo is up and a listener on 127.0.0.1 answered".into() },
        Err(e) => Tried { ok: false, detail: e },
    };
    ProbeReport {
        format: REPORT_FORMAT.into(),
        version: REPORT_VERSION,
        nonce: nonce.into(),
        interfaces,
        interfaces_error,
        control,
        loopback,
        command: "none".into(),
    }
}

/// What the probe run without isolation must show for a refusal under the
/// mechanism to mean anything: its own report, the endpoint answering it.
pub fn judge_outside(r: &ProbeReport, control: &str) -> Result<(), String> {
    match &r.control {
        Reach::Answered => Ok(()),
        other => Err(format!(
            "the control endpoint {control} did not answer the same probe without isolation ({}), so a refusal under it would prove nothing",
            other.describe()
        )),
    }
}

/// What a report from under `mechanism` proves, on its own: for
/// `unshare -rn`, `lo` the only interface, the control endpoint refused,
/// loopback working; for the environment, `lo` the only interface and
/// loopback (the endpoint included) working.
pub fn judge_inside(mechanism: Mechanism, r: &ProbeReport, control: &str) -> (Verdict, String) {
    if let Some(e) = &r.interfaces_error {
        return (Verdict::Inconclusive, format!("the probe could not read its interfaces: {e}"));
    }
    if r.interfaces.iter().any(|n| n != "lo") {
        return (
            Verdict::NotEnforced,
            format!("interfaces besides lo where the probe ran: {}", r.interfaces.join(", ")),
        );
    }
    if !only_loopback(&r.interfaces) {
        return (Verdict::Inconclusive, "the probe saw no interface at all, not even lo".into());
    }
    match (mechanism, &r.control) {
        (Mechanism::UnshareRn, Reach::Answered) => {
            return (Verdict::NotEnforced, format!("the control endpoint {control} answered the isolated probe"))
        }
        (Mechanism::UnshareRn, Reach::Connected(what)) => {
            return (Verdict::NotEnforced, format!("the isolated probe connected to {control}: {what}"))
        }
        (Mechanism::UnshareRn, Reach::Refused(_)) | (Mechanism::Environment, Reach::Answered) => {}
        (_, other) => {
            return (
                Verdict::Inconclusive,
                format!("the probe could not tell whether {control} is reachable: {other:?}"),
            )
        }
    }
    if !r.loopback.ok {
        return (
            Verdict::Unavailable,
            format!("the network is denied, but loopback does not work: {}", r.loopback.detail),
        );
    }
    let why = match mechanism {
        Mechanism::UnshareRn => format!(
            "unshare -rn: the isolated probe's own report says {control} refused it ({}), lo is its only interface and loopback works",
            match &r.control {
                Reach::Refused(e) => e.as_str(),
                _ => "",
            }
        ),
        Mechanism::Environment => {
            "the environment is the isolation: lo is its only interface and loopback works (no outside to compare with)"
                .into()
        }
    };
    (Verdict::Enforced, why)
}

/// Writes a report beside `path` and renames it into place.
pub fn write_report(path: &Path, report: &ProbeReport) -> Result<(), String> {
    let text = serde_json::to_vec(report).map_err(|e| e.to_string())?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, &text).map_err(|e| format!("{}: {e}", Path::new(&tmp).display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Reads a report and checks that it is this proof's (format, version, nonce).
pub fn read_report(path: &Path, nonce: &str) -> Result<ProbeReport, String> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| format!("no report ({e})"))?;
    if !meta.is_file() || meta.len() > 1 << 20 {
        return Err("the report is not a regular file of at most 1 MiB".into());
    }
    let bytes = std::fs::read(path).map_err(|e| format!("the report does not read: {e}"))?;
    let report: ProbeReport =
        serde_json::from_slice(&bytes).map_err(|e| format!("the report is not a probe report: {e}"))?;
    if report.format != REPORT_FORMAT || report.version != REPORT_VERSION {
        return Err(format!(
            "the report is {} version {}, not {REPORT_FORMAT} {REPORT_VERSION}",
            report.format, report.version
        ));
    }
    if report.nonce != nonce {
        return Err(format!("the report carries nonce {:?}, not this proof's: it is not this probe's", report.nonce));
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(interfaces: &[&str], control: Reach, loopback: bool) -> ProbeReport {
        ProbeReport {
            format: REPORT_FORMAT.into(),
            version: REPORT_VERSION,
            nonce: "n".into(),
            interfaces: interfaces.iter().map(|s| s.to_string()).collect(),
            interfaces_error: None,
            control,
            loopback: Tried { ok: loopback, detail: String::new() },
            command: "none".into(),
        }
    }

    fn refused() -> Reach {
        Reach::Refused("Connection refused".into())
    }

    #[test]
    fn only_a_refusal_with_only_lo_and_loopback_is_enforced() {
        let u = Mechanism::UnshareRn;
        let c = "127.0.0.1:1";
        assert_eq!(judge_inside(u, &report(&["lo"], refused(), true), c).0, Verdict::Enforced);
        // Each condition broken on its own.
        assert_eq!(judge_inside(u, &report(&["lo", "eth0"], refused(), true), c).0, Verdict::NotEnforced);
        assert_eq!(judge_inside(u, &report(&["lo"], Reach::Answered, true), c).0, Verdict::NotEnforced);
        assert_eq!(judge_inside(u, &report(&["lo"], Reach::Connected("x".into()), true), c).0, Verdict::NotEnforced);
        assert_eq!(
            judge_inside(u, &report(&["lo"], Reach::Undetermined("t".into()), true), c).0,
            Verdict::Inconclusive
        );
        assert_eq!(judge_inside(u, &report(&[], refused(), true), c).0, Verdict::Inconclusive);
        assert_eq!(judge_inside(u, &report(&["lo"], refused(), false), c).0, Verdict::Unavailable);
        let mut unread = report(&["lo"], refused(), true);
        unread.interfaces_error = Some("gone".into());
        assert_eq!(judge_inside(u, &unread, c).0, Verdict::Inconclusive);
    }

    #[test]
    fn outside_only_an_answer_from_the_endpoint_counts() {
        let c = "127.0.0.1:1";
        assert!(judge_outside(&report(&["lo", "eth0"], Reach::Answered, true), c).is_ok());
        for other in [refused(), Reach::Connected("x".into()), Reach::Undetermined("t".into())] {
            let why = judge_outside(&report(&["lo", "eth0"], other.clone(), true), c).unwrap_err();
            assert!(why.contains("did not answer"), "{other:?}: {why}");
        }
    }

    #[test]
    fn the_environment_is_enforced_only_with_only_lo() {
        let e = Mechanism::Environment;
        let c = "127.0.0.1:1";
        assert_eq!(judge_inside(e, &report(&["lo"], Reach::Answered, true), c).0, Verdict::Enforced);
        assert_eq!(judge_inside(e, &report(&["lo", "eth0"], Reach::Answered, true), c).0, Verdict::NotEnforced);
        assert_eq!(judge_inside(e, &report(&["lo"], refused(), true), c).0, Verdict::Inconclusive);
    }

    #[test]
    fn a_report_is_read_back_only_with_its_nonce() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        write_report(&path, &report(&["lo"], refused(), true)).unwrap();
        assert_eq!(read_report(&path, "n").unwrap().control, refused());
        assert!(read_report(&path, "other").unwrap_err().contains("not this probe's"));
        std::fs::write(&path, b"refused").unwrap();
        assert!(read_report(&path, "n").is_err(), "a word is not a report");
        assert!(read_report(&dir.path().join("absent"), "n").unwrap_err().contains("no report"));
    }

    #[test]
    fn here_the_probe_sees_lo_and_a_closed_port_is_refused() {
        let names = interfaces().unwrap();
        assert!(names.iter().any(|n| n == "lo"), "{names:?}");
        loopback_works().unwrap();
        let free = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap().local_addr().unwrap().port();
        assert!(matches!(reach(free, "n"), Reach::Refused(_)));
        let control = crate::control::Control::start("n").unwrap();
        assert_eq!(reach(control.port(), "n"), Reach::Answered);
        assert!(matches!(reach(control.port(), "m"), Reach::Connected(_)), "another nonce is not this endpoint");
    }
}
