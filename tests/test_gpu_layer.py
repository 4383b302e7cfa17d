"""GPU tests of `gemmbench layer` (marker `gpu`; skipped without CUDA): a captured layer replays to the same outputs
as its eager launches, MoE routing included, and a variant that cannot be captured is named while its eager time is
still measured.  No timing is asserted."""

import pytest
import torch

pytestmark = pytest.mark.gpu


def _steps(model, M, dtype, tp, variants):
    from gemmbench.engine import layer_plan as P
    from gemmbench.measure.device import detect

    sset = P.resolve_model(model)
    return P.steps_for(P.layer_problems(sset, M, dtype, tp), P.chooser(variants, detect()))


@pytest.mark.parametrize(
    "model,variants,dtype",
    [
        ("llama3-70b", "triton_splitk_atomic", "fp8"),  # atomics: equal within the check's tolerance, not bitwise
        ("llama3-70b", "cublas_*", "bf16"),
        ("mixtral-8x7b", "triton_dp_col,triton_moe_splitk", "bf16"),  # the routing step inside the graph
    ],
)
def test_graph_replay_equals_eager(model, variants, dtype):
    from gemmbench.engine import layer

    steps = _steps(model, 16, dtype, 8, variants)
    copies = [layer.build(steps, seed, "cuda") for seed in (0, 1)]  # two layers back to back in one graph
    assert all(c["ok"] for c in layer.check(copies[0])), layer.check(copies[0])
    fns = [b.fn for c in copies for b in c]
    replay, why, worst = layer._capture(copies, fns)
    assert replay is not None, why
    assert worst is not None and worst <= 2e-2
    m = layer.measure(copies, 0.05, "test")
    assert m.graph and m.eager and m.graph_reason is None
    assert len(m.kernel_samples) == len(steps)


def test_uncapturable_variant_is_named_and_eager_still_timed():
    from gemmbench.engine import layer

    steps = _steps("mixtral-8x7b", 4, "bf16", 8, "cublas_*,torch_moe_loop")
    copies = [layer.build(steps, 0, "cuda")]
    m = layer.measure(copies, 0.05, "test")
    assert m.graph is None
    assert "torch_moe_loop (moe_w13)" in m.graph_reason and "torch_moe_loop (moe_w2)" in m.graph_reason
    assert len(m.eager) >= 10 and min(m.eager) > 0


def test_layer_command_on_gpu(tmp_path):
    from typer.testing import CliRunner

    from gemmbench.cli import app
    from gemmbench.results import side_tables

    out = tmp_path / "l.parquet"
    res = CliRunner().invoke(
        app,
        [
            "layer",
            "--model",
            "llama3-70b",
            "--tp",
            "8",
            "--m",
            "1,16",
            "--dtype",
            "fp8",
            "--variants",
            "triton_splitk_atomic",
            "--budget",
            "0.1",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    df = side_tables.load_layer_tables([out])
    top = df[df["part"] == "layer"]
    assert list(top["M"]) == [1, 16] and (top["status"] == "ok").all()
    assert top["graph_us"].notna().all() and top["graph_speedup"].notna().all()
    assert (df[df["part"] == "step"].groupby("M").size() == 4).all()
    torch.cuda.empty_cache()
