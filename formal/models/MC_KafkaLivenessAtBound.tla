---------------------- MODULE MC_KafkaLivenessAtBound ----------------------
(* Commit-confirmed progress at the in-flight bound: weak fairness on the protocol steps; 1 sink, 4 ids, 2 in flight (the source asks again while 2 are in flight), 1 death, 1 walk stopped early, budget 1; invariants, EventuallySettled, SourceAnswered, CheckpointsDecided. *)
(* Bounds are in MC_KafkaLivenessAtBound.cfg; how to run it: formal/README.md. *)
EXTENDS ExactlyOnce
=============================================================================
