---------------------------- MODULE id_reuse ----------------------------
(* Mutant id_reuse: a redeploy numbers its checkpoints from the restore point plus one, reusing ids (recovery step 2). *)
(* The defect is Bug = "id_reuse" in id_reuse.cfg; the verdict TLC must reach is *)
(* in expected.txt.                                                       *)
EXTENDS ExactlyOnce
=============================================================================
