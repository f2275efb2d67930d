---------------------------- MODULE broadcast_before_marker ----------------------------
(* Mutant broadcast_before_marker: the commit is broadcast before the COMPLETED marker is durable (step 8 before step 7); 1 death, 1 snapshot failure. *)
(* The defect is Bug = "broadcast_before_marker" in broadcast_before_marker.cfg; the verdict TLC must reach is *)
(* in expected.txt.                                                       *)
EXTENDS ExactlyOnce
=============================================================================
