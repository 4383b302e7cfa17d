"""`gemmbench run` before any cell runs: what it refuses, each in one line (exit 2) before anything is written
(options that do not go together, results it would replace, a --resume file of another sweep, a baseline it could not
be compared with, what the CPU path cannot do), and the file it writes into (new, --append, --resume) with the sweep's
fingerprint."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from rich.markup import escape

from gemmbench.cli import ab as ab_mod
from gemmbench.cli import compare as cli_compare
from gemmbench.cli.common import err, fail
from gemmbench.engine import sweep_fingerprint
from gemmbench.engine.plan import cpu_too_large
from gemmbench.results import named_baselines
from gemmbench.results.run_file import refuse_written


def results_path(out: Optional[Path], resume: Optional[Path]) -> Path:
    """--out, or its default; a resumed run goes on in its own file, so not both."""
    if resume is not None and out is not None:
        raise fail("--resume writes into the file it resumes: give --resume or --out, not both")
    return out or Path("results")


def check_resume(resume: Optional[Path], fp: dict) -> None:
    """--resume takes only a file of this very sweep, measured the same way by this build."""
    from gemmbench.results import store

    if resume is None:
        return
    try:
        stored = sweep_fingerprint.decode(store.file_metadata(resume))
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the same one line
        raise fail(f"--resume {resume}: not a readable run file ({exc})") from None
    why = sweep_fingerprint.difference(stored, fp)
    if why:
        raise fail(f"--resume {resume}: {why}; a resumed file holds one sweep: start a new run")


def refuse_before_work(out_path: Path, append: bool, force: bool, resume: Optional[Path], compare_to) -> None:
    """Before any work: results already written are never replaced without --force; the baseline exists."""
    if compare_to:
        try:
            baseline = named_baselines.resolve(compare_to)
        except named_baselines.BaselineError as exc:
            raise fail(f"--compare-to: {exc}") from None
        if not baseline.exists():
            raise fail(f"--compare-to {compare_to!r}: no such baseline ({baseline})")
    if append and force:
        raise fail("give --append or --force, not both")
    if resume is not None and (force or append):
        raise fail(f"--resume adds to its own file: it takes no {'--force' if force else '--append'} (--force with "
                   "--out starts the run anew)")  # fmt: skip
    from gemmbench.results.store import parts_dir  # heavy (pandas)

    if resume is not None and not (resume.is_file() or parts_dir(resume).is_dir()):
        raise fail(f"--resume {resume}: no such run file")
    if resume is None and out_path.suffix == ".parquet" and not (append or force):
        refuse_written(out_path)


def check_ab(ab: Optional[str], compare_to, append: bool, resume, out_path: Path, force: bool) -> Optional[list[str]]:
    """--ab's command as argv (None without --ab), before any work."""
    if ab is None:
        return None
    if compare_to or append or resume is not None:
        raise fail("--ab compares with the baseline it runs: it takes no --compare-to, --append or --resume")
    base = ab_mod.baseline_path(out_path)
    if out_path.suffix == ".parquet" and base.exists() and not force:
        raise fail(f"--ab: the baseline file {base} exists; --force replaces it")
    try:
        return ab_mod.parse_command(ab)
    except ValueError as exc:
        raise fail(str(exc)) from None


def check_repeat(repeat: int, resume: Optional[Path]) -> None:
    if repeat < 1:
        raise fail(f"--repeat {repeat}: give a number of processes >= 1")
    if repeat > 1 and resume is not None:  # which processes of which cells are done is not what --resume tracks
        raise fail("--repeat runs whole sweeps; it cannot --resume one")


def comparable_baseline(spec: Optional[str], timing: str, inputs: str) -> None:
    """--compare-to, checked before any cell runs: the baseline exists, and this run (this GPU, or the CPU; this
    timing mode and these input values) could be compared with it."""
    import pandas as pd

    from gemmbench.measure import device
    from gemmbench.results import compare, store

    if not spec:
        return
    path = cli_compare.resolve(spec)
    try:
        base = store.load([path])
    except store.StoreError as exc:
        raise fail(f"--compare-to {spec!r}: {exc}") from None
    dev = device.detect()
    gpus = ", ".join(sorted(set(base["gpu"].dropna())))
    if dev.kind != "cuda" and gpus:
        raise fail(f"--compare-to {spec!r}: the baseline was measured on {gpus}; this run is on the CPU path (no "
                   "CUDA GPU here), so the two could not be compared")  # fmt: skip
    # the L2 state is known only per cell (stream copies that fit in L2 are warm): the mode and the values stand for it
    this = pd.DataFrame([{"timing_mode": timing, "inputs": inputs}])
    why = compare.check_comparable(base, this, ("timing_mode", "inputs"))
    if why:
        raise fail(f"--compare-to {spec!r}: this run could not be compared with it: {why}")
    stack = {k: device.provenance()[k] for k in compare.STACK}  # this run's rows will record these
    why = compare.check_stack(base, pd.DataFrame([stack]))
    if why:
        raise fail(f"--compare-to {spec!r}: this run's stack is not the baseline's: {why} (run without --compare-to "
                   "and use `gemmbench compare --allow-stack-change` to compare across stacks)")  # fmt: skip


def cpu_path(cells: list, sanitize: bool) -> bool:
    """True without CUDA, after refusing what the CPU path cannot do (before anything is written)."""
    import torch  # heavy

    if torch.cuda.is_available() or not cells:
        return not torch.cuda.is_available()
    reason = cpu_too_large([p for p, _ in cells])
    if reason:
        raise fail(f"no CUDA GPU here, so this would be the CPU path, and {reason}")
    if sanitize:
        raise fail("--sanitize needs a CUDA GPU")
    return True


def fingerprint(sset, cells, timing, inputs, budget, seed, sanitize, retune, plugins, import_config, policy) -> dict:
    """This sweep's fingerprint (gemmbench.engine.sweep_fingerprint), stored in its file for --resume to check."""
    import gemmbench
    from gemmbench.measure import device
    from gemmbench.results.shard import cell_key

    files = [Path(spec.split(":", 1)[-1]) for spec in import_config or []]  # ENGINE:FILE
    return sweep_fingerprint.fingerprint(
        (cell_key(p, n) for p, names in cells for n in names), sset.name, timing=timing, inputs=inputs, budget=budget,
        seed=seed, sanitize=sanitize, retune=retune, configs=policy.env(), plugins=sweep_fingerprint.content(plugins or []),
        imported=sweep_fingerprint.content(files), build=f"{gemmbench.__version__} {device.git_sha()}",
    )  # fmt: skip


def open_run(out_path, run_id, meta, cells, timing, append, force, resume) -> tuple:
    """run_file.open_run for this build; --resume says what it keeps and what is left."""
    import gemmbench
    from gemmbench.measure import device
    from gemmbench.results import run_file

    build = (timing, gemmbench.__version__, str(device.git_sha()))
    writer, run_id, left, kept = run_file.open_run(out_path, run_id, meta, cells, build, append, force, resume)
    if resume is not None:
        err.print(escape(f"--resume: {len(kept)} rows kept, {sum(len(n) for _, n in left)} cells to run"),
                  highlight=False)  # fmt: skip
    return writer, run_id, left
