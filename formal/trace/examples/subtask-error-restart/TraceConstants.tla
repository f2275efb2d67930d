---- MODULE TraceConstants ----
\* GENERATED (example subtask-error-restart): the constants of one trace.
TraceSinks == {"op-3-0", "op-3-1"}
TraceMaxCkpt == 3
TraceDeaths == 0
TraceSnapFails == 0
TraceRestarts == 1
TraceFamily == "recoverable"
====
