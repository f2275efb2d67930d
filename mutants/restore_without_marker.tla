---------------------------- MODULE restore_without_marker ----------------------------
(* Mutant restore_without_marker: the restore takes the newest snapshot, marker or not (recovery step 1). *)
(* The defect is Bug = "restore_without_marker" in restore_without_marker.cfg; the verdict TLC must reach is *)
(* in expected.txt.                                                       *)
EXTENDS ExactlyOnce
=============================================================================
