"""Kernel configs: the typed configs of the Triton variants, their stored files, the search that tunes them, and the
inference engines' fused-MoE config files read and written."""
