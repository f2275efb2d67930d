---------------------------- MODULE rescale_by_ratio ----------------------------
(* Mutant rescale_by_ratio of RescaleParentMapping.tla: the successor is o * to / from, so a surviving index's own files are claimed by another new subtask while its own index cleans them up. *)
(* The defect is Bug = "rescale_by_ratio" in rescale_by_ratio.cfg; the verdict TLC must reach is in expected.txt. *)
EXTENDS RescaleParentMapping
=============================================================================
