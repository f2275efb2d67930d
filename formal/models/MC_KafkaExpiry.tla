---------------------------- MODULE MC_KafkaExpiry ----------------------------
(* Commit-confirmed liveness with broker expiry: the bounds of MC_KafkaLiveness, 1 broker transaction that expires, restart budget 2 (a refused commit restarts the job); FairSpec, invariants and EventuallySettled, SourceAnswered, CheckpointsDecided. *)
(* Bounds are in MC_KafkaExpiry.cfg; how to run it: formal/README.md. *)
EXTENDS ExactlyOnce
=============================================================================
