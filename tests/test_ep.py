"""Expert parallelism (`--ep N`) on the CPU: the shapes one rank runs, its routing (local ids, -1 for other ranks'
slots), the alignment and every MoE variant on those slots (fp16 and fp8 in Triton's interpreter), the check that
compares only this rank's rows, the FLOP and byte model, the run file's `ep` column, compare's cell key, tuned
config names, the layer's routing, and bad input (exit 2, one line, nothing written).

The convention under test (docs/USAGE.md "Sharding"): E stays the model's global expert count; rank 0 holds global
experts 0 .. ceil(E/ep) - 1, which keep their ids; a slot routed to any other expert has id -1 and is not this
rank's work."""

from __future__ import annotations

import pytest
import torch
from test_cli import bad, invoke

from gemmbench import registry
from gemmbench.configs import config_files
from gemmbench.engine import layer as L
from gemmbench.engine import layer_plan as P
from gemmbench.kernels.moe_align import Alignment, check_alignment, moe_align
from gemmbench.measure.check import check_cell, compare, reference
from gemmbench.measure.device import detect
from gemmbench.measure.inputs import cell_seed, make_inputs
from gemmbench.models import shape_sets
from gemmbench.models.sharding import problems
from gemmbench.registry import Launch
from gemmbench.results import metrics, store
from gemmbench.results.compare import compare as compare_runs
from gemmbench.shapes import Problem, ShapeError

DEV = "cuda" if torch.cuda.is_available() else "cpu"
MOE_VARIANTS = [
    "triton_moe_col",
    "triton_moe_splitk",
    "triton_moe_persistent",
    "triton_moe_permuted",
    "torch_moe_loop",
    "torch_grouped_mm",
]

# attention and a shared expert (dense: every token hits it) beside two expert GEMMs of 8 experts
SET_YAML = """\
name: tiny-ep
m: [3]
gemms:
  - {id: attn_qkv, N: 96, K: 64, parallel: qkv, heads: 4, kv_heads: 1, head_dim: 16}
  - {id: shared_w13, N: 64, K: 64, parallel: column}
  - {id: moe_w13, N: 128, K: 64, parallel: column, E: 8, topk: 2}
  - {id: moe_w2, N: 64, K: 64, parallel: row, E: 8, topk: 2}
"""


@pytest.fixture(scope="module")
def tiny_set(tmp_path_factory):
    path = tmp_path_factory.mktemp("ep") / "tiny-ep.yaml"
    path.write_text(SET_YAML)
    return path


def moe(M=9, E=4, topk=2, ep=2, dtype="fp16", routing="uniform", N=32, K=32) -> Problem:
    return Problem("test", "moe", M, N, K, dtype, E=E, topk=topk, routing=routing, ep=ep)


# ---------------------------------------------------------------- 1. shapes


def test_ep_keeps_experts_whole_and_tp_divides_the_rest(tiny_set):
    sset = shape_sets.load(str(tiny_set))
    got = {p.gemm: p for p in problems(sset, ["fp16"], tp=2, ep=2)}
    # by hand from SET_YAML, vLLM's rules: TP 2 gives the QKV 4/2 query heads and its one KV head (copied): (2 + 2)
    # * 16 = 64, and halves the dense column GEMM (64 -> 32); EP 2 = TP x DP keeps every expert whole (experts' TP
    # 1: N 128, K 64 stay) and gives rank 0 8 / 2 = 4 of the E = 8 (global) experts
    want = {
        "attn_qkv": (64, 64, 1, 1, 1),
        "shared_w13": (32, 64, 1, 1, 1),
        "moe_w13": (128, 64, 8, 2, 4),
        "moe_w2": (64, 64, 8, 2, 4),
    }
    assert {g: (p.N, p.K, p.E, p.ep, p.local_experts) for g, p in got.items()} == want
    assert got["moe_w13"].label == "moe_w13 fp16 M3 N128 K64 E8 top2 tp2 ep2"
    assert got["attn_qkv"].label == "attn_qkv fp16 M3 N64 K64 tp2"  # a dense GEMM's label has no ep
    assert all("/" not in p.label for p in got.values())  # NVTX-safe
    # SGLang takes an EP between: TP 4, EP 2 splits each expert over 4 / 2 = 2 GPUs (N 64, K 32), rank 0 holds 4
    sg = {p.gemm: p for p in problems(sset, ["fp16"], tp=4, ep=2, layout="sglang")}
    assert (sg["moe_w13"].N, sg["moe_w2"].K, sg["moe_w13"].local_experts) == (64, 32, 4)


def test_ep_that_does_not_divide_the_experts_gives_rank_0_one_more(tiny_set):
    sset = shape_sets.load(str(tiny_set))
    # 8 experts over 3 ranks: vLLM's linear map gives ranks 0 and 1 three, rank 2 two (SGLang refuses it instead)
    w13 = next(p for p in problems(sset, ["fp16"], tp=1, dp=3, ep=3) if p.gemm == "moe_w13")
    assert (w13.local_experts, w13.N, w13.M) == (3, 128, 3 * 3)  # experts' TP 1 x 3 / 3 = 1; 3 DP ranks' tokens
    with pytest.raises(ShapeError, match="8 experts do not divide by --ep 3"):
        problems(sset, ["fp16"], tp=2, dp=3, ep=3, layout="sglang")


def test_ep_refusals_are_one_line(tiny_set):
    sset = shape_sets.load(str(tiny_set))
    with pytest.raises(ShapeError) as e:
        problems(sset, ["fp16"], tp=4, ep=2)
    assert str(e.value) == (
        "tiny-ep: vLLM runs experts split over all TP x DP = 4 GPUs (EP 1) or whole, one set a GPU (EP = TP x DP = 4); "
        "--ep 2 with --tp 4 --dp 1 is neither (--layout sglang takes any EP that divides TP x DP)"
    )
    with pytest.raises(ShapeError) as e:
        problems(sset, ["fp16"], tp=2, ep=4, layout="sglang")
    assert str(e.value) == "tiny-ep: --ep 4 does not divide the TP 2 x DP 1 = 2 GPUs the experts are spread over"
    with pytest.raises(ShapeError, match="^--ep must be a positive integer, got 0$"):
        problems(sset, ["fp16"], ep=0)


def test_ep_on_a_set_without_experts_is_an_error():
    sset = shape_sets.load("llama70b-attn")
    with pytest.raises(
        ShapeError, match=r"^llama70b-attn: --ep 8 needs expert GEMMs \(E > 1\), and this set has none$"
    ):
        problems(sset, ["bf16"], tp=8, ep=8)
    assert {p.ep for p in problems(sset, ["bf16"], ep=1)} == {1}


# ---------------------------------------------------------------- 2. routing


def test_local_ids_are_the_global_ids_of_rank_0_and_minus_1_elsewhere():
    glob = make_inputs(moe(ep=1), 11, DEV)  # ep 1: the ids are the global routing over E = 4
    local = make_inputs(moe(ep=2), 11, DEV)
    # rank 0 of 2 holds global experts 0 and 1 (4 / 2), which keep their ids; experts 2 and 3 are rank 1's: -1
    want = [[e if e < 2 else -1 for e in row] for row in glob.topk_ids.tolist()]
    assert local.topk_ids.tolist() == want
    assert local.topk_ids.dtype == torch.int32 and tuple(local.b.shape) == (2, 32, 32)  # the 2 local experts only
    assert torch.equal(local.topk_weights, glob.topk_weights)  # same router, same weights
    flat = [e for row in want for e in row]
    work = local.local_work()
    assert work == {
        "experts_hit": len({e for e in flat if e >= 0}),
        "pairs": sum(e >= 0 for e in flat),
        "tokens": sum(any(e >= 0 for e in row) for row in want),
    }
    assert local.experts_hit() == work["experts_hit"] and 0 < work["pairs"] < 9 * 2  # this seed: some of each


# ---------------------------------------------------------------- 3. the alignment


def test_alignment_drops_the_slots_of_other_ranks():
    ids = torch.tensor([[0, -1], [-1, 1], [1, 0]], dtype=torch.int32, device=DEV)
    a = moe_align(ids, 2, 4)
    # slots 0..5 hold experts [0, -1, -1, 1, 1, 0]: expert 0 has slots 0 and 5, expert 1 slots 3 and 4, each
    # padded to BLOCK_M = 4 with the sentinel 6 (= M * topk); slots 1 and 2 are nowhere.  Blocks: ceil((6 + 2 * 3)
    # / 4) = 3, the last past the padded count of 8
    assert a.sorted_ids.tolist() == [0, 5, 6, 6, 3, 4, 6, 6, 6, 6, 6, 6]
    assert a.block_expert.tolist() == [0, 1, -1] and int(a.num_padded) == 8
    assert check_alignment(ids, 2, a).ok
    # an alignment that computes another rank's slot 1 under expert 0 is caught by the alignment's own check
    wrong = Alignment(torch.tensor([0, 5, 1, 6, 3, 4, 6, 6] + [6] * 4, dtype=torch.int32), a.block_expert,
                      a.num_padded, 4)  # fmt: skip
    assert not check_alignment(ids, 2, wrong).ok


def test_alignment_of_a_rank_with_no_slot_has_no_block():
    ids = torch.tensor([[-1, -1]], dtype=torch.int32, device=DEV)
    a = moe_align(ids, 2, 4)
    assert int(a.num_padded) == 0 and set(a.block_expert.tolist()) == {-1} and set(a.sorted_ids.tolist()) == {2}
    assert check_alignment(ids, 2, a).ok


# ---------------------------------------------------------------- 4. every MoE variant and the check


def _seed_where(p: Problem, wanted) -> int:
    """The first seed whose routing of `p` passes `wanted(topk_ids)` (the routing is cheap: tiny, on the host)."""
    return next(s for s in range(500) if wanted(make_inputs(p, s, DEV).topk_ids))


CASES = {
    # 9 tokens, top-2 of 4 experts over 2 ranks: some slots here, some on rank 1
    "mixed": (moe(M=9), lambda ids: bool((ids >= 0).any() and (ids < 0).any())),
    # one token whose two experts are both rank 1's: nothing to compute here
    "none-local": (moe(M=1), lambda ids: bool((ids < 0).all())),
    # top-1, every token on expert 0 (one-expert routing): every slot is rank 0's
    "all-local": (moe(M=5, topk=1, routing="one-expert"), lambda ids: bool((ids >= 0).all())),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("name", MOE_VARIANTS)
def test_every_moe_variant_passes_the_check_at_ep_2(name, case):
    p, wanted = CASES[case]
    variant = registry.get(name)
    if variant.unsupported_reason(p, detect()):
        pytest.skip(variant.unsupported_reason(p, detect()))
    inputs = make_inputs(p, _seed_where(p, wanted), DEV)
    checked = check_cell(p, variant, inputs)
    assert checked.result.ok, checked.result.detail
    local = (inputs.topk_ids.reshape(-1) >= 0).cpu()
    out = checked.out.float().cpu()
    assert torch.isfinite(out[local]).all()  # every local row written
    if case == "none-local":
        assert checked.result.max_rel_err == 0.0  # nothing compared: the launch ran and wrote nothing that matters


def test_fp8_fused_moe_at_ep_2():
    p = moe(M=9, dtype="fp8", K=64)  # K 64: the interpreter's fp8 tile needs K >= 32
    inputs = make_inputs(p, _seed_where(p, CASES["mixed"][1]), DEV)
    assert tuple(inputs.b.shape) == (2, 32, 64) and tuple(inputs.b_scale.shape) == (2,)  # a scale per local expert
    checked = check_cell(p, registry.get("triton_moe_col"), inputs)
    assert checked.result.ok, checked.result.detail


class Planted:
    """torch_moe_loop, then one value written into output row `row` afterwards."""

    name = "planted"

    def __init__(self, row: int, value: float):
        self.row, self.value = row, value

    def make(self, problem, inputs) -> Launch:
        inner = registry.get("torch_moe_loop").make(problem, inputs)

        def fn():
            out = inner.fn()
            out[self.row] = self.value
            return out

        return Launch(fn=fn, out=inner.out, graph_safe=False)


def test_a_wrong_local_row_fails_and_garbage_in_another_ranks_row_passes():
    p = moe(M=9)
    inputs = make_inputs(p, _seed_where(p, CASES["mixed"][1]), DEV)
    ids = inputs.topk_ids.reshape(-1).tolist()
    local, other = ids.index(next(e for e in ids if e >= 0)), ids.index(-1)
    # outputs are O(1) ((randn + 1) / sqrt(K) operands): 1000 is off by far more than fp16's tolerance
    wrong = check_cell(p, Planted(local, 1000.0), inputs).result
    assert not wrong.ok and f"first at [{local}," in wrong.detail
    garbage = check_cell(p, Planted(other, 1000.0), inputs)
    assert garbage.result.ok, garbage.result.detail
    # ... because that row is not compared: compared, it fails
    assert not compare(p, garbage.out, reference(p, inputs)).ok


# ---------------------------------------------------------------- 5. FLOPs and bytes


def test_flops_and_bytes_min_count_this_ranks_share():
    p = Problem("t", "moe", 3, 64, 32, "fp16", E=4, topk=2, ep=2)
    work = dict(experts_hit=2, pairs=3, tokens=2)  # e.g. ids [[0, -1], [1, 0], [-1, -1]]
    # fp16: 2 bytes in and out.  weights 2 experts * 64 * 32 = 4096, activations 2 tokens * 32 = 64, outputs
    # 3 pairs * 64 = 192: 2 * (4096 + 64 + 192) = 8704
    assert metrics.bytes_min(p, **work) == 8704
    assert metrics.flops(p, 3) == 2 * 3 * 64 * 32 == 12288
    # fp8, row-wise activations: 1 byte in, bf16 out (2); scales of 4 bytes: 2 experts + 2 token rows
    # 1 * (4096 + 64) + 2 * 192 + 4 * (2 + 2) = 4560
    assert metrics.bytes_min(p.with_(dtype="fp8"), fp8_scaling="row", **work) == 4560
    assert metrics.bytes_min(p, experts_hit=0, pairs=0, tokens=0) == 0  # a rank with nothing to do
    assert metrics.flops_bound(p) == 2 * 6 * 64 * 32  # all 3 * 2 pairs here: the most a rank can get
    with pytest.raises(ValueError, match="pairs .* is required at ep > 1"):
        metrics.flops(p)
    with pytest.raises(ValueError, match="required at ep > 1"):
        metrics.bytes_min(p, 2)
    with pytest.raises(ValueError, match=r"experts_hit=3 is outside 0\.\.2"):
        metrics.bytes_min(p, 3, pairs=3, tokens=2)
    # ep 1 is unchanged: all pairs, all tokens
    p1 = p.with_(ep=1)
    assert metrics.bytes_min(p1, 3) == 2 * (3 * 64 * 32 + 3 * 32 + 6 * 64) and metrics.flops(p1) == 2 * 6 * 64 * 32


# ---------------------------------------------------------------- 6. rows, compare, stored configs


@pytest.fixture(scope="module")
def ep_run(tiny_set, tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "ep.parquet"
    res = invoke("run", "--shapes", tiny_set, "--m", "3", "--dtype", "fp16", "--tp", "2", "--ep", "1,2", "--budget", "0.01",
                 "--variants", "cublas_fp16,torch_moe_loop", "--out", out)  # fmt: skip
    assert res.exit_code == 0, res.stderr
    return store.load([out])


def test_a_run_row_has_ep_and_this_ranks_work(ep_run, tiny_set):
    df = ep_run
    assert (df.status == "ok").all(), df[df.status != "ok"].reason.tolist()
    # dense GEMMs once (EP does not divide them), each expert GEMM at ep 1 and ep 2
    got = sorted(zip(df.gemm, df.ep, df.variant, strict=True))
    assert got == sorted([("attn_qkv", 1, "cublas_fp16"), ("shared_w13", 1, "cublas_fp16")]
                         + [(g, e, "torch_moe_loop") for g in ("moe_w13", "moe_w2") for e in (1, 2)])  # fmt: skip
    for r in df[df.ep == 2].itertuples():
        p = Problem("tiny-ep", r.gemm, 3, r.N, r.K, "fp16", tp=2, E=8, topk=2, ep=2)
        assert r.E == 8 and p.label.endswith(" tp2 ep2")
        # wall timing (CPU) times one copy, drawn with the cell's seed + 1
        ids = make_inputs(p, cell_seed(0, p) + 1, "cpu").topk_ids.tolist()
        pairs = sum(e >= 0 for row in ids for e in row)
        tokens, hit = sum(any(e >= 0 for e in row) for row in ids), len({e for row in ids for e in row if e >= 0})
        assert r.flops == 2 * pairs * r.N * r.K
        assert r.bytes_min == 2 * (hit * r.N * r.K + tokens * r.K + pairs * r.N)


def test_compare_keys_on_ep(ep_run):
    base = ep_run[ep_run.ep == 1]
    rows = {(r.cell, r.variant): r.verdict for r in compare_runs(base, ep_run)}
    # the ep 2 cells (whole experts) are other cells than the ep 1 cells (experts split over TP 2): new
    assert rows[("tiny-ep moe_w13 fp16 M3 N128 K64 E8 top2 uniform tp2 ep2", "torch_moe_loop")] == "new"
    assert rows[("tiny-ep moe_w13 fp16 M3 N64 K64 E8 top2 uniform tp2", "torch_moe_loop")] != "new"
    assert sum(v == "new" for v in rows.values()) == 2


def test_tuned_config_files_are_named_by_the_local_experts_and_ep():
    gpu = "NVIDIA H100 80GB HBM3"
    dsv3 = Problem("s", "moe_w13", 8, 4096, 7168, "bf16", E=256, topk=8, ep=8)
    assert (
        config_files.config_path("triton_moe_col", dsv3, gpu).name == "E=32,ep=8,topk=8,N=4096,K=7168,dtype=bf16.json"
    )
    # ep 1 keeps the name of the files committed before EP, and they still load
    mixtral = Problem("s", "moe_w13", 8, 28672, 4096, "bf16", E=8, topk=2)
    assert config_files.config_path("triton_moe_col", mixtral, gpu).name == "E=8,topk=2,N=28672,K=4096,dtype=bf16.json"
    assert config_files.stored("triton_moe_col", mixtral, gpu) is not None
    # the same GEMM at ep 2 (4 local experts) sees another load: not that file
    assert config_files.stored("triton_moe_col", mixtral.with_(ep=2), gpu) is None


# ---------------------------------------------------------------- 7. layer


def test_layer_routes_over_all_experts_and_keeps_rank_0s(tiny_set):
    dev = detect()
    layer = P.layer_problems(shape_sets.load(str(tiny_set)), 3, "fp16", 2, ep=2)
    built = L.build(P.steps_for(layer, P.chooser("cublas_*,torch_moe_loop", dev)), 0, "cpu")
    routing = next(b.fn for b in built if not b.step.is_gemm)
    # the router's own top-2 over all 8 experts, by hand; rank 0 of 2 holds experts 0..3
    glob = torch.topk(torch.softmax((routing.x @ routing.w.t()).float(), dim=-1), 2, dim=-1).indices
    assert tuple(routing.w.shape) == (8, 64)
    assert routing().tolist() == [[e if e < 4 else -1 for e in row] for row in glob.tolist()]
    assert [tuple(b.inputs.b.shape) for b in built if b.step.is_gemm and b.step.problem.is_moe] == [
        (4, 128, 64),
        (4, 64, 64),
    ]
    checks = L.check(built)
    assert checks and all(c["ok"] for c in checks), checks


# ---------------------------------------------------------------- 8. bad input


@pytest.mark.parametrize(
    "args, fragment",
    [
        (("run", "--shapes", "smoke", "--ep", "2"), "smoke: --ep 2 does not divide the TP 1 x DP 1 = 1 GPUs"),
        (("run", "--shapes", "llama70b-attn", "--tp", "8", "--ep", "8"), "llama70b-attn: --ep 8 needs expert GEMMs"),
        (("run", "--shapes", "mixtral-moe", "--tp", "8", "--ep", "4"), "--ep 4 with --tp 8 --dp 1 is neither"),
        (("run", "--shapes", "smoke", "--ep", "0"), "--ep '0': give positive integers"),
        (("run", "--shapes", "smoke", "--ep", "two"), "--ep 'two': give positive integers"),
        (("run", "--shapes", "smoke", "--layout", "hf", "--tp", "2"), "--layout hf is the checkpoint's own tensors"),
        (("run", "--shapes", "smoke", "--layout", "megatron"), "--layout 'megatron': choose from vllm, sglang, hf"),
        (("tune", "--shapes", "smoke", "--ep", "3"), "smoke: --ep 3 does not divide the TP 1 x DP 1 = 1 GPUs"),
        (("profile", "--ncu", "--shapes", "llama70b-attn", "--dp", "2", "--ep", "2"), "this set has none"),
        (("layer", "--model", "mixtral-8x7b", "--tp", "8", "--ep", "2"), "--ep 2 with --tp 8 --dp 1 is neither"),
        (("layer", "--model", "llama3-70b", "--tp", "2", "--ep", "2"), "this set has none"),
    ],
)
def test_bad_ep_is_one_line_exit_2_and_nothing_written(args, fragment, tmp_path):
    out = tmp_path / "out"
    line = bad(invoke(*args, "--out", out) if args[0] != "tune" else invoke(*args))
    assert fragment in line
    assert not out.exists()


def test_profile_outcome_carries_this_ranks_work(monkeypatch):
    """The profile task's outcome (what `profile` turns into flops and bytes_min) has the rank's pairs and tokens."""
    from dataclasses import asdict
    from types import SimpleNamespace

    from gemmbench.engine.tasks import profile_task

    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)  # the CPU has no stream to wait for
    p = moe(M=9)
    seed = _seed_where(p, CASES["mixed"][1])
    got: dict = {}
    ctx = SimpleNamespace(dev=detect(), devname=DEV, begin=lambda *a: None,
                          result=lambda name, rows: got.update(rows[0]), failed=None)  # fmt: skip
    profile_task.work(ctx, {"items": ["torch_moe_loop"], "problem": asdict(p), "seed": seed})
    ids = make_inputs(p, seed, DEV).topk_ids.tolist()
    assert got["status"] == "ok"
    assert got["pairs"] == sum(e >= 0 for row in ids for e in row)
    assert got["tokens"] == sum(any(e >= 0 for e in row) for row in ids)
    assert got["experts_hit"] == len({e for row in ids for e in row if e >= 0})


def test_a_rank_with_no_pair_says_so_and_has_no_roofline(tiny_set, tmp_path):
    """One token at EP 4: its 2 experts of 8 can both lie outside rank 0's experts 0 and 1 (15 of the 28 pairs of
    experts do); that rank launches a kernel that finds nothing to do, and its row must not claim a roofline %."""
    p = Problem("tiny-ep", "moe_w13", 1, 128, 64, "fp16", tp=4, E=8, topk=2, ep=4)
    # the CPU path times one copy, drawn with the cell's seed + 1 (the check's is the cell's seed)
    seed = next(s for s in range(100) if (make_inputs(p, cell_seed(s, p) + 1, "cpu").topk_ids < 0).all())
    out = tmp_path / "idle.parquet"
    res = invoke("run", "--shapes", tiny_set, "--m", "1", "--dtype", "fp16", "--tp", "4", "--ep", "4", "--budget", "0.01",
                 "--seed", seed, "--variants", "torch_moe_loop", "--out", out)  # fmt: skip
    assert res.exit_code == 0, res.stderr
    row = store.load([out]).query("gemm == 'moe_w13'").iloc[0]
    assert row.status == "ok" and row.flops == 0 and row.bytes_min == 0
    assert "no (token, expert) pair on this rank's experts" in row.reason


def test_no_roofline_for_a_rank_without_work_and_one_for_a_rank_with_work():
    from types import SimpleNamespace

    from gemmbench.engine.tasks.time_task import _throughput
    from gemmbench.measure.ceilings import Ceilings

    ctx = SimpleNamespace(ceilings=Ceilings(mode="cold", bandwidth_ladder=[(1 << 20, 1000.0), (1 << 30, 3000.0)],
                                            peak_tflops={"bf16": 700.0, "fp8": 1300.0}))  # fmt: skip
    p = Problem("tiny-ep", "moe_w13", 1, 128, 64, "fp16", E=8, topk=2, ep=4)
    variant = registry.get("torch_moe_loop")
    idle = _throughput(ctx, p, variant, [{"experts_hit": 0, "pairs": 0, "tokens": 0}], 10.0)
    assert idle["flops"] == 0 and idle["bytes_min"] == 0 and "pct_of_roofline" not in idle
    busy = _throughput(ctx, p, variant, [{"experts_hit": 1, "pairs": 1, "tokens": 1}], 10.0)
    # 1 expert of 128 x 64 fp16, the token's row of a and its 128 outputs: 2 * (8192 + 64 + 128) bytes at 1000 GB/s
    assert busy["bytes_min"] == 2 * (128 * 64 + 64 + 128) and busy["pct_of_roofline"] > 0
