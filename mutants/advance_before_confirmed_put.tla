---------------------------- MODULE advance_before_confirmed_put ----------------------------
(* the in-memory confirmed restore point advances before the CONFIRMED marker's put (bounds of MC_KafkaLiveness, safety). *)
(* Bounds and verdict: advance_before_confirmed_put.cfg, expected.txt; formal/README.md, "Mutants". *)
EXTENDS ExactlyOnce
=============================================================================
