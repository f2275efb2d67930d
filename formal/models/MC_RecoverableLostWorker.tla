---------------------------- MODULE MC_RecoverableLostWorker ----------------------------
(* Recoverable, safety: the bounds of MC_Liveness, and 1 worker declared lost and still running, whose old incarnations execute the commit frames on their wire. *)
(* Bounds are in MC_RecoverableLostWorker.cfg; how to run it: formal/README.md. *)
EXTENDS ExactlyOnce
=============================================================================
