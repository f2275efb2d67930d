---------------------------- MODULE MC_TaskError ----------------------------
(* Subtask errors: 2 sinks, 4 checkpoint ids, 2 in flight, 1 process death, 1 snapshot failure, 1 subtask error, restart budget 2. *)
(* Bounds are in MC_TaskError.cfg; how to run it: formal/README.md. *)
EXTENDS ExactlyOnce
=============================================================================
