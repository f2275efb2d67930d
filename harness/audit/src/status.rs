//! The state `clink-audit status` reports, and its exit code: the most
//! severe of `discrepancy` (exit 1), `stopped`, `incomplete`, `behind`,
//! `stale` (exit 3), `no-eligible-scope` (exit 5) and `healthy` (exit 0).
//!
//! It owns the rule from facts to state and nothing else. It never reads the
//! state directory, a clock or a process: the caller gathers the facts
//! ([`Facts`]) from the state directory alone and passes them in.
//!
//! Decisions a reader should know:
//! - Each state's condition is judged on its own, and the state is the most
//!   severe that holds ([`State::SEVERITY`]); a less severe condition never
//!   hides a more severe one, and several may hold at once
//!   ([`conditions`] lists them all).
//! - **Acknowledgement.** The issue fixes "status exit 1 until acknowledged,
//!   and still listed after", and the seed's table calls a discrepancy "a
//!   gap until acknowledged". So `discrepancy` holds while any listed
//!   discrepancy is unacknowledged; acknowledging one never removes it from
//!   the list, never lowers the state while another is unacknowledged, and
//!   never hides any other condition (an acknowledged discrepancy whose
//!   offsets no pass covers still leaves them a gap, [`crate::coverage`]).
//! - Never healthy before the current lineage has a verified audit: with
//!   something eligible and nothing of the current lineage verified, the
//!   state is `stale` at once (under `latest-only` too), however young the
//!   job's checkpoints are. A retired lineage's passes speak for nothing.

use clink_basics::exit::Exit;
use serde::{Deserialize, Serialize};

/// The exit code of `no-eligible-scope`: nothing is wrong, and nothing could
/// be audited.
pub const NO_ELIGIBLE_SCOPE_EXIT: u8 = 5;

/// The state `status` reports (`--json` field `state`).
///
/// Declared from most to least severe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum State {
    /// A listed discrepancy is not acknowledged.
    Discrepancy,
    /// The runner is not running, or has stopped starting audits.
    Stopped,
    /// An audit has not finished: its latest attempt is partial or an error,
    /// or it was started and has no result yet.
    Incomplete,
    /// More eligible checkpoints wait than the backlog threshold allows.
    Behind,
    /// The newest verified scope is older than the staleness limit, or
    /// nothing of the current lineage is verified yet.
    Stale,
    /// No completed checkpoint is eligible for audit.
    NoEligibleScope,
    /// None of the above.
    Healthy,
}

impl State {
    /// Every state, most severe first.
    pub const SEVERITY: [State; 7] = [
        State::Discrepancy,
        State::Stopped,
        State::Incomplete,
        State::Behind,
        State::Stale,
        State::NoEligibleScope,
        State::Healthy,
    ];

    /// The process exit code of `status` in this state.
    pub fn exit_code(self) -> u8 {
        match self {
            State::Discrepancy => Exit::Failed.code(),
            State::Stopped | State::Incomplete | State::Behind | State::Stale => Exit::NotEstablished.code(),
            State::NoEligibleScope => NO_ELIGIBLE_SCOPE_EXIT,
            State::Healthy => Exit::Passed.code(),
        }
    }

    /// The state's name (the same as its serde name).
    pub fn as_str(self) -> &'static str {
        match self {
            State::Discrepancy => "discrepancy",
            State::Stopped => "stopped",
            State::Incomplete => "incomplete",
            State::Behind => "behind",
            State::Stale => "stale",
            State::NoEligibleScope => "no-eligible-scope",
            State::Healthy => "healthy",
        }
    }

    /// 0 for the most severe, 6 for `healthy`.
    pub fn rank(self) -> usize {
        State::SEVERITY.iter().position(|s| *s == self).unwrap_or(State::SEVERITY.len())
    }

    /// The more severe of `self` and `other`.
    pub fn worst(self, other: State) -> State {
        if other.rank() < self.rank() {
            other
        } else {
            self
        }
    }
}

/// What status knows, gathered from the state directory alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    /// Listed discrepancies no operator has acknowledged.
    pub unacknowledged_discrepancies: usize,
    /// Listed discrepancies an operator has acknowledged (with a note). They
    /// stay listed; they do not make the state `discrepancy`.
    pub acknowledged_discrepancies: usize,
    /// The runner is stopped: no process holds the state directory's lock
    /// and no cycle ended within the interval the caller expects, or the
    /// runner has stopped starting audits (the disk budget would be passed).
    pub runner_stopped: bool,
    /// Audits not finished: the latest attempt partial or an error (a retry
    /// pending or the attempts spent), or a step started without its result.
    pub unfinished_audits: usize,
    /// Completed eligible checkpoints that no attempt has started yet.
    pub backlog: u64,
    /// `behind` when `backlog` is above this.
    pub backlog_threshold: u64,
    /// Seconds from the completion of the newest verified scope's checkpoint
    /// of the current lineage to now; `None` when none is verified.
    pub last_verified_age_s: Option<u64>,
    /// `stale` when that age is above this.
    pub stale_after_s: u64,
    /// At least one completed checkpoint is eligible (after `start_at` and
    /// selection), whatever its outcome.
    pub eligible_scope: bool,
}

/// Every state whose condition holds for `facts`, most severe first;
/// `[Healthy]` when none does.
pub fn conditions(facts: &Facts) -> Vec<State> {
    let stale = match facts.last_verified_age_s {
        Some(age) => age > facts.stale_after_s,
        None => facts.eligible_scope,
    };
    let held = [
        (State::Discrepancy, facts.unacknowledged_discrepancies > 0),
        (State::Stopped, facts.runner_stopped),
        (State::Incomplete, facts.unfinished_audits > 0),
        (State::Behind, facts.backlog > facts.backlog_threshold),
        (State::Stale, stale),
        (State::NoEligibleScope, !facts.eligible_scope),
    ];
    let states: Vec<State> = held.into_iter().filter(|(_, holds)| *holds).map(|(s, _)| s).collect();
    if states.is_empty() {
        return vec![State::Healthy];
    }
    states
}

/// The state for `facts`: the most severe condition that holds.
pub fn state(facts: &Facts) -> State {
    conditions(facts).into_iter().fold(State::Healthy, State::worst)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn healthy() -> Facts {
        Facts {
            unacknowledged_discrepancies: 0,
            acknowledged_discrepancies: 0,
            runner_stopped: false,
            unfinished_audits: 0,
            backlog: 1,
            backlog_threshold: 2,
            last_verified_age_s: Some(30),
            stale_after_s: 60,
            eligible_scope: true,
        }
    }

    /// `facts` with exactly the condition of `s` made to hold.
    fn with(mut facts: Facts, s: State) -> Facts {
        match s {
            State::Discrepancy => facts.unacknowledged_discrepancies = 1,
            State::Stopped => facts.runner_stopped = true,
            State::Incomplete => facts.unfinished_audits = 1,
            State::Behind => facts.backlog = 3,
            State::Stale => facts.last_verified_age_s = Some(61),
            State::NoEligibleScope => facts.eligible_scope = false,
            State::Healthy => {}
        }
        facts
    }

    #[test]
    fn serde_names_and_exit_codes() {
        let got: Vec<(String, u8)> =
            State::SEVERITY.iter().map(|s| (serde_json::to_string(s).unwrap(), s.exit_code())).collect();
        let want: Vec<(String, u8)> = [
            ("discrepancy", 1),
            ("stopped", 3),
            ("incomplete", 3),
            ("behind", 3),
            ("stale", 3),
            ("no-eligible-scope", 5),
            ("healthy", 0),
        ]
        .iter()
        .map(|(n, c)| (format!("\"{n}\""), *c))
        .collect();
        assert_eq!(got, want);
        for s in State::SEVERITY {
            assert_eq!(serde_json::to_string(&s).unwrap(), format!("\"{}\"", s.as_str()));
            assert_eq!(serde_json::from_str::<State>(&format!("\"{}\"", s.as_str())).unwrap(), s);
        }
    }

    #[test]
    fn each_state_alone() {
        assert_eq!(state(&healthy()), State::Healthy);
        assert_eq!(conditions(&healthy()), [State::Healthy]);
        for s in State::SEVERITY {
            let facts = with(healthy(), s);
            assert_eq!(state(&facts), s, "{s:?}");
            assert_eq!(conditions(&facts), [s], "{s:?}");
        }
    }

    #[test]
    fn every_pair_gives_the_more_severe() {
        for (i, a) in State::SEVERITY.iter().enumerate() {
            for b in &State::SEVERITY[i + 1..] {
                let facts = with(with(healthy(), *a), *b);
                assert_eq!(state(&facts), *a, "{a:?} with {b:?}");
                assert_eq!(a.worst(*b), *a);
                assert_eq!(b.worst(*a), *a);
            }
        }
    }

    #[test]
    fn all_at_once_is_a_discrepancy_and_lists_every_condition() {
        let facts = State::SEVERITY.into_iter().fold(healthy(), with);
        assert_eq!(state(&facts), State::Discrepancy);
        assert_eq!(conditions(&facts), State::SEVERITY[..6]);
    }

    #[test]
    fn acknowledging_one_of_two_never_lowers_the_state() {
        let mut facts = healthy();
        facts.unacknowledged_discrepancies = 2;
        assert_eq!(state(&facts), State::Discrepancy);
        facts.unacknowledged_discrepancies = 1;
        facts.acknowledged_discrepancies = 1;
        assert_eq!(state(&facts), State::Discrepancy);
        // However many are acknowledged.
        facts.acknowledged_discrepancies = usize::MAX;
        assert_eq!(state(&facts), State::Discrepancy);
    }

    #[test]
    fn acknowledged_discrepancies_never_hide_another_condition() {
        let mut facts = healthy();
        facts.acknowledged_discrepancies = 3;
        // Exit 1 until acknowledged (issue 20); after, the other conditions decide.
        assert_eq!(state(&facts), State::Healthy);
        for s in State::SEVERITY.into_iter().skip(1) {
            assert_eq!(state(&with(facts.clone(), s)), s, "{s:?}");
        }
    }

    #[test]
    fn thresholds_are_strict() {
        let mut facts = healthy();
        facts.backlog = 2;
        facts.last_verified_age_s = Some(60);
        assert_eq!(state(&facts), State::Healthy);
        facts.backlog = 3;
        assert_eq!(state(&facts), State::Behind);
        facts.backlog = 2;
        facts.last_verified_age_s = Some(61);
        assert_eq!(state(&facts), State::Stale);
    }

    #[test]
    fn nothing_verified_is_never_healthy() {
        let mut facts = healthy();
        facts.last_verified_age_s = None;
        // However young the job's checkpoints, however lenient the limit.
        facts.stale_after_s = u64::MAX;
        assert_eq!(state(&facts), State::Stale);
        facts.last_verified_age_s = Some(1);
        assert_eq!(state(&facts), State::Healthy);
        // Nothing eligible and nothing verified: no-eligible-scope, still not healthy.
        facts.last_verified_age_s = None;
        facts.eligible_scope = false;
        assert_eq!(state(&facts), State::NoEligibleScope);
    }

    #[test]
    fn rank_follows_the_declared_severity() {
        let ranks: Vec<usize> = State::SEVERITY.iter().map(|s| s.rank()).collect();
        assert_eq!(ranks, [0, 1, 2, 3, 4, 5, 6]);
    }
}
