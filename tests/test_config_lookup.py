"""The config lookup's order (configs/config_sources.py, tuning.choose): the GPU's own tuned configs, else the nearest
GPU's of the same compute capability (borrowed), else an earlier run's search (searched), else a search here whose
winner is stored; each only from a bucket in reach of M's; the lock on a stored file.  No kernel runs: a fake
tunable's launches return their BLOCK_N, and the quick timer returns the µs each config is given here."""

from __future__ import annotations

import json
import multiprocessing
import time
from types import SimpleNamespace

import pytest

from gemmbench import gpu_parts, registry
from gemmbench.configs import config_files, config_sources, tuning
from gemmbench.kernels.dense_dp import DenseConfig
from gemmbench.kernels.gluon_ws_config import GluonConfig
from gemmbench.shapes import Problem

NAME = "fake_lookup"  # never registered: choose() loads files through the tunable's config_type
P = Problem("s", "qkv", 64, 4242, 8192, "bf16")  # a shape no shipped file has
SMALL = DenseConfig.tile(16, 64, 128, 4, 3)  # BLOCK_N 64
LARGE = DenseConfig.tile(64, 128, 64, 8, 4)  # BLOCK_N 128
H100, H200, H800 = "NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA H800"


def test_nearest_hopper_parts_in_the_documented_order():
    # Worked from the table: H200 has 132 SMs, 227 KiB, 50 MiB, 4800 GB/s.  132-SM parts first (same shared memory
    # and L2), by bandwidth distance: H200 NVL 0, GH200 144G 100, GH200 480GB 800, H100 NVL 900, then H100 SXM and
    # H800 both 1450, tied, so by name ("NVIDIA H100 80GB HBM3" < "NVIDIA H800"); then the 114-SM PCIe parts
    # (18 SMs away; both 2000 GB/s, by name), then H20 (54 SMs away).
    want = ["NVIDIA H200 NVL", "NVIDIA GH200 144G HBM3e", "NVIDIA GH200 480GB", "NVIDIA H100 NVL", H100, H800,
            "NVIDIA H100 PCIe", "NVIDIA H800 PCIe", "NVIDIA H20"]  # fmt: skip
    got = gpu_parts.nearest_first(gpu_parts.find(H200), list(gpu_parts.PARTS))
    assert [p.name for p in got] == want


def test_another_capability_never_borrows():
    blackwell = gpu_parts.GpuPart("NVIDIA B200", (10, 0), 148, 227, 126, 8000.0)
    assert gpu_parts.nearest_first(blackwell, list(gpu_parts.PARTS)) == []
    ada = gpu_parts.GpuPart("NVIDIA L40S", (8, 9), 142, 99, 96, 864.0)
    assert gpu_parts.nearest_first(ada, list(gpu_parts.PARTS)) == []


def test_a_name_is_found_as_the_driver_or_a_folder_writes_it():
    assert gpu_parts.find("NVIDIA_H100_80GB_HBM3").name == H100
    assert gpu_parts.find(H200).sms == 132 and gpu_parts.find("NVIDIA A100-SXM4-80GB") is None


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """The user's config folder in tmp; a tunable with two quick candidates whose launches return their BLOCK_N;
    the quick timer returns us[BLOCK_N], the side-by-side re-timing keeps the quick times (spread 0)."""
    monkeypatch.setenv(tuning.CONFIG_DIR_ENV, str(tmp_path))
    for env in (config_sources.RETUNE_ENV, config_sources.BORROW_ENV, config_sources.STORE_ENV,
                config_sources.NO_OWN_ENV):  # fmt: skip
        monkeypatch.delenv(env, raising=False)
    monkeypatch.setenv(config_sources.BORROW_ENV, "1")  # --borrow: the tests of borrowing turn it off where they ask
    state = {"us": {64: 5.0, 128: 3.0}, "timed": [], "gpu": H800}
    monkeypatch.setattr(tuning, "_gpu_name", lambda inputs: state["gpu"])
    monkeypatch.setattr(tuning, "_retime", lambda finalists: None)
    monkeypatch.setattr(tuning, "_tool_versions", lambda: {})

    def quick_median_us(fn, budget_s=0.05):
        state["timed"].append(fn())
        return state["us"][state["timed"][-1]]

    monkeypatch.setattr(tuning, "quick_median_us", quick_median_us)
    build = lambda problem, inputs, config: registry.Launch(fn=lambda: config.BLOCK_N, params=config)  # noqa: E731
    state["tunable"] = tuning.Tunable(NAME, lambda p, on_gpu, full: [SMALL, LARGE], build, DenseConfig)
    tuning._chosen.clear()
    yield state
    tuning._chosen.clear()


def _tune(gpu: str, M: int, config: DenseConfig) -> str:
    """A tune's entry (no "source") of bucket M in the user's folder; its file."""
    return str(config_files.save(NAME, P.with_(M=M), gpu, config, 1.0, {}))


def _choose(state, M: int = 64) -> dict:
    tuning._chosen.clear()
    return state["tunable"].make(P.with_(M=M), None).config


def test_own_configs_come_first(fake):
    _tune(H100, 64, LARGE)
    file = _tune(H800, 64, SMALL)
    config = _choose(fake)
    assert config["source"] == "stored" and config["file"] == file and config["BLOCK_N"] == 64
    assert fake["timed"] == []


def test_the_nearest_lender_with_configs_is_borrowed_from(fake):
    # H800 (132 SMs, 3350 GB/s): H100 SXM is 0 GB/s away, H200 1450; with H100's file gone, H200 lends
    file = _tune(H100, 64, LARGE)
    _tune(H200, 64, SMALL)
    config = _choose(fake)
    assert (config["source"], config["borrowed"], config["file"], config["bucket"]) == (
        "borrowed", "NVIDIA_H100_80GB_HBM3", file, 64)  # fmt: skip
    assert config["BLOCK_N"] == 128 and fake["timed"] == []
    config_files.config_path(NAME, P, H100).unlink()
    assert _choose(fake)["borrowed"] == "NVIDIA_H200"


def test_a_bucket_out_of_reach_passes_to_the_next_source(fake):
    _tune(H800, 16, SMALL)  # M 64's bucket is 64: 16 is two buckets away
    _tune(H100, 32, LARGE)  # one bucket away: in reach
    config = _choose(fake)
    assert config["source"] == "borrowed" and config["bucket"] == 32
    assert _choose(fake, M=20)["source"] == "stored"  # M 20's bucket 32: the own 16 is one away
    assert config_files.in_reach([16, 32, 64, 128, 256], 64, moe=False) == [32, 64, 128]
    assert config_files.in_reach([1, 2, 4, 8], 3, moe=True) == [2, 4, 8]  # 3 tokens: bucket 4


def test_nothing_stored_searches_stores_and_the_next_run_reads_it(fake):
    config = _choose(fake)
    assert config["source"] == "searched" and config["BLOCK_N"] == 128 and config["bucket"] == 64
    data = json.loads(open(config["file"]).read())
    assert data["buckets"]["64"]["source"] == "searched" and data["gpu"] == H800
    fake["timed"].clear()
    again = _choose(fake)
    assert again == config and fake["timed"] == []  # read, not searched again


def test_a_stored_search_among_other_candidates_is_searched_again(fake):
    _choose(fake)  # a search among SMALL and LARGE stored; LARGE (3.0 µs) won
    # another build adds a quick candidate (faster still): its run must time it, not read the older winner
    wide = DenseConfig.tile(16, 256, 128, 4, 3)
    fake["us"][256] = 2.0
    build = fake["tunable"].build
    fake["tunable"] = tuning.Tunable(NAME, lambda p, on_gpu, full: [SMALL, LARGE, wide], build, DenseConfig)
    fake["timed"].clear()
    config = _choose(fake)
    assert config["source"] == "searched" and config["BLOCK_N"] == 256 and sorted(fake["timed"]) == [64, 128, 256]
    fake["timed"].clear()
    assert _choose(fake) == config and fake["timed"] == []  # the same candidates: read, not searched again


def test_a_lender_comes_before_a_stored_search_and_borrowing_is_off_by_default(fake, monkeypatch):
    _choose(fake)  # a search stored for H800, bucket 64
    _tune(H100, 64, SMALL)
    assert _choose(fake)["source"] == "borrowed"
    monkeypatch.delenv(config_sources.BORROW_ENV)  # the default: no --borrow
    assert config_sources.Policy.from_env() == config_sources.Policy() and not config_sources.Policy().borrow
    assert _choose(fake)["source"] == "searched"


def test_own_configs_can_be_skipped_to_measure_borrowing(fake, monkeypatch):
    _tune(H800, 64, SMALL)
    _tune(H100, 64, LARGE)
    monkeypatch.setenv(config_sources.NO_OWN_ENV, "1")
    assert _choose(fake)["source"] == "borrowed"
    monkeypatch.delenv(config_sources.BORROW_ENV)
    monkeypatch.setenv(config_sources.STORE_ENV, "0")
    assert _choose(fake) == {**LARGE.to_dict(), "source": "searched"}


def test_storing_off_and_retune(fake, monkeypatch):
    monkeypatch.setenv(config_sources.STORE_ENV, "0")
    assert _choose(fake) == {**LARGE.to_dict(), "source": "searched"}
    assert not config_files.config_path(NAME, P, H800).exists()
    monkeypatch.delenv(config_sources.STORE_ENV)
    _tune(H800, 64, SMALL)
    monkeypatch.setenv(config_sources.RETUNE_ENV, "1")
    assert _choose(fake) == {**LARGE.to_dict(), "source": "searched"}  # stored configs skipped, nothing stored
    assert json.loads(config_files.config_path(NAME, P, H800).read_text())["buckets"]["64"]["config"]["BLOCK_N"] == 64


def test_a_search_never_replaces_a_tunes_entry(fake):
    about = {"source": config_files.SEARCHED}
    _tune(H800, 64, SMALL)
    config_files.save(NAME, P, H800, LARGE, 1.0, about)
    entry = json.loads(config_files.config_path(NAME, P, H800).read_text())["buckets"]["64"]
    assert entry["config"]["BLOCK_N"] == 64 and "source" not in entry


def test_ties_go_to_the_first_in_the_spaces_order():
    a, b, c = (tuning.Trial(DenseConfig.tile(16, n, 64, 4, 3), us) for n, us in ((32, 10.0), (64, 9.95), (128, 9.0)))
    # 9.95 vs 10.0: 0.5 % apart, within TIE (1 %): the earlier in the order wins
    assert tuning.pick([b, a], [a.params, b.params])[0] is a
    # c is 10 % faster than b: no tie
    assert tuning.pick([c, b, a], [a.params, b.params, c.params])[0] is c
    # a spread of 12 % makes c and b one
    c.spread = 0.12
    assert tuning.pick([c, b, a], [b.params, c.params, a.params])[0] is b


def test_coarse_then_fine_candidates():
    full = [DenseConfig.tile(16, n, k, w, 3) for n in (32, 64, 128) for k in (64, 128) for w in (4, 8)]  # 12
    quick = [full[5]]
    coarse = tuning.coarse_candidates(full, quick)
    assert coarse[0] == full[5] and set(coarse[1:]) <= set(full) and len(coarse) == len(set(coarse))
    # one field apart: BLOCK_N 32 -> 64 only; not two fields
    assert tuning.one_apart(full[0], full[4]) and not tuning.one_apart(full[0], full[5])


def test_a_tunes_fine_round_changes_the_way_of_promoting_as_one_field(fake):
    # the Gluon kernel's way of promoting is spelled by PROMOTE_OVERLAP, PROMOTE_WAVES and TURNS: the waves (TURNS
    # unset, False or True) and the overlapped partials.  A space of 6 depths x those 4 ways, depth outer: 24
    # configs, so the coarse pass takes every 2nd (24 // COARSE 12): the waves unset and in turns, never the
    # overlapped.  The quick candidate, the waves unset at 6 stages (3 µs), is fastest of the coarse pass; the
    # overlapped at 6 stages (2 µs) differs from it in PROMOTE_OVERLAP and PROMOTE_WAVES: one choice, so the fine round
    # times it and it wins.  Counted as two fields, no round would reach it (every other config 5 µs)
    ways = ({"PROMOTE_WAVES": 1}, {"PROMOTE_WAVES": 1, "TURNS": False}, {"PROMOTE_WAVES": 1, "TURNS": True},
            {"PROMOTE_OVERLAP": True})  # fmt: skip
    full = [
        GluonConfig.tile(128, 64, 128, 4, st, SCHEDULE="halves", BLOCK_N2=16, **w) for st in range(3, 9) for w in ways
    ]
    waves6, overlapped6 = full[3 * 4], full[3 * 4 + 3]
    fake["us"] = {c: 5.0 for c in full} | {waves6: 3.0, overlapped6: 2.0}
    build = lambda problem, inputs, config: registry.Launch(fn=lambda: config, params=config)  # noqa: E731
    t = tuning.Tunable(NAME, lambda p, on_gpu, is_full: full if is_full else [waves6], build, GluonConfig)
    trials, _ = tuning.tune_search(t, P, None, None, budget_s=60.0, refine=1)
    assert overlapped6 not in fake["timed"][:12]  # the coarse pass: the 12 sampled, the quick one among them
    assert trials[0].params == overlapped6
    # one apart, by hand: a depth alone, a way alone (the turns, or waves to overlapped); not both
    assert tuning.one_apart(waves6, full[3 * 4 + 1]) and tuning.one_apart(waves6, full[2 * 4])
    assert not tuning.one_apart(full[2 * 4], overlapped6)


def _space_of_48(fake, quick: list[int]) -> tuple[list, tuning.Tunable]:
    """A 48-config space (BLOCK_N 32, 64, 128 by sixteens: full[32:] are BLOCK_N 128) whose launches return their
    config, each timed at fake["us"][config]: 4, 5 and 3 µs by BLOCK_N; quick: the quick candidates' places."""
    full = [
        DenseConfig.tile(16, n, k, w, s) for n in (32, 64, 128) for k in (64, 128) for w in (4, 8) for s in (2, 3, 4, 5)
    ]
    fake["us"] = {c: {32: 4.0, 64: 5.0, 128: 3.0}[c.BLOCK_N] for c in full}
    build = lambda problem, inputs, config: registry.Launch(fn=lambda: config, params=config)  # noqa: E731
    return full, tuning.Tunable(NAME, lambda p, on_gpu, is_full: full if is_full else [full[i] for i in quick], build,
                                DenseConfig)  # fmt: skip


def test_a_tune_past_its_budget_still_times_its_whole_coarse_pass(fake):
    # three quick candidates of the 48-config space and no time at all: the coarse pass is the quick ones, then
    # every 4th config (48 // COARSE 12), full[0] already among the quick: 3 + 11 = 14 timed, and no fine round after
    # (compiling the candidates can spend a short budget by itself; a first job must not time fewer than a later one)
    full, t = _space_of_48(fake, [41, 0, 21])
    trials, space = tuning.tune_search(t, P, None, None, budget_s=0.0, refine=1)
    coarse = [full[41], full[0], full[21]] + [full[i] for i in range(4, 48, 4)]
    assert (
        space == 48
        and fake["timed"] == coarse
        and sorted(map(str, (x.params for x in trials))) == sorted(map(str, coarse))
    )


def test_a_tunes_rounds_are_timed_whole_and_its_budget_is_checked_between_them(fake, monkeypatch):
    # each timing takes 1 s of a fake clock, and on a cold kernel cache each compile 1 s more (a round's candidates
    # compile together before any is timed).  The 48-config space's coarse pass is 14 configs (as above); by hand, its
    # two best (3 µs, ties in the order timed) are full[41] (BLOCK_N 128, K 128, 4 warps, 3 stages) and full[32]
    # (128, 64, 4, 2), and the untried configs one field from them, in the space's order: 9 and 25 (BLOCK_N), 33 (K
    # 64; and 3 stages from full[32]), 34, 35 (full[32]'s stages), 42, 43 (41's stages), 45 (8 warps).  full[9] is made
    # faster (2 µs), so a second round would follow; with 5 s of budget the first round, 8 timings, ends past it: no
    # second round, warm or cold (a budget checked inside a round would time 6 of them warm, fewer cold)
    clock = [0.0]
    timed = tuning.quick_median_us

    def one_second(fn, budget_s=0.05):
        clock[0] += 1.0
        return timed(fn, budget_s)

    def tune(budget_s: float, cold: bool) -> list:
        fake["timed"].clear()
        first_calls = lambda launches, beat: clock.__setitem__(0, clock[0] + len(launches))  # noqa: E731
        monkeypatch.setattr(tuning, "_first_calls", first_calls if cold else lambda launches, beat: None)
        tuning.tune_search(t, P, None, None, budget_s=budget_s, refine=1)
        return list(fake["timed"])

    monkeypatch.setattr(tuning, "quick_median_us", one_second)
    monkeypatch.setattr(tuning, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    full, t = _space_of_48(fake, [41, 0, 21])
    fake["us"][full[9]] = 2.0
    coarse = [full[41], full[0], full[21]] + [full[i] for i in range(4, 48, 4)]
    first_round = [full[i] for i in (9, 25, 33, 34, 35, 42, 43, 45)]
    assert tune(5.0, cold=False) == tune(5.0, cold=True) == coarse + first_round
    # a budget the first round ends within: a second round, around full[9]
    longer = tune(60.0, cold=False)
    assert longer[: len(coarse) + 8] == coarse + first_round and len(longer) > len(coarse) + 8


def test_a_retune_keeps_the_stored_config_unless_beaten_beyond_the_noise(fake):
    # The coarse pass of budget 0 is the quick full[0], then every 4th config (12 in all); its BLOCK_N 128 ones (32,
    # 36, 40 and 44) tie at 3 µs as the four fastest, and full[32] is first of them in the space's order.
    full, t = _space_of_48(fake, [0])
    coarse = [full[i] for i in range(0, 48, 4)]

    def tune(raced, **kw):  # raced: the stored config the tune must report it raced
        fake["timed"].clear()
        trials, path, before = tuning.tune_and_store(t, P, None, None, budget_s=0.0, **kw)
        assert before == raced
        return trials[0].params, json.loads(path.read_text())["buckets"]["64"]["config"], len(trials)

    assert tune(None) == (full[32], full[32].to_dict(), 12)  # nothing stored: the space's first of the tied
    # full[47] stored (BLOCK_N 128, outside the coarse sample): timed first, tied at 3 µs, kept
    _tune(H800, 64, full[47])
    assert tune(full[47]) == (full[47], full[47].to_dict(), 13) and fake["timed"] == [full[47]] + coarse
    # 3.02 µs: fifth by its first timing, behind the four at 3; re-timed with them, within TIE (1 %) of them: kept
    fake["us"][full[47]] = 3.02
    assert tune(full[47])[0] == full[47]
    # so in an exhaustive tune too, where sixteen configs time 3 µs before it
    assert tune(full[47], exhaustive=True)[0] == full[47] and fake["timed"][0] == full[47] and len(fake["timed"]) == 48
    # full[2] stored (BLOCK_N 32, 4 µs): timed first, a third slower than 3 µs, replaced
    _tune(H800, 64, full[2])
    assert tune(full[2]) == (full[32], full[32].to_dict(), 13) and fake["timed"][0] == full[2]
    # a stored config the space no longer holds (BLOCK_N 256) is reported, not raced
    gone = DenseConfig.tile(16, 256, 64, 4, 2)
    _tune(H800, 64, gone)
    assert tune(gone)[0] == full[32] and fake["timed"] == coarse
    # another GPU's stored config is not this GPU's to keep
    fake["gpu"] = H100
    _tune(H800, 64, full[47])
    assert tune(None)[0] == full[32] and fake["timed"] == coarse


def _store_one(root: str, bucket: int) -> None:
    import os

    os.environ[tuning.CONFIG_DIR_ENV] = root
    open(os.path.join(root, "ready"), "w").close()  # imports done: the store comes next
    config_files.save(NAME, P.with_(M=bucket), H800, SMALL, float(bucket), {})


def test_a_store_waits_for_the_files_lock(tmp_path):
    # another worker holds the lock of the file: this store must wait, then add its bucket to what that one wrote
    from filelock import FileLock

    path = tmp_path / "NVIDIA_H800" / NAME / "N=4242,K=8192,dtype=bf16.json"
    path.parent.mkdir(parents=True)
    child = multiprocessing.get_context("spawn").Process(target=_store_one, args=(str(tmp_path), 32))
    with FileLock(path.parent / f".{path.name}.lock"):
        child.start()
        deadline = time.monotonic() + 60
        while not (tmp_path / "ready").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        child.join(1.0)  # a second after it set out to store
        assert child.is_alive() and not path.exists()  # blocked on the lock
        path.write_text(json.dumps({"gpu": H800, "buckets": {"16": {"config": SMALL.to_dict()}}}))
    child.join(60)
    assert sorted(json.loads(path.read_text())["buckets"]) == ["16", "32"]
