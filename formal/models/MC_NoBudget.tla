---------------------------- MODULE MC_NoBudget ----------------------------
(* No restart budget: a failed checkpoint fails the job and a later run resumes; 2 sinks, 3 ids, 2 in flight, 2 deaths, 1 snapshot failure. *)
(* Bounds are in MC_NoBudget.cfg; how to run it: formal/README.md. *)
EXTENDS ExactlyOnce
=============================================================================
