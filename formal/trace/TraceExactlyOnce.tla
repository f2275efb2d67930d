------------------------- MODULE TraceExactlyOnce -------------------------
(***************************************************************************)
(* Trace validation: follows one recorded protocol trace through the       *)
(* specification.  The next-state relation is ExactlyOnce's, constrained   *)
(* so that every step either produces the next recorded event (and moves   *)
(* pos on by one) or is a hidden step the engine cannot record (the        *)
(* source's request for a checkpoint, the process dying, a COMPLETED       *)
(* marker whose line the death cut off, the end of a recoverable restart's *)
(* drain, a subtask's Failed frame, a Kafka sink's SinkFinish and its      *)
(* open's describe, a broker's expiry).                                    *)
(*                                                                         *)
(* Both families of the specification are followed; which one is read off *)
(* the trace (TraceFamily: the family the sinks' SinkPrepare and SinkOpens *)
(* lines name).                                                            *)
(*                                                                         *)
(* Every field of the vocabulary (formal/trace/events.txt) is read here:   *)
(* EventFields lists, per event, the fields a record must carry and this   *)
(* module constrains; OccasionalFields those the vocabulary marks optional *)
(* ("name?": on some lines of the event, not on others), and               *)
(* OptionalFields those of events.txt's pending changes (none today), each *)
(* constrained when present.                                               *)
(*                                                                         *)
(* The trace and its constants come from two GENERATED modules of         *)
(* literals, TraceConstants and TraceEvents (format: formal/README.md,     *)
(* "Generated trace modules"); TLC finds them on its library path.  The    *)
(* event under the cursor is held in the variable ev, read from Trace once *)
(* per step, so validation is linear in the length of the trace.           *)
(*                                                                         *)
(* Verdict (formal/README.md, "Judging a trace"), with TLC run to the end *)
(* (-deadlock: paths that die out are not verdicts):                       *)
(*   accepted  <=> exit 0 and TLC printed <<"trace-accepted", n>> with     *)
(*                 n = Len(Trace): some path produced every event;         *)
(*   rejected at event k <=> exit 0 and no such line; k is one above the   *)
(*                 largest n printed as <<"trace-progress", n>> (1 if      *)
(*                 none was printed);                                      *)
(*   violated I <=> exit 12 naming invariant I (TraceExactlyOnceChecked    *)
(*                 only): a state the trace reaches breaks a correctness   *)
(*                 invariant.                                              *)
(* Any other exit status (10, 11, 75, 150+, 255) is an error of the setup  *)
(* or the generated modules, never a verdict.  Acceptance is not an        *)
(* invariant violation on purpose: TLC would print the whole accepted      *)
(* behaviour as a counterexample, which costs more than the check.         *)
(***************************************************************************)
EXTENDS ExactlyOnce, TLC, TraceConstants, TraceEvents

VARIABLES
    pos,        \* how many events of Trace have been produced
    ev,         \* Trace[pos + 1], or EndOfTrace once every event is produced
    placed,     \* subtasks whose Placement this deployment has seen
    opened,     \* sinks whose SinkOpens this deployment has seen
    ackedTo,    \* [TraceSubtasks -> Nat]: a non-sink subtask's last ack this deployment
    depWorker,  \* the worker this deployment's subtasks are placed on (0: none yet)
    closing,    \* this deployment triggered its final (or savepoint) checkpoint
    epochNow,   \* the live coordinator's epoch (0: before a recovery names it)
    proceedDue, \* commit-confirmed: a recovery's RestartProceeds line is still due
    ended       \* the live process wrote its last line (JobEnds)

traceOnly == <<placed, opened, ackedTo, depWorker, closing, epochNow, proceedDue>>
traceVars == <<vars, pos, ev, traceOnly, ended>>

\* The vocabulary this module handles (formal/trace/events.txt), and the
\* fields each event must carry, every one of which is read below. Rescale
\* is a scope marker no step takes: a run that carries one is not validated
\* (clink_formal::trace::out_of_scope), so its fields are read there.
EventFields ==
    [Trigger        |-> {"job", "ckpt", "epoch", "kind"},
     DeliverBarrier |-> {"job", "ckpt", "epoch", "worker", "fenced"},
     SinkPrepare    |-> {"job", "sub", "ckpt", "family", "staged"},
     SubtaskAck     |-> {"job", "sub", "ckpt", "ok"},
     CoordComplete  |-> {"job", "ckpt", "outcome", "epoch"},
     WriteCompleted |-> {"job", "ckpt", "epoch"},
     Broadcast      |-> {"job", "ckpt", "withheld", "epoch"},
     DeliverCommit  |-> {"job", "sub", "ckpt", "accepted"},
     SinkCommit     |-> {"job", "sub", "ckpt"},
     SinkOpens      |-> {"job", "sub", "family", "restore", "recommitted"},
     CoordRecovers  |-> {"job", "epoch", "completed", "confirmed"},
     Redeploy       |-> {"job", "restore", "next"},
     RestartOnError |-> {"job", "ckpt"},
     Placement      |-> {"job", "sub", "worker", "source", "role"},
     JobEnds        |-> {"job", "outcome", "epoch"},
     Rescale        |-> {"job", "op", "from", "to", "mode"},
     SinkReceipt    |-> {"job", "sub", "ckpt"},
     SinkConfirm    |-> {"job", "sub", "ckpt"},
     WriteConfirmed |-> {"job", "ckpt", "epoch"},
     RestartProceeds |-> {"job", "resolving", "completed", "confirmed"},
     WalkSkips      |-> {"job", "ckpt"},
     WalkReadsReceipt |-> {"job", "ckpt", "sub"},
     WalkProbes     |-> {"job", "ckpt", "sub", "verdict"},
     WalkRetries    |-> {"job", "ckpt", "sub"},
     WalkExhausted  |-> {"job", "ckpt"},
     WalkCancelled  |-> {"job", "ckpt"},
     WalkDecides    |-> {"job", "ckpt", "verdict"},
     WalkFinishes   |-> {"job", "confirmed"}]

\* Fields the vocabulary marks optional ("name?"): the engine writes them on
\* some lines of the event and not on others; read and constrained when a
\* record carries them, and their absence is constrained too.
OccasionalFields ==
    [SinkOpens      |-> {"orphan", "settled"}]

\* Fields of events.txt's pending changes: the engine does not emit them yet;
\* read and constrained when a record carries them.  None today.
OptionalFields == [e \in {} |-> {}]

Optional(name) ==
    (IF name \in DOMAIN OptionalFields THEN OptionalFields[name] ELSE {})
    \cup (IF name \in DOMAIN OccasionalFields THEN OccasionalFields[name] ELSE {})

HandledEvents == DOMAIN EventFields

Has(e, f) == f \in DOMAIN e

\* A generated trace that breaks this is an error of the generator (TLC exit
\* 10, "Assumption ... is false"), never a verdict on the run.
ASSUME TraceWellFormed ==
    /\ TraceSinks # {}
    /\ TraceSinks \subseteq TraceSubtasks
    /\ TraceSource \in TraceSubtasks \ TraceSinks
    /\ \A i \in 1..Len(Trace) :
          /\ "event" \in DOMAIN Trace[i]
          /\ Trace[i].event \in HandledEvents
          /\ EventFields[Trace[i].event] \subseteq DOMAIN Trace[i]
          /\ DOMAIN Trace[i] \subseteq {"event"} \cup EventFields[Trace[i].event]
                                       \cup Optional(Trace[i].event)
          /\ Trace[i].job = TraceJob

EndOfTrace == [event |-> "EndOfTrace"]

\* Constants of ExactlyOnce for a trace (bound in TraceExactlyOnce.cfg).
TraceMaxInFlight == IF TraceMaxCkpt > 0 THEN TraceMaxCkpt ELSE 1
\* A Kafka sink seals a transaction at every barrier: no empty interval.
TraceMaxEmpty == IF TraceFamily = "confirmed" THEN 0
                 ELSE Cardinality(TraceSinks) * TraceMaxCkpt
TraceNoSupersede == 0
\* The walk's early stops (one per WalkExhausted or WalkCancelled line) and
\* the broker's expiries (one per open that found its orphan aborted:
\* settled not_committed) are the commit-confirmed family's faults.
TraceMaxWalkStops == IF TraceFamily = "confirmed" THEN TraceWalkStops ELSE 0
TraceMaxExpiries == IF TraceFamily = "confirmed" THEN TraceExpiries ELSE 0
\* No worker is declared lost while it runs: coordinator and worker are one
\* process here, and its death ends both.
TraceNoLostRunning == 0

\* The initial deployment: the fresh start, before any redeploy.
FreshDeploy == restored = <<>>

\* A new deployment starts: nothing of it placed, opened or acked yet.
NewDeployment ==
    /\ placed' = {}
    /\ opened' = {}
    /\ ackedTo' = [t \in TraceSubtasks |-> 0]
    /\ depWorker' = 0
    /\ closing' = FALSE

-----------------------------------------------------------------------------
(* One step per recorded event.  Each disjunct first tests ev.event, so a  *)
(* record is only asked for the fields its event carries.                  *)

\* The commit-confirmed family's postcondition of a finished run besides the
\* shared one: every checkpoint the last deployment completed is confirmed
\* (its CONFIRMED marker put and its line written, so the confirmed point is
\* the newest COMPLETED marker), no sink owes a receipt or a confirmation,
\* and no .unresolved marker is left for an open to settle.
EndsConfirmed ==
    Family = "confirmed" =>
        /\ confPut = 0
        /\ \A c \in markers : c >= runBase => c \in confMarks
        /\ confPt = Max(markers)
        /\ \A s \in Sinks : /\ rcptDue[s] = 0
                            /\ confirmDue[s] = 0
                            /\ unres[s] = {}

\* The postcondition of a finished run: its final (or savepoint) checkpoint
\* triggered and completed, every completed checkpoint committed by every
\* sink, nothing in flight, nothing staged left unowned.
EndsSettled ==
    /\ phase = "running"
    /\ ~RestartDue
    /\ closing
    /\ nextId - 1 \in markers
    /\ inflight = {}
    /\ pipeC = 0
    /\ \A s \in Sinks : /\ sinkUp[s] = "open"
                        /\ ~BarrierWaiting(s)
                        /\ prepC[s] = 0
                        /\ comC[s] = 0
                        /\ commitQ[s] = <<>>
                        /\ pending[s] = {}
                        /\ staged[s] = {}
    /\ Settled
    /\ EndsConfirmed

\* A sink acts only once its open of this deployment is recorded.
SinkActs(e) == e.sub \in Sinks /\ e.sub \in opened

\* The open's outcome for orphan o of sink s, as SinkOpens finds it after
\* its describe: its receipt already on disk; the broker holds it committed
\* (the open writes the receipt); still ongoing (the open aborts it under
\* its own identity); or nothing committed (aborted, superseded by a later
\* transaction, never begun).
Settles(s, o) ==
    CASE o \in receipt[s] -> "receipt"
      [] curTxn[s] = o /\ txnSt[s] = "committed" -> "committed"
      [] curTxn[s] = o /\ txnSt[s] = "ongoing" -> "aborted"
      [] OTHER -> "not_committed"

\* orphan and settled are on the line exactly when the opening Kafka sink
\* has an .unresolved marker above its restore point: orphan the newest,
\* settled what the open finds of it.
OrphanOf(e) ==
    IF Orphans(e.sub) = {}
       THEN ~Has(e, "orphan") /\ ~Has(e, "settled")
       ELSE /\ Has(e, "orphan") /\ Has(e, "settled")
            /\ e.orphan = Max(Orphans(e.sub))
            /\ e.settled = Settles(e.sub, e.orphan)

\* The first open of a fresh start is the initial state (nothing restored,
\* no marker to settle): its SinkOpens line is a stutter, once per sink.
FreshOpen(e) ==
    /\ FreshDeploy
    /\ e.restore = 0
    /\ e.recommitted = 0
    /\ ~Has(e, "orphan") /\ ~Has(e, "settled")
    /\ UNCHANGED vars

\* The in-doubt walk runs: the job is held for resolution and, after a
\* recovery, its RestartProceeds line has been written.
Walking == Resolving /\ ~proceedDue

\* The walk is at ckpt, a checkpoint with a COMPLETED marker, and sub's
\* handle of it is not yet proven or refused.
Unprobed(e) ==
    /\ Walking
    /\ walkC = e.ckpt
    /\ walkC \in markers
    /\ e.sub \in Sinks
    /\ e.sub \notin walkOk \cup walkBad

\* The lines of the live coordinator (and its source's barriers) carry its
\* fencing epoch: 1 for a fresh start (TraceFirstEpoch), the one its
\* CoordRecovers claimed for a recovery; never 0.
LiveEpoch(e) == e.epoch = epochNow /\ epochNow >= 1

(* The commit-confirmed family's events (Family = "confirmed"; each step   *)
(* below is the specification's and holds Family in its guard or in the   *)
(* state it needs, so in a recoverable trace none of them is produced).   *)
KafkaProduce(e) ==
    \/ /\ e.event = "SinkReceipt"
       /\ SinkActs(e)
       /\ rcptDue[e.sub] = e.ckpt
       /\ SinkReceipt(e.sub)
       /\ UNCHANGED traceOnly
    \* The sink's SinkFinish is a hidden step just before (Hidden).
    \/ /\ e.event = "SinkConfirm"
       /\ SinkActs(e)
       /\ confirmDue[e.sub] = e.ckpt
       /\ SinkConfirm(e.sub)
       /\ UNCHANGED traceOnly
    \* The CONFIRMED put is a hidden step just before (Hidden); the line is
    \* written in the hold that advances memory behind it.
    \/ /\ e.event = "WriteConfirmed"
       /\ LiveEpoch(e)
       /\ confPut = e.ckpt
       /\ AdvanceConfirmed
       /\ UNCHANGED traceOnly
    \/ /\ e.event = "RestartProceeds"
       /\ Family = "confirmed"
       /\ e.resolving = TRUE
       /\ e.completed = Max(markers)
       /\ \/ \* a restart: the drain is over, the walk starts above memory's
             \* confirmed point
             /\ ~proceedDue
             /\ phase = "draining"
             /\ e.confirmed = confPt
             /\ RestartDrained
             /\ UNCHANGED traceOnly
          \/ \* a recovery: KCoordRecovers has fixed the walk's start
             /\ proceedDue
             /\ phase = "resolving"
             /\ e.confirmed = confPt
             /\ walkC = confPt + 1
             /\ proceedDue' = FALSE
             /\ UNCHANGED <<vars, placed, opened, ackedTo, depWorker, closing, epochNow>>
    \/ /\ e.event = "WalkSkips"
       /\ Walking
       /\ walkC = e.ckpt
       /\ WalkSkips
       /\ UNCHANGED traceOnly
    \/ /\ e.event = "WalkReadsReceipt"
       /\ Unprobed(e)
       /\ e.ckpt \in receipt[e.sub]
       /\ WalkProbes(e.sub)
       /\ UNCHANGED traceOnly
    \/ /\ e.event = "WalkProbes"
       /\ Unprobed(e)
       \* the walk describes only a handle without a receipt
       /\ e.ckpt \notin receipt[e.sub]
       /\ e.verdict \in {"committed", "refused"}
       /\ (e.verdict = "committed") = ProvenBy(e.sub, e.ckpt)
       /\ WalkProbes(e.sub)
       /\ UNCHANGED traceOnly
    \* a retry of a probe that could not reach the broker: a stutter
    \/ /\ e.event = "WalkRetries"
       /\ Unprobed(e)
       /\ e.ckpt \notin receipt[e.sub]
       /\ UNCHANGED <<vars, traceOnly>>
    \* the retries of a probe at ckpt ran out: an early stop there
    \/ /\ e.event = "WalkExhausted"
       /\ Walking
       /\ walkC = e.ckpt
       /\ walkC \in markers
       /\ walkOk \cup walkBad # Sinks
       /\ WalkCancelled
       /\ UNCHANGED traceOnly
    \* the watchdog's deadline, before the walk's step at ckpt
    \/ /\ e.event = "WalkCancelled"
       /\ Walking
       /\ walkC = e.ckpt
       /\ WalkCancelled
       /\ UNCHANGED traceOnly
    \/ /\ e.event = "WalkDecides"
       /\ Walking
       /\ walkC = e.ckpt
       /\ e.verdict \in {"confirmed", "refused"}
       /\ (e.verdict = "confirmed") = (walkBad = {})
       /\ WalkDecides
       /\ UNCHANGED traceOnly
    \/ /\ e.event = "WalkFinishes"
       /\ Walking
       /\ e.confirmed = confPt
       /\ WalkFinishes
       /\ UNCHANGED traceOnly


Produce(e) ==
    \/ /\ e.event = "Trigger"
       /\ LiveEpoch(e)
       /\ e.kind \in {"periodic", "final", "savepoint"}
       /\ ~closing                       \* nothing is triggered after the final one
       /\ nextId = e.ckpt
       /\ Trigger
       /\ closing' = (e.kind # "periodic")
       /\ UNCHANGED <<placed, opened, ackedTo, depWorker, epochNow, proceedDue>>
    \/ /\ e.event = "DeliverBarrier"
       /\ e.fenced = FALSE
       /\ LiveEpoch(e)
       /\ TraceSource \in placed
       /\ e.worker = depWorker
       /\ srcNext = e.ckpt
       /\ DeliverBarrier
       /\ UNCHANGED traceOnly
    \/ /\ e.event = "SinkPrepare"
       /\ e.family = Family
       /\ SinkActs(e)
       /\ NextBarrier(e.sub) = e.ckpt
       \* This engine's Kafka sink reads nothing after its ack until it has
       \* finished and confirmed that commit: its next prepare follows its
       \* SinkConfirm (the specification also admits it between SinkFinish
       \* and SinkConfirm, where a sink's threads are split).
       /\ Family = "confirmed" => confirmDue[e.sub] = 0
       /\ IF e.staged THEN SinkPrepare(e.sub) ELSE SinkPrepareEmpty(e.sub)
       /\ UNCHANGED traceOnly
    \/ /\ e.event = "SubtaskAck"
       /\ IF e.sub \in Sinks
             THEN /\ SinkActs(e)
                  /\ prepC[e.sub] = e.ckpt
                  /\ IF e.ok THEN SinkAck(e.sub) ELSE SinkPrepareFails(e.sub)
                  /\ UNCHANGED traceOnly
             \* a non-sink subtask's ack (the source's, an operator's): a
             \* stutter, once per checkpoint and in id order, of a barrier
             \* this deployment's source delivered; the source acks the
             \* barrier it has just delivered.  A failed one is outside the
             \* model.
             ELSE /\ e.sub \in placed
                  /\ e.ok = TRUE
                  /\ phase \in TasksRun
                  /\ runBase <= e.ckpt /\ e.ckpt < srcNext
                  /\ ackedTo[e.sub] < e.ckpt
                  /\ e.sub = TraceSource => e.ckpt = srcNext - 1
                  /\ ackedTo' = [ackedTo EXCEPT ![e.sub] = e.ckpt]
                  /\ UNCHANGED <<vars, placed, opened, depWorker, closing, epochNow,
                                 proceedDue>>
    \/ /\ e.event = "CoordComplete"
       /\ LiveEpoch(e)
       /\ \/ e.outcome = "completed" /\ CoordCompleted(e.ckpt)
          \/ e.outcome = "failed" /\ CoordFailed(e.ckpt)
          \* decided together with the failed checkpoint below it, or at a
          \* restart: one line per discarded checkpoint, a stutter
          \/ /\ e.outcome = "discarded"
             /\ e.ckpt \in discarded
             /\ discarded' = discarded \ {e.ckpt}
             /\ UNCHANGED <<disk, input, zPuts, phase, runBase, nextId, lastTrig,
                            runRestore, restoreTo, restarts, inflight, failedAt,
                            errorDue, acked, nacked, pipeC, pipeStage, tasks, faults, kvars>>
       /\ UNCHANGED traceOnly
    \/ /\ e.event = "WriteCompleted"
       /\ LiveEpoch(e)
       /\ pipeC = e.ckpt
       /\ WriteCompleted
       /\ UNCHANGED traceOnly
    \/ /\ e.event = "Broadcast"
       /\ e.withheld = FALSE
       /\ LiveEpoch(e)
       /\ pipeC = e.ckpt
       /\ Broadcast
       /\ UNCHANGED traceOnly
    \/ /\ e.event = "DeliverCommit"
       /\ e.accepted = TRUE
       /\ SinkActs(e)
       /\ commitQ[e.sub] # <<>>
       /\ Head(commitQ[e.sub]) = e.ckpt
       /\ DeliverCommit(e.sub)
       /\ UNCHANGED traceOnly
    \/ /\ e.event = "SinkCommit"
       /\ SinkActs(e)
       /\ comC[e.sub] = e.ckpt
       /\ SinkCommit(e.sub)
       /\ UNCHANGED traceOnly
    \/ /\ e.event = "SinkOpens"
       /\ e.family = Family
       /\ e.sub \in Sinks
       /\ e.sub \in placed
       /\ e.sub \notin opened            \* one open per sink per deployment
       /\ \/ /\ sinkUp[e.sub] = "opening"
             /\ runRestore = e.restore
             /\ IF Family = "recoverable"
                   \* The open re-commits every handle the restored snapshot
                   \* holds: the engine counts them (staged_sink.rs, open()).
                   THEN /\ e.recommitted = Cardinality(Held(e.sub, runRestore))
                        /\ ~Has(e, "orphan") /\ ~Has(e, "settled")
                        /\ SinkOpens(e.sub)
                   \* A Kafka sink re-commits nothing; its describe (a hidden
                   \* SinkDescribes) is behind it, and what it settled is checked
                   \* in the state its settlement reads.
                   ELSE /\ e.recommitted = 0
                        /\ OrphanOf(e)
                        /\ SinkOpens(e.sub)
          \/ FreshOpen(e)
       /\ opened' = opened \cup {e.sub}
       /\ UNCHANGED <<placed, ackedTo, depWorker, closing, epochNow, proceedDue>>
    \/ /\ e.event = "CoordRecovers"
       /\ phase = "down"
       \* a new run claims an epoch above every earlier one
       \* (engine/src/checkpoint/fence.rs: one above the job's EPOCH)
       /\ e.epoch > epochNow
       /\ IF Family = "recoverable"
             \* no CONFIRMED markers in this family; completed is the
             \* restore rule's choice
             THEN /\ e.confirmed = 0
                  /\ RestorePoint(TRUE) = e.completed
             \* the newest COMPLETED marker, and the newest CONFIRMED one,
             \* which the recovery adopts as its confirmed point
             ELSE /\ e.completed = Max(markers)
                  /\ e.confirmed = Max(confMarks)
       /\ CoordRecovers
       /\ epochNow' = e.epoch
       /\ proceedDue' = (Family = "confirmed")
       /\ UNCHANGED <<placed, opened, ackedTo, depWorker, closing>>
    \/ /\ e.event = "Redeploy"
       /\ phase = "deploying"
       /\ restoreTo = e.restore
       /\ RedeployNext(restoreTo) = e.next
       /\ Redeploy
       /\ NewDeployment
       /\ UNCHANGED <<epochNow, proceedDue>>
    \/ /\ e.event = "RestartOnError"
       /\ IF e.ckpt = 0 THEN errorDue ELSE failedAt = e.ckpt
       /\ RestartOnError
       /\ UNCHANGED traceOnly
    \/ /\ e.event = "Placement"
       /\ e.sub \in TraceSubtasks
       /\ e.sub \notin placed            \* once per subtask per deployment
       /\ phase \in TasksRun
       /\ e.source = (e.sub = TraceSource)
       /\ e.role = CASE e.sub = TraceSource -> "source"
                     [] e.sub \in Sinks -> "sink"
                     [] OTHER -> "transform"
       \* this engine runs one worker per process: every subtask of a
       \* deployment is placed on the same one
       /\ depWorker = 0 \/ e.worker = depWorker
       /\ placed' = placed \cup {e.sub}
       /\ depWorker' = e.worker
       /\ UNCHANGED <<vars, opened, ackedTo, closing, epochNow, proceedDue>>
    \* The process's last line: nothing of it follows (TraceNext: only a
    \* new process's CoordRecovers may come after it).  A failed job may be
    \* run again, as may a finished one.
    \/ /\ e.event = "JobEnds"
       /\ LiveEpoch(e)
       \* evaluated as a value: in an action, TLC expands a quantifier over a
       \* large set into nested calls (a stack overflow at 10,000 events)
       /\ (CASE e.outcome \in {"finished", "savepoint"} -> EndsSettled
               [] e.outcome = "failed" -> phase = "failed"
               \* the specification has no stalled state: its models are
               \* checked for deadlock and for SourceAnswered and
               \* CheckpointsDecided, so a stalled run is no behaviour of it
               [] e.outcome = "stalled" -> FALSE
               [] OTHER -> FALSE) = TRUE
       /\ UNCHANGED <<vars, traceOnly>>
    \/ KafkaProduce(e)

(* Hidden steps: the engine cannot record them.  Each is admitted only     *)
(* where the next event witnesses it, so a branch that takes one the run   *)
(* did not need dies at once.                                              *)
Hidden(e) ==
    \* The request a trigger answers (the source's, or an interval's) has no
    \* line: the Trigger line witnesses it.
    \/ /\ e.event = "Trigger"
       /\ LiveEpoch(e)
       /\ SourceAsks \/ OtherAsks
    \/ /\ e.event = "CoordRecovers"
       /\ \/ Die                           \* the previous process died (or exited)
          \/ /\ ~ended                     \* (lines a death cut off: not after JobEnds)
             /\ \/ /\ pipeC = e.completed  \* COMPLETED-<c> durable, its line
                   /\ WriteCompleted       \* lost to the death that followed
                \/ DeliverBarrier          \* the source's position snapshot of a
                                           \* triggered checkpoint durable, its
                                           \* DeliverBarrier line lost to the death
                                           \* (the line follows the write): the
                                           \* Redeploy's next counts that snapshot
                \* CONFIRMED-<c> durable, its line lost to the death: the
                \* confirmation set's put, or the walk's own marker of a
                \* checkpoint it proved everywhere; the takeover names c
                \/ /\ WriteConfirmed
                   /\ confPut' = e.confirmed
                \/ /\ Walking
                   /\ walkC = e.confirmed
                   /\ walkOk = Sinks
                   /\ WalkDecides
    \/ /\ e.event = "Redeploy"
       /\ Family = "recoverable"
       /\ RestartDrained                   \* an in-process restart's drain ended
    \* A Kafka sink's SinkFinish (the tail of its commit callback: the handle
    \* erased) has no line; its SinkConfirm follows it.
    \/ /\ e.event = "SinkConfirm"
       /\ SinkActs(e)
       /\ comC[e.sub] = e.ckpt
       /\ SinkFinish(e.sub)
    \* The coordinator's CONFIRMED put; the WriteConfirmed line follows the
    \* advance behind it.
    \/ /\ e.event = "WriteConfirmed"
       /\ LiveEpoch(e)
       /\ WriteConfirmed
       /\ confPut' = e.ckpt
    \* A reopening Kafka sink's pre-fence describe (no line: a death at
    \* sink.orphan_described leaves nothing of it).
    \/ /\ e.event = "SinkOpens"
       /\ Family = "confirmed"
       /\ e.sub \in Sinks
       /\ e.sub \in placed
       /\ e.sub \notin opened
       /\ SinkDescribes(e.sub)
    \* The broker aborted the orphan on its own (its transaction timeout)
    \* before the open described it: the open finds nothing committed.
    \/ /\ e.event = "SinkOpens"
       /\ Has(e, "settled") /\ Has(e, "orphan")
       /\ e.settled = "not_committed"
       /\ e.sub \in Sinks
       /\ openSt[e.sub] = "fresh"
       /\ curTxn[e.sub] = e.orphan
       /\ TxnExpires(e.sub)
    \/ /\ e.event = "RestartOnError"
       /\ e.ckpt = 0
       /\ SubtaskFails                     \* a subtask's Failed frame (no line)
    \/ /\ e.event = "JobEnds"
       /\ e.outcome = "failed"
       /\ \/ JobFails                      \* no restart budget left (no line of
                                           \* its own: JobEnds is the job's failure)
          \/ SubtaskFails                  \* a subtask's Failed frame, with no budget

TraceInit ==
    /\ Init
    /\ pos = 0
    /\ ev = IF Len(Trace) > 0 THEN Trace[1] ELSE EndOfTrace
    /\ placed = {}
    /\ opened = {}
    /\ ackedTo = [t \in TraceSubtasks |-> 0]
    /\ depWorker = 0
    /\ closing = FALSE
    /\ epochNow = TraceFirstEpoch
    /\ proceedDue = FALSE
    /\ ended = FALSE
    /\ TLCSet(1, 0)

TraceNext ==
    \/ /\ pos < Len(Trace)
       \* JobEnds is its process's last line: after it, only a new process
       \* (its CoordRecovers, after the hidden Die) may go on.
       /\ ended => ev.event = "CoordRecovers"
       /\ Produce(ev)
       /\ ended' = (ev.event = "JobEnds")
       /\ pos' = pos + 1
       /\ ev' = IF pos + 1 < Len(Trace) THEN Trace[pos + 2] ELSE EndOfTrace
    \/ /\ pos < Len(Trace)
       /\ ended => ev.event = "CoordRecovers"
       /\ Hidden(ev)
       /\ UNCHANGED <<pos, ev, traceOnly, ended>>

TraceSpec == TraceInit /\ [][TraceNext]_traceVars

-----------------------------------------------------------------------------
(* What TLC reports                                                        *)

\* Prints <<"trace-progress", n>> each time a path gets further than any
\* before it (per TLC worker), and <<"trace-accepted", n>> when a path has
\* produced all n events.  Always TRUE.
TraceProgress ==
    pos > TLCGet(1) =>
        /\ TLCSet(1, pos)
        /\ PrintT(<<"trace-progress", pos>>)
        /\ pos = Len(Trace) => PrintT(<<"trace-accepted", pos>>)

\* RestoredPassesOverNothing is the recoverable family's guard; the
\* commit-confirmed family restores below completed checkpoints as a rule.
\* Checked by TraceExactlyOnceChecked.cfg.
TraceRestoredPassesOverNothing == Family = "recoverable" => RestoredPassesOverNothing

\* Not checked by TraceExactlyOnce.cfg.  Add it as an INVARIANT by hand to
\* have TLC print an accepted trace's whole behaviour, state by state.
TraceUnfinished == pos < Len(Trace)

=============================================================================
