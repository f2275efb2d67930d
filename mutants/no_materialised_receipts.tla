---------------------------- MODULE no_materialised_receipts ----------------------------
(* a commit the in-doubt walk proves over the wire gets no receipt (bounds of MC_KafkaLiveness, safety; judged without the guard InDoubtMarked). *)
(* Bounds and verdict: no_materialised_receipts.cfg, expected.txt; formal/README.md, "Mutants". *)
EXTENDS ExactlyOnce
=============================================================================
