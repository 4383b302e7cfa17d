"""Typed kernel configs (one frozen dataclass per kernel family) and their provenance, kept beside them: what
from_dict accepts and refuses, what to_dict writes, and that a launch's `config` (the row's JSON column) has the
keys the dict configs had, provenance included.  Building a launch on the CPU compiles and runs nothing."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from gemmbench import registry
from gemmbench.configs import kernel_config, provenance, tuning
from gemmbench.kernels.dense_dp import DenseConfig
from gemmbench.kernels.fused_moe import MoeConfig
from gemmbench.kernels.splitk import SplitKConfig
from gemmbench.kernels.tile_loop import fp8_promote_every
from gemmbench.measure.inputs import make_inputs
from gemmbench.registry import Launch
from gemmbench.shapes import Problem

TILE = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32, num_warps=4, num_stages=1)


def test_defaults_live_in_the_dataclasses():
    assert DenseConfig(**TILE) == DenseConfig.tile(16, 32, 32, 4, 1)
    dense, splitk, moe = DenseConfig(**TILE), SplitKConfig(**TILE, SPLIT_K=2), MoeConfig(**TILE)
    assert (dense.GROUP_M, dense.TMA, dense.schedule, dense.FP8_PROMOTE) == (8, False, None, None)
    assert (splitk.GROUP_M, splitk.schedule, splitk.TMA, splitk.FP8_PROMOTE) == (8, "row", False, None)
    assert splitk.SWAP_AB is None  # unset: not swapped, and no key in the JSON
    assert (moe.GROUP_M, moe.SPLIT_K, moe.schedule, moe.FP8_PROMOTE) == (8, None, None, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        dense.BLOCK_M = 32


def test_to_dict_writes_the_keys_of_the_dict_configs_in_their_order():
    """None is "not set": no key (an MoE config of a data-parallel variant has no SPLIT_K, none has FP8_PROMOTE
    unless given)."""
    assert list(DenseConfig(**TILE).to_dict()) == [
        "BLOCK_M",
        "BLOCK_N",
        "BLOCK_K",
        "GROUP_M",
        "num_warps",
        "num_stages",
        "TMA",
    ]
    assert list(SplitKConfig(**TILE, SPLIT_K=2).to_dict()) == [
        "BLOCK_M",
        "BLOCK_N",
        "BLOCK_K",
        "SPLIT_K",
        "GROUP_M",
        "schedule",
        "num_warps",
        "num_stages",
        "TMA",
    ]
    assert list(MoeConfig(**TILE).to_dict()) == ["BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages"]
    assert list(MoeConfig(**TILE, SPLIT_K=1, schedule="col").to_dict())[-2:] == ["SPLIT_K", "schedule"]
    assert DenseConfig(**TILE, FP8_PROMOTE=64).to_dict()["FP8_PROMOTE"] == 64


@pytest.mark.parametrize(
    "cls,knobs",
    [(DenseConfig, {"TMA": True}), (SplitKConfig, {"SPLIT_K": 3, "schedule": "grouped"}), (MoeConfig, {"SPLIT_K": 3})],
)
def test_from_dict_round_trips(cls, knobs):
    config = cls.tile(64, 128, 256, 8, 3, GROUP_M=4, FP8_PROMOTE=32, **knobs)
    back = cls.from_dict(config.to_dict())
    assert back == config and list(back.to_dict().items()) == list(config.to_dict().items())


@pytest.mark.parametrize(
    "cls,data,message",
    [
        (DenseConfig, {**TILE, "SPLIT_K": 2}, "DenseConfig: unknown key 'SPLIT_K'"),  # a SplitK config is not one
        (SplitKConfig, TILE, "SplitKConfig: missing key 'SPLIT_K'"),
        (MoeConfig, {**TILE, "BLOCK_M": 16.0}, "MoeConfig: BLOCK_M must be an int, not 16.0"),
        (DenseConfig, {**TILE, "num_warps": True}, "num_warps must be an int, not True"),  # JSON true is not 1
        (DenseConfig, {**TILE, "TMA": "yes"}, "TMA must be true or false, not 'yes'"),
        (MoeConfig, {**TILE, "SPLIT_K": "2"}, "SPLIT_K must be an int or None"),
        (DenseConfig, {**TILE, "BLOCK_N": 48}, "BLOCK_N must be a power of two >= 16, not 48"),
        (DenseConfig, {**TILE, "BLOCK_K": 8}, "BLOCK_K must be a power of two >= 16, not 8"),
        (DenseConfig, {**TILE, "num_warps": 3}, "num_warps must be a power of two, not 3"),
        (SplitKConfig, {**TILE, "SPLIT_K": 0}, "SPLIT_K must be >= 1, not 0"),
        (SplitKConfig, {**TILE, "SPLIT_K": 2, "schedule": "diagonal"}, "schedule must be one of 'row', 'col'"),
        (MoeConfig, {**TILE, "GROUP_M": 0}, "GROUP_M must be >= 1, not 0"),
        (DenseConfig, {**TILE, "num_stages": 0}, "num_stages must be >= 1, not 0"),
    ],
)
def test_from_dict_names_the_key_it_refuses(cls, data, message):
    with pytest.raises(kernel_config.ConfigError, match=message.replace("(", r"\(")):
        cls.from_dict(data)


def test_fp8_promotion_default_and_override():
    fp8 = torch.empty(1, 1).to(torch.float8_e4m3fn)
    assert fp8_promote_every(fp8, DenseConfig.tile(16, 32, 256, 4, 1), "precise") == 128  # not set: the default
    assert fp8_promote_every(fp8, DenseConfig.tile(16, 32, 64, 4, 1), "precise") == 64  # at most one K tile
    assert fp8_promote_every(fp8, SplitKConfig.tile(16, 32, 256, 4, 1, SPLIT_K=1, FP8_PROMOTE=32), "precise") == 32
    half = torch.empty(1, 1, dtype=torch.float16)
    assert fp8_promote_every(half, MoeConfig.tile(16, 32, 256, 4, 1), "none") is None


def test_provenance():
    stored = provenance.Provenance("stored", "GPU/v/N=1,K=2,dtype=fp8.json", 16)
    assert stored.to_dict() == {"source": "stored", "file": "GPU/v/N=1,K=2,dtype=fp8.json", "bucket": 16}
    assert stored["bucket"] == 16  # read by key, as `gemmbench tune --skip-stored` does
    assert provenance.Provenance("only").to_dict() == {"source": "only"}
    assert provenance.Provenance("searched").to_dict() == {"source": "searched"}
    assert provenance.Provenance("searched", "/u/f.json", 32).to_dict() == {"source": "searched", "file": "/u/f.json",
                                                                           "bucket": 32}  # fmt: skip
    lent = provenance.Provenance("borrowed", "G/v/f.json", 64, borrowed="G")
    assert lent.to_dict() == {"source": "borrowed", "borrowed": "G", "file": "G/v/f.json", "bucket": 64}
    for bad in (("stored",), ("stored", "f.json"), ("searched", "f.json"), ("only", "f.json", 16), ("imported",),
                ("tuned",), ("borrowed", "f.json", 16)):  # fmt: skip
        with pytest.raises(ValueError, match="not a provenance"):
            provenance.Provenance(*bad)
    with pytest.raises(ValueError, match="names the GPU lent"):
        provenance.Provenance("stored", "f.json", 16, borrowed="G")


def test_launch_config_is_the_typed_config_then_its_provenance():
    config = SplitKConfig.tile(16, 32, 32, 4, 1, SPLIT_K=2)
    launch = Launch(fn=lambda: None, params=config)
    assert launch.config == config.to_dict()
    launch.provenance = provenance.Provenance("stored", "f.json", 16)
    assert list(launch.config)[-3:] == ["source", "file", "bucket"] and launch.config["BLOCK_M"] == 16
    launch.config["BLOCK_M"] = 64  # a copy: the config itself is frozen
    assert launch.config["BLOCK_M"] == 16 and launch.params is config


def test_launch_takes_a_plain_dict_where_there_is_no_typed_config():
    """cuBLAS, moe_align and plugins: a dict, or nothing."""
    assert Launch(lambda: None).config == {} and Launch(lambda: None).params is None
    launch = Launch(fn=lambda: None, config={"planted_slowdown": 0.2}, graph_safe=False)
    assert launch.config == {"planted_slowdown": 0.2} and launch.graph_safe is False
    with pytest.raises(TypeError, match="not both"):
        Launch(fn=lambda: None, config={"BLOCK_M": 16}, params=DenseConfig(**TILE))


BASE = ["BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages"]
# The keys of each variant's row `config` on the CPU: those the dict configs had (one candidate: source "only").
ROW_KEYS = {
    "triton_dp_row": BASE + ["TMA", "schedule", "source"],
    "triton_splitk_atomic": BASE + ["SPLIT_K", "schedule", "TMA", "source"],
    "triton_splitk_reduce_rowwise": BASE + ["SPLIT_K", "schedule", "TMA", "source"],
    "triton_moe_grouped": BASE + ["schedule", "source"],
    "triton_moe_splitk": BASE + ["SPLIT_K", "schedule", "source"],
}


@pytest.mark.parametrize("name", ROW_KEYS)
def test_row_config_has_the_keys_it_had(name):
    v = registry.get(name)
    dtype = "fp8" if v.fp8_scaling == "row" else "fp16"
    p = Problem("t", "g", 9, 48, 96, dtype, E=4 if v.moe else 1, topk=2 if v.moe else 1)
    tuning._chosen.clear()
    launch = v.make(p, make_inputs(p, 1, "cpu", scaling=v.fp8_scaling))
    assert sorted(launch.config) == sorted(ROW_KEYS[name]) and launch.config["source"] == "only"
    assert isinstance(launch.params, v.tunable.config_type) and launch.provenance == provenance.Provenance("only")


def test_built_configs_record_what_was_launched():
    """A SplitK config's SPLIT_K is capped at the K blocks; a data-parallel MoE config stays without SPLIT_K; the
    data-parallel variants write their own schedule; a TMA the operands cannot take is recorded False."""
    p = Problem("t", "g", 3, 40, 100, "fp16")  # rows of 200 bytes: no tensor descriptor
    inputs = make_inputs(p, 1, "cpu")
    launch = registry.get("triton_splitk_atomic").tunable.build(
        p, inputs, SplitKConfig.tile(16, 32, 32, 4, 1, SPLIT_K=8, TMA=True)
    )
    assert (launch.params.SPLIT_K, launch.params.TMA) == (4, False)
    launch = registry.get("triton_dp_col").tunable.build(p, inputs, DenseConfig.tile(16, 32, 32, 4, 1, FP8_PROMOTE=64))
    assert launch.config["schedule"] == "col" and launch.config["FP8_PROMOTE"] == 64
    m = Problem("t", "moe", 5, 48, 64, "fp16", E=4, topk=2)
    m_inputs = make_inputs(m, 1, "cpu")
    assert "SPLIT_K" not in registry.get("triton_moe_row").tunable.build(m, m_inputs, MoeConfig(**TILE)).config
    launch = registry.get("triton_moe_splitk").tunable.build(m, m_inputs, MoeConfig(**TILE, SPLIT_K=1))
    assert (launch.config["SPLIT_K"], launch.config["schedule"]) == (1, "col")
