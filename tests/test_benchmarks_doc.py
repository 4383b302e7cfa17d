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
