"""What a non-editable install ships: kernels/ and shapes/ inside the gemmbench namespace (never a
top-level `kernels`, a name an unrelated PyPI package owns), and third-party variants found through
the `gemmbench.variants` entry-point group."""

import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)]
    if importlib.util.find_spec("setuptools"):
        cmd.insert(5, "--no-build-isolation")  # faster, and offline, when setuptools is already here
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    (whl,) = out.glob("gemmbench-*.whl")
    return zipfile.ZipFile(whl)


def test_wheel_ships_kernels_and_shapes_inside_the_gemmbench_namespace(wheel):
    names = set(wheel.namelist())
    for f in (
        "gemmbench/kernels/__init__.py",
        "gemmbench/kernels/dense_dp.py",
        "gemmbench/kernels/schedules.py",
        "gemmbench/kernels/cublas.py",
        "gemmbench/shapesets/llama70b-attn.yaml",
        "gemmbench/shapesets/smoke.yaml",
        "gemmbench/kernels/configs/NVIDIA_H100_80GB_HBM3/triton_splitk_atomic/N=1280,K=8192,dtype=fp8.json",
        "gemmbench/cli/__init__.py",
        "gemmbench/plot/style.py",
        "gemmbench/profile/ncu.py",
        "gemmbench/__main__.py",
    ):
        assert f in names, f
    assert not [n for n in names if n.startswith(("kernels/", "shapes/", "tests/"))]
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "gemmbench = gemmbench.cli:main" in wheel.read(entry_points).decode()


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
