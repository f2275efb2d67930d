---- MODULE TraceConstants ----
\* GENERATED (example kill-after-marker): the constants of one trace.
TraceSinks == {"op-3-0", "op-3-1"}
TraceMaxCkpt == 3
TraceDeaths == 1
TraceSnapFails == 0
TraceRestarts == 0
TraceFamily == "recoverable"
====
