//! ClickHouse 26 for the trials: `chdb_http.py` (chdb-core's engine in a
//! Python process of ours, behind the part of ClickHouse's HTTP interface
//! the `clickhouse` crate uses, on 127.0.0.1) started from the venv
//! `gates/install-services` made, and its log of every statement it ran.
//! The process is ours: it is killed by its id when the handle drops, and it
//! exits by itself when this process is gone (its standard input closes).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value as Json;

/// The chdb-core version `gates/install-services` pins.
pub const CHDB_VERSION: &str = "26.9.0";

/// The venv's Python, once `gates/install-services` finished installing it.
pub fn python() -> Result<PathBuf, String> {
    let prefix = std::env::var_os("CLINK_DEPS_PREFIX")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".clink-deps")))
        .ok_or("neither CLINK_DEPS_PREFIX nor HOME is set")?;
    let root = prefix.join(format!("chdb-core-{CHDB_VERSION}"));
    let python = root.join("bin/python");
    if !root.join(".clink-installed").is_file() || !python.is_file() {
        return Err(format!("no chdb-core {CHDB_VERSION} at {} (run gates/install-services)", root.display()));
    }
    Ok(python)
}

/// One running `chdb_http.py`.
pub struct Chdb {
    child: Child,
    _stdin: ChildStdin,
    /// `127.0.0.1:PORT`.
    pub address: String,
    /// The engine's `version()`.
    pub version: String,
    /// When it answered, from its start (the import and the first query).
    pub started_in: Duration,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Chdb {
    /// Starts one, with its data and log in a new directory under `scratch`.
    pub fn start(scratch: &Path) -> Result<Chdb, String> {
        let python = python()?;
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/chdb_http.py");
        let dir = tempfile::tempdir_in(scratch).map_err(|e| format!("a directory for chdb: {e}"))?;
        let log = dir.path().join("statements.jsonl");
        let began = Instant::now();
        let mut child = Command::new(&python)
            .arg(&script)
            .arg("--data")
            .arg(dir.path().join("data"))
            .arg("--log")
            .arg(&log)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("{} {}: {e}", python.display(), script.display()))?;
        let stdin = child.stdin.take().ok_or("chdb_http.py has no stdin")?;
        let stdout = child.stdout.take().ok_or("chdb_http.py has no stdout")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(line) => line,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err("chdb_http.py did not say where it listens within 120 s".into());
            }
        };
        let mut words = line.split_whitespace();
        let (Some("listening"), Some(address), Some(version)) = (words.next(), words.next(), words.next()) else {
            let _ = child.kill();
            let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
            return Err(format!("chdb_http.py did not start ({status}): it said {line:?}"));
        };
        Ok(Chdb {
            address: address.to_string(),
            version: version.to_string(),
            started_in: began.elapsed(),
            child,
            _stdin: stdin,
            log,
            _dir: dir,
        })
    }

    /// Every statement it ran so far, in order: `statement`, `settings`
    /// (name and value pairs), `data_bytes`, `ok`, `error`, `ms`.
    pub fn statements(&self) -> Result<Vec<Json>, String> {
        let text = std::fs::read_to_string(&self.log).map_err(|e| format!("{}: {e}", self.log.display()))?;
        text.lines().map(|l| serde_json::from_str(l).map_err(|e| format!("{}: {e}: {l}", self.log.display()))).collect()
    }
}

impl Drop for Chdb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
