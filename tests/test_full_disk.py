"""A full disk during a sweep (the CPU path, real workers): the sweep stops at the first write that fails, in one
line and exit 2; every row written before is kept, and `run --resume` runs exactly the cells never measured."""

from __future__ import annotations

import errno

from test_cli import invoke, ok_rows

from gemmbench.results import atomic_write, store

SWEEP = "run --shapes smoke --variants cublas_fp16 --dtype fp16 --m 1,2,4,8 --budget 0.01".split()


def test_a_full_disk_stops_the_sweep_and_resume_finishes_it(tmp_path, monkeypatch):
    out = tmp_path / "run.parquet"
    monkeypatch.setattr(store, "PART_ROWS", 2)  # a part every two rows
    real, calls = atomic_write.tempfile.mkstemp, []

    def fills_up(*args, **kwargs):  # the first two parts fit, then the disk is full
        calls.append(1)
        if len(calls) > 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(*args, **kwargs)

    monkeypatch.setattr(atomic_write.tempfile, "mkstemp", fills_up)
    first = invoke(*SWEEP, "--out", out)
    assert first.exit_code == 2, first.stdout + first.stderr
    [line] = [x for x in first.stderr.splitlines() if x.startswith("error:")]
    assert "cannot write" in line and "No space left on device" in line and "the sweep stopped there" in line
    kept = store.load([out])
    assert len(kept) == 4  # the two parts written; the cells after the failed write were never run
    assert "2 rows measured last could not be written" in line  # the two of the part that failed
    monkeypatch.setattr(atomic_write.tempfile, "mkstemp", real)
    again = invoke(*SWEEP, "--resume", out)
    assert again.exit_code == 0, again.stdout + again.stderr
    rows = ok_rows(out)
    assert len(rows) == 12 and rows.duplicated(["gemm", "M", "variant"]).sum() == 0  # 3 dense GEMMs x 4 M, once each
    assert set(map(tuple, kept[["gemm", "M"]].values)) < set(map(tuple, rows[["gemm", "M"]].values))
