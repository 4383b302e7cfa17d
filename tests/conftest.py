"""Shared test setup.  TRITON_INTERPRET must be set before any @triton.jit decorates a function
(it is read then), so it is set here, before the kernels are imported, when there is no GPU.

No test writes outside its temporary folders: the folders gemmbench writes to on its own (the user's tuned configs
and baselines, the ceilings cache) are set here to a folder of this process, for every test and every worker
process it starts, before anything reads them; unconditionally, so that a GEMMBENCH_CONFIG_DIR exported around
the tests (scripts/device-run.sh points it at gemmbench/kernels/configs for its tunes) is never written by one."""

import atexit
import compileall
import contextlib
import fcntl
import importlib.util
import os
import shutil
import sys
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

TEST_GPUS_ENV = "GEMMBENCH_TEST_GPUS"  # e.g. "0,1": pytest-xdist's workers spread over these GPUs


def worker_gpu(worker: str, gpus: str) -> str:
    """The GPU of an xdist worker ("gw5") among a comma-separated list ("0,1"): round robin, gw5 -> "1"."""
    ids = [g.strip() for g in gpus.split(",") if g.strip()]
    return ids[int(worker.removeprefix("gw")) % len(ids)]


# before torch starts CUDA: one machine's GPUs share a run (`pytest -m gpu -n 16` with GEMMBENCH_TEST_GPUS=0,1)
if os.environ.get(TEST_GPUS_ENV) and os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["CUDA_VISIBLE_DEVICES"] = worker_gpu(os.environ["PYTEST_XDIST_WORKER"], os.environ[TEST_GPUS_ENV])

try:
    import torch

    HAS_CUDA = torch.cuda.is_available()
except ImportError:  # pragma: no cover - torch is a dependency
    HAS_CUDA = False

if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

_OWN = tempfile.mkdtemp(prefix="gemmbench-tests-")
atexit.register(shutil.rmtree, _OWN, ignore_errors=True)
os.environ.update(
    GEMMBENCH_CONFIG_DIR=os.path.join(_OWN, "configs"),
    GEMMBENCH_BASELINE_DIR=os.path.join(_OWN, "baselines"),
    GEMMBENCH_CACHE=os.path.join(_OWN, "cache"),
    # platformdirs' defaults, for the tests that unset the two above (Linux: XDG; tests/test_locations.py)
    XDG_CONFIG_HOME=os.path.join(_OWN, "xdg-config"),
    XDG_DATA_HOME=os.path.join(_OWN, "xdg-data"),
)

PLUGINS = Path(__file__).parent / "plugins"
# synthetic rows' time: no real run's (which day never matters to a test; which of two rows is newer may)
EPOCH = datetime(2000, 1, 1, tzinfo=timezone.utc)


def stamp(**delta) -> str:
    """A synthetic row's timestamp: EPOCH + timedelta(**delta) in ISO 8601, as the run writer writes one."""
    return (EPOCH + timedelta(**delta)).isoformat()


TIMESTAMP = stamp()


# GPU tests in pytest-xdist's workers share the GPU, except those marked exclusive_gpu (they compare times, which
# another process's kernels would stretch, or need memory another would take): one of those waits for the others to
# let go and keeps new ones off.  The gate is taken first by every test, so that a waiting exclusive test is not
# passed by new shared ones.  Each test hands its worker's cached GPU memory back before it lets go: an idle worker's
# allocator cache would otherwise hold what the exclusive test needs.
# The columns every producer of a run row fills (engine/rows.cell_row, then the sink), as a synthetic row of a test
# has them unless it says otherwise: store.normalize_row refuses a row that leaves one out.
FILLED = dict(ep=1, dp=1, layout="vllm", process=0, inputs="randn", timing_mode="cold", timestamp=TIMESTAMP)
# a dtype's scaling and fp8 accumulation where a test names only the dtype (dtypes.REFERENCE_SCALING, and fp8's
# default contract): the values a run of that dtype stores
DTYPE_DEFAULTS = {"fp8": ("tensor", "precise"), "bf16": ("none", "none"), "fp16": ("none", "none"),
                  "fp32": ("tensor", "none")}  # fmt: skip


def run_row(**cols) -> dict:
    """A synthetic run row: `cols` over FILLED, with the dtype's scaling and accumulation where not given."""
    row = {**FILLED, **cols}
    scaling, accum = DTYPE_DEFAULTS.get(row.get("dtype"), (None, None))
    row.setdefault("scaling", scaling)
    row.setdefault("fp8_accum", accum)
    return row


_GPU_TAG = os.environ.get("CUDA_VISIBLE_DEVICES", "all").replace(",", "-")  # one gate and lock per GPU
_GPU_GATE = Path(tempfile.gettempdir()) / f"gemmbench-gpu-tests-{_GPU_TAG}.gate"
_GPU_LOCK = Path(tempfile.gettempdir()) / f"gemmbench-gpu-tests-{_GPU_TAG}.lock"


def compile_the_package() -> None:
    """The package's bytecode, written once before the tests start: the suite starts about a hundred Python processes
    (workers, the CLI), and where the environment forbids writing bytecode (PYTHONDONTWRITEBYTECODE) each would
    compile every module it imports from source."""
    spec = importlib.util.find_spec("gemmbench")
    if sys.dont_write_bytecode and spec is not None and spec.origin is not None:
        compileall.compile_dir(Path(spec.origin).parent, quiet=2)  # a read-only install is left as it is


def pytest_configure(config):
    """`-n 2` steals work (xdist's worksteal): a worker that runs out of tests takes some of the other's, so a long test
    near the end of one worker's share does not leave the other core idle.  Set here, not in addopts, so that pytest
    without xdist (a GPU machine with only the `gpu` extra) still runs; an explicit --dist is kept."""
    compile_the_package()
    if (
        config.pluginmanager.hasplugin("xdist")
        and config.getoption("dist") == "load"
        and "--dist" not in " ".join(config.invocation_params.args)
    ):
        config.option.dist = "worksteal"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Around each GPU test's setup, call and teardown (its module's fixtures too): the GPU's shared or exclusive
    lock."""
    if not HAS_CUDA or "gpu" not in item.keywords:
        yield
        return
    exclusive = "exclusive_gpu" in item.keywords
    with open(_GPU_GATE, "a") as gate, open(_GPU_LOCK, "a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX)
        fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        if not exclusive:
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            torch.cuda.empty_cache()
            fcntl.flock(lock, fcntl.LOCK_UN)
            fcntl.flock(gate, fcntl.LOCK_UN)


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run `pytest -m gpu` on the GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


class TaskContext:
    """What time_task.work sees of its worker, in this process: the run's timer, the results collected, a failure
    raised (tests/test_memory.py on the CPU, tests/test_gpu_memory.py on the GPU)."""

    def __init__(self, timing: str, devname: str, timer):
        from types import SimpleNamespace

        from gemmbench.measure import device

        self.args = SimpleNamespace(timing=timing, inputs="randn")
        self.dev, self.devname, self.provenance, self.ceilings = device.detect(), devname, {}, None
        self.timer, self.rows = timer, {}

    def begin(self, item, phase):
        pass

    def result(self, item, rows=None, passed=False):
        self.rows[item] = rows

    def failed(self, item, rows_for, phase, exc):
        raise AssertionError(f"{item} failed in {phase}: {exc}")


@pytest.fixture
def fresh_probe():
    """telemetry.probe caches one NVML probe per uuid and process (NVML opened once): each test using a fake pynvml
    starts and ends without one."""
    from gemmbench.measure import telemetry

    telemetry.probe.cache_clear()
    yield
    telemetry.probe.cache_clear()


@contextlib.contextmanager
def _variants_kept():
    """The registered variants and imported plugin modules as they were before, restored after: a test that loads a
    plugin in this process (`invoke(..., --plugin ...)`) would otherwise leave its variants registered, and a later
    test's default run would take them as its own and hand their names to worker processes that never loaded them."""
    from gemmbench import registry

    registry.all_variants()  # the built-ins first: they are imported once per process, never registered again
    variants = dict(registry._VARIANTS)
    modules = {name for name in sys.modules if name.startswith("gemmbench_plugin_")}
    yield
    registry._VARIANTS.clear()
    registry._VARIANTS.update(variants)
    for name in [name for name in sys.modules if name.startswith("gemmbench_plugin_") and name not in modules]:
        del sys.modules[name]


@pytest.fixture(autouse=True, scope="module")
def registry_as_the_module_found():
    """What a module's fixtures register (a module-scoped run with --plugin) ends with the module."""
    with _variants_kept():
        yield


@pytest.fixture(autouse=True)
def registry_as_the_test_found():
    """What a test registers ends with the test."""
    with _variants_kept():
        yield


# The sweep many tests only need a finished run file of (to resume, append to, save or compare): run once per xdist
# worker and copied into each test's folder, since every run starts a worker process (seconds of importing torch).
SMOKE_RUN_ARGS = ("run", "--shapes", "smoke", "--dtype", "fp16", "--m", "1", "--variants", "cublas_fp16", "--budget",
                  "0.01")  # fmt: skip
PINNED_SHA = "0123456789ab"  # the build a resuming test pins, so that this run's rows are that build's


@pytest.fixture(scope="session")
def smoke_run_file(tmp_path_factory) -> Path:
    """SMOKE_RUN_ARGS's run file (3 ok rows), made under GEMMBENCH_GIT_SHA=PINNED_SHA; never to be changed."""
    from typer.testing import CliRunner

    from gemmbench.cli import app
    from gemmbench.measure import device

    out = tmp_path_factory.mktemp("smoke-run") / "r.parquet"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GEMMBENCH_GIT_SHA", PINNED_SHA)
        for cached in (device.git_sha, device.provenance):
            cached.cache_clear()
        try:
            res = CliRunner().invoke(app, [*SMOKE_RUN_ARGS, "--out", str(out)])
        finally:
            for cached in (device.git_sha, device.provenance):  # the pin ends with this run
                cached.cache_clear()
    assert res.exit_code == 0, res.stderr
    out.chmod(0o444)
    return out


@pytest.fixture
def smoke_run(smoke_run_file, tmp_path) -> Path:
    """A copy of SMOKE_RUN_ARGS's run file in the test's folder, as if the test had run it there."""
    out = tmp_path / "r.parquet"
    shutil.copyfile(smoke_run_file, out)
    return out


@pytest.fixture(scope="session")
def smoke_layer_json(tmp_path_factory):
    """`layer --model smoke --m 1 --budget 0.01 --format json` (a worker process and every step's default variants
    measured: seconds), once per xdist worker for the tests that read its document and its file: (the result, the
    layer file)."""
    from typer.testing import CliRunner

    from gemmbench.cli import app

    out = tmp_path_factory.mktemp("smoke-layer") / "l.parquet"
    args = ["layer", "--model", "smoke", "--m", "1", "--budget", "0.01", "--format", "json", "--out", str(out)]
    res = CliRunner().invoke(app, args)
    return res, out
