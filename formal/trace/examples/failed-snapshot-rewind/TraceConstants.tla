---- MODULE TraceConstants ----
\* GENERATED (example failed-snapshot-rewind): the constants of one trace.
TraceSinks == {"op-3-0", "op-3-1"}
TraceMaxCkpt == 4
TraceDeaths == 0
TraceSnapFails == 1
TraceRestarts == 1
TraceFamily == "recoverable"
====
