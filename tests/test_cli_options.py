"""The options several commands take are declared once (gemmbench.cli.options): a flag says the same in every command
that takes it, unless its meaning differs there by design (DIFFERS says how); and `run`'s options are grouped in
--help panels."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import typer.main

from gemmbench.cli import app, options

# flags whose help differs between commands because they do another thing there
DIFFERS = {
    "--budget": "run: per cell; layer: eager + graph per layer",
    "--dtype": "plot and report filter rows (default: all); layer defaults by device",
    "--force": "compare: other timing modes; tune: the export's files; baseline save: a baseline",
    "--format": "what each command prints or writes",
    "--gpu": "plot and report filter rows by GPU; run --dry-run and list configs name the GPU asked about",
    "--m": "tune tunes each M at its bucket",
    "--name": "baseline save: a baseline's; shapes from-config: a shape set's",
    "--out": "what each command writes there",
    "--shapes": "plot and report filter rows by glob",
    "--shard": "run's parts are merged; tune's configs need no merge",
    "--tp": "plot and report filter rows (default: all)",
    "--variants": "tune: tunable ones; layer: per GEMM; plot, report: drawn; baseline save: kept",
}
PANELS = {options.WHAT, options.SHARDING, options.TIMING, options.OUTPUT, options.COMPARISON, options.ENGINE}


def _commands(cmd, path=()):
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from _commands(sub, (*path, name))
    if not getattr(cmd, "commands", None):
        yield " ".join(path), cmd


def _helps() -> dict[str, dict[str, str]]:
    """flag -> {command: its help there}, for every flag but --help."""
    out: dict[str, dict[str, str]] = defaultdict(dict)
    for path, cmd in _commands(typer.main.get_command(app)):
        for p in cmd.params:
            for flag in p.opts:
                if flag.startswith("--") and flag != "--help":
                    out[flag][path] = getattr(p, "help", None) or ""
    return out


def test_a_flag_several_commands_take_says_one_thing():
    differ = {flag: by for flag, by in _helps().items() if len(set(by.values())) > 1}
    unexplained = sorted(set(differ) - set(DIFFERS))
    assert unexplained == [], (
        "these flags say different things in different commands: declare each once in gemmbench/cli/options.py "
        f"(or say in DIFFERS why they differ): {', '.join(unexplained)}"
    )
    assert sorted(set(DIFFERS) - set(differ)) == []  # a flag unified since: out of DIFFERS


def test_run_groups_every_option_in_a_panel():
    run = typer.main.get_command(app).commands["run"]
    panels = {p.opts[0]: getattr(p, "rich_help_panel", None) for p in run.params if p.opts[0] != "--help"}
    assert {flag for flag, panel in panels.items() if panel not in PANELS} == set()
    assert set(panels.values()) == PANELS  # each panel holds some of run's options


def test_the_sweep_request_holds_every_sweep_option_of_run_once():
    """Each field of the request is an option of `run` whose default is the field's: --ab gives a baseline build
    exactly the options `run` was given, and the defaults are written in one place."""
    import dataclasses
    import inspect

    from gemmbench.cli.request import SweepRequest
    from gemmbench.cli.run import run

    params = inspect.signature(run).parameters
    for f in dataclasses.fields(SweepRequest):
        assert f.name in params, f.name
        if f.name == "shapes":  # required in both
            assert f.default is dataclasses.MISSING and params[f.name].default is inspect.Parameter.empty
            continue
        want = None if f.name in ("plugin", "import_config") else f.default  # lists: None in Typer, () here
        assert params[f.name].default == want, f.name
    request = SweepRequest(shapes="s", plugin=(Path("p.py"),), borrow=True, budget=0.3)
    words = {flag: (value, default) for flag, value, default in request.options()}
    assert words["--plugin"] == (["p.py"], []) and words["--borrow"] == (True, False)
    assert words["--budget"] == (0.3, 0.5) and words["--timing"] == ("cold", "cold")
