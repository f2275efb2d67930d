---------------------------- MODULE MC_KafkaSmall ----------------------------
(* Commit-confirmed safety model: 2 sinks, 3 checkpoint ids, 1 in flight, 2 process deaths, 1 snapshot failure, 1 walk stopped early, restart budget 1; a lost worker is a dead one. *)
(* Bounds are in MC_KafkaSmall.cfg; how to run it: formal/README.md. *)
EXTENDS ExactlyOnce
=============================================================================
