---------------------------- MODULE broadcast_before_marker ----------------------------
(* Mutant broadcast_before_marker: the commit broadcast goes out before COMPLETED-<c> is durable (the marker is written once every sink has committed) (PROTOCOL step 8 before step 7). *)
(* The defect is Bug = "broadcast_before_marker" in broadcast_before_marker.cfg; the verdict TLC must reach is  *)
(* in expected.txt.                                                       *)
EXTENDS ExactlyOnce
=============================================================================
