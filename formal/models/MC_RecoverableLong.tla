---------------------------- MODULE MC_RecoverableLong ----------------------------
(* Longer runs: 2 sinks, 4 ids, 2 in flight, 1 death, no snapshot failure, budget 1. *)
(* Bounds are in MC_RecoverableLong.cfg; how to run it: formal/README.md. *)
EXTENDS ExactlyOnce
=============================================================================
