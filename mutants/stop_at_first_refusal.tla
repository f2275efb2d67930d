---------------------------- MODULE stop_at_first_refusal ----------------------------
(* the in-doubt walk stops at the first handle it refuses, leaving the rest of that checkpoint unprobed (bounds of MC_KafkaLiveness, safety). *)
(* Bounds and verdict: stop_at_first_refusal.cfg, expected.txt; formal/README.md, "Mutants". *)
EXTENDS ExactlyOnce
=============================================================================
