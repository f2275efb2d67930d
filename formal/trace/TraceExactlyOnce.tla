------------------------- MODULE TraceExactlyOnce -------------------------
(***************************************************************************)
(* Trace validation: follows one recorded protocol trace through the       *)
(* specification.  The next-state relation is ExactlyOnce's, constrained   *)
(* so that every step either produces the next recorded event (and moves   *)
(* pos on by one) or is a hidden step the engine cannot record (the        *)
(* process dying, a COMPLETED marker whose line the death cut off, the end *)
(* of a restart's drain, a subtask's Failed frame).                        *)
(*                                                                         *)
(* Every field of the vocabulary (formal/trace/events.txt) is read here:   *)
(* EventFields lists, per event, the fields a record must carry and this   *)
(* module constrains; OptionalFields those of events.txt's pending changes *)
(* (none today), constrained when present.                                 *)
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
    ended       \* the live process wrote its last line (JobEnds)

traceOnly == <<placed, opened, ackedTo, depWorker, closing, epochNow>>
traceVars == <<vars, pos, ev, traceOnly, ended>>

\* The vocabulary this module handles (formal/trace/events.txt), and the
\* fields each event must carry, every one of which is read below.
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
     JobEnds        |-> {"job", "outcome", "epoch"}]

\* Fields of events.txt's pending changes: the engine does not emit them yet;
\* read and constrained when a record carries them.  None today.
OptionalFields == [e \in {} |-> {}]

Optional(name) == IF name \in DOMAIN OptionalFields THEN OptionalFields[name] ELSE {}

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
TraceMaxEmpty == Cardinality(TraceSinks) * TraceMaxCkpt
TraceNoSupersede == 0

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

\* A sink acts only once its open of this deployment is recorded.
SinkActs(e) == e.sub \in Sinks /\ e.sub \in opened

\* The first open of a fresh start is the initial state (nothing restored):
\* its SinkOpens line is a stutter, once per sink.
FreshOpen(e) ==
    /\ FreshDeploy
    /\ e.restore = 0
    /\ e.recommitted = 0
    /\ UNCHANGED vars

\* The lines of the live coordinator (and its source's barriers) carry its
\* fencing epoch: 1 for a fresh start (TraceFirstEpoch), the one its
\* CoordRecovers claimed for a recovery; never 0.
LiveEpoch(e) == e.epoch = epochNow /\ epochNow >= 1

Produce(e) ==
    \/ /\ e.event = "Trigger"
       /\ LiveEpoch(e)
       /\ e.kind \in {"periodic", "final", "savepoint"}
       /\ ~closing                       \* nothing is triggered after the final one
       /\ nextId = e.ckpt
       /\ Trigger
       /\ closing' = (e.kind # "periodic")
       /\ UNCHANGED <<placed, opened, ackedTo, depWorker, epochNow>>
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
                  /\ UNCHANGED <<vars, placed, opened, depWorker, closing, epochNow>>
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
             \* The open re-commits every handle the restored snapshot holds:
             \* the engine counts them (staged_sink.rs, open()).
             /\ e.recommitted = Cardinality(Held(e.sub, runRestore))
             /\ SinkOpens(e.sub)
          \/ FreshOpen(e)
       /\ opened' = opened \cup {e.sub}
       /\ UNCHANGED <<placed, ackedTo, depWorker, closing, epochNow>>
    \/ /\ e.event = "CoordRecovers"
       /\ phase = "down"
       \* a new run claims an epoch above every earlier one
       \* (engine/src/checkpoint/fence.rs: one above the job's EPOCH)
       /\ e.epoch > epochNow
       \* this engine writes no CONFIRMED markers (the recoverable family)
       /\ e.confirmed = 0
       /\ RestorePoint(TRUE) = e.completed
       /\ CoordRecovers
       /\ epochNow' = e.epoch
       /\ UNCHANGED <<placed, opened, ackedTo, depWorker, closing>>
    \/ /\ e.event = "Redeploy"
       /\ phase = "deploying"
       /\ restoreTo = e.restore
       /\ RedeployNext(restoreTo) = e.next
       /\ Redeploy
       /\ NewDeployment
       /\ UNCHANGED epochNow
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
       /\ UNCHANGED <<vars, opened, ackedTo, closing, epochNow>>
    \* The process's last line: nothing of it follows (TraceNext: only a
    \* new process's CoordRecovers may come after it).  A failed job may be
    \* run again, as may a finished one.
    \/ /\ e.event = "JobEnds"
       /\ LiveEpoch(e)
       \* evaluated as a value: in an action, TLC expands a quantifier over a
       \* large set into nested calls (a stack overflow at 10,000 events)
       /\ (CASE e.outcome \in {"finished", "savepoint"} -> EndsSettled
               [] e.outcome = "failed" -> phase = "failed"
               [] OTHER -> FALSE) = TRUE
       /\ UNCHANGED <<vars, traceOnly>>

(* Hidden steps: the engine cannot record them.  Each is admitted only     *)
(* where the next event witnesses it, so a branch that takes one the run   *)
(* did not need dies at once.                                              *)
Hidden(e) ==
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
    \/ /\ e.event = "Redeploy"
       /\ RestartDrained                   \* an in-process restart's drain ended
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

\* Not checked by TraceExactlyOnce.cfg.  Add it as an INVARIANT by hand to
\* have TLC print an accepted trace's whole behaviour, state by state.
TraceUnfinished == pos < Len(Trace)

=============================================================================
