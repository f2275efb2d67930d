---------------------------- MODULE complete_above_failed ----------------------------
(* Mutant complete_above_failed: a checkpoint above a failed one still completes while the job rewinds (step 6). *)
(* The defect is Bug = "complete_above_failed" in complete_above_failed.cfg; the verdict TLC must reach is *)
(* in expected.txt.                                                       *)
EXTENDS ExactlyOnce
=============================================================================
