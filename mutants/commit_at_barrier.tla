---------------------------- MODULE commit_at_barrier ----------------------------
(* Mutant commit_at_barrier: a sink publishes at the barrier: one phase instead of two (step 4). *)
(* The defect is Bug = "commit_at_barrier" in commit_at_barrier.cfg; the verdict TLC must reach is *)
(* in expected.txt.                                                       *)
EXTENDS ExactlyOnce
=============================================================================
