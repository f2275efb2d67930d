---- MODULE TraceConstants ----
\* GENERATED (example doctored-swapped): the constants of one trace.
TraceSinks == {"op-3-0", "op-3-1"}
TraceMaxCkpt == 2
TraceDeaths == 0
TraceSnapFails == 0
TraceRestarts == 0
TraceFamily == "recoverable"
====
