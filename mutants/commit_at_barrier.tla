---------------------------- MODULE commit_at_barrier ----------------------------
(* Mutant commit_at_barrier: the sink publishes its rows at the barrier instead of staging them (step 4 as a one-phase commit). *)
(* The defect is Bug = "commit_at_barrier" in commit_at_barrier.cfg; the verdict TLC must reach is  *)
(* in expected.txt.                                                       *)
EXTENDS ExactlyOnce
=============================================================================
