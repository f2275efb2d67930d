------------------------ MODULE MC_LivenessAtBound ------------------------
(* Progress at the in-flight bound: weak fairness on the protocol steps; 1 sink, 4 ids, 2 in flight (the source asks again while 2 are in flight), 1 death, budget 1; invariants, EventuallySettled, SourceAnswered, CheckpointsDecided. *)
(* Bounds are in MC_LivenessAtBound.cfg; how to run it: formal/README.md. *)
EXTENDS ExactlyOnce
=============================================================================
