"""The format versions of the side tables' rows (profile, layer); light (no pandas), as the worker processes write
them into the rows they build.  Bump one when a column is added, removed or changes meaning (in every row of its
table): no upgrade chain."""

PROFILE_SCHEMA = 2  # in every profile row (profile_schema)
LAYER_SCHEMA = 2  # in every layer row (layer_schema)
