---------------------------- MODULE close_aborts_prepared ----------------------------
(* Mutant close_aborts_prepared: a cancelled sink (a restart's drain, a failing job) deletes the staged files it holds. *)
(* The defect is Bug = "close_aborts_prepared" in close_aborts_prepared.cfg; the verdict TLC must reach is *)
(* in expected.txt.                                                       *)
EXTENDS ExactlyOnce
=============================================================================
