"""Which build of gemmbench is running: the commit of its own checkout, or the one a wheel was built from.  Pure
standard library: setup.py loads this file to write the commit into a distribution (no torch at build time)."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path
from typing import Optional

BUILD_FILE = "_build_commit.txt"  # in the package of a wheel or an sdist: the commit it was built from


def _git(src: Path, *args: str) -> Optional[str]:
    try:
        out = subprocess.run(["git", *args], cwd=src, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def checkout_commit(src: Path) -> Optional[str]:
    """The commit of gemmbench's own checkout at `src` (the folder holding the package), with "-dirty.<hash of the
    uncommitted changes>" when it has any; None where `src` is not that checkout (a package installed inside some
    other repository: git would answer for that one)."""
    top = _git(src, "rev-parse", "--show-toplevel")
    if not top or Path(top).resolve() != src.resolve() or _git(src, "ls-files", "--error-unmatch",
                                                                   "gemmbench/__init__.py") is None:  # fmt: skip
        return None
    sha = _git(src, "rev-parse", "--short=12", "HEAD")
    diff = _git(src, "diff", "HEAD", "--no-ext-diff")
    return f"{sha}-dirty.{hashlib.sha256(diff.encode()).hexdigest()[:8]}" if sha and diff else sha


def build_commit(package: Path) -> Optional[str]:
    """The package's own checkout's commit, else the one written into its distribution at build time, else None."""
    found = checkout_commit(package.parent)
    if found:
        return found
    built = package / BUILD_FILE
    return (built.read_text().strip() or None) if built.is_file() else None
