"""Which configs a run's Triton cells ran, per GPU, from the rows' `config` provenance: the GPU's own, borrowed from
another GPU (by lender), searched in a run, the only candidate, an engine's file; with the `gemmbench tune` command
that would replace the searched ones.  `run` prints it as one line per GPU before its tables, and puts it in its
JSON document; `run --dry-run` says the same of what a run would use (cli/dry_run.py)."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from typing import Optional

from gemmbench import gpu_parts
from gemmbench.configs.inference_engines import InferenceEngine

# Seconds a `gemmbench tune` job takes on average, to estimate the command's time: docs/BENCHMARKS.md, "Tuning".
TUNE_S_PER_JOB = 6.2
KINDS = ("own", "borrowed", "searched", "only", "imported")


def kind_of(source: str) -> str:
    """A provenance source as one of KINDS: the GPU's own stored configs ("stored", "stored-neighbour", and
    "fitted": a config shaped for M that ran faster than the stored ones timed beside it), an engine's file
    ("imported"), else the source itself."""
    if source in ("stored", "stored-neighbour", "fitted"):
        return "own"
    if source == "tuned":  # what rows of older builds call a run's search
        return "searched"
    return "imported" if source in InferenceEngine.__members__ else source


def lender_name(folder: str) -> str:
    """A lender's folder (NVIDIA_H100_80GB_HBM3) as the driver names the GPU, where the parts table knows it."""
    part = gpu_parts.find(folder)
    return part.name if part else folder


def summarize(rows: list[dict]) -> list[dict]:
    """One document per GPU of the rows with a config source: {"gpu", "own", "borrowed": {lender: cells},
    "searched", "only", "imported", "tune": the command that tunes the searched cells' shapes or None,
    "tune_estimate_s"}.  Counts are cells (a variant on one problem)."""
    by_gpu: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        source = _source(r.get("config"))
        if source and r.get("gpu"):  # a CPU run's Triton cells run their one candidate: nothing to say
            by_gpu[r["gpu"]].append({**r, "_kind": kind_of(source), "_config": _config(r["config"])})
    docs = []
    for gpu, rs in by_gpu.items():
        counts = Counter(r["_kind"] for r in rs)
        lent = Counter(lender_name(r["_config"].get("borrowed", "?")) for r in rs if r["_kind"] == "borrowed")
        searched = [r for r in rs if r["_kind"] == "searched"]
        doc = {"gpu": gpu, **{k: counts.get(k, 0) for k in KINDS}, "borrowed": dict(sorted(lent.items()))}
        doc.update(tune_command(searched))
        docs.append(doc)
    return docs


def tune_command(searched: list[dict]) -> dict:
    """{"tune": the `gemmbench tune` command for the searched rows' shape sets, variants, M and dtypes, or None;
    "tune_estimate_s": its jobs (variant x shape x M bucket) x TUNE_S_PER_JOB, or None}."""
    if not searched:
        return {"tune": None, "tune_estimate_s": None}
    from gemmbench.configs.config_files import m_bucket  # not at import: the plain install reads rows without it

    words = ["gemmbench", "tune"]
    for flag, key in (("--shapes", "shape_set"), ("--variants", "variant"), ("--dtype", "dtype")):
        words += [flag, ",".join(sorted({str(r[key]) for r in searched}))]
    words += ["--m", ",".join(map(str, sorted({int(r["M"]) for r in searched})))]
    for flag, key in (("--tp", "tp"), ("--ep", "ep"), ("--dp", "dp")):
        values = sorted({int(r.get(key) or 1) for r in searched})
        words += [flag, ",".join(map(str, values))] if values != [1] else []
    jobs = {(r["variant"], r["N"], r["K"], r["dtype"], r.get("scaling"), m_bucket(int(r["M"]), (r.get("E") or 1) > 1))
            for r in searched}  # fmt: skip
    return {"tune": " ".join(words), "tune_estimate_s": round(len(jobs) * TUNE_S_PER_JOB)}


def line(doc: dict) -> str:
    """'configs on NVIDIA H200: own 0, borrowed from NVIDIA H100 80GB HBM3 12, searched 3 (to tune them: gemmbench
    tune ...: about 15 s)' (cells of the Triton variants)."""
    parts = [f"own {doc['own']}"]
    parts += [f"borrowed from {lender} {n}" for lender, n in doc["borrowed"].items()] or ["borrowed 0"]
    parts.append(f"searched {doc['searched']}")
    parts += [f"{k} {doc[k]}" for k in ("only", "imported") if doc[k]]
    text = f"configs on {doc['gpu']}: {', '.join(parts)} (cells)"
    if doc["tune"]:
        text += f"; to tune the searched ones: {doc['tune']} (about {doc['tune_estimate_s']} s)"
    return text


def _config(config) -> dict:
    if isinstance(config, dict):
        return config
    try:
        return json.loads(config) if config else {}
    except ValueError:
        return {}


def _source(config) -> Optional[str]:
    return _config(config).get("source")
