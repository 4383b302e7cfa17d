"""gemmbench.measure.launch_hold on a CPU, with a fake clock: a batch is kept only when the host queued it inside the hold,
the next hold follows the host's pace, and a host slower than the longest hold is an error, not a sample."""

import pytest

from gemmbench.measure import launch_hold
from gemmbench.measure.launch_hold import HostTooSlow, LaunchHold


class FakeGpu:
    """A clock that the 'host' advances by the queuing times given, and a record of the spins and syncs."""

    def __init__(self, host_us):
        self.t = 0.0
        self.host_us = list(host_us)
        self.spins, self.syncs, self.batches = [], 0, 0

    def now(self):
        return self.t

    def spin(self, cycles):
        self.spins.append(cycles / launch_hold.SPIN_CYCLES_PER_US)

    def sync(self):
        self.syncs += 1

    def enqueue(self):
        self.batches += 1
        self.t += self.host_us.pop(0) / 1e6
        return [f"batch {self.batches}"]


def hold_for(gpu):
    return LaunchHold(gpu.spin, gpu.now, gpu.sync)


def test_a_batch_queued_inside_the_hold_is_kept_and_the_next_hold_follows_the_host():
    gpu = FakeGpu([400.0, 500.0])
    hold = hold_for(gpu)
    assert hold.run(gpu.enqueue) == ["batch 1"]
    assert gpu.spins == [pytest.approx(launch_hold.FIRST_HOLD_US)]
    assert hold.hold_us == pytest.approx(launch_hold.MARGIN * 400.0)  # shorter: the host was quick
    assert hold.run(gpu.enqueue) == ["batch 2"]
    assert gpu.spins[1] == pytest.approx(600.0) and hold.retries == 0 and gpu.syncs == 0


def test_a_batch_queued_slower_than_the_hold_is_taken_again_with_a_longer_hold():
    gpu = FakeGpu([1500.0, 1600.0])  # the first try overruns the 1000 µs hold, the second fits 2250 µs
    hold = hold_for(gpu)
    assert hold.run(gpu.enqueue) == ["batch 2"]
    assert gpu.spins == [pytest.approx(1000.0), pytest.approx(2250.0)]
    assert hold.retries == 1 and gpu.syncs == 1  # the late batch ran to the end before it was dropped


def test_a_host_slower_than_every_hold_is_an_error():
    gpu = FakeGpu([launch_hold.MAX_HOLD_US * 2] * launch_hold.TRIES)
    with pytest.raises(HostTooSlow, match="host launch latency"):
        hold_for(gpu).run(gpu.enqueue)
    assert gpu.batches == launch_hold.TRIES


def test_the_spin_lasts_at_least_the_hold_at_the_fastest_hopper_clock():
    # cycles at SPIN_CYCLES_PER_US per µs take at least that many µs at any SM clock up to 1980 MHz
    assert launch_hold.SPIN_CYCLES_PER_US >= 1980
