---------------------------- MODULE MC_Recoverable ----------------------------
(* Main safety model: 2 sinks, 3 checkpoint ids, 2 in flight, 2 process deaths, 2 snapshot failures, restart budget 1. *)
(* Bounds are in MC_Recoverable.cfg; how to run it: formal/README.md. *)
EXTENDS ExactlyOnce
=============================================================================
