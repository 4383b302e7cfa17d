"""The command line (Typer).  Parses, validates, calls one function; measures nothing itself.
Tables go to stdout; progress, banners and warnings to stderr; a bad input is one line on stderr
and exit code 2, never a traceback."""

from __future__ import annotations

import atexit
import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup

from gemmbench.engine.plan import PlanError
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
        except PlanError as exc:  # the engine's plan refused the selection: the same one line
            err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
            sys.exit(2)
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


def warn(line: str) -> None:
    """A line for the user on stderr that does not stop the command (the plan's warnings); never cut at the width."""
    err.print(escape(line), highlight=False, soft_wrap=True)


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
