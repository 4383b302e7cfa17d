"""M between two stored buckets (config_files.neighbour_buckets, choose()): the faster neighbour's config at this M,
timed only where the two configs differ, or a config fitted to M (Tunable.fitted) where one beats both, and the choice
in the row's `config`. No kernel runs: a fake tunable's launches count their calls, and the quick timer is replaced
by one that returns the µs each config is given here."""

from __future__ import annotations

import pytest

from gemmbench import registry
from gemmbench.configs import config_files, provenance, tuning
from gemmbench.kernels.dense_dp import DenseConfig
from gemmbench.shapes import Problem

GPU = "NVIDIA Test GPU 80GB"
NAME = "fake_between"  # never registered: choose() loads its files through the tunable's config_type
DENSE = Problem("s", "qkv", 100, 1280, 8192, "bf16", tp=8)
MOE = Problem("s", "w13", 3, 512, 256, "bf16", E=8, topk=2)
SMALL = DenseConfig.tile(16, 64, 128, 4, 3)  # BLOCK_N 64
LARGE = DenseConfig.tile(64, 128, 64, 8, 4)  # BLOCK_N 128
FIT = DenseConfig.tile(64, 256, 64, 8, 3)  # BLOCK_N 256: the config a kernel offers fitted to the problem's M


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A tunable whose launches count calls, and a quick timer that counts timings and returns us[BLOCK_N]."""
    monkeypatch.setenv(tuning.CONFIG_DIR_ENV, str(tmp_path))
    monkeypatch.delenv(tuning.RETUNE_ENV, raising=False)
    monkeypatch.setattr(tuning, "_gpu_name", lambda inputs: GPU)  # the CPU poses as a GPU with stored configs
    tuning._chosen.clear()
    state = {"us": {}, "timed": [], "fails": set()}

    def build(problem, inputs, config):
        if config.BLOCK_N in state["fails"]:
            raise RuntimeError("out of shared memory")  # what a config that cannot run raises at its first call
        return registry.Launch(fn=lambda: config.BLOCK_N, params=config)

    def quick_median_us(fn, budget_s=0.05):
        state["timed"].append(fn())  # the BLOCK_N of the launch being timed
        return state["us"][state["timed"][-1]]

    monkeypatch.setattr(tuning, "quick_median_us", quick_median_us)
    state["tunable"] = tuning.Tunable(NAME, lambda p, on_gpu, full: [SMALL], build, DenseConfig)
    yield state
    tuning._chosen.clear()


def _store(problem: Problem, buckets: dict[int, DenseConfig]) -> str:
    for m, config in buckets.items():
        config_files.save(NAME, problem.with_(M=m), GPU, config, 1.0, {})
    # the user's folder (tune writes there): a row names a user's file by its full path (README, stored configs)
    return str(config_files.config_path(NAME, problem, GPU))


@pytest.mark.parametrize(
    "buckets,M,moe,want",
    [
        ([64, 128], 100, False, (64, 128)),  # the M 100
        ([16, 32], 17, False, (16, 32)),  # and its M 17
        ([16, 64, 256], 100, False, (64, 256)),  # the stored ones around M, whatever lies unstored between
        ([64, 128], 64, False, None),  # M is a stored bucket
        ([16, 32], 5, False, None),  # dense decode M 1..16 is bucket 16 (config_files.m_bucket)
        ([32, 64], 5, False, None),  # every bucket above M: stored()'s nearest (32)
        ([64, 128], 300, False, None),  # every bucket below M
        ([2, 4], 3, True, (2, 4)),  # MoE buckets are powers of two from 1: 3 tokens lie between 2 and 4
        ([1, 2], 1, True, None),  # and 1 token is bucket 1
        ([16, 32], 1, True, None),  # an MoE M below every stored bucket: the smallest serves
    ],
)
def test_neighbour_buckets(buckets, M, moe, want):
    assert config_files.neighbour_buckets(buckets, M, moe) == want


@pytest.mark.parametrize("faster", [64, 128])
def test_the_faster_neighbour_is_taken_and_recorded(fake, faster):
    file = _store(DENSE, {64: SMALL, 128: LARGE})
    # bucket 64 holds BLOCK_N 64, bucket 128 BLOCK_N 128; the faster one takes 10 µs, the other 20.5 µs
    fake["us"] = {64: 10.0 if faster == 64 else 20.5, 128: 10.0 if faster == 128 else 20.5}
    launch = fake["tunable"].make(DENSE, None)
    assert launch.params == (SMALL if faster == 64 else LARGE)
    assert sorted(fake["timed"]) == [64, 128]  # each neighbour timed once
    assert launch.config == {
        **launch.params.to_dict(),
        "source": "stored-neighbour",
        "file": file,
        "bucket": faster,
        "neighbours_us": {"64": fake["us"][64], "128": fake["us"][128]},
    }
    assert list(launch.config["neighbours_us"]) == ["64", "128"]  # lower bucket first
    # the choice is kept for (variant, problem) in this process: a second make (stream mode's copies) times nothing
    assert fake["tunable"].make(DENSE, None).params == launch.params and len(fake["timed"]) == 2


def test_decode_m_between_16_and_32_is_timed(fake):
    _store(DENSE, {16: SMALL, 32: LARGE})
    fake["us"] = {64: 7.0, 128: 9.0}
    launch = fake["tunable"].make(DENSE.with_(M=17), None)
    assert launch.params == SMALL and launch.config["bucket"] == 16
    assert launch.config["neighbours_us"] == {"16": 7.0, "32": 9.0}


def test_moe_tokens_between_buckets_are_timed(fake):
    _store(MOE, {2: SMALL, 4: LARGE})
    fake["us"] = {64: 5.0, 128: 3.0}
    launch = fake["tunable"].make(MOE, None)  # 3 tokens
    assert launch.params == LARGE and launch.config["neighbours_us"] == {"2": 5.0, "4": 3.0}


def test_equal_neighbours_cost_no_timing(fake):
    file = _store(DENSE, {64: LARGE, 128: LARGE})
    launch = fake["tunable"].make(DENSE, None)
    assert fake["timed"] == []
    assert launch.params == LARGE and launch.config == {**LARGE.to_dict(), "source": "stored", "file": file,
                                                        "bucket": 128}  # fmt: skip


@pytest.mark.parametrize(
    "M,bucket",
    [
        (64, 64),  # M is a stored bucket
        (128, 128),
        (20, 64),  # every stored bucket lies above M: the nearest
        (200, 128),  # every stored bucket lies below M (200's bucket 256; 128 is one bucket from it)
    ],
)
def test_a_bucket_and_one_sided_m_use_the_stored_config_untimed(fake, M, bucket):
    _store(DENSE, {64: SMALL, 128: LARGE})
    launch = fake["tunable"].make(DENSE.with_(M=M), None)
    assert fake["timed"] == []
    assert launch.params == {64: SMALL, 128: LARGE}[bucket]
    assert launch.config["source"] == "stored" and launch.config["bucket"] == bucket
    assert "neighbours_us" not in launch.config


def test_a_neighbour_that_cannot_run_leaves_the_other(fake):
    _store(DENSE, {64: SMALL, 128: LARGE})
    fake["fails"], fake["us"] = {128}, {64: 12.0}
    launch = fake["tunable"].make(DENSE, None)
    assert launch.params == SMALL and launch.config["neighbours_us"] == {"64": 12.0, "128": None}


def test_no_neighbour_runs_is_one_error(fake):
    _store(DENSE, {64: SMALL, 128: LARGE})
    fake["fails"] = {64, 128}
    with pytest.raises(tuning.TuningError, match="no config of fake_between runs"):
        fake["tunable"].make(DENSE, None)


def test_retune_skips_the_neighbours(fake, monkeypatch):
    _store(DENSE, {64: SMALL, 128: LARGE})
    monkeypatch.setenv(tuning.RETUNE_ENV, "1")
    launch = fake["tunable"].make(DENSE, None)  # the space's one candidate: nothing to choose, nothing timed
    assert launch.config["source"] == "only" and fake["timed"] == []


def _fitting(fake, config=FIT, launched=None, more=()):
    """The fake tunable, offering `config` (and `more`) as fitted to every problem's M (and launching configs as
    `launched`)."""
    fitted = ([config] if config is not None else []) + list(more)
    fake["tunable"] = tuning.Tunable(NAME, lambda p, on_gpu, full: [SMALL], fake["tunable"].build, DenseConfig,
                                     fitted=lambda problem: fitted, launched=launched)  # fmt: skip
    return fake["tunable"]


@pytest.mark.parametrize(
    "us,want",
    [
        ({64: 11.0, 128: 11.0, 256: 11.0}, 128),  # all equal: the upper bucket's, as stored()'s tie
        ({64: 10.0, 128: 11.0, 256: 10.0}, 64),  # the fitted config ties the faster bucket: that bucket's
        ({64: 12.0, 128: 11.0, 256: 11.0}, 128),
    ],
)
def test_a_fitted_config_wins_only_by_being_faster(fake, us, want):
    _store(DENSE, {64: SMALL, 128: LARGE})
    fake["us"] = us
    launch = _fitting(fake).make(DENSE, None)
    assert launch.params == {64: SMALL, 128: LARGE}[want]
    assert launch.config["source"] == "stored-neighbour" and launch.config["bucket"] == want
    assert launch.config["fitted_us"] == us[256]


WIDE = DenseConfig.tile(64, 512, 64, 8, 3)  # BLOCK_N 512: a second config fitted to M


@pytest.mark.parametrize(
    "us,want,fitted_us",
    [
        ({64: 12.0, 128: 11.0, 256: 10.0, 512: 9.0}, WIDE, 9.0),  # the second fitted config, the fastest of all
        ({64: 12.0, 128: 11.0, 256: 9.0, 512: 10.0}, FIT, 9.0),  # the first
        ({64: 12.0, 128: 11.0, 256: 9.0, 512: 9.0}, FIT, 9.0),  # tied: the first offered
        ({64: 12.0, 128: 8.0, 256: 9.0, 512: 10.0}, LARGE, 9.0),  # both slower: the faster one's time
    ],
)
def test_every_fitted_config_is_timed_and_the_fastest_wins(fake, us, want, fitted_us):
    _store(DENSE, {64: SMALL, 128: LARGE})
    fake["us"] = us
    launch = _fitting(fake, more=(WIDE,)).make(DENSE, None)
    assert launch.params == want and sorted(fake["timed"]) == [64, 128, 256, 512]  # each timed once
    assert launch.config["source"] == ("stored-neighbour" if want == LARGE else "fitted")
    assert launch.config["fitted_us"] == fitted_us


def test_a_fitted_config_equal_to_the_winning_neighbours_leaves_it_the_neighbours(fake):
    _store(DENSE, {64: SMALL, 128: LARGE})
    fake["us"] = {64: 10.0, 128: 20.0, 512: 15.0}
    # SMALL is the M 64 bucket's config too: timed once, as that bucket's; WIDE is offered and timed
    launch = _fitting(fake, SMALL, more=(WIDE,)).make(DENSE, None)
    assert launch.params == SMALL and sorted(fake["timed"]) == [64, 128, 512]
    assert launch.config["source"] == "stored-neighbour" and launch.config["bucket"] == 64
    assert launch.config["fitted_us"] == 15.0


def test_a_fitted_config_that_cannot_run_leaves_the_other(fake):
    _store(DENSE, {64: SMALL, 128: LARGE})
    fake["fails"], fake["us"] = {256}, {64: 12.0, 128: 11.0, 512: 10.0}
    launch = _fitting(fake, more=(WIDE,)).make(DENSE, None)
    assert launch.params == WIDE and launch.config["fitted_us"] == 10.0


def test_a_fitted_config_that_cannot_run_leaves_the_stored_one_and_says_so(fake):
    _store(DENSE, {64: SMALL, 128: LARGE})
    fake["fails"], fake["us"] = {256}, {64: 12.0, 128: 11.0}
    launch = _fitting(fake).make(DENSE, None)
    assert launch.params == LARGE and launch.config["fitted_us"] is None
    assert launch.config["neighbours_us"] == {"64": 12.0, "128": 11.0}


def test_configs_that_launch_alike_are_timed_once(fake):
    _store(DENSE, {64: SMALL, 128: LARGE})
    fake["us"] = {64: 12.0, 128: 11.0}
    # the fitted config launches as the upper bucket's (a kernel narrowing a stored width at this M): not offered
    launch = _fitting(fake, launched=lambda p, c: LARGE if c == FIT else c).make(DENSE, None)
    assert sorted(fake["timed"]) == [64, 128] and launch.params == LARGE
    assert launch.config["source"] == "stored-neighbour" and "fitted_us" not in launch.config
    # two buckets whose configs launch alike: the upper one's, untimed
    tuning._chosen.clear()
    fake["timed"].clear()
    launch = _fitting(fake, config=None, launched=lambda p, c: LARGE).make(DENSE, None)
    assert fake["timed"] == [] and launch.params == LARGE and launch.config["source"] == "stored"


def test_a_fitted_config_faster_than_both_neighbours_is_taken_with_their_times(fake):
    _store(DENSE, {64: SMALL, 128: LARGE})
    fake["us"] = {64: 12.0, 128: 11.0, 256: 9.5}
    launch = _fitting(fake).make(DENSE, None)
    assert launch.params == FIT and sorted(fake["timed"]) == [64, 128, 256]  # the three timed once each
    assert launch.config == {**FIT.to_dict(), "source": "fitted", "neighbours_us": {"64": 12.0, "128": 11.0},
                             "fitted_us": 9.5}  # fmt: skip


def test_a_slower_fitted_config_leaves_the_faster_neighbour_and_its_time_is_kept(fake):
    file = _store(DENSE, {64: SMALL, 128: LARGE})
    fake["us"] = {64: 12.0, 128: 11.0, 256: 11.5}
    launch = _fitting(fake).make(DENSE, None)
    assert launch.params == LARGE
    assert launch.config == {**LARGE.to_dict(), "source": "stored-neighbour", "file": file, "bucket": 128,
                             "neighbours_us": {"64": 12.0, "128": 11.0}, "fitted_us": 11.5}  # fmt: skip


def test_a_fitted_config_is_timed_against_equal_neighbours_once(fake):
    _store(DENSE, {64: LARGE, 128: LARGE})
    fake["us"] = {128: 11.0, 256: 9.0}
    launch = _fitting(fake).make(DENSE, None)
    assert launch.params == FIT and sorted(fake["timed"]) == [128, 256]  # the two buckets' one config timed once
    assert launch.config["neighbours_us"] == {"64": 11.0, "128": 11.0} and launch.config["fitted_us"] == 9.0


def test_a_fitted_config_equal_to_a_neighbours_is_that_neighbour(fake):
    _store(DENSE, {64: SMALL, 128: LARGE})
    fake["us"] = {64: 10.0, 128: 20.0}
    launch = _fitting(fake, SMALL).make(DENSE, None)
    assert launch.params == SMALL and sorted(fake["timed"]) == [64, 128]
    assert launch.config["source"] == "stored-neighbour" and "fitted_us" not in launch.config


def test_a_fitted_config_is_not_timed_at_a_stored_buckets_own_m(fake):
    _store(DENSE, {64: SMALL, 128: LARGE})
    launch = _fitting(fake).make(DENSE.with_(M=64), None)
    assert fake["timed"] == [] and launch.config["source"] == "stored" and launch.params == SMALL
    # decode M 1..16 share bucket 16: a stored 16 is tuned for every M of it
    _store(DENSE, {16: SMALL})
    assert _fitting(fake).make(DENSE.with_(M=5), None).config["source"] == "stored" and fake["timed"] == []


@pytest.mark.parametrize(
    "M,bucket,fitted_us,source",
    [
        (20, 64, 9.0, "fitted"),  # every stored bucket above M: the nearest (64) timed beside the fitted config
        (200, 128, 9.0, "fitted"),  # every stored bucket below M: 128
        (200, 128, 30.0, "stored-neighbour"),  # the fitted config slower: the nearest bucket's, with both times
    ],
)
def test_off_the_buckets_on_one_side_the_fitted_config_is_timed_beside_the_nearest(fake, M, bucket, fitted_us, source):
    file = _store(DENSE, {64: SMALL, 128: LARGE})
    fake["us"] = {64: 12.0, 128: 11.0, 256: fitted_us}
    launch = _fitting(fake).make(DENSE.with_(M=M), None)
    nearest = {64: SMALL, 128: LARGE}[bucket]
    assert sorted(fake["timed"]) == sorted([nearest.BLOCK_N, 256])  # the nearest and the fitted, once each
    where = {"file": file, "bucket": bucket} if source == "stored-neighbour" else {}
    assert launch.params == (FIT if source == "fitted" else nearest)
    timed = {"neighbours_us": {str(bucket): fake["us"][nearest.BLOCK_N]}, "fitted_us": fitted_us}
    assert launch.config == {**launch.params.to_dict(), "source": source, **where, **timed}


def test_only_a_fitted_provenance_without_a_file_names_its_time():
    with pytest.raises(ValueError, match="was timed among the neighbours"):
        provenance.Provenance("fitted", neighbours=((64, 1.0), (128, 2.0)))
    with pytest.raises(ValueError, match="has a file and a bucket"):
        provenance.Provenance("fitted", "f.json", 64, ((64, 1.0), (128, 2.0), (provenance.FITTED, 0.5)))
    with pytest.raises(ValueError, match="has neighbours"):
        provenance.Provenance("fitted")


def test_only_a_stored_neighbour_provenance_has_neighbours():
    with pytest.raises(ValueError, match="has neighbours"):
        provenance.Provenance("stored", "f.json", 64, ((64, 1.0), (128, 2.0)))
    with pytest.raises(ValueError, match="has neighbours"):
        provenance.Provenance("stored-neighbour", "f.json", 64)
    with pytest.raises(ValueError, match="has a file and a bucket"):
        provenance.Provenance("stored-neighbour", neighbours=((64, 1.0), (128, 2.0)))
