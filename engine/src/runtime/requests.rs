//! Requests to a running job from outside its process: take a savepoint,
//! or stop.
//!
//! A request is a small JSON file put durably into `_jobs/<job>/requests/`
//! (`<id>.request`). The live run's coordinator looks there between frames,
//! takes each request by renaming it (`<id>.taken`, so it is acted on once),
//! acts on it, and answers with `<id>.result`. A savepoint request triggers a
//! checkpoint whose COMPLETED marker says `savepoint` and whose snapshots the
//! run never prunes; for the protocol it is an ordinary checkpoint (the job
//! runs on). A stop request raises the run's stop signal: the source ends its
//! input at its next read, and the job stops with a savepoint, state kept.
//!
//! Nothing here decides anything about the protocol; the coordinator does.
//! Readers are bounded and refuse unknown formats and newer versions.

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::checkpoint::backend::read_dir_names;
use crate::checkpoint::durable::{create_dir_durably, write_durably};
use crate::checkpoint::fence::{live_owner, FenceError};
use crate::checkpoint::CheckpointLayout;

pub const REQUESTS_DIR: &str = "requests";
pub const REQUEST_FORMAT: &str = "clink-job-request";
pub const RESULT_FORMAT: &str = "clink-job-request-result";
pub const VERSION: u64 = 1;
const MAX_REQUEST_BYTES: u64 = 64 * 1024;
/// How many requests one look takes at most (the rest wait for the next look).
const MAX_TAKEN_PER_LOOK: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestKind {
    Savepoint,
    Stop,
}

impl RequestKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RequestKind::Savepoint => "savepoint",
            RequestKind::Stop => "stop",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    pub format: String,
    pub version: u64,
    pub id: String,
    pub kind: RequestKind,
}

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The savepoint completed: its marker is durable.
    Completed,
    /// The savepoint's checkpoint failed or was discarded by a restart.
    Failed,
    /// The job stopped with a savepoint (a stop request).
    Stopped,
    /// The job ended otherwise before the request could be carried out.
    Ended,
    /// The request could not be carried out (the job was already ending).
    Refused,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestResult {
    pub format: String,
    pub version: u64,
    pub id: String,
    pub kind: RequestKind,
    pub outcome: Outcome,
    /// The savepoint's checkpoint (a savepoint request), or the last
    /// completed checkpoint when the job stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<u64>,
    pub reason: String,
}

impl RequestResult {
    pub fn new(request: &Request, outcome: Outcome, checkpoint: Option<u64>, reason: impl Into<String>) -> Self {
        RequestResult {
            format: RESULT_FORMAT.into(),
            version: VERSION,
            id: request.id.clone(),
            kind: request.kind,
            outcome,
            checkpoint,
            reason: reason.into(),
        }
    }
}

#[derive(Debug, Error)]
pub enum RequestError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path}: invalid: {reason}")]
    Invalid { path: PathBuf, reason: String },
    #[error("no live run of job {job} owns {dir}: a request needs a running job")]
    NotRunning { job: u64, dir: PathBuf },
    #[error("job {job}'s run ended without answering request {id}")]
    Unanswered { job: u64, id: String },
    #[error("no answer to request {id} within {seconds} s")]
    TimedOut { id: String, seconds: u64 },
    #[error(transparent)]
    Fence(#[from] FenceError),
}

fn requests_dir(layout: &CheckpointLayout) -> PathBuf {
    layout.jobs_dir().join(REQUESTS_DIR)
}

fn is_request_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// A request id unique on this machine: the requester's pid, the time, a counter.
fn new_id() -> String {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{}-{nanos}-{n}", std::process::id())
}

/// Puts a request for the live run of the job; refused when no run is live.
pub fn submit(layout: &CheckpointLayout, kind: RequestKind) -> Result<Request, RequestError> {
    if live_owner(layout)?.is_none() {
        return Err(RequestError::NotRunning { job: layout.job(), dir: layout.root().to_path_buf() });
    }
    let dir = requests_dir(layout);
    let io = |path: PathBuf| move |source| RequestError::Io { path, source };
    create_dir_durably(&dir).map_err(io(dir.clone()))?;
    let request = Request { format: REQUEST_FORMAT.into(), version: VERSION, id: new_id(), kind };
    let name = format!("{}.request", request.id);
    let bytes = serde_json::to_vec_pretty(&request)
        .map_err(|e| RequestError::Invalid { path: dir.join(&name), reason: e.to_string() })?;
    write_durably(&dir, &name, &bytes).map_err(io(dir.join(&name)))?;
    Ok(request)
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, RequestError> {
    let bytes = clink_basics::files::read_bounded(path, MAX_REQUEST_BYTES)
        .map_err(|source| RequestError::Io { path: path.to_path_buf(), source })?;
    serde_json::from_slice(&bytes)
        .map_err(|e| RequestError::Invalid { path: path.to_path_buf(), reason: e.to_string() })
}

/// Takes the requests waiting for the run (oldest name first), each renamed
/// so it is taken once. A file that is not a request of a known format is
/// set aside as `<name>.refused` and reported, never acted on.
pub fn take_waiting(layout: &CheckpointLayout) -> Result<Vec<Result<Request, RequestError>>, RequestError> {
    let dir = requests_dir(layout);
    let names = read_dir_names(&dir).map_err(|e| RequestError::Invalid { path: dir.clone(), reason: e.to_string() })?;
    let mut taken = Vec::new();
    for name in names.iter().filter(|n| n.ends_with(".request")).take(MAX_TAKEN_PER_LOOK) {
        let path = dir.join(name);
        let id = name.trim_end_matches(".request");
        let parsed = read_json::<Request>(&path).and_then(|r| {
            let invalid = |reason: String| RequestError::Invalid { path: path.clone(), reason };
            if r.format != REQUEST_FORMAT || r.version > VERSION {
                return Err(invalid(format!("format {:?} version {}", r.format, r.version)));
            }
            if r.id != id || !is_request_id(&r.id) {
                return Err(invalid(format!("names request {:?}; its file name says {id:?}", r.id)));
            }
            Ok(r)
        });
        let suffix = if parsed.is_ok() { "taken" } else { "refused" };
        let to = dir.join(format!("{id}.{suffix}"));
        std::fs::rename(&path, &to).map_err(|source| RequestError::Io { path: path.clone(), source })?;
        taken.push(parsed);
    }
    Ok(taken)
}

/// Answers a request durably.
pub fn answer(layout: &CheckpointLayout, result: &RequestResult) -> Result<(), RequestError> {
    let dir = requests_dir(layout);
    let name = format!("{}.result", result.id);
    let bytes = serde_json::to_vec_pretty(result)
        .map_err(|e| RequestError::Invalid { path: dir.join(&name), reason: e.to_string() })?;
    write_durably(&dir, &name, &bytes).map_err(|source| RequestError::Io { path: dir.join(&name), source })
}

/// The answer to a request, once there is one.
pub fn read_answer(layout: &CheckpointLayout, id: &str) -> Result<Option<RequestResult>, RequestError> {
    let path = requests_dir(layout).join(format!("{id}.result"));
    if !path.exists() {
        return Ok(None);
    }
    let result: RequestResult = read_json(&path)?;
    let invalid = |reason: String| RequestError::Invalid { path: path.clone(), reason };
    if result.format != RESULT_FORMAT || result.version > VERSION {
        return Err(invalid(format!("format {:?} version {}", result.format, result.version)));
    }
    if result.id != id {
        return Err(invalid(format!("answers request {:?}, not {id:?}", result.id)));
    }
    Ok(Some(result))
}

/// Waits for the answer to a request, at most `timeout`. A run that ends
/// without answering is reported as such, not waited for.
pub fn wait_answer(layout: &CheckpointLayout, id: &str, timeout: Duration) -> Result<RequestResult, RequestError> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(result) = read_answer(layout, id)? {
            return Ok(result);
        }
        if live_owner(layout)?.is_none() {
            // The run may have answered just before it let go of the lock.
            return read_answer(layout, id)?
                .ok_or_else(|| RequestError::Unanswered { job: layout.job(), id: id.to_string() });
        }
        if Instant::now() >= deadline {
            return Err(RequestError::TimedOut { id: id.to_string(), seconds: timeout.as_secs() });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until no live run owns the job's directory, at most `timeout`.
pub fn wait_until_ended(layout: &CheckpointLayout, timeout: Duration) -> Result<bool, RequestError> {
    let deadline = Instant::now() + timeout;
    while live_owner(layout)?.is_some() {
        if Instant::now() >= deadline {
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::fence::acquire;

    #[test]
    fn a_request_needs_a_live_run_and_is_taken_once() {
        let dir = tempfile::tempdir().unwrap();
        let layout = CheckpointLayout::new(dir.path(), 1);
        assert!(matches!(submit(&layout, RequestKind::Savepoint), Err(RequestError::NotRunning { .. })));
        let _run = acquire(&layout).unwrap();
        let request = submit(&layout, RequestKind::Savepoint).unwrap();
        let taken = take_waiting(&layout).unwrap();
        assert_eq!(taken.len(), 1);
        assert_eq!(taken[0].as_ref().unwrap(), &request);
        assert!(take_waiting(&layout).unwrap().is_empty(), "taken once");
        assert_eq!(read_answer(&layout, &request.id).unwrap(), None);
        let result = RequestResult::new(&request, Outcome::Completed, Some(4), "");
        answer(&layout, &result).unwrap();
        assert_eq!(wait_answer(&layout, &request.id, Duration::from_secs(1)).unwrap(), result);
    }

    #[test]
    fn a_hostile_request_file_is_set_aside_not_acted_on() {
        let dir = tempfile::tempdir().unwrap();
        let layout = CheckpointLayout::new(dir.path(), 1);
        let requests = requests_dir(&layout);
        std::fs::create_dir_all(&requests).unwrap();
        std::fs::write(
            requests.join("x.request"),
            br#"{"format":"clink-job-request","version":9,"id":"x","kind":"stop"}"#,
        )
        .unwrap();
        std::fs::write(
            requests.join("y.request"),
            br#"{"format":"clink-job-request","version":1,"id":"z","kind":"stop"}"#,
        )
        .unwrap();
        std::fs::write(requests.join("w.request"), b"not json").unwrap();
        let taken = take_waiting(&layout).unwrap();
        assert_eq!(taken.len(), 3);
        assert!(taken.iter().all(Result::is_err), "{taken:?}");
        assert!(requests.join("x.refused").exists());
    }

    #[test]
    fn waiting_on_a_run_that_is_gone_does_not_hang() {
        let dir = tempfile::tempdir().unwrap();
        let layout = CheckpointLayout::new(dir.path(), 1);
        let started = Instant::now();
        let err = wait_answer(&layout, "nobody", Duration::from_secs(30)).unwrap_err();
        assert!(matches!(err, RequestError::Unanswered { .. }), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
