"""The correctness check: compare() on hand-made outputs, reference() against independent
computations, and make_inputs() (seeding, fp8 amax quantisation, scale layouts, no zeros)."""

from __future__ import annotations

import math

import pytest
import torch

from gemmbench import dtypes
from gemmbench.measure.check import CheckResult, compare, poison, reference
from gemmbench.measure.inputs import make_inputs
from gemmbench.shapes import Problem

FP8_MAX = dtypes.FP8.max_value  # 448: the largest finite e4m3 value


def dense(M=8, N=16, K=32, dtype="fp16"):
    return Problem("test", "g", M, N, K, dtype)


def moe(M=7, N=24, K=32, E=4, topk=2, dtype="fp16"):
    return Problem("test", "experts", M, N, K, dtype, E=E, topk=topk)


def ref_with_max_one(M=8, N=16, seed=0):
    """A positive fp32 reference whose max |ref| is exactly 1.0 (at [0, 0]): errors read as absolutes."""
    g = torch.Generator().manual_seed(seed)
    ref = torch.rand((M, N), generator=g) * 0.5 + 0.25  # in [0.25, 0.75)
    ref[0, 0] = 1.0
    return ref


# ---------------------------------------------------------------- compare()


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp8"])
def test_exact_result_passes_with_zero_error(dtype):
    ref = ref_with_max_one()
    result = compare(dense(dtype=dtype), ref.clone(), ref)
    assert isinstance(result, CheckResult)
    assert result.ok is True and result.max_rel_err == 0.0 and result.detail == ""


def test_exact_result_in_the_output_dtype_passes():
    ref = ref_with_max_one().half().float()  # exactly representable in fp16
    result = compare(dense(), ref.half(), ref)
    assert result.ok and result.max_rel_err == 0.0


@pytest.mark.parametrize("where", [(0, 0), (3, 7), (7, 15)])
def test_one_nan_anywhere_fails(where):
    ref = ref_with_max_one()
    out = ref.clone()
    out[where] = float("nan")
    result = compare(dense(), out, ref)
    assert not result.ok
    assert result.max_rel_err == math.inf
    assert "1 non-finite" in result.detail
    assert f"first at [{where[0]},{where[1]}]" in result.detail
    assert f"worst at [{where[0]},{where[1]}]" in result.detail


def test_nan_and_inf_are_counted_as_non_finite():
    ref = ref_with_max_one()
    out = ref.clone()
    out[1, 2] = float("nan")
    out[4, 5] = float("inf")
    out[6, 1] = float("-inf")
    result = compare(dense(), out, ref)
    assert not result.ok
    assert "3 non-finite" in result.detail
    assert result.detail.startswith("3 of 128 outputs off by more than")


def test_nan_in_a_16bit_output_fails():
    ref = ref_with_max_one()
    out = ref.half()
    out[2, 3] = float("nan")
    result = compare(dense(), out, ref)
    assert not result.ok and "1 non-finite" in result.detail


def test_partially_written_output_fails_and_names_the_rows():
    ref = ref_with_max_one(M=8, N=16)
    out = torch.empty((8, 16), dtype=torch.float16)
    poison(out)
    assert torch.isnan(out).all()
    out[:3] = ref[:3].half()  # a kernel that only wrote the first three rows
    result = compare(dense(M=8, N=16), out, ref)
    assert not result.ok
    assert result.max_rel_err == math.inf
    assert "80 of 128 outputs" in result.detail
    assert "80 non-finite" in result.detail
    assert "rows 3..7, cols 0..15" in result.detail
    assert "first at [3,0]" in result.detail


def test_poison_none_is_a_no_op_and_poison_fills_every_element():
    poison(None)
    t = torch.zeros((3, 5), dtype=torch.bfloat16)
    poison(t)
    assert torch.isnan(t).all()


def test_result_off_by_two_fails():
    ref = ref_with_max_one()
    result = compare(dense(), 2 * ref, ref)
    assert not result.ok
    assert result.max_rel_err == pytest.approx(1.0)  # |2 ref - ref| / max|ref| at the max element
    assert "128 of 128 outputs" in result.detail
    assert "non-finite" not in result.detail
    assert "worst at [0,0]: got 2, want 1" in result.detail


def test_one_bad_element_is_located():
    ref = ref_with_max_one()
    out = ref.clone()
    out[5, 9] += 0.5
    result = compare(dense(), out, ref)
    assert not result.ok
    assert result.max_rel_err == pytest.approx(0.5)
    assert "1 of 128 outputs" in result.detail
    assert "rows 5..5, cols 9..9" in result.detail and "worst at [5,9]" in result.detail


@pytest.mark.parametrize("shape", [(8, 17), (9, 16), (16, 8), (128,), (1, 8, 16)])
def test_shape_mismatch_fails(shape):
    ref = ref_with_max_one()
    out = torch.ones(shape)
    result = compare(dense(), out, ref)
    assert not result.ok
    assert result.max_rel_err == math.inf
    assert result.detail == f"output shape {tuple(shape)}, expected (8, 16)"


def test_tolerance_table():
    assert dtypes.NAMES == ("fp16", "bf16", "fp8")
    # fp16 output rounding is 2^-11, bf16's 2^-8: each budget is above its output rounding
    assert 2.0**-11 < dtypes.FP16.tolerance < dtypes.BF16.tolerance
    assert 2.0**-8 < dtypes.BF16.tolerance


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp8"])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_perturbation_just_under_tolerance_passes_just_over_fails(dtype, sign):
    tol = dtypes.get(dtype).tolerance
    ref = ref_with_max_one()
    under, over = ref.clone(), ref.clone()
    under[4, 4] += sign * 0.99 * tol
    over[4, 4] += sign * 1.01 * tol
    r_under = compare(dense(dtype=dtype), under, ref)
    r_over = compare(dense(dtype=dtype), over, ref)
    assert r_under.ok, r_under.detail
    assert r_under.max_rel_err == pytest.approx(0.99 * tol, rel=1e-4)
    assert not r_over.ok
    assert r_over.max_rel_err == pytest.approx(1.01 * tol, rel=1e-4)
    assert r_over.detail.startswith(f"1 of 128 outputs off by more than {tol:g} of max|ref|")


def test_error_is_relative_to_max_ref_not_elementwise():
    """An error of 0.5 * tol * max|ref| passes even on an element whose own value is tiny."""
    ref = ref_with_max_one() * 1000.0
    ref[2, 2] = 1e-3
    out = ref.clone()
    out[2, 2] += 0.5 * dtypes.FP16.tolerance * 1000.0
    result = compare(dense(), out, ref)
    assert result.ok and result.max_rel_err == pytest.approx(0.5 * dtypes.FP16.tolerance, rel=1e-4)


# ---------------------------------------------------------------- reference()


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_dense_reference_matches_float64(dtype):
    p = dense(M=13, N=24, K=40, dtype=dtype)
    inputs = make_inputs(p, 11, "cpu")
    ref = reference(p, inputs)
    want = inputs.a.double() @ inputs.b.double().t()
    assert ref.dtype == torch.float32 and ref.shape == (13, 24)
    torch.testing.assert_close(ref.double(), want, rtol=1e-6, atol=1e-6)


def test_reference_restores_the_tf32_flag():
    p = dense()
    inputs = make_inputs(p, 1, "cpu")
    prev = torch.backends.cuda.matmul.allow_tf32
    try:
        for flag in (True, False):
            torch.backends.cuda.matmul.allow_tf32 = flag
            reference(p, inputs)
            assert torch.backends.cuda.matmul.allow_tf32 is flag
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev


def _moe_loop_by_hand(inputs, M, topk):
    a, b = inputs.dequantized()
    ids = inputs.topk_ids
    rows = []
    for t in range(M):
        for s in range(topk):
            e = int(ids[t, s])
            rows.append(a[t].double() @ b[e].double().t())
    return torch.stack(rows)


@pytest.mark.parametrize("M,E,topk", [(7, 4, 2), (5, 3, 3), (1, 8, 2), (6, 5, 1)])
def test_moe_reference_matches_a_hand_written_loop(M, E, topk):
    p = moe(M=M, E=E, topk=topk)
    inputs = make_inputs(p, 4, "cpu")
    ref = reference(p, inputs)
    assert ref.shape == (M * topk, p.N)
    torch.testing.assert_close(ref.double(), _moe_loop_by_hand(inputs, M, topk), rtol=1e-6, atol=1e-6)


def test_moe_reference_follows_the_routing():
    """Changing one slot's expert changes exactly that output row."""
    p = moe(M=3, E=4, topk=2)
    inputs = make_inputs(p, 4, "cpu")
    inputs.topk_ids = torch.tensor([[0, 1], [2, 3], [1, 0]], dtype=torch.int32)
    before = reference(p, inputs)
    inputs.topk_ids = torch.tensor([[0, 1], [2, 0], [1, 0]], dtype=torch.int32)
    after = reference(p, inputs)
    changed = (before != after).any(dim=1)
    assert changed.tolist() == [False, False, False, True, False, False]
    torch.testing.assert_close(after[3], inputs.a[1].float() @ inputs.b[0].float().t())


@pytest.mark.parametrize("scaling", ["tensor", "row"])
def test_fp8_reference_uses_the_dequantised_inputs(scaling):
    p = dense(M=9, N=32, K=48, dtype="fp8")
    inputs = make_inputs(p, 2, "cpu", scaling=scaling)
    ref = reference(p, inputs)
    want = (inputs.a.float() * inputs.a_scale) @ (inputs.b.float() * inputs.b_scale).t()
    torch.testing.assert_close(ref, want, rtol=1e-6, atol=1e-6)
    # the scales matter: without them the product is off by orders of magnitude
    raw = inputs.a.float() @ inputs.b.float().t()
    assert (raw.abs().max() / ref.abs().max()) > 1e3


def test_fp8_moe_reference_uses_per_expert_scales():
    p = moe(M=5, N=32, K=48, E=3, topk=2, dtype="fp8")
    inputs = make_inputs(p, 2, "cpu")
    assert inputs.b_scale.shape == (3,)
    ref = reference(p, inputs)
    want = _moe_loop_by_hand(inputs, 5, 2)
    # by hand once more, scales applied explicitly rather than through dequantized()
    a = inputs.a.double() * inputs.a_scale.double()
    rows = [
        a[t] @ (inputs.b[int(inputs.topk_ids[t, s])].double() * inputs.b_scale[int(inputs.topk_ids[t, s])].double()).t()
        for t in range(5)
        for s in range(2)
    ]
    torch.testing.assert_close(ref.double(), want, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(ref.double(), torch.stack(rows), rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------- make_inputs()


def _originals(M, N, K, seed, E=1):
    """The unquantised values make_inputs draws: (randn + 1) / sqrt(K), a then b, from one generator; an MoE weight
    one expert after another (inputs.draw: these small operands are each one chunk otherwise)."""
    g = torch.Generator().manual_seed(seed)
    a = (torch.randn((M, K), generator=g) + 1.0) / math.sqrt(K)
    if E > 1:
        b = torch.stack([(torch.randn((N, K), generator=g) + 1.0) / math.sqrt(K) for _ in range(E)])
    else:
        b = (torch.randn((N, K), generator=g) + 1.0) / math.sqrt(K)
    return a, b


def _same(x, y):
    if x is None or y is None:
        return x is y
    if x.dtype == torch.float8_e4m3fn:
        x, y = x.view(torch.uint8), y.view(torch.uint8)
    return x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y)


FIELDS = ("a", "b", "a_scale", "b_scale", "topk_ids", "topk_weights")


@pytest.mark.parametrize(
    "p",
    [dense(dtype="fp16"), dense(dtype="bf16"), dense(dtype="fp8"), moe(dtype="fp16"), moe(dtype="fp8")],
    ids=lambda p: p.label,
)
def test_inputs_are_seeded(p):
    x, y, z = make_inputs(p, 7, "cpu"), make_inputs(p, 7, "cpu"), make_inputs(p, 8, "cpu")
    for f in FIELDS:
        assert _same(getattr(x, f), getattr(y, f)), f
    assert not _same(x.a, z.a) and not _same(x.b, z.b)
    if p.is_moe:
        assert not _same(x.topk_weights, z.topk_weights)


def test_inputs_are_the_documented_values():
    a0, b0 = _originals(8, 16, 32, 3)
    inputs = make_inputs(dense(), 3, "cpu")
    assert torch.equal(inputs.a, a0.half()) and torch.equal(inputs.b, b0.half())
    assert inputs.out_dtype == torch.float16 and inputs.a_scale is None and inputs.scaling == "none"


@pytest.mark.parametrize("M,N,K", [(8, 16, 32), (1, 64, 48), (33, 80, 160)])
def test_fp8_tensor_scale_comes_from_amax(M, N, K):
    a0, b0 = _originals(M, N, K, 5)
    inputs = make_inputs(dense(M, N, K, "fp8"), 5, "cpu", scaling="tensor")
    assert inputs.a.dtype == inputs.b.dtype == torch.float8_e4m3fn
    assert inputs.out_dtype == torch.bfloat16 and inputs.scaling == "tensor"
    assert inputs.a_scale.shape == (1,) and inputs.b_scale.shape == (1,)
    for q, s, x in ((inputs.a, inputs.a_scale, a0), (inputs.b, inputs.b_scale, b0)):
        assert s.dtype == torch.float32
        assert float(s) == pytest.approx(float(x.abs().max()) / FP8_MAX, rel=1e-6)
        assert float(q.float().abs().max()) == FP8_MAX  # the amax element lands on the top of the range
        deq = q.float() * s
        assert float(deq.abs().max()) == pytest.approx(float(x.abs().max()), rel=1e-6)
        # e4m3 keeps 3 mantissa bits: half an ulp is 2^-4 relative, plus the subnormal step near 0
        assert ((deq - x).abs() <= x.abs() * 2.0**-4 + float(s) * 2.0**-9).all()


def test_fp8_row_scaling_gives_one_scale_per_row():
    M, N, K = 9, 24, 40
    a0, b0 = _originals(M, N, K, 6)
    inputs = make_inputs(dense(M, N, K, "fp8"), 6, "cpu", scaling="row")
    assert inputs.scaling == "row"
    assert inputs.a_scale.shape == (M, 1) and inputs.b_scale.shape == (N, 1)
    for q, s, x in ((inputs.a, inputs.a_scale, a0), (inputs.b, inputs.b_scale, b0)):
        torch.testing.assert_close(s[:, 0], x.abs().amax(dim=1) / FP8_MAX, rtol=1e-6, atol=0)
        assert (q.float().abs().amax(dim=1) == FP8_MAX).all()  # every row reaches the top of the range
    # a row's scale is its own, not the tensor's
    assert inputs.a_scale.min() < inputs.a_scale.max()


def test_fp8_moe_weight_has_one_scale_per_expert():
    M, N, K, E = 5, 16, 32, 3
    a0, b0 = _originals(M, N, K, 9, E=E)
    inputs = make_inputs(moe(M, N, K, E, 2, "fp8"), 9, "cpu")
    assert inputs.b.shape == (E, N, K) and inputs.b_scale.shape == (E,)
    torch.testing.assert_close(inputs.b_scale, b0.abs().amax(dim=(1, 2)) / FP8_MAX, rtol=1e-6, atol=0)
    assert float(inputs.a_scale) == pytest.approx(float(a0.abs().max()) / FP8_MAX, rel=1e-6)


def test_unknown_fp8_scaling_is_refused():
    with pytest.raises(ValueError, match="unknown fp8 scaling"):
        make_inputs(dense(dtype="fp8"), 1, "cpu", scaling="blocky")


@pytest.mark.parametrize(
    "p",
    [
        dense(dtype="fp16"),
        dense(dtype="bf16"),
        dense(dtype="fp8"),
        dense(M=1, N=16, K=16, dtype="fp8"),
        moe(dtype="fp16"),
        moe(dtype="fp8"),
    ],
    ids=lambda p: p.label,
)
@pytest.mark.parametrize("scaling", ["tensor", "row"])
def test_no_input_is_zero(p, scaling):
    inputs = make_inputs(p, 1, "cpu", scaling=scaling)
    for name, x in zip(("a", "b"), inputs.dequantized(), strict=False):
        assert (x != 0).any(dim=-1).all(), f"{name} has an all-zero row"
        zeros = float((x == 0).float().mean())
        assert zeros < 0.02, f"{name}: {zeros:.3f} of it is zero"
        # the non-zero mean the module promises: (randn + 1) / sqrt(K) has mean 1/sqrt(K)
        assert float(x.mean()) > 0.5 / math.sqrt(p.K), name
    if inputs.a_scale is not None:
        assert (inputs.a_scale > 0).all() and (inputs.b_scale > 0).all()


def test_moe_routing_is_valid():
    p = moe(M=32, E=6, topk=3)
    inputs = make_inputs(p, 2, "cpu")
    ids, w = inputs.topk_ids, inputs.topk_weights
    assert ids.shape == (32, 3) and ids.dtype == torch.int32
    assert w.shape == (32, 3) and w.dtype == torch.float32
    assert int(ids.min()) >= 0 and int(ids.max()) < 6
    for row in ids.tolist():
        assert len(set(row)) == 3  # top-k picks distinct experts
    assert (w > 0).all() and (w.sum(dim=1) <= 1 + 1e-6).all()
    assert (w[:, :-1] >= w[:, 1:]).all()  # sorted, best expert first
    assert inputs.experts_hit() == len(set(ids.flatten().tolist()))
