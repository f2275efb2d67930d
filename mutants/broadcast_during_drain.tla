---------------------------- MODULE broadcast_during_drain ----------------------------
(* Mutant broadcast_during_drain: the coordinator goes on deciding, marking and broadcasting the checkpoints in flight while a restart drains (a subtask error with two in flight). *)
(* The defect is Bug = "broadcast_during_drain" in broadcast_during_drain.cfg; the verdict TLC must reach is *)
(* in expected.txt.                                                       *)
EXTENDS ExactlyOnce
=============================================================================
