---------------------------- MODULE MC_Rescale ----------------------------
(* A restore at another parallelism, every pair of parallelisms 1..4, every *)
(* order in which the new subtasks open.  Bounds are in MC_Rescale.cfg.      *)
EXTENDS RescaleParentMapping
=============================================================================
