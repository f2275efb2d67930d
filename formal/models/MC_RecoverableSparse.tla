---------------------------- MODULE MC_RecoverableSparse ----------------------------
(* Empty intervals: 2 sinks, 3 ids, 2 in flight, 1 death, budget 1, up to 2 (sink, position) pairs that bring no rows. *)
(* Bounds are in MC_RecoverableSparse.cfg; how to run it: formal/README.md. *)
EXTENDS ExactlyOnce
=============================================================================
