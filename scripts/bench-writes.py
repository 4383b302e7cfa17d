#!/usr/bin/env python3
"""Time `store.RunWriter` writing N synthetic rows and joining them into one run file (docs/BENCHMARKS.md, "Writing
run files"); the rows are what a timed cell writes, 50 samples each.

    python3 scripts/bench-writes.py 5000
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from gemmbench.results import store

ROW = dict(run_id="r", shape_set="s", gemm="g", M=16, N=64, K=64, E=1, topk=1, tp=1, ep=1, dtype="fp16",
           scaling="none", variant="v", status="ok", samples_us=[1.0] * 50, time_us_median=1.0)  # fmt: skip


def main(n: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "r.parquet"
        start = time.perf_counter()
        writer = store.RunWriter(path)
        for m in range(n):
            writer.append(dict(ROW, M=m + 1))
        writer.close()
        seconds = time.perf_counter() - start
        assert len(store.load([path])) == n
    print(f"{n} rows written and joined in {seconds:.2f} s")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5000)
