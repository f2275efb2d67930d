---------------------------- MODULE no_recommit_at_open ----------------------------
(* Mutant no_recommit_at_open: a reopening sink keeps its restored handles in memory and does not re-commit them (recovery step 5). *)
(* The defect is Bug = "no_recommit_at_open" in no_recommit_at_open.cfg; the verdict TLC must reach is  *)
(* in expected.txt.                                                       *)
EXTENDS ExactlyOnce
=============================================================================
