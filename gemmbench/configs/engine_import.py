"""`run --import-config ENGINE:FILE`: an inference engine's fused-MoE config file read and checked
(its format: inference_engines.py), and run by gemmbench's fused kernel as a variant of its own,
`triton_moe_grouped@ENGINE`: the engines' kernel walks its tiles in Triton tutorial 03's grouped order with
GROUP_SIZE_M, one program per tile, which is gemmbench's `grouped` schedule (gemmbench/kernels/schedules.py).  Each row's
entry is the one the engine's rule picks for its M (the nearest key), for w13 (N = 2 x the file's N) and w2 (K =
the file's N) alike; SGLang's `_down` file beside the imported one gives w2's, with w13's BLOCK_SIZE_M.  The row's
`config` records the source (the engine), the file's name and the key.  The workers of a run register the same
variants from IMPORT_ENV.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

from gemmbench import registry
from gemmbench.configs import kernel_config
from gemmbench.configs.inference_engines import (
    BLOCK,
    FORM,
    FP8,
    IGNORED,
    KEYS,
    NAME,
    InferenceEngine,
    engine_dtype,
    nearest_key,
)
from gemmbench.configs.provenance import Provenance
from gemmbench.shapes import Problem

IMPORT_ENV = "GEMMBENCH_IMPORT_CONFIGS"  # the run's --import-config specs, for its workers (JSON list)
RUNS_ON = "triton_moe_grouped"  # the schedule the engines' kernel has


class EngineConfigError(ValueError):
    """A file that is not an engine's config file gemmbench can run; the message names the file and the field."""


@dataclass
class Table:
    """One engine file, read: what its name says, and its entries (tokens -> config) in file order."""

    engine: InferenceEngine
    path: Path
    E: int
    N: int  # intermediate size per partition: w13's N is 2N, w2's K is N
    device: str
    dtype: Optional[str]
    block: bool
    entries: dict[int, Any]  # a MoeConfig each (gemmbench/kernels/fused_moe.py, through the registry)
    tma: set[int] = field(default_factory=set)  # SGLang _down keys whose entry asks for its TMA path
    down: Optional[Table] = None  # SGLang: the `_down` file beside it, for w2

    @property
    def label(self) -> str:
        dt = "fp16/bf16" if self.dtype is None else f"fp8{' block' if self.block else ''}"
        return f"E={self.E}, N={self.N} (w13 N {2 * self.N}, w2 K {self.N}), {dt}"

    def key_for(self, M: int) -> int:
        """The engine's entry for M tokens: the nearest key, the first in file order on a tie."""
        return nearest_key(list(self.entries), M)


def read(engine: InferenceEngine, path: Path) -> Table:
    """An engine's config file, checked as the engine and gemmbench's kernel would take it; EngineConfigError names
    the file and the field.  SGLang: a `_down` file beside it is read with it (SGLang's own lookup)."""
    what = f"{engine.value} config {path}"
    if not path.is_file():
        raise EngineConfigError(f"{what}: no such file")
    m = NAME.fullmatch(path.name)
    vllm = engine is InferenceEngine.vllm
    # the block shape as each engine writes it: a file named the other way is one the engine never finds
    spaced = m is not None and m["bk"] is not None and m["space"] == (" " if vllm else "")
    if not m or spaced or (vllm and (m["pcq"] or m["down"])):
        raise EngineConfigError(f"{what}: not a {engine.value} config file name ({FORM[engine]})")
    if m["down"]:
        raise EngineConfigError(f"{what}: a _down file: import its w13 file, which reads the _down file beside it")
    if m["pcq"]:
        raise EngineConfigError(f"{what}: per_channel_quant: gemmbench's fused MoE kernel has no per-channel fp8")
    if m["dtype"] not in (None, FP8):
        raise EngineConfigError(f"{what}: dtype={m['dtype']}: gemmbench's fused MoE kernel runs fp16, bf16, {FP8}")
    block = m["bn"] is not None
    if block and ((int(m["bn"]), int(m["bk"])) != BLOCK or m["dtype"] != FP8):
        raise EngineConfigError(f"{what}: block_shape=[{m['bn']},{m['bk']}]: gemmbench's block scaling is fp8 "
                                f"128x128")  # fmt: skip
    table = Table(engine, path, int(m["E"]), int(m["N"]), m["device"], m["dtype"], block, {})
    table.entries, _ = _entries(engine, path, block, down=False)
    down = path.with_name(path.name[: -len(".json")] + "_down.json")
    if engine is InferenceEngine.sglang and down.is_file():
        entries, tma = _entries(engine, down, block, down=True)
        table.down = Table(engine, down, table.E, table.N, table.device, table.dtype, block, entries, tma)
    return table


def _entries(engine: InferenceEngine, path: Path, block: bool, down: bool) -> tuple[dict[int, Any], set[int]]:
    """(tokens -> config in file order, the keys whose entry asks for SGLang's TMA path) of one file."""
    what = f"{engine.value} config {path}"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise EngineConfigError(f"{what}: unreadable: {exc}") from None
    if not isinstance(data, dict) or not data:
        raise EngineConfigError(f"{what}: not a JSON object of token counts")
    if engine is InferenceEngine.vllm:
        data.pop("triton_version", None)  # written by vLLM's tuner, dropped by its reader
    config_type = registry.get(RUNS_ON).tunable.config_type
    entries: dict[int, Any] = {}
    tma: set[int] = set()
    for key, entry in data.items():
        where = f"{what}: entry {key!r}"
        if not re.fullmatch(r"[0-9]+", key) or int(key) < 1:
            raise EngineConfigError(f"{where}: a key must be a token count (a positive integer)")
        if not isinstance(entry, dict):
            raise EngineConfigError(f"{where}: not an object of {', '.join(KEYS)}")
        known = (*KEYS, *IGNORED[engine]) if engine is InferenceEngine.vllm or down else tuple(KEYS)
        unknown = [k for k in entry if k not in known]
        missing = [k for k in KEYS if k not in entry]
        if unknown or missing:
            bad = f"unknown key {unknown[0]!r}" if unknown else f"missing key {missing[0]!r}"
            raise EngineConfigError(f"{where}: {bad} (an entry has {', '.join(KEYS)})")
        try:
            config: Any = config_type(**{ours: entry[theirs] for theirs, ours in KEYS.items()})
        except kernel_config.ConfigError as exc:
            raise EngineConfigError(f"{where}: {_their_names(str(exc))}") from None
        if block and config.BLOCK_K > min(BLOCK):  # the engines' launcher: BLOCK_SIZE_K = min(it, min(block_shape))
            config = replace(config, BLOCK_K=min(BLOCK))
        entries[int(key)] = config
        if entry.get("USE_TMA") is True:
            tma.add(int(key))
    return entries, tma


def _their_names(message: str) -> str:
    """A MoeConfig error ("MoeConfig: BLOCK_M must be ...") in the engine's key names."""
    message = message.split(": ", 1)[-1]
    for theirs, ours in KEYS.items():
        if message.startswith(f"{ours} "):
            return theirs + message[len(ours) :]
    return message


# ---------------------------------------------------------------- --import-config: the imported variants


def parse_spec(spec: str) -> tuple[InferenceEngine, Path]:
    """'vllm:FILE' -> (InferenceEngine.vllm, FILE); ValueError naming the engines."""
    engine, sep, path = spec.partition(":")
    if not sep or engine not in InferenceEngine.__members__ or not path:
        raise EngineConfigError(f"--import-config {spec!r}: give ENGINE:FILE, ENGINE one of "
                                f"{', '.join(InferenceEngine.__members__)} (e.g. vllm:E=8,N=7168,device_name=….json)")  # fmt: skip
    return InferenceEngine(engine), Path(path)


def variant_name(engine: InferenceEngine) -> str:
    """The imported config's variant: a name of its own, so no table, figure or compare merges it with the
    gemmbench-tuned `triton_moe_grouped`."""
    return f"{RUNS_ON}@{engine.value}"


def register_imports(specs: list[str]) -> list[Table]:
    """Register one variant per engine named in `specs` ('vllm:FILE', repeatable) holding its files, in place of
    any this process imported before; returns the files read.  EngineConfigError for a bad file, or for two files of
    one engine for the same experts, size and dtype (one problem, two configs)."""
    by_engine: dict[InferenceEngine, list[Table]] = {}
    for spec in specs:
        engine, path = parse_spec(spec)
        table = read(engine, path.resolve())
        for other in by_engine.get(engine, []):
            if (other.E, other.N, other.dtype, other.block) == (table.E, table.N, table.dtype, table.block):
                raise EngineConfigError(f"--import-config: two {engine.value} files for {table.label}: "
                                        f"{other.path.name} and {table.path.name}; import one per run")  # fmt: skip
        by_engine.setdefault(engine, []).append(table)
    for engine in InferenceEngine:
        registry.unregister(variant_name(engine))
    for engine, tables in by_engine.items():
        registry.register(_variant(engine, tables))
    return [t for tables in by_engine.values() for t in tables]


def register_from_env() -> None:
    """In a worker: the variants of the run's --import-config (IMPORT_ENV), as the command registered them."""
    specs = json.loads(os.environ.get(IMPORT_ENV) or "[]")
    if specs:
        register_imports(specs)


def worker_env(specs: list[str]) -> dict[str, str]:
    """What a worker needs to register the same imported variants: the specs with absolute paths."""
    if not specs:
        return {}
    absolute = [f"{e.value}:{p.resolve()}" for e, p in map(parse_spec, specs)]
    return {IMPORT_ENV: json.dumps(absolute)}


def _file_dtype(problem: Problem) -> tuple[Optional[str], bool]:
    try:
        return engine_dtype(problem.dtype, problem.scaling)
    except ValueError:
        return "", False  # a scaling no engine file has: matches none


def entry_for(tables: list[Table], problem: Problem) -> tuple[Optional[tuple[Any, Provenance]], str]:
    """(the config and its provenance, "") that the engine would run for a problem, or (None, why not): the file of
    its dtype, experts per rank and size; that file's entry for the problem's M by the engine's rule."""
    why = f"no imported file is for {problem.dtype} ({problem.scaling})"
    for t in tables:
        if _file_dtype(problem) != (t.dtype, t.block):
            continue
        w13, w2 = problem.N == 2 * t.N, problem.K == t.N  # a GEMM that is both counts as w13
        if problem.local_experts != t.E:
            why = f"{t.path.name} is for {t.E} experts, this GEMM has {problem.local_experts} (per rank)"
        elif not (w13 or w2):
            why = f"{t.path.name} is for {t.label}: this GEMM is N {problem.N}, K {problem.K}"
        else:
            use = t.down if not w13 and t.down is not None else t  # SGLang's _down file: w2's entries
            key = use.key_for(problem.M)
            if key in use.tma:
                return None, f"{use.path.name} entry {key}: USE_TMA, SGLang's TMA down-projection path"
            config = use.entries[key]
            if use is not t:  # one alignment serves both GEMMs: SGLang gives w2 the w13 entry's BLOCK_SIZE_M
                config = replace(config, BLOCK_M=t.entries[t.key_for(problem.M)].BLOCK_M)
            return (config, Provenance(t.engine.value, file=use.path.name, key=key)), ""
    return None, why


def _variant(engine: InferenceEngine, tables: list[Table]) -> registry.Variant:
    """`triton_moe_grouped@ENGINE`: the grouped fused kernel, built with the entry of the imported file that the
    engine would take for each problem (entry_for); problems no file is for are skipped rows that say why."""
    base = registry.get(RUNS_ON)
    dtypes_ = ("fp16", "bf16") if any(t.dtype is None for t in tables) else ()
    scalings = tuple(
        s for t in tables if t.dtype == FP8 for s in (("block", "block-ue8m0") if t.block else ("tensor",))
    )

    def supports(problem: Problem, device: Any) -> Optional[str]:
        return base.unsupported_reason(problem, device) or entry_for(tables, problem)[1] or None

    def make(problem: Problem, inputs: Any) -> registry.Launch:
        chosen, why = entry_for(tables, problem)
        if chosen is None:
            raise EngineConfigError(why)
        launch = base.tunable.build(problem, inputs, chosen[0])
        launch.provenance = chosen[1]
        return launch

    files = ", ".join(t.path.name for t in tables)
    return registry.Variant(
        name=variant_name(engine),
        family=base.family,
        dtypes=dtypes_ + (("fp8",) if scalings else ()),
        description=f"{RUNS_ON} run with {engine.value}'s config file(s) {files} (--import-config)",
        make=make,
        supports=supports,
        moe=True,
        scalings=scalings or ("tensor",),
        # the engines' kernel sums per-tensor fp8 with tl.dot(acc=...), fast on Hopper: both contracts, as the base
        fp8_accums=base.fp8_accums,
        source=f"--import-config {engine.value}",
    )
