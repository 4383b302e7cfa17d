"""The referee: what a variant's samples cannot show by themselves, judged after they are taken, in the cell's own
timing mode.  A row that fails here is never `ok`, so it is never ranked and never a speedup.

  the clock     a plugin that replaced a timing function (clock.patched): `error`, blamed on the plugin whose file
                defines the replacement, or on every row while it is unknown
  persisting L2 a batch that set L2 aside for persisting lines or an access-policy window (Prepared.l2_flag): `error`
  the window    a kernel that CUPTI saw end after the caller's stream moved past the call, in the one profiled call
                that names a row's kernels (Timer.capture_kernels, Prepared.late), is `error: work outside the timed
                window`; where CUPTI could not look, untimed eager calls between two events are followed by two
                device synchronizes, and a first that waits BUSY_US longer than the second, every time, says so
  the outputs   the activations (A and its scales) refilled in place with a fresh randn draw, every output the timed
                calls write poisoned with NaN, the timed call (or graph) run once more, and its first and last copies'
                outputs checked against a fresh fp32 reference: a cache by first call, address or fingerprint, work
                done in make(), or a stale output is `wrong: a timed call's output`; so is an output that shares
                memory with an input or with another copy's output
  the time      on a GPU, the call on the fresh draw and one more on another: when the faster of the two is over
                FRESH_SLOWER times the samples' median (and FRESH_FLOOR_US above it), the samples did not time the
                work (a cache keyed on the values, which misses on fresh ones): `wrong`; not in cupti timing, whose
                samples hold kernel time alone

The references are computed after the first call that needs them and kept for the problem's other variants (one
fresh draw for all), so no output can land in memory that held a right answer; every output checked is poisoned
again before it is let go, for the same reason (an uninitialised output reusing a freed right result).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import torch

from gemmbench.measure import check
from gemmbench.measure.clock import busy_after_call_us, patched
from gemmbench.measure.inputs import GemmInputs, refill_activations_
from gemmbench.measure.timing import Prepared, Timer
from gemmbench.shapes import Problem

FRESH_SEED = 104_729  # the fresh draws' seeds: the cell's timing seed plus this, and plus 1 for the second timed call
FRESH_SLOWER = 2.0
FRESH_FLOOR_US = 20.0
# Where CUPTI cannot look: a device synchronize that waits this much longer than the one after it, on every one of
# BUSY_PROBES probes, waited for work the call left running (set above what honest calls measured: docs/BENCHMARKS.md,
# "The referee")
BUSY_US = 100.0
BUSY_PROBES = 3
TIMED_OUTPUT = "a timed call's output"


@dataclass(frozen=True)
class Verdict:
    status: str  # "wrong" or "error"
    reason: str


def clock_verdict(replaced: dict, source: str) -> Optional[Verdict]:
    """The clock's verdict on a variant from `source` (its plugin file, or "builtin"): replaced is clock.patched().
    Blamed where the replacement is defined in that file; any replacement of unknown origin is every row's."""
    if not replaced:
        return None
    where = {name: _defined_in(fn) for name, fn in replaced.items()}
    mine = [n for n, f in where.items() if f is not None and source != "builtin" and _same_file(f, source)]
    unknown = [n for n, f in where.items() if f is None]
    names = mine or unknown
    if not names:
        return None
    by = f"by {source}" if mine else "by code gemmbench cannot place"
    return Verdict("error", f"the timer was replaced ({', '.join(names)}, {by}): samples taken beside it cannot be "
                            "trusted; gemmbench times with the functions it held at import")  # fmt: skip


def _defined_in(fn: Any) -> Optional[str]:
    try:
        return inspect.getsourcefile(fn)
    except TypeError:  # a builtin or a C function: no file to blame
        return None


def _same_file(a: str, b: str) -> bool:
    return Path(a).resolve() == Path(b).resolve()


def shared_memory(outputs: Sequence[Any], inputs: Sequence[GemmInputs]) -> Optional[str]:
    """Where an output shares its memory with an input tensor or with another copy's output: the words of the
    finding, or None.  Tensors share memory when they view one storage (the caching allocator gives every tensor it
    allocates a storage of its own)."""
    owner: dict[int, str] = {}
    for i, inp in enumerate(inputs):
        for field, t in _tensors(inp).items():
            owner.setdefault(_storage(t), f"copy {i}'s input {field}")
    for i, out in enumerate(outputs):
        if not isinstance(out, torch.Tensor):
            continue
        key = _storage(out)
        if key in owner:
            return f"copy {i}'s output shares memory with {owner[key]}"
        owner[key] = f"copy {i}'s output"
    return None


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _tensors(inputs: GemmInputs) -> dict[str, torch.Tensor]:
    """An input copy's tensors by field name."""
    fields = ("a", "b", "a_scale", "b_scale", "topk_ids", "topk_weights")
    return {f: t for f in fields if isinstance(t := getattr(inputs, f), torch.Tensor)}


def fresh_time_verdict(fresh_us: Sequence[float], median_us: float) -> Optional[Verdict]:
    """The verdict on calls each made on a fresh draw of the activations: `wrong` where the fastest of them is over
    FRESH_SLOWER times the samples' median and FRESH_FLOOR_US above it (pure: tested on a CPU)."""
    fresh = min(fresh_us)
    if fresh > FRESH_SLOWER * median_us and fresh - median_us > FRESH_FLOOR_US:
        return Verdict("wrong", f"a timed call's time: on fresh inputs the call took {fresh:.4g} µs (the fastest of "
                                f"{len(fresh_us)}), {fresh / median_us:.1f}x its samples' median {median_us:.4g} µs: "
                                "the samples did not time the work")  # fmt: skip
    return None


class Referee:
    """The referee of one problem's timed variants: its input copies (those the samples ran on) and the fresh
    draw's seed; the references of the first and last copies are made once, after the first call that needs them."""

    def __init__(self, problem: Problem, copies: list[GemmInputs], seed: int, timer: Timer):
        self.problem, self.copies, self.seed, self.timer = problem, copies, seed + FRESH_SEED, timer
        self.gpu = copies[0].a.is_cuda
        self._refs: dict[int, tuple[torch.Tensor, float]] = {}  # copy index -> (fp32 reference, tolerance)

    def judge(self, variant: Any, p: Prepared, launches: Sequence[Any], median_us: float) -> Optional[Verdict]:
        """The referee's verdict on one variant's samples (see the module's docstring), or None: they stand."""
        source = getattr(variant, "source", "builtin")
        verdict = clock_verdict(patched(), source) or self._persisting(p) or self._window(p)
        if verdict is not None:
            return verdict
        verdict, fresh_us = self._outputs(variant, p, launches)
        return verdict or self._time(p, median_us, fresh_us)

    @staticmethod
    def _persisting(p: Prepared) -> Optional[Verdict]:
        return Verdict("error", p.l2_flag) if p.l2_flag else None

    def _window(self, p: Prepared) -> Optional[Verdict]:
        """Work the call left running: CUPTI's records of the profiled call where it was profiled (Prepared.late),
        else the synchronize probes.  A graph mode's capture refuses a stream left unjoined: nothing to look for."""
        if not self.gpu or p.captured:
            return None
        if p.late is not None:
            if not p.late:
                return None
            names = ", ".join(dict.fromkeys(r.name for r in p.late))
            return Verdict("error", f"work outside the timed window: {len(p.late)} kernel(s) ({names[:160]}) still "
                                    "ran after the caller's stream had moved on (CUPTI)")  # fmt: skip
        waited = [busy_after_call_us(p.keep[0]) for _ in range(BUSY_PROBES)]
        if min(waited) >= BUSY_US:
            return Verdict("error", f"work outside the timed window: the device was still busy {min(waited):.0f} µs "
                                    "after the call's end event, on every probe (work left on another stream)")  # fmt: skip
        return None

    def _outputs(self, variant: Any, p: Prepared, launches: Sequence[Any]) -> tuple[Optional[Verdict], float]:
        """(the verdict on the outputs of a call on the fresh draw, that call's time in µs)."""
        self._refill(self.seed)
        for launch in launches:
            check.poison(launch.out)
        for out in p.captured:
            check.poison(out)
        outputs, us = self.timer.rerun(p)
        try:
            aliased = shared_memory(outputs, self.copies)
            if aliased:
                return Verdict("wrong", f"{TIMED_OUTPUT}: {aliased}"), us
            for i in sorted({0, len(outputs) - 1}):
                found = self._check(variant, i, outputs[i])
                if found is not None:
                    where = f" (copy {i} of {len(outputs)})" if len(outputs) > 1 else ""
                    return Verdict("wrong", f"{TIMED_OUTPUT} on fresh inputs{where}: {found}"), us
            return None, us
        finally:  # what is let go holds no right answer for the next variant's empty tensor; an input stays whole
            held = {_storage(t) for inp in self.copies for t in _tensors(inp).values()}
            for out in outputs:
                if isinstance(out, torch.Tensor) and out.is_floating_point() and _storage(out) not in held:
                    check.poison(out)

    def _check(self, variant: Any, i: int, out: Any) -> Optional[str]:
        inputs = self.copies[i]
        if self.gpu:
            torch.cuda.synchronize()
        own = getattr(variant, "check", None)
        if own is not None:  # not a GEMM output (moe_align): the variant's own check
            res = own(self.problem, inputs, out)
        else:
            if i not in self._refs:  # after a call: the reference's memory was never free for an output to reuse
                ref = check.reference(self.problem, inputs)
                self._refs[i] = (ref, check.cell_tolerance(self.problem, inputs, ref)[0])
            ref, tol = self._refs[i]
            res = check.compare(self.problem, out, ref, check.owned_rows(inputs), tol)
        return None if res.ok else res.detail

    def _time(self, p: Prepared, median_us: float, fresh_us: float) -> Optional[Verdict]:
        # wall time on a CPU moves by more than FRESH_SLOWER between calls; cupti samples are kernel time alone, which
        # an event-timed call (launch gaps included) cannot be held against (and a call that runs no kernel fails them)
        if not self.gpu or self.timer.spec.sampler == "activity_records":
            return None
        self._refill(self.seed + 1)
        return fresh_time_verdict([fresh_us, self.timer.rerun(p)[1]], median_us)

    def _refill(self, seed: int) -> None:
        for i, inputs in enumerate(self.copies):
            refill_activations_(inputs, seed + 7919 * i)
