//! Protocol defects that tests switch back on, one rule each, so a test can show
//! that the guard it checks is load-bearing.
//!
//! They exist only in builds with the cargo feature `defects` (the test
//! suites' builds): there they are armed by the explicit test-only setting
//! `CLINK_TEST_DEFECT` (a comma-separated list of names), and a run that arms
//! one says so on standard error. A default build has no switch at all:
//! [`Defects::has`] is `false` by definition, and a `CLINK_TEST_DEFECT` set for
//! it is refused, never silently ignored. Each name is also a mutant of the
//! formal specification (`mutants/`), and the rule each breaks is named in
//! `engine/PROTOCOL.md`.
//!
//! Every switch's code is a branch marked `DEFECT <name>` at the rule it
//! breaks, behind `#[cfg(any(test, feature = "defects"))]`: a default build
//! compiles none of them. Where a defect only shows in some interleavings, its
//! branch also takes the interleaving that exposes it (one the protocol
//! allows: a decision or a broadcast taken later, never a step it forbids),
//! so that the test that switches it on fails every time, not by chance.

use std::collections::BTreeSet;

pub const ENV_VAR: &str = "CLINK_TEST_DEFECT";

/// Whether this build has the defect switches (the `defects` feature, or the
/// engine's own unit tests).
pub const COMPILED_IN: bool = cfg!(any(test, feature = "defects"));

/// The cargo features that make this build a deliberately wrong variant
/// (never in a default build): the regression suite's and the upgrade
/// check's defect variants.
pub const VARIANT_FEATURES: &[(&str, bool)] = &[
    ("defect-window-end-inclusive", cfg!(feature = "defect-window-end-inclusive")),
    ("defect-memory-windows", cfg!(feature = "defect-memory-windows")),
    ("defect-restore-routes-timers", cfg!(feature = "defect-restore-routes-timers")),
    ("defect-ignore-restore", cfg!(feature = "defect-ignore-restore")),
    ("defect-rescale-orphans", cfg!(feature = "defect-rescale-orphans")),
];

/// The defect variant features this build was compiled with.
pub fn variant_features() -> Vec<&'static str> {
    VARIANT_FEATURES.iter().filter(|(_, on)| *on).map(|(name, _)| *name).collect()
}

/// How this build describes itself in `--version` and in the reports it
/// writes: the version, then whether it is a test build and which defect
/// variant it is, if any.
pub fn build_description() -> &'static str {
    static DESCRIPTION: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DESCRIPTION.get_or_init(|| {
        let mut notes = Vec::new();
        if COMPILED_IN {
            notes.push("test build: defect switches compiled in".to_string());
        }
        let variants = variant_features();
        if !variants.is_empty() {
            notes.push(format!("defect variant, not a release: {}", variants.join(", ")));
        }
        if notes.is_empty() {
            env!("CARGO_PKG_VERSION").to_string()
        } else {
            format!("{} ({})", env!("CARGO_PKG_VERSION"), notes.join("; "))
        }
    })
}

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
    /// `key_by` panics on every record: not a protocol rule, the path a
    /// panicking operator takes (caught, restarted within the budget, reported).
    PanicInOperator,
    /// A failed checkpoint discards nothing above it: the checkpoint above
    /// stays in flight and completes before the restart (its exposing
    /// interleaving: the failed decision waits for the next checkpoint's acks).
    CompleteAboveFailed,
    /// A sink's commit of `c` publishes every handle it holds, above `c` too
    /// (its exposing interleaving: a completed checkpoint's broadcast waits
    /// until the next checkpoint has every ack).
    CommitAboveCheckpoint,
    /// A reopening sink re-commits every staged file of its own it finds,
    /// held by its restored snapshot or not.
    RecommitUnheldAtOpen,
    /// A reopening sink leaves the staged files its restored snapshot does not
    /// hold.
    NoCleanupAtOpen,
    /// A cancelled sink deletes the staged files of every handle it holds.
    CloseAbortsPrepared,
    /// A redeploy numbers its checkpoints from the restore point plus one.
    IdReuse,
    /// A restart numbers from the disk's next id only, forgetting ids it
    /// triggered that never reached the disk.
    RestartNumbersFromDisk,
    /// A redeploy writes no RESTORED record.
    NoRestoredRecord,
    /// An in-process restart's restore rule ignores the RESTORED record.
    RestoreIgnoresRestored,
    /// A new run's (a takeover's) restore rule ignores the RESTORED record.
    RestoreFromSuperseded,
    /// The restore takes the newest checkpoint any participant has a
    /// snapshot of, marker or not.
    RestoreWithoutMarker,
    /// With the restart budget spent, a failed checkpoint is forgotten and
    /// the job runs on.
    SailOnWithoutBudget,
    /// A restart keeps deciding, marking and broadcasting the checkpoints in
    /// flight until its subtasks have stopped (its exposing interleaving: the
    /// subtasks are cancelled only once nothing in flight can still complete).
    BroadcastDuringDrain,
    /// A Kafka sink writes no commit receipt.
    NoReceipts,
    /// A Kafka sink begins its next transaction before its commit's receipt
    /// is durable (its exposing interleaving: the receipt waits until the
    /// next transaction holds a record).
    ReceiptAfterBegin,
    /// The in-doubt walk proves a commit over the wire and writes no receipt.
    NoMaterialisedReceipts,
    /// An early stop of the walk leaves no unresolved marker above the
    /// checkpoint it stopped at.
    RefusalWall,
    /// The walk probes no handle of a checkpoint after its first refusal.
    StopAtFirstRefusal,
    /// A reopening Kafka sink fences its id without describing its orphan.
    BlindFence,
    /// A reopening Kafka sink decides its orphan by the first describe and
    /// leaves an undecided one to init_transactions.
    OrphanLeftToInit,
    /// A Kafka sink reopening at restore point 0 settles no orphan and arms
    /// no suppression.
    OpenSkipsRestoreZero,
    /// A job of Kafka sinks restores from the newest COMPLETED checkpoint.
    RestoreFromCompleted,
    /// The in-memory confirmed point advances before the CONFIRMED marker is
    /// durable (its exposing interleaving: snapshots are pruned below the new
    /// point before the put).
    AdvanceBeforeConfirmedPut,
    /// A Kafka sink sends CommitConfirmed as it takes the commit frame.
    ConfirmBeforeCommit,
    /// A Kafka sink's transactional id names its process, so a new
    /// incarnation's init fences nothing an old one (a worker given up while
    /// still running) holds: the old one's late produce and commit go through.
    NoFencing,
    /// A source's periodic request that comes while the most checkpoints are
    /// in flight is dropped (not held until one is decided): the source,
    /// which waits for the trigger it asked for, waits forever.
    DropRequestAtBound,
}

impl Defect {
    pub const ALL: [Defect; 33] = [
        Defect::BroadcastBeforeMarker,
        Defect::NoRecommitAtOpen,
        Defect::AckBeforeDurable,
        Defect::NoRewindOnFailedCheckpoint,
        Defect::CommitAtBarrier,
        Defect::StateOutsideSnapshot,
        Defect::PanicInOperator,
        Defect::CompleteAboveFailed,
        Defect::CommitAboveCheckpoint,
        Defect::RecommitUnheldAtOpen,
        Defect::NoCleanupAtOpen,
        Defect::CloseAbortsPrepared,
        Defect::IdReuse,
        Defect::RestartNumbersFromDisk,
        Defect::NoRestoredRecord,
        Defect::RestoreIgnoresRestored,
        Defect::RestoreFromSuperseded,
        Defect::RestoreWithoutMarker,
        Defect::SailOnWithoutBudget,
        Defect::BroadcastDuringDrain,
        Defect::NoReceipts,
        Defect::ReceiptAfterBegin,
        Defect::NoMaterialisedReceipts,
        Defect::RefusalWall,
        Defect::StopAtFirstRefusal,
        Defect::BlindFence,
        Defect::OrphanLeftToInit,
        Defect::OpenSkipsRestoreZero,
        Defect::RestoreFromCompleted,
        Defect::AdvanceBeforeConfirmedPut,
        Defect::ConfirmBeforeCommit,
        Defect::NoFencing,
        Defect::DropRequestAtBound,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Defect::BroadcastBeforeMarker => "broadcast_before_marker",
            Defect::NoRecommitAtOpen => "no_recommit_at_open",
            Defect::AckBeforeDurable => "ack_before_durable",
            Defect::NoRewindOnFailedCheckpoint => "no_rewind_on_failed_checkpoint",
            Defect::CommitAtBarrier => "commit_at_barrier",
            Defect::StateOutsideSnapshot => "state_outside_snapshot",
            Defect::PanicInOperator => "panic_in_operator",
            Defect::CompleteAboveFailed => "complete_above_failed",
            Defect::CommitAboveCheckpoint => "commit_above_checkpoint",
            Defect::RecommitUnheldAtOpen => "recommit_unheld_at_open",
            Defect::NoCleanupAtOpen => "no_cleanup_at_open",
            Defect::CloseAbortsPrepared => "close_aborts_prepared",
            Defect::IdReuse => "id_reuse",
            Defect::RestartNumbersFromDisk => "restart_numbers_from_disk",
            Defect::NoRestoredRecord => "no_restored_record",
            Defect::RestoreIgnoresRestored => "restore_ignores_restored",
            Defect::RestoreFromSuperseded => "restore_from_superseded",
            Defect::RestoreWithoutMarker => "restore_without_marker",
            Defect::SailOnWithoutBudget => "sail_on_without_budget",
            Defect::BroadcastDuringDrain => "broadcast_during_drain",
            Defect::NoReceipts => "no_receipts",
            Defect::ReceiptAfterBegin => "receipt_after_begin",
            Defect::NoMaterialisedReceipts => "no_materialised_receipts",
            Defect::RefusalWall => "refusal_wall",
            Defect::StopAtFirstRefusal => "stop_at_first_refusal",
            Defect::BlindFence => "blind_fence",
            Defect::OrphanLeftToInit => "orphan_left_to_init",
            Defect::OpenSkipsRestoreZero => "open_skips_restore_zero",
            Defect::RestoreFromCompleted => "restore_from_completed",
            Defect::AdvanceBeforeConfirmedPut => "advance_before_confirmed_put",
            Defect::ConfirmBeforeCommit => "confirm_before_commit",
            Defect::NoFencing => "no_fencing",
            Defect::DropRequestAtBound => "drop_request_at_bound",
        }
    }

    /// Whether the switch breaks a rule of the checkpoint and commit protocol:
    /// then its name is also a mutant of the specification (`mutants/<name>`)
    /// and a recorded trace (`traces/defect-<name>/`). The two others break
    /// replay's rule and an operator's.
    pub fn is_protocol(self) -> bool {
        !matches!(self, Defect::StateOutsideSnapshot | Defect::PanicInOperator)
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

/// A defect setting this build refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DefectError(pub String);

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

    /// Reads `CLINK_TEST_DEFECT`; an unknown name is an error, not ignored,
    /// and so is any value in a build without the switches.
    pub fn from_env() -> Result<Self, DefectError> {
        Self::from_setting(std::env::var(ENV_VAR).ok(), COMPILED_IN)
    }

    /// The rule [`Defects::from_env`] applies: a setting is read only by a
    /// build that has the switches, and refused by one that does not.
    fn from_setting(value: Option<String>, compiled_in: bool) -> Result<Self, DefectError> {
        match value {
            Some(value) if compiled_in => Self::parse(&value),
            Some(_) => Err(DefectError(format!(
                "{ENV_VAR} is set, but this build has no test defect switches (it was built without the `defects` feature)"
            ))),
            None => Ok(Self::none()),
        }
    }

    pub fn parse(list: &str) -> Result<Self, DefectError> {
        let mut set = BTreeSet::new();
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let defect = Defect::parse(name).ok_or_else(|| {
                let known: Vec<_> = Defect::ALL.iter().map(|d| d.name()).collect();
                DefectError(format!("{ENV_VAR}: unknown defect {name:?}; known: {}", known.join(", ")))
            })?;
            set.insert(defect);
        }
        Ok(Self(set))
    }

    /// Whether a defect is switched on; in a build without the switches, never.
    pub fn has(&self, defect: Defect) -> bool {
        COMPILED_IN && self.0.contains(&defect)
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

    #[test]
    fn a_build_without_the_switches_refuses_a_setting_rather_than_ignore_it() {
        let set = Some("broadcast_before_marker".to_string());
        assert!(Defects::from_setting(set.clone(), true).unwrap().has(Defect::BroadcastBeforeMarker));
        let refused = Defects::from_setting(set, false).unwrap_err();
        assert!(refused.0.contains("built without the `defects` feature"), "{refused}");
        assert!(Defects::from_setting(None, false).unwrap().is_empty());
    }
}
