"""The variant registry (select, get, register, unsupported_reason, plugins) and the end-of-run tables.

The registry is global to the process: every variant registered here has a unique name (uuid), and
none starts with a built-in prefix, so no test sees another's variants through a glob it uses."""

from __future__ import annotations

import sys
import uuid

import pytest
from conftest import HAS_CUDA, PLUGINS
from rich.console import Console

from gemmbench import registry
from gemmbench.measure.device import DeviceInfo, detect
from gemmbench.registry import Launch, RegistryError, Variant
from gemmbench.results.tables import gemm_tables, speedups
from gemmbench.shapes import Problem

CUBLAS = ["cublas_bf16", "cublas_fp16", "cublas_fp8", "cublas_fp8_rowwise"]
BUILTINS = CUBLAS + ["triton_dp_row", "triton_dp_col", "triton_dp_grouped", "torch_moe_loop"]
CPU = DeviceInfo(kind="cpu", name="test-cpu")
DENSE = Problem("s", "g", 16, 64, 32, "fp16")
MOE = Problem("s", "moe", 16, 64, 32, "fp16", E=4, topk=2)


def uniq(prefix: str = "regtest") -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def variant(name=None, dtypes=("fp16",), moe=False, supports=None, source="test_registry.py") -> Variant:
    return Variant(
        name or uniq(),
        "test",
        dtypes,
        "a test variant",
        lambda p, i: Launch(fn=lambda: None),
        supports=supports,
        moe=moe,
        source=source,
    )


def names(vs) -> list[str]:
    return [v.name for v in vs]


# ---------------------------------------------------------------- select / get


def test_builtins_are_registered_in_order():
    assert names(registry.all_variants())[:8] == BUILTINS
    assert all(v.source == "builtin" for v in registry.all_variants()[:8])


def test_select_glob():
    assert names(registry.select("cublas_*")) == CUBLAS + [
        "cublas_fp8_block"
    ]  # registered last: gemmbench/kernels/__init__
    assert names(registry.select("triton_dp_[rc]*")) == ["triton_dp_row", "triton_dp_col"]
    assert names(registry.select("cublas_fp?")) == ["cublas_fp8"]


def test_select_comma_list_keeps_registration_order_and_drops_duplicates():
    assert names(registry.select("torch_moe_loop,cublas_fp16")) == ["cublas_fp16", "torch_moe_loop"]
    assert names(registry.select("triton_dp_grouped,triton_dp_*,cublas_fp16,cublas_fp16")) == [
        "cublas_fp16",
        "triton_dp_row",
        "triton_dp_col",
        "triton_dp_grouped",
    ]
    assert names(registry.select(" cublas_fp8 , triton_dp_row ,")) == ["cublas_fp8", "triton_dp_row"]


def test_select_nothing_means_every_default_variant():
    """The default: the baselines and one variant per family (README, "Which variants run"), in registration order."""
    everything = names(registry.all_variants())
    per_family = {"triton_dp_grouped", "triton_splitk_atomic", "triton_splitk_atomic_rowwise", "triton_persistent",
                  "triton_streamk", "triton_moe_col", "torch_moe_loop"}  # fmt: skip
    # a plugin's variants (another test's, registered in this process) run by default too
    defaults = [v.name for v in registry.all_variants()
                if v.source != "builtin" or v.name.startswith("cublas_") or v.name in per_family]  # fmt: skip
    assert names(registry.select(None)) == defaults
    assert names(registry.select("")) == defaults
    assert names(registry.select("*")) == everything  # a glob that matches it names it


def test_select_is_case_sensitive_and_names_the_glob_that_matched_nothing():
    with pytest.raises(RegistryError, match=r"'nomatch' matches no variant"):
        registry.select("nomatch")
    # one bad glob among good ones is still an error, naming that glob
    with pytest.raises(RegistryError, match=r"'triton_nope\*' matches no variant"):
        registry.select("cublas_*,triton_nope*")
    with pytest.raises(RegistryError, match=r"'CUBLAS_\*'"):
        registry.select("CUBLAS_*")


def test_select_sees_new_registrations_in_registration_order():
    a, b = variant(uniq("regsel")), variant(uniq("regsel"))
    registry.register(a)
    registry.register(b)
    assert registry.select(f"{b.name},{a.name}") == [a, b]
    assert names(registry.all_variants())[-2:] == [a.name, b.name]


def test_get():
    v = registry.get("cublas_fp16")
    assert (v.name, v.family, v.dtypes, v.moe) == ("cublas_fp16", "cublas", ("fp16",), False)
    assert registry.get("torch_moe_loop").moe is True
    with pytest.raises(RegistryError, match=r"unknown variant 'no_such_variant'"):
        registry.get("no_such_variant")
    with pytest.raises(RegistryError):
        registry.get("cublas_*")  # get() takes a name, not a glob


# ---------------------------------------------------------------- register


def test_register_duplicate_names_both_sources():
    name = uniq()
    first = registry.register(variant(name, source="first_plugin.py"))
    with pytest.raises(RegistryError) as exc:
        registry.register(variant(name, source="second_plugin.py"))
    msg = str(exc.value)
    assert repr(name) in msg and "second_plugin.py" in msg and "first_plugin.py" in msg
    assert registry.get(name) is first  # the first registration stays
    assert names(registry.all_variants()).count(name) == 1


def test_register_cannot_shadow_a_builtin():
    with pytest.raises(RegistryError, match=r"'cublas_fp16' from mine\.py is already registered by builtin"):
        registry.register(variant("cublas_fp16", source="mine.py"))
    assert registry.get("cublas_fp16").source == "builtin"


# ---------------------------------------------------------------- unsupported_reason


def test_unsupported_reason_wrong_dtype():
    v = variant(dtypes=("fp16", "fp8"))
    reason = v.unsupported_reason(DENSE.with_(dtype="bf16"), CPU)
    assert reason == f"{v.name} has no bf16 path (dtypes: fp16, fp8)"
    assert v.unsupported_reason(DENSE.with_(dtype="fp8"), CPU) is None


def test_unsupported_reason_dense_vs_moe():
    dense, moe = variant(), variant(moe=True)
    assert dense.unsupported_reason(MOE, CPU) == f"{dense.name} does not run MoE GEMMs"
    assert moe.unsupported_reason(DENSE, CPU) == f"{moe.name} does not run dense GEMMs"
    assert dense.unsupported_reason(DENSE, CPU) is None
    assert moe.unsupported_reason(MOE, CPU) is None
    assert "does not run dense GEMMs" in registry.get("torch_moe_loop").unsupported_reason(DENSE, CPU)
    assert "does not run MoE GEMMs" in registry.get("cublas_fp16").unsupported_reason(MOE, CPU)


def test_unsupported_reason_passes_supports_through():
    seen = []

    def supports(problem, device):
        seen.append((problem, device))
        return "needs N divisible by 128" if problem.N % 128 else None

    v = variant(supports=supports)
    assert v.unsupported_reason(DENSE, CPU) == "needs N divisible by 128"
    assert v.unsupported_reason(DENSE.with_(N=256), CPU) is None
    assert seen == [(DENSE, CPU), (DENSE.with_(N=256), CPU)]
    # the dtype and kind checks come first: supports() is not asked about what cannot run anyway
    assert v.unsupported_reason(DENSE.with_(dtype="bf16"), CPU).endswith("has no bf16 path (dtypes: fp16)")
    assert v.unsupported_reason(MOE, CPU).endswith("does not run MoE GEMMs")
    assert len(seen) == 2


@pytest.mark.skipif(HAS_CUDA, reason="the interpreter's reason is for the CPU path")
def test_builtin_supports_reason_on_the_cpu():
    reason = registry.get("triton_dp_row").unsupported_reason(DENSE.with_(dtype="bf16"), detect())
    assert reason is not None and "bf16" in reason and "interpreter" in reason
    assert registry.get("triton_dp_row").unsupported_reason(DENSE, detect()) is None
    reason = registry.get("cublas_fp8").unsupported_reason(DENSE.with_(dtype="fp8", N=72), detect())
    assert reason == "torch._scaled_mm needs N and K divisible by 16 (N=72, K=32)"


# ---------------------------------------------------------------- load_plugin


def plugin_source(*variant_names: str, tail: str = "") -> str:
    lines = ["from gemmbench.registry import Launch, Variant, register", ""]
    for n in variant_names:
        lines.append(
            f"register(Variant({n!r}, 'plugintest', ('fp16',), 'from a test plugin', "
            f"lambda p, i: Launch(fn=lambda: None), source=__file__))"
        )
    return "\n".join(lines + [tail, ""])


def plugin_modules(stem: str) -> list[str]:
    return [m for m in sys.modules if m.startswith(f"gemmbench_plugin_{stem}_")]


def test_load_plugin_missing_file(tmp_path):
    with pytest.raises(RegistryError, match=r"plugin file not found: .*absent_plugin\.py"):
        registry.load_plugin(tmp_path / "absent_plugin.py")
    with pytest.raises(RegistryError, match="^plugin folder .* holds no .py file$"):
        registry.load_plugin(tmp_path)  # an empty folder: nothing to load


def test_load_plugin_folder_loads_each_py_file_and_names_each_variants_file(tmp_path):
    a, b = uniq("fa"), uniq("fb")
    # neither passes source=: the file that registered the variant is its source all the same
    (tmp_path / "a.py").write_text(plugin_source(a).replace(", source=__file__", ""))
    (tmp_path / "b.py").write_text(plugin_source(b).replace(", source=__file__", ""))
    (tmp_path / "notes.txt").write_text("not a plugin")
    registry.load_plugin(tmp_path)
    assert registry.get(a).source == str(tmp_path / "a.py") and registry.get(b).source == str(tmp_path / "b.py")
    dup = tmp_path / "dup" / "mine.py"
    dup.parent.mkdir()
    dup.write_text(plugin_source(a).replace(", source=__file__", ""))
    with pytest.raises(RegistryError) as e:
        registry.load_plugin(dup)
    assert (
        str(e.value) == f"variant '{a}' from {dup} is already registered by {tmp_path / 'a.py'} (give it another name)"
    )


@pytest.mark.parametrize(
    "body,error",
    [
        ("import gemmbench_no_such_module_xyz\n", "ModuleNotFoundError"),
        ("raise ImportError('needs cutlass')\n", "ImportError: needs cutlass"),
        ("undefined_name_in_plugin + 1\n", "NameError"),
        ("def broken(:\n", "SyntaxError"),
    ],
)
def test_load_plugin_that_fails_to_import(tmp_path, body, error):
    stem = uniq("badplugin")
    path = tmp_path / f"{stem}.py"
    path.write_text(body)
    with pytest.raises(RegistryError) as exc:
        registry.load_plugin(path)
    msg = str(exc.value)
    assert f"{stem}.py" in msg and "failed to import" in msg and error in msg, msg
    assert "\n" not in msg
    assert plugin_modules(stem) == []  # not left half-imported
    with pytest.raises(RegistryError, match="failed to import"):  # and not treated as loaded next time
        registry.load_plugin(str(path))


def test_load_plugin_registers_once(tmp_path):
    name = uniq("plug")
    path = tmp_path / f"{uniq('plugin')}.py"
    path.write_text(plugin_source(name))
    registry.load_plugin(path)
    registry.load_plugin(path)  # a second load is a no-op, not a duplicate registration
    registry.load_plugin(str(path))  # also when given as a string
    v = registry.get(name)
    assert v.source == str(path) and v.family == "plugintest"
    assert names(registry.all_variants()).count(name) == 1
    assert len(plugin_modules(path.stem)) == 1


def test_load_plugins_with_the_same_file_name_in_two_folders(tmp_path):
    a, b = uniq("plug"), uniq("plug")
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    (tmp_path / "one" / "my_kernels.py").write_text(plugin_source(a))
    (tmp_path / "two" / "my_kernels.py").write_text(plugin_source(b))
    registry.load_plugin(tmp_path / "one" / "my_kernels.py")
    registry.load_plugin(tmp_path / "two" / "my_kernels.py")
    assert registry.get(a).source.endswith("one/my_kernels.py")
    assert registry.get(b).source.endswith("two/my_kernels.py")


def test_load_plugin_with_a_duplicate_name_fails_every_time(tmp_path):
    """A plugin whose register() raised is not loaded: loading it again must fail again, not pass silently."""
    path = tmp_path / f"{uniq('dupplugin')}.py"
    path.write_text(plugin_source("cublas_fp16"))
    for _ in range(2):
        with pytest.raises(RegistryError, match=r"'cublas_fp16' from .*dupplugin.* is already registered by builtin"):
            registry.load_plugin(path)
    assert registry.get("cublas_fp16").source == "builtin"


def test_crash_plugin_loads():
    registry.load_plugin(PLUGINS / "crash_plugin.py")
    v = registry.get("test_crash")
    assert v.family == "test" and v.dtypes == ("fp16", "fp8", "bf16") and not v.moe
    assert v.source.endswith("crash_plugin.py")


# ---------------------------------------------------------------- tables


def row(variant, status="ok", time=None, M=16, dtype="fp16", gemm="g", E=1, reason=None, **extra):
    r = dict(
        gemm=gemm,
        M=M,
        N=64,
        K=32,
        E=E,
        topk=2 if E > 1 else 1,
        tp=1,
        dtype=dtype,
        variant=variant,
        status=status,
        time_us_median=time,
        reason=reason,
        tflops=None,
        gbps=None,
        pct_of_roofline=None,
        timing_mode="wall",
        l2_state="warm",
        flops=2 * M * 64 * 32,
    )
    r.update(extra)
    return r


def test_speedups_only_from_ok_rows_against_an_ok_baseline():
    base = row("cublas_fp16", time=10.0)
    fast = row("triton_dp_row", time=5.0)
    wrong = row("test_wrong", "wrong", reason="off")
    wrong_timed = row("test_wrong2", "wrong", time=1.0, reason="off")  # a time on a wrong row changes nothing
    skipped = row("triton_dp_col", "skipped", reason="no")
    error = row("test_crash", "error", reason="worker died")
    # M=32: the baseline itself is wrong, so nothing at that M gets a speedup
    bad_base = row("cublas_fp16", "wrong", time=10.0, M=32, reason="off")
    orphan = row("triton_dp_row", time=5.0, M=32)
    # fp8 rows compare with cublas_fp8 only, never with the fp16 baseline at the same M
    fp8_base = row("cublas_fp8", time=8.0, dtype="fp8")
    fp8 = row("triton_dp_row", time=2.0, dtype="fp8")
    fp8_alone = row("triton_dp_row", time=2.0, dtype="fp8", M=64)
    # MoE rows compare with torch_moe_loop of their own gemm
    moe_base = row("torch_moe_loop", time=30.0, gemm="moe", E=4)
    moe = row("fused_moe", time=10.0, gemm="moe", E=4)
    other_gemm = row("triton_dp_row", time=5.0, gemm="other")
    align = row("moe_align", time=3.0, gemm="moe", E=4, flops=None)  # not a GEMM: never a speedup
    rows = [
        base,
        fast,
        wrong,
        wrong_timed,
        skipped,
        error,
        bad_base,
        orphan,
        fp8_base,
        fp8,
        fp8_alone,
        moe_base,
        moe,
        other_gemm,
        align,
    ]
    sp = speedups(rows)
    assert sp == {id(base): 1.0, id(fast): 2.0, id(fp8_base): 1.0, id(fp8): 4.0, id(moe_base): 1.0, id(moe): 3.0}


def test_gemm_tables_render_rows_with_missing_metrics():
    reason = "160 of 160 outputs off by more than 0.002 of max|ref|; worst at [0,21]"
    rows = [
        row("cublas_fp16", time=10.0, tflops=0.5, gbps=12.0),
        row("triton_dp_row", time=5.0),  # ok without tflops, gbps, % roofline
        row("test_wrong", "wrong", reason=reason, max_rel_err=0.5),
        row("triton_dp_col", "skipped", reason=None),
        row("test_crash", "error", reason="check: worker died ([/x] killed by signal 9)"),
        row("torch_moe_loop", time=30.0, gemm="smoke_moe", E=4),
    ]
    tables = gemm_tables(rows)
    assert [t.title for t in tables] == ["g  N=64 K=32", "smoke_moe  N=64 K=32, E=4 top2"]
    console = Console(record=True, width=250, color_system=None)
    for t in tables:
        console.print(t)
    out = console.export_text()
    lines = {ln.split("│")[3].strip(): ln for ln in out.splitlines() if ln.count("│") > 3}
    assert f"wrong: {reason}" in lines["test_wrong"]
    assert "error: check: worker died ([/x] killed by signal 9)" in lines["test_crash"]
    assert "skipped:" in lines["triton_dp_col"]
    assert "2.00x" in lines["* triton_dp_row"] and "5.00" in lines["* triton_dp_row"]
    assert "1.00x" in lines["cublas_fp16"] and "10.00" in lines["cublas_fp16"]
    assert "x" not in lines["test_wrong"].split("│")[9]  # no speedup for a wrong row
    assert "1.00x" in lines["* torch_moe_loop"]


def test_a_make_that_returns_no_launch_is_named_with_its_plugin(tmp_path):
    from gemmbench.measure.check import CellError, check_cell
    from gemmbench.measure.inputs import make_inputs
    from gemmbench.shapes import Problem

    name = uniq("nolaunch")
    path = tmp_path / f"{name}.py"
    path.write_text(f"from gemmbench.registry import Variant, register\nregister(Variant({name!r}, 't', ('fp16',), "
                    "'forgets its Launch', lambda p, i: None))\n")  # fmt: skip
    registry.load_plugin(path)
    p = Problem("s", "g", 2, 8, 8, "fp16")
    with pytest.raises(CellError) as e:
        check_cell(p, registry.get(name), make_inputs(p, 0, "cpu"))
    assert e.value.phase == "make"
    assert str(e.value.exc) == f"{name}.make() ({path}) returned NoneType, not a gemmbench.registry.Launch"


def test_a_worker_that_died_silently_says_so():
    from gemmbench.engine.worker_process import exit_hint

    assert exit_hint("", 1) == "exit code 1: it printed nothing"
    assert exit_hint("loading\nRuntimeError: out of memory\n", -9) == "killed by signal 9: RuntimeError: out of memory"


def test_a_lost_cells_row_names_the_gpu_it_ran_on(monkeypatch):
    from gemmbench.engine.tasks import time_task
    from gemmbench.measure import device
    from gemmbench.shapes import Problem

    asked: list = []
    monkeypatch.setattr(device, "provenance", lambda index=0: asked.append(index) or {"gpu_uuid": f"GPU-{index}"})
    from gemmbench.engine.worker_process import WorkerOptions

    worker = WorkerOptions(timing="cold", inputs="ones")
    row = time_task.error_row(Problem("s", "g", 1, 8, 8, "fp16"), "cublas_fp16", "worker died", worker, gpu=1)
    assert asked == [1] and row["gpu_uuid"] == "GPU-1"  # the worker's GPU under --gpus, not this process's GPU 0
    # the same columns as a worker's own rows: the cell's, its outcome, how and on what it was timed
    assert (row["status"], row["reason"], row["timing_mode"], row["l2_state"], row["inputs"]) == (
        "error", "worker died", "cold", "cold", "ones")  # fmt: skip


def test_the_compilers_report_is_kept_in_the_config_and_not_compared():
    """Launch.resources: registers and spills go into the row's config under "ptxas" once the kernel ran, and a
    comparison of two rows' configs reads past them (a new compiler is not a new config)."""
    import json

    from gemmbench.registry import Launch
    from gemmbench.results.compare import kernel_config

    ran = []
    launch = Launch(fn=lambda: ran.append(1), config={"BLOCK_M": 64},
                    resources=lambda: {"registers": 168, "spills": 0} if ran else None)  # fmt: skip
    assert launch.config == {"BLOCK_M": 64}  # before the first launch there is no report
    launch.fn()
    assert launch.config == {"BLOCK_M": 64, "ptxas": {"registers": 168, "spills": 0}}
    assert kernel_config(json.dumps(launch.config)) == {"BLOCK_M": 64}


def test_a_plugin_loaded_inside_a_test_is_gone_after_it(tmp_path):
    """conftest's restore around each test and module: the plugin's variant and module are gone after it, and a later
    load imports the file afresh (registered again, not skipped as already imported)."""
    from conftest import _variants_kept

    name = uniq("kept")
    path = tmp_path / f"{uniq('plugin')}.py"
    path.write_text(plugin_source(name))
    before = names(registry.all_variants())
    for _ in range(2):
        with _variants_kept():
            registry.load_plugin(path)
            assert registry.get(name).source == str(path)
        assert names(registry.all_variants()) == before and plugin_modules(path.stem) == []
