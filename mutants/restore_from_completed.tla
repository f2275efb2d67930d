---------------------------- MODULE restore_from_completed ----------------------------
(* the commit-confirmed family restores from the newest COMPLETED checkpoint instead of the newest CONFIRMED one (bounds of MC_KafkaLiveness, safety). *)
(* Bounds and verdict: restore_from_completed.cfg, expected.txt; formal/README.md, "Mutants". *)
EXTENDS ExactlyOnce
=============================================================================
