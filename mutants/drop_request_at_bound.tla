---------------------------- MODULE drop_request_at_bound ----------------------------
(* Mutant drop_request_at_bound: a request that comes while MaxInFlight checkpoints are in flight is dropped, not held; judged by the progress property SourceAnswered alone (no invariants, deadlock not checked), on MC_LivenessAtBound bounds. *)
(* The defect is Bug = "drop_request_at_bound" in drop_request_at_bound.cfg; the verdict TLC must reach is *)
(* in expected.txt.                                                       *)
EXTENDS ExactlyOnce
=============================================================================
