---------------------------- MODULE restore_ignores_restored ----------------------------
(* Mutant restore_ignores_restored: an in-process restart restores from the newest COMPLETED marker, ignoring the RESTORED record's range (a takeover still honours it), on the bounds of MC_Superseded. *)
(* The defect is Bug = "restore_ignores_restored" in restore_ignores_restored.cfg; the verdict TLC must reach is *)
(* in expected.txt.                                                       *)
EXTENDS ExactlyOnce
=============================================================================
