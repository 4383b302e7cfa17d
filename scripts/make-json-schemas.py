#!/usr/bin/env python3
"""Write gemmbench/cli/schemas/<kind>-<version>.schema.json, the JSON Schema of every `--format json` document, from
the pydantic models of gemmbench/json_schemas.py.

    python3 scripts/make-json-schemas.py           # (re)write the schema files
    python3 scripts/make-json-schemas.py --check   # exit 1 naming the first file that differs from what the models make

The files ship with the package (package data of gemmbench.cli), so a reader of a document can validate it without
pydantic; tests/test_json_schemas.py checks the files against the models and every document the CLI prints against
its file.  Change a document's builder, then its model, then run this.  Needs pydantic (the `test` extra).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "gemmbench" / "cli" / "schemas"
SUFFIX = ".schema.json"
COMMAND = "python3 scripts/make-json-schemas.py"

if str(ROOT) not in sys.path:  # the models of this checkout, whatever gemmbench is installed
    sys.path.insert(0, str(ROOT))

from gemmbench.json_schemas import MODELS, json_schema  # noqa: E402  (after the path: this checkout's)


def file_name(name: str) -> str:
    """ "gemmbench.run/1" -> "run-1.schema.json"."""
    kind, version = name.removeprefix("gemmbench.").split("/")
    return f"{kind}-{version}{SUFFIX}"


def render() -> dict[Path, str]:
    """Every schema file's path and text: sorted keys, indent 2, a trailing newline."""
    return {
        FOLDER / file_name(name): json.dumps(json_schema(name), sort_keys=True, indent=2, ensure_ascii=False) + "\n"
        for name in sorted(MODELS)
    }


def stale(made: dict[Path, str]) -> list[Path]:
    """Schema files in the folder that no model makes any more (a document kind removed or renamed)."""
    return sorted(p for p in FOLDER.glob(f"*{SUFFIX}") if p not in made)


def first_difference(made: dict[Path, str]) -> Path | None:
    """The first file (in name order) that is missing, differs from what the models make, or is made by none."""
    for path in sorted(set(made) | set(stale(made))):
        if not path.is_file() or path.read_text(encoding="utf-8") != made.get(path):
            return path
    return None


def main(argv: list[str]) -> int:
    check = argv == ["--check"]
    if argv and not check:
        print("usage: make-json-schemas.py [--check]", file=sys.stderr)
        return 2
    made = render()
    if check:
        differs = first_difference(made)
        if differs is None:
            return 0
        why = ("is made by no model" if differs not in made else "is missing" if not differs.is_file()
               else "differs from what gemmbench/json_schemas.py makes")  # fmt: skip
        print(f"{differs.relative_to(ROOT)} {why}: run {COMMAND}", file=sys.stderr)
        return 1
    FOLDER.mkdir(exist_ok=True)
    for path in stale(made):
        path.unlink()
    for path, text in made.items():
        path.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
