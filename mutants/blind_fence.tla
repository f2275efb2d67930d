---------------------------- MODULE blind_fence ----------------------------
(* a reopening Kafka sink fences its transactional id without describing the orphan its .unresolved marker names (bounds of MC_KafkaLiveness, safety). *)
(* Bounds and verdict: blind_fence.cfg, expected.txt; formal/README.md, "Mutants". *)
EXTENDS ExactlyOnce
=============================================================================
