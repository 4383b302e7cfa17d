"""`gemmbench tune --export vllm|sglang DIR`: the stored fused-MoE configs of a shape set's expert GEMMs, written as
an inference engine's config files (the format, and the sources it was read from: inference_engines.py).

What maps (the engines' kernel walks its tiles in Triton tutorial 03's grouped order with GROUP_SIZE_M, one program
per tile, no SplitK):
  triton_moe_grouped -> its GROUP_M as GROUP_SIZE_M: the same order (gemmbench/kernels/schedules.py `grouped` is that code);
  triton_moe_row     -> GROUP_SIZE_M = 1: groups of one row of tiles walk N within one block of rows, row-major;
  triton_moe_col     -> no: column-major is the grouped order only where GROUP_SIZE_M >= the blocks of rows, which
                        the engine's grid sets per call from the tokens, so no one GROUP_SIZE_M gives it at every M;
  triton_moe_splitk  -> no: the engines launch SPLIT_K = 1.
Where both mapping variants have a stored winner for a bucket, the faster one (its stored cold-L2 time) is written.
One file per (GPU, experts per rank, intermediate size per partition, engine dtype); its entries are the w13 GEMM's
(gate and up fused: column-parallel in the set, N = 2 x intermediate).  vLLM runs that one config for w2 as well:
w2's own winners are not written, and the table says at which keys they differ.  SGLang reads w2's from
`<name>_down.json`: it is written from the w2 GEMM's winners (row-parallel, K = intermediate) with w13's BLOCK_SIZE_M
(one alignment of the tokens serves both GEMMs), with the same keys,
both in `configs/triton_X_Y_Z/` (the Triton version they were tuned with), so that SGLANG_MOE_CONFIG_DIR=DIR finds them.

The keys: vLLM's tuner's token counts (TOKEN_COUNTS: 1, 2, 4, ... 24, ... 3072, 4096) and any stored bucket beyond
them.  Each key's entry is the stored winner of the bucket a run's stored lookup takes for that many tokens
(config_files.nearest_bucket of its m_bucket): the key's own bucket (MoE buckets are powers of two, so 24 -> 32, 48
-> 64, 96 -> 128, 1536 -> 2048, 3072 -> 4096) where stored, else the nearest stored bucket in log2, the larger on a
tie.  A run between two stored buckets times both (tuning.choose); the export times nothing.  `tune` cannot tune
24, 48, 96, 1536 or 3072 on their own: `--m 24` tunes and stores bucket 32.  The stdout table counts the buckets
behind each file's keys; a note names the keys whose own bucket is not stored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from gemmbench import dtypes, registry
from gemmbench.configs import config_files, kernel_config
from gemmbench.configs.inference_engines import (
    TOKEN_COUNTS,
    InferenceEngine,
    device_name,
    engine_dtype,
    file_name,
    sglang_folder,
    to_entry,
)
from gemmbench.results.atomic_write import write_atomic
from gemmbench.shapes import Problem, ShapeSet

EXPORTS: dict[str, Optional[int]] = {"triton_moe_grouped": None, "triton_moe_row": 1}  # -> GROUP_SIZE_M it fixes
NOT_EXPORTED = {
    "triton_moe_col": "column-major is not the engines' grouped order at every token count",
    "triton_moe_splitk": "the engines launch SPLIT_K = 1",
}
ROLES = {"column": "w13", "row": "w2"}  # an expert GEMM's role, by how vLLM shards it (w13: N = 2I; w2: K = I)


class ExportError(ValueError):
    """Nothing to export, or an export that cannot be written as asked; one line."""


@dataclass
class Group:
    """One engine file (on each GPU): the selected expert GEMMs that name it, w13 and w2 of one MoE block at one TP
    and EP degree."""

    E: int  # experts per rank
    N: int  # intermediate size per partition
    dtype: Optional[str]  # the file name's dtype
    block: bool
    gemms: dict[str, Problem] = field(default_factory=dict)  # role -> problem (its M unused)

    def label(self) -> str:
        p = next(iter(self.gemms.values()))
        return f"{p.shape_set} E={self.E},N={self.N} {dtypes.label(p.dtype, p.scaling)}"


@dataclass
class Written:
    """One file to write: its path under DIR, its bytes, and a summary for the table."""

    path: str
    data: bytes
    gpu: str
    gemm: str  # the GEMM whose winners it holds
    keys: list[int]
    buckets: dict[int, int]  # key -> the stored bucket whose winner it holds
    variants: dict[str, int]  # variant -> how many keys it gave
    notes: list[str]


def plan(
    engine: InferenceEngine, sset: ShapeSet, problems: list[Problem], variants: list[registry.Variant]
) -> tuple[list[Group], list[str]]:
    """(the engine files the selection names, lines on the expert GEMMs that have none), before any stored config is
    read, so that `tune --export` refuses before it tunes.  ExportError: nothing exportable, or two GEMMs of the
    selection naming one file."""
    if not any(v.name in EXPORTS for v in variants):
        why = "; ".join(f"{v.name}: {NOT_EXPORTED[v.name]}" for v in variants if v.name in NOT_EXPORTED)
        raise ExportError(f"--export {engine.value}: no selected variant runs the engine's tile order "
                          f"({', '.join(EXPORTS)} do{f'; {why}' if why else ''})")  # fmt: skip
    parallel = {g.name: g.parallel for g in sset.gemms}
    groups: dict[tuple, Group] = {}
    skipped = []
    for p in problems:
        role = ROLES.get(parallel.get(p.gemm, ""))
        if not p.is_moe:
            continue
        if role is None:
            skipped.append(f"{p.gemm}: an expert GEMM neither column- nor row-parallel has no place in the file")
            continue
        try:
            dtype, block = engine_dtype(p.dtype, p.scaling)
        except ValueError as exc:
            skipped.append(f"{p.gemm}: {exc}")
            continue
        if role == "w13" and p.N % 2:
            skipped.append(f"{p.gemm}: N {p.N} is odd, not gate and up fused (2 x the intermediate size)")
            continue
        inter = p.N // 2 if role == "w13" else p.K
        group = groups.setdefault((p.local_experts, inter, dtype, block), Group(p.local_experts, inter, dtype, block))
        # what names its stored files: shape, experts, top-k, EP, dtype, scaling, and the engines' contract: their
        # Triton kernel sums per-tensor and per-channel fp8 with fast accumulation, and promotes block-scaled fp8 per
        # 128-K group (dtypes.FP8_ACCUM_ENGINES), so configs tuned under fast serve the former where stored
        accum = dtypes.FAST_FP8_ACCUM if p.dtype == "fp8" and not block else p.fp8_accum
        p = p.with_(M=1, routing="uniform", fp8_accum=accum)
        held = group.gemms.get(role)
        same = ("N", "K", "topk", "ep", "dtype", "scaling")
        if held is not None and any(getattr(held, a) != getattr(p, a) for a in same):
            raise ExportError(f"--export {engine.value}: {held.gemm} {held.dtype} {held.scaling} and {p.gemm} {p.dtype} "
                              f"{p.scaling} would both be {role} of {file_name(engine, group.E, group.N, '<GPU>', dtype, block)} "
                              "(one file per engine dtype): export one with --dtype / --scaling")  # fmt: skip
        group.gemms[role] = p
    if not groups:
        raise ExportError(f"--export {engine.value}: nothing to export: " + ("; ".join(dict.fromkeys(skipped)) or
                          f"{sset.name} has no expert GEMM in the selection"))  # fmt: skip
    return list(groups.values()), list(dict.fromkeys(skipped))


def build(
    engine: InferenceEngine, groups: list[Group], variants: list[registry.Variant]
) -> tuple[list[Written], list[str]]:
    """(the files, lines on what was not exported and why) from the stored configs of every GPU that has some."""
    names = [v.name for v in variants if v.name in EXPORTS]
    files: list[Written] = []
    notes: list[str] = []
    for group in groups:
        if "w13" not in group.gemms:
            notes.append(f"{group.label()}: the selection has no w13 (column-parallel) GEMM for it, and the file's "
                         "entries are w13's")  # fmt: skip
            continue
        found, tuned = [], False
        for gpu in _gpus():
            stored = {role: _winners(names, p, gpu, notes) for role, p in group.gemms.items()}
            (up, gpu_name), (down, _) = stored.get("w13", ({}, gpu)), stored.get("w2", ({}, gpu))
            if up:
                tuned = True
                found += _files(engine, group, gpu_name, up, down, notes)
            elif down:
                notes.append(f"{group.label()} on {gpu_name}: only w2 is tuned, and the file's entries are w13's")
        if not tuned:  # stored but not exportable: _files said why
            notes.append(f"{group.label()}: no stored config of {' or '.join(names)} for its w13 GEMM on any GPU "
                         f"({config_files.configs_root()})")  # fmt: skip
        files += found
    if not files:
        raise ExportError(f"--export {engine.value}: nothing to export: " + "; ".join(dict.fromkeys(notes)))
    return files, notes


def write(files: list[Written], out_dir: Path, force: bool) -> None:
    """Every file, each written atomically; none when one exists and force is not given (ExportError)."""
    for f in files:
        if (out_dir / f.path).exists() and not force:
            raise ExportError(f"{out_dir / f.path} exists; --force replaces it")
    for f in files:
        write_atomic(out_dir / f.path, f.data)


# ---------------------------------------------------------------- stored winners


@dataclass
class _Winner:
    entry: dict[str, int]
    variant: str
    time_us: float
    triton: Optional[str]


def _gpus() -> list[str]:
    """The GPUs with stored configs: the folders of the user's and the shipped configs roots, named as
    config_files.gpu_dirname names them."""
    roots = [r for r in (config_files.configs_root(), config_files.shipped_configs_root()) if r.is_dir()]
    return sorted({d.name for root in roots for d in root.iterdir() if d.is_dir()})


def _winners(names: list[str], problem: Problem, gpu: str, notes: list[str]) -> tuple[dict[int, _Winner], str]:
    """(bucket (tokens) -> the fastest stored winner of the mapping variants, for one GEMM on one GPU; the GPU's own
    name as the files record it: the folder name `gpu` has lost its punctuation)."""
    best: dict[int, _Winner] = {}
    own = gpu
    for name in names:
        # the user's buckets over the shipped ones, as a run reads them; TuningError where a file is broken
        buckets, files = config_files.overlay_buckets(name, problem, gpu)
        for root in (config_files.configs_root(), config_files.shipped_configs_root()):
            for shared in (True, False):
                own = str(
                    config_files._read(config_files.config_path(name, problem, gpu, root, shared)).get("gpu", own)
                )
        config_type = registry.get(name).tunable.config_type
        for bucket, stored in buckets.items():
            path = files[bucket]
            try:
                config: Any = config_type.from_dict(stored["config"])
            except (kernel_config.ConfigError, KeyError, TypeError) as exc:
                raise config_files.TuningError(f"stored config file {path}, bucket {bucket}: {exc}") from None
            schedule = name.removeprefix("triton_moe_")
            if config.SPLIT_K is not None or config.FP8_PROMOTE is not None or config.schedule not in (None, schedule):
                notes.append(f"{path}, bucket {bucket}: not exported (SPLIT_K, FP8_PROMOTE or another schedule: "
                             "the engines' kernel has none of them)")  # fmt: skip
                continue
            won = _Winner(
                to_entry(config, EXPORTS[name]), name, stored.get("time_us", float("inf")), stored.get("triton")
            )
            if int(bucket) not in best or won.time_us < best[int(bucket)].time_us:
                best[int(bucket)] = won
    return dict(sorted(best.items())), own


def _files(engine: InferenceEngine, group: Group, gpu: str, up: dict, down: dict, notes: list[str]) -> list[Written]:
    """The engine's file(s) for one group on one GPU: vLLM one (w13's entries); SGLang w13's and w2's `_down`, with
    the same keys, in the folder of their Triton version."""
    dev = device_name(engine, gpu)
    name = file_name(engine, group.E, group.N, dev, group.dtype, group.block)
    w13 = group.gemms["w13"]
    summary = f"w13 {w13.gemm} (N {w13.N}, K {w13.K})"
    keys = sorted({*TOKEN_COUNTS, *up})
    up_at, down_at = _fill(up, keys), _fill(down, keys) if down else {}
    if engine is InferenceEngine.vllm:
        differ = [k for k, (_, w) in down_at.items() if w.entry != up_at[k][1].entry]
        why = [f"w2's own winner differs at {_counts(differ)}: vLLM runs w13's entry for both GEMMs"] if differ else []
        versions = {w.triton for _, w in up_at.values()}
        head = {"triton_version": versions.pop()} if len(versions) == 1 and None not in versions else {}
        return [_written(name, head, gpu, summary, up_at, why)]
    tuned_with = sorted({str(w.triton or "unknown") for _, w in [*up_at.values(), *down_at.values()]})
    try:
        if len(tuned_with) > 1:
            raise ValueError(f"tuned with Triton {', '.join(tuned_with)}, and SGLang keeps one folder per version")
        folder = sglang_folder(tuned_with[0]) + "/"
    except ValueError as exc:
        notes.append(f"{group.label()} on {gpu}: not exported: {exc}")
        return []
    out = [_written(folder + name, {}, gpu, summary, up_at, [])]
    if down_at:
        w2 = group.gemms["w2"]
        other = [k for k, (_, w) in down_at.items() if w.entry["BLOCK_SIZE_M"] != up_at[k][1].entry["BLOCK_SIZE_M"]]
        # both GEMMs read one alignment of the tokens, padded to w13's BLOCK_SIZE_M: SGLang runs w2 with it (some
        # revisions replace w2's, others assert they are equal), so the file holds w13's and says where it differs
        for k in other:
            bucket, won = down_at[k]
            entry = {**won.entry, "BLOCK_SIZE_M": up_at[k][1].entry["BLOCK_SIZE_M"]}
            down_at[k] = (bucket, _Winner(entry, won.variant, won.time_us, won.triton))
        why = [f"w13's BLOCK_SIZE_M written for w2 at {_counts(other)}: one alignment serves both"] if other else []
        down_name = folder + file_name(engine, group.E, group.N, dev, group.dtype, group.block, down=True)
        out.append(_written(down_name, {}, gpu, f"w2 {w2.gemm} (N {w2.N}, K {w2.K})", down_at, why))
    return out


def _fill(winners: dict[int, _Winner], keys: list[int]) -> dict[int, tuple[int, _Winner]]:
    """key -> (the stored bucket it takes, that bucket's winner): the bucket a run's stored lookup takes for that many
    tokens, its own (m_bucket) where stored, else the nearest stored in log2 (config_files.nearest_bucket)."""
    buckets = list(winners)
    out = {}
    for k in keys:
        b = config_files.nearest_bucket(buckets, config_files.m_bucket(k, moe=True))
        out[k] = (b, winners[b])
    return out


def _written(path: str, head: dict, gpu: str, gemm: str, at: dict[int, tuple[int, _Winner]], notes: list) -> Written:
    """One file: `head` (vLLM's triton_version), then an entry per key, and a note on the keys whose own bucket is not
    stored."""
    counts: dict[str, int] = {}
    for _, w in at.values():
        counts[w.variant] = counts.get(w.variant, 0) + 1
    table = {**head, **{str(k): w.entry for k, (_, w) in at.items()}}
    # vLLM's tuner writes json.dump(..., indent=4) and a newline (benchmark_moe.py save_configs)
    data = (json.dumps(table, indent=4) + "\n").encode()
    buckets = {k: b for k, (b, _) in at.items()}
    lent: dict[int, list[int]] = {}
    for k, b in buckets.items():
        if b != config_files.m_bucket(k, moe=True):
            lent.setdefault(b, []).append(k)
    if lent:
        notes = [*notes, "no stored bucket of their own for " + "; ".join(
            f"{', '.join(map(str, ks))} (bucket {b}'s winner)" for b, ks in lent.items()) + ": the nearest in log2"]  # fmt: skip
    return Written(path, data, gpu, gemm, list(at), buckets, counts, notes)


def _counts(keys: list[int]) -> str:
    return "token count" + ("s " if len(keys) > 1 else " ") + ", ".join(map(str, keys))
