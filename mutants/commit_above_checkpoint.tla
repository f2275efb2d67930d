---------------------------- MODULE commit_above_checkpoint ----------------------------
(* Mutant commit_above_checkpoint: a commit of c publishes every handle the sink holds, above c as well (step 9); 1 death, 1 snapshot failure. *)
(* The defect is Bug = "commit_above_checkpoint" in commit_above_checkpoint.cfg; the verdict TLC must reach is *)
(* in expected.txt.                                                       *)
EXTENDS ExactlyOnce
=============================================================================
