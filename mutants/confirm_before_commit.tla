---------------------------- MODULE confirm_before_commit ----------------------------
(* a worker sends CommitConfirmed as it takes the commit frame, before the broker has committed (bounds of MC_KafkaLiveness, safety). *)
(* Bounds and verdict: confirm_before_commit.cfg, expected.txt; formal/README.md, "Mutants". *)
EXTENDS ExactlyOnce
=============================================================================
