"""What a non-editable install ships and does, built and installed the way a user gets it: the sdist built from a
copy of the tracked tree (never inside the source tree), the wheel built from that sdist, installed with --no-deps
into a fresh virtualenv and run from an unrelated folder with an empty home: gemmbench/kernels/ and gemmbench/shapesets/ inside the
gemmbench namespace (never a top-level `kernels`, a name an unrelated PyPI package owns), the shipped baselines and
configs found, `--version`; an sdist that holds what its own tests read; third-party variants found through the
`gemmbench.variants` entry-point group.  One build and one install serve the whole module: each takes seconds on
the 2-core CPU machine, and the sdist's own tests as long again."""

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
JUNK = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", "*.pyc", ".pytest_cache")


# what the unpacked sdist runs of its own tests against the installed wheel: the search paths and --version (the
# package's own folders), the CI files (.github, .ci) against the shipped baseline, and the parsers of the committed
# Nsight Compute exports (tests/fixtures)
SDIST_TESTS = (
    "tests/test_locations.py",
    "tests/test_workflow.py",
    "tests/test_profile.py::test_parse_fixture_kernels_and_units",
    "tests/test_profile.py::test_real_base_units_export_of_a_two_kernel_cell",
)


def _source_copy(dest: Path) -> Path:
    """The tree as a release is built from it: the files git tracks or would (a checkout), or the tree less build
    junk (an unpacked sdist, which has no .git)."""
    tracked = _tracked(new_files=True)
    if tracked is None:
        shutil.copytree(ROOT, dest, ignore=JUNK)
        return dest
    for name in tracked:
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, dest / name)
    return dest


def _tracked(new_files: bool = False) -> "list[str] | None":
    """The files git tracks (None outside a checkout); new_files: and the new files it does not ignore, which the
    next commit may hold (a file just written is built with before its `git add`)."""
    if not (ROOT / ".git").exists():
        return None
    cmd = ["git", "ls-files", "-z", "--cached", *(["--others", "--exclude-standard"] if new_files else [])]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [n for n in out.split("\0") if n and (ROOT / n).is_file()]  # a file deleted but not yet committed: gone


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """The sdist, then the wheel built from the unpacked sdist (`python -m build`'s default), both in a temporary
    folder; without isolation: the `test` extra installs setuptools and build, so it runs offline."""
    tmp = tmp_path_factory.mktemp("build")
    src = _source_copy(tmp / "src")
    proc = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(tmp / "dist"), str(src)],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return tmp / "dist"


@pytest.fixture(scope="module")
def wheel(dist) -> zipfile.ZipFile:
    (whl,) = dist.glob("gemmbench-*.whl")
    return zipfile.ZipFile(whl)


@pytest.fixture(scope="module")
def sdist(dist) -> tarfile.TarFile:
    (tgz,) = dist.glob("gemmbench-*.tar.gz")
    return tarfile.open(tgz)


def test_wheel_holds_the_gemmbench_package_and_its_data_only(wheel):
    names = set(wheel.namelist())
    for f in (
        "gemmbench/kernels/__init__.py",
        "gemmbench/kernels/dense_dp.py",
        "gemmbench/kernels/schedules.py",
        "gemmbench/kernels/cublas.py",
        "gemmbench/shapesets/llama70b-attn.yaml",
        "gemmbench/shapesets/smoke.yaml",
        "gemmbench/kernels/configs/NVIDIA_H100_80GB_HBM3/triton_splitk_atomic/N=1280,K=8192,dtype=fp8.json",
        "gemmbench/baselines/h100.parquet",
        "gemmbench/cli/__init__.py",
        "gemmbench/plot/style.py",
        "gemmbench/profile/ncu.py",
        "gemmbench/__main__.py",
    ):
        assert f in names, f
    assert not [n for n in names if not n.startswith(("gemmbench/", "gemmbench-"))]  # no top-level kernels/, tests/
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "gemmbench = gemmbench.cli:main" in wheel.read(entry_points).decode()
    license_file = next(n for n in names if n.endswith(".dist-info/licenses/LICENSE"))
    assert wheel.read(license_file) == (ROOT / "LICENSE").read_bytes()
    metadata = wheel.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: Apache-2.0" in metadata.splitlines()


def test_sdist_holds_every_tracked_file(sdist):
    """An unpacked sdist runs its own tests: it holds every file git tracks (the tests, their plugins and fixtures,
    the committed runs and scripts they read, the workflow and .ci files they check), .gitignore aside."""
    tracked = _tracked()
    if tracked is None:
        pytest.skip("not a git checkout (an unpacked sdist): nothing to hold it against")
    (top,) = {n.split("/")[0] for n in sdist.getnames()}
    held = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    missing = sorted(set(tracked) - held - {".gitignore"})
    assert not missing, missing
    for n in ("tests/conftest.py", "tests/plugins/crash_plugin.py", "tests/fixtures/ncu-raw-h100-baseunits.csv"):
        assert n in held


def test_index_page_description_has_no_relative_image(sdist):
    """A package index shows the README without the repository beside it: each relative image link is a caption
    there (setup.py), one per image of the README, and no link is left relative."""
    (pkg_info,) = [m for m in sdist.getmembers() if m.name.count("/") == 1 and m.name.endswith("/PKG-INFO")]
    description = sdist.extractfile(pkg_info).read().decode()
    images = re.findall(r"!\[([^\]]*)\]\(([^)\s]+)\)", (ROOT / "README.md").read_text(encoding="utf-8"))
    relative = [(alt, path) for alt, path in images if not re.match(r"https?://", path)]
    assert relative, "the README's figures are the case this guards"
    assert not [p for _, p in re.findall(r"!\[([^\]]*)\]\(([^)\s]+)\)", description) if not re.match(r"https?://", p)]
    for alt, path in relative:
        assert f"*Figure: {alt} ({path} in the source distribution)*" in description


# ---------------------------------------------------------------- the wheel, installed, outside the checkout


@pytest.fixture(scope="module")
def installed(dist, tmp_path_factory) -> tuple[Path, dict]:
    """A fresh virtualenv holding the wheel (pip --no-deps) and seeing this environment's packages (torch, pandas,
    …) through a path file: the path lines are not site folders, so their .pth files (this checkout's editable
    install among them) do not run, and `import gemmbench` finds the wheel's copy.  Returns (its bin folder, the
    environment to run in: a home and XDG folders of the test, no GEMMBENCH_* folder, no PYTHONPATH)."""
    tmp = tmp_path_factory.mktemp("installed")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site_dir = next((venv / "lib").glob("python3*/site-packages"))
    outer = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    (site_dir / "outer-environment.pth").write_text("\n".join(outer) + "\n")
    (whl,) = dist.glob("gemmbench-*.whl")
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q", "--no-deps"]
    proc = subprocess.run([*pip, "--no-index", "--no-compile", str(whl)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    home = tmp / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GEMMBENCH_", "XDG_")) and k != "PYTHONPATH"}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), XDG_DATA_HOME=str(home / ".local/share"))
    (tmp / "elsewhere").mkdir()
    return venv / "bin", env


def _run(installed, *args) -> subprocess.CompletedProcess:
    """A command of the installed package, from a folder that is no checkout."""
    bin_dir, env = installed
    elsewhere = bin_dir.parent.parent / "elsewhere"
    return subprocess.run([*map(str, args)], cwd=elsewhere, env=dict(env, PATH=f"{bin_dir}{os.pathsep}{env['PATH']}"),
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def test_installed_wheel_runs_from_an_unrelated_folder(installed, dist):
    bin_dir, _ = installed
    site_dir = next((bin_dir.parent / "lib").glob("python3*/site-packages"))
    (whl,) = dist.glob("gemmbench-*.whl")
    version = whl.name.split("-")[1]  # gemmbench-<version>-py3-none-any.whl: the version the build gave it
    before = sorted(p for p in (site_dir / "gemmbench").rglob("*") if "__pycache__" not in p.parts)

    where = _run(installed, bin_dir / "python", "-c", "import gemmbench; print(gemmbench.__file__)")
    assert where.stdout.strip() == str(site_dir / "gemmbench" / "__init__.py"), where.stderr
    res = _run(installed, "gemmbench", "--version")
    assert (res.returncode, res.stdout) == (0, f"gemmbench {version}\n"), res.stderr

    res = _run(installed, "gemmbench", "list", "shapes")
    assert res.returncode == 0 and "llama70b-attn" in res.stdout and "smoke" in res.stdout, res.stderr

    # a named baseline outside a checkout: the shipped one, compared with a copy of itself under another run id
    # (every cell the same; the same run on both sides is refused)
    shipped = site_dir / "gemmbench" / "baselines" / "h100.parquet"
    copy = bin_dir.parent.parent / "elsewhere" / "candidate.parquet"
    relabel = ("import sys, pyarrow as pa, pyarrow.parquet as pq; t = pq.read_table(sys.argv[1]); "
               "i = t.column_names.index('run_id'); "
               "pq.write_table(t.set_column(i, 'run_id', pa.array(['copy'] * t.num_rows)), sys.argv[2])")  # fmt: skip
    assert _run(installed, bin_dir / "python", "-c", relabel, shipped, copy).returncode == 0
    res = _run(installed, "gemmbench", "baseline", "list")
    assert res.returncode == 0 and re.search(r"h100\s+│\s+shipped", res.stdout), res.stdout + res.stderr
    res = _run(installed, "gemmbench", "compare", "h100", copy, "--format", "markdown")
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("### gemmbench perf: ✅ no regression") and f"against `{shipped}`" in res.stdout

    # a stored config found without tuning: the committed file's bucket 16 (M = 1 … 16), from the installed package
    committed = json.loads(
        (
            ROOT / "gemmbench/kernels/configs/NVIDIA_H100_80GB_HBM3/triton_splitk_atomic/N=1280,K=8192,dtype=fp8.json"
        ).read_text()
    )
    lookup = (
        "import json; from gemmbench.configs import config_files; from gemmbench.shapes import Problem\n"
        "p = Problem('s', 'attn_qkv', 16, 1280, 8192, 'fp8', tp=8)\n"
        "config, where = config_files.stored('triton_splitk_atomic', p, 'NVIDIA H100 80GB HBM3')\n"
        "print(json.dumps([config.to_dict(), where.to_dict(), str(config_files.shipped_configs_root())]))"
    )
    res = _run(installed, bin_dir / "python", "-c", lookup)
    assert res.returncode == 0, res.stderr
    config, where, root = json.loads(res.stdout)
    expected = {"TMA": False, **committed["buckets"]["16"]["config"]}  # a file tuned before TMA loads with TMA off
    assert config == expected and root == str(site_dir / "gemmbench" / "kernels" / "configs")
    assert where == {"source": "stored", "file": "NVIDIA_H100_80GB_HBM3/triton_splitk_atomic/N=1280,K=8192,dtype=fp8.json",
                     "bucket": 16}  # fmt: skip

    after = sorted(p for p in (site_dir / "gemmbench").rglob("*") if "__pycache__" not in p.parts)
    assert after == before  # nothing written into the installed package


def test_the_unpacked_sdist_runs_its_tests_against_the_installed_wheel(installed, sdist, tmp_path):
    """Some of the sdist's own tests (SDIST_TESTS), from the unpacked sdist, importing the installed wheel: pytest
    runs from an unrelated folder, so that the sdist's gemmbench/ source is not on the path."""
    bin_dir, _ = installed
    if hasattr(tarfile, "data_filter"):  # Python 3.12, and 3.10/3.11 from their 2023 security releases
        sdist.extractall(tmp_path, filter="data")
    else:
        sdist.extractall(tmp_path)
    (src,) = tmp_path.iterdir()
    args = [str(src / t) for t in SDIST_TESTS]
    res = _run(installed, bin_dir / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", src, *args)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert re.search(r"\b\d+ passed in\b", res.stdout) and "skipped" not in res.stdout, res.stdout[-500:]
    assert not (src / "gemmbench" / "__pycache__").exists()  # the sdist's source was never imported: the wheel was


def _site_with_plugin(tmp_path: Path, body: str) -> Path:
    site = tmp_path / "site"
    dist = site / "fakeplug-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fakeplug\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[gemmbench.variants]\nfake = fakeplug\n")
    (site / "fakeplug.py").write_text(body)
    return site


def _variants_in_subprocess(site: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "from gemmbench import registry; print(sorted(v.name for v in registry.all_variants()))",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_entry_point_plugin_registers_its_variants(tmp_path):
    site = _site_with_plugin(
        tmp_path,
        (
            "from gemmbench.registry import Launch, Variant, register\n"
            "register(Variant('fake_mm', 'fake', ('fp16',), 'an installed plugin', lambda p, i: Launch(fn=lambda: None),"
            " source='fakeplug'))\n"
        ),
    )
    proc = _variants_in_subprocess(site)
    assert proc.returncode == 0, proc.stderr
    assert "'fake_mm'" in proc.stdout and "'cublas_fp8'" in proc.stdout


def test_broken_entry_point_plugin_is_named_in_the_error(tmp_path):
    site = _site_with_plugin(tmp_path, "raise ImportError('missing dependency xyz')\n")
    proc = _variants_in_subprocess(site)
    assert proc.returncode != 0
    assert "plugin entry point 'fake'" in proc.stderr and "missing dependency xyz" in proc.stderr
