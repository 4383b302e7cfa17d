"""The command line (Typer).  Parses, validates, calls one function; measures nothing itself.
Tables go to stdout; progress, banners and warnings to stderr; a bad input is one line on stderr
and exit code 2, never a traceback."""

from __future__ import annotations

import atexit
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup

from gemmbench.cli.formats import LayoutChoice
from gemmbench.engine.pool import PoolError, parse_gpus

try:  # Typer >= 0.29 carries its own copy of click
    from typer._click.exceptions import ClickException, NoArgsIsHelpError
except ImportError:  # pragma: no cover - older Typer on click
    from click.exceptions import ClickException, NoArgsIsHelpError  # type: ignore[assignment]


class OneLineErrors(TyperGroup):
    """Usage errors (an unknown option, a value of the wrong type, a missing option) as one line on stderr and exit
    code 2, like every other bad input: Typer draws them as 5-6 line boxes."""

    def main(self, *args, standalone_mode: bool = True, **kwargs):  # type: ignore[override]
        run = super().main
        if not standalone_mode:
            return run(*args, **{**kwargs, "standalone_mode": False})
        try:
            code = run(*args, **{**kwargs, "standalone_mode": False})  # an Exit comes back as its code
        except NoArgsIsHelpError as exc:  # `gemmbench` or `gemmbench list` alone: the help, as before
            exc.show()
            sys.exit(exc.exit_code)
        except ClickException as exc:
            ctx = getattr(exc, "ctx", None)  # the command as typed, under its installed name
            where = " ".join(["gemmbench", *ctx.command_path.split()[1:]]) if ctx else "gemmbench"
            err.print(f"[bold red]error:[/] {escape(exc.format_message())} (see `{escape(where)} --help`)",
                      highlight=False, soft_wrap=True)  # fmt: skip
            sys.exit(exc.exit_code)
        sys.exit(code if isinstance(code, int) else 0)


def _flags_without_a_type() -> None:
    """--help without `<bool>` beside every flag (a flag takes no value, so its type says nothing); where Typer's help
    has no such hook, as it was."""
    from typer import core

    shown = getattr(core.TyperOption, "display_type_rich", None)
    if shown is None:
        return
    core.TyperOption.display_type_rich = lambda self, ctx: None if self.is_flag else shown(self, ctx)  # type: ignore[method-assign]


_flags_without_a_type()
app = typer.Typer(
    cls=OneLineErrors,
    add_completion=True,  # --install-completion, --show-completion: commands, options and choices complete in the shell
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Benchmark and profile the GEMM kernels of LLM inference on NVIDIA Hopper GPUs.",
)

# Piped output (CI logs, files) gets a wide fixed width instead of rich's 80-column default.
out = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, soft_wrap=True)  # a line is never cut: a command in a hint copies whole


def _show_version(value: bool) -> None:
    if value:
        import gemmbench

        print(f"gemmbench {gemmbench.__version__}")  # plain: scripts read it
        raise typer.Exit()


@app.callback()
def _app_options(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_show_version, is_eager=True, help="Print gemmbench's version and exit."),
    ] = False,
) -> None:
    pass


def fail(message: str, code: int = 2) -> "typer.Exit":
    # escape: messages quote user input (globs like 'cublas_[ab]*'), which rich would read as markup
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def progress_bar(eta: bool = False):
    """The progress bar of every long command, on stderr: what runs now, done of total, time taken; eta: and the
    time left, from the pace so far (rich's estimate: run, tune, layer, profile)."""
    from rich import progress as bars  # not at --help

    left = [bars.TextColumn("left"), bars.TimeRemainingColumn()] if eta else []
    return bars.Progress(
        bars.TextColumn("{task.description}"), bars.BarColumn(), bars.MofNCompleteColumn(), bars.TimeElapsedColumn(),
        *left, console=err,
    )  # fmt: skip


def _choices(option: str, text: str, allowed) -> list[str]:
    """A comma-separated option whose every value must be one of `allowed`; duplicates dropped, order kept."""
    names = [x.strip() for x in text.split(",") if x.strip()]
    if not names or any(x not in allowed for x in names):
        raise fail(f"{option} {text!r}: choose from {', '.join(allowed)} (comma-separated)")
    return list(dict.fromkeys(names))


def _dtypes(text: str) -> list[str]:
    from gemmbench import dtypes  # not at --help

    return _choices("--dtype", text, dtypes.NAMES)


def _scalings(text: Optional[str], dtype_names: list[str]) -> list[str]:
    """--scaling as names in dtypes.SCALINGS (None: the default, per tensor)."""
    from gemmbench import dtypes  # not at --help

    return _fp8_only("--scaling", text, dtype_names, dtypes.NAMES_SCALING, dtypes.REFERENCE_SCALING)


def _fp8_accums(text: Optional[str], dtype_names: list[str]) -> list[str]:
    """--fp8-accum as names in dtypes.FP8_ACCUMS (None: the default, precise)."""
    from gemmbench import dtypes  # not at --help

    return _fp8_only("--fp8-accum", text, dtype_names, dtypes.FP8_ACCUMS, dtypes.REFERENCE_FP8_ACCUM)


def _fp8_only(option: str, text: Optional[str], dtype_names: list[str], names, default: str) -> list[str]:
    """An fp8-only option's names (None: its default).  Given where no fp8 dtype is asked, it is one line and exit 2:
    nothing it names could run."""
    from gemmbench import dtypes  # not at --help

    if text is None:
        return [default]
    chosen = _choices(option, text, names)
    if not any(dtypes.get(d).scaled for d in dtype_names):
        raise fail(f"{option} {text!r} applies to fp8 only, and --dtype {','.join(dtype_names)} asks for none "
                   "(add fp8 to --dtype)")  # fmt: skip
    return chosen


def _degrees(option: str, text: str, example: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise fail(f"{option} {text!r}: give positive integers, comma-separated (e.g. {example})")
    return list(dict.fromkeys(values))


def _tp_list(text: str) -> list[int]:
    return _degrees("--tp", text, "8 or 1,2,4,8")


def _ep_list(text: str) -> list[int]:
    return _degrees("--ep", text, "8 or 1,8")


def _dp_list(text: str) -> list[int]:
    return _degrees("--dp", text, "8 or 1,8")


@dataclass(frozen=True)
class Deployment:
    """The parallelism options of a sweep as lists (--tp, --dp, --ep) and the one --layout."""

    tps: tuple[int, ...] = (1,)
    dps: tuple[int, ...] = (1,)
    eps: tuple[int, ...] = (1,)
    layout: str = "vllm"


def deployment(tp: str, dp: str, ep: str, layout: LayoutChoice | str) -> Deployment:
    return Deployment(tuple(_tp_list(tp)), tuple(_dp_list(dp)), tuple(_ep_list(ep)), str(layout))


def _problems(
    sset, dtypes, m_values, dep: Deployment, routings: list[str], scalings=("tensor",), fp8_accums=("precise",)
) -> list:
    """Every (TP, DP, EP, routing) expansion of the set, each GEMM in every dtype and (fp8) scaling and accumulation
    contract; a GEMM that
    neither EP nor the routing changes once per (TP, DP).  Of the lists' combinations, those the layout's engine
    cannot run (EP against TP x DP) are left out with a line on stderr; ShapeError (one line) when that leaves none,
    and where a GEMM does not divide."""
    from gemmbench.models.sharding import problems  # not at --help (yaml)

    out, seen = [], set()
    for t, d, e in combinations(sset, dep):
        for r in routings:
            for p in problems(sset, dtypes, m_values, t, r, e, scalings, d, dep.layout, fp8_accums):
                if p not in seen:  # a dense GEMM is the same problem at every EP and routing
                    seen.add(p)
                    out.append(p)
    return out


def combinations(sset, dep: Deployment) -> list[tuple[int, int, int]]:
    """The (TP, DP, EP) of the lists that the layout's engine can run on the set; the others are named on stderr, one
    line.  ShapeError with the first refusal when none is left."""
    from gemmbench.models.sharding import Parallel, check  # not at --help (yaml)
    from gemmbench.shapes import ShapeError

    combos, refused = [], []
    for t in dep.tps:
        for d in dep.dps:
            for e in dep.eps:
                try:
                    check(Parallel(t, d, e, dep.layout), sset.name, any(g.is_moe for g in sset.gemms))
                    combos.append((t, d, e))
                except ShapeError as exc:
                    refused.append(str(exc))
    if not combos:
        raise ShapeError(refused[0])
    if refused:
        err.print(escape(f"left out {len(refused)} of the --tp/--dp/--ep combinations: {'; '.join(refused)}"),
                  highlight=False, soft_wrap=True)  # fmt: skip
    return combos


def warn_about(sset) -> None:
    """A shape set's warnings (gemmbench.shapes.ShapeSet.warnings), one line each on stderr."""
    for line in sset.warnings:
        err.print(escape(f"warning: {line}"), highlight=False, soft_wrap=True)


def _load_plugins(plugins: list[Path]) -> None:
    from gemmbench import registry  # not at --help (yaml, importlib.metadata)

    for p in plugins:
        registry.load_plugin(p)


def select_cells(
    shapes: str,
    variants: Optional[str],
    dtype: str,
    m: Optional[str],
    routing: str,
    seed: int,
    plugin: Optional[list[Path]],
    dep: Deployment = Deployment(),
    scaling: Optional[str] = None,
    fp8_accum: Optional[str] = None,
) -> tuple:
    """The selection options `run` and `profile` share -> (shape set, [(problem, [variant names])]).
    A cell is a problem and a variant made for its kind (dense/MoE) and dtype; a variant that lacks the problem's
    scaling or fp8 accumulation is a cell too (its skipped row names those it has), unless no variant has it: one
    line, exit 2."""
    from gemmbench import registry
    from gemmbench import shapes as shapes_mod
    from gemmbench.measure.inputs import ROUTINGS
    from gemmbench.models import shape_sets  # not at --help; inputs imports torch, shape_sets yaml

    dtype_names = _dtypes(dtype)
    scalings = _scalings(scaling, dtype_names)
    accums = _fp8_accums(fp8_accum, dtype_names)
    routings = _choices("--routing", routing, ROUTINGS)
    if not 0 <= seed < 2**31:
        raise fail(f"--seed must be in 0 .. 2**31 - 1, got {seed}")
    if variants is not None and not variants.strip(" ,"):
        raise fail("--variants is empty (give globs such as 'triton_*,cublas_fp8')")
    try:
        sset = shape_sets.load(shapes)
        warn_about(sset)
        m_values = shapes_mod.parse_m_list(m) if m is not None else None
        problems = _problems(sset, dtype_names, m_values, dep, routings, scalings, accums)
        _load_plugins(plugin or [])
        chosen = registry.select(variants)
    except (shapes_mod.ShapeError, registry.RegistryError) as exc:
        raise fail(str(exc)) from None
    runs_a_scaling(chosen, scalings, dtype_names)
    runs_an_fp8_accum(chosen, accums, dtype_names, scalings)
    cells = [(p, [v.name for v in chosen if p.dtype in v.dtypes and v.moe == p.is_moe]) for p in problems]
    uncovered = sorted({f"{p.gemm} {p.dtype}" for p, names in cells if not names})
    cells = [(p, names) for p, names in cells if names]
    if not cells:
        raise fail(f"no selected variant runs {sset.name} in {dtype} (see `gemmbench list variants`)")
    if uncovered:  # nothing may disappear silently: these problems have no cell at all
        err.print(
            escape(f"warning: no selected variant runs {', '.join(uncovered)}; those problems are left out"),
            highlight=False,
        )
    return sset, cells


def runs_a_scaling(chosen: list, scalings: list[str], dtype_names: list[str]) -> None:
    """One line and exit 2 where no chosen fp8 variant runs any fp8 scaling asked: every fp8 cell would be skipped.
    Where some scaling has a variant, the sweep runs, and the cells of a variant without theirs are skipped rows
    that name the scalings it has."""
    from gemmbench import dtypes  # not at --help

    fp8 = [v for v in chosen if any(dtypes.get(d).scaled for d in v.dtypes)]
    if not fp8 or not any(dtypes.get(d).scaled for d in dtype_names):
        return
    if not any(name in v.scalings for v in fp8 for name in scalings):
        have = sorted({s for v in fp8 for s in v.scalings})
        raise fail(f"--scaling {','.join(scalings)}: no selected fp8 variant runs it (they declare "
                   f"{', '.join(have)}; see `gemmbench list variants`)")  # fmt: skip


def runs_an_fp8_accum(chosen: list, accums: list[str], dtype_names: list[str], scalings=("tensor",)) -> None:
    """One line and exit 2 where no chosen fp8 variant runs any fp8 accumulation contract asked (runs_a_scaling's
    rule for --fp8-accum), or where only fp8 is asked, every scaling a block one and every contract fast
    (dtypes.NO_FAST_FOR_BLOCKS); where some contract has a variant, the cells of the others are skipped rows."""
    from gemmbench import dtypes  # not at --help

    fp8 = [v for v in chosen if any(dtypes.get(d).scaled for d in v.dtypes)]
    if not fp8 or not any(dtypes.get(d).scaled for d in dtype_names):
        return
    only_fp8 = all(dtypes.get(d).scaled for d in dtype_names)  # with a 16-bit dtype asked, those cells still run
    if only_fp8 and all(dtypes.fp8_accum_excluded(s, a) for s in scalings for a in accums):
        raise fail(f"--fp8-accum {','.join(accums)} --scaling {','.join(scalings)}: {dtypes.NO_FAST_FOR_BLOCKS} "
                   "(add precise to --fp8-accum)")  # fmt: skip
    if not any(name in v.fp8_accums for v in fp8 for name in accums):
        have = sorted({a for v in fp8 for a in v.fp8_accums})
        raise fail(f"--fp8-accum {','.join(accums)}: no selected fp8 variant runs it (they declare "
                   f"{', '.join(have)}; see `gemmbench list variants`)")  # fmt: skip


# Measured on a 2-core CPU machine: llama70b-attn took 8 min 51 s on the CPU path (torch's bf16/fp8 CPU matmul,
# 0.4-0.9 s per call at M=64, >= 10 samples a cell), so Llama-sized sets are refused there.  (Triton variants have
# their own limit, tuning.INTERPRETER_MAX_MACS, for sets in between.)
CPU_MAX_MACS = 1 << 26


def cpu_too_large(problems: list, set_option: str = "--shapes") -> Optional[str]:
    """The reason a set is refused on the CPU path, or None.  Advises a smaller --m only where one would fit, and
    the smoke set under the option the command has (--shapes, or layer's --model)."""
    from gemmbench.results.metrics import flops_bound  # heavy (numpy)

    worst = max(problems, key=flops_bound)
    macs = flops_bound(worst) // 2
    if macs <= CPU_MAX_MACS:
        return None
    smaller = flops_bound(worst.with_(M=1)) // 2 <= CPU_MAX_MACS
    return (f"{worst.shape_set} is too large for the CPU path ({worst.gemm} M={worst.M}: {macs:.2g} multiply-adds, "
            f"limit {CPU_MAX_MACS:.2g}): run it on a GPU{', choose smaller --m' if smaller else ''}, or try "
            f"{set_option} smoke")  # fmt: skip


WATCHDOG_FLOOR_S = 300.0  # compiling a Triton kernel or drawing DeepSeek-V3's experts stays well inside this


def watchdog(cell_timeout: Optional[float], budget: float = 0.5, factor: float = 1.0) -> Optional[float]:
    """--cell-timeout in seconds for the pool (None: no limit); the default max(300, 20 x budget), times `factor`
    (a profiler's replays make every phase slower)."""
    if cell_timeout is None:
        return max(WATCHDOG_FLOOR_S, 20 * budget) * factor
    if not 0 <= cell_timeout < float("inf"):
        raise fail(f"--cell-timeout must be a number of seconds >= 0 (0: no limit), got {cell_timeout}")
    return cell_timeout or None


def positive_budget(budget: float) -> float:
    if not budget > 0 or budget == float("inf"):
        raise fail(f"--budget must be a positive number of seconds, got {budget}")
    return budget


def shard_option(shard: Optional[str]) -> Optional[tuple[int, int]]:
    from gemmbench.results import shard as shard_mod  # not at --help (hashlib)

    try:
        return shard_mod.parse(shard) if shard is not None else None
    except shard_mod.ShardError as exc:
        raise fail(str(exc)) from None


def gpus_option(gpus: Optional[str]) -> Optional[list[int]]:
    """--gpus as GPU indices (None when not given); one line when this machine has none or not those."""
    import torch  # heavy

    if gpus is None:
        return None
    try:
        return parse_gpus(gpus, torch.cuda.device_count() if torch.cuda.is_available() else 0)
    except PoolError as exc:
        raise fail(str(exc)) from None


def refuse_existing(paths: list[Path], force: bool) -> None:
    """Results already written are never replaced without --force: one line naming the first that exists."""
    there = [p for p in paths if p.exists()]
    if there and not force:
        more = f" (and {len(there) - 1} more)" if len(there) > 1 else ""
        raise fail(f"--out: {there[0]} exists{more}; --force replaces it")


_HELD: dict = {}  # the lock files this process holds, open until it ends (a command run again in it holds them)


def lock_output(path: Path) -> None:
    """One writer per results file: a second gemmbench writing the same file at the same time is refused in one
    line (the lock is a hidden file beside it, `.NAME.lock`, held until this process ends)."""
    import fcntl  # POSIX; the commands that write results run where the GPUs are

    lock = path.with_name(f".{path.name}.lock").resolve()
    if lock in _HELD:
        return
    handle = open(lock, "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        who = handle.read().strip() or "another process"
        handle.close()
        raise fail(f"--out {path}: gemmbench {who} is writing it now; wait for it, or give another --out") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}")
    handle.flush()
    if not _HELD:
        atexit.register(release_locks)
    _HELD[lock] = handle


def release_locks() -> None:
    """The locks this process holds, let go (at exit, or before it dies by a signal).  The files stay: one removed
    while another process waits on it would let two writers in."""
    for handle in _HELD.values():
        handle.close()
    _HELD.clear()


def output_path(out: Path, run_id: str) -> Path:
    """A run's Parquet path (`out` itself when it ends in .parquet), its folder made and writable, before any
    cell runs."""
    import tempfile

    path = out if out.suffix == ".parquet" else out / f"{run_id}.parquet"
    if path.is_dir():
        raise fail(f"--out {out}: is a folder; give a folder without the .parquet suffix, or a file path")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise fail(f"--out {out}: cannot create the folder ({exc.strerror})") from None
    try:  # a file made and removed: the only sure test (os.access says yes to root, and /proc refuses anyway)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".gemmbench-probe-"):
            pass
    except OSError as exc:
        raise fail(f"--out {out}: cannot write in {path.parent} ({exc.strerror or exc})") from None
    return path
