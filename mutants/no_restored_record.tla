---------------------------- MODULE no_restored_record ----------------------------
(* Mutant no_restored_record: a redeploy writes no RESTORED record, on the bounds of MC_Superseded. *)
(* The defect is Bug = "no_restored_record" in no_restored_record.cfg; the verdict TLC must reach is *)
(* in expected.txt.                                                       *)
EXTENDS ExactlyOnce
=============================================================================
