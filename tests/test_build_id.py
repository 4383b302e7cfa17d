"""The build a row names is gemmbench's own: its checkout's commit, or the commit a wheel was built from; never the
repository of whatever folder the installed package sits in."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

from gemmbench import build_id
from gemmbench.measure import device

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _no_override(monkeypatch):
    monkeypatch.delenv("GEMMBENCH_GIT_SHA", raising=False)
    device.git_sha.cache_clear()
    yield
    device.git_sha.cache_clear()


def git(*args, cwd) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def test_a_checkout_names_its_head_and_a_hash_of_its_changes():
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (an unpacked source distribution)")
    head = git("rev-parse", "--short=12", "HEAD", cwd=ROOT)
    sha = device.git_sha()
    assert sha is not None and sha.split("-dirty.")[0] == head
    # uncommitted changes: "-dirty." and 8 hex digits of their diff, so two different edits are two builds
    assert ("-dirty." in sha) == bool(git("diff", "HEAD", "--no-ext-diff", cwd=ROOT))


def test_installed_inside_another_repository_it_does_not_name_that_repository(tmp_path):
    repo = tmp_path / "my-project"
    package = repo / ".venv" / "lib" / "python3.12" / "site-packages" / "gemmbench"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    git("init", "-q", cwd=repo)
    (repo / "x.txt").write_text("x")
    git("add", "x.txt", cwd=repo)
    git("-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "theirs", cwd=repo)
    # git would answer for my-project: not gemmbench's build, which is then its files' hash: the one file's path and
    # bytes, each followed by a NUL, hashed by hand here
    by_hand = "files." + hashlib.sha256(b"__init__.py\0" + b"" + b"\0").hexdigest()[:12]
    assert device.git_sha(package) == by_hand
    (package / build_id.BUILD_FILE).write_text("0123456789ab\n")  # what setup.py writes into a wheel
    device.git_sha.cache_clear()
    assert device.git_sha(package) == "0123456789ab"


def test_two_copies_without_git_are_two_builds_unless_their_files_are_the_same(tmp_path):
    """A copy of the source with no .git and no commit written into it (a tree sent to another host): the build is a
    hash of its package files, so a resumed run never mixes rows of two different sources."""
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    a, b = tmp_path / "a" / "gemmbench", tmp_path / "b" / "gemmbench"
    shutil.copytree(ROOT / "gemmbench", a, ignore=skip)
    shutil.copytree(ROOT / "gemmbench", b, ignore=skip)
    (a / build_id.BUILD_FILE).unlink(missing_ok=True)
    (b / build_id.BUILD_FILE).unlink(missing_ok=True)
    first, same = device.git_sha(a), device.git_sha(b)
    assert first.startswith("files.") and first == same
    with open(b / "shapes.py", "a") as f:
        f.write("\n# an edit\n")
    device.git_sha.cache_clear()
    assert device.git_sha(b) != first


def test_a_git_dir_in_the_environment_does_not_change_the_build(tmp_path, monkeypatch):
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (an unpacked source distribution)")
    other = tmp_path / "other"
    other.mkdir()
    git("init", "-q", cwd=other)
    (other / "x.txt").write_text("x")
    git("add", "x.txt", cwd=other)
    git("-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "theirs", cwd=other)
    head = git("rev-parse", "--short=12", "HEAD", cwd=ROOT)
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(other))
    assert device.git_sha().split("-dirty.")[0] == head
