//! An orphan transaction: one a dead (or lost) incarnation of a sink left
//! open under its transactional id. Before a reopening sink runs
//! init_transactions (which supersedes the orphan, after which no request
//! reports how it ended), it may describe the orphan (DescribeTransactions)
//! and end it itself with an abort under the orphan's own producer id and
//! epoch (EndTxn). librdkafka offers neither, so they are sent here with
//! [`super::wire`].
//!
//! This module reports what the broker answered, and what the broker does
//! not implement, as data ([`Settlement`]); the sink decides what a committed
//! or aborted orphan means for its receipts. It never fences: that is
//! [`super::TxnProducer::open`].

use std::time::{Duration, Instant};

use serde::Serialize;

use super::wire::{self, api, code, ApiRange, Connection, WireError};
use super::{check_transactional_id, site, ProducerIdentity, TxnError};

/// The APIs one broker implements, as its ApiVersions answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerApis {
    pub address: String,
    pub apis: Vec<ApiRange>,
}

impl BrokerApis {
    pub fn range(&self, key: i16) -> Option<ApiRange> {
        self.apis.iter().copied().find(|a| a.key == key)
    }

    /// The highest version of `key` within `min..=max` the broker speaks.
    pub fn version_within(&self, key: i16, min: i16, max: i16) -> Option<i16> {
        let r = self.range(key)?;
        let v = r.max.min(max);
        (v >= r.min.max(min)).then_some(v)
    }
}

/// A transaction's state, as the coordinator names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TxnState {
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
    Dead,
    PrepareEpochFence,
    Other(String),
}

impl TxnState {
    pub fn parse(name: &str) -> TxnState {
        match name {
            "Empty" => TxnState::Empty,
            "Ongoing" => TxnState::Ongoing,
            "PrepareCommit" => TxnState::PrepareCommit,
            "PrepareAbort" => TxnState::PrepareAbort,
            "CompleteCommit" => TxnState::CompleteCommit,
            "CompleteAbort" => TxnState::CompleteAbort,
            "Dead" => TxnState::Dead,
            "PrepareEpochFence" => TxnState::PrepareEpochFence,
            other => TxnState::Other(other.to_string()),
        }
    }
}

/// What DescribeTransactions reported for one transactional id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Described {
    pub state: TxnState,
    pub identity: ProducerIdentity,
    pub timeout_ms: i32,
    pub start_time_ms: i64,
    pub partitions: Vec<(String, Vec<i32>)>,
}

/// The broker's answer to an abort under the orphan's identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AbortAnswer {
    /// The broker accepted the abort (or the transaction was already aborted).
    Aborted,
    /// Nothing under that identity is open: committed, or never begun
    /// (INVALID_TXN_STATE). Only a describe tells which.
    NotOngoing,
    /// A later epoch of the id exists (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH).
    Superseded,
    /// The coordinator knows no such producer (UNKNOWN_PRODUCER_ID,
    /// INVALID_PRODUCER_ID_MAPPING): expired, or never this id's.
    UnknownProducer,
}

/// How an orphan ended, as far as the broker could say.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum Settlement {
    /// The broker reports the orphan committed (its own identity, CompleteCommit).
    Committed { described: Described },
    /// The orphan is aborted: by this call's abort, or before it.
    Aborted { by_this_call: bool },
    /// A later epoch of the id holds it (the abort answered PRODUCER_FENCED
    /// or INVALID_PRODUCER_EPOCH): the orphan can no longer commit, and its
    /// own record is gone. The coordinator bumps the epoch when it aborts a
    /// transaction past its timeout, and an init bumps it to fence. Whether
    /// the orphan committed before the bump, the broker cannot say any more;
    /// what the caller knows (a receipt written before any successor began)
    /// must decide that.
    Superseded { described: Option<Described> },
    /// The broker cannot say how it ended: `why` names what it lacks or answered.
    Undetermined { why: String },
}

/// The evidence behind a settlement: each request and its answer, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Settled {
    pub settlement: Settlement,
    pub steps: Vec<String>,
}

struct Coordinated {
    conn: Connection,
    apis: BrokerApis,
}

fn wire_error(bootstrap: &str, id: &str, what: &str, e: WireError, sent_decides: bool) -> TxnError {
    let at = site(bootstrap, id, what);
    match e {
        WireError::Connect(message) => TxnError::Unreachable { at, message },
        WireError::Lost(message) if sent_decides => TxnError::InDoubt { at, message },
        WireError::Lost(message) => TxnError::Unreachable { at, message },
        WireError::Malformed(message) => TxnError::Malformed { at, message },
    }
}

/// What the broker at `address` implements (ApiVersions v0).
pub fn broker_apis(address: &str, timeout: Duration) -> Result<BrokerApis, TxnError> {
    let mut conn = Connection::open(address, timeout).map_err(|e| wire_error(address, "", "ApiVersions", e, false))?;
    let apis = wire::api_versions(&mut conn).map_err(|e| wire_error(address, "", "ApiVersions", e, false))?;
    Ok(BrokerApis { address: address.to_string(), apis })
}

fn retriable_coordinator_error(error: i16) -> bool {
    matches!(error, code::COORDINATOR_LOAD_IN_PROGRESS | code::COORDINATOR_NOT_AVAILABLE | code::NOT_COORDINATOR)
}

/// Connects to the transaction coordinator of `id`, by FindCoordinator at the bootstrap broker.
fn coordinator(bootstrap: &str, id: &str, timeout: Duration) -> Result<Coordinated, TxnError> {
    check_transactional_id(id)?;
    let deadline = Instant::now() + timeout;
    let first = bootstrap.split(',').next().unwrap_or(bootstrap).trim();
    let at_bootstrap = broker_apis(first, timeout)?;
    let Some(version) = at_bootstrap.version_within(api::FIND_COORDINATOR, 1, 2) else {
        return Err(TxnError::Unsupported {
            at: site(bootstrap, id, "finding the transaction coordinator"),
            api: "FindCoordinator v1..2",
            message: format!("the broker offers {:?}", at_bootstrap.range(api::FIND_COORDINATOR)),
        });
    };
    loop {
        let mut conn =
            Connection::open(first, timeout).map_err(|e| wire_error(bootstrap, id, "FindCoordinator", e, false))?;
        let mut body = Vec::new();
        wire::put_string(&mut body, id);
        body.push(1);
        let answer = conn
            .call(api::FIND_COORDINATOR, version, false, &body)
            .map_err(|e| wire_error(bootstrap, id, "FindCoordinator", e, false))?;
        let found = wire::decode_find_coordinator(&answer)
            .map_err(|e| wire_error(bootstrap, id, "FindCoordinator", e, false))?;
        if found.error == code::NONE {
            let mut conn = Connection::open(&found.address, timeout)
                .map_err(|e| wire_error(bootstrap, id, "coordinator", e, false))?;
            let apis = wire::api_versions(&mut conn).map_err(|e| wire_error(bootstrap, id, "ApiVersions", e, false))?;
            return Ok(Coordinated { conn, apis: BrokerApis { address: found.address, apis } });
        }
        if !retriable_coordinator_error(found.error) || Instant::now() >= deadline {
            return Err(TxnError::Refused {
                at: site(bootstrap, id, "FindCoordinator"),
                code: found.error.to_string(),
                message: found.message.unwrap_or_default(),
                abortable: false,
            });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The orphan's state, by DescribeTransactions at its coordinator; `None`
/// when the coordinator knows no such transactional id.
pub fn describe(bootstrap: &str, id: &str, timeout: Duration) -> Result<Option<Described>, TxnError> {
    let mut c = coordinator(bootstrap, id, timeout)?;
    describe_at(&mut c, bootstrap, id)
}

fn describe_at(c: &mut Coordinated, bootstrap: &str, id: &str) -> Result<Option<Described>, TxnError> {
    if c.apis.version_within(api::DESCRIBE_TRANSACTIONS, 0, 0).is_none() {
        return Err(TxnError::Unsupported {
            at: site(bootstrap, id, "describing the transaction"),
            api: "DescribeTransactions",
            message: format!("the coordinator at {} does not advertise it in ApiVersions", c.apis.address),
        });
    }
    let answer = wire::describe_transactions(&mut c.conn, id)
        .map_err(|e| wire_error(bootstrap, id, "DescribeTransactions", e, false))?;
    let Some(one) = answer.into_iter().find(|d| d.transactional_id == id) else {
        return Err(TxnError::Malformed {
            at: site(bootstrap, id, "DescribeTransactions"),
            message: format!("the answer does not name {id:?}"),
        });
    };
    match one.error {
        code::NONE => Ok(Some(Described {
            state: TxnState::parse(&one.state),
            identity: ProducerIdentity { producer_id: one.producer_id, epoch: one.producer_epoch },
            timeout_ms: one.timeout_ms,
            start_time_ms: one.start_time_ms,
            partitions: one.partitions,
        })),
        code::TRANSACTIONAL_ID_NOT_FOUND => Ok(None),
        other => Err(TxnError::Refused {
            at: site(bootstrap, id, "DescribeTransactions"),
            code: other.to_string(),
            message: String::new(),
            abortable: false,
        }),
    }
}

/// Sends EndTxn(abort) under the orphan's own identity, retrying while the
/// coordinator is busy with it (CONCURRENT_TRANSACTIONS) up to `timeout`.
pub fn abort_orphan(
    bootstrap: &str,
    id: &str,
    orphan: ProducerIdentity,
    timeout: Duration,
) -> Result<AbortAnswer, TxnError> {
    let mut c = coordinator(bootstrap, id, timeout)?;
    abort_at(&mut c, bootstrap, id, orphan, Instant::now() + timeout)
}

fn abort_at(
    c: &mut Coordinated,
    bootstrap: &str,
    id: &str,
    orphan: ProducerIdentity,
    deadline: Instant,
) -> Result<AbortAnswer, TxnError> {
    let version = end_txn_version(c, bootstrap, id, "aborting the orphan")?;
    loop {
        let error = wire::end_txn(&mut c.conn, version, id, orphan.producer_id, orphan.epoch, false)
            .map_err(|e| wire_error(bootstrap, id, "EndTxn(abort)", e, true))?;
        match error {
            code::NONE => return Ok(AbortAnswer::Aborted),
            code::INVALID_TXN_STATE => return Ok(AbortAnswer::NotOngoing),
            code::PRODUCER_FENCED | code::INVALID_PRODUCER_EPOCH => return Ok(AbortAnswer::Superseded),
            code::UNKNOWN_PRODUCER_ID | code::INVALID_PRODUCER_ID_MAPPING => return Ok(AbortAnswer::UnknownProducer),
            code::CONCURRENT_TRANSACTIONS | code::COORDINATOR_LOAD_IN_PROGRESS if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100));
            }
            other => {
                return Err(TxnError::Refused {
                    at: site(bootstrap, id, "EndTxn(abort)"),
                    code: other.to_string(),
                    message: "the coordinator refused the abort".into(),
                    abortable: false,
                })
            }
        }
    }
}

/// EndTxn (commit or abort) under any identity, and the coordinator's raw
/// error code: for the probe and the tests that ask whether the broker still
/// accepts an epoch a later producer should have fenced. A sink never
/// commits under another incarnation's identity.
pub fn end_txn_as(
    bootstrap: &str,
    id: &str,
    identity: ProducerIdentity,
    commit: bool,
    timeout: Duration,
) -> Result<i16, TxnError> {
    let mut c = coordinator(bootstrap, id, timeout)?;
    let what = if commit { "EndTxn(commit)" } else { "EndTxn(abort)" };
    let version = end_txn_version(&c, bootstrap, id, what)?;
    wire::end_txn(&mut c.conn, version, id, identity.producer_id, identity.epoch, commit)
        .map_err(|e| wire_error(bootstrap, id, what, e, true))
}

/// The highest EndTxn version both the coordinator and this client speak.
fn end_txn_version(c: &Coordinated, bootstrap: &str, id: &str, what: &str) -> Result<i16, TxnError> {
    let (min, max) = wire::END_TXN_VERSIONS;
    c.apis.version_within(api::END_TXN, min, max).ok_or_else(|| TxnError::Unsupported {
        at: site(bootstrap, id, what),
        api: "EndTxn v0..4",
        message: format!("the coordinator at {} offers {:?}", c.apis.address, c.apis.range(api::END_TXN)),
    })
}

/// Settles an orphan before the reopening sink's init: describes it where
/// the broker can, aborts it under its own identity unless it is already
/// decided, and where the abort is refused describes again, so the outcome
/// is decided and, as far as the broker can tell, known.
pub fn settle(bootstrap: &str, id: &str, orphan: ProducerIdentity, timeout: Duration) -> Result<Settled, TxnError> {
    let deadline = Instant::now() + timeout;
    let mut c = coordinator(bootstrap, id, timeout)?;
    let mut steps = vec![format!("coordinator {} for {id:?}", c.apis.address)];
    let before = describe_step(&mut c, bootstrap, id, &mut steps)?;
    if let Some(s) = decided(before.as_ref(), orphan) {
        return Ok(Settled { settlement: s, steps });
    }
    let answer = abort_at(&mut c, bootstrap, id, orphan, deadline)?;
    steps.push(format!("EndTxn(abort) as {}/{}: {answer:?}", orphan.producer_id, orphan.epoch));
    if answer == AbortAnswer::Aborted {
        return Ok(Settled { settlement: Settlement::Aborted { by_this_call: true }, steps });
    }
    let after = describe_step(&mut c, bootstrap, id, &mut steps)?;
    if answer == AbortAnswer::Superseded {
        if let Some(later) = superseding(after.as_ref(), orphan) {
            return Ok(Settled { settlement: Settlement::Superseded { described: later }, steps });
        }
    }
    let settlement = decided(after.as_ref(), orphan).unwrap_or_else(|| Settlement::Undetermined {
        why: match after {
            Seen::Unsupported => format!("the abort answered {answer:?} and the broker cannot describe transactions"),
            Seen::Known(d) => format!("the abort answered {answer:?} and the broker describes {d:?}"),
        },
    });
    Ok(Settled { settlement, steps })
}

enum Seen {
    Unsupported,
    Known(Option<Described>),
}

impl Seen {
    fn as_ref(&self) -> Option<&Option<Described>> {
        match self {
            Seen::Unsupported => None,
            Seen::Known(d) => Some(d),
        }
    }
}

fn describe_step(c: &mut Coordinated, bootstrap: &str, id: &str, steps: &mut Vec<String>) -> Result<Seen, TxnError> {
    match describe_at(c, bootstrap, id) {
        Ok(d) => {
            steps.push(format!("DescribeTransactions: {d:?}"));
            Ok(Seen::Known(d))
        }
        Err(TxnError::Unsupported { message, .. }) => {
            steps.push(format!("DescribeTransactions: unsupported ({message})"));
            Ok(Seen::Unsupported)
        }
        Err(e) => Err(e),
    }
}

/// After an abort refused as superseded: the description that agrees (the
/// same producer id at a later epoch, or the id no longer known), or `None`
/// when the description contradicts the refusal.
fn superseding(described: Option<&Option<Described>>, orphan: ProducerIdentity) -> Option<Option<Described>> {
    match described {
        // The broker cannot describe: the refusal alone says a later epoch exists.
        None => Some(None),
        Some(None) => Some(None),
        Some(Some(d)) if d.identity.producer_id != orphan.producer_id || d.identity.epoch > orphan.epoch => {
            Some(Some(d.clone()))
        }
        Some(Some(_)) => None,
    }
}

/// A description that already decides the orphan: its own identity's
/// commit or abort completed, or written as the coordinator's decision
/// (Prepare*, which the coordinator completes). A later epoch's record says
/// nothing of it: a successor's own transaction may have completed there.
fn decided(described: Option<&Option<Described>>, orphan: ProducerIdentity) -> Option<Settlement> {
    let d = described?.as_ref()?;
    if d.identity != orphan {
        return None;
    }
    match d.state {
        TxnState::CompleteCommit | TxnState::PrepareCommit => Some(Settlement::Committed { described: d.clone() }),
        TxnState::CompleteAbort | TxnState::PrepareAbort => Some(Settlement::Aborted { by_this_call: false }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn described(state: TxnState, producer_id: i64, epoch: i16) -> Option<Described> {
        Some(Described {
            state,
            identity: ProducerIdentity { producer_id, epoch },
            timeout_ms: 1,
            start_time_ms: 0,
            partitions: vec![],
        })
    }

    #[test]
    fn only_the_orphans_own_completed_outcome_decides_it() {
        let me = ProducerIdentity { producer_id: 7, epoch: 3 };
        let commit = described(TxnState::CompleteCommit, 7, 3);
        assert!(matches!(decided(Some(&commit), me), Some(Settlement::Committed { .. })));
        let abort = described(TxnState::CompleteAbort, 7, 3);
        assert_eq!(decided(Some(&abort), me), Some(Settlement::Aborted { by_this_call: false }));
        let deciding = described(TxnState::PrepareCommit, 7, 3);
        assert!(matches!(decided(Some(&deciding), me), Some(Settlement::Committed { .. })));
        // A later epoch's commit, an ongoing one, nothing known, or no describe at all: not decided.
        for other in [described(TxnState::CompleteCommit, 7, 4), described(TxnState::Ongoing, 7, 3), None] {
            assert_eq!(decided(Some(&other), me), None, "{other:?}");
        }
        assert_eq!(decided(None, me), None);
    }

    #[test]
    fn only_a_later_identity_agrees_with_a_superseded_abort() {
        let me = ProducerIdentity { producer_id: 7, epoch: 3 };
        // The coordinator aborted an expired transaction with a bump: 7/4.
        let bumped = described(TxnState::CompleteAbort, 7, 4);
        assert_eq!(superseding(Some(&bumped), me), Some(bumped.clone()));
        let other_id = described(TxnState::Empty, 9, 0);
        assert_eq!(superseding(Some(&other_id), me), Some(other_id.clone()));
        // Its own epoch still there contradicts a refusal as superseded.
        assert_eq!(superseding(Some(&described(TxnState::Ongoing, 7, 3)), me), None);
        assert_eq!(superseding(Some(&described(TxnState::CompleteCommit, 7, 2)), me), None);
    }

    #[test]
    fn versions_are_chosen_within_both_ranges() {
        let apis = BrokerApis { address: "x".into(), apis: vec![ApiRange { key: api::END_TXN, min: 0, max: 5 }] };
        assert_eq!(apis.version_within(api::END_TXN, 0, 3), Some(3));
        assert_eq!(apis.version_within(api::DESCRIBE_TRANSACTIONS, 0, 0), None);
        let newer = BrokerApis { address: "x".into(), apis: vec![ApiRange { key: api::END_TXN, min: 4, max: 5 }] };
        assert_eq!(newer.version_within(api::END_TXN, 0, 3), None);
    }
}
