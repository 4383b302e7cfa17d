"""Named baselines for `gemmbench compare` (gemmbench/baselines/NAME.parquet), installed as package data under
gemmbench.baselines: a baseline saved here and committed is one the package ships."""
