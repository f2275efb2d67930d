---------------------------- MODULE sail_on_without_budget ----------------------------
(* Mutant sail_on_without_budget: with no restart budget left a failed checkpoint is forgotten and the job runs on. *)
(* The defect is Bug = "sail_on_without_budget" in sail_on_without_budget.cfg; the verdict TLC must reach is *)
(* in expected.txt.                                                       *)
EXTENDS ExactlyOnce
=============================================================================
