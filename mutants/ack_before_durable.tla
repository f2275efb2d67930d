---------------------------- MODULE ack_before_durable ----------------------------
(* Mutant ack_before_durable: a sink acks before its staged file is durable; it seals the file at commit (step 5 before step 4). *)
(* The defect is Bug = "ack_before_durable" in ack_before_durable.cfg; the verdict TLC must reach is *)
(* in expected.txt.                                                       *)
EXTENDS ExactlyOnce
=============================================================================
