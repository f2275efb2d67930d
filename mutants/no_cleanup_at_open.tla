---------------------------- MODULE no_cleanup_at_open ----------------------------
(* Mutant no_cleanup_at_open: a reopening sink leaves on disk the staged files its restored snapshot does not hold (recovery step 5). *)
(* The defect is Bug = "no_cleanup_at_open" in no_cleanup_at_open.cfg; the verdict TLC must reach is *)
(* in expected.txt.                                                       *)
EXTENDS ExactlyOnce
=============================================================================
