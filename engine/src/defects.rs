//! Protocol defects that tests switch back on, one rule each, so a test can show
//! that the guard it checks is load-bearing.
//!
//! They are armed only by the explicit test-only setting `CLINK_TEST_DEFECT`
//! (a comma-separated list of names); a production run never sets it, and a run
//! that does says so on standard error. Each name is also a mutant of the
//! formal specification (`mutants/`), and the rule each breaks is named in
//! `engine/PROTOCOL.md`.

use std::collections::BTreeSet;

pub const ENV_VAR: &str = "CLINK_TEST_DEFECT";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Defect {
    /// The coordinator broadcasts the commit (and waits for it) before the
    /// COMPLETED marker is durable.
    BroadcastBeforeMarker,
    /// A reopening staged-file sink does not re-commit its restored handles.
    NoRecommitAtOpen,
    /// A staged-file sink acks before its staged file exists; it seals the
    /// file only when the commit arrives.
    AckBeforeDurable,
    /// A failed checkpoint does not rewind the job: it runs on, and the
    /// interval the failed snapshot aborted is never re-emitted.
    NoRewindOnFailedCheckpoint,
    /// A staged-file sink publishes its staged file at the barrier, before
    /// the checkpoint is completed.
    CommitAtBarrier,
    /// The processing-time counter numbers its reports with a counter kept
    /// outside its snapshot (process-global), so two replays of one epoch
    /// emit different rows.
    StateOutsideSnapshot,
}

impl Defect {
    pub const ALL: [Defect; 6] = [
        Defect::BroadcastBeforeMarker,
        Defect::NoRecommitAtOpen,
        Defect::AckBeforeDurable,
        Defect::NoRewindOnFailedCheckpoint,
        Defect::CommitAtBarrier,
        Defect::StateOutsideSnapshot,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Defect::BroadcastBeforeMarker => "broadcast_before_marker",
            Defect::NoRecommitAtOpen => "no_recommit_at_open",
            Defect::AckBeforeDurable => "ack_before_durable",
            Defect::NoRewindOnFailedCheckpoint => "no_rewind_on_failed_checkpoint",
            Defect::CommitAtBarrier => "commit_at_barrier",
            Defect::StateOutsideSnapshot => "state_outside_snapshot",
        }
    }

    pub fn parse(name: &str) -> Option<Defect> {
        Defect::ALL.into_iter().find(|d| d.name() == name)
    }
}

/// The defects `CLINK_TEST_DEFECT` switches on for this whole process (none
/// when unset or unreadable; `clink run` refuses an unreadable value first).
pub fn active() -> &'static Defects {
    static ACTIVE: std::sync::OnceLock<Defects> = std::sync::OnceLock::new();
    ACTIVE.get_or_init(|| Defects::from_env().unwrap_or_default())
}

/// The defects switched on for this process (normally none).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Defects(BTreeSet<Defect>);

impl Defects {
    pub fn none() -> Self {
        Self::default()
    }

    pub fn of(defects: &[Defect]) -> Self {
        Self(defects.iter().copied().collect())
    }

    /// Reads `CLINK_TEST_DEFECT`; an unknown name is an error, not ignored.
    pub fn from_env() -> Result<Self, String> {
        match std::env::var(ENV_VAR) {
            Ok(value) => Self::parse(&value),
            Err(_) => Ok(Self::none()),
        }
    }

    pub fn parse(list: &str) -> Result<Self, String> {
        let mut set = BTreeSet::new();
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let defect = Defect::parse(name).ok_or_else(|| {
                let known: Vec<_> = Defect::ALL.iter().map(|d| d.name()).collect();
                format!("{ENV_VAR}: unknown defect {name:?}; known: {}", known.join(", "))
            })?;
            set.insert(defect);
        }
        Ok(Self(set))
    }

    pub fn has(&self, defect: Defect) -> bool {
        self.0.contains(&defect)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.0.iter().map(|d| d.name()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for d in Defect::ALL {
            assert_eq!(Defect::parse(d.name()), Some(d));
        }
        assert!(Defects::parse("no_recommit_at_open, ack_before_durable").unwrap().has(Defect::AckBeforeDurable));
        assert!(Defects::parse("typo").is_err());
        assert!(Defects::parse("").unwrap().is_empty());
    }
}
