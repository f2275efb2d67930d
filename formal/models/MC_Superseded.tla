---------------------------- MODULE MC_Superseded ----------------------------
(* A second run takes the job over from a live one (the superseded coordinator, its COMPLETED put landing late): 2 sinks, 3 ids, 2 in flight, 1 death, 1 takeover, 1 snapshot failure, budget 1. *)
(* Bounds are in MC_Superseded.cfg; how to run it: formal/README.md. *)
EXTENDS ExactlyOnce
=============================================================================
