---------------------------- MODULE liveness_no_recommit_at_open ----------------------------
(* Mutant liveness_no_recommit_at_open: calibrates EventuallySettled: no_recommit_at_open judged by the liveness property alone (no invariants), on MC_Liveness bounds. *)
(* The defect is Bug = "no_recommit_at_open" in liveness_no_recommit_at_open.cfg; the verdict TLC must reach is *)
(* in expected.txt.                                                       *)
EXTENDS ExactlyOnce
=============================================================================
