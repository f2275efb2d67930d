---------------------------- MODULE ExactlyOnce ----------------------------
(***************************************************************************)
(* The checkpoint and commit protocol of the clink-rs engine, as TLC       *)
(* checks it.  Written from engine/PROTOCOL.md: every step there is one    *)
(* action here, and every fault point there is a state between two         *)
(* actions, at which the process may die (Die).                            *)
(*                                                                         *)
(* Abstraction.  No records, watermarks or channels.  The input is a line  *)
(* of logical positions 1, 2, ...: each checkpoint interval is exactly one *)
(* position, so checkpoint c cuts the input at position cutOf[c].  A sink  *)
(* handle sealed for c carries the position cutOf[c]; a sink's committed   *)
(* output is the set of handles it has published, and a position is        *)
(* published twice when two different handles carrying it are.  A restore *)
(* rewinds the source to the restore point's cut, so a replayed position   *)
(* is cut again by a checkpoint with a fresh id.                           *)
(*                                                                         *)
(* One process (`clink run`) hosts the coordinator, the source and the     *)
(* sink subtasks; its death takes every in-memory variable with it, and    *)
(* only the disk (the variables marked DISK below) survives.  A second run *)
(* over the same directory may also take the job over while the first is   *)
(* still alive (Supersede): the first is then a superseded coordinator,    *)
(* fenced at every durable step by the epoch the second claimed, except    *)
(* for a COMPLETED put that had passed its check (zPuts).  Non-sink        *)
(* subtasks (key_by, windows) snapshot and ack like the sink but have no   *)
(* commit step; their acks are stutters and are not represented.           *)
(*                                                                         *)
(* Family selects the sink family, one protocol for both:                 *)
(*   "recoverable": staged-file sinks that re-commit persisted handles at  *)
(*     open and restore from the newest COMPLETED marker;                  *)
(*   "confirmed": commit-confirmed sinks (a transactional Kafka producer), *)
(*     whose broker transaction cannot be committed again once its owner   *)
(*     is gone: commit receipts, CONFIRMED markers, the in-doubt walk,     *)
(*     .unresolved markers, the pre-fence describe, replay suppression and *)
(*     an open that settles its orphan; restores from the newest CONFIRMED *)
(*     marker.  Its steps are in the section "The commit-confirmed family". *)
(*                                                                         *)
(* Bug switches one rule back to a defective form, at the rule itself.     *)
(* "none" is the protocol the engine implements; every other value is a    *)
(* mutant under mutants/ and is calibrated against mutants/expected.txt.   *)
(* Unguarded removes guards (named by the invariant each establishes, see  *)
(* Guards): it is how the suite shows that an accepted mutant is harmless  *)
(* because of that guard and of nothing else.                              *)
(***************************************************************************)
EXTENDS Naturals, FiniteSets, Sequences

CONSTANTS
    Sinks,          \* the sink subtasks (participant names op-<id>-<subtask>)
    MaxCkpt,        \* checkpoint ids are 1..MaxCkpt over the whole behaviour
    MaxInFlight,    \* checkpoints triggered and not yet decided, at most
    MaxDeaths,      \* fault budget: process deaths (kill at any step)
    MaxSupersede,   \* fault budget: runs that take the job over from a live run
    MaxSnapFails,   \* fault budget: sink snapshots that fail (checkpoint.snapshot_fails)
    RestartBudget,  \* in-process restarts (failed checkpoint or subtask error), per process
    MaxTaskErrors,  \* fault budget: subtask errors (a Failed frame) that restart the job
    MaxEmpty,       \* (sink, position) pairs whose interval brought the sink no rows
    MaxWalkStops,   \* fault budget: in-doubt walks cancelled or exhausted early ("confirmed")
    MaxLostRunning, \* fault budget: workers declared lost while still running
    MaxExpiries,    \* fault budget: broker transactions that expire ("confirmed")
    Family,         \* "recoverable" or "confirmed"
    Bug,            \* "none", or the name of one mutant
    Unguarded       \* a subset of Guards: guards taken out (see Guards)

Families == {"recoverable", "confirmed"}

Bugs == {"none",
         "broadcast_before_marker",        \* step 8 before step 7
         "no_recommit_at_open",            \* recovery step 5 skips the re-commit
         "ack_before_durable",             \* step 5 acks before step 4's file exists
         "complete_above_failed",          \* step 6 lets a checkpoint above a failed one complete
         "no_rewind_on_failed_checkpoint", \* a failed checkpoint does not restart the job
         "restore_ignores_restored",       \* a restart's restore ignores the RESTORED record
         "restore_from_superseded",        \* a takeover's restore ignores the RESTORED record
         "restore_without_marker",         \* recovery step 1 restores from snapshots with no marker
         "commit_at_barrier",              \* step 4 publishes instead of staging
         "commit_above_checkpoint",        \* step 9 publishes handles above c as well
         "recommit_unheld_at_open",        \* recovery step 5 re-commits every staged file
         "no_cleanup_at_open",             \* recovery step 5 leaves unheld staged files
         "sail_on_without_budget",         \* a failed checkpoint with no budget left does not fail the job
         "id_reuse",                       \* a redeploy numbers from the restore point plus one
         "restart_numbers_from_disk",      \* a restart ignores the ids it triggered itself
         "no_restored_record",             \* a redeploy writes no RESTORED record
         "broadcast_during_drain",         \* checkpoints are decided and broadcast while a restart drains
         "close_aborts_prepared",          \* a cancelled sink deletes its sealed staged files
         \* the commit-confirmed family:
         "no_receipts",                    \* no durable receipt when the broker acknowledges
         "receipt_after_begin",            \* the successor transaction may begin before the receipt
         "no_materialised_receipts",       \* a commit the walk proves over the wire gets no receipt
         "refusal_wall",                   \* an early stop of the walk marks nothing above it
         "stop_at_first_refusal",          \* the walk stops at the first refused handle
         "blind_fence",                    \* the open fences without describing its marked orphan
         "orphan_left_to_init",            \* the open leaves an undecided orphan to init_transactions
         "open_skips_restore_zero",        \* the open settles nothing and arms nothing at restore point 0
         "restore_from_completed",         \* the restore takes the newest COMPLETED marker
         "advance_before_confirmed_put",   \* memory's confirmed point advances before the CONFIRMED put
         "no_fencing",                     \* a worker acts on frames of a superseded coordinator
         "confirm_before_commit",          \* CommitConfirmed is sent when the commit frame is taken
         "refused_commit_ignored",         \* a commit the broker refused is taken as done
         \* progress:
         "drop_request_at_bound"}          \* a request at the in-flight bound is dropped, not held

\* The guards an accepted mutant may name (mutants/expected.txt), each the
\* invariant of the same name and the rule that establishes it:
\*   RestoredPassesOverNothing: a restart chooses its restore point after the
\*     drain, when nothing can complete any more (RestartDrained); unguarded,
\*     it chooses at RestartOnError, before the drain.
\*   InDoubtMarked: an early stop of the in-doubt walk marks, besides the
\*     refused handles and every unreceipted one above, the handles of the
\*     stopping checkpoint it never probed (StopMarks); unguarded, after a
\*     refusal it marks only the refused ones.
Guards == {"RestoredPassesOverNothing", "InDoubtMarked"}

ASSUME Family \in Families
ASSUME Bug \in Bugs
ASSUME Unguarded \subseteq Guards
ASSUME MaxCkpt \in Nat /\ MaxInFlight \in Nat \ {0}
ASSUME {MaxDeaths, MaxSupersede, MaxSnapFails, RestartBudget, MaxTaskErrors, MaxEmpty,
        MaxWalkStops, MaxLostRunning, MaxExpiries} \subseteq Nat
\* A Kafka sink seals a transaction at every barrier, records or none, so it
\* never finds an interval empty; the walk and a lost worker left running are
\* the commit-confirmed family's.
ASSUME Family = "confirmed" => MaxEmpty = 0
ASSUME Family = "recoverable" => MaxWalkStops = 0 /\ MaxExpiries = 0
ASSUME Sinks # {}

Guarded(g) == g \notin Unguarded

Ids == 1..MaxCkpt           \* checkpoint ids
Positions == 1..MaxCkpt     \* one position per interval, so never more than ids

\* Phases in which the subtasks run: deployed, or still running after a
\* restart's cancel until they notice it (the drain).
TasksRun == {"running", "draining"}

Max(S) == IF S = {} THEN 0 ELSE CHOOSE x \in S : \A y \in S : y <= x
Min(S) == CHOOSE x \in S : \A y \in S : x <= y

VARIABLES
    \* ---------------- DISK: survives a process death ----------------
    cutOf,       \* [0..MaxCkpt -> Nat]: the source's durable position snapshot of c
                 \*   (0: none; cutOf[0] = 0 is the start of the input)
    dlv,         \* [Ids -> 0..2]: how many times the source delivered barrier c
                 \*   (wrote its position snapshot), over the job's whole history: the
                 \*   vintage of c's state.  Ghost; cutOf[c] # 0 iff dlv[c] # 0
    snapV,       \* [Sinks -> [Ids -> 0..2]]: the vintage (dlv) of c when the sink's
                 \*   snapshot of c was written; 0: no snapshot of c
    snapHold,    \* [Sinks -> [Ids -> SUBSET Ids]]: the handles that snapshot holds
    staged,      \* [Sinks -> SUBSET Ids]: sealed staged files .staged/part-<s>-<c>
    published,   \* [Sinks -> SUBSET Ids]: published files part-<s>-<c> (the output)
    markV,       \* [Ids -> 0..2]: the vintage of c when COMPLETED-<c> was written; 0: no marker
    restored,    \* <<>> or <<restored_from, next>>: the durable RESTORED record
    \* ---------------- the environment ----------------
    input,       \* [Sinks -> [Positions -> {"?", "rows", "empty"}]]: whether a
                 \*   position's interval brings the sink rows; decided the first
                 \*   time the sink prepares it, and the same on every replay
    zPuts,       \* SUBSET (Ids \X 0..2): COMPLETED puts of superseded coordinators
                 \*   that passed their epoch check and have not landed yet
    \* ---------------- PROCESS MEMORY: lost at a death ----------------
    phase,       \* "running" | "draining" | "deploying" | "down" | "failed"
    runBase,     \* the first checkpoint id of the current deploy
    nextId,      \* the coordinator's next checkpoint id
    lastTrig,    \* the last id this process triggered (0: none).  Ghost
    runRestore,  \* the restore point the current (or last) deploy restored from
    restoreTo,   \* the restore point chosen, while "deploying" (and, unguarded, draining)
    restarts,    \* in-process restarts this process has made
    inflight,    \* checkpoints triggered and not yet decided
    failedAt,    \* the failed checkpoint awaiting the restart (0: none)
    errorDue,    \* a subtask's Failed frame awaits the restart
    discarded,   \* checkpoints decided discarded in this deploy
    acked,       \* [Ids -> SUBSET Sinks]: sinks whose ok ack the coordinator has
    nacked,      \* [Ids -> SUBSET Sinks]: sinks whose failed ack the coordinator has
    pipeC,       \* the completed checkpoint the coordinator is finishing (0: idle)
    pipeStage,   \* "none" | "decided" | "marked" | "broadcast" (the last for one mutant)
    srcNext,     \* the next barrier id the source will deliver
    srcPos,      \* the source's position (the last position it cut)
    srcWait,     \* the source asked for a checkpoint and waits for its trigger, reading
                 \*   no further (engine/src/runtime/task/source.rs, request_checkpoint)
    asked,       \* the coordinator holds the source's request, not yet answered by a trigger
    sinkUp,      \* [Sinks -> {"opening", "open"}]
    lastBar,     \* [Sinks -> Nat]: the last barrier the sink prepared in this deploy
    prepC,       \* [Sinks -> Nat]: prepared, not yet acked (fault point sink.after_prepare)
    comC,        \* [Sinks -> Nat]: commit frame taken, not yet committed (sink.before_commit)
    pending,     \* [Sinks -> SUBSET Ids]: handles the sink holds in memory, sealed and unpublished
    commitQ,     \* [Sinks -> Seq(Ids)]: CommitCheckpoint frames not yet taken, in order
    committedC,  \* [Ids -> SUBSET Sinks]: Committed(c) frames received (read by one mutant only)
    \* ---------------- fault budgets spent ----------------
    deaths,      \* process deaths so far
    supersessions, \* takeovers from a live run so far
    snapFails,   \* snapshot failures so far
    taskErrors,  \* subtask errors so far
    \* ======== the commit-confirmed family ("confirmed"); constant otherwise ========
    \* ---------------- DISK ----------------
    receipt,     \* [Sinks -> SUBSET Ids]: durable commit receipts receipts/<s>/<c>
    confMarks,   \* SUBSET Ids: the checkpoints with a durable CONFIRMED marker
    unres,       \* [Sinks -> SUBSET Ids]: .unresolved markers the walk left for a sink
    \* ---------------- the broker: one transactional id per sink ----------------
    curTxn,      \* [Sinks -> 0..MaxCkpt]: the newest transaction begun on the id (0: none);
                 \*   only its outcome is describable
    txnSt,       \* [Sinks -> {"none", "ongoing", "committed", "aborted"}]: its state
    hollow,      \* [Sinks -> SUBSET Ids]: transactions sealed with their records
                 \*   swallowed by replay suppression (they publish nothing)
    \* ---------------- PROCESS MEMORY: the coordinator ----------------
    confPt,      \* the in-memory confirmed restore point
    confPut,     \* a CONFIRMED put made, its advance not yet (0: none)
    walkC,       \* the checkpoint the in-doubt walk is at (phase "resolving")
    walkOk,      \* the sinks whose handle of walkC the walk proved committed
    walkBad,     \* the sinks whose handle of walkC the walk refused
    \* ---------------- PROCESS MEMORY: the sinks ----------------
    kst,         \* [Sinks -> {"taken", "committed"}]: comC's commit executed at the broker or not
    rcptDue,     \* [Sinks -> Nat]: a commit executed whose receipt is not yet durable
    confirmDue,  \* [Sinks -> Nat]: a commit finished whose CommitConfirmed is not yet sent
    supp,        \* [Sinks -> SUBSET Positions]: replay suppression armed at open
    openSt,      \* [Sinks -> {"fresh", "none", "gone", "ongoing", "committed", "aborted"}]:
                 \*   an opening sink's pre-fence describe ("fresh": not yet; "none":
                 \*   no marker to settle; otherwise what it saw of the orphan)
    \* ---------------- a worker declared lost and still running ----------------
    lostQ,       \* [Sinks -> Seq(Ids)]: commit frames on the old incarnation's wire
    lostRcpt,    \* [Sinks -> Nat]: a commit the old incarnation executed, receipt not yet written
    lostPend,    \* [Sinks -> SUBSET Ids]: the handles a recoverable old incarnation still holds
    \* ---------------- fault budgets spent ----------------
    walkStops,   \* walks cancelled or exhausted early
    lostRunning, \* workers declared lost while running
    expiries,    \* broker transactions expired
    \* ---------------- a superseded coordinator's frames ----------------
    zTrig,       \* a TriggerCheckpoint of a superseded coordinator still on its way
    staleActed   \* ghost: a subtask acted on a frame of a superseded coordinator

disk   == <<cutOf, dlv, snapV, snapHold, staged, published, markV, restored>>
coord  == <<phase, runBase, nextId, lastTrig, runRestore, restoreTo, restarts, inflight,
            failedAt, errorDue, discarded, acked, nacked, pipeC, pipeStage>>
tasks  == <<srcNext, srcPos, srcWait, asked, sinkUp, lastBar, prepC, comC, pending, commitQ, committedC>>
faults == <<deaths, supersessions, snapFails, taskErrors>>
kdisk  == <<receipt, confMarks, unres>>
broker == <<curTxn, txnSt, hollow>>
kcoord == <<confPt, confPut, walkC, walkOk, walkBad>>
ktasks == <<kst, rcptDue, confirmDue, supp, openSt>>
lost   == <<lostQ, lostRcpt, lostPend>>
kfaults == <<walkStops, lostRunning, expiries>>
zombie == <<zTrig, staleActed>>
kvars  == <<kdisk, broker, kcoord, ktasks, lost, kfaults, zombie>>
vars   == <<disk, input, zPuts, coord, tasks, faults, kvars>>

-----------------------------------------------------------------------------
(* Derived views                                                           *)

\* The position a handle carries.
Pos(c) == cutOf[c]

\* The checkpoints with a durable COMPLETED marker.
markers == {c \in Ids : markV[c] # 0}

\* The checkpoints a sink's snapshot is durable for.
SnapIds(s) == {c \in Ids : snapV[s][c] # 0}

\* The RESTORED record passes over c: the newest deploy restored below c and
\* numbers its checkpoints above it.
PassedOver(c) == restored # <<>> /\ restored[1] < c /\ c < restored[2]

\* The restore rule (engine/src/checkpoint/restore.rs, choose_restore_point
\* through restore_point_on_disk): one function for the engine's recovery,
\* its in-process restart and the harness's checkpoint.restore_rule.
\* takeover: chosen by a new run (CoordRecovers), not by a restart.
RecoverableRestorePoint(takeover) ==
    CASE \/ Bug = "restore_ignores_restored" /\ ~takeover
         \/ Bug = "restore_from_superseded" /\ takeover ->
            \* MUTANT: the newest marker, even one the RESTORED record passes over.
            Max(markers)
      [] Bug = "restore_without_marker" ->
            \* MUTANT: the newest checkpoint any participant has a snapshot of.
            Max({c \in Ids : cutOf[c] # 0} \cup UNION {SnapIds(s) : s \in Sinks})
      [] OTHER ->
            Max({c \in markers : ~PassedOver(c)})

\* The commit-confirmed family's restore rule, applied when the in-doubt
\* walk is over: the confirmed restore point, which the walk has advanced
\* over every checkpoint it proved committed at every sink.
ConfirmedRestorePoint ==
    IF Bug = "restore_from_completed"
       \* MUTANT: the newest COMPLETED marker, as the recoverable family.
       THEN Max(markers)
       ELSE confPt

RestorePoint(takeover) ==
    CASE Family = "recoverable" -> RecoverableRestorePoint(takeover)
      [] Family = "confirmed" -> ConfirmedRestorePoint

\* What the disk vouches for, whatever rule a restore applies: the newest
\* COMPLETED marker the RESTORED record does not pass over; for the
\* commit-confirmed family the newest CONFIRMED marker.
Vouched == CASE Family = "recoverable" -> Max({c \in markers : ~PassedOver(c)})
             [] Family = "confirmed" -> Max(confMarks)

\* Recovery step 2 (engine/src/checkpoint/restore.rs, next_checkpoint_id):
\* one above every checkpoint id the disk knows.
NextFromDisk ==
    1 + Max(markers
            \cup {c \in Ids : cutOf[c] # 0}
            \cup UNION {SnapIds(s) : s \in Sinks}
            \cup (IF restored = <<>> THEN {} ELSE {restored[2] - 1}))

\* The first id a redeploy numbers (engine/src/runtime/coordinator.rs,
\* redeploy): one above every id the disk knows, and never below the
\* coordinator's own next id, so a restart does not trigger again an id it
\* triggered before the restart and the disk never saw (a new process has
\* none: nextId = 0).  R is the restore point.
RedeployNext(R) ==
    CASE Bug = "id_reuse" -> R + 1                     \* MUTANT: from the restore point
      [] Bug = "restart_numbers_from_disk" -> NextFromDisk  \* MUTANT: the disk only
      [] OTHER -> IF NextFromDisk >= nextId THEN NextFromDisk ELSE nextId

\* A restart is due: a checkpoint was decided failed, or a subtask failed.
RestartDue == failedAt # 0 \/ errorDue

\* The next barrier a sink will see, and whether the source has emitted it.
NextBarrier(s) == lastBar[s] + 1
BarrierWaiting(s) == NextBarrier(s) < srcNext

EmptyCount == Cardinality({<<s, p>> \in Sinks \X Positions : input[s][p] = "empty"})

\* The handles a sink's snapshot of R holds (none for R = 0 or no snapshot).
Held(s, R) == IF R # 0 /\ snapV[s][R] # 0 THEN snapHold[s][R] ELSE {}

\* No acks (or Committed frames) received yet.  Memory is reset to these
\* canonical values at every death and deploy, so dead runs do not multiply
\* states.
FreshAcks == [c \in Ids |-> {}]

\* The coordinator decides, marks and broadcasts while the job runs; under
\* the mutant broadcast_during_drain also while a restart drains.
CoordActs ==
    \/ phase = "running"
    \/ Bug = "broadcast_during_drain" /\ phase = "draining"

\* The commit-confirmed family's memory of a deploy, fresh (a cancel, a
\* death, a deploy); constant in the recoverable family.
KTasksFresh ==
    /\ kst' = [s \in Sinks |-> "taken"]
    /\ rcptDue' = [s \in Sinks |-> 0]
    /\ confirmDue' = [s \in Sinks |-> 0]
    /\ supp' = [s \in Sinks |-> {}]
    /\ openSt' = [s \in Sinks |-> "fresh"]

\* The coordinator's memory of the family, gone with its process.
KCoordGone ==
    /\ confPt' = 0
    /\ confPut' = 0
    /\ walkC' = 0
    /\ walkOk' = {}
    /\ walkBad' = {}

KInit ==
    /\ receipt = [s \in Sinks |-> {}]
    /\ confMarks = {}
    /\ unres = [s \in Sinks |-> {}]
    /\ curTxn = [s \in Sinks |-> 0]
    /\ txnSt = [s \in Sinks |-> "none"]
    /\ hollow = [s \in Sinks |-> {}]
    /\ confPt = 0
    /\ confPut = 0
    /\ walkC = 0
    /\ walkOk = {}
    /\ walkBad = {}
    /\ kst = [s \in Sinks |-> "taken"]
    /\ rcptDue = [s \in Sinks |-> 0]
    /\ confirmDue = [s \in Sinks |-> 0]
    /\ supp = [s \in Sinks |-> {}]
    /\ openSt = [s \in Sinks |-> "fresh"]
    /\ lostQ = [s \in Sinks |-> <<>>]
    /\ lostRcpt = [s \in Sinks |-> 0]
    /\ lostPend = [s \in Sinks |-> {}]
    /\ walkStops = 0
    /\ lostRunning = 0
    /\ expiries = 0
    /\ zTrig = FALSE
    /\ staleActed = FALSE

-----------------------------------------------------------------------------
(* Initial state: a fresh start.  No job directory, no RESTORED record,    *)
(* restore point 0; the sinks' first open has nothing to re-commit and is  *)
(* taken as done.                                                          *)

Init ==
    /\ cutOf = [c \in 0..MaxCkpt |-> 0]
    /\ dlv = [c \in Ids |-> 0]
    /\ snapV = [s \in Sinks |-> [c \in Ids |-> 0]]
    /\ snapHold = [s \in Sinks |-> [c \in Ids |-> {}]]
    /\ staged = [s \in Sinks |-> {}]
    /\ published = [s \in Sinks |-> {}]
    /\ markV = [c \in Ids |-> 0]
    /\ restored = <<>>
    /\ input = [s \in Sinks |-> [p \in Positions |-> IF MaxEmpty = 0 THEN "rows" ELSE "?"]]
    /\ zPuts = {}
    /\ phase = "running"
    /\ runBase = 1
    /\ nextId = 1
    /\ lastTrig = 0
    /\ runRestore = 0
    /\ restoreTo = 0
    /\ restarts = 0
    /\ inflight = {}
    /\ failedAt = 0
    /\ errorDue = FALSE
    /\ discarded = {}
    /\ acked = FreshAcks
    /\ nacked = FreshAcks
    /\ pipeC = 0
    /\ pipeStage = "none"
    /\ srcNext = 1
    /\ srcPos = 0
    /\ srcWait = FALSE
    /\ asked = FALSE
    /\ sinkUp = [s \in Sinks |-> "open"]
    /\ lastBar = [s \in Sinks |-> 0]
    /\ prepC = [s \in Sinks |-> 0]
    /\ comC = [s \in Sinks |-> 0]
    /\ pending = [s \in Sinks |-> {}]
    /\ commitQ = [s \in Sinks |-> <<>>]
    /\ committedC = FreshAcks
    /\ deaths = 0
    /\ supersessions = 0
    /\ snapFails = 0
    /\ taskErrors = 0
    /\ KInit

-----------------------------------------------------------------------------
(* Checkpoint steps 1-9 (PROTOCOL.md "Steps of a checkpoint c")            *)

\* Step 0, the source asks.  engine/src/runtime/task/source.rs,
\* SourceTask::request_checkpoint: after its N records the source sends
\* RequestCheckpoint and waits for a trigger (it reads ahead a bounded
\* number of records meanwhile, then reads nothing more), and asks nothing
\* more until one reaches it.  It asks while it has input (the model's
\* input: one interval per id); a trigger already on its way (another's)
\* answers it too.  No trace event of its own (a hidden step before the
\* Trigger line).
SourceAsks ==
    /\ phase = "running"
    /\ ~srcWait
    /\ nextId <= MaxCkpt
    /\ srcWait' = TRUE
    /\ asked' = TRUE
    /\ UNCHANGED <<disk, input, zPuts, coord, srcNext, srcPos, sinkUp, lastBar, prepC, comC,
                   pending, commitQ, committedC, faults, kvars>>

\* Another request: the coordinator's interval timer ticks, or another
\* source subtask asks.  Nobody waits on it, and it is not the engine's to
\* take (no fairness): a job whose only requester is a waiting source gets
\* no trigger from it.  No trace event (a hidden step before a Trigger line).
OtherAsks ==
    /\ phase = "running"
    /\ ~asked
    /\ nextId <= MaxCkpt
    /\ asked' = TRUE
    /\ UNCHANGED <<disk, input, zPuts, coord, srcNext, srcPos, srcWait, sinkUp, lastBar, prepC,
                   comC, pending, commitQ, committedC, faults, kvars>>

\* MUTANT drop_request_at_bound: a request that comes while MaxInFlight
\* checkpoints are in flight is dropped rather than held for the next
\* decision; the source, which waits for its trigger, is never answered.
DropRequest ==
    /\ Bug = "drop_request_at_bound"
    /\ phase = "running"
    /\ asked
    /\ Cardinality(inflight) >= MaxInFlight
    /\ asked' = FALSE
    /\ UNCHANGED <<disk, input, zPuts, coord, srcNext, srcPos, srcWait, sinkUp, lastBar, prepC,
                   comC, pending, commitQ, committedC, faults, kvars>>

\* Step 1, Trigger.  engine/src/runtime/coordinator.rs, Coordinator::trigger
\* (runtime/protocol/mod.rs, Protocol::request): answers the source's request:
\* allocates nextId and sends TriggerCheckpoint(c) to the source subtask.  A
\* request that comes at the bound (MaxInFlight in flight) is held and
\* answered by the first trigger a decision makes room for.  Not while a
\* restart is due (the coordinator thread goes from a failed decision or a
\* Failed frame straight to RestartOnError).
Trigger ==
    /\ phase = "running"
    /\ ~RestartDue
    /\ nextId <= MaxCkpt
    /\ Cardinality(inflight) < MaxInFlight
    /\ asked
    /\ asked' = FALSE
    /\ inflight' = inflight \cup {nextId}
    /\ nextId' = nextId + 1
    /\ lastTrig' = nextId
    /\ UNCHANGED <<disk, input, zPuts, phase, runBase, runRestore, restoreTo, restarts,
                   failedAt, errorDue, discarded, acked, nacked, pipeC, pipeStage, srcNext,
                   srcPos, srcWait, sinkUp, lastBar, prepC, comC, pending, commitQ, committedC,
                   faults, kvars>>

\* Step 2, DeliverBarrier.  engine/src/runtime/task.rs, SourceTask::checkpoint,
\* the source subtask on TriggerCheckpoint(c): cuts the input after the one
\* position of interval c, writes its position snapshot durably, acks (a
\* stutter here: the source's ack is this step) and emits barrier c after
\* every record of the interval.  The next state is fault point
\* source.after_position_snapshot@c, and, for every sink that has not
\* prepared c yet, sink.before_prepare@c.  Sinks may still be opening: the
\* barrier waits in their input.
DeliverBarrier ==
    /\ phase \in TasksRun
    /\ srcNext < nextId
    /\ cutOf' = [cutOf EXCEPT ![srcNext] = srcPos + 1]
    /\ dlv' = [dlv EXCEPT ![srcNext] = IF @ < 2 THEN @ + 1 ELSE 2]
    /\ srcPos' = srcPos + 1
    /\ srcNext' = srcNext + 1
    /\ srcWait' = FALSE            \* the trigger it waited for has come
    /\ UNCHANGED <<snapV, snapHold, staged, published, markV, restored,
                   input, zPuts, coord, asked, sinkUp, lastBar, prepC, comC, pending, commitQ,
                   committedC, faults, kvars>>

\* A sink subtask's thread is free: open, and not between a prepare and its
\* ack, nor between taking a commit frame and committing it.
SinkFree(s) ==
    /\ phase \in TasksRun
    /\ sinkUp[s] = "open"
    /\ prepC[s] = 0
    /\ comC[s] = 0

\* Step 4, sink prepare with rows.  engine/src/operators/staged_sink.rs,
\* StagedFileSink::prepare, called from SinkTask::prepare_and_ack
\* (engine/src/runtime/task.rs) at the aligned barrier c: seals interval c
\* into .staged/part-<s>-<c> durably; the handle of c.  Next state: fault
\* point sink.after_prepare@c.
RSinkPrepare(s) ==
    LET c == NextBarrier(s)
        p == Pos(c)
    IN
    /\ SinkFree(s)
    /\ BarrierWaiting(s)
    /\ input[s][p] # "empty"
    /\ input' = [input EXCEPT ![s][p] = "rows"]
    /\ lastBar' = [lastBar EXCEPT ![s] = c]
    /\ prepC' = [prepC EXCEPT ![s] = c]
    /\ CASE Bug = "commit_at_barrier" ->
              \* MUTANT: one-phase: the rows are published at the barrier.
              /\ published' = [published EXCEPT ![s] = @ \cup {c}]
              /\ UNCHANGED <<staged, pending>>
         [] Bug = "ack_before_durable" ->
              \* MUTANT: the handle is taken, the file is sealed only at commit.
              /\ pending' = [pending EXCEPT ![s] = @ \cup {c}]
              /\ UNCHANGED <<staged, published>>
         [] OTHER ->
              /\ staged' = [staged EXCEPT ![s] = @ \cup {c}]
              /\ pending' = [pending EXCEPT ![s] = @ \cup {c}]
              /\ UNCHANGED published
    /\ UNCHANGED <<cutOf, dlv, snapV, snapHold, markV, restored, zPuts, coord, srcNext,
                   srcPos, srcWait, asked, sinkUp, comC, commitQ, committedC, faults, kvars>>

\* Step 4, empty prepare.  engine/src/operators/staged_sink.rs,
\* StagedFileSink::prepare returning Prepared::EMPTY: interval c brought the
\* sink no rows; it seals nothing.  The input decides, so a position found
\* empty is empty on every replay.
SinkPrepareEmpty(s) ==
    LET c == NextBarrier(s)
        p == Pos(c)
    IN
    /\ SinkFree(s)
    /\ BarrierWaiting(s)
    /\ input[s][p] # "rows"
    /\ input[s][p] = "empty" \/ EmptyCount < MaxEmpty
    /\ input' = [input EXCEPT ![s][p] = "empty"]
    /\ lastBar' = [lastBar EXCEPT ![s] = c]
    /\ prepC' = [prepC EXCEPT ![s] = c]
    /\ UNCHANGED <<disk, zPuts, coord, srcNext, srcPos, srcWait, asked, sinkUp, comC, pending, commitQ,
                   committedC, faults, kvars>>

\* Record an ack at the coordinator; acks of a checkpoint already decided
\* (discarded), and every frame after a restart's cancel, are dropped.
RecordAck(set, s, c) ==
    IF CoordActs /\ c \in inflight THEN [set EXCEPT ![c] = @ \cup {s}] ELSE set

\* Step 5, sink ack.  engine/src/runtime/task.rs, SinkTask::prepare_and_ack:
\* the sink's snapshot (StagedFileSink::snapshot), holding every handle it
\* has sealed and not published, is written durably, then the ack frame
\* (SubtaskAck ok=true) is sent.
SinkAck(s) ==
    LET c == prepC[s] IN
    /\ phase \in TasksRun
    /\ c # 0
    /\ snapV' = [snapV EXCEPT ![s][c] = dlv[c]]
    /\ snapHold' = [snapHold EXCEPT ![s][c] = pending[s]]
    /\ acked' = RecordAck(acked, s, c)
    /\ prepC' = [prepC EXCEPT ![s] = 0]
    /\ UNCHANGED <<cutOf, dlv, staged, published, markV, restored, input, zPuts, phase,
                   runBase, nextId, lastTrig, runRestore, restoreTo, restarts, inflight,
                   failedAt, errorDue, discarded, nacked, pipeC, pipeStage, srcNext, srcPos, srcWait, asked,
                   sinkUp, lastBar, comC, pending, commitQ, committedC, faults, kvars>>

\* Step 5 when the snapshot write fails (an I/O error, or fault point
\* checkpoint.snapshot_fails@c; budgeted).  engine/src/runtime/task.rs,
\* SinkTask::prepare_and_ack, the Err arm: StagedFileSink::abort deletes the
\* staged file of c and forgets its handle, and the sink acks ok=false.
RSinkPrepareFails(s) ==
    LET c == prepC[s] IN
    /\ phase \in TasksRun
    /\ c # 0
    /\ snapFails < MaxSnapFails
    /\ snapFails' = snapFails + 1
    /\ staged' = [staged EXCEPT ![s] = @ \ {c}]
    /\ pending' = [pending EXCEPT ![s] = @ \ {c}]
    /\ nacked' = RecordAck(nacked, s, c)
    /\ prepC' = [prepC EXCEPT ![s] = 0]
    /\ UNCHANGED <<cutOf, dlv, snapV, snapHold, published, markV, restored, input, zPuts,
                   phase, runBase, nextId, lastTrig, runRestore, restoreTo, restarts,
                   inflight, failedAt, errorDue, discarded, acked, pipeC, pipeStage, srcNext,
                   srcPos, srcWait, asked, sinkUp, lastBar, comC, commitQ, committedC, deaths,
                   supersessions, taskErrors, kvars>>

\* Step 6 applies to the lowest checkpoint in flight once its last ack is in
\* (acks from one subtask arrive in id order, so checkpoints complete in id
\* order) and the coordinator has finished the previous completion.
Decidable(c) ==
    /\ CoordActs
    /\ pipeC = 0
    /\ (~errorDue \/ phase = "draining")
    /\ (failedAt = 0 \/ Bug = "complete_above_failed")
    /\ inflight # {}
    /\ c = Min(inflight)
    /\ c < srcNext                        \* the source has acked
    /\ acked[c] \cup nacked[c] = Sinks    \* every sink has acked

\* Step 6, all ok: CoordComplete(outcome=completed).
\* engine/src/runtime/coordinator.rs, Coordinator::on_ack then complete.
\* Next state: fault point coordinator.before_completed_marker@c.
CoordCompleted(c) ==
    /\ Decidable(c)
    /\ nacked[c] = {}
    /\ inflight' = inflight \ {c}
    /\ pipeC' = c
    /\ pipeStage' = "decided"
    /\ UNCHANGED <<disk, input, zPuts, phase, runBase, nextId, lastTrig, runRestore,
                   restoreTo, restarts, failedAt, errorDue, discarded, acked, nacked, tasks,
                   faults, kvars>>

\* Step 6, some ack failed: CoordComplete(outcome=failed), and every
\* checkpoint above c still in flight CoordComplete(outcome=discarded), all in
\* the one handler (engine/src/runtime/coordinator.rs, Coordinator::fail).
\* No marker is ever written for them.
CoordFailed(c) ==
    /\ Decidable(c)
    /\ phase = "running"
    /\ nacked[c] # {}
    /\ IF Bug = "complete_above_failed"
          \* MUTANT: the checkpoints above stay in flight and may complete
          \* while the job rewinds.
          THEN /\ inflight' = inflight \ {c}
               /\ UNCHANGED discarded
          ELSE /\ inflight' = {}
               /\ discarded' = discarded \cup (inflight \ {c})
    /\ failedAt' = CASE Bug = "no_rewind_on_failed_checkpoint" -> 0
                                    \* MUTANT: the job carries on.
                     [] failedAt # 0 -> failedAt
                     [] OTHER -> c
    /\ UNCHANGED <<disk, input, zPuts, phase, runBase, nextId, lastTrig, runRestore,
                   restoreTo, restarts, errorDue, acked, nacked, pipeC, pipeStage, tasks,
                   faults, kvars>>

\* Step 6 as events.txt names it: CoordComplete, whatever the outcome.
CoordComplete(c) == CoordCompleted(c) \/ CoordFailed(c)

\* Step 7, durable marker.  engine/src/runtime/coordinator.rs,
\* Coordinator::write_marker: COMPLETED-<c> (temporary name, fsync, rename,
\* directory fsync), then the WriteCompleted line.  Next state:
\* coordinator.after_completed_marker@c, which is also
\* coordinator.before_commit_broadcast@c.
WriteCompleted ==
    /\ CoordActs
    /\ pipeC # 0
    /\ IF Bug = "broadcast_before_marker"
          \* MUTANT: the marker follows the broadcast and every Committed(c).
          THEN /\ pipeStage = "broadcast"
               /\ committedC[pipeC] = Sinks
               /\ pipeC' = 0
               /\ pipeStage' = "none"
          ELSE /\ pipeStage = "decided"
               /\ pipeStage' = "marked"
               /\ UNCHANGED pipeC
    /\ markV' = [markV EXCEPT ![pipeC] = dlv[pipeC]]
    /\ UNCHANGED <<cutOf, dlv, snapV, snapHold, staged, published, restored, input, zPuts,
                   phase, runBase, nextId, lastTrig, runRestore, restoreTo, restarts,
                   inflight, failedAt, errorDue, discarded, acked, nacked, tasks, faults, kvars>>

\* Step 8, broadcast.  engine/src/runtime/coordinator.rs,
\* Coordinator::broadcast: CommitCheckpoint(c) to every sink subtask, only
\* once COMPLETED-<c> is durable.
Broadcast ==
    /\ CoordActs
    /\ pipeC # 0
    /\ IF Bug = "broadcast_before_marker"
          THEN /\ pipeStage = "decided"
               /\ pipeStage' = "broadcast"
               /\ UNCHANGED pipeC
          ELSE /\ pipeStage = "marked"
               /\ pipeC' = 0
               /\ pipeStage' = "none"
    /\ commitQ' = [s \in Sinks |-> Append(commitQ[s], pipeC)]
    /\ UNCHANGED <<disk, input, zPuts, phase, runBase, nextId, lastTrig, runRestore,
                   restoreTo, restarts, inflight, failedAt, errorDue, discarded, acked,
                   nacked, srcNext, srcPos, srcWait, asked, sinkUp, lastBar, prepC, comC, pending,
                   committedC, faults, kvars>>

\* Step 9, DeliverCommit.  engine/src/runtime/task.rs, SinkTask::commit: the
\* sink subtask takes the next CommitCheckpoint frame.  Next state:
\* sink.before_commit@c.
DeliverCommit(s) ==
    /\ SinkFree(s)
    /\ commitQ[s] # <<>>
    \* The commit-confirmed family: the worker's one dispatch thread takes the
    \* next CommitCheckpoint only once the previous commit's callback has
    \* returned and its CommitConfirmed is sent.
    /\ Family = "confirmed" => confirmDue[s] = 0 /\ rcptDue[s] = 0
    /\ comC' = [comC EXCEPT ![s] = Head(commitQ[s])]
    /\ commitQ' = [commitQ EXCEPT ![s] = Tail(@)]
    /\ UNCHANGED <<disk, input, zPuts, coord, srcNext, srcPos, srcWait, asked, sinkUp, lastBar, prepC,
                   pending, committedC, faults, kvars>>

\* The handles a CommitCheckpoint(c) publishes: those the sink holds in
\* memory with id <= c.  Never a file merely found in .staged/, which may be
\* a leftover of an earlier deploy until the open removes it.
CommitPublishesOnlyHeldHandles(s, c) == {h \in pending[s] : h <= c}

\* Step 9, SinkCommit.  engine/src/operators/staged_sink.rs,
\* StagedFileSink::commit: publishes every handle with id <= c, in id order
\* (rename out of .staged/, fsync), skipping one already published; then
\* Committed(c) goes to the coordinator.  Next state: sink.after_commit@c.
RSinkCommit(s) ==
    LET c == comC[s]
        H == IF Bug = "commit_above_checkpoint"
                THEN pending[s]          \* MUTANT: every handle it holds
                ELSE CommitPublishesOnlyHeldHandles(s, c)
    IN
    /\ phase \in TasksRun
    /\ c # 0
    /\ published' = [published EXCEPT ![s] = @ \cup H]
    /\ staged' = [staged EXCEPT ![s] = @ \ H]
    /\ pending' = [pending EXCEPT ![s] = @ \ H]
    /\ comC' = [comC EXCEPT ![s] = 0]
    /\ committedC' = IF Bug = "broadcast_before_marker"
                        THEN [committedC EXCEPT ![c] = @ \cup {s}]
                        ELSE committedC
    /\ UNCHANGED <<cutOf, dlv, snapV, snapHold, markV, restored, input, zPuts, coord,
                   srcNext, srcPos, srcWait, asked, sinkUp, lastBar, prepC, commitQ, faults, kvars>>

-----------------------------------------------------------------------------
(* Failure of a checkpoint, recovery and redeploy                          *)

\* Every in-memory variable of a deploy, reset (a cancel or a death).
ResetDeploy ==
    /\ inflight' = {}
    /\ failedAt' = 0
    /\ errorDue' = FALSE
    /\ discarded' = {}
    /\ acked' = FreshAcks
    /\ nacked' = FreshAcks
    /\ pipeC' = 0
    /\ pipeStage' = "none"
    /\ srcNext' = 0
    /\ srcPos' = 0
    /\ srcWait' = FALSE
    /\ asked' = FALSE
    /\ sinkUp' = [s \in Sinks |-> "opening"]
    /\ lastBar' = [s \in Sinks |-> 0]
    /\ prepC' = [s \in Sinks |-> 0]
    /\ comC' = [s \in Sinks |-> 0]
    /\ pending' = [s \in Sinks |-> {}]
    /\ commitQ' = [s \in Sinks |-> <<>>]
    /\ committedC' = FreshAcks

\* What a cancelled sink leaves of its staged files (the drain of a restart,
\* or the job failing): all of them (engine/src/runtime/task.rs, the Cancel
\* arm of SinkTask::run returns without touching them).
CancelledStaged ==
    IF Bug = "close_aborts_prepared"
       \* MUTANT: a cancelled sink deletes the staged files it holds.
       THEN [s \in Sinks |-> staged[s] \ pending[s]]
       ELSE staged

\* Fault: a subtask fails (an I/O error, a protocol error in open(), ...) and
\* its Failed frame reaches engine/src/runtime/coordinator.rs
\* (Coordinator::on_frame) between two other frames.  The coordinator
\* restarts the job (RestartOnError with ckpt = 0) or, with no budget left,
\* fails it.  Budget MaxTaskErrors.
SubtaskFails ==
    /\ phase = "running"
    /\ pipeC = 0
    /\ ~RestartDue
    /\ taskErrors < MaxTaskErrors
    /\ taskErrors' = taskErrors + 1
    /\ errorDue' = TRUE
    /\ UNCHANGED <<disk, input, zPuts, phase, runBase, nextId, lastTrig, runRestore,
                   restoreTo, restarts, inflight, failedAt, discarded, acked, nacked, pipeC,
                   pipeStage, tasks, deaths, supersessions, snapFails, kvars>>

\* RestartOnError.  engine/src/runtime/coordinator.rs,
\* Coordinator::restart_on_error: a checkpoint was decided failed (ckpt = it),
\* or a subtask failed (ckpt = 0), and the process has restart budget left.
\* The coordinator cancels every subtask (shut_down) and drops their frames
\* from now on; checkpoints still in flight are discarded (their
\* CoordComplete lines follow the drain).  The subtasks run on until each
\* notices the cancel (phase "draining": a sink may still prepare, ack or
\* commit, the source deliver a barrier it had).
RestartOnError ==
    /\ phase = "running"
    /\ pipeC = 0
    /\ RestartDue
    /\ restarts < RestartBudget
    /\ restarts' = restarts + 1
    /\ phase' = "draining"
    /\ IF Bug = "broadcast_during_drain"
          \* MUTANT: what is in flight stays decidable through the drain.
          THEN UNCHANGED <<inflight, discarded>>
          ELSE /\ inflight' = {}
               /\ discarded' = discarded \cup inflight
    \* Unguarded RestoredPassesOverNothing: the restore point is chosen here,
    \* before the drain.
    /\ restoreTo' = IF Guarded("RestoredPassesOverNothing") THEN restoreTo ELSE RestorePoint(FALSE)
    /\ UNCHANGED <<disk, input, zPuts, runBase, nextId, lastTrig, runRestore, failedAt,
                   errorDue, acked, nacked, pipeC, pipeStage, tasks, faults, kvars>>

\* The drain ends: every subtask's thread has stopped (shut_down in
\* engine/src/runtime/coordinator.rs), and the coordinator applies the
\* restore rule (Coordinator::redeploy, restore_point_on_disk) and
\* continues at Redeploy.  No trace event of its own.  The coordinator keeps
\* its next id.  Choosing here, once nothing can complete any more, is the
\* guard RestoredPassesOverNothing.
RRestartDrained ==
    /\ phase = "draining"
    /\ pipeC = 0
    /\ phase' = "deploying"
    /\ restoreTo' = IF Guarded("RestoredPassesOverNothing") THEN RestorePoint(FALSE) ELSE restoreTo
    /\ runBase' = 0
    /\ staged' = CancelledStaged
    /\ ResetDeploy
    /\ UNCHANGED <<cutOf, dlv, snapV, snapHold, published, markV, restored, input, zPuts,
                   nextId, lastTrig, runRestore, restarts, faults, kvars>>

\* The job fails (exit 1) when a restart is due and no budget is left:
\* nothing above a failed checkpoint completed.  engine/src/runtime/
\* coordinator.rs, Coordinator::restart_on_error returning RunError::Failed.
JobFails ==
    /\ phase = "running"
    /\ pipeC = 0
    /\ RestartDue
    /\ restarts >= RestartBudget
    /\ ~(Bug = "sail_on_without_budget" /\ failedAt # 0)
    /\ phase' = "failed"
    /\ nextId' = 0
    /\ runBase' = 0
    /\ staged' = CancelledStaged
    /\ ResetDeploy
    /\ KTasksFresh
    /\ KCoordGone
    /\ lostQ' = [s \in Sinks |-> <<>>]
    /\ lostRcpt' = [s \in Sinks |-> 0]
    /\ lostPend' = [s \in Sinks |-> {}]
    /\ UNCHANGED <<cutOf, dlv, snapV, snapHold, published, markV, restored, input, zPuts,
                   lastTrig, runRestore, restoreTo, restarts, faults, kdisk, broker, kfaults,
                   zombie>>

\* MUTANT sail_on_without_budget: with the budget spent, the failed
\* checkpoint is forgotten and the job runs on.
SailOn ==
    /\ Bug = "sail_on_without_budget"
    /\ phase = "running"
    /\ failedAt # 0
    /\ restarts >= RestartBudget
    /\ failedAt' = 0
    /\ UNCHANGED <<disk, input, zPuts, phase, runBase, nextId, lastTrig, runRestore,
                   restoreTo, restarts, inflight, errorDue, discarded, acked, nacked, pipeC,
                   pipeStage, tasks, faults, kvars>>

\* Every in-memory variable of a process, gone.
ProcessGone ==
    /\ phase' = "down"
    /\ nextId' = 0
    /\ lastTrig' = 0
    /\ runBase' = 0
    /\ restoreTo' = 0
    /\ restarts' = 0
    /\ ResetDeploy
    /\ KTasksFresh
    /\ KCoordGone
    /\ lostQ' = [s \in Sinks |-> <<>>]
    /\ lostRcpt' = [s \in Sinks |-> 0]
    /\ lostPend' = [s \in Sinks |-> {}]

\* Fault: the process dies (SIGKILL at any fault point, or any step), or a
\* failed job's process exits and is run again.  Only the disk survives.
Die ==
    /\ phase # "down"
    /\ deaths < MaxDeaths
    /\ deaths' = deaths + 1
    /\ ProcessGone
    /\ UNCHANGED <<disk, input, zPuts, runRestore, supersessions, snapFails, taskErrors,
                   kdisk, broker, kfaults, zombie>>

\* Fault: a second `clink run` over the same checkpoint directory takes the
\* job over while this one is still alive (a supervisor gave up on it).  The
\* fencing the engine is to implement (formal/README.md, "Engine changes
\* this specification requires", E1): the new run claims the next epoch
\* durably before it reads anything, and the old one checks the epoch before
\* every durable step and stops at the first check it fails.  A write that
\* had passed its check still lands, later: the model keeps the one that
\* can matter, the COMPLETED put of a checkpoint already decided (zPuts).
\* The old run's other late writes cannot touch the new run's state (E1
\* says why), and its sinks publish nothing the new run's open does not
\* re-commit.  The old run's memory leaves the model, and the new run goes
\* on as after a death (CoordRecovers).  An exclusive lock held for the
\* process's life admits no takeover at all: a subset of these behaviours.
Supersede ==
    /\ phase \in {"running", "draining", "deploying"}
    /\ supersessions < MaxSupersede
    /\ supersessions' = supersessions + 1
    /\ zPuts' = IF pipeStage = "decided" THEN zPuts \cup {<<pipeC, dlv[pipeC]>>} ELSE zPuts
    \* The commit-confirmed family: a running coordinator's trigger loop may
    \* still send one TriggerCheckpoint under its superseded epoch.
    /\ zTrig' = (Family = "confirmed" /\ phase = "running")
    /\ ProcessGone
    /\ UNCHANGED <<disk, input, runRestore, deaths, snapFails, taskErrors,
                   kdisk, broker, kfaults, staleActed>>

\* A superseded coordinator's COMPLETED put lands, at any later time
\* (engine/src/runtime/coordinator.rs, Coordinator::write_marker, in the
\* superseded process, past its epoch check): the marker is on disk, with
\* the vintage it was decided at; nothing is published for it (its sinks
\* fail their epoch check before any commit).
StaleMarkerLands ==
    \E z \in zPuts :
        /\ markV' = [markV EXCEPT ![z[1]] = z[2]]
        /\ zPuts' = zPuts \ {z}
        /\ UNCHANGED <<cutOf, dlv, snapV, snapHold, staged, published, restored, input,
                       coord, tasks, faults, kvars>>

\* Recovery step 1, CoordRecovers.  engine/src/runtime/coordinator.rs,
\* Coordinator::recover: a new `clink run` over the same directory reads
\* the markers and the RESTORED record once and chooses the restore point R
\* (restore_point_on_disk).  Next state: coordinator.before_restored_record@R.
RCoordRecovers ==
    /\ phase = "down"
    /\ phase' = "deploying"
    /\ restoreTo' = RestorePoint(TRUE)
    /\ UNCHANGED <<disk, input, zPuts, runBase, nextId, lastTrig, runRestore, restarts,
                   inflight, failedAt, errorDue, discarded, acked, nacked, pipeC, pipeStage,
                   tasks, faults, kvars>>

\* Recovery steps 2-4, Redeploy (after a recovery or a RestartOnError).
\* engine/src/runtime/coordinator.rs, Coordinator::redeploy: next :=
\* RedeployNext(R); RESTORED {restored_from: R, next} is written durably
\* before any frame (write_restored); the subtasks are deployed
\* (Coordinator::deploy), the source at R's position, each sink opening from
\* its snapshot of R.
Redeploy ==
    LET R == restoreTo
        N == RedeployNext(R)
    IN
    /\ phase = "deploying"
    /\ restored' = IF Bug = "no_restored_record"
                      THEN restored     \* MUTANT: no record is written
                      ELSE <<R, N>>
    /\ phase' = "running"
    /\ runBase' = N
    /\ nextId' = N
    /\ runRestore' = R
    /\ srcNext' = N
    /\ srcPos' = Pos(R)
    /\ lastBar' = [s \in Sinks |-> N - 1]
    /\ UNCHANGED <<cutOf, dlv, snapV, snapHold, staged, published, markV, input, zPuts,
                   lastTrig, restoreTo, restarts, inflight, failedAt, errorDue, discarded,
                   acked, nacked, pipeC, pipeStage, srcWait, asked, sinkUp, prepC, comC,
                   pending, commitQ, committedC, faults, kvars>>

\* Recovery step 5, SinkOpens.  engine/src/operators/staged_sink.rs,
\* StagedFileSink::open, from SinkTask::run: re-commits every handle the
\* sink's snapshot of R holds (a published one is skipped), then deletes
\* every staged file of its own that snapshot does not hold.
RecoverableOpen(s) ==
    LET H == Held(s, runRestore) IN
    CASE Bug = "no_recommit_at_open" ->
            \* MUTANT: the restored handles are neither re-committed nor
            \* kept (the engine's switch clears them); their files stay staged.
            /\ staged' = [staged EXCEPT ![s] = @ \cap H]
            /\ pending' = [pending EXCEPT ![s] = {}]
            /\ UNCHANGED published
      [] Bug = "recommit_unheld_at_open" ->
            \* MUTANT: every staged file found is committed.
            /\ published' = [published EXCEPT ![s] = @ \cup staged[s]]
            /\ staged' = [staged EXCEPT ![s] = {}]
            /\ pending' = [pending EXCEPT ![s] = {}]
      [] Bug = "no_cleanup_at_open" ->
            \* MUTANT: staged files R does not hold are left on disk.
            /\ published' = [published EXCEPT ![s] = @ \cup (H \cap staged[s])]
            /\ staged' = [staged EXCEPT ![s] = @ \ H]
            /\ pending' = [pending EXCEPT ![s] = {}]
      [] OTHER ->
            /\ published' = [published EXCEPT ![s] = @ \cup (H \cap staged[s])]
            /\ staged' = [staged EXCEPT ![s] = {}]
            /\ pending' = [pending EXCEPT ![s] = {}]

RSinkOpens(s) ==
    /\ phase \in TasksRun
    /\ sinkUp[s] = "opening"
    /\ sinkUp' = [sinkUp EXCEPT ![s] = "open"]
    /\ RecoverableOpen(s)
    /\ UNCHANGED <<cutOf, dlv, snapV, snapHold, markV, restored, input, zPuts, coord,
                   srcNext, srcPos, srcWait, asked, lastBar, prepC, comC, commitQ, committedC,
                   faults, kvars>>

-----------------------------------------------------------------------------
(* The commit-confirmed family ("confirmed")                               *)
(*                                                                         *)
(* A transactional Kafka sink: one transactional id per sink subtask, one  *)
(* transaction sealed at every barrier (records or none), prepare = flush  *)
(* inside the open transaction, commit on CommitCheckpoint.  The broker is *)
(* the transaction coordinator: a transaction it committed is in           *)
(* `published` (what a read_committed consumer sees), and only the newest  *)
(* transaction begun on an id has a describable outcome (curTxn, txnSt).   *)
(* A commit cannot be executed again once its owner is gone, so the job    *)
(* restores from the newest CONFIRMED checkpoint and settles what lies     *)
(* above it: commit receipts, the in-doubt walk, .unresolved markers, the  *)
(* open's pre-fence describe and replay suppression.                       *)
(* The engine's sites: engine/src/runtime/task/sink/confirmed.rs (the     *)
(* sink's prepare, commit, receipt, finish, confirmation and open),        *)
(* runtime/coordinator/walk.rs (CONFIRMED markers, the held restart, the   *)
(* walk), runtime/protocol/confirm.rs (the count); engine/PROTOCOL.md.     *)

\* Step 4 for a Kafka sink.  The sink's task thread at barrier c, once the
\* previous transaction is finished (SinkFinish): the records of interval c
\* were written into transaction c, which is flushed (prepared) here.  A
\* position replay suppression armed at open is swallowed at emission: the
\* transaction carries nothing (hollow).  Next state: sink.after_prepare@c.
KSinkPrepare(s) ==
    LET c == NextBarrier(s)
        p == Pos(c)
    IN
    /\ SinkFree(s)
    /\ BarrierWaiting(s)
    /\ pending[s] = {}
    /\ curTxn' = [curTxn EXCEPT ![s] = c]
    /\ txnSt' = [txnSt EXCEPT ![s] = "ongoing"]
    /\ hollow' = IF p \in supp[s] THEN [hollow EXCEPT ![s] = @ \cup {c}] ELSE hollow
    /\ lastBar' = [lastBar EXCEPT ![s] = c]
    /\ prepC' = [prepC EXCEPT ![s] = c]
    /\ pending' = [pending EXCEPT ![s] = {c}]
    /\ UNCHANGED <<cutOf, dlv, snapV, snapHold, staged, published, markV, restored, input,
                   zPuts, phase, runBase, nextId, lastTrig, runRestore, restoreTo,
                   restarts, inflight, failedAt, errorDue, discarded, acked, nacked, pipeC,
                   pipeStage, srcNext, srcPos, srcWait, asked, sinkUp, comC, commitQ, committedC, deaths,
                   supersessions, snapFails, taskErrors, receipt, confMarks, unres, confPt,
                   confPut, walkC, walkOk, walkBad, kst, rcptDue, confirmDue, supp, openSt,
                   lostQ, lostRcpt, walkStops, lostRunning, zTrig, staleActed, lostPend, expiries>>

\* Step 5 when the snapshot write fails: the sink aborts transaction c and
\* acks ok=false.
KSinkPrepareFails(s) ==
    LET c == prepC[s] IN
    /\ phase \in TasksRun
    /\ c # 0
    /\ snapFails < MaxSnapFails
    /\ snapFails' = snapFails + 1
    /\ txnSt' = [txnSt EXCEPT ![s] = "aborted"]
    /\ pending' = [pending EXCEPT ![s] = {}]
    /\ nacked' = RecordAck(nacked, s, c)
    /\ prepC' = [prepC EXCEPT ![s] = 0]
    /\ UNCHANGED <<cutOf, dlv, snapV, snapHold, staged, published, markV, restored, input,
                   zPuts, phase, runBase, nextId, lastTrig, runRestore, restoreTo,
                   restarts, inflight, failedAt, errorDue, discarded, acked, pipeC,
                   pipeStage, srcNext, srcPos, srcWait, asked, sinkUp, lastBar, comC, commitQ, committedC,
                   deaths, supersessions, taskErrors, receipt, confMarks, unres, curTxn,
                   hollow, confPt, confPut, walkC, walkOk, walkBad, kst, rcptDue,
                   confirmDue, supp, openSt, lostQ, lostRcpt, walkStops, lostRunning, zTrig, staleActed, lostPend, expiries>>

\* Step 9 for a Kafka sink, SinkCommit: commit_transaction for c, executed by
\* the broker.  Next state: sink.between_commit_and_receipt@c.
KSinkCommit(s) ==
    LET c == comC[s] IN
    /\ phase \in TasksRun
    /\ c # 0
    /\ kst[s] = "taken"
    /\ curTxn[s] = c
    /\ txnSt[s] = "ongoing"
    /\ txnSt' = [txnSt EXCEPT ![s] = "committed"]
    /\ published' = [published EXCEPT ![s] = @ \cup {c}]
    /\ kst' = [kst EXCEPT ![s] = "committed"]
    /\ rcptDue' = [rcptDue EXCEPT ![s] = c]
    /\ UNCHANGED <<cutOf, dlv, snapV, snapHold, staged, markV, restored, input, zPuts,
                   phase, runBase, nextId, lastTrig, runRestore, restoreTo, restarts,
                   inflight, failedAt, errorDue, discarded, acked, nacked, pipeC,
                   pipeStage, srcNext, srcPos, srcWait, asked, sinkUp, lastBar, prepC, comC, pending,
                   commitQ, committedC, deaths, supersessions, snapFails, taskErrors,
                   receipt, confMarks, unres, curTxn, hollow, confPt, confPut, walkC,
                   walkOk, walkBad, confirmDue, supp, openSt, lostQ, lostRcpt, walkStops,
                   lostRunning, zTrig, staleActed, lostPend, expiries>>

\* SinkReceipt: the commit receipt receipts/<s>/<c> made durable the instant
\* the broker acknowledged the commit.  Next state: sink.after_external_commit@c.
SinkReceipt(s) ==
    LET c == rcptDue[s] IN
    /\ Family = "confirmed"
    /\ phase \in TasksRun
    /\ c # 0
    /\ receipt' = IF Bug = "no_receipts"
                     THEN receipt        \* MUTANT: no receipt is written
                     ELSE [receipt EXCEPT ![s] = @ \cup {c}]
    /\ rcptDue' = [rcptDue EXCEPT ![s] = 0]
    /\ UNCHANGED <<cutOf, dlv, snapV, snapHold, staged, published, markV, restored, input,
                   zPuts, phase, runBase, nextId, lastTrig, runRestore, restoreTo,
                   restarts, inflight, failedAt, errorDue, discarded, acked, nacked, pipeC,
                   pipeStage, srcNext, srcPos, srcWait, asked, sinkUp, lastBar, prepC, comC, pending,
                   commitQ, committedC, deaths, supersessions, snapFails, taskErrors,
                   confMarks, unres, curTxn, txnSt, hollow, confPt, confPut, walkC, walkOk,
                   walkBad, kst, confirmDue, supp, openSt, lostQ, lostRcpt, walkStops,
                   lostRunning, zTrig, staleActed, lostPend, expiries>>

\* SinkFinish: the tail of the commit callback erases the handle and
\* resolves the open transaction, which frees the task thread for the next
\* prepare.  Only after the receipt: the successor transaction must not begin
\* before it, since beginning it makes the commit's outcome indescribable.
\* Next state: the callback returned, CommitConfirmed not yet sent.
SinkFinish(s) ==
    LET c == comC[s] IN
    /\ Family = "confirmed"
    /\ phase \in TasksRun
    /\ c # 0
    /\ kst[s] = "committed"
    /\ rcptDue[s] = 0 \/ Bug = "receipt_after_begin"   \* MUTANT: the receipt may wait
    /\ comC' = [comC EXCEPT ![s] = 0]
    /\ kst' = [kst EXCEPT ![s] = "taken"]
    /\ pending' = [pending EXCEPT ![s] = @ \ {c}]
    /\ confirmDue' = [confirmDue EXCEPT ![s] = c]
    /\ UNCHANGED <<cutOf, dlv, snapV, snapHold, staged, published, markV, restored, input,
                   zPuts, phase, runBase, nextId, lastTrig, runRestore, restoreTo,
                   restarts, inflight, failedAt, errorDue, discarded, acked, nacked, pipeC,
                   pipeStage, srcNext, srcPos, srcWait, asked, sinkUp, lastBar, prepC, commitQ, committedC,
                   deaths, supersessions, snapFails, taskErrors, receipt, confMarks, unres,
                   curTxn, txnSt, hollow, confPt, confPut, walkC, walkOk, walkBad, rcptDue,
                   supp, openSt, lostQ, lostRcpt, walkStops, lostRunning, zTrig, staleActed, lostPend, expiries>>

\* SinkConfirm: the worker sends CommitConfirmed(c) once the callback has
\* returned; the coordinator counts it unless a restart has begun.
SinkConfirm(s) ==
    LET early == /\ Bug = "confirm_before_commit"
                 /\ comC[s] # 0 /\ kst[s] = "taken" /\ s \notin committedC[comC[s]]
        \* MUTANT: the confirmation goes out as the commit frame is taken.
        c == IF early THEN comC[s] ELSE confirmDue[s]
    IN
    /\ Family = "confirmed"
    /\ phase \in TasksRun
    /\ c # 0
    /\ committedC' = IF phase = "running" THEN [committedC EXCEPT ![c] = @ \cup {s}]
                                          ELSE committedC
    /\ confirmDue' = [confirmDue EXCEPT ![s] = 0]
    /\ UNCHANGED <<cutOf, dlv, snapV, snapHold, staged, published, markV, restored, input,
                   zPuts, phase, runBase, nextId, lastTrig, runRestore, restoreTo,
                   restarts, inflight, failedAt, errorDue, discarded, acked, nacked, pipeC,
                   pipeStage, srcNext, srcPos, srcWait, asked, sinkUp, lastBar, prepC, comC, pending,
                   commitQ, deaths, supersessions, snapFails, taskErrors, receipt,
                   confMarks, unres, curTxn, txnSt, hollow, confPt, confPut, walkC, walkOk,
                   walkBad, kst, rcptDue, supp, openSt, lostQ, lostRcpt, walkStops,
                   lostRunning, zTrig, staleActed, lostPend, expiries>>

\* WriteConfirmed: every sink confirmed c (the state before it is fault point
\* coordinator.before_confirmed_marker@c); the hold takes c out of tracking
\* and the CONFIRMED-<c> put is made durable outside the lock.
WriteConfirmed ==
    /\ Family = "confirmed"
    /\ phase = "running"
    /\ confPut = 0
    /\ \E c \in Ids :
          /\ committedC[c] = Sinks
          /\ committedC' = [committedC EXCEPT ![c] = {}]
          /\ confPut' = c
          /\ IF Bug = "advance_before_confirmed_put"
                \* MUTANT: memory advances first, the put follows.
                THEN /\ confPt' = Max({confPt, c})
                     /\ UNCHANGED confMarks
                ELSE /\ confMarks' = confMarks \cup {c}
                     /\ UNCHANGED confPt
    /\ UNCHANGED <<cutOf, dlv, snapV, snapHold, staged, published, markV, restored, input,
                   zPuts, phase, runBase, nextId, lastTrig, runRestore, restoreTo,
                   restarts, inflight, failedAt, errorDue, discarded, acked, nacked, pipeC,
                   pipeStage, srcNext, srcPos, srcWait, asked, sinkUp, lastBar, prepC, comC, pending,
                   commitQ, deaths, supersessions, snapFails, taskErrors, receipt, unres,
                   curTxn, txnSt, hollow, walkC, walkOk, walkBad, kst, rcptDue, confirmDue,
                   supp, openSt, lostQ, lostRcpt, walkStops, lostRunning, zTrig, staleActed, lostPend, expiries>>

\* AdvanceConfirmed: the second hold advances the in-memory confirmed restore
\* point behind the durable marker.  A restart or a death in between leaves
\* the marker on disk and memory where it was.
AdvanceConfirmed ==
    /\ Family = "confirmed"
    /\ phase = "running"
    /\ confPut # 0
    /\ IF Bug = "advance_before_confirmed_put"
          THEN /\ confMarks' = confMarks \cup {confPut}
               /\ UNCHANGED confPt
          ELSE /\ confPt' = Max({confPt, confPut})
               /\ UNCHANGED confMarks
    /\ confPut' = 0
    /\ UNCHANGED <<cutOf, dlv, snapV, snapHold, staged, published, markV, restored, input,
                   zPuts, phase, runBase, nextId, lastTrig, runRestore, restoreTo,
                   restarts, inflight, failedAt, errorDue, discarded, acked, nacked, pipeC,
                   pipeStage, srcNext, srcPos, srcWait, asked, sinkUp, lastBar, prepC, comC, pending,
                   commitQ, committedC, deaths, supersessions, snapFails, taskErrors,
                   receipt, unres, curTxn, txnSt, hollow, walkC, walkOk, walkBad, kst,
                   rcptDue, confirmDue, supp, openSt, lostQ, lostRcpt, walkStops,
                   lostRunning, zTrig, staleActed, lostPend, expiries>>

\* The restart's drain ends (the recoverable RestartDrained) and the restart
\* is held for in-doubt resolution (RestartProceeds): the walk starts above
\* the in-memory confirmed restore point.  A CONFIRMED put still out turns
\* stale: nothing advances after it.  Next state:
\* coordinator.before_in_doubt_walk.
KRestartDrained ==
    /\ phase = "draining"
    /\ pipeC = 0
    /\ phase' = "resolving"
    /\ restoreTo' = 0
    /\ runBase' = 0
    /\ ResetDeploy
    /\ KTasksFresh
    /\ confPut' = 0
    /\ walkC' = confPt + 1
    /\ walkOk' = {}
    /\ walkBad' = {}
    \* A cancelled Kafka sink leaves its prepared transaction open at the
    \* broker (the walk or the reopened sink's fence decides it).
    /\ txnSt' = IF Bug = "close_aborts_prepared"
                   \* MUTANT: the cancelled sink aborts what it holds prepared.
                   THEN [s \in Sinks |-> IF pending[s] # {} /\ txnSt[s] = "ongoing"
                                          THEN "aborted" ELSE txnSt[s]]
                   ELSE txnSt
    /\ UNCHANGED <<cutOf, dlv, snapV, snapHold, staged, published, markV, restored, input,
                   zPuts, nextId, lastTrig, runRestore, restarts, deaths, supersessions,
                   snapFails, taskErrors, receipt, confMarks, unres, curTxn, hollow,
                   confPt, lostQ, lostRcpt, walkStops, lostRunning, zTrig, staleActed, lostPend, expiries>>

\* CoordRecovers for the family: a new process reads the markers once,
\* seeds the confirmed restore point from the newest CONFIRMED marker, and
\* holds the job for the walk above it.
KCoordRecovers ==
    /\ phase = "down"
    /\ phase' = "resolving"
    /\ confPt' = Max(confMarks)
    /\ walkC' = Max(confMarks) + 1
    /\ UNCHANGED <<cutOf, dlv, snapV, snapHold, staged, published, markV, restored, input,
                   zPuts, runBase, nextId, lastTrig, runRestore, restoreTo, restarts,
                   inflight, failedAt, errorDue, discarded, acked, nacked, pipeC,
                   pipeStage, srcNext, srcPos, srcWait, asked, sinkUp, lastBar, prepC, comC, pending,
                   commitQ, committedC, deaths, supersessions, snapFails, taskErrors,
                   receipt, confMarks, unres, curTxn, txnSt, hollow, confPut, walkOk,
                   walkBad, kst, rcptDue, confirmDue, supp, openSt, lostQ, lostRcpt,
                   walkStops, lostRunning, zTrig, staleActed, lostPend, expiries>>

\* ---------------- the in-doubt walk ----------------
\* Over the COMPLETED checkpoints above the confirmed restore point, in id
\* order.  For each, every sink's handle is proven committed by its receipt
\* (WalkReadsReceipt) or by describing the transaction at the broker
\* (WalkProbes; only the newest transaction on an id is describable), and a
\* proof over the wire is materialised as a receipt.  A checkpoint proven at
\* every sink is confirmed (WalkDecides: the CONFIRMED marker, then memory);
\* one refused at any sink stops the walk.

Resolving == Family = "confirmed" /\ phase = "resolving"

\* A completed checkpoint at or above the walk's position is left.
WalkLeft == \E c \in markers : c >= walkC

\* WalkSkips: an id with no COMPLETED marker.
WalkSkips ==
    /\ Resolving
    /\ WalkLeft
    /\ walkC \notin markers
    /\ walkC' = walkC + 1
    /\ UNCHANGED <<cutOf, dlv, snapV, snapHold, staged, published, markV, restored, input,
                   zPuts, phase, runBase, nextId, lastTrig, runRestore, restoreTo,
                   restarts, inflight, failedAt, errorDue, discarded, acked, nacked, pipeC,
                   pipeStage, srcNext, srcPos, srcWait, asked, sinkUp, lastBar, prepC, comC, pending,
                   commitQ, committedC, deaths, supersessions, snapFails, taskErrors,
                   receipt, confMarks, unres, curTxn, txnSt, hollow, confPt, confPut,
                   walkOk, walkBad, kst, rcptDue, confirmDue, supp, openSt, lostQ,
                   lostRcpt, walkStops, lostRunning, zTrig, staleActed, lostPend, expiries>>

ProvenBy(s, c) == c \in receipt[s] \/ (curTxn[s] = c /\ txnSt[s] = "committed")

\* WalkReadsReceipt / WalkProbes for one sink's handle of walkC.
WalkProbes(s) ==
    /\ Resolving
    /\ walkC \in markers
    /\ s \notin walkOk \cup walkBad
    /\ ~(Bug = "stop_at_first_refusal" /\ walkBad # {})
    /\ IF ProvenBy(s, walkC)
          THEN /\ walkOk' = walkOk \cup {s}
               /\ receipt' = IF walkC \in receipt[s] \/ Bug = "no_materialised_receipts"
                                THEN receipt   \* MUTANT (the latter): the proof stays in memory
                                ELSE [receipt EXCEPT ![s] = @ \cup {walkC}]
               /\ UNCHANGED walkBad
          ELSE /\ walkBad' = walkBad \cup {s}
               /\ UNCHANGED <<walkOk, receipt>>
    /\ UNCHANGED <<cutOf, dlv, snapV, snapHold, staged, published, markV, restored, input,
                   zPuts, phase, runBase, nextId, lastTrig, runRestore, restoreTo,
                   restarts, inflight, failedAt, errorDue, discarded, acked, nacked, pipeC,
                   pipeStage, srcNext, srcPos, srcWait, asked, sinkUp, lastBar, prepC, comC, pending,
                   commitQ, committedC, deaths, supersessions, snapFails, taskErrors,
                   confMarks, unres, curTxn, txnSt, hollow, confPt, confPut, walkC, kst,
                   rcptDue, confirmDue, supp, openSt, lostQ, lostRcpt, walkStops,
                   lostRunning, zTrig, staleActed, lostPend, expiries>>

\* The .unresolved markers an early stop at walkC leaves for sink s: every
\* unreceipted handle of a completed checkpoint at or above it that the walk
\* did not prove (refused, or never probed), for the sink's pre-fence
\* describe at open.  The unprobed handles of walkC after a refusal are
\* marked by the guard InDoubtMarked (they exist only when the walk stops at
\* the first refusal); unguarded, only the refused ones are.
StopMarks(s, refusal) ==
    {c \in markers :
        /\ c >= walkC
        /\ c \notin receipt[s]
        /\ c > walkC => Bug # "refusal_wall"     \* MUTANT: nothing above the stop
        /\ c = walkC =>
              \/ s \in walkBad
              \/ /\ s \notin walkOk \cup walkBad
                 /\ ~refusal \/ Guarded("InDoubtMarked")}

\* The walk ends early (a refusal, a cancellation, retries exhausted): it
\* leaves the markers and the restart proceeds from the confirmed point.
WalkStop(refusal) ==
    /\ unres' = [s \in Sinks |-> unres[s] \cup StopMarks(s, refusal)]
    /\ phase' = "deploying"
    /\ restoreTo' = ConfirmedRestorePoint
    /\ walkC' = 0
    /\ walkOk' = {}
    /\ walkBad' = {}

\* WalkDecides: every handle of walkC proven (confirmed: CONFIRMED-<c>, then
\* the in-memory point), or one refused (the walk stops).
WalkDecides ==
    /\ Resolving
    /\ walkC \in markers
    /\ \/ walkOk \cup walkBad = Sinks
       \/ Bug = "stop_at_first_refusal" /\ walkBad # {}   \* MUTANT: no probe after a refusal
    /\ IF walkBad = {}
          THEN /\ confMarks' = confMarks \cup {walkC}
               /\ confPt' = walkC
               /\ walkC' = walkC + 1
               /\ walkOk' = {}
               /\ UNCHANGED <<unres, phase, restoreTo, walkBad>>
          ELSE /\ WalkStop(TRUE)
               /\ UNCHANGED <<confMarks, confPt>>
    /\ UNCHANGED <<cutOf, dlv, snapV, snapHold, staged, published, markV, restored, input,
                   zPuts, runBase, nextId, lastTrig, runRestore, restarts, inflight,
                   failedAt, errorDue, discarded, acked, nacked, pipeC, pipeStage, srcNext,
                   srcPos, srcWait, asked, sinkUp, lastBar, prepC, comC, pending, commitQ, committedC,
                   deaths, supersessions, snapFails, taskErrors, receipt, curTxn, txnSt,
                   hollow, confPut, kst, rcptDue, confirmDue, supp, openSt, lostQ,
                   lostRcpt, walkStops, lostRunning, zTrig, staleActed, lostPend, expiries>>

\* WalkFinishes: nothing completed is left above; the restore point is the
\* confirmed one.
WalkFinishes ==
    /\ Resolving
    /\ ~WalkLeft
    /\ phase' = "deploying"
    /\ restoreTo' = ConfirmedRestorePoint
    /\ walkC' = 0
    /\ UNCHANGED <<cutOf, dlv, snapV, snapHold, staged, published, markV, restored, input,
                   zPuts, runBase, nextId, lastTrig, runRestore, restarts, inflight,
                   failedAt, errorDue, discarded, acked, nacked, pipeC, pipeStage, srcNext,
                   srcPos, srcWait, asked, sinkUp, lastBar, prepC, comC, pending, commitQ, committedC,
                   deaths, supersessions, snapFails, taskErrors, receipt, confMarks, unres,
                   curTxn, txnSt, hollow, confPt, confPut, walkOk, walkBad, kst, rcptDue,
                   confirmDue, supp, openSt, lostQ, lostRcpt, walkStops, lostRunning, zTrig, staleActed, lostPend, expiries>>

\* Fault: WalkCancelled (the watchdog) or WalkExhausted (the broker stayed
\* unreachable through every retry): an early stop at any step.
WalkCancelled ==
    /\ Resolving
    /\ WalkLeft
    /\ walkStops < MaxWalkStops
    /\ walkStops' = walkStops + 1
    /\ WalkStop(FALSE)
    /\ UNCHANGED <<cutOf, dlv, snapV, snapHold, staged, published, markV, restored, input,
                   zPuts, runBase, nextId, lastTrig, runRestore, restarts, inflight,
                   failedAt, errorDue, discarded, acked, nacked, pipeC, pipeStage, srcNext,
                   srcPos, srcWait, asked, sinkUp, lastBar, prepC, comC, pending, commitQ, committedC,
                   deaths, supersessions, snapFails, taskErrors, receipt, confMarks,
                   curTxn, txnSt, hollow, confPt, confPut, kst, rcptDue, confirmDue, supp,
                   openSt, lostQ, lostRcpt, lostRunning, zTrig, staleActed, lostPend, expiries>>

\* ---------------- the open ----------------
\* A reopening Kafka sink settles its orphan, the transaction named by the
\* newest .unresolved marker above the restore point, before
\* init_transactions and before suppression arms, at every restore point, 0
\* included.

Orphans(s) == {u \in unres[s] : u > runRestore}
SkipsAll == Bug = "open_skips_restore_zero" /\ runRestore = 0   \* MUTANT

\* The pre-fence describe.  Next state: sink.orphan_described.
SinkDescribes(s) ==
    LET o == Max(Orphans(s)) IN
    /\ Family = "confirmed"
    /\ phase \in TasksRun
    /\ sinkUp[s] = "opening"
    /\ openSt[s] = "fresh"
    /\ openSt' = [openSt EXCEPT ![s] =
                    IF Orphans(s) = {} \/ SkipsAll \/ Bug = "blind_fence"
                       THEN "none"       \* MUTANT (blind_fence): no describe
                       ELSE IF curTxn[s] = o THEN txnSt[s] ELSE "gone"]
    /\ UNCHANGED <<cutOf, dlv, snapV, snapHold, staged, published, markV, restored, input,
                   zPuts, phase, runBase, nextId, lastTrig, runRestore, restoreTo,
                   restarts, inflight, failedAt, errorDue, discarded, acked, nacked, pipeC,
                   pipeStage, srcNext, srcPos, srcWait, asked, sinkUp, lastBar, prepC, comC, pending,
                   commitQ, committedC, deaths, supersessions, snapFails, taskErrors,
                   receipt, confMarks, unres, curTxn, txnSt, hollow, confPt, confPut,
                   walkC, walkOk, walkBad, kst, rcptDue, confirmDue, supp, lostQ, lostRcpt,
                   walkStops, lostRunning, zTrig, staleActed, lostPend, expiries>>

\* SinkOpens: the orphan ended with an abort under its own identity (the
\* broker takes the abort or an old incarnation's commit first, and the
\* sink describes again: a receipt written for a commit), then
\* init_transactions fences the id, and suppression arms from every receipt
\* above the restore point.
KSinkOpens(s) ==
    LET o == Max(Orphans(s))
        settles == openSt[s] \notin {"fresh", "none"}
        learnt == IF Bug = "orphan_left_to_init"
                     THEN openSt[s] = "committed"   \* MUTANT: the first describe decides
                     ELSE curTxn[s] = o /\ txnSt[s] = "committed"
        rc == IF settles /\ learnt THEN receipt[s] \cup {o} ELSE receipt[s]
    IN
    /\ Family = "confirmed"
    /\ phase \in TasksRun
    /\ sinkUp[s] = "opening"
    /\ openSt[s] # "fresh"
    /\ sinkUp' = [sinkUp EXCEPT ![s] = "open"]
    /\ receipt' = [receipt EXCEPT ![s] = rc]
    /\ txnSt' = IF txnSt[s] = "ongoing" THEN [txnSt EXCEPT ![s] = "aborted"] ELSE txnSt
    /\ supp' = [supp EXCEPT ![s] = IF SkipsAll THEN {}
                                   ELSE {Pos(c) : c \in {x \in rc : x > runRestore}}]
    /\ unres' = IF SkipsAll THEN unres ELSE [unres EXCEPT ![s] = {}]
    /\ openSt' = [openSt EXCEPT ![s] = "fresh"]
    /\ pending' = [pending EXCEPT ![s] = {}]
    /\ UNCHANGED <<cutOf, dlv, snapV, snapHold, staged, published, markV, restored, input,
                   zPuts, phase, runBase, nextId, lastTrig, runRestore, restoreTo,
                   restarts, inflight, failedAt, errorDue, discarded, acked, nacked, pipeC,
                   pipeStage, srcNext, srcPos, srcWait, asked, lastBar, prepC, comC, commitQ, committedC,
                   deaths, supersessions, snapFails, taskErrors, confMarks, curTxn, hollow,
                   confPt, confPut, walkC, walkOk, walkBad, kst, rcptDue, confirmDue,
                   lostQ, lostRcpt, walkStops, lostRunning, zTrig, staleActed, lostPend, expiries>>

\* ---------------- a worker declared lost and still running ----------------
\* Fault: the coordinator declares the worker lost (heartbeat silence, an
\* outbound stall or overflow) while its process runs on.  Its acks and
\* confirmations no longer count; the job restarts at once and is held for
\* the walk.  The old incarnation of each sink keeps the commit frames
\* already on its wire (the one taken and not executed, and the queued ones)
\* and a receipt it owes, and executes them later; it prepares nothing
\* more.  Budget MaxLostRunning.
KWorkerLost ==
    /\ Family = "confirmed"
    /\ phase = "running"
    /\ pipeC = 0
    /\ lostRunning < MaxLostRunning
    /\ lostRunning' = lostRunning + 1
    /\ lostQ' = [s \in Sinks |-> (IF comC[s] # 0 /\ kst[s] = "taken" THEN <<comC[s]>> ELSE <<>>)
                                 \o commitQ[s]]
    /\ lostRcpt' = rcptDue
    /\ phase' = "resolving"
    /\ restoreTo' = 0
    /\ runBase' = 0
    /\ ResetDeploy
    /\ KTasksFresh
    /\ confPut' = 0
    /\ walkC' = confPt + 1
    /\ walkOk' = {}
    /\ walkBad' = {}
    /\ UNCHANGED <<cutOf, dlv, snapV, snapHold, staged, published, markV, restored, input,
                   zPuts, nextId, lastTrig, runRestore, restarts, deaths, supersessions,
                   snapFails, taskErrors, receipt, confMarks, unres, curTxn, txnSt, hollow,
                   confPt, walkStops, zTrig, staleActed, lostPend, expiries>>

\* The old incarnation executes a commit frame: the broker commits it if the
\* transaction is still the id's newest and ongoing (not fenced by a
\* reopened sink's init, nor aborted by its open); a refused commit ends it.
KLostSinkCommit(s) ==
    LET c == Head(lostQ[s])
        ok == curTxn[s] = c /\ txnSt[s] = "ongoing"
    IN
    /\ Family = "confirmed"
    /\ phase # "down"
    /\ lostQ[s] # <<>>
    /\ lostRcpt[s] = 0
    /\ lostQ' = [lostQ EXCEPT ![s] = IF ok THEN Tail(@) ELSE <<>>]
    /\ txnSt' = IF ok THEN [txnSt EXCEPT ![s] = "committed"] ELSE txnSt
    /\ published' = IF ok THEN [published EXCEPT ![s] = @ \cup {c}] ELSE published
    /\ lostRcpt' = IF ok THEN [lostRcpt EXCEPT ![s] = c] ELSE lostRcpt
    /\ UNCHANGED <<cutOf, dlv, snapV, snapHold, staged, markV, restored, input, zPuts,
                   phase, runBase, nextId, lastTrig, runRestore, restoreTo, restarts,
                   inflight, failedAt, errorDue, discarded, acked, nacked, pipeC,
                   pipeStage, srcNext, srcPos, srcWait, asked, sinkUp, lastBar, prepC, comC, pending,
                   commitQ, committedC, deaths, supersessions, snapFails, taskErrors,
                   receipt, confMarks, unres, curTxn, hollow, confPt, confPut, walkC,
                   walkOk, walkBad, kst, rcptDue, confirmDue, supp, openSt, walkStops,
                   lostRunning, zTrig, staleActed, lostPend, expiries>>

\* The old incarnation writes the receipt of a commit it executed.
LostSinkReceipt(s) ==
    /\ Family = "confirmed"
    /\ phase # "down"
    /\ lostRcpt[s] # 0
    /\ receipt' = IF Bug = "no_receipts" THEN receipt
                  ELSE [receipt EXCEPT ![s] = @ \cup {lostRcpt[s]}]
    /\ lostRcpt' = [lostRcpt EXCEPT ![s] = 0]
    /\ UNCHANGED <<cutOf, dlv, snapV, snapHold, staged, published, markV, restored, input,
                   zPuts, phase, runBase, nextId, lastTrig, runRestore, restoreTo,
                   restarts, inflight, failedAt, errorDue, discarded, acked, nacked, pipeC,
                   pipeStage, srcNext, srcPos, srcWait, asked, sinkUp, lastBar, prepC, comC, pending,
                   commitQ, committedC, deaths, supersessions, snapFails, taskErrors,
                   confMarks, unres, curTxn, txnSt, hollow, confPt, confPut, walkC, walkOk,
                   walkBad, kst, rcptDue, confirmDue, supp, openSt, lostQ, walkStops,
                   lostRunning, zTrig, staleActed, lostPend, expiries>>

\* ---------------- a superseded coordinator's barrier ----------------
\* The superseded coordinator's TriggerCheckpoint reaches the worker that
\* hosts the source, after the next leader redeployed the job.  The worker
\* is bound to the leader's epoch and drops a frame from an epoch below it
\* (Fenced).  Unfenced, the barrier runs through the job and a Kafka sink
\* seals a transaction for it that no coordinator will ever commit: its
\* task thread waits for that commit and prepares nothing more.
StaleTrigger(s) ==
    /\ Family = "confirmed"
    /\ zTrig
    /\ phase = "running"
    /\ zTrig' = FALSE
    /\ IF Bug = "no_fencing"
          \* MUTANT: the worker acts on a frame of a superseded epoch.
          THEN /\ SinkFree(s)
               /\ pending[s] = {}
               /\ curTxn' = [curTxn EXCEPT ![s] = 0]
               /\ txnSt' = [txnSt EXCEPT ![s] = "ongoing"]
               /\ pending' = [pending EXCEPT ![s] = {0}]
               /\ staleActed' = TRUE
          ELSE UNCHANGED <<curTxn, txnSt, pending, staleActed>>
    /\ UNCHANGED <<cutOf, dlv, snapV, snapHold, staged, published, markV, restored, input,
                   zPuts, phase, runBase, nextId, lastTrig, runRestore, restoreTo,
                   restarts, inflight, failedAt, errorDue, discarded, acked, nacked, pipeC,
                   pipeStage, srcNext, srcPos, srcWait, asked, sinkUp, lastBar, prepC, comC, commitQ,
                   committedC, deaths, supersessions, snapFails, taskErrors, receipt,
                   confMarks, unres, hollow, confPt, confPut, walkC, walkOk, walkBad, kst,
                   rcptDue, confirmDue, supp, openSt, lostQ, lostRcpt, walkStops,
                   lostRunning, lostPend, expiries>>

\* The recoverable family's worker declared lost and still running.  The
\* coordinator drops the process's frames and, since nothing of the session
\* can complete any more, chooses the restore point at once and redeploys.
\* The old incarnation of each sink keeps its in-memory handles (lostPend)
\* and the commit frames on its wire; its staged files stay where they are.
RWorkerLost ==
    /\ Family = "recoverable"
    /\ phase = "running"
    /\ pipeC = 0
    /\ lostRunning < MaxLostRunning
    /\ lostRunning' = lostRunning + 1
    /\ lostQ' = [s \in Sinks |-> (IF comC[s] # 0 THEN <<comC[s]>> ELSE <<>>) \o commitQ[s]]
    /\ lostPend' = pending
    /\ phase' = "deploying"
    /\ restoreTo' = RestorePoint(FALSE)
    /\ runBase' = 0
    /\ ResetDeploy
    /\ UNCHANGED <<cutOf, dlv, snapV, snapHold, staged, published, markV, restored, input,
                   zPuts, nextId, lastTrig, runRestore, restarts, deaths, supersessions,
                   snapFails, taskErrors, receipt, confMarks, unres, curTxn, txnSt, hollow,
                   confPt, confPut, walkC, walkOk, walkBad, kst, rcptDue, confirmDue, supp,
                   openSt, lostRcpt, walkStops, zTrig, staleActed, expiries>>

\* The old incarnation executes a commit frame (StagedFileSink::commit): it
\* renames out of .staged/ the handles it holds up to c whose files are
\* still there; one the reopened sink already re-committed or deleted is
\* gone, and its rename does nothing.
RLostSinkCommit(s) ==
    LET c == Head(lostQ[s])
        H == {h \in lostPend[s] : h <= c} \cap staged[s]
    IN
    /\ Family = "recoverable"
    /\ phase # "down"
    /\ lostQ[s] # <<>>
    /\ lostQ' = [lostQ EXCEPT ![s] = Tail(@)]
    /\ published' = [published EXCEPT ![s] = @ \cup H]
    /\ staged' = [staged EXCEPT ![s] = @ \ H]
    /\ lostPend' = [lostPend EXCEPT ![s] = {h \in @ : h > c}]
    /\ UNCHANGED <<cutOf, dlv, snapV, snapHold, markV, restored, input, zPuts, phase,
                   runBase, nextId, lastTrig, runRestore, restoreTo, restarts, inflight,
                   failedAt, errorDue, discarded, acked, nacked, pipeC, pipeStage, srcNext,
                   srcPos, srcWait, asked, sinkUp, lastBar, prepC, comC, pending, commitQ, committedC,
                   deaths, supersessions, snapFails, taskErrors, receipt, confMarks, unres,
                   curTxn, txnSt, hollow, confPt, confPut, walkC, walkOk, walkBad, kst,
                   rcptDue, confirmDue, supp, openSt, lostRcpt, walkStops, lostRunning,
                   zTrig, staleActed, expiries>>

WorkerLost == IF Family = "recoverable" THEN RWorkerLost ELSE KWorkerLost
LostSinkCommit(s) == IF Family = "recoverable" THEN RLostSinkCommit(s) ELSE KLostSinkCommit(s)

\* ---------------- broker transaction expiry ----------------
\* Fault: the broker expires an open transaction (transaction.timeout.ms):
\* it aborts.  Budget MaxExpiries.
TxnExpires(s) ==
    /\ Family = "confirmed"
    /\ txnSt[s] = "ongoing"
    /\ expiries < MaxExpiries
    /\ expiries' = expiries + 1
    /\ txnSt' = [txnSt EXCEPT ![s] = "aborted"]
    /\ UNCHANGED <<cutOf, dlv, snapV, snapHold, staged, published, markV, restored, input,
                   zPuts, phase, runBase, nextId, lastTrig, runRestore, restoreTo,
                   restarts, inflight, failedAt, errorDue, discarded, acked, nacked, pipeC,
                   pipeStage, srcNext, srcPos, srcWait, asked, sinkUp, lastBar, prepC, comC, pending,
                   commitQ, committedC, deaths, supersessions, snapFails, taskErrors,
                   receipt, confMarks, unres, curTxn, hollow, confPt, confPut, walkC,
                   walkOk, walkBad, kst, rcptDue, confirmDue, supp, openSt, lostQ,
                   lostRcpt, walkStops, lostRunning, zTrig, staleActed, lostPend>>

\* A commit the broker refuses (its transaction expired): the sink's commit
\* callback fails, and its Failed frame makes the coordinator restart the job
\* (or fail it, with no budget left) as for any subtask error.
KSinkCommitFails(s) ==
    LET c == comC[s] IN
    /\ Family = "confirmed"
    /\ phase \in TasksRun
    /\ c # 0
    /\ kst[s] = "taken"
    /\ ~(curTxn[s] = c /\ txnSt[s] = "ongoing")
    /\ IF Bug = "refused_commit_ignored"
          \* MUTANT: the refusal is taken for an acknowledgement.
          THEN /\ kst' = [kst EXCEPT ![s] = "committed"]
               /\ rcptDue' = [rcptDue EXCEPT ![s] = c]
               /\ UNCHANGED <<comC, pending, errorDue>>
          ELSE /\ comC' = [comC EXCEPT ![s] = 0]
               /\ pending' = [pending EXCEPT ![s] = {}]
               /\ errorDue' = (errorDue \/ phase = "running")
               /\ UNCHANGED <<kst, rcptDue>>
    /\ UNCHANGED <<cutOf, dlv, snapV, snapHold, staged, published, markV, restored, input,
                   zPuts, phase, runBase, nextId, lastTrig, runRestore, restoreTo,
                   restarts, inflight, failedAt, discarded, acked, nacked, pipeC,
                   pipeStage, srcNext, srcPos, srcWait, asked, sinkUp, lastBar, prepC, commitQ, committedC,
                   deaths, supersessions, snapFails, taskErrors, receipt, confMarks, unres,
                   curTxn, txnSt, hollow, confPt, confPut, walkC, walkOk, walkBad,
                   confirmDue, supp, openSt, lostQ, lostRcpt, walkStops,
                   lostRunning, zTrig, staleActed, lostPend, expiries>>

\* ---------------- one protocol, two families ----------------
SinkPrepare(s) == IF Family = "recoverable" THEN RSinkPrepare(s) ELSE KSinkPrepare(s)
SinkPrepareFails(s) == IF Family = "recoverable" THEN RSinkPrepareFails(s) ELSE KSinkPrepareFails(s)
SinkCommit(s) == IF Family = "recoverable" THEN RSinkCommit(s) ELSE KSinkCommit(s)
SinkOpens(s) == IF Family = "recoverable" THEN RSinkOpens(s) ELSE KSinkOpens(s)
RestartDrained == IF Family = "recoverable" THEN RRestartDrained ELSE KRestartDrained
CoordRecovers == IF Family = "recoverable" THEN RCoordRecovers ELSE KCoordRecovers

-----------------------------------------------------------------------------
(* Termination                                                             *)

\* The job has finished: the id bound (the model's end of input) is reached,
\* every checkpoint is decided, every commit frame has been taken and
\* executed.  Or the job failed for want of restart budget (exit 1).
Finished ==
    \/ phase = "failed"
    \/ /\ phase = "running"
       /\ ~RestartDue
       /\ nextId > MaxCkpt
       /\ srcNext = nextId
       /\ inflight = {}
       /\ pipeC = 0
       /\ \A s \in Sinks : /\ sinkUp[s] = "open"
                           /\ ~BarrierWaiting(s)
                           /\ prepC[s] = 0
                           /\ comC[s] = 0
                           /\ commitQ[s] = <<>>
       \* and, for the commit-confirmed family, every commit receipted and
       \* confirmed, and every confirmation's marker put and advanced
       /\ Family = "confirmed" =>
             /\ confPut = 0
             /\ \A c \in Ids : committedC[c] # Sinks
             /\ \A s \in Sinks : confirmDue[s] = 0 /\ rcptDue[s] = 0

\* A finished job stutters; any other state with no step is a deadlock.
Done == Finished /\ UNCHANGED vars

-----------------------------------------------------------------------------

Progress ==
    \/ SourceAsks
    \/ DropRequest
    \/ Trigger
    \/ DeliverBarrier
    \/ \E s \in Sinks : \/ SinkPrepare(s)
                        \/ SinkPrepareEmpty(s)
                        \/ SinkAck(s)
                        \/ DeliverCommit(s)
                        \/ SinkCommit(s)
                        \/ SinkOpens(s)
                        \/ SinkReceipt(s)
                        \/ SinkFinish(s)
                        \/ SinkConfirm(s)
                        \/ SinkDescribes(s)
                        \/ WalkProbes(s)
                        \/ KSinkCommitFails(s)
    \/ \E c \in Ids : CoordComplete(c)
    \/ WriteConfirmed
    \/ AdvanceConfirmed
    \/ WalkSkips
    \/ WalkDecides
    \/ WalkFinishes
    \/ WriteCompleted
    \/ Broadcast
    \/ RestartOnError
    \/ RestartDrained
    \/ JobFails
    \/ SailOn
    \/ CoordRecovers
    \/ Redeploy

Faults ==
    \/ Die
    \/ Supersede
    \/ StaleMarkerLands
    \/ SubtaskFails
    \/ \E s \in Sinks : SinkPrepareFails(s)
    \/ WalkCancelled
    \/ WorkerLost
    \/ \E s \in Sinks : LostSinkCommit(s) \/ LostSinkReceipt(s) \/ StaleTrigger(s)
    \/ \E s \in Sinks : TxnExpires(s)

Next == Progress \/ OtherAsks \/ Faults \/ Done

Spec == Init /\ [][Next]_vars

\* Weak fairness on the protocol's own steps; faults are never forced.
FairSpec == Spec /\ WF_vars(Progress)

-----------------------------------------------------------------------------
(* Invariants                                                              *)

TypeOK ==
    /\ cutOf \in [0..MaxCkpt -> 0..MaxCkpt]
    /\ dlv \in [Ids -> 0..2]
    /\ snapV \in [Sinks -> [Ids -> 0..2]]
    /\ markV \in [Ids -> 0..2]
    /\ staged \in [Sinks -> SUBSET Ids]
    /\ published \in [Sinks -> SUBSET Ids]
    /\ zPuts \subseteq Ids \X (0..2)
    /\ phase \in {"running", "draining", "resolving", "deploying", "down", "failed"}
    /\ inflight \subseteq Ids
    /\ pipeStage \in {"none", "decided", "marked", "broadcast"}
    /\ sinkUp \in [Sinks -> {"opening", "open"}]
    /\ srcWait \in BOOLEAN /\ asked \in BOOLEAN
    /\ errorDue \in BOOLEAN
    /\ deaths <= MaxDeaths /\ supersessions <= MaxSupersede
    /\ snapFails <= MaxSnapFails /\ taskErrors <= MaxTaskErrors
    /\ receipt \in [Sinks -> SUBSET Ids]
    /\ confMarks \subseteq Ids
    /\ unres \in [Sinks -> SUBSET Ids]
    /\ curTxn \in [Sinks -> 0..MaxCkpt]
    /\ txnSt \in [Sinks -> {"none", "ongoing", "committed", "aborted"}]
    /\ hollow \in [Sinks -> SUBSET Ids]
    /\ confPt \in 0..MaxCkpt /\ confPut \in 0..MaxCkpt
    /\ walkOk \subseteq Sinks /\ walkBad \subseteq Sinks
    /\ kst \in [Sinks -> {"taken", "committed"}]
    /\ supp \in [Sinks -> SUBSET Positions]
    /\ openSt \in [Sinks -> {"fresh", "none", "gone", "ongoing", "committed", "aborted"}]
    /\ walkStops <= MaxWalkStops /\ lostRunning <= MaxLostRunning /\ expiries <= MaxExpiries
    /\ zTrig \in BOOLEAN /\ staleActed \in BOOLEAN

\* Position p reached sink s with rows (it is owed to the output).
Owed(s, p) == input[s][p] # "empty"

\* The handles whose records a sink's output carries (a hollow Kafka
\* transaction, its records swallowed by replay suppression, carries none).
Carried(s) == published[s] \ hollow[s]

PublishedAt(s, p) == \E c \in Carried(s) : Pos(c) = p

\* p is published at s, or a handle carrying it is staged on disk and held by
\* the sink's snapshot of R, so that an open from R re-commits it.
Covered(s, p, R) ==
    \/ PublishedAt(s, p)
    \/ \E h \in Held(s, R) : Pos(h) = p /\ h \in staged[s]

\* No sink publishes any position twice.
NoDuplicate ==
    \A s \in Sinks : \A c1, c2 \in Carried(s) : c1 # c2 => Pos(c1) # Pos(c2)

\* Every position at or below the cut of the newest checkpoint the markers
\* vouch for is published at every sink it reached, or held there by a
\* staged handle of that checkpoint's snapshot that an open will re-commit.
NoLoss ==
    LET R == Vouched IN
    \A s \in Sinks : \A p \in 1..Pos(R) : Owed(s, p) => Covered(s, p, R)

\* The frontier: every position at or below the cut the current deploy
\* restored from is one the source will never emit again.  It is published
\* at every sink that has opened, and published or held for the open at one
\* that has not.
FrontierCovered ==
    \A s \in Sinks : \A p \in 1..Pos(runRestore) :
        Owed(s, p) =>
            IF phase \in TasksRun /\ sinkUp[s] = "open"
                THEN PublishedAt(s, p)
                ELSE Covered(s, p, runRestore)

\* A deploy restores from a checkpoint that was decided completed (its marker
\* is on disk), and every participant's state it reads is of that
\* checkpoint's vintage: the source's position snapshot and every sink's
\* snapshot were written in the same delivery of the checkpoint as the
\* marker (never snapshots of mixed vintage, nor a snapshot missing).  It
\* holds from the choice until the last sink has opened (the sinks read
\* their snapshot of R at open).
RestoreSound ==
    LET R == IF phase = "deploying" THEN restoreTo ELSE runRestore
        reading == \/ phase = "deploying"
                   \/ phase \in TasksRun /\ \E s \in Sinks : sinkUp[s] = "opening"
    IN
    (reading /\ R # 0) =>
        /\ markV[R] # 0
        /\ cutOf[R] # 0
        /\ dlv[R] = markV[R]
        /\ \A s \in Sinks : snapV[s][R] = markV[R]

\* Checkpoint ids never repeat within a job's history: no barrier id is
\* delivered twice (its state written twice), and a coordinator never
\* triggers an id it has triggered before.  (A coordinator that died may
\* have triggered an id it never delivered; nothing of it reached the disk,
\* and the next run may number it again.)
IdsNeverReused ==
    /\ \A c \in Ids : dlv[c] <= 1
    /\ nextId = 0 \/ lastTrig < nextId

\* Every staged file of a sink that has opened in the current deploy is one
\* it holds and will commit: the staging directory holds nothing unowned
\* (the open removed what the restore point does not hold).
NoUnownedStaged ==
    \A s \in Sinks :
        (phase \in TasksRun /\ sinkUp[s] = "open") => staged[s] \subseteq pending[s]

\* Guard: the RESTORED record never passes over a marker unless a superseded
\* coordinator's late put landed it there.  A restart chooses its restore
\* point once nothing can complete any more, and a dead process writes
\* nothing, so no marker lands in a range a RESTORED record passes over.
\* Checked by the models without a takeover from a live run.
RestoredPassesOverNothing == \A c \in markers : ~PassedOver(c)

\* The commit-confirmed family: a CONFIRMED marker never outruns the commits
\* it vouches for: every sink's transaction of that checkpoint is committed.
ConfirmedMeansCommitted ==
    \A c \in confMarks : \A s \in Sinks : c \in published[s]

\* The in-memory confirmed restore point is 0 or a CONFIRMED marker on disk
\* (a commit's retention floor is taken from memory and a takeover restores
\* from the disk; the purge it would allow is not modelled, so the order is
\* held here).
ConfirmedMemoryOnDisk == confPt = 0 \/ confPt \in confMarks

\* No subtask acted on a frame from a superseded coordinator.
Fenced == ~staleActed

\* Guard: until a Kafka sink has opened in the deploy that restores from R,
\* every transaction committed at the broker above R of that sink has a
\* receipt or an .unresolved marker its open will settle, so suppression can
\* arm for it.  Established by the walk's materialised receipts and its
\* marker rule (StopMarks).
InDoubtMarked ==
    LET R == IF phase = "deploying" THEN restoreTo ELSE runRestore IN
    Family = "confirmed" =>
        \A s \in Sinks :
            (\/ phase = "deploying"
             \/ phase \in TasksRun /\ sinkUp[s] = "opening" /\ openSt[s] = "fresh") =>
                \A c \in published[s] : c > R => c \in receipt[s] \cup unres[s]

\* Every position the restore point vouches for is published exactly once at
\* every sink it reached.
Settled ==
    /\ phase = "running"
    /\ \A s \in Sinks : \A p \in 1..Pos(Vouched) :
          Owed(s, p) => PublishedAt(s, p)

\* Liveness: with bounded faults and fair progress the job settles for good.
EventuallySettled == <>[]Settled

\* Progress: a source that asked for a checkpoint is eventually answered
\* (its trigger delivered, or its deployment torn down by a restart, a death
\* or the job's failure, which all end its wait).  With MaxInFlight reached
\* this is the rule that a request at the bound is held, not dropped.
SourceAnswered == srcWait ~> ~srcWait

\* Progress: every triggered checkpoint is eventually decided (completed,
\* failed or discarded) or lost with its process.
CheckpointsDecided == \A c \in Ids : (c \in inflight) ~> (c \notin inflight)

=============================================================================
