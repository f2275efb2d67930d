---------------------------- MODULE MC_RecoverableLong ----------------------------
(* Longer runs: 2 sinks, 5 checkpoint ids, 2 in flight, 1 process death, 1 snapshot failure, restart budget 1. *)
(* Bounds are in MC_RecoverableLong.cfg; how to run it: formal/README.md. *)
EXTENDS ExactlyOnce
=============================================================================
