---------------------------- MODULE MC_KafkaSuperseded ----------------------------
(* Commit-confirmed, safety: the bounds of MC_KafkaLiveness, and one takeover from a live coordinator whose trigger loop still sends a barrier under its superseded epoch. *)
(* Bounds are in MC_KafkaSuperseded.cfg; how to run it: formal/README.md. *)
EXTENDS ExactlyOnce
=============================================================================
