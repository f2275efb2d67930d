---------------------------- MODULE open_skips_restore_zero ----------------------------
(* a Kafka sink reopening at restore point 0 settles no marker and arms no suppression (bounds of MC_KafkaLiveness, safety). *)
(* Bounds and verdict: open_skips_restore_zero.cfg, expected.txt; formal/README.md, "Mutants". *)
EXTENDS ExactlyOnce
=============================================================================
