---- MODULE TraceConstants ----
\* GENERATED (example marker-line-lost): the constants of one trace.
TraceSinks == {"op-3-0", "op-3-1"}
TraceMaxCkpt == 3
TraceDeaths == 1
TraceSnapFails == 0
TraceRestarts == 0
TraceFamily == "recoverable"
====
