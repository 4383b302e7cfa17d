"""Every line of the README's tour, run as written from the top of a checkout on the CPU path (CI's machine): each ends
with exit 0 or the exit the README and docs document for a machine without a GPU, in one line and never a traceback.
Where a line needs a GPU, the smoke set then stands in for it, so that the lines after it have rows to read.  The
checkout is this one's tracked top-level entries, linked into a fresh folder: what a clone holds, and nothing a user
wrote."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
import torch
from test_cli import invoke, ok_rows

ROOT = Path(__file__).parent.parent
CONFIG = ROOT / "tests" / "fixtures" / "hf-configs" / "qwen3-30b-a3b.json"

# the README's line (its first words) -> (exit code on a CPU-only machine, a phrase of its one-line error, the smoke
# line run after it so that the tour's later lines have rows: of a few variants, since they need rows, not every
# kernel's seconds in Triton's interpreter, and the layer on a small budget, since its timing is not read)
STAND_IN_RUN = "run --shapes smoke --m 1 --dtype fp16 --variants cublas_fp16,triton_dp_row,torch_moe_loop"
STAND_IN_LAYER = "layer --model smoke --m 1 --variants cublas_*,torch_moe_loop --budget 0.01"
CPU = {
    "list shapes": (0, None, None),
    "list configs": (0, None, None),
    "run --shapes deepseek-v3": (0, None, None),  # the dry run: nothing runs
    "run --shapes llama70b-attn": (2, "too large for the CPU path", STAND_IN_RUN),
    "plot results/": (0, None, None),
    "report results/": (0, None, None),
    # the shipped baseline is an H100's, cold; the CPU path's rows are wall times: compare refuses, and says why
    "compare h100 results/": (2, "refusing to compare", None),
    "layer --model llama3-70b": (2, "too large for the CPU path", STAND_IN_LAYER),
    "profile --ncu": (1, "needs a CUDA GPU", None),
    "shapes from-config": (0, None, None),
}


def tour() -> list[str]:
    """The tour's command lines, as the README prints them (comments dropped)."""
    text = (ROOT / "README.md").read_text()
    block = text.split("## A one-minute tour", 1)[1].split("```", 2)[1]
    return [re.sub(r"\s+#.*$", "", ln).strip() for ln in block.splitlines() if ln.startswith("gemmbench ")]


def checkout(into: Path) -> Path:
    """A folder that looks like a fresh clone from its top: a link to each tracked top-level entry of this checkout
    (an installed copy without git: the folder stays empty)."""
    if (ROOT / ".git").exists():
        tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
        for name in sorted({ln.split("/", 1)[0] for ln in tracked.splitlines() if ln}):
            (into / name).symlink_to(ROOT / name)
    return into


def expected(line: str) -> tuple:
    keys = [k for k in CPU if line.startswith(f"gemmbench {k}")]
    assert len(keys) == 1, f"a README tour line this test does not know: {line!r} (add it to CPU)"
    return CPU[keys[0]]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU path's exits: CI's machine has no GPU")
def test_every_line_of_the_readme_tour_runs_in_a_fresh_checkout(tmp_path, monkeypatch):
    monkeypatch.chdir(checkout(tmp_path))
    lines = tour()
    assert len(lines) == len(CPU)  # every documented line is run, and none is left over
    for line in lines:
        code, phrase, stand_in = expected(line)
        args = shlex.split(line)[1:]
        if args[:2] == ["shapes", "from-config"]:
            args[2] = str(CONFIG)  # the README's placeholder path
        res = invoke(*args)
        assert res.exit_code == code, f"{line}: exit {res.exit_code}\n{res.stderr[-2000:]}"
        assert "Traceback" not in res.stderr + res.stdout, line
        if phrase:
            errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
            assert len(errors) == 1 and phrase in " ".join(res.stderr.split()), f"{line}: {res.stderr[-2000:]}"
        if stand_in:
            res = invoke(*shlex.split(stand_in))
            assert res.exit_code == 0, f"{stand_in}: {res.stderr[-2000:]}"
    ok_rows(tmp_path / "results")  # the runs' and the layer's: exit 0 is not enough
    assert list((tmp_path / "results" / "layers").glob("*.parquet"))
    assert list((tmp_path / "plots").iterdir()) and (tmp_path / "my-model.yaml").is_file()
    assert list((tmp_path / "report").glob("*.html"))
