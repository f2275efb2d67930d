---------------------------- MODULE rescale_orphans ----------------------------
(* Mutant rescale_orphans of RescaleParentMapping.tla: an old subtask past the new parallelism is succeeded by no new subtask, so its prepared work is never finalised. *)
(* The defect is Bug = "rescale_orphans" in rescale_orphans.cfg; the verdict TLC must reach is in expected.txt. *)
EXTENDS RescaleParentMapping
=============================================================================
