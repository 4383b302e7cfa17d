#!/usr/bin/env python3
"""Write the built-in model sets gemmbench/shapesets/<name>.yaml from their configs tests/fixtures/hf-configs/<name>.json.

    python3 scripts/make-model-sets.py           # (re)write them
    python3 scripts/make-model-sets.py --check   # exit 1, naming each set that differs from what its config makes

The YAML is gemmbench.models.hf_config's, word for word (tests/test_hf_config.py regenerates each set and compares), so a
set and its config cannot drift: change the fixture or the code, then run this.
"""

from __future__ import annotations

import sys
from pathlib import Path

from gemmbench.models.hf_config import from_hf_config

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = "tests/fixtures/hf-configs"  # relative to ROOT, as it is written in each set's header and description
# set name = fixture name; the other fixtures (llama3-70b, mixtral-8x7b, qwen1.5-moe-a2.7b, deepseek-v2-lite) are test
# configs only: hand-written built-ins cover the first two
MODEL_SETS = (
    "deepseek-v3",
    "qwen3-30b-a3b",
    "qwen3-235b-a22b",
    "llama4-scout",
    "llama4-maverick",
    "gpt-oss-120b",
    "llama3-405b",
    "qwen2.5-72b",
)
NOTE = "# Written by scripts/make-model-sets.py from its config: edit the config or gemmbench/models/hf_config.py, not this file\n"


def render(name: str) -> str:
    """The text of gemmbench/shapesets/<name>.yaml."""
    source = f"{FIXTURES}/{name}.json"
    _, text = from_hf_config(ROOT / source, name=name, source=source)
    return NOTE + text


def main(argv: list[str]) -> int:
    check = argv == ["--check"]
    if argv and not check:
        print("usage: make-model-sets.py [--check]", file=sys.stderr)
        return 2
    stale = []
    for name in MODEL_SETS:
        path, text = ROOT / "gemmbench" / "shapesets" / f"{name}.yaml", render(name)
        if check:
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            path.write_text(text, encoding="utf-8")
    if stale:
        print(f"out of date with their configs: {', '.join(stale)} (run scripts/make-model-sets.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
