---------------------------- MODULE restore_from_superseded ----------------------------
(* Mutant restore_from_superseded: a takeover restores from the newest COMPLETED marker, even one a superseded coordinator landed in the range the job's newest deploy restored below (the RESTORED record ignored by CoordRecovers). *)
(* The defect is Bug = "restore_from_superseded" in restore_from_superseded.cfg; the verdict TLC must reach is *)
(* in expected.txt.                                                       *)
EXTENDS ExactlyOnce
=============================================================================
