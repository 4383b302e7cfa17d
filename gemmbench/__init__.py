"""gemmbench: benchmark and profile the GEMM kernels of LLM inference on NVIDIA Hopper GPUs."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("gemmbench")  # the one version: pyproject.toml's, as installed
except PackageNotFoundError:  # the source tree on sys.path without being installed (pip install -e . makes it)
    __version__ = "0+unknown"
