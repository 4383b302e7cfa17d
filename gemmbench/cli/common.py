"""The command line (Typer).  Parses, validates, calls one function; measures nothing itself.
Tables go to stdout; progress, banners and warnings to stderr; a bad input is one line on stderr
and exit code 2, never a traceback."""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup

from gemmbench.engine.plan import PlanError
from gemmbench.engine.pool import PoolError, parse_gpus
from gemmbench.results.run_file import RunFileError

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
        except (PlanError, RunFileError) as exc:  # the plan or the results file refused: the same one line
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
