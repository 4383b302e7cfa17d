"""Figures and the report (`gemmbench plot`, `gemmbench report`) from result rows only: DataFrames in, PNG, Markdown
and HTML out (matplotlib's Agg canvas); nothing here runs a kernel."""
