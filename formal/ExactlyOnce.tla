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
(* One process hosts the coordinator, the source and the sink subtasks;    *)
(* its death takes every in-memory variable with it, and only the disk     *)
(* (the variables marked DISK below) survives.  Non-sink subtasks          *)
(* (key_by, windows) snapshot and ack like the sink but have no commit     *)
(* step; their acks are stutters and are not represented.                  *)
(*                                                                         *)
(* Family selects the sink family.  Only "recoverable" (staged-file sinks  *)
(* that re-commit persisted handles at open) is specified.  A              *)
(* commit-confirmed family (Kafka) would add its CONFIRMED marker,         *)
(* receipts and in-doubt resolution behind the same constant: see          *)
(* RestorePoint, SinkOpens and the Family CASEs.                           *)
(*                                                                         *)
(* Bug switches one rule back to a defective form, at the rule itself.     *)
(* "none" is the protocol the engine implements; every other value is a    *)
(* mutant under mutants/ and is calibrated against mutants/expected.txt.   *)
(***************************************************************************)
EXTENDS Naturals, FiniteSets, Sequences

CONSTANTS
    Sinks,          \* the sink subtasks (participant names op-<id>-<subtask>)
    MaxCkpt,        \* checkpoint ids are 1..MaxCkpt over the whole behaviour
    MaxInFlight,    \* checkpoints triggered and not yet decided, at most
    MaxDeaths,      \* fault budget: process deaths (kill at any step)
    MaxSnapFails,   \* fault budget: sink snapshots that fail (checkpoint.snapshot_fails)
    RestartBudget,  \* in-process restarts (failed checkpoint or subtask error), per process
    MaxTaskErrors,  \* fault budget: subtask errors (a Failed frame) that restart the job
    MaxEmpty,       \* (sink, position) pairs whose interval brought the sink no rows
    Family,         \* "recoverable"
    Bug             \* "none", or the name of one mutant

Families == {"recoverable"}

Bugs == {"none",
         "broadcast_before_marker",        \* step 8 before step 7
         "no_recommit_at_open",            \* recovery step 5 skips the re-commit
         "ack_before_durable",             \* step 5 acks before step 4's file exists
         "complete_above_failed",          \* step 6 lets a checkpoint above a failed one complete
         "no_rewind_on_failed_checkpoint", \* a failed checkpoint does not restart the job
         "restore_ignores_restored",       \* recovery step 1 ignores the RESTORED record
         "restore_without_marker",         \* recovery step 1 restores from snapshots with no marker
         "commit_at_barrier",              \* step 4 publishes instead of staging
         "commit_above_checkpoint",        \* step 9 publishes handles above c as well
         "recommit_unheld_at_open",        \* recovery step 5 re-commits every staged file
         "no_cleanup_at_open",             \* recovery step 5 leaves unheld staged files
         "sail_on_without_budget"}         \* a failed checkpoint with no budget left does not fail the job

ASSUME Family \in Families
ASSUME Bug \in Bugs
ASSUME MaxCkpt \in Nat /\ MaxInFlight \in Nat \ {0}
ASSUME {MaxDeaths, MaxSnapFails, RestartBudget, MaxTaskErrors, MaxEmpty} \subseteq Nat
ASSUME Sinks # {}

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
    sinkSnap,    \* [Sinks -> SUBSET Ids]: checkpoints the sink's snapshot is durable for
    snapHold,    \* [Sinks -> [Ids -> SUBSET Ids]]: the handles that snapshot holds
    staged,      \* [Sinks -> SUBSET Ids]: sealed staged files .staged/part-<s>-<c>
    published,   \* [Sinks -> SUBSET Ids]: published files part-<s>-<c> (the output)
    markers,     \* SUBSET Ids: durable COMPLETED-<c> markers
    restored,    \* <<>> or <<restored_from, next>>: the durable RESTORED record
    \* ---------------- the environment ----------------
    input,       \* [Sinks -> [Positions -> {"?", "rows", "empty"}]]: whether a
                 \*   position's interval brings the sink rows; decided the first
                 \*   time the sink prepares it, and the same on every replay
    \* ---------------- PROCESS MEMORY: lost at a death ----------------
    phase,       \* "running" | "draining" | "deploying" | "down" | "failed"
    runBase,     \* the first checkpoint id of the current deploy
    nextId,      \* the coordinator's next checkpoint id
    runRestore,  \* the restore point the current (or last) deploy restored from
    restoreTo,   \* the restore point chosen, while "deploying"
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
    sinkUp,      \* [Sinks -> {"opening", "open"}]
    lastBar,     \* [Sinks -> Nat]: the last barrier the sink prepared in this deploy
    prepC,       \* [Sinks -> Nat]: prepared, not yet acked (fault point sink.after_prepare)
    comC,        \* [Sinks -> Nat]: commit frame taken, not yet committed (sink.before_commit)
    pending,     \* [Sinks -> SUBSET Ids]: handles the sink holds in memory, sealed and unpublished
    commitQ,     \* [Sinks -> Seq(Ids)]: CommitCheckpoint frames not yet taken, in order
    committedC,  \* [Ids -> SUBSET Sinks]: Committed(c) frames received (read by one mutant only)
    \* ---------------- fault budgets spent, and ghosts ----------------
    deaths,      \* process deaths so far
    snapFails,   \* snapshot failures so far
    taskErrors   \* subtask errors so far

disk   == <<cutOf, sinkSnap, snapHold, staged, published, markers, restored>>
coord  == <<phase, runBase, nextId, runRestore, restoreTo, restarts, inflight,
            failedAt, errorDue, discarded, acked, nacked, pipeC, pipeStage>>
tasks  == <<srcNext, srcPos, sinkUp, lastBar, prepC, comC, pending, commitQ, committedC>>
faults == <<deaths, snapFails, taskErrors>>
vars   == <<disk, input, coord, tasks, faults>>

-----------------------------------------------------------------------------
(* Derived views                                                           *)

\* The position a handle carries.
Pos(c) == cutOf[c]

\* The RESTORED record passes over c: the newest deploy restored below c and
\* numbers its checkpoints above it.
PassedOver(c) == restored # <<>> /\ restored[1] < c /\ c < restored[2]

\* The restore rule (engine/src/checkpoint/restore.rs, restore_point_on_disk):
\* one function for the engine's recovery, its in-process restart and the
\* harness's checkpoint.restore_rule.
RecoverableRestorePoint ==
    CASE Bug = "restore_ignores_restored" ->
            Max(markers)
      [] Bug = "restore_without_marker" ->
            \* the newest checkpoint any participant has a snapshot of
            Max({c \in Ids : cutOf[c] # 0} \cup UNION {sinkSnap[s] : s \in Sinks})
      [] OTHER ->
            Max({c \in markers : ~PassedOver(c)})

RestorePoint == CASE Family = "recoverable" -> RecoverableRestorePoint

\* What the disk vouches for, whatever rule a restore applies: the newest
\* COMPLETED marker the RESTORED record does not pass over.  (The
\* commit-confirmed family would vouch with its CONFIRMED markers.)
Vouched == CASE Family = "recoverable" -> Max({c \in markers : ~PassedOver(c)})

\* Recovery step 2: one above every checkpoint id the disk knows.
NextFromDisk ==
    1 + Max(markers
            \cup {c \in Ids : cutOf[c] # 0}
            \cup UNION {sinkSnap[s] : s \in Sinks}
            \cup (IF restored = <<>> THEN {} ELSE {restored[2] - 1}))

\* A restart is due: a checkpoint was decided failed, or a subtask failed.
RestartDue == failedAt # 0 \/ errorDue

\* The next barrier a sink will see, and whether the source has emitted it.
NextBarrier(s) == lastBar[s] + 1
BarrierWaiting(s) == NextBarrier(s) < srcNext

EmptyCount == Cardinality({<<s, p>> \in Sinks \X Positions : input[s][p] = "empty"})

\* The handles a sink's snapshot of R holds (none for R = 0 or no snapshot).
Held(s, R) == IF R # 0 /\ R \in sinkSnap[s] THEN snapHold[s][R] ELSE {}

\* No acks (or Committed frames) received yet.  Memory is reset to these
\* canonical values at every death and deploy, so dead runs do not multiply
\* states.
FreshAcks == [c \in Ids |-> {}]

-----------------------------------------------------------------------------
(* Initial state: a fresh start.  No job directory, no RESTORED record,    *)
(* restore point 0; the sinks' first open has nothing to re-commit and is  *)
(* taken as done.                                                          *)

Init ==
    /\ cutOf = [c \in 0..MaxCkpt |-> 0]
    /\ sinkSnap = [s \in Sinks |-> {}]
    /\ snapHold = [s \in Sinks |-> [c \in Ids |-> {}]]
    /\ staged = [s \in Sinks |-> {}]
    /\ published = [s \in Sinks |-> {}]
    /\ markers = {}
    /\ restored = <<>>
    /\ input = [s \in Sinks |-> [p \in Positions |-> IF MaxEmpty = 0 THEN "rows" ELSE "?"]]
    /\ phase = "running"
    /\ runBase = 1
    /\ nextId = 1
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
    /\ sinkUp = [s \in Sinks |-> "open"]
    /\ lastBar = [s \in Sinks |-> 0]
    /\ prepC = [s \in Sinks |-> 0]
    /\ comC = [s \in Sinks |-> 0]
    /\ pending = [s \in Sinks |-> {}]
    /\ commitQ = [s \in Sinks |-> <<>>]
    /\ committedC = FreshAcks
    /\ deaths = 0
    /\ snapFails = 0
    /\ taskErrors = 0

-----------------------------------------------------------------------------
(* Checkpoint steps 1-9 (PROTOCOL.md "Steps of a checkpoint c")            *)

\* Step 1, Trigger.  engine/src/runtime/coordinator.rs: the trigger loop
\* allocates nextId and sends TriggerCheckpoint(c) to the source subtask.
\* Not while a restart is due (the coordinator thread goes from a failed
\* decision or a Failed frame straight to RestartOnError).
Trigger ==
    /\ phase = "running"
    /\ ~RestartDue
    /\ nextId <= MaxCkpt
    /\ Cardinality(inflight) < MaxInFlight
    /\ inflight' = inflight \cup {nextId}
    /\ nextId' = nextId + 1
    /\ UNCHANGED <<disk, input, phase, runBase, runRestore, restoreTo, restarts,
                   failedAt, errorDue, discarded, acked, nacked, pipeC, pipeStage, tasks,
                   faults>>

\* Step 2, DeliverBarrier.  engine/src/runtime/task.rs, the source subtask on
\* TriggerCheckpoint(c): cuts the input after the one position of interval c,
\* writes its position snapshot durably, acks (a stutter here: the source's ack
\* is this step) and emits barrier c after every record of the interval.
\* The next state is fault point source.after_position_snapshot@c, and, for
\* every sink that has not prepared c yet, sink.before_prepare@c.  Sinks may
\* still be opening: the barrier waits in their input.
DeliverBarrier ==
    /\ phase \in TasksRun
    /\ srcNext < nextId
    /\ cutOf' = [cutOf EXCEPT ![srcNext] = srcPos + 1]
    /\ srcPos' = srcPos + 1
    /\ srcNext' = srcNext + 1
    /\ UNCHANGED <<sinkSnap, snapHold, staged, published, markers, restored,
                   input, coord, sinkUp, lastBar, prepC, comC, pending, commitQ,
                   committedC, faults>>

\* A sink subtask's thread is free: open, and not between a prepare and its
\* ack, nor between taking a commit frame and committing it.
SinkFree(s) ==
    /\ phase \in TasksRun
    /\ sinkUp[s] = "open"
    /\ prepC[s] = 0
    /\ comC[s] = 0

\* Step 4, sink prepare with rows.  engine/src/operators/staged_sink.rs, at the
\* aligned barrier c: seals interval c into .staged/part-<s>-<c> durably; the
\* handle of c.  Next state: fault point sink.after_prepare@c.
SinkPrepare(s) ==
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
    /\ UNCHANGED <<cutOf, sinkSnap, snapHold, markers, restored, coord, srcNext,
                   srcPos, sinkUp, comC, commitQ, committedC, faults>>

\* Step 4, empty prepare.  engine/src/operators/staged_sink.rs: interval c
\* brought the sink no rows; it seals nothing.  The input decides, so a
\* position found empty is empty on every replay.
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
    /\ UNCHANGED <<disk, coord, srcNext, srcPos, sinkUp, comC, pending, commitQ,
                   committedC, faults>>

\* Record an ack at the coordinator; acks of a checkpoint already decided
\* (discarded), and every frame after a restart's cancel, are dropped.
RecordAck(set, s, c) ==
    IF phase = "running" /\ c \in inflight THEN [set EXCEPT ![c] = @ \cup {s}] ELSE set

\* Step 5, sink ack.  engine/src/operators/staged_sink.rs then
\* engine/src/runtime/task.rs: the sink's snapshot, holding every handle it
\* has sealed and not published, is written durably, then the ack frame
\* (SubtaskAck ok=true) is sent.
SinkAck(s) ==
    LET c == prepC[s] IN
    /\ phase \in TasksRun
    /\ c # 0
    /\ sinkSnap' = [sinkSnap EXCEPT ![s] = @ \cup {c}]
    /\ snapHold' = [snapHold EXCEPT ![s][c] = pending[s]]
    /\ acked' = RecordAck(acked, s, c)
    /\ prepC' = [prepC EXCEPT ![s] = 0]
    /\ UNCHANGED <<cutOf, staged, published, markers, restored, input, phase,
                   runBase, nextId, runRestore, restoreTo, restarts, inflight,
                   failedAt, errorDue, discarded, nacked, pipeC, pipeStage, srcNext, srcPos,
                   sinkUp, lastBar, comC, pending, commitQ, committedC, faults>>

\* Step 5 under fault point checkpoint.snapshot_fails@c (budgeted).
\* engine/src/operators/staged_sink.rs: the snapshot fails, the sink deletes
\* the staged file of c, forgets its handle, and acks ok=false.
SinkPrepareFails(s) ==
    LET c == prepC[s] IN
    /\ phase \in TasksRun
    /\ c # 0
    /\ snapFails < MaxSnapFails
    /\ snapFails' = snapFails + 1
    /\ staged' = [staged EXCEPT ![s] = @ \ {c}]
    /\ pending' = [pending EXCEPT ![s] = @ \ {c}]
    /\ nacked' = RecordAck(nacked, s, c)
    /\ prepC' = [prepC EXCEPT ![s] = 0]
    /\ UNCHANGED <<cutOf, sinkSnap, snapHold, published, markers, restored, input,
                   phase, runBase, nextId, runRestore, restoreTo, restarts,
                   inflight, failedAt, errorDue, discarded, acked, pipeC, pipeStage, srcNext,
                   srcPos, sinkUp, lastBar, comC, commitQ, committedC, deaths,
                   taskErrors>>

\* Step 6 applies to the lowest checkpoint in flight once its last ack is in
\* (acks from one subtask arrive in id order, so checkpoints complete in id
\* order) and the coordinator has finished the previous completion.
Decidable(c) ==
    /\ phase = "running"
    /\ pipeC = 0
    /\ ~errorDue
    /\ (failedAt = 0 \/ Bug = "complete_above_failed")
    /\ inflight # {}
    /\ c = Min(inflight)
    /\ c < srcNext                        \* the source has acked
    /\ acked[c] \cup nacked[c] = Sinks    \* every sink has acked

\* Step 6, all ok: CoordComplete(outcome=completed).
\* engine/src/runtime/coordinator.rs, on the last ack of c.
\* Next state: fault point coordinator.before_completed_marker@c.
CoordCompleted(c) ==
    /\ Decidable(c)
    /\ nacked[c] = {}
    /\ inflight' = inflight \ {c}
    /\ pipeC' = c
    /\ pipeStage' = "decided"
    /\ UNCHANGED <<disk, input, phase, runBase, nextId, runRestore, restoreTo,
                   restarts, failedAt, errorDue, discarded, acked, nacked, tasks, faults>>

\* Step 6, some ack failed: CoordComplete(outcome=failed), and every
\* checkpoint above c still in flight CoordComplete(outcome=discarded), all in
\* the one handler of coordinator.rs.  No marker is ever written for them.
CoordFailed(c) ==
    /\ Decidable(c)
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
    /\ UNCHANGED <<disk, input, phase, runBase, nextId, runRestore, restoreTo,
                   restarts, errorDue, acked, nacked, pipeC, pipeStage, tasks,
                   faults>>

\* Step 6 as events.txt names it: CoordComplete, whatever the outcome.
CoordComplete(c) == CoordCompleted(c) \/ CoordFailed(c)

\* Step 7, durable marker.  engine/src/runtime/coordinator.rs writes
\* COMPLETED-<c> (temporary name, fsync, rename, directory fsync), then emits
\* WriteCompleted.  Next state: coordinator.after_completed_marker@c, which
\* is also coordinator.before_commit_broadcast@c.
WriteCompleted ==
    /\ phase = "running"
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
    /\ markers' = markers \cup {pipeC}
    /\ UNCHANGED <<cutOf, sinkSnap, snapHold, staged, published, restored, input,
                   phase, runBase, nextId, runRestore, restoreTo, restarts,
                   inflight, failedAt, errorDue, discarded, acked, nacked, tasks, faults>>

\* Step 8, broadcast.  engine/src/runtime/coordinator.rs sends
\* CommitCheckpoint(c) to every sink subtask, only once COMPLETED-<c> is
\* durable.
Broadcast ==
    /\ phase = "running"
    /\ pipeC # 0
    /\ IF Bug = "broadcast_before_marker"
          THEN /\ pipeStage = "decided"
               /\ pipeStage' = "broadcast"
               /\ UNCHANGED pipeC
          ELSE /\ pipeStage = "marked"
               /\ pipeC' = 0
               /\ pipeStage' = "none"
    /\ commitQ' = [s \in Sinks |-> Append(commitQ[s], pipeC)]
    /\ UNCHANGED <<disk, input, phase, runBase, nextId, runRestore, restoreTo,
                   restarts, inflight, failedAt, errorDue, discarded, acked, nacked,
                   srcNext, srcPos, sinkUp, lastBar, prepC, comC, pending,
                   committedC, faults>>

\* Step 9, DeliverCommit.  engine/src/runtime/task.rs: the sink subtask takes
\* the next CommitCheckpoint frame.  Next state: sink.before_commit@c.
DeliverCommit(s) ==
    /\ SinkFree(s)
    /\ commitQ[s] # <<>>
    /\ comC' = [comC EXCEPT ![s] = Head(commitQ[s])]
    /\ commitQ' = [commitQ EXCEPT ![s] = Tail(@)]
    /\ UNCHANGED <<disk, input, coord, srcNext, srcPos, sinkUp, lastBar, prepC,
                   pending, committedC, faults>>

\* Step 9, SinkCommit.  engine/src/operators/staged_sink.rs: publishes every
\* handle with id <= c, in id order (rename out of .staged/, fsync), skipping
\* one already published; then Committed(c) goes to the coordinator.
\* Next state: sink.after_commit@c.
\* The handles a CommitCheckpoint(c) publishes: those the sink holds in
\* memory with id <= c.  Never a file merely found in .staged/: this rule,
\* with ids that never repeat (NextFromDisk), also guards the mutant
\* no_cleanup_at_open.
CommitPublishesOnlyHeldHandles(s, c) == {h \in pending[s] : h <= c}

SinkCommit(s) ==
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
    /\ UNCHANGED <<cutOf, sinkSnap, snapHold, markers, restored, input, coord,
                   srcNext, srcPos, sinkUp, lastBar, prepC, commitQ, faults>>

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
    /\ sinkUp' = [s \in Sinks |-> "opening"]
    /\ lastBar' = [s \in Sinks |-> 0]
    /\ prepC' = [s \in Sinks |-> 0]
    /\ comC' = [s \in Sinks |-> 0]
    /\ pending' = [s \in Sinks |-> {}]
    /\ commitQ' = [s \in Sinks |-> <<>>]
    /\ committedC' = FreshAcks

\* Fault: a subtask fails (an I/O error, a protocol error in open(), ...) and
\* its Failed frame reaches engine/src/runtime/coordinator.rs between two
\* other frames.  The coordinator restarts the job (RestartOnError with
\* ckpt = 0) or, with no budget left, fails it.  Budget MaxTaskErrors.
SubtaskFails ==
    /\ phase = "running"
    /\ pipeC = 0
    /\ ~RestartDue
    /\ taskErrors < MaxTaskErrors
    /\ taskErrors' = taskErrors + 1
    /\ errorDue' = TRUE
    /\ UNCHANGED <<disk, input, phase, runBase, nextId, runRestore, restoreTo,
                   restarts, inflight, failedAt, discarded, acked, nacked, pipeC,
                   pipeStage, tasks, deaths, snapFails>>

\* RestartOnError.  engine/src/runtime/coordinator.rs, restart_on_error: a
\* checkpoint was decided failed (ckpt = it), or a subtask failed (ckpt = 0),
\* and the process has restart budget left.  The coordinator cancels every
\* subtask and from now on drops their frames; checkpoints still in flight
\* are discarded (their CoordComplete lines follow the drain).  The subtasks
\* run on until each notices the cancel (phase "draining": a sink may still
\* prepare, ack or commit, the source deliver a barrier it had).
RestartOnError ==
    /\ phase = "running"
    /\ RestartDue
    /\ restarts < RestartBudget
    /\ restarts' = restarts + 1
    /\ phase' = "draining"
    /\ inflight' = {}
    /\ discarded' = discarded \cup inflight
    /\ UNCHANGED <<disk, input, runBase, nextId, runRestore, restoreTo, failedAt,
                   errorDue, acked, nacked, pipeC, pipeStage, tasks, faults>>

\* The drain ends: every subtask's thread has stopped (shut_down in
\* engine/src/runtime/coordinator.rs), and the coordinator applies the
\* restore rule (engine/src/checkpoint/restore.rs) and continues at Redeploy.
\* No trace event of its own.  The coordinator keeps its next id.
RestartDrained ==
    /\ phase = "draining"
    /\ phase' = "deploying"
    /\ restoreTo' = RestorePoint
    /\ runBase' = 0
    /\ ResetDeploy
    /\ UNCHANGED <<disk, input, nextId, runRestore, restarts, faults>>

\* The job fails (exit 1) when a restart is due and no budget is left:
\* nothing above a failed checkpoint completed.  No trace event.
JobFails ==
    /\ phase = "running"
    /\ RestartDue
    /\ restarts >= RestartBudget
    /\ ~(Bug = "sail_on_without_budget" /\ failedAt # 0)
    /\ phase' = "failed"
    /\ nextId' = 0
    /\ runBase' = 0
    /\ ResetDeploy
    /\ UNCHANGED <<disk, input, runRestore, restoreTo, restarts, faults>>

\* MUTANT sail_on_without_budget: with the budget spent, the failed
\* checkpoint is forgotten and the job runs on.
SailOn ==
    /\ Bug = "sail_on_without_budget"
    /\ phase = "running"
    /\ failedAt # 0
    /\ restarts >= RestartBudget
    /\ failedAt' = 0
    /\ UNCHANGED <<disk, input, phase, runBase, nextId, runRestore, restoreTo,
                   restarts, inflight, errorDue, discarded, acked, nacked, pipeC,
                   pipeStage, tasks, faults>>

\* Fault: the process dies (SIGKILL at any fault point, or any step), or a
\* failed job's process exits and is run again.  Only the disk survives.
Die ==
    /\ phase # "down"
    /\ deaths < MaxDeaths
    /\ deaths' = deaths + 1
    /\ phase' = "down"
    /\ nextId' = 0
    /\ runBase' = 0
    /\ restoreTo' = 0
    /\ restarts' = 0
    /\ ResetDeploy
    /\ UNCHANGED <<disk, input, runRestore, snapFails, taskErrors>>

\* Recovery step 1, CoordRecovers.  engine/src/runtime/coordinator.rs with
\* engine/src/checkpoint/restore.rs: a new `clink run` over the same
\* directory reads the markers and the RESTORED record once and chooses the
\* restore point R.  Next state: coordinator.before_restored_record@R.
CoordRecovers ==
    /\ phase = "down"
    /\ phase' = "deploying"
    /\ restoreTo' = RestorePoint
    /\ UNCHANGED <<disk, input, runBase, nextId, runRestore, restarts, inflight,
                   failedAt, errorDue, discarded, acked, nacked, pipeC, pipeStage, tasks,
                   faults>>

\* Recovery steps 2-4, Redeploy (after a recovery or a RestartOnError).
\* engine/src/runtime/coordinator.rs, redeploy: next := one above every id
\* the disk knows, and not below the coordinator's own next id (a restart
\* never reuses an id it triggered; a new process has none, nextId = 0);
\* RESTORED {restored_from: R, next} is written durably before any frame;
\* the subtasks are deployed, the source at R's position, each sink opening
\* from its snapshot of R.
Redeploy ==
    LET R == restoreTo
        N == IF NextFromDisk >= nextId THEN NextFromDisk ELSE nextId
    IN
    /\ phase = "deploying"
    /\ restored' = <<R, N>>
    /\ phase' = "running"
    /\ runBase' = N
    /\ nextId' = N
    /\ runRestore' = R
    /\ srcNext' = N
    /\ srcPos' = Pos(R)
    /\ lastBar' = [s \in Sinks |-> N - 1]
    /\ UNCHANGED <<cutOf, sinkSnap, snapHold, staged, published, markers, input,
                   restoreTo, restarts, inflight, failedAt, errorDue, discarded, acked,
                   nacked, pipeC, pipeStage, sinkUp, prepC, comC, pending,
                   commitQ, committedC, faults>>

\* Recovery step 5, SinkOpens.  engine/src/operators/staged_sink.rs, open():
\* re-commits every handle the sink's snapshot of R holds (a published one is
\* skipped), then deletes every staged file of its own that snapshot does not
\* hold.
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

SinkOpens(s) ==
    /\ phase \in TasksRun
    /\ sinkUp[s] = "opening"
    /\ sinkUp' = [sinkUp EXCEPT ![s] = "open"]
    /\ CASE Family = "recoverable" -> RecoverableOpen(s)
    /\ UNCHANGED <<cutOf, sinkSnap, snapHold, markers, restored, input, coord,
                   srcNext, srcPos, lastBar, prepC, comC, commitQ, committedC,
                   faults>>

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

\* A finished job stutters; any other state with no step is a deadlock.
Done == Finished /\ UNCHANGED vars

-----------------------------------------------------------------------------

Progress ==
    \/ Trigger
    \/ DeliverBarrier
    \/ \E s \in Sinks : \/ SinkPrepare(s)
                        \/ SinkPrepareEmpty(s)
                        \/ SinkAck(s)
                        \/ DeliverCommit(s)
                        \/ SinkCommit(s)
                        \/ SinkOpens(s)
    \/ \E c \in Ids : CoordComplete(c)
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
    \/ SubtaskFails
    \/ \E s \in Sinks : SinkPrepareFails(s)

Next == Progress \/ Faults \/ Done

Spec == Init /\ [][Next]_vars

\* Weak fairness on the protocol's own steps; faults are never forced.
FairSpec == Spec /\ WF_vars(Progress)

-----------------------------------------------------------------------------
(* Invariants                                                              *)

TypeOK ==
    /\ cutOf \in [0..MaxCkpt -> 0..MaxCkpt]
    /\ sinkSnap \in [Sinks -> SUBSET Ids]
    /\ staged \in [Sinks -> SUBSET Ids]
    /\ published \in [Sinks -> SUBSET Ids]
    /\ markers \subseteq Ids
    /\ phase \in {"running", "draining", "deploying", "down", "failed"}
    /\ inflight \subseteq Ids
    /\ pipeStage \in {"none", "decided", "marked", "broadcast"}
    /\ sinkUp \in [Sinks -> {"opening", "open"}]
    /\ errorDue \in BOOLEAN
    /\ deaths <= MaxDeaths /\ snapFails <= MaxSnapFails /\ taskErrors <= MaxTaskErrors

\* Position p reached sink s with rows (it is owed to the output).
Owed(s, p) == input[s][p] # "empty"

PublishedAt(s, p) == \E c \in published[s] : Pos(c) = p

\* p is published at s, or a handle carrying it is staged on disk and held by
\* the sink's snapshot of R, so that an open from R re-commits it.
Covered(s, p, R) ==
    \/ PublishedAt(s, p)
    \/ \E h \in Held(s, R) : Pos(h) = p /\ h \in staged[s]

\* No sink publishes any position twice.
NoDuplicate ==
    \A s \in Sinks : \A c1, c2 \in published[s] : c1 # c2 => Pos(c1) # Pos(c2)

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
\* is on disk) and of which every participant has a snapshot: never
\* snapshots of mixed vintage.
RestoreSound ==
    LET R == IF phase = "deploying" THEN restoreTo ELSE runRestore IN
    R # 0 => /\ R \in markers
             /\ cutOf[R] # 0
             /\ \A s \in Sinks : R \in sinkSnap[s]

\* In this engine the RESTORED record never passes over a marker: a deploy
\* restores from the newest marker, numbers above every id on disk, and no
\* checkpoint below its next can complete afterwards (a dead process writes
\* nothing; a restart empties the coordinator's completion pipeline before
\* the drain).  This is what guards the mutant restore_ignores_restored; the
\* day it fails, the RESTORED rule of the restore function carries weight.
RestoredPassesOverNothing == \A c \in markers : ~PassedOver(c)

\* Every position the restore point vouches for is published exactly once at
\* every sink it reached.
Settled ==
    /\ phase = "running"
    /\ \A s \in Sinks : \A p \in 1..Pos(Vouched) :
          Owed(s, p) => PublishedAt(s, p)

\* Liveness: with bounded faults and fair progress the job settles for good.
EventuallySettled == <>[]Settled

=============================================================================
