---------------------------- MODULE MC_KafkaTwoInFlight ----------------------------
(* Commit-confirmed: 2 sinks, 3 ids, 2 in flight, no process death, 1 snapshot failure, 1 worker declared lost and still running, restart budget 1. *)
(* Bounds are in MC_KafkaTwoInFlight.cfg; how to run it: formal/README.md. *)
EXTENDS ExactlyOnce
=============================================================================
