------------------------- MODULE TraceExactlyOnce -------------------------
(***************************************************************************)
(* Trace validation: follows one recorded protocol trace through the       *)
(* specification.  The next-state relation is ExactlyOnce's, constrained   *)
(* so that every step either produces the next recorded event (and moves   *)
(* pos on by one) or is a hidden step the engine cannot record (the        *)
(* process dying, a COMPLETED marker whose line the death cut off, the end *)
(* of a restart's drain, a subtask's Failed frame).                        *)
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
(*                 none was printed).                                      *)
(* Any other exit status (10, 11, 12, 75, 150+, 255) is an error of the    *)
(* setup or the generated modules, never a verdict.  Acceptance is not an  *)
(* invariant violation on purpose: TLC would print the whole accepted      *)
(* behaviour as a counterexample, which costs more than the check.         *)
(***************************************************************************)
EXTENDS ExactlyOnce, TLC, TraceConstants, TraceEvents

VARIABLES
    pos,    \* how many events of Trace have been produced
    ev      \* Trace[pos + 1], or EndOfTrace once every event is produced

traceVars == <<vars, pos, ev>>

\* The vocabulary this module handles (formal/trace/events.txt), and the
\* fields it reads from each event.  Records may carry more fields.
EventFields ==
    [Trigger        |-> {"ckpt"},
     DeliverBarrier |-> {"ckpt", "fenced"},
     SinkPrepare    |-> {"sub", "ckpt", "staged"},
     SubtaskAck     |-> {"sub", "ckpt", "ok"},
     CoordComplete  |-> {"ckpt", "outcome"},
     WriteCompleted |-> {"ckpt"},
     Broadcast      |-> {"ckpt", "withheld"},
     DeliverCommit  |-> {"sub", "ckpt", "accepted"},
     SinkCommit     |-> {"sub", "ckpt"},
     SinkOpens      |-> {"sub", "family", "restore", "recommitted"},
     CoordRecovers  |-> {"completed"},
     Redeploy       |-> {"restore", "next"},
     RestartOnError |-> {"ckpt"},
     Placement      |-> {}]

HandledEvents == DOMAIN EventFields

\* A generated trace that breaks this is an error of the generator (TLC exit
\* 10, "Assumption ... is false"), never a verdict on the run.
ASSUME TraceWellFormed ==
    /\ TraceSinks # {}
    /\ \A i \in 1..Len(Trace) :
          /\ "event" \in DOMAIN Trace[i]
          /\ Trace[i].event \in HandledEvents
          /\ EventFields[Trace[i].event] \subseteq DOMAIN Trace[i]

EndOfTrace == [event |-> "EndOfTrace"]

\* Constants of ExactlyOnce for a trace (bound in TraceExactlyOnce.cfg).
TraceMaxInFlight == IF TraceMaxCkpt > 0 THEN TraceMaxCkpt ELSE 1
TraceMaxEmpty == Cardinality(TraceSinks) * TraceMaxCkpt

-----------------------------------------------------------------------------
(* One step per recorded event.  Each disjunct first tests ev.event, so a  *)
(* record is only asked for the fields its event carries.                  *)

\* The first open of a fresh start is the initial state (nothing restored):
\* its SinkOpens line is a stutter.
FreshOpen(e) ==
    /\ restored = <<>>
    /\ e.restore = 0
    /\ e.recommitted = 0
    /\ UNCHANGED vars

Produce(e) ==
    \/ /\ e.event = "Trigger"
       /\ nextId = e.ckpt
       /\ Trigger
    \/ /\ e.event = "DeliverBarrier"
       /\ e.fenced = FALSE
       /\ srcNext = e.ckpt
       /\ DeliverBarrier
    \/ /\ e.event = "SinkPrepare"
       /\ e.sub \in Sinks
       /\ NextBarrier(e.sub) = e.ckpt
       /\ IF e.staged THEN SinkPrepare(e.sub) ELSE SinkPrepareEmpty(e.sub)
    \/ /\ e.event = "SubtaskAck"
       /\ IF e.sub \in Sinks
             THEN /\ prepC[e.sub] = e.ckpt
                  /\ IF e.ok THEN SinkAck(e.sub) ELSE SinkPrepareFails(e.sub)
             \* a non-sink subtask's ack (the source's, an operator's): a
             \* stutter, once the source has emitted that barrier
             ELSE /\ e.ok = TRUE
                  /\ phase \in TasksRun
                  /\ runBase <= e.ckpt /\ e.ckpt < srcNext
                  /\ UNCHANGED vars
    \/ /\ e.event = "CoordComplete"
       /\ \/ e.outcome = "completed" /\ CoordCompleted(e.ckpt)
          \/ e.outcome = "failed" /\ CoordFailed(e.ckpt)
          \* decided together with the failed checkpoint below it
          \/ e.outcome = "discarded" /\ e.ckpt \in discarded /\ UNCHANGED vars
    \/ /\ e.event = "WriteCompleted"
       /\ pipeC = e.ckpt
       /\ WriteCompleted
    \/ /\ e.event = "Broadcast"
       /\ e.withheld = FALSE
       /\ pipeC = e.ckpt
       /\ Broadcast
    \/ /\ e.event = "DeliverCommit"
       /\ e.accepted = TRUE
       /\ e.sub \in Sinks
       /\ commitQ[e.sub] # <<>>
       /\ Head(commitQ[e.sub]) = e.ckpt
       /\ DeliverCommit(e.sub)
    \/ /\ e.event = "SinkCommit"
       /\ e.sub \in Sinks
       /\ comC[e.sub] = e.ckpt
       /\ SinkCommit(e.sub)
    \/ /\ e.event = "SinkOpens"
       /\ e.family = Family
       /\ e.sub \in Sinks
       /\ \/ /\ sinkUp[e.sub] = "opening"
             /\ runRestore = e.restore
             \* The open re-commits every handle the restored snapshot holds:
             \* the engine counts them (staged_sink.rs, open()).
             /\ e.recommitted = Cardinality(Held(e.sub, runRestore))
             /\ SinkOpens(e.sub)
          \/ FreshOpen(e)
    \/ /\ e.event = "CoordRecovers"
       /\ phase = "down"
       /\ RestorePoint = e.completed
       /\ CoordRecovers
    \/ /\ e.event = "Redeploy"
       /\ phase = "deploying"
       /\ restoreTo = e.restore
       /\ NextFromDisk = e.next
       /\ Redeploy
    \/ /\ e.event = "RestartOnError"
       /\ IF e.ckpt = 0 THEN errorDue ELSE failedAt = e.ckpt
       /\ RestartOnError
    \/ /\ e.event = "Placement"
       /\ UNCHANGED vars

(* Hidden steps: the engine cannot record them.  Each is admitted only     *)
(* where the next event witnesses it, so a branch that takes one the run   *)
(* did not need dies at once.                                              *)
Hidden(e) ==
    \/ /\ e.event = "CoordRecovers"
       /\ \/ Die                           \* the previous process died (or exited)
          \/ /\ pipeC = e.completed        \* COMPLETED-<c> durable, its line
             /\ WriteCompleted             \* lost to the death that followed
          \/ DeliverBarrier                \* the source's position snapshot of a
                                           \* triggered checkpoint durable, its
                                           \* DeliverBarrier line lost to the death
                                           \* (the line follows the write): the
                                           \* Redeploy's next counts that snapshot
    \/ /\ e.event = "Redeploy"
       /\ RestartDrained                   \* an in-process restart's drain ended
    \/ /\ e.event = "RestartOnError"
       /\ e.ckpt = 0
       /\ SubtaskFails                     \* a subtask's Failed frame (no line)

TraceInit ==
    /\ Init
    /\ pos = 0
    /\ ev = IF Len(Trace) > 0 THEN Trace[1] ELSE EndOfTrace
    /\ TLCSet(1, 0)

TraceNext ==
    \/ /\ pos < Len(Trace)
       /\ Produce(ev)
       /\ pos' = pos + 1
       /\ ev' = IF pos + 1 < Len(Trace) THEN Trace[pos + 2] ELSE EndOfTrace
    \/ /\ pos < Len(Trace)
       /\ Hidden(ev)
       /\ UNCHANGED <<pos, ev>>

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
