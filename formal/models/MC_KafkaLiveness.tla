---------------------------- MODULE MC_KafkaLiveness ----------------------------
(* Commit-confirmed liveness: weak fairness on the protocol steps; 2 sinks, 2 ids, 1 in flight, 1 death, 1 snapshot failure, 1 walk stopped early, budget 1; EventuallySettled, SourceAnswered, CheckpointsDecided. *)
(* Bounds are in MC_KafkaLiveness.cfg; how to run it: formal/README.md. *)
EXTENDS ExactlyOnce
=============================================================================
