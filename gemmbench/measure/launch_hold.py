"""Keeps the host's launch latency out of event-timed samples: a batch's launches are queued behind a GPU spin that
outlasts the host's queuing of them (nvbench's "blocking kernel" does the same with a flag), so the GPU never
waits on the host between a start and an end event.

Why (measured on the H100, docs/BENCHMARKS.md): in cold mode the eviction queued
before each start event was meant to hide the host's launch latency, and it does while the host queues a sample
faster than the GPU runs it (a 256 MiB read, ~85 µs).  A Triton launch takes the host tens of µs; when a batch's
host time per sample passed the GPU's, the GPU idled inside the timed interval: a SplitK kernel of 7.2 µs (CUPTI)
read 28.9-35.5 µs cold, a cuBLAS kernel of 5.4 µs read 8.5 µs in one batch and 11.4 in another.  Cold mode holds
its batches; stream mode does not (gemmbench.measure.timing says why).

The check is exact, not a guess: the spin is queued first and lasts at least `hold_us` from the moment it was
queued; if the host has queued the whole batch within `hold_us` of that moment, no launch can have reached the
GPU late.  A batch queued slower is thrown away (after its GPU work finishes) and taken again with a longer hold.
"""

from __future__ import annotations

from typing import Callable, Optional

# The spin is torch.cuda._sleep(cycles): cycles counted at the SM clock.  At this rate, above any Hopper's top SM
# clock (H100 and H200: 1980 MHz), a spin of hold_us * SPIN_CYCLES_PER_US cycles lasts at least hold_us.
SPIN_CYCLES_PER_US = 2100
FIRST_HOLD_US = 1000.0
MAX_HOLD_US = 200_000.0
MARGIN = 1.5  # the next hold: this much longer than the host's last batch took
TRIES = 4


class HostTooSlow(RuntimeError):
    """The host queued a batch slower than its hold on every one of TRIES tries."""


class LaunchHold:
    """Runs `enqueue` (which queues a batch of timed launches and returns what to read back once the GPU is done)
    behind a spin, retrying with a longer hold until the host's queuing fits inside it.  spin, now and sync are
    torch.cuda._sleep, time.perf_counter and torch.cuda.synchronize on a GPU; tests pass fakes."""

    def __init__(self, spin: Callable[[int], None], now: Callable[[], float], sync: Callable[[], None]):
        self.spin, self.now, self.sync = spin, now, sync
        self.hold_us = FIRST_HOLD_US
        self.retries = 0  # batches thrown away because the host was slower than the hold

    def run(self, enqueue: Callable[[], list]) -> list:
        host_us: Optional[float] = None
        held_us = self.hold_us
        for _ in range(TRIES):
            held_us = self.hold_us
            t0 = self.now()
            self.spin(int(self.hold_us * SPIN_CYCLES_PER_US))
            queued = enqueue()
            host_us = (self.now() - t0) * 1e6
            fitted = host_us <= self.hold_us
            # the next hold follows the host's pace, up or down, with a margin
            self.hold_us = min(MAX_HOLD_US, max(FIRST_HOLD_US / 10, MARGIN * host_us))
            if fitted:
                return queued
            self.retries += 1
            self.sync()  # the late batch's events are dropped once its work has run
        raise HostTooSlow(
            f"the host took {host_us:.0f} µs to queue a batch of timed launches, longer than the GPU was held "
            f"({held_us:.0f} µs, the {TRIES}th try): samples would include host launch latency"
        )


def cuda_hold(now: Callable[[], float], sync: Callable[[], None]) -> LaunchHold:
    """The hold on the GPU; `now` and `sync` are the timer's own clock (gemmbench.measure.timing holds them)."""
    import torch

    return LaunchHold(torch.cuda._sleep, now, sync)
