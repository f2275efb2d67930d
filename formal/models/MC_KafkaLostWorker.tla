---------------------------- MODULE MC_KafkaLostWorker ----------------------------
(* Commit-confirmed, safety: the bounds of MC_KafkaLiveness, and a worker declared lost may still be running (1). *)
(* Bounds are in MC_KafkaLostWorker.cfg; how to run it: formal/README.md. *)
EXTENDS ExactlyOnce
=============================================================================
