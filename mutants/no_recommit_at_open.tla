---------------------------- MODULE no_recommit_at_open ----------------------------
(* Mutant no_recommit_at_open: a reopening sink neither re-commits nor keeps its restored handles (recovery step 5). *)
(* The defect is Bug = "no_recommit_at_open" in no_recommit_at_open.cfg; the verdict TLC must reach is *)
(* in expected.txt.                                                       *)
EXTENDS ExactlyOnce
=============================================================================
