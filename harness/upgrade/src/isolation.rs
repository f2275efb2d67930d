//! Loopback-only isolation for every build process, proven before any build
//! runs.
//!
//! On Linux a network namespace is per process, so the command re-executes
//! itself once inside `unshare -rn` (a new user and network namespace) and
//! everything it starts shares that namespace. The proof: a control listener
//! on 127.0.0.1 outside the namespace must answer outside and be unreachable
//! inside, the namespace must have `lo` as its only interface (read from
//! /proc/net/dev, which is per namespace), and loopback must work inside
//! (`lo` is brought up first). Where the environment already has only `lo`
//! (a container started with --network none) there is no outside: that `lo`
//! is the only interface, and that loopback works, is checked instead.
//!
//! This module never attempts a connection to any address outside
//! 127.0.0.0/8.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::time::Duration;

/// Set in the re-executed command: the outside control listener's port.
pub const CONTROL_PORT_ENV: &str = "CLINK_UPGRADE_CONTROL_PORT";

/// What was proven about the network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Proof {
    Proven(String),
    /// Isolation is absent or leaky: the reason.
    NotIsolated(String),
    /// It could not be decided.
    Unavailable(String),
}

/// The network interfaces of this process's namespace.
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

/// Brings `lo` up in this namespace (a new one starts with it down).
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

/// Whether a listener on 127.0.0.1 answers a connection from this process.
fn loopback_works() -> Result<(), String> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|e| format!("bind 127.0.0.1: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let server = std::thread::spawn(move || {
        if let Ok((mut s, _)) = listener.accept() {
            let _ = s.write_all(b"ok");
        }
    });
    let mut stream =
        TcpStream::connect_timeout(&addr, Duration::from_secs(2)).map_err(|e| format!("connect {addr}: {e}"))?;
    let mut buf = [0u8; 2];
    stream.read_exact(&mut buf).map_err(|e| format!("read from {addr}: {e}"))?;
    let _ = server.join();
    (&buf == b"ok").then_some(()).ok_or_else(|| "loopback answered something else".into())
}

fn control_reachable(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_ok()
}

/// The proof from inside: `control_port` is the outside listener's port
/// when the command re-executed itself.
pub fn prove_here(control_port: Option<u16>) -> Proof {
    let names = match interfaces() {
        Ok(n) => n,
        Err(e) => return Proof::Unavailable(e),
    };
    if names.iter().any(|n| n != "lo") {
        return Proof::NotIsolated(format!("interfaces besides lo: {}", names.join(", ")));
    }
    if let Err(e) = loopback_up() {
        return Proof::Unavailable(format!("lo could not be brought up: {e}"));
    }
    if let Err(e) = loopback_works() {
        return Proof::Unavailable(format!("loopback does not work: {e}"));
    }
    match control_port {
        Some(port) if control_reachable(port) => {
            Proof::NotIsolated(format!("the control listener 127.0.0.1:{port} outside answered inside"))
        }
        Some(port) => Proof::Proven(format!(
            "unshare -rn: lo is the only interface, loopback works, and 127.0.0.1:{port} answered outside and not inside"
        )),
        None => Proof::Proven("the environment's only interface is lo, and loopback works".into()),
    }
}

/// Whether this process must re-execute itself to be isolated: it is not
/// already inside (no control port) and has interfaces besides lo.
pub fn needs_reexec() -> bool {
    std::env::var_os(CONTROL_PORT_ENV).is_none() && interfaces().map(|n| n.iter().any(|i| i != "lo")).unwrap_or(false)
}

/// The control port this process was given, when it was re-executed.
pub fn control_port() -> Option<u16> {
    std::env::var(CONTROL_PORT_ENV).ok().and_then(|p| p.parse().ok())
}

/// Re-executes the current command inside `unshare -rn` with a control
/// listener outside, and returns its exit code; `Err` when that cannot be
/// done (the caller goes on without isolation and says why). SIGINT and
/// SIGTERM to this process are passed on to the command inside.
pub fn reexec_isolated() -> Result<i32, String> {
    let status = Command::new("unshare").args(["-rn", "true"]).status();
    if !matches!(status, Ok(s) if s.success()) {
        return Err("unshare -rn cannot run here (no unshare, or user namespaces denied)".into());
    }
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|e| format!("control listener: {e}"))?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut s = stream;
            let _ = s.write_all(b"ok");
        }
    });
    if !control_reachable(port) {
        return Err(format!("the control listener 127.0.0.1:{port} did not answer even outside"));
    }
    let exe = std::env::current_exe().map_err(|e| format!("the command's own path: {e}"))?;
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    crate::runner::catch_interrupts();
    let mut child = Command::new("unshare")
        .arg("-rn")
        .arg(exe)
        .args(args)
        .env(CONTROL_PORT_ENV, port.to_string())
        .spawn()
        .map_err(|e| format!("unshare -rn: {e}"))?;
    let mut forwarded = false;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status.code().unwrap_or(3)),
            Ok(None) => {}
            Err(e) => return Err(format!("waiting for the isolated command: {e}")),
        }
        if crate::runner::interrupted() && !forwarded {
            // SAFETY: a plain kill(2) of our own child.
            unsafe {
                libc::kill(child.id() as libc::pid_t, libc::SIGINT);
            }
            forwarded = true;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interfaces_are_read_and_loopback_works_here() {
        let names = interfaces().unwrap();
        assert!(names.iter().any(|n| n == "lo"), "{names:?}");
        loopback_works().unwrap();
    }
}
