"""The tie rule (gemmbench.results.ranking) on hand-made rows, and where it shows: the printed table's `*`, `≈` and `±`, the
JSON summary's `winner` and `tied`, and the roofline note of a row above its ceiling (table, summary, Parquet)."""

import math

import pandas as pd
import pytest
from conftest import run_row
from rich.console import Console

from gemmbench.plot import report
from gemmbench.results import metrics, ranking, store, tables


def timed(variant: str, p20: float, median: float, p80: float, **over) -> dict:
    """An ok dense fp16 row of one cell (attn_o M 16) with the percentiles given."""
    r = run_row(run_id="r", shape_set="s", gemm="attn_o", M=16, N=64, K=32, E=1, topk=1, tp=1, ep=1, dtype="fp16",
             scaling="none", variant=variant, status="ok", flops=65536, bytes_min=4096, tflops=1.0, gbps=1.0,
             time_us_median=median, time_us_p20=p20, time_us_p80=p80, noisy=metrics.noisy(p20, p80), config=None)  # fmt: skip
    r.update(over)
    return r


def marks_of(*rows: dict) -> dict[str, str]:
    return ranking.marks({r["variant"]: r for r in rows})


def test_a_clear_winner_is_starred_alone():
    # a [9.9, 10.1] and b [10.5, 10.9]: 10.1 < 10.5, no overlap, so a is faster by its own samples
    a, b = timed("a", 9.9, 10.0, 10.1), timed("b", 10.5, 10.7, 10.9)
    assert marks_of(a, b) == {"a": "*"}


def test_two_overlapping_rows_are_both_tied_and_neither_wins():
    # an H100 cell, attn_qkv fp8 M 1: SplitK 33.65 [33.4, 34.1], cuBLAS 34.26 [33.3, 34.8]: the ranges share 33.4..34.1
    splitk, cublas = timed("splitk", 33.4, 33.65, 34.1), timed("cublas", 33.3, 34.26, 34.8)
    assert marks_of(splitk, cublas) == {"splitk": "≈", "cublas": "≈"}
    # touching ends count as overlap: [10, 11] and [11, 12] share 11
    assert marks_of(timed("x", 10, 10.5, 11), timed("y", 11, 11.5, 12)) == {"x": "≈", "y": "≈"}


def test_a_tie_chain_ties_only_rows_that_overlap_the_fastest():
    # A [10, 10.4] fastest; B [10.3, 10.8] overlaps A (10.3 <= 10.4); C [10.7, 11.2] overlaps B (10.7 <= 10.8) but
    # not A (10.7 > 10.4): C is slower than A by its own samples, so it is not in the tie (no chaining)
    a, b, c = timed("A", 10.0, 10.2, 10.4), timed("B", 10.3, 10.5, 10.8), timed("C", 10.7, 10.9, 11.2)
    assert ranking.overlaps(a, b) and ranking.overlaps(b, c) and not ranking.overlaps(a, c)
    assert marks_of(a, b, c) == {"A": "≈", "B": "≈"}


def test_a_noisy_row_clear_of_every_other_still_wins():
    # the noisy row [132, 215] against [47000, 48000]: its p80 215 lies below the other's p20, so however wide its
    # spread (215 / 132 > 1.5) its samples say it is faster: it wins, and the tables still mark it noisy
    fast, slow = timed("grouped", 132.0, 144.0, 215.0), timed("loop", 47000.0, 47546.0, 48000.0)
    assert fast["noisy"] and marks_of(fast, slow) == {"grouped": "*"}
    # its p80 at or above another's p20: not clear, and not ranked (the other wins alone)
    assert marks_of(timed("grouped", 132.0, 144.0, 215.0), timed("x", 215.0, 216.0, 217.0)) == {"x": "*"}
    assert marks_of(fast) == {}  # alone: clear of nothing, so not ranked


def test_noisy_failed_and_untimed_rows_are_never_ranked():
    # noisy: p80/p20 = 40 / 1 > 1.5; its median 5 is the lowest, its range [1, 40] covers every other row, yet it is
    # neither starred nor tied: its own spread is too wide to rank (metrics.NOISY_SPREAD)
    jumpy = timed("jumpy", 1.0, 5.0, 40.0)
    assert jumpy["noisy"]
    steady = timed("steady", 9.9, 10.0, 10.1)
    wrong = timed("wrong", 1.0, 1.0, 1.0, status="wrong")
    step = timed("moe_align", 0.5, 0.6, 0.7, flops=None)  # a step beside the GEMMs: no FLOPs, competes with none
    assert marks_of(jumpy, steady, wrong, step) == {"steady": "*"}
    assert marks_of(jumpy) == {} and marks_of() == {}
    # a row from an older file (pandas NA for noisy) ranks as not noisy; one without percentiles is its median
    old = timed("old", 9.0, 9.5, 9.9, noisy=pd.NA, time_us_p20=None, time_us_p80=None)
    assert marks_of(old, steady) == {"old": "*"}


def test_the_printed_table_marks_ties_and_shows_the_spread():
    # cell M 16: a and b tied, c clear of both; cell M 32: d alone is the winner
    a, b, c = timed("a", 9.9, 10.0, 10.2), timed("b", 10.1, 10.2, 10.3), timed("c", 12.0, 12.1, 12.2)
    d = timed("d", 4.0, 5.0, 6.0, M=32)  # p80/p20 = 1.5, not above NOISY_SPREAD: ranked
    console = Console(record=True, width=400, color_system=None)
    for t in tables.gemm_tables([a, b, c, d]):
        console.print(t)
    lines = {ln.split("│")[3].strip(): ln.split("│") for ln in console.export_text().splitlines() if ln.count("│") > 3}
    assert set(lines) >= {"≈ a", "≈ b", "c", "* d"}
    # ± = half the p20-p80 range over the median: a (10.2-9.9)/2/10 = 1.5%, c 0.2/2/12.1 = 0.83%, d 2/2/5 = 20%
    assert [lines[k][5].strip() for k in ("≈ a", "c", "* d")] == ["±1.5%", "±0.8%", "±20.0%"]
    cells = tables.summary([a, b, c, d])
    assert [(x["variant"], x["winner"], x["tied"]) for x in cells] == [
        ("a", False, True), ("b", False, True), ("c", False, False), ("d", True, False)]  # fmt: skip
    assert cells[0]["spread_pct"] == pytest.approx(1.5) and list(cells[0]) == list(tables.SUMMARY_FIELDS)


def test_the_report_names_no_winner_for_a_tie():
    rows = [timed("a", 9.9, 10.0, 10.2), timed("b", 10.1, 10.2, 10.3), timed("c", 4, 4.1, 4.2, M=32),
            timed("e", 5, 5.1, 5.2, M=32)]  # fmt: skip
    w = report.winners(pd.DataFrame(rows))
    assert [(m, report.winner_label(r)) for m, (_, r) in zip(w["M"], w.iterrows(), strict=True)] == [
        (16, "≈ a, b"), (32, "c")]  # fmt: skip
    assert report._ranges(w) == "16: ≈ a, b; 32: c"


# ---------------------------------------------------------------- above the roofline


def test_roofline_note_names_the_ceiling_it_passed():
    # 65536 FLOPs, 4096 bytes; bandwidth 1000 GB/s -> 4096 / 1e12 s = 4.096e-3 µs; peak 1 TFLOP/s -> 65536 / 1e12 s
    # = 0.0655 µs: compute-bound, so a row above 100% passed the compute ceiling
    assert metrics.roofline_note(101.0, 65536, 4096, 1000.0, 1.0) == metrics.ABOVE_COMPUTE
    # peak 1000 TFLOP/s -> 6.55e-5 µs < 4.096e-3 µs: memory-bound
    assert metrics.roofline_note(101.0, 65536, 4096, 1000.0, 1000.0) == metrics.ABOVE_MEMORY
    assert metrics.roofline_note(100.0, 65536, 4096, 1000.0, 1.0) is None  # at the roofline is no flag
    assert metrics.roofline_note(math.nan, 65536, 4096, 1000.0, 1.0) is None
    assert metrics.roofline_note(None, 65536, 4096, None, None) is None  # a CPU row: no ceilings


def test_a_row_above_its_roofline_is_flagged_in_the_table_the_summary_and_the_parquet(tmp_path):
    ceil = dict(ceiling_bw_gbps=1000.0, ceiling_tflops=1.0)
    over = timed("over", 9.9, 10.0, 10.1, pct_of_roofline=104.0, **ceil)
    under = timed("under", 19.9, 20.0, 20.1, pct_of_roofline=52.0, **ceil)
    console = Console(record=True, width=500, color_system=None)
    for t in tables.gemm_tables([over, under]):
        console.print(t)
    lines = {ln.split("│")[3].strip(): ln for ln in console.export_text().splitlines() if ln.count("│") > 3}
    assert "104!" in lines["* over"] and metrics.ABOVE_COMPUTE in lines["* over"]
    assert "52!" not in lines["under"] and "above the measured" not in lines["under"]
    notes = [c["roofline_note"] for c in tables.summary([over, under])]
    assert notes == [metrics.ABOVE_COMPUTE, None]
    # in the Parquet as written (the engine sets it: tasks._throughput)
    path = tmp_path / "r.parquet"
    store.write_rows(path, [dict(over, roofline_note=metrics.ABOVE_COMPUTE), under])
    df = store.load([path])
    assert df["roofline_note"].iloc[0] == metrics.ABOVE_COMPUTE and pd.isna(df["roofline_note"].iloc[1])


def test_rows_of_another_fp8_scaling_are_counted_not_printed():
    a = timed("cublas_fp8", 9.9, 10.0, 10.1, dtype="fp8", scaling="tensor")
    hidden = dict(a, variant="cublas_fp8_rowwise", status="skipped", time_us_median=None,
                  reason="cublas_fp8_rowwise declares no tensor support: runs row")  # fmt: skip
    shown = dict(hidden, variant="x", reason="torch._scaled_mm needs N and K divisible by 16 (N=8, K=8)")
    console = Console(record=True, width=400, color_system=None)
    for t in tables.gemm_tables([a, hidden, shown]):
        console.print(t)
    body = [ln for ln in console.export_text().splitlines() if ln.startswith("│")]  # the rows, not the caption
    assert not any("cublas_fp8_rowwise" in ln for ln in body) and any("divisible by 16" in ln for ln in body)
    assert tables.scaling_excluded_count([a, hidden, shown]) == 1


def test_inductor_runs_only_when_named():
    from gemmbench import registry

    assert "inductor_mm" not in [v.name for v in registry.select(None)]
    assert [v.name for v in registry.select("inductor_mm")] == ["inductor_mm"]


def test_tables_for_reading_footnote_the_skipped_rows_and_drop_what_says_nothing():
    """Not wide: three skipped rows of two reasons become two footnotes (count, variants, reason); TFLOPS and GB/s
    (1.0 and 1 in both timed rows), % roofline, speedup (no cublas_fp16 row to be over) and config (all empty) go, as
    does status (ok in both); M, dtype, variant and µs stay though M and dtype are one value.  Wide: every column and
    row."""
    a, b = timed("a", 9.9, 10.0, 10.1), timed("b", 19.9, 20.0, 20.1)
    skipped = dict(a, status="skipped", time_us_median=None, time_us_p20=None, time_us_p80=None)
    s1, s2 = dict(skipped, variant="x", reason="needs a GPU"), dict(skipped, variant="y", reason="needs a GPU")
    s3 = dict(skipped, variant="z", reason="K must be a multiple of 16")
    console = Console(record=True, width=300, color_system=None)
    for t in tables.gemm_tables([a, b, s1, s2, s3], wide=False):
        console.print(t)
    out = console.export_text()
    header = next(ln for ln in out.splitlines() if "variant" in ln)
    assert [c.strip() for c in header.split("│")] == ["M", "dtype", "variant", "µs", "±"]
    flat = " ".join(out.split())  # a footnote wraps at the table's width
    assert "skipped 2: x, y: needs a GPU" in flat and "skipped 1: z: K must be a multiple of 16" in flat
    assert not any(v in ln for ln in out.splitlines() if "│" in ln for v in ("x ", "y ", "z "))
    assert len(tables.legends([a, b, s1])) == 1 and "timing:" not in out
    wide = Console(record=True, width=400, color_system=None)
    for t in tables.gemm_tables([a, b, s1, s2, s3]):
        wide.print(t)
    shown = wide.export_text()
    assert "TFLOPS" in shown and "skipped: needs a GPU" in shown
