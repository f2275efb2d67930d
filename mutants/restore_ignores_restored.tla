---------------------------- MODULE restore_ignores_restored ----------------------------
(* Mutant restore_ignores_restored: the restore rule takes the newest COMPLETED marker and ignores the RESTORED record (recovery step 1). *)
(* The defect is Bug = "restore_ignores_restored" in restore_ignores_restored.cfg; the verdict TLC must reach is  *)
(* in expected.txt.                                                       *)
EXTENDS ExactlyOnce
=============================================================================
