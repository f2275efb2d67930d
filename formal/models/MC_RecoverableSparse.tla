---------------------------- MODULE MC_RecoverableSparse ----------------------------
(* Empty intervals: 2 sinks, 3 checkpoint ids, 2 in flight, 1 death, 1 snapshot failure, budget 1, up to 2 empty (sink, position) pairs. *)
(* Bounds are in MC_RecoverableSparse.cfg; how to run it: formal/README.md. *)
EXTENDS ExactlyOnce
=============================================================================
