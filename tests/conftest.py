"""Shared test setup.  TRITON_INTERPRET must be set before any @triton.jit decorates a function
(it is read then), so it is set here, before the kernels are imported, when there is no GPU."""

import os
from pathlib import Path

import pytest

try:
    import torch

    HAS_CUDA = torch.cuda.is_available()
except ImportError:  # pragma: no cover - torch is a dependency
    HAS_CUDA = False

if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

PLUGINS = Path(__file__).parent / "plugins"


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run `pytest -m gpu` on the GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
