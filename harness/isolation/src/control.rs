//! The control endpoint: a TCP listener on 127.0.0.1 at a port the system
//! picks, outside any namespace a proof makes, answering every connection
//! with one line that carries the proof's nonce. The probe knows it reached
//! this endpoint, and not something else on that port, by the nonce.
//!
//! It listens on loopback only and connects to nothing but itself (to wake
//! its own thread when it stops).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The line the endpoint answers with.
pub fn answer_line(nonce: &str) -> String {
    format!("clink-isolation-control {nonce}")
}

/// A fresh nonce: 16 bytes of /dev/urandom in hex, or (where it cannot be
/// read) the time and process id, which still tells one proof from another.
pub fn nonce() -> String {
    let mut bytes = [0u8; 16];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if read.is_err() {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        bytes[..8].copy_from_slice(&(now.as_nanos() as u64).to_le_bytes());
        bytes[8..12].copy_from_slice(&std::process::id().to_le_bytes());
    }
    clink_basics::digest::hex(&bytes)
}

/// A running control endpoint; stopped when dropped.
pub struct Control {
    port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Control {
    pub fn start(nonce: &str) -> std::io::Result<Control> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let port = listener.local_addr()?.port();
        let stop = Arc::new(AtomicBool::new(false));
        let answer = format!("{}\n", answer_line(nonce));
        let stopping = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopping.load(Ordering::SeqCst) {
                    break;
                }
                if let Ok(mut s) = stream {
                    let _ = s.write_all(answer.as_bytes());
                }
            }
        });
        Ok(Control { port, stop, thread: Some(thread) })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for Control {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accepting thread so it sees the flag.
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        let _ = TcpStream::connect_timeout(&addr, Duration::from_secs(1));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_answers_with_its_nonce_and_stops() {
        let n = nonce();
        assert_eq!(n.len(), 32);
        assert_ne!(n, nonce(), "two proofs get two nonces");
        let control = Control::start(&n).unwrap();
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, control.port()));
        let mut s = TcpStream::connect(addr).unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        assert_eq!(text.trim_end(), answer_line(&n));
        drop(control);
        assert!(TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err(), "stopped means not listening");
    }
}
