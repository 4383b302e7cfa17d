"""docs/BENCHMARKS.md holds current tables only: each section names the script that measures it, each table is the
one scripts/bench_tables.py renders from the committed Parquet files its marker names, and those files exist."""

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "BENCHMARKS.md"


def _bench_tables():
    spec = importlib.util.spec_from_file_location("bench_tables", ROOT / "scripts" / "bench_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_table_is_rendered_from_its_files():
    text = DOC.read_text(encoding="utf-8")
    bench_tables = _bench_tables()
    assert len(bench_tables.MARKED.findall(text)) >= 5
    assert bench_tables.refreshed(text) == text, "python3 scripts/bench_tables.py --update docs/BENCHMARKS.md"


def test_every_section_names_an_existing_script_and_no_section_is_dated():
    sections = re.split(r"(?m)^## ", DOC.read_text(encoding="utf-8"))[1:]
    assert sections
    for section in sections:
        title = section.splitlines()[0]
        assert not re.search(r"20\d\d-\d\d-\d\d", title), f"a dated section: {title}"
        scripts = re.findall(r"scripts/(?:bench/[\w-]+\.sh|ci-perf\.sh)", section)
        assert scripts, f"section {title!r} names no script that measures it"
        assert all((ROOT / s).is_file() for s in scripts), scripts


def test_a_changed_number_is_seen(tmp_path):
    """The check can fail: a table with one number changed is not what its files render."""
    text = DOC.read_text(encoding="utf-8")
    bench_tables = _bench_tables()
    first = bench_tables.MARKED.search(text)
    body = first["body"]
    changed = re.sub(r"\| (\d+)\.(\d) \|", lambda m: f"| {int(m[1]) + 1}.{m[2]} |", body, count=1)
    assert changed != body
    assert bench_tables.refreshed(text.replace(body, changed)) != text.replace(body, changed)


def _row(process, variant, us, M=2048, gemm="attn_o", timing="cold"):
    family = "cublas" if variant.startswith("cublas") else "triton"
    return dict(shape_set="s", gemm=gemm, N=8192, K=8192, tp=1 if gemm == "attn_o" else 8, dtype="bf16",
                scaling="none", fp8_accum="none", E=1, timing_mode=timing, M=M, path=f"p{process}.parquet",
                run_id="r", process=0, variant=variant, family=family, time_us_median=us)  # fmt: skip


def test_target_verdict_takes_the_best_median_and_is_met_only_in_every_process():
    """cuBLAS 100 µs in each of three processes.  A: 125, 100, 90 µs -> 0.80, 1.00, 1.11x, median 1.00x, worst 0.80x;
    B: 105 µs each -> 0.952x.  A has the better median, and at M 2048 (target 0.95x) its worst process misses."""
    rows = [_row(p, "cublas_bf16", 100.0) for p in range(3)]
    rows += [_row(p, "triton_a", us) for p, us in enumerate((125.0, 100.0, 90.0))]
    rows += [_row(p, "triton_b", 105.0) for p in range(3)]
    (verdict,) = _bench_tables().target_verdicts(rows)
    assert verdict.variant == "triton_a" and verdict.processes == 3
    assert abs(verdict.median - 1.0) < 1e-12 and abs(verdict.worst - 0.8) < 1e-12
    assert verdict.target == 0.95 and not verdict.met


def test_targets_by_m_and_the_decode_headline():
    """0.95x from M 512, 0.9x below, 0.97x at decode, 1.3x for TP 8's QKV fp8 in stream (its cold cell: 0.97x)."""
    cell = _bench_tables().TargetCell
    target_for = _bench_tables().target_for
    assert target_for(cell("s", "attn_o", 1, 1, 1, "bf16", "cold", 512)) == 0.95
    assert target_for(cell("s", "attn_o", 1, 1, 1, "bf16", "cold", 333)) == 0.9
    assert target_for(cell("s", "attn_o", 1, 1, 1, "bf16", "stream", 64)) == 0.97
    assert target_for(cell("s", "attn_qkv", 1, 1, 8, "fp8", "stream", 16)) == 1.3
    assert target_for(cell("s", "attn_qkv", 1, 1, 8, "fp8", "cold", 16)) == 0.97
