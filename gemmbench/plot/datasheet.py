"""NVIDIA's datasheet ceilings of the GPUs gemmbench knows (HBM bandwidth here, dense tensor-core peaks in
gemmbench/dtypes.py), drawn dashed in the roofline and the Nsight Compute profile figures."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from gemmbench import dtypes


@dataclass(frozen=True)
class Datasheet:
    product: str  # the key of its peaks in dtypes.DType.datasheet_tflops
    bw_gbps: float  # HBM bandwidth, GB/s

    @property
    def tflops(self) -> dict:
        """dtype -> dense (no sparsity) tensor-core TFLOP/s, from the dtype table."""
        return {
            d.name: d.datasheet_tflops[self.product] for d in dtypes.ALL.values() if self.product in d.datasheet_tflops
        }


# NVIDIA's datasheet numbers, keyed by the name the driver reports (the rows' `gpu` column); the peaks are the
# dtypes' (gemmbench/dtypes.py).
DATASHEET = {
    "NVIDIA H100 80GB HBM3": Datasheet("H100 SXM", 3350.0),
    "NVIDIA H200": Datasheet("H200 SXM", 4800.0),
}


def datasheet(gpu: Optional[str]) -> Optional[Datasheet]:
    return DATASHEET.get((gpu or "").strip())


def unknown_gpu_note(gpu: str) -> str:
    if gpu.startswith("CPU"):
        return "A CPU run: no GPU datasheet ceilings, so no dashed lines."
    known = ", ".join(f"{d.product} ({name})" for name, d in DATASHEET.items())
    return f"No datasheet ceilings for {gpu!r}, so no dashed lines (gemmbench knows {known})."
