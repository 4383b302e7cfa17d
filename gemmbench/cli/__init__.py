"""The command line (Typer): one module per command, each an adapter (parse, validate, call, print) over the
engine; common.py holds the app, the consoles, the one-line errors and the option parsers they share.  The commands
are registered here, in the order `gemmbench --help` lists them.

`gemmbench --help` imports every module of this package and what they import at their top, so a command imports
what only it needs inside its functions: the heavy modules (torch, triton, pandas, matplotlib, numpy, and the
gemmbench modules that import them) and the lighter ones --help does without (yaml through shapes, registry and tuning,
hashlib through shard, sqlite3 through profile.nsys, rich.progress, the dtype table), those marked `# not at --help`."""

from gemmbench.cli import ceilings, compare, layer, list, merge, plot, profile, run, shapes, signals, tune
from gemmbench.cli.common import app

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


def main() -> None:
    signals.install()
    try:
        app()
    finally:
        signals.end_by_signal()
