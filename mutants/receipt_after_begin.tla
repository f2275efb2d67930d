---------------------------- MODULE receipt_after_begin ----------------------------
(* a Kafka sink may begin its successor transaction before the commit's receipt is durable (bounds of MC_KafkaSmall). *)
(* Bounds and verdict: receipt_after_begin.cfg, expected.txt; formal/README.md, "Mutants". *)
EXTENDS ExactlyOnce
=============================================================================
