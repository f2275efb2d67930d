---------------------------- MODULE restart_numbers_from_disk ----------------------------
(* Mutant restart_numbers_from_disk: an in-process restart numbers from the disk's next id only, not above the ids it triggered itself. *)
(* The defect is Bug = "restart_numbers_from_disk" in restart_numbers_from_disk.cfg; the verdict TLC must reach is *)
(* in expected.txt.                                                       *)
EXTENDS ExactlyOnce
=============================================================================
