---------------------------- MODULE refused_commit_ignored ----------------------------
(* a Kafka sink takes a commit the broker refused (its transaction expired) for an acknowledgement: receipt, finish and confirmation follow (bounds of MC_KafkaExpiry, safety). *)
(* Bounds and verdict: refused_commit_ignored.cfg, expected.txt; formal/README.md, "Mutants". *)
EXTENDS ExactlyOnce
=============================================================================
