"""`report --no-embed`: a small page that links its figures in img/ instead of carrying them, and the line that says
how large what was written is."""

from __future__ import annotations

import re

from test_cli import invoke


def test_no_embed_links_the_figures_and_the_sizes_are_said(tmp_path):
    run = tmp_path / "runs" / "r.parquet"
    res = invoke("run", "--shapes", "smoke", "--m", "1", "--dtype", "fp16", "--variants", "cublas_fp16,triton_dp_row",
                 "--budget", "0.01", "--out", run)  # fmt: skip
    assert res.exit_code == 0, res.stderr
    inside, linked = tmp_path / "in", tmp_path / "out"
    assert invoke("report", run.parent, "--out", inside).exit_code == 0
    res = invoke("report", run.parent, "--out", linked, "--no-embed")
    assert res.exit_code == 0, res.stderr
    page = (linked / "report.html").read_text()
    srcs = re.findall(r'<img src="([^"]+)"', page)
    assert srcs and "data:image" not in page and all((linked / s).is_file() for s in srcs)
    inside_page = (inside / "report.html").read_text()  # the default: the figures inside the page
    assert inside_page.count('<img src="data:image/svg+xml,') == len(srcs)
    written = [linked / p for p in res.stdout.split()]
    total, html = sum(p.stat().st_size for p in written), (linked / "report.html").stat().st_size
    assert f"report: {len(written)} files, {total / 1e6:.1f} MB; report.html {html / 1e6:.1f} MB (figures linked" in (
        " ".join(res.stderr.split())
    )
