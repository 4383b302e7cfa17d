"""Where gemmbench looks things up and writes outside a checkout: the search path of named baselines and
`baseline list`, tuned configs in the user's folder read over the shipped ones (`tune` never writes into the
package), and `--version` from the installed metadata.  The shipped folders are replaced here by folders of the
test (monkeypatched locations.shipped_*), so every file and its expected reading is made by hand."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from conftest import TIMESTAMP
from test_cli import bad, invoke, table_rows, text
from test_compare import row

from gemmbench import locations
from gemmbench.configs import config_files, tuning
from gemmbench.kernels.splitk import SplitKConfig
from gemmbench.results import named_baselines, store
from gemmbench.shapes import Problem

ROOT = Path(__file__).resolve().parent.parent
GPU = "NVIDIA Test GPU 80GB"
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="platformdirs follows XDG on Linux only")


# ---------------------------------------------------------------- named baselines


@pytest.fixture
def three_folders(tmp_path, monkeypatch):
    """A working directory with results/baselines, a user folder (GEMMBENCH_BASELINE_DIR) and a stand-in for the
    shipped one: `both` is in all three, `user_and_shipped` in the last two, each other name in one."""
    cwd, user, shipped = tmp_path / "work", tmp_path / "user", tmp_path / "shipped"
    for folder, names in (
        (cwd / "results" / "baselines", ["both", "mine"]),
        (user, ["both", "user_and_shipped", "kept"]),
        (shipped, ["both", "user_and_shipped", "h100"]),
    ):
        folder.mkdir(parents=True)
        for name in names:  # each file's one row says which folder it is in (its variant)
            store.write_rows(folder / f"{name}.parquet", [row(folder.name)])
    monkeypatch.chdir(cwd)
    monkeypatch.setenv(locations.BASELINE_DIR_ENV, str(user))
    monkeypatch.setattr(locations, "shipped_baselines_dir", lambda: shipped)
    return cwd, user, shipped


def test_a_name_resolves_through_cwd_then_user_then_shipped(three_folders):
    cwd, user, shipped = three_folders
    assert named_baselines.resolve("both") == Path("results/baselines/both.parquet")  # the working directory's
    assert named_baselines.resolve("mine") == Path("results/baselines/mine.parquet")
    assert named_baselines.resolve("user_and_shipped") == user / "user_and_shipped.parquet"
    assert named_baselines.resolve("kept") == user / "kept.parquet"
    assert named_baselines.resolve("h100") == shipped / "h100.parquet"


def test_a_path_is_used_as_it_is(three_folders, tmp_path):
    # an existing file, anything ending in .parquet or holding a /: never looked up, even when it names no file
    assert named_baselines.resolve("results/baselines/mine.parquet") == Path("results/baselines/mine.parquet")
    assert named_baselines.resolve("h100.parquet") == Path("h100.parquet")  # not the shipped h100
    assert named_baselines.resolve("some/dir") == Path("some/dir")
    (Path.cwd() / "folder").mkdir()
    assert named_baselines.resolve("folder") == Path("folder")  # an existing folder of runs


def test_an_unknown_name_lists_the_folders_searched(three_folders):
    cwd, user, shipped = three_folders
    with pytest.raises(named_baselines.BaselineError) as exc:
        named_baselines.resolve("nope")
    assert str(exc.value) == (
        f"no baseline named 'nope' (looked in ./results/baselines, {user}, {shipped}; "
        "`gemmbench baseline list` shows them)"
    )
    with pytest.raises(named_baselines.BaselineError, match="not a name"):
        named_baselines.resolve("a b")


def test_compare_by_name_uses_the_first_found(three_folders):
    """`compare NAME` reads the file the search path finds (the user's, not the shipped one of the same name): given
    that very file as the candidate, it refuses to compare a run with itself, naming the file."""
    cwd, user, shipped = three_folders
    line = bad(invoke("compare", "user_and_shipped", user / "user_and_shipped.parquet"))
    assert line == (f"error: {(user / 'user_and_shipped.parquet').resolve()} is both the baseline and the candidate: "
                    "a run compared with itself says nothing")  # fmt: skip
    line = bad(invoke("compare", "nope", user / "kept.parquet"))
    assert "no baseline named 'nope'" in line


def test_baseline_list_shows_each_name_where_it_resolved(three_folders):
    cwd, user, shipped = three_folders
    res = invoke("baseline", "list")
    assert res.exit_code == 0, res.stderr
    rows = [r for r in table_rows(res.stdout) if r[0]]  # a row's first line (a long path wraps onto more)
    # name, where: in search order (cwd, user, shipped), names sorted within a folder; a name found again later
    # on the path is marked shadowed
    assert [(r[0], r[1]) for r in rows] == [
        ("both", "cwd"),
        ("mine", "cwd"),
        ("both", "user (shadowed)"),
        ("kept", "user"),
        ("user_and_shipped", "user"),
        ("both", "shipped (shadowed)"),
        ("h100", "shipped"),
        ("user_and_shipped", "shipped (shadowed)"),
    ]
    # each file is one row() of tests/test_compare.py: its stack, its day, 1 row
    assert rows[0][2:9] == ["NVIDIA H100 80GB HBM3", "2.11.0+cu130", "3.6.0", "13.0", "580.159.04", TIMESTAMP[:10], "1"]
    assert f"8 baseline file(s); searched in order: ./results/baselines, {user}, {shipped}" in " ".join(
        text(res.stderr).split()
    )


def test_baseline_list_names_an_unreadable_file_and_goes_on(three_folders):
    cwd, user, shipped = three_folders
    (user / "broken.parquet").write_bytes(b"PAR1 not really")
    res = invoke("baseline", "list")
    assert res.exit_code == 0, res.stderr
    (broken,) = [r for r in table_rows(res.stdout) if r[0] == "broken"]
    assert (
        broken[1] == "user" and broken[2] == "" and "not a readable Parquet file" in " ".join(text(res.stdout).split())
    )


def test_baseline_list_shows_the_shipped_h100(tmp_path, monkeypatch):
    """The real shipped folder: the committed baseline and its stack (measured on the lent H100, docs/BENCHMARKS.md)."""
    stack = ["NVIDIA H100 80GB HBM3", "2.11.0+cu130", "3.6.0", "13.0", "580.159.04"]
    monkeypatch.chdir(tmp_path)
    rows = [r for r in table_rows(invoke("baseline", "list").stdout) if r[0] == "h100"]
    assert len(rows) == 1 and rows[0][1:7] == ["shipped", *stack]


@linux_only
def test_the_user_folders_default_to_platformdirs(monkeypatch, tmp_path):
    """Without the environment variables: XDG_DATA_HOME/results/baselines and XDG_CONFIG_HOME/gemmbench/configs
    (platformdirs on Linux; ~/.local/share and ~/.config where those are unset)."""
    monkeypatch.delenv(locations.BASELINE_DIR_ENV)
    monkeypatch.delenv(locations.CONFIG_DIR_ENV)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert locations.user_baselines_dir() == tmp_path / "data" / "gemmbench" / "baselines"
    assert locations.user_configs_dir() == tmp_path / "config" / "gemmbench" / "configs"
    assert config_files.configs_root() == tmp_path / "config" / "gemmbench" / "configs"


# ---------------------------------------------------------------- tuned configs: the user's over the shipped


P = Problem("s", "qkv", 16, 1280, 8192, "fp8", tp=8)
NAME = "triton_splitk_atomic"
FILE = f"NVIDIA_Test_GPU_80GB/{NAME}/N=1280,K=8192,dtype=fp8.json"


def _file(folder: Path, buckets: dict[int, int]) -> Path:
    """A stored config file by hand: bucket -> the BLOCK_N of its config (what tells the files apart)."""
    path = folder / FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"variant": NAME, "gpu": GPU, "N": 1280, "K": 8192, "dtype": "fp8", "buckets": {}}
    for bucket, bn in buckets.items():
        data["buckets"][str(bucket)] = {
            "config": SplitKConfig.tile(16, bn, 128, 4, 3, SPLIT_K=2).to_dict(),
            "time_us": 1.0,
        }
    path.write_text(json.dumps(data))
    return path


@pytest.fixture
def shipped_and_user(tmp_path, monkeypatch):
    shipped, user = tmp_path / "shipped", tmp_path / "user"
    monkeypatch.setattr(locations, "shipped_configs_dir", lambda: shipped)
    monkeypatch.setenv(locations.CONFIG_DIR_ENV, str(user))
    tuning._chosen.clear()
    yield shipped, user
    tuning._chosen.clear()


def _block_n(M: int) -> tuple[int, str]:
    """(BLOCK_N, file) of the stored config for M; the tests ask for M that are buckets of their own (1 is in
    bucket 16), so that which bucket is nearest never decides."""
    config, where = config_files.stored(NAME, P.with_(M=M), GPU, SplitKConfig)
    return config.BLOCK_N, where.file


def test_the_users_bucket_wins_and_the_shipped_buckets_stay(shipped_and_user):
    """Shipped buckets 16 and 64 (BLOCK_N 32, 64), the user's 64 and 256 (BLOCK_N 128, 256): one file of buckets
    16 (shipped), 64 (the user's), 256 (the user's).  A shipped bucket is named relative to the shipped folder, a
    user's by its full path."""
    shipped, user = shipped_and_user
    _file(shipped, {16: 32, 64: 64})
    mine = _file(user, {64: 128, 256: 256})
    assert _block_n(1) == (32, FILE)  # bucket 16: only shipped
    assert _block_n(64) == (128, str(mine))  # bucket 64: both have it, the user's wins
    assert _block_n(256) == (256, str(mine))  # only the user's


def test_shipped_configs_alone_and_user_configs_alone(shipped_and_user):
    shipped, user = shipped_and_user
    _file(shipped, {16: 32})
    assert _block_n(16) == (32, FILE)
    assert config_files.stored(NAME, P.with_(N=2560), GPU, SplitKConfig) is None  # no file of that shape in either
    (shipped / FILE).unlink()
    mine = _file(user, {16: 64})
    assert _block_n(16) == (64, str(mine))


def test_save_writes_only_the_users_file(shipped_and_user):
    """`tune` stores into the user's folder: the shipped file is neither written nor copied (its other buckets stay
    read from the package, so that an upgrade's new shipped configs reach the user)."""
    shipped, user = shipped_and_user
    before = _file(shipped, {16: 32, 64: 64}).read_bytes()
    path = config_files.save(NAME, P.with_(M=64), GPU, SplitKConfig.tile(16, 128, 128, 4, 3, SPLIT_K=2), 9.0, {})
    assert path == user / FILE and (shipped / FILE).read_bytes() == before
    assert list(json.loads(path.read_text())["buckets"]) == ["64"]  # only what was tuned
    assert _block_n(1) == (32, FILE) and _block_n(64) == (128, str(path))


def test_a_user_folder_that_is_the_shipped_one_is_read_once(shipped_and_user, monkeypatch):
    """GEMMBENCH_CONFIG_DIR=gemmbench/kernels/configs, how the project commits what it tunes: configs read from there are
    shipped ones (named relative to the folder, as the committed rows name them), and tune writes there."""
    shipped, _ = shipped_and_user
    monkeypatch.setenv(locations.CONFIG_DIR_ENV, str(shipped))
    _file(shipped, {16: 32})
    assert _block_n(1) == (32, FILE)
    assert (
        config_files.save(NAME, P.with_(M=64), GPU, SplitKConfig.tile(16, 128, 128, 4, 3, SPLIT_K=2), 9.0, {})
        == shipped / FILE
    )
    assert _block_n(64) == (128, FILE)


def test_an_unreadable_user_file_is_named(shipped_and_user):
    shipped, user = shipped_and_user
    _file(shipped, {16: 32})
    (user / FILE).parent.mkdir(parents=True)
    (user / FILE).write_text("{not json")
    with pytest.raises(tuning.TuningError, match=re.escape(str(user / FILE))):
        config_files.stored(NAME, P, GPU, SplitKConfig)


@linux_only
def test_tune_by_default_writes_under_the_users_config_folder(monkeypatch, tmp_path):
    """No GEMMBENCH_CONFIG_DIR: a stored winner lands in XDG_CONFIG_HOME/gemmbench/configs, not in the package."""
    monkeypatch.delenv(locations.CONFIG_DIR_ENV)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    shipped = config_files.shipped_configs_root()
    files_before = sorted(shipped.rglob("*.json"))
    path = config_files.save(NAME, P, GPU, SplitKConfig.tile(16, 32, 128, 4, 3, SPLIT_K=2), 1.0, {})
    assert path == tmp_path / "config" / "gemmbench" / "configs" / FILE
    assert sorted(shipped.rglob("*.json")) == files_before  # nothing new in the package


# ---------------------------------------------------------------- --version


def test_version_is_the_one_in_pyproject():
    """`gemmbench --version` and gemmbench.__version__ come from the installed metadata, which pyproject.toml's
    version wrote (the one place it is written)."""
    import gemmbench

    (version,) = re.findall(r'(?m)^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text())
    res = invoke("--version")
    assert res.exit_code == 0 and res.stdout == f"gemmbench {version}\n"
    assert gemmbench.__version__ == version
    assert f'"{version}"' not in (ROOT / "gemmbench" / "__init__.py").read_text()  # not written a second time
