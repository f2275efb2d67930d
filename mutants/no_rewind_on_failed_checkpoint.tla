---------------------------- MODULE no_rewind_on_failed_checkpoint ----------------------------
(* Mutant no_rewind_on_failed_checkpoint: a failed checkpoint neither restarts nor fails the job: it runs on (failure and in-process restart). *)
(* The defect is Bug = "no_rewind_on_failed_checkpoint" in no_rewind_on_failed_checkpoint.cfg; the verdict TLC must reach is  *)
(* in expected.txt.                                                       *)
EXTENDS ExactlyOnce
=============================================================================
