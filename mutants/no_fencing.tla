---------------------------- MODULE no_fencing ----------------------------
(* a worker acts on a frame from a superseded coordinator: its stale barrier seals a transaction at a Kafka sink that nothing will commit (bounds of MC_KafkaSuperseded; judged by the correctness invariants alone, without the ghost Fenced). *)
(* Bounds and verdict: no_fencing.cfg, expected.txt; formal/README.md, "Mutants". *)
EXTENDS ExactlyOnce
=============================================================================
