"""Which build of gemmbench is running: the commit of its own checkout, the one a wheel was built from, or, for a
copy of the source without either, a hash of its package files.  Pure standard library: setup.py loads this file to
write the commit into a distribution (no torch at build time)."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path
from typing import Optional

BUILD_FILE = "_build_commit.txt"  # in the package of a wheel or an sdist: the commit it was built from
# git's variables that point it at another repository than the one around the folder it runs in: gemmbench's own
# commit is that of its own folder, whatever the environment says
GIT_REDIRECTS = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_COMMON_DIR")
FILES_PREFIX = "files."  # a build known by its files' hash (files_hash), not by a commit


def _git(src: Path, *args: str) -> Optional[str]:
    env = {k: v for k, v in os.environ.items() if k not in GIT_REDIRECTS}
    try:
        out = subprocess.run(["git", *args], cwd=src, capture_output=True, text=True, timeout=10, env=env)
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


def files_hash(package: Path) -> str:
    """ "files.<12 hex>": a hash of the package's files (their paths and bytes, compiled files left out), which names
    a copy of the source that has no .git and no commit written into it: two copies that differ are two builds."""
    digest = hashlib.sha256()
    for f in sorted(p for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        if f.suffix in (".pyc", ".pyo"):
            continue
        digest.update(f.relative_to(package).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return FILES_PREFIX + digest.hexdigest()[:12]


def build_commit(package: Path) -> str:
    """The package's own checkout's commit, else the one written into its distribution at build time, else the hash
    of its files (files_hash)."""
    found = checkout_commit(package.parent)
    if found:
        return found
    built = package / BUILD_FILE
    written = built.read_text().strip() if built.is_file() else ""
    return written or files_hash(package)
