---------------------------- MODULE MC_NoBudget ----------------------------
(* No restart budget: a failed checkpoint fails the job (exit 1) and a later run resumes; 2 sinks, 4 ids, 2 in flight, 2 deaths, 2 snapshot failures. *)
(* Bounds are in MC_NoBudget.cfg; how to run it: formal/README.md. *)
EXTENDS ExactlyOnce
=============================================================================
