---------------------------- MODULE MC_ThreeSinks ----------------------------
(* Three sinks: 3 sinks, 2 ids, 2 in flight, 1 death, 1 snapshot failure, budget 1. *)
(* Bounds are in MC_ThreeSinks.cfg; how to run it: formal/README.md. *)
EXTENDS ExactlyOnce
=============================================================================
