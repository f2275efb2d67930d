---------------------------- MODULE rescale_two_successors ----------------------------
(* Mutant rescale_two_successors of RescaleParentMapping.tla: old subtask 0's prepared work is also handed to every other new subtask. *)
(* The defect is Bug = "rescale_two_successors" in rescale_two_successors.cfg; the verdict TLC must reach is in expected.txt. *)
EXTENDS RescaleParentMapping
=============================================================================
