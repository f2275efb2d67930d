---------------------------- MODULE ack_before_durable ----------------------------
(* Mutant ack_before_durable: the sink acks before its staged file exists; it seals the file when the commit arrives (step 5 before step 4's file). *)
(* The defect is Bug = "ack_before_durable" in ack_before_durable.cfg; the verdict TLC must reach is  *)
(* in expected.txt.                                                       *)
EXTENDS ExactlyOnce
=============================================================================
