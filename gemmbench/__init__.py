"""gemmbench: benchmark and profile the GEMM kernels of LLM inference on NVIDIA Hopper GPUs."""

__version__ = "0.1.0"
