---------------------------- MODULE no_rewind_on_failed_checkpoint ----------------------------
(* Mutant no_rewind_on_failed_checkpoint: a failed checkpoint does not restart the job: it runs on without the aborted interval. *)
(* The defect is Bug = "no_rewind_on_failed_checkpoint" in no_rewind_on_failed_checkpoint.cfg; the verdict TLC must reach is *)
(* in expected.txt.                                                       *)
EXTENDS ExactlyOnce
=============================================================================
