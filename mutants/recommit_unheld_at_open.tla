---------------------------- MODULE recommit_unheld_at_open ----------------------------
(* Mutant recommit_unheld_at_open: a reopening sink re-commits every staged file it finds, held or not (recovery step 5). *)
(* The defect is Bug = "recommit_unheld_at_open" in recommit_unheld_at_open.cfg; the verdict TLC must reach is *)
(* in expected.txt.                                                       *)
EXTENDS ExactlyOnce
=============================================================================
