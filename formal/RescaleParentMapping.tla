------------------------- MODULE RescaleParentMapping -------------------------
(* Restore at another parallelism, the sink side: which new subtask         *)
(* finalises which old subtask's prepared work.  The engine's sites:         *)
(* engine/src/operators/rescale.rs (Rescale::successor, predecessors) and    *)
(* engine/src/operators/staged_sink.rs (StagedFileSink::open with a          *)
(* rescale's share).  ExactlyOnce.tla keys a sink by its subtask index and   *)
(* fixes the set for the run; this module takes the step it leaves out: the  *)
(* restore that changes the set.                                             *)
(*                                                                           *)
(* At the restore point each old subtask o holds the handle of one prepared  *)
(* (staged) file, <<o, "held">>, and has left one more staged file sealed    *)
(* after the restore point, <<o, "unheld">>, which no snapshot holds.  A     *)
(* file's first component is the index in its name (part-<sub>-<id>).       *)
(* Every new subtask opens once, in any order: it publishes the held files   *)
(* of the old subtasks it succeeds (a published file is skipped) and removes *)
(* the staged files of its own index, and of the old indices past the new    *)
(* parallelism it adopted, that its share does not hold.                     *)
EXTENDS Naturals, FiniteSets

CONSTANTS MaxParallelism, Bug

Bugs == {"none",
         "rescale_orphans",         \* an old subtask past the new parallelism has no successor
         "rescale_two_successors",  \* old subtask 0's work also goes to every other new subtask
         "rescale_by_ratio"}        \* successor o * to \div from: an index's own files claimed by another
ASSUME MaxParallelism \in 1..6 /\ Bug \in Bugs

VARIABLES from, to, phase, staged, published, finalisers, opened
vars == <<from, to, phase, staged, published, finalisers, opened>>

Old == 0..(from - 1)
New == 0..(to - 1)
Files == {<<o, k>> : o \in 0..(MaxParallelism - 1), k \in {"held", "unheld"}}
Held(o) == <<o, "held">>

\* The engine's rule: an index that survives keeps its own work; one past
\* the new parallelism goes to its index modulo the new parallelism.
Successor(o) == IF Bug = "rescale_by_ratio" THEN (o * to) \div from   \* MUTANT
                ELSE IF o < to THEN o ELSE o % to

Preds(n) ==
    {o \in Old : Successor(o) = n /\ ~(Bug = "rescale_orphans" /\ o >= to)}   \* MUTANT (orphans)
    \cup (IF Bug = "rescale_two_successors" /\ n > 0 THEN {0} ELSE {})          \* MUTANT

\* The old indices whose staged files n cleans up besides its own: the ones
\* no new subtask has as its own index.
Adopted(n) == {o \in Preds(n) : o >= to}

\* The old run stopped (killed, or at a savepoint) at parallelism `from`.
Init ==
    /\ from \in 1..MaxParallelism
    /\ to = from
    /\ phase = "stopped"
    /\ staged = {f \in Files : f[1] < from}
    /\ published = {}
    /\ finalisers = [f \in Files |-> {}]
    /\ opened = {}

\* The restore at parallelism `to` (engine: map_state records the rescale,
\* the deploy hands each new subtask its share).
Restore ==
    /\ phase = "stopped"
    /\ phase' = "opening"
    /\ to' \in 1..MaxParallelism
    /\ UNCHANGED <<from, staged, published, finalisers, opened>>

Open(n) ==
    LET share == {Held(o) : o \in Preds(n)}
        ours == {f \in staged : f[1] = n \/ f[1] \in Adopted(n)}
    IN
    /\ phase = "opening"
    /\ n \notin opened
    /\ opened' = opened \cup {n}
    /\ published' = published \cup (share \cap staged)
    /\ staged' = (staged \ share) \ ours
    /\ finalisers' = [f \in Files |-> IF f \in share THEN finalisers[f] \cup {n} ELSE finalisers[f]]
    /\ UNCHANGED <<from, to, phase>>

Done == phase = "opening" /\ opened = New /\ UNCHANGED vars

Next == Restore \/ (\E n \in New : Open(n)) \/ Done

Spec == Init /\ [][Next]_vars

TypeOK ==
    /\ from \in 1..MaxParallelism /\ to \in 1..MaxParallelism
    /\ phase \in {"stopped", "opening"}
    /\ staged \subseteq Files /\ published \subseteq Files
    /\ opened \subseteq New

\* The rule itself: every old subtask's prepared work has exactly one new
\* subtask that finalises it.
EveryOldSubtaskHasExactlyOneSuccessor ==
    phase = "opening" => \A o \in Old : Cardinality({n \in New : o \in Preds(n)}) = 1

\* No prepared file is finalised by two new subtasks.
OneFinaliser == \A f \in Files : Cardinality(finalisers[f]) <= 1

\* Once every new subtask opened: every held file is published, no unheld
\* file is, and nothing is left staged.
NoLoss == opened = New => \A o \in Old : Held(o) \in published
OnlyHeldPublished == \A f \in published : f[2] = "held"
NoUnownedStaged == opened = New => staged = {}
===============================================================================
