"""`gemmbench report`: one Markdown file and one self-contained HTML file from result rows: per GEMM, dtype and timing
mode the winning variant by M with its speedup over the baseline and % of roofline, the full tables, and the figures
of gemmbench.plot.figures (speedup by M; TFLOP/s by M with `throughput`), rooflines, MoE schedules and profiles.  The
report is built as a list of blocks written as Markdown; the HTML is that Markdown rendered by markdown-it-py, so the
two files cannot say different things.

Figures are SVG with their text as text (style.render_compact): a line figure is a few kB, where a PNG of it was
about ten times that, so a report of hundreds of figures stays one file small enough to share (docs/BENCHMARKS.md
"Budgets").  report.html holds each as an image of its own (a data URI: nothing in it can run or reach the page)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import pandas as pd
from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml

from gemmbench.plot import data as plotdata
from gemmbench.plot import figures as plots
from gemmbench.plot import ncu_figure, style
from gemmbench.results import ranking
from gemmbench.results.atomic_write import write_atomic
from gemmbench.results.md_table import md_table, md_text
from gemmbench.results.run_schema import STATUSES
from gemmbench.results.tables import short_config

IMG_DIR, IMG_SUFFIX = "img", "svg"
REPORT_MD, REPORT_HTML = "report.md", "report.html"


@dataclass
class Report:
    blocks: list = field(default_factory=list)  # ("h", level, text) | ("p", text) | ("table", head, rows, align)
    #                                              | ("img", stem, alt) | ("list", items)
    images: dict = field(default_factory=dict)  # stem -> SVG bytes
    warnings: list = field(default_factory=list)  # for stderr

    def add(self, *block) -> None:
        self.blocks.append(block)

    def figure(self, drawn: style.Drawn, alt: str) -> None:
        if drawn.figure is None:
            self.add("p", f"*{_literal(drawn.note)}*")
            return
        self.images[drawn.stem] = style.render_compact(drawn.figure)
        self.add("img", drawn.stem, alt)


def _literal(text: str) -> str:
    """Text as Markdown shows it verbatim: its emphasis and code marks escaped (a variant glob `triton_moe_*` would
    end the italics around a note)."""
    return "".join("\\" + c if c in "\\*_`[]" else c for c in text)


def _num(x, spec: str, suffix: str = "") -> str:
    if x is None or x is pd.NA or (isinstance(x, float) and math.isnan(x)):
        return style.MISSING
    return format(float(x), spec) + suffix


def _fig_index(drawn: Sequence[style.Drawn]) -> dict:
    return {tuple(sorted((k, str(v)) for k, v in d.key.items())): d for d in drawn}


def _lookup(index: dict, key: dict) -> Optional[style.Drawn]:
    return index.get(tuple(sorted((k, str(v)) for k, v in key.items())))


def _p20_p80(r) -> str:
    lo, hi = _num(r["time_us_p20"], ".1f"), _num(r["time_us_p80"], ".1f")
    return style.MISSING if style.MISSING in (lo, hi) else f"{lo}–{hi}"


def _marks(g: pd.DataFrame) -> dict:
    """index -> ranking.WINNER or ranking.TIED at each M of one figure group (one figure group and M is one cell)."""
    return {i: m for _, rows in g.groupby("M") for i, m in ranking.marks(dict(rows.iterrows())).items()}


def winners(g: pd.DataFrame) -> pd.DataFrame:
    """Per M of one figure group (rows from plotdata.with_speedups): its fastest ranked row (ranking), with `tied`
    the variants within noise of it, fastest first (none for a clear winner, which is then the only one named)."""
    marked = _marks(g)
    out = []
    for _, rows in g[g.index.isin(list(marked))].groupby("M", sort=True):
        order = rows.sort_values("time_us_median")
        first = order.iloc[0].copy()
        first["tied"] = list(order["variant"]) if marked[order.index[0]] == ranking.TIED else []
        out.append(first)
    return pd.DataFrame(out, columns=[*g.columns, "tied"])


def winner_label(r) -> str:
    """'cublas_fp8' for a clear winner, '≈ triton_splitk, cublas_fp8' for a tie (no single winner named)."""
    return f"{ranking.TIED} " + ", ".join(r["tied"]) if r["tied"] else r["variant"]


def _ranges(w: pd.DataFrame) -> str:
    """'1-8: triton_splitk_atomic; 16-64: cublas_fp8' (M values in order, runs of one winner or one tie joined)."""
    spans: list = []
    for m, v in zip(w["M"], [winner_label(r) for _, r in w.iterrows()], strict=True):
        if spans and spans[-1][2] == v:
            spans[-1][1] = m
        else:
            spans.append([m, m, v])
    return "; ".join(f"{a}: {v}" if a == b else f"{a}–{b}: {v}" for a, b, v in spans)


def _span(values: pd.Series, spec: str, suffix: str = "") -> str:
    if values.empty:
        return style.MISSING
    lo, hi = format(values.min(), spec), format(values.max(), spec)
    return f"{lo}{suffix}" if lo == hi else f"{lo}–{hi}{suffix}"


def _heading(k: dict) -> str:
    return f"{style.gemm_title(k)} · {k.get('timing_mode') or 'timing unknown'}"


# the fields of each winner in `gemmbench report --format json` (docs/USAGE.md: JSON output): the figure group, then the row
WINNER_FIELDS = (*plotdata.FIGURE_COLS, "gpu", "run_id", "M", "variant", "tied", "time_us_median", "speedup",
                 "baseline", "pct_of_roofline")  # fmt: skip


def winner_records(runs: Optional[pd.DataFrame]) -> list[dict]:
    """The winners tables of the report, one dict per (figure group, M) with WINNER_FIELDS: for scripts.  A tie names
    no winner: `variant` is null and `tied` lists the variants within noise (fastest first); the times, speedup and
    % of roofline are then the fastest median's."""
    if runs is None:
        return []
    out = []
    for k, g in plotdata.groups(runs, plotdata.FIGURE_COLS):
        for _, r in winners(g).iterrows():
            rec = {f: k.get(f) if f in plotdata.FIGURE_COLS else r.get(f) for f in WINNER_FIELDS}
            if r["tied"]:
                rec["variant"] = None
            out.append(rec)
    return out


def _summary(rep: Report, keyed: list) -> None:
    rows = []
    for k, g in keyed:
        w = winners(g)
        if w.empty:
            continue
        sp = w["speedup"].dropna()
        pct = w["pct_of_roofline"].dropna()
        rows.append(
            [
                style.gemm_title(k),
                style.shown(k.get("timing_mode")),
                _ranges(w),
                _span(sp, ".2f", "×"),
                _span(pct, ".0f"),
            ]
        )
    if rows:
        rep.add("h", 2, "Summary")
        rep.add(
            "p",
            "Fastest variant at each M (only cells whose result passed the check and are not noisy), its speedup "
            "over the baseline in the same run and its % of the measured roofline (ranges over M). "
            "≈ a, b: no single winner, the variants whose p20–p80 range overlaps the fastest's.",
        )
        rep.add("table", ["GEMM", "timing", "winner by M", "winner's speedup", "winner's % of roofline"], rows, "llllr")


def _gemm_section(rep: Report, k: dict, g: pd.DataFrame, figs: dict) -> None:
    rep.add("h", 2, _heading(k))
    w = winners(g)
    if not w.empty:
        rep.add(
            "table",
            ["M", "winner", "µs", "speedup", "over", "% of roofline"],
            [
                [
                    str(r["M"]),
                    winner_label(r),
                    _num(r["time_us_median"], ".1f"),
                    _num(r["speedup"], ".2f", "×"),
                    style.shown(r["baseline"]),
                    _num(r["pct_of_roofline"], ".0f"),
                ]
                for _, r in w.iterrows()
            ],
            "rlrrlr",
        )
    for kind, what in (("speedup", "speedup by M"), ("tflops", "TFLOP/s by M")):
        d = _lookup(figs[kind], k) if kind in figs else None
        if d is not None:
            rep.figure(d, f"{what}: {style.gemm_title(k)}")
    table = []
    marked = _marks(g)
    for i, r in g.sort_values(["M", "variant"]).iterrows():
        ok = r["status"] == "ok"
        status = "ok" if ok else f"{r['status']}: {plotdata._short(style.shown(r['reason']), 120)}"
        note = r.get("roofline_note")
        if ok and isinstance(note, str):
            status += f"; {note}"
        table.append(
            [
                str(r["M"]),
                f"{marked[i]} {r['variant']}" if i in marked else r["variant"],
                _num(r["time_us_median"], ".2f") if ok else "",
                _p20_p80(r) if ok else "",
                _num(r["tflops"], ".1f") if ok else "",
                _num(r["gbps"], ".0f") if ok else "",
                _num(r["pct_of_roofline"], ".0f") if ok else "",
                _num(r["speedup"], ".2f", "×") if ok else "",
                _num(r.get("max_rel_err"), ".1e"),  # beside the time: what a fast accumulation costs in error
                short_config(r["config"] if isinstance(r["config"], str) else None),
                status,
            ]
        )
    rep.add(
        "table",
        ["M", "variant", "µs", "p20–p80 µs", "TFLOP/s", "GB/s", "% roofline", "speedup", "max rel err", "config",
         "status"],
        table,
        "rlrrrrrrrll",
    )  # fmt: skip


def _profile_section(rep: Report, profiles: pd.DataFrame) -> None:
    drawn = plots.figures("profile", profiles=profiles)
    rows = ncu_figure.summed_profiles(profiles)
    rep.add("h", 2, "Nsight Compute profiles")
    rep.add(
        "p",
        "One eager launch per cell under ncu (caches flushed, clocks not locked), summed over the cell's "
        "kernels. DRAM/model = DRAM bytes read + written ÷ the modeled minimum bytes.",
    )
    for d, (k, g) in zip(drawn, plotdata.groups(rows, plotdata.PROFILE_COLS), strict=False):
        rep.add("h", 3, style.gemm_title(k))
        rep.figure(d, f"DRAM throughput and cache hit rates: {style.gemm_title(k)}")
        table = []
        for _, r in g.sort_values(["M", "variant"]).iterrows():
            if r["status"] != "ok":
                table.append(
                    [str(r["M"]), r["variant"], "", "", "", "", "", "", f"{r['status']}: {style.shown(r['reason'])}"]
                )
                continue
            table.append(
                [
                    str(r["M"]),
                    r["variant"],
                    _num(r.get("ncu_duration_us"), ".1f"),
                    _num(r["ncu_dram_gbps"], ".0f"),
                    _num(r["ncu_dram_gbps"] / r["ncu_dram_peak_gbps"] * 100, ".0f"),
                    _num(r["ncu_l1_hit_pct"], ".1f"),
                    _num(r["ncu_l2_hit_pct"], ".1f"),
                    _num(r.get("ncu_dram_traffic_ratio"), ".2f"),
                    "ok",
                ]
            )
        rep.add(
            "table",
            ["M", "variant", "ncu µs", "DRAM GB/s", "% of peak", "L1 hit %", "L2 hit %", "DRAM/model", "status"],
            table,
            "rlrrrrrrl",
        )


def build(
    runs: Optional[pd.DataFrame], profiles: Optional[pd.DataFrame], files: Sequence[Path], throughput: bool = False
) -> Report:
    """The report of the selected rows (runs: plotdata.select, with_speedups, keep_variants; profiles: select);
    `throughput`: each GEMM's TFLOP/s figure too (its tables hold each cell's TFLOP/s either way)."""
    rep = Report()
    rep.add("h", 1, "gemmbench report")
    both = pd.concat([d for d in (runs, profiles) if d is not None], ignore_index=True)
    rep.add(
        "p",
        f"**{', '.join(sorted(plotdata.gpu_names(both).unique()))}**, {plotdata.dates(both)}. Files: "
        + ", ".join(f"`{f}`" for f in files)
        + ".",
    )
    if runs is not None:
        info = []
        for run, g in runs.groupby("run_id", sort=True):
            counts = g["status"].value_counts()
            first = g.iloc[0]
            shown = style.shown  # a CPU run has no CUDA and no driver: N/A, never "nan"
            info.append(
                [
                    str(run),
                    shown(first["shape_set"]),
                    shown(first["timing_mode"]),
                    str(len(g)),
                    ", ".join(f"{counts[s]} {s}" for s in STATUSES if s in counts),
                    f"{shown(first['gemmbench_version'])} ({shown(first['git_sha'])[:12]})",
                    f"torch {shown(first['torch'])}, triton {shown(first['triton'])}, CUDA {shown(first['cuda'])}, "
                    f"driver {shown(first['driver'])}",
                ]
            )
        rep.add("table", ["run", "shape set", "timing", "rows", "status", "gemmbench", "stack"], info, "lllrlll")
        keyed = plotdata.groups(runs, plotdata.FIGURE_COLS)
        kinds = ("speedup", "tflops") if throughput else ("speedup",)
        figs = {kind: _fig_index(plots.figures(kind, runs)) for kind in kinds}
        _summary(rep, keyed)
        rooflines = plots.figures("roofline", runs)
        if rooflines:
            rep.add("h", 2, "Roofline")
            for d in rooflines:
                rep.figure(d, f"roofline {style.dtype_title(d.key)}")
                rep.warnings += d.warnings
                if d.warnings:
                    rep.add("p", "**Warning:** " + " ".join(d.warnings))
        for k, g in keyed:
            _gemm_section(rep, k, g, figs)
        if (runs["E"] > 1).any():
            rep.add("h", 2, "MoE schedules")
            for d in plots.figures("schedules", runs):
                rep.add("h", 3, _heading(d.key))
                rep.figure(d, f"MoE schedules: {style.gemm_title(d.key)}")
    if profiles is not None:
        _profile_section(rep, profiles)
    return rep


# ------------------------------------------------------------------ rendering


def to_markdown(rep: Report) -> str:
    out = []
    for b in rep.blocks:
        if b[0] == "h":
            out.append("#" * b[1] + " " + md_text(b[2]))
        elif b[0] == "p":
            out.append(b[1])
        elif b[0] == "img":
            out.append(f"![{md_text(b[2])}]({IMG_DIR}/{b[1]}.{IMG_SUFFIX})")
        elif b[0] == "table":
            out.append("\n".join(md_table(*b[1:])))
    return "\n\n".join(out) + "\n"


_CSS = """body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:1200px;margin:2em auto;
padding:0 1em;color:rgb(34,34,34)}table{border-collapse:collapse;margin:1em 0;font-size:13px}th,td{border:1px solid #ccc;
padding:3px 7px}th{background:#f3f3f3}td{font-variant-numeric:tabular-nums}img{max-width:100%;
display:block;margin:1em 0}code{background:#f3f3f3;padding:0 3px}"""
_ALIGN = {"text-align:left": "l", "text-align:right": "r", "text-align:center": "c"}


def _aligned_by_class(tokens: list) -> str:
    """Each table's column alignment as one class (a-lrr: left, right, right) in place of a style on every cell, which
    made most of a large report's text; returns the CSS of the classes used."""
    rules: dict[str, list[str]] = {}
    table, columns, in_head = None, [], False
    for t in tokens:
        if t.type == "table_open":
            table, columns = t, []
        elif t.type == "thead_open":
            in_head = True
        elif t.type == "thead_close" and table is not None:
            in_head = False
            rules["a-" + "".join(columns)] = columns
            table.attrSet("class", "a-" + "".join(columns))
        elif t.type in ("th_open", "td_open"):
            align = t.attrGet("style")
            if in_head:
                columns.append(_ALIGN.get(align or "", "x"))
            if align is not None:
                del t.attrs["style"]
    css = []
    for name, columns in rules.items():
        for letter, word in (("r", "right"), ("c", "center")):
            cells = [
                f".{name} {c}:nth-child({i + 1})" for i, a in enumerate(columns) if a == letter for c in ("td", "th")
            ]
            if cells:
                css.append(f"{','.join(cells)}{{text-align:{word}}}")
    return "".join(css)


def _data_uri(svg: bytes) -> str:
    """An SVG as a data URI for an img's src: escaped only where a URI or a double-quoted attribute needs it (base64
    would make it a third larger)."""
    text = svg.decode("utf-8")
    for char, code in (("%", "%25"), ("#", "%23"), ("&", "%26"), ('"', "%22"), ("\n", "%0A")):
        text = text.replace(char, code)
    return "data:image/svg+xml," + text


def to_html(rep: Report, embed: bool = True) -> str:
    """report.md rendered by markdown-it-py (CommonMark, its table rule on, raw HTML off: data is shown, never run),
    each image's `img/<stem>.svg` replaced by the figure itself (a data URI), so that the page is one file; embed=False
    keeps the links to img/ (a small page, which needs its folder)."""
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = md.parse(to_markdown(rep))
    table_css = _aligned_by_class(tokens)
    inline = (
        {md.normalizeLink(f"{IMG_DIR}/{stem}.{IMG_SUFFIX}"): im for stem, im in rep.images.items()} if embed else {}
    )
    default_image = md.renderer.rules["image"]

    def image(renderer, tokens, idx, options, env):
        src = tokens[idx].attrGet("src")
        if src not in inline:
            return default_image(tokens, idx, options, env)
        alt = escapeHtml(md.renderer.renderInlineAsText(tokens[idx].children or [], options, env))
        return f'<img src="{_data_uri(inline[src])}" alt="{alt}">'  # the URI escaped for the attribute already

    md.add_render_rule("image", image)
    body = md.renderer.render(tokens, md.options, {})
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>gemmbench report</title>\n'
        f"<style>{_CSS}{table_css}</style></head><body>\n{body}</body></html>\n"
    )


def paths(rep: Report, out_dir: Path) -> list[Path]:
    """The files write() writes: the images (img/), report.md, report.html."""
    out_dir = Path(out_dir)
    images = [out_dir / IMG_DIR / f"{stem}.{IMG_SUFFIX}" for stem in rep.images]
    return images + [out_dir / REPORT_MD, out_dir / REPORT_HTML]


def write(rep: Report, out_dir: Path, embed: bool = True) -> list[Path]:
    """report.md (images in img/), report.html (images inside, or linked to img/ with embed=False), each written
    atomically; the paths written."""
    files = paths(rep, out_dir)
    for path, image in zip(files[:-2], rep.images.values(), strict=True):
        write_atomic(path, image)
    write_atomic(files[-2], to_markdown(rep).encode("utf-8"))
    write_atomic(files[-1], to_html(rep, embed).encode("utf-8"))
    return files
