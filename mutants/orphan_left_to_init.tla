---------------------------- MODULE orphan_left_to_init ----------------------------
(* a reopening Kafka sink leaves an orphan it described as ongoing to init_transactions, which a lost worker's old incarnation can commit first (bounds of MC_KafkaLostWorker). *)
(* Bounds and verdict: orphan_left_to_init.cfg, expected.txt; formal/README.md, "Mutants". *)
EXTENDS ExactlyOnce
=============================================================================
