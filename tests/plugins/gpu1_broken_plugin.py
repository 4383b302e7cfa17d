"""Test plugin: a worker pinned to GPU 1 (CUDA_VISIBLE_DEVICES=1) cannot start, as on a host whose second GPU is
broken; any other process loads it fine.  Used by the CPU test of `--gpus` re-assignment."""

import os

if os.environ.get("CUDA_VISIBLE_DEVICES") == "1":
    raise RuntimeError("GPU 1 is broken (test plugin)")
