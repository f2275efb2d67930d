//! Named fault points at the protocol's steps, armed by `CLINK_FAULT`.
//!
//! `CLINK_FAULT=<point>@<checkpoint id>[,<point>@<checkpoint id>...]` arms
//! points; each fires at most once per process. A kill point ends the process
//! with SIGKILL where it stands: no unwinding, no destructor, no flush, exactly
//! what a machine losing the process looks like. `checkpoint.snapshot_fails`
//! instead makes the snapshot fail. Unarmed, a point costs one relaxed atomic
//! load.
//!
//! A kill point armed as `<point>@<checkpoint id>=hold` pauses the thread that
//! reaches it instead: it writes `<point>@<id>.held` into the directory
//! `CLINK_FAULT_HOLD_DIR` names and waits until `<point>@<id>.release`
//! appears there (or the process is killed). A test uses it to order what
//! two processes, or a process and a broker, do around that step: the
//! step's effect has not happened while the thread is held.
//!
//! A kill point armed as `<point>@*=slow:<ms>` kills nothing: every thread
//! that passes it, at every checkpoint, sleeps that long there (a slow disk
//! or a slow destination at that step). A test uses it to make one stage of a
//! job slower than the others, as a loaded machine does, and see the job
//! still finish. `*` is accepted only with `slow`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

pub const ENV_VAR: &str = "CLINK_FAULT";
/// The directory a held point reports in and waits for its release in.
pub const HOLD_DIR_VAR: &str = "CLINK_FAULT_HOLD_DIR";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultPoint {
    SourceAfterPositionSnapshot,
    SinkBeforePrepare,
    SinkAfterPrepare,
    CoordinatorBeforeCompletedMarker,
    CoordinatorAfterCompletedMarker,
    CoordinatorBeforeCommitBroadcast,
    SinkBeforeCommit,
    SinkAfterCommit,
    CoordinatorBeforeRestoredRecord,
    CheckpointSnapshotFails,
    SourceSnapshotFails,
    /// The ClickHouse sink's INSERT of an interval was acknowledged; the
    /// barrier is not yet.
    ClickHouseAfterInsert,
    /// The ClickHouse sink's INSERT landed, but the sink acts as if its
    /// answer was lost: the resend is in doubt.
    ClickHouseResponseLost,
    /// A Kafka sink's commit executed at the broker; its receipt is not durable yet.
    SinkBetweenCommitAndReceipt,
    /// A Kafka sink's commit receipt is durable; the commit's tail (the
    /// handle erased, the next transaction begun) has not run.
    SinkAfterExternalCommit,
    /// Every sink confirmed the checkpoint; its CONFIRMED marker is not durable yet.
    CoordinatorBeforeConfirmedMarker,
    /// A restart (or a recovery) is held for in-doubt resolution, before the
    /// walk's first step (armed with the confirmed point the walk starts above).
    CoordinatorBeforeInDoubtWalk,
    /// A reopening Kafka sink has described its orphan (armed with the
    /// orphan's checkpoint) and sent nothing that ends it yet.
    SinkOrphanDescribed,
}

impl FaultPoint {
    /// The protocol's points, which every job passes (the file fault matrix
    /// has a trial for each).
    pub const ALL: [FaultPoint; 11] = [
        FaultPoint::SourceAfterPositionSnapshot,
        FaultPoint::SinkBeforePrepare,
        FaultPoint::SinkAfterPrepare,
        FaultPoint::CoordinatorBeforeCompletedMarker,
        FaultPoint::CoordinatorAfterCompletedMarker,
        FaultPoint::CoordinatorBeforeCommitBroadcast,
        FaultPoint::SinkBeforeCommit,
        FaultPoint::SinkAfterCommit,
        FaultPoint::CoordinatorBeforeRestoredRecord,
        FaultPoint::CheckpointSnapshotFails,
        FaultPoint::SourceSnapshotFails,
    ];

    /// The connectors' own points (the connector fault matrix covers them).
    pub const CONNECTORS: [FaultPoint; 2] = [FaultPoint::ClickHouseAfterInsert, FaultPoint::ClickHouseResponseLost];

    /// The commit-confirmed family's points (the Kafka sink's fault matrix
    /// covers them, with the protocol's).
    pub const CONFIRMED: [FaultPoint; 5] = [
        FaultPoint::SinkBetweenCommitAndReceipt,
        FaultPoint::SinkAfterExternalCommit,
        FaultPoint::CoordinatorBeforeConfirmedMarker,
        FaultPoint::CoordinatorBeforeInDoubtWalk,
        FaultPoint::SinkOrphanDescribed,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FaultPoint::SourceAfterPositionSnapshot => "source.after_position_snapshot",
            FaultPoint::SinkBeforePrepare => "sink.before_prepare",
            FaultPoint::SinkAfterPrepare => "sink.after_prepare",
            FaultPoint::CoordinatorBeforeCompletedMarker => "coordinator.before_completed_marker",
            FaultPoint::CoordinatorAfterCompletedMarker => "coordinator.after_completed_marker",
            FaultPoint::CoordinatorBeforeCommitBroadcast => "coordinator.before_commit_broadcast",
            FaultPoint::SinkBeforeCommit => "sink.before_commit",
            FaultPoint::SinkAfterCommit => "sink.after_commit",
            FaultPoint::CoordinatorBeforeRestoredRecord => "coordinator.before_restored_record",
            FaultPoint::CheckpointSnapshotFails => "checkpoint.snapshot_fails",
            FaultPoint::SourceSnapshotFails => "source.snapshot_fails",
            FaultPoint::ClickHouseAfterInsert => "clickhouse.after_insert",
            FaultPoint::ClickHouseResponseLost => "clickhouse.response_lost",
            FaultPoint::SinkBetweenCommitAndReceipt => "sink.between_commit_and_receipt",
            FaultPoint::SinkAfterExternalCommit => "sink.after_external_commit",
            FaultPoint::CoordinatorBeforeConfirmedMarker => "coordinator.before_confirmed_marker",
            FaultPoint::CoordinatorBeforeInDoubtWalk => "coordinator.before_in_doubt_walk",
            FaultPoint::SinkOrphanDescribed => "sink.orphan_described",
        }
    }

    pub fn parse(name: &str) -> Option<FaultPoint> {
        FaultPoint::ALL
            .into_iter()
            .chain(FaultPoint::CONNECTORS)
            .chain(FaultPoint::CONFIRMED)
            .find(|p| p.name() == name)
    }

    /// Whether reaching the point kills the process (all but the snapshot
    /// failures: a sink's, which fails its checkpoint, and the source's,
    /// which fails the source subtask; and the lost answer of an INSERT).
    pub fn kills(self) -> bool {
        !matches!(
            self,
            FaultPoint::CheckpointSnapshotFails | FaultPoint::SourceSnapshotFails | FaultPoint::ClickHouseResponseLost
        )
    }
}

/// What an armed kill point does when it is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Kill,
    /// Pause there until released, reporting and waiting in this directory.
    Hold(std::path::PathBuf),
    /// Sleep there this long, every time (armed at every checkpoint).
    Slow(std::time::Duration),
}

/// The checkpoint an armed point fires at: one, or (slow only) every one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FiresAt {
    Checkpoint(u64),
    Every,
}

/// One armed point: where, at which checkpoint, what it does, and whether it has fired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArmedFault {
    pub point: FaultPoint,
    pub at: FiresAt,
    pub action: Action,
    fired: bool,
}

static ARMED: AtomicBool = AtomicBool::new(false);
static FAULTS: OnceLock<Mutex<Vec<ArmedFault>>> = OnceLock::new();

/// Why a `CLINK_FAULT` value is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FaultSpecError {
    /// An item without `@`.
    #[error("{}: {item:?} is not <point>@<checkpoint id>", ENV_VAR)]
    NotPointAtCheckpoint { item: String },
    /// A point no fault point is named; `known` lists those that are.
    #[error("{}: unknown fault point {name:?}; known: {}", ENV_VAR, .known.join(", "))]
    UnknownPoint { name: String, known: Vec<&'static str> },
    #[error("{}: {id:?} is not a checkpoint id", ENV_VAR)]
    NotACheckpointId { id: String },
    /// An action other than `hold`, or a hold of a point that does not kill.
    #[error("{}: {item:?}: {why}", ENV_VAR)]
    BadAction { item: String, why: String },
    /// A hold armed with no directory to report in.
    #[error("{}: {item:?} holds, and {} names no directory to report and wait in", ENV_VAR, HOLD_DIR_VAR)]
    NoHoldDir { item: String },
}

/// Parses a `CLINK_FAULT` value; `hold_dir` is where held points report.
pub fn parse_spec_with(spec: &str, hold_dir: Option<&std::path::Path>) -> Result<Vec<ArmedFault>, FaultSpecError> {
    let mut armed = Vec::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (at, action) = match item.split_once('=') {
            None => (item, None),
            Some((at, action)) => (at, Some(action)),
        };
        let (name, id) =
            at.split_once('@').ok_or_else(|| FaultSpecError::NotPointAtCheckpoint { item: item.to_string() })?;
        let point = FaultPoint::parse(name).ok_or_else(|| FaultSpecError::UnknownPoint {
            name: name.to_string(),
            known: FaultPoint::ALL
                .iter()
                .chain(&FaultPoint::CONNECTORS)
                .chain(&FaultPoint::CONFIRMED)
                .map(|p| p.name())
                .collect(),
        })?;
        let at = match id {
            "*" => FiresAt::Every,
            id => FiresAt::Checkpoint(
                clink_basics::ids::parse_decimal_u64(id)
                    .ok_or_else(|| FaultSpecError::NotACheckpointId { id: id.to_string() })?,
            ),
        };
        let bad = |why: String| FaultSpecError::BadAction { item: item.to_string(), why };
        let action = match action {
            Some(slow) if slow.starts_with("slow:") => {
                let ms = clink_basics::ids::parse_decimal_u64(&slow["slow:".len()..])
                    .filter(|ms| (1..=60_000).contains(ms))
                    .ok_or_else(|| bad(format!("{slow:?}: slow takes milliseconds, 1 to 60000")))?;
                if !point.kills() {
                    return Err(bad(format!(
                        "{} fails a step rather than pass through it: it cannot be slow",
                        point.name()
                    )));
                }
                Action::Slow(std::time::Duration::from_millis(ms))
            }
            _ if at == FiresAt::Every => return Err(bad("`@*` (every checkpoint) is for slow:<ms> only".into())),
            None => Action::Kill,
            Some("hold") if point.kills() => match hold_dir {
                Some(dir) => Action::Hold(dir.to_path_buf()),
                None => return Err(FaultSpecError::NoHoldDir { item: item.to_string() }),
            },
            Some("hold") => {
                return Err(FaultSpecError::BadAction {
                    item: item.to_string(),
                    why: format!("{} fails a step rather than kill the process: it cannot hold", point.name()),
                })
            }
            Some(other) => {
                return Err(FaultSpecError::BadAction {
                    item: item.to_string(),
                    why: format!("unknown action {other:?} (the actions are hold and slow:<ms>)"),
                })
            }
        };
        armed.push(ArmedFault { point, at, action, fired: false });
    }
    Ok(armed)
}

/// Parses a `CLINK_FAULT` value with no hold directory.
pub fn parse_spec(spec: &str) -> Result<Vec<ArmedFault>, FaultSpecError> {
    parse_spec_with(spec, None)
}

/// Arms the points `CLINK_FAULT` names (none when it is unset).
pub fn arm_from_env() -> Result<Vec<ArmedFault>, FaultSpecError> {
    let hold_dir = std::env::var_os(HOLD_DIR_VAR).map(std::path::PathBuf::from);
    let armed = match std::env::var(ENV_VAR) {
        Ok(spec) => parse_spec_with(&spec, hold_dir.as_deref())?,
        Err(_) => Vec::new(),
    };
    arm(armed.clone());
    Ok(armed)
}

pub fn arm(faults: Vec<ArmedFault>) {
    let any = !faults.is_empty();
    let slot = FAULTS.get_or_init(|| Mutex::new(Vec::new()));
    if let Ok(mut guard) = slot.lock() {
        *guard = faults;
    }
    ARMED.store(any, Ordering::Relaxed);
}

impl ArmedFault {
    fn fires_at(&self, checkpoint: u64) -> bool {
        match self.at {
            FiresAt::Every => true,
            FiresAt::Checkpoint(c) => c == checkpoint && !self.fired,
        }
    }
}

/// Takes the fault armed at this point and checkpoint, once (a slow one,
/// every time): its action.
fn take(point: FaultPoint, checkpoint: u64) -> Option<Action> {
    let slot = FAULTS.get()?;
    let mut guard = slot.lock().ok()?;
    let f = guard.iter_mut().find(|f| f.point == point && f.fires_at(checkpoint))?;
    f.fired = f.at != FiresAt::Every;
    Some(f.action.clone())
}

/// A kill point: if armed here, the process dies now (or, armed to hold,
/// this thread waits here until released).
#[inline]
pub fn kill_point(point: FaultPoint, checkpoint: u64) {
    if ARMED.load(Ordering::Relaxed) {
        match take(point, checkpoint) {
            Some(Action::Kill) => die(point, checkpoint),
            Some(Action::Hold(dir)) => hold(&dir, point, checkpoint),
            Some(Action::Slow(pause)) => std::thread::sleep(pause),
            None => {}
        }
    }
}

/// A failure point: true once if armed here.
#[inline]
pub fn fails(point: FaultPoint, checkpoint: u64) -> bool {
    ARMED.load(Ordering::Relaxed) && take(point, checkpoint).is_some()
}

/// The names a held point reports and is released by, in its directory.
pub fn hold_files(
    dir: &std::path::Path,
    point: FaultPoint,
    checkpoint: u64,
) -> (std::path::PathBuf, std::path::PathBuf) {
    let stem = format!("{}@{checkpoint}", point.name());
    (dir.join(format!("{stem}.held")), dir.join(format!("{stem}.release")))
}

/// Reports the hold (a file written whole under a temporary name, then
/// renamed, so a reader never sees half of it) and waits for the release.
/// A hold that cannot report kills the process instead: a test waiting for
/// a report that never comes would wait for nothing.
fn hold(dir: &std::path::Path, point: FaultPoint, checkpoint: u64) {
    let (held, release) = hold_files(dir, point, checkpoint);
    let partial = held.with_extension("held.partial");
    let reported =
        std::fs::write(&partial, format!("{}\n", std::process::id())).and_then(|()| std::fs::rename(&partial, &held));
    if let Err(e) = reported {
        eprintln!(
            "clink: fault point {}@{checkpoint} armed to hold cannot report in {}: {e}",
            point.name(),
            dir.display()
        );
        die(point, checkpoint);
    }
    eprintln!("clink: fault point {}@{checkpoint} reached: held until {} exists", point.name(), release.display());
    while !release.exists() {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    eprintln!("clink: fault point {}@{checkpoint} released", point.name());
}

/// Steps whose durable effect and trace line are one unit to the fault
/// injector: a kill point reached by one thread waits until no other thread
/// is inside such a step, so a test's kill falls between other threads'
/// steps, as the specification's atomic steps do, never between a write and
/// the line that reports it. (A real crash can; only the marker lines the
/// trace module takes as hidden steps are admitted there.)
static UNSPLIT: std::sync::RwLock<()> = std::sync::RwLock::new(());

thread_local! {
    static IN_UNSPLIT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `step` (a durable write and the trace line after it) as one unit to
/// the fault injector. It must reach no kill point itself.
pub fn unsplit<T>(step: impl FnOnce() -> T) -> T {
    let _shared = UNSPLIT.read().unwrap_or_else(|e| e.into_inner());
    IN_UNSPLIT.with(|f| f.set(true));
    let result = step();
    IN_UNSPLIT.with(|f| f.set(false));
    result
}

fn die(point: FaultPoint, checkpoint: u64) -> ! {
    // A kill point inside an unsplit step would wait for itself.
    debug_assert!(!IN_UNSPLIT.with(|f| f.get()), "fault point {} inside an unsplit step", point.name());
    let _exclusive = UNSPLIT.write().unwrap_or_else(|e| e.into_inner());
    eprintln!("clink: fault point {}@{checkpoint} reached: killing the process", point.name());
    // SAFETY: getpid and kill have no preconditions; SIGKILL cannot be caught,
    // so the process ends here without running anything else.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
    // SIGKILL is delivered before kill() returns to a single-process sender;
    // should it not be, abort without unwinding all the same.
    std::process::abort()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_refuse_with_reasons() {
        let armed = parse_spec("sink.before_commit@2, checkpoint.snapshot_fails@3").unwrap();
        assert_eq!(armed.len(), 2);
        assert_eq!(armed[0].point, FaultPoint::SinkBeforeCommit);
        assert_eq!(armed[1].at, FiresAt::Checkpoint(3));
        assert_eq!(
            parse_spec("sink.before_commit"),
            Err(FaultSpecError::NotPointAtCheckpoint { item: "sink.before_commit".into() })
        );
        let unknown = parse_spec("nowhere@1").unwrap_err();
        assert!(matches!(&unknown, FaultSpecError::UnknownPoint { name, .. } if name == "nowhere"));
        assert!(unknown.to_string().contains("unknown fault point \"nowhere\"; known: "), "{unknown}");
        assert_eq!(parse_spec("sink.before_commit@x"), Err(FaultSpecError::NotACheckpointId { id: "x".into() }));
        let dir = std::path::Path::new("/holds");
        let held = parse_spec_with("sink.before_commit@3=hold", Some(dir)).unwrap();
        assert_eq!(held[0].action, Action::Hold(dir.to_path_buf()));
        assert!(matches!(parse_spec("sink.before_commit@3=hold"), Err(FaultSpecError::NoHoldDir { .. })));
        let slow = parse_spec("sink.before_prepare@*=slow:25").unwrap();
        assert_eq!(
            (slow[0].at, &slow[0].action),
            (FiresAt::Every, &Action::Slow(std::time::Duration::from_millis(25)))
        );
        for bad in [
            "sink.before_commit@3=pause",
            "checkpoint.snapshot_fails@3=hold",
            "sink.before_commit@*",
            "sink.before_commit@*=hold",
            "sink.before_commit@*=slow:0",
            "sink.before_commit@*=slow:x",
            "sink.before_commit@*=slow:60001",
            "checkpoint.snapshot_fails@*=slow:5",
        ] {
            assert!(matches!(parse_spec_with(bad, Some(dir)), Err(FaultSpecError::BadAction { .. })), "{bad}");
        }
        for p in FaultPoint::ALL.into_iter().chain(FaultPoint::CONNECTORS) {
            assert_eq!(FaultPoint::parse(p.name()), Some(p));
        }
    }

    #[test]
    fn a_slow_point_fires_at_every_checkpoint_and_a_kill_once_at_its_own() {
        let mut slow = parse_spec("sink.before_prepare@*=slow:1").unwrap().remove(0);
        let mut kill = parse_spec("sink.before_prepare@2").unwrap().remove(0);
        assert!(slow.fires_at(1) && slow.fires_at(7));
        assert!(!kill.fires_at(1) && kill.fires_at(2));
        slow.fired = slow.at != FiresAt::Every;
        kill.fired = kill.at != FiresAt::Every;
        assert!(slow.fires_at(2), "a slow point is never spent");
        assert!(!kill.fires_at(2), "a kill fires once");
    }
}
