"""`gemmbench report`'s HTML (report.md rendered by markdown-it-py) and its `--format json`: the HTML's tables and
images read back with the standard library's HTML parser and held against the report's blocks and the Parquet rows;
data that looks like Markdown or HTML shown as it is."""

from __future__ import annotations

import json
import os
import re
import urllib.parse

os.environ["MPLBACKEND"] = "Agg"  # before anything imports matplotlib: no GUI backend in a test

from html.parser import HTMLParser

import pytest
from test_cli import invoke
from test_plots import SHIPPED, TP8, prepared

from gemmbench.plot import report
from gemmbench.results import store
from gemmbench.results.md_table import md_table, md_text

MARKUP_TAGS = {"em", "strong", "a", "code", "b", "script"}


class Page(HTMLParser):
    """The tables (rows of cell texts), the alignment of each cell, the images and the tags found inside cells."""

    def __init__(self, html: str):
        super().__init__()  # convert_charrefs: "&lt;" arrives as "<"
        self.tables: list = []
        self.classes: list = []
        self.styles: set = set()  # a style attribute found on any cell
        self.css = ""
        self.images: list = []
        self.tags_in_cells: set = set()
        self.headings: list = []
        self._cell = self._heading = None
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
            self.classes.append(dict(attrs).get("class"))
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []
            if dict(attrs).get("style"):
                self.styles.add(dict(attrs)["style"])
        elif tag == "style":
            self._style = []
        elif tag in ("h1", "h2", "h3"):
            self._heading = []
        elif tag == "img":
            self.images.append(dict(attrs))
        elif self._cell is not None:
            self.tags_in_cells.add(tag)

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.tables[-1][-1].append("".join(self._cell))
            self._cell = None
        elif tag in ("h1", "h2", "h3"):
            self.headings.append("".join(self._heading))
            self._heading = None

    def handle_data(self, data):
        if getattr(self, "_style", None) is not None:
            self.css += data
            self._style = None
        for part in (self._cell, self._heading):
            if part is not None:
                part.append(data)


def test_html_tables_and_images_are_the_reports():
    rep = report.build(prepared([TP8], dtypes=["fp8"], shapes=["attn_o"]), None, [TP8])
    page = Page(report.to_html(rep))
    blocks = [b for b in rep.blocks if b[0] == "table"]
    assert len(page.tables) == len(blocks) > 2
    for (_, head, rows, align), table, cls in zip(blocks, page.tables, page.classes, strict=True):
        assert table == [[str(h) for h in head]] + [[str(c) for c in r] for r in rows]
        # "r" columns right-aligned (markdown-it's table rule, from "---:"), the others left to the stylesheet: one
        # class a table, "r" or "x" (none) per column, and a rule that right-aligns exactly its "r" columns' cells
        assert cls == "a-" + "".join("r" if a == "r" else "x" for a in align)
        rule = re.search(rf"((?:\.{cls} t[dh]:nth-child\(\d+\),?)+){{text-align:right}}", page.css)
        right = {int(n) for n in re.findall(r"nth-child\((\d+)\)", rule.group(1))} if rule else set()
        assert right == {i + 1 for i, a in enumerate(align) if a == "r"}
    assert not page.styles and not page.tags_in_cells
    shown = [b for b in rep.blocks if b[0] == "img"]
    assert [i["alt"] for i in page.images] == [b[2] for b in shown]
    for img, (_, stem, _) in zip(page.images, shown, strict=True):  # each figure inside the page, byte for byte
        head, _, data = img["src"].partition(",")
        assert head == "data:image/svg+xml" and urllib.parse.unquote(data).encode() == rep.images[stem]
        assert rep.images[stem].startswith(b"<?xml") and b"<svg" in rep.images[stem]
    assert page.headings[0] == "gemmbench report" and any(h.startswith("attn_o (N=8192, K=1024") for h in page.headings)


@pytest.fixture(scope="module")
def shipped():
    """The shipped baseline: decode runs with fp8 per tensor and per row, ties and clear winners."""
    return store.load([SHIPPED])


TRICKY = ["*not bold*", "_not italic_", "<b>not html</b>", "a | b", "&lt; stays", "[no](link)", "`no code`", "back\\"]


def test_data_that_looks_like_markup_is_shown_as_it_is():
    rep = report.Report()
    rep.add("h", 2, "_gemm_ *x*")
    rep.add("table", ["name|x", "v"], [[t, str(i)] for i, t in enumerate(TRICKY)] + [["two\nlines", "9"]], "lr")
    md, page = report.to_markdown(rep), Page(report.to_html(rep))
    assert page.headings == ["_gemm_ *x*"]
    assert page.tables == [[["name|x", "v"]] + [[t, str(i)] for i, t in enumerate(TRICKY)] + [["two lines", "9"]]]
    assert not page.tags_in_cells
    # the Markdown: one table line per row, a name with '_' inside a word left as it is
    assert sum(ln.startswith("|") for ln in md.splitlines()) == 2 + len(TRICKY) + 1
    assert md_text("triton_splitk_atomic") == "triton_splitk_atomic"


def test_md_table_aligns_by_letter_and_escapes_every_cell():
    # the header, its separator ("r" -> "---:", any other letter or a column past `align` -> "---"), a line a row;
    # "|" in a cell escaped (else the row gains a column), "_" at a word's edge escaped, inside a word kept
    lines = md_table(["name", "µs", "note"], [["triton_dp", 1.5, "A | B"], ["_x", 2, ""]], "lr")
    assert lines == [
        "| name | µs | note |",
        "|---|---:|---|",
        "| triton_dp | 1.5 | A \\| B |",
        "| \\_x | 2 |  |",
    ]
    assert md_table(["a"], []) == ["| a |", "|---|"]


def test_report_format_json_holds_the_winners(tmp_path, shipped):
    out = tmp_path / "rep"
    res = invoke("report", SHIPPED, "--dtype", "fp8", "--shapes", "attn_o", "--out", out, "--format", "json")
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)  # stdout is the document and nothing else
    assert doc["schema"] == "gemmbench.report/1"
    written = sorted(str(p) for p in out.rglob("*") if p.is_file())
    assert sorted(doc["files"]) == written and str(out / "report.html") in written
    # by hand from the Parquet rows: per scaling and M the fastest ok row, its speedup over cuBLAS of its scaling
    g = shipped[(shipped["gemm"] == "attn_o") & (shipped["dtype"] == "fp8") & (shipped["status"] == "ok")]
    g = g[~g["noisy"].astype(bool)]
    expected = []
    for scaling, base_name in (("tensor", "cublas_fp8"), ("row", "cublas_fp8_rowwise")):
        s = g[g["scaling"] == scaling]
        base = s[s["variant"] == base_name].set_index("M")["time_us_median"]
        for m, rows in sorted(s.groupby("M")):
            w = rows.loc[rows["time_us_median"].idxmin()]
            # the tie rule (README): rows whose p20-p80 overlaps the fastest's; with any, no variant is named
            near = rows[(rows["time_us_p20"] <= w["time_us_p80"]) & (rows["time_us_p80"] >= w["time_us_p20"])]
            tied = list(near.sort_values("time_us_median")["variant"]) if len(near) > 1 else []
            expected.append((scaling, m, None if tied else w["variant"], w["time_us_median"],
                             base[m] / w["time_us_median"], base_name, w["pct_of_roofline"], tied))  # fmt: skip
    got = [(w["scaling"], w["M"], w["variant"], w["time_us_median"], w["speedup"], w["baseline"], w["pct_of_roofline"],
            w["tied"]) for w in doc["winners"]]  # fmt: skip
    assert any(x[7] for x in expected) and any(not x[7] for x in expected)  # both a tie and a clear winner
    assert [x[:3] + x[5:6] + x[7:] for x in got] == [x[:3] + x[5:6] + x[7:] for x in expected]
    for a, b in zip(got, expected, strict=True):
        assert a[3] == pytest.approx(b[3]) and a[4] == pytest.approx(b[4]) and a[6] == pytest.approx(b[6])
    first = doc["winners"][0]
    assert list(first) == list(report.WINNER_FIELDS)
    r = g.iloc[0]
    assert (first["gemm"], first["N"], first["K"], first["tp"], first["timing_mode"]) == (
        "attn_o",
        r["N"],
        r["K"],
        r["tp"],
        "cold",
    )


def test_throughput_figures_only_when_asked():
    """The default report draws each GEMM's speedup by M; --throughput adds its TFLOP/s by M beside it, one figure per
    group each (the tables hold every cell's TFLOP/s either way)."""
    runs = prepared([TP8], dtypes=["fp8"], shapes=["attn_o"])
    lean, full = report.build(runs, None, [TP8]), report.build(runs, None, [TP8], throughput=True)
    kinds = lambda rep: sorted(stem.split("-")[0] for stem in rep.images)  # noqa: E731 - one line each
    speedups = kinds(lean).count("speedup")
    assert speedups > 0 and "tflops" not in kinds(lean)
    assert kinds(full).count("tflops") == kinds(full).count("speedup") == speedups


def test_a_report_figure_is_compact_svg_whose_words_are_as_drawn():
    """render_compact: an SVG (it parses), its text as text, coordinates inside tags cut to two decimals, no identity
    rotation, no metadata; a label's own digits (1.23456x) untouched."""
    import xml.etree.ElementTree as ET

    from gemmbench.plot import style

    fig, axes = style.new_figure(4, 3)
    axes[0][0].plot([1.0, 2.123456], [3.0, 4.987654])
    axes[0][0].set_title("speedup 1.23456x")
    svg = style.render_compact(fig).decode()
    root = ET.fromstring(re.sub(r"^<\?xml[^>]*>\s*(<!DOCTYPE[^>]*>)?", "", svg))
    assert root.tag.endswith("svg")
    assert "speedup 1.23456x" in svg and "<text" in svg and "<metadata" not in svg and "rotate(-0 " not in svg
    inside_tags = " ".join(re.findall(r"<[^>]*>", svg))
    assert not re.search(r"\d\.\d{3}", inside_tags)
