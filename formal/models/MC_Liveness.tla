---------------------------- MODULE MC_Liveness ----------------------------
(* Liveness: weak fairness on the protocol steps; 2 sinks, 2 ids, 1 in flight, 1 death, 1 snapshot failure, budget 1, 1 empty pair; EventuallySettled, SourceAnswered, CheckpointsDecided. *)
(* Bounds are in MC_Liveness.cfg; how to run it: formal/README.md. *)
EXTENDS ExactlyOnce
=============================================================================
