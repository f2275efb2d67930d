//! The outcomes of one audit, as `clink-audit-report` version 1 names them,
//! and the rules that follow from an outcome alone: whether it is tried
//! again and when, whether it counts toward coverage, and how a finding
//! names the relationship that failed.
//!
//! It owns those rules and nothing else. It never reads a clock, a file or a
//! report: the caller passes the time of the last attempt and the count of
//! attempts, and gets back a time (unix seconds) or `None`.
//!
//! Decisions a reader should know:
//! - Only `partial` and `error` are tried again. A `discrepancy` is never
//!   tried again (a second read could only hide what the first found), and
//!   `unsupported`, `expired` and `skipped` cannot change by trying.
//! - Only `passed` and `empty` count toward coverage; every other outcome
//!   leaves its offsets a gap ([`crate::coverage`]).
//! - An audit has at most one attempt per cycle, whatever its backoff says
//!   ([`may_attempt`]).

use serde::{Deserialize, Serialize};

use crate::config::Backoff;

/// The outcome of one audit (`clink-audit-report` v1, field `outcome`).
///
/// The order of the variants is their order in the report's documentation;
/// it is used only to list them deterministically, never as a severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// Every required check passed, for the selected keys.
    Passed,
    /// The scope's complete source range held no record the job turns into
    /// a row: the reference computed none, and the sink received none.
    Empty,
    /// Reconciliation or verification failed; the findings name the
    /// relationship ([`Relationship`]).
    Discrepancy,
    /// A check could not be completed: a dependency down, a bound reached,
    /// history expired, isolation not enforced.
    Partial,
    /// A step failed, refused or ran out of time.
    Error,
    /// The job's shape is not one the audit supports.
    Unsupported,
    /// The checkpoint's state was purged before it could be collected.
    Expired,
    /// `latest-only` selection passed over this checkpoint.
    Skipped,
}

impl Outcome {
    /// Every outcome, in declaration order.
    pub const ALL: [Outcome; 8] = [
        Outcome::Passed,
        Outcome::Empty,
        Outcome::Discrepancy,
        Outcome::Partial,
        Outcome::Error,
        Outcome::Unsupported,
        Outcome::Expired,
        Outcome::Skipped,
    ];

    /// The name the report uses (the same as its serde name).
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Passed => "passed",
            Outcome::Empty => "empty",
            Outcome::Discrepancy => "discrepancy",
            Outcome::Partial => "partial",
            Outcome::Error => "error",
            Outcome::Unsupported => "unsupported",
            Outcome::Expired => "expired",
            Outcome::Skipped => "skipped",
        }
    }

    /// Whether an audit with this outcome is tried again in a later cycle
    /// (once its backoff is spent and while attempts remain).
    pub fn is_retried(self) -> bool {
        matches!(self, Outcome::Partial | Outcome::Error)
    }

    /// Whether this outcome's offsets count as verified.
    pub fn counts_toward_coverage(self) -> bool {
        matches!(self, Outcome::Passed | Outcome::Empty)
    }
}

/// The relationship a discrepancy's finding names
/// (`clink-audit-report` v1, `findings[].relationship`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Relationship {
    /// The job's output differs from what the reference computed from the
    /// same records.
    Transformation,
    /// What the sink received differs from what the job emitted.
    Delivery,
    /// The destination, over the keys read, differs from the reference.
    ReferenceDestination,
    /// The evidence itself failed a check (a digest, a trace, a replay).
    Evidence,
}

/// When an audit whose last attempt ended in `outcome` is next due, in unix
/// seconds; `None` when it is never tried again.
///
/// `attempts_so_far` counts every attempt made, including the one that
/// produced `outcome` (a value of 0 is read as 1). It is `None` when the
/// outcome is not retried ([`Outcome::is_retried`]) or when
/// `attempts_so_far >= max_attempts`.
///
/// The formula, for `n = max(attempts_so_far, 1)`:
///
/// ```text
/// delay = min(initial_s * 2^(n - 1), max_s)
/// due   = last_attempt_at + delay            (saturating at u64::MAX)
/// ```
///
/// so the waits after the first, second, third failure are `initial_s`,
/// `2 * initial_s`, `4 * initial_s`, ..., never more than `max_s`. An
/// `initial_s` above `max_s` waits `max_s`. No step overflows: a doubling
/// past `u64::MAX` is `max_s`.
///
/// ```
/// use clink_audit::config::Backoff;
/// use clink_audit::outcome::{next_attempt_due, Outcome};
/// let backoff = Backoff { initial_s: 30, max_s: 100 };
/// assert_eq!(next_attempt_due(Outcome::Partial, 1, 5, 1000, &backoff), Some(1030));
/// assert_eq!(next_attempt_due(Outcome::Partial, 3, 5, 1000, &backoff), Some(1100));
/// assert_eq!(next_attempt_due(Outcome::Partial, 5, 5, 1000, &backoff), None);
/// assert_eq!(next_attempt_due(Outcome::Discrepancy, 1, 5, 1000, &backoff), None);
/// ```
pub fn next_attempt_due(
    outcome: Outcome,
    attempts_so_far: u32,
    max_attempts: u32,
    last_attempt_at: u64,
    backoff: &Backoff,
) -> Option<u64> {
    if !outcome.is_retried() || attempts_so_far >= max_attempts {
        return None;
    }
    Some(last_attempt_at.saturating_add(backoff_delay(attempts_so_far.max(1), backoff)))
}

/// The wait after the `n`th failed attempt (`n >= 1`): see
/// [`next_attempt_due`].
pub fn backoff_delay(n: u32, backoff: &Backoff) -> u64 {
    let doubled = 1u64
        .checked_shl(n.saturating_sub(1))
        .and_then(|factor| backoff.initial_s.checked_mul(factor))
        .unwrap_or(u64::MAX);
    doubled.min(backoff.max_s)
}

/// Whether the runner may attempt an audit now: it is due (`due` from
/// [`next_attempt_due`] is at or before `now`) and it has not been attempted
/// in this cycle. `attempted_this_cycle` wins over any backoff, so a
/// dependency that is down costs one attempt per audit per cycle.
pub fn may_attempt(due: Option<u64>, now: u64, attempted_this_cycle: bool) -> bool {
    !attempted_this_cycle && due.is_some_and(|at| at <= now)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BACKOFF: Backoff = Backoff { initial_s: 10, max_s: 75 };

    #[test]
    fn serde_names_are_the_report_names() {
        let names: Vec<String> = Outcome::ALL.iter().map(|o| serde_json::to_string(o).unwrap()).collect();
        assert_eq!(
            names,
            [
                "\"passed\"",
                "\"empty\"",
                "\"discrepancy\"",
                "\"partial\"",
                "\"error\"",
                "\"unsupported\"",
                "\"expired\"",
                "\"skipped\""
            ]
        );
        for o in Outcome::ALL {
            assert_eq!(serde_json::to_string(&o).unwrap(), format!("\"{}\"", o.as_str()));
            let back: Outcome = serde_json::from_str(&format!("\"{}\"", o.as_str())).unwrap();
            assert_eq!(back, o);
        }
        assert!(serde_json::from_str::<Outcome>("\"Passed\"").is_err());
        assert!(serde_json::from_str::<Outcome>("\"unaudited\"").is_err());
    }

    #[test]
    fn relationship_names() {
        let names: Vec<String> = [
            Relationship::Transformation,
            Relationship::Delivery,
            Relationship::ReferenceDestination,
            Relationship::Evidence,
        ]
        .iter()
        .map(|r| serde_json::to_string(r).unwrap())
        .collect();
        assert_eq!(names, ["\"transformation\"", "\"delivery\"", "\"reference-destination\"", "\"evidence\""]);
        assert!(serde_json::from_str::<Relationship>("\"reference_destination\"").is_err());
    }

    #[test]
    fn only_partial_and_error_are_retried() {
        let retried: Vec<Outcome> = Outcome::ALL.into_iter().filter(|o| o.is_retried()).collect();
        assert_eq!(retried, [Outcome::Partial, Outcome::Error]);
        for o in Outcome::ALL {
            let due = next_attempt_due(o, 1, 10, 0, &BACKOFF);
            assert_eq!(due.is_some(), o.is_retried(), "{o:?}");
        }
    }

    #[test]
    fn only_passed_and_empty_count() {
        let counted: Vec<Outcome> = Outcome::ALL.into_iter().filter(|o| o.counts_toward_coverage()).collect();
        assert_eq!(counted, [Outcome::Passed, Outcome::Empty]);
    }

    #[test]
    fn a_discrepancy_is_never_tried_again() {
        for attempts in 0..5 {
            assert_eq!(next_attempt_due(Outcome::Discrepancy, attempts, u32::MAX, 100, &BACKOFF), None);
        }
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let waits: Vec<u64> =
            (1..=6).map(|n| next_attempt_due(Outcome::Error, n, 100, 1000, &BACKOFF).unwrap() - 1000).collect();
        assert_eq!(waits, [10, 20, 40, 75, 75, 75]);
        // 0 attempts is read as 1.
        assert_eq!(next_attempt_due(Outcome::Error, 0, 100, 1000, &BACKOFF), Some(1010));
    }

    #[test]
    fn attempts_stop_at_max_attempts() {
        assert_eq!(next_attempt_due(Outcome::Partial, 2, 3, 0, &BACKOFF), Some(20));
        assert_eq!(next_attempt_due(Outcome::Partial, 3, 3, 0, &BACKOFF), None);
        assert_eq!(next_attempt_due(Outcome::Partial, 4, 3, 0, &BACKOFF), None);
        assert_eq!(next_attempt_due(Outcome::Partial, 1, 1, 0, &BACKOFF), None);
    }

    #[test]
    fn nothing_overflows() {
        let huge = Backoff { initial_s: u64::MAX / 2, max_s: u64::MAX };
        assert_eq!(backoff_delay(64, &huge), u64::MAX);
        assert_eq!(backoff_delay(u32::MAX, &BACKOFF), 75);
        assert_eq!(next_attempt_due(Outcome::Error, 3, 10, u64::MAX - 1, &BACKOFF), Some(u64::MAX));
        // initial above max waits max.
        assert_eq!(backoff_delay(1, &Backoff { initial_s: 500, max_s: 60 }), 60);
    }

    proptest::proptest! {
        #[test]
        fn backoff_grows_never_past_max(
            initial_s in 1u64..100_000,
            extra in 0u64..1_000_000,
            n in 1u32..80,
            last in proptest::prelude::any::<u64>(),
        ) {
            let backoff = Backoff { initial_s, max_s: initial_s + extra };
            let wait = backoff_delay(n, &backoff);
            proptest::prop_assert!(wait >= initial_s && wait <= backoff.max_s);
            proptest::prop_assert!(backoff_delay(n + 1, &backoff) >= wait);
            let due = next_attempt_due(Outcome::Partial, n, u32::MAX, last, &backoff);
            proptest::prop_assert_eq!(due, Some(last.saturating_add(wait)));
        }
    }

    #[test]
    fn one_attempt_per_cycle() {
        assert!(may_attempt(Some(100), 100, false));
        assert!(may_attempt(Some(50), 100, false));
        assert!(!may_attempt(Some(101), 100, false));
        assert!(!may_attempt(Some(0), 100, true));
        assert!(!may_attempt(None, 100, false));
    }
}
