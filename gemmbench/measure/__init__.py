"""Measurement: inputs, the correctness check, the timing primitive and its modes, telemetry, kernel traces, and the
measured ceilings (bandwidth and compute) a row is judged against."""
