"""The command line (Typer): one module per command, each an adapter (parse, validate, call, print) over the engine;
common.py: the app, the consoles, the one-line errors, the option parsers; options.py: the options several commands
take, each in its --help panel.  The commands are registered here, in the order `gemmbench --help` lists them.

`gemmbench --help` imports every module of this package and what they import at their top, so a command imports
what only it needs inside its functions: the heavy modules (torch, triton, pandas, matplotlib, numpy, and the
gemmbench modules that import them) and the lighter ones --help does without (yaml through shapes, registry and tuning,
hashlib through shard, sqlite3 through profile.nsys, rich.progress, the dtype table), those marked `# not at --help`."""

import sys

from rich.markup import escape

from gemmbench.cli import ceilings, compare, layer, list, merge, plot, profile, run, shapes, signals, tune
from gemmbench.cli.common import app, err
from gemmbench.results.run_file import release_locks

app.command()(run.run)
app.command()(tune.tune)
app.command()(profile.profile)
app.command()(layer.layer)
app.command()(plot.plot)
app.command()(plot.report)
app.command()(compare.compare)
app.add_typer(compare.baseline_app, name="baseline")
app.command()(merge.merge)
app.command()(ceilings.ceilings)
app.add_typer(list.list_app, name="list")
app.add_typer(shapes.shapes_app, name="shapes")


GPU_STACK = ("torch", "triton", "nvtx", "pynvml")  # the `gpu` extra's modules (pynvml: nvidia-ml-py)


def main() -> None:
    signals.install()
    try:
        app()
    except ModuleNotFoundError as exc:  # a command that runs kernels, on an install that only reads results
        if (exc.name or "").split(".")[0] not in GPU_STACK:
            raise
        command = " ".join(sys.argv[1:2]) or "this command"
        err.print("[bold red]error:[/] " + escape(f"gemmbench {command} needs {exc.name} (the `gpu` extra: pip install "
                  "'gemmbench[gpu]'); plot, report, compare, merge, baseline and list shapes run without it"),
                  highlight=False, soft_wrap=True)  # fmt: skip
        sys.exit(2)
    finally:
        release_locks()  # before a signal ends the process (no atexit then)
        signals.end_by_signal()
