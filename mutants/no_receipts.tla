---------------------------- MODULE no_receipts ----------------------------
(* a Kafka sink writes no commit receipt when the broker acknowledges its commit (bounds of MC_KafkaSmall). *)
(* Bounds and verdict: no_receipts.cfg, expected.txt; formal/README.md, "Mutants". *)
EXTENDS ExactlyOnce
=============================================================================
