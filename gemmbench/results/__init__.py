"""Results: the run schema, the store that writes and reads it, the FLOP/byte model, rankings, tables, merging
shards, and the compare verdicts of the CI gate.  Nothing here imports torch."""
