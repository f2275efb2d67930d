---------------------------- MODULE refusal_wall ----------------------------
(* an early stop of the in-doubt walk leaves no .unresolved marker above the checkpoint it stopped at (bounds of MC_KafkaSmall; judged without the guard InDoubtMarked). *)
(* Bounds and verdict: refusal_wall.cfg, expected.txt; formal/README.md, "Mutants". *)
EXTENDS ExactlyOnce
=============================================================================
