//! The coordinator's side of requests from outside the process
//! ([`crate::runtime::requests`]): it takes the waiting ones at most every
//! [`REQUEST_LOOK`], turns a savepoint into an ordinary checkpoint trigger
//! (its marker says `savepoint`) and a stop into the run's stop signal, and
//! answers every request it took, at the latest when the job ends. It never
//! decides a checkpoint: the protocol does.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::checkpoint::markers::CheckpointKind;
use crate::runtime::protocol::Step;
use crate::runtime::requests::{self, Request, RequestKind, RequestResult};
use crate::runtime::RunError;

use super::Coordinator;

/// How often the coordinator looks for requests from outside the process.
pub(super) const REQUEST_LOOK: Duration = Duration::from_millis(100);

/// The requests this run took: savepoints in flight by checkpoint, the
/// savepoints it completed (never pruned by it), and stops.
#[derive(Default)]
pub(super) struct RequestBook {
    pub(super) savepoints: BTreeMap<u64, Request>,
    pub(super) kept: BTreeSet<u64>,
    pub(super) stops: Vec<Request>,
    pub(super) last_look: Option<Instant>,
}

impl Coordinator {
    /// Answers every request the run took and has not answered: stops say
    /// how the job ended; savepoints not decided say the job ended first.
    pub(super) fn answer_at_end(&mut self, outcome: &str) {
        let last = self.protocol.progress().last_completed;
        for request in std::mem::take(&mut self.requests.stops) {
            let (answer, reason) = match outcome {
                "savepoint" => (requests::Outcome::Stopped, "the job stopped with a savepoint".to_string()),
                other => (requests::Outcome::Ended, format!("the job ended ({other}) before it could stop")),
            };
            self.answer(RequestResult::new(&request, answer, Some(last), reason));
        }
        for (checkpoint, request) in std::mem::take(&mut self.requests.savepoints) {
            let reason = format!("the job ended ({outcome}) before checkpoint {checkpoint} was decided");
            self.answer(RequestResult::new(&request, requests::Outcome::Ended, Some(checkpoint), reason));
        }
    }

    pub(super) fn answer(&self, result: RequestResult) {
        if let Err(e) = requests::answer(&self.layout, &result) {
            eprintln!("clink: job {}: cannot answer request {}: {e}", self.layout.job(), result.id);
        }
    }

    /// Takes the requests waiting for this run, at most every [`REQUEST_LOOK`].
    pub(super) fn look_at_requests(&mut self) -> Result<(), RunError> {
        if self.requests.last_look.is_some_and(|t| t.elapsed() < REQUEST_LOOK) {
            return Ok(());
        }
        self.requests.last_look = Some(Instant::now());
        let taken = match requests::take_waiting(&self.layout) {
            Ok(taken) => taken,
            Err(e) => {
                eprintln!("clink: job {}: cannot read requests: {e}", self.layout.job());
                return Ok(());
            }
        };
        for request in taken {
            let request = match request {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("clink: job {}: a request was refused: {e}", self.layout.job());
                    continue;
                }
            };
            match request.kind {
                RequestKind::Stop => {
                    self.options.env.stop.request();
                    self.requests.stops.push(request);
                }
                RequestKind::Savepoint if self.protocol.is_closing() => {
                    let reason = "the job is ending: its source has taken its last checkpoint";
                    self.answer(RequestResult::new(&request, requests::Outcome::Refused, None, reason));
                }
                RequestKind::Savepoint => {
                    // For the protocol an ordinary checkpoint; its marker says savepoint.
                    let steps = self.protocol.request(CheckpointKind::Periodic);
                    for step in &steps {
                        if let Step::Trigger { checkpoint, .. } = step {
                            self.requests.savepoints.insert(*checkpoint, request.clone());
                        }
                    }
                    self.take(steps)?;
                }
            }
        }
        Ok(())
    }
}
