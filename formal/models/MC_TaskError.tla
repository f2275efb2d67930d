---------------------------- MODULE MC_TaskError ----------------------------
(* A subtask's error restarts the job: 2 sinks, 3 ids, 2 in flight, 1 death, 1 subtask error, budget 1. *)
(* Bounds are in MC_TaskError.cfg; how to run it: formal/README.md. *)
EXTENDS ExactlyOnce
=============================================================================
