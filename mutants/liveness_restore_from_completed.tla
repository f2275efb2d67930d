---------------------------- MODULE liveness_restore_from_completed ----------------------------
(* as restore_from_completed, judged by EventuallySettled alone: the lost interval is never published. *)
(* Bounds and verdict: liveness_restore_from_completed.cfg, expected.txt; formal/README.md, "Mutants". *)
EXTENDS ExactlyOnce
=============================================================================
