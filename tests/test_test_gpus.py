"""How the GPU tests share a machine (tests/conftest.py): xdist workers spread round robin over GEMMBENCH_TEST_GPUS."""

from conftest import worker_gpu


def test_workers_spread_round_robin_over_the_listed_gpus():
    # by hand: 16 workers over two GPUs, gw0 gw2 ... on the first, gw1 gw3 ... on the second
    assert [worker_gpu(f"gw{i}", "0,1") for i in range(4)] == ["0", "1", "0", "1"]
    assert worker_gpu("gw15", "0,1") == "1"
    # spaces and a trailing comma are not GPUs; the ids are kept as given (physical ids, not positions)
    assert [worker_gpu(f"gw{i}", "2, 3,") for i in range(3)] == ["2", "3", "2"]
    assert worker_gpu("gw7", "5") == "5"
