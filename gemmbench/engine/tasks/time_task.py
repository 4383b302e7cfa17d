"""The `time` task (and `check`, its check alone): a problem's variants are one cell, checked on fresh inputs, then
timed side by side in interleaved rounds; each variant's row is built by rows.cell_row and sent as soon as it is
known.  The parent's side: the cells (`cells`, and under --sanitize `sanitizer_cells`, one variant per worker under
compute-sanitizer) and TimeSink, which stamps each row with its run and hands it to the run file's writer; the
worker's: `work`."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional, Protocol, cast

from gemmbench import registry
from gemmbench.engine.pool import Cell, Sink
from gemmbench.engine.rows import cell_row
from gemmbench.engine.tasks.common import FAILED, unsupported
from gemmbench.engine.worker_process import WorkerOptions
from gemmbench.measure import device, memory, telemetry
from gemmbench.measure.check import check_cell
from gemmbench.measure.inputs import cell_seed, make_inputs
from gemmbench.measure.nvtx_ranges import cell_name
from gemmbench.measure.referee import Referee
from gemmbench.measure.timing import TimingError, plan_copies
from gemmbench.results import metrics, shard
from gemmbench.shapes import Problem

SANITIZER_PADDING = 1 << 20  # bytes of guard after every allocation under --sanitize


# ---------------------------------------------------------------- the parent's side


class RowWriter(Protocol):
    """Where the sweep's rows go (store.RunWriter); one that has .flush() is flushed when the sweep ends."""

    def append(self, row: dict, /) -> None: ...


@dataclass
class Progress:
    """What the command shows while the sweep runs (all optional)."""

    row: Callable[[dict], None] = lambda row: None
    begin: Callable[[str], None] = lambda what: None
    note: Callable[[str], None] = lambda text: None


def cells(selected: list, seed: int) -> list[Cell]:
    """[(problem, [variant names])] -> the engine's cells."""
    return [
        Cell(
            "time",
            {"problem": asdict(p), "seed": cell_seed(seed, p)},
            tuple(names),
            p.label,
            cost=shard.cost(p) * len(names),
        )  # fmt: skip
        for p, names in selected
    ]


def error_row(problem: Problem, variant: str, reason: str, worker: WorkerOptions, gpu: Optional[int] = None) -> dict:
    """The row of a cell whose worker died on it (the worker could not write it), naming the GPU it ran on."""
    return cell_row(problem, registry.get(variant), "error", reason, worker.timing, worker.inputs,
                    device.provenance(gpu or 0))  # fmt: skip


@dataclass
class TimeSink(Sink):
    """Rows to the writer (stamped with the run, the process of --repeat and the time), progress to the command."""

    writer: RowWriter
    run_id: str
    process: int
    worker: WorkerOptions
    progress: Progress
    passed: dict = field(default_factory=dict)  # sanitizer cells: label -> variants whose check passed
    held: dict = field(default_factory=dict)  # sanitizer cells: label -> their rows, kept until the log is read

    def _emit(self, row: dict) -> None:
        row = dict(
            row,
            run_id=self.run_id,
            process=self.process,
            timestamp=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        )
        self.writer.append(row)
        self.progress.row(row)

    def begin(self, cell: Cell, item: str, phase: str, gpu: Optional[int]) -> None:
        self.progress.begin(f"{cell.label}  {item} ({phase})")

    def result(self, cell: Cell, item: str, rows: list, passed: bool, gpu: Optional[int]) -> None:
        if cell.task == "check":  # judged once compute-sanitizer's log is read (closed)
            self.held.setdefault(cell.label, []).extend(rows)
            if passed:
                self.passed.setdefault(cell.label, []).append(item)
            return
        for row in rows:
            self._emit(row)

    def lost(self, cell: Cell, item: str, reason: str, gpu: Optional[int]) -> None:
        row = error_row(Problem(**cell.payload["problem"]), item, reason, self.worker, gpu)
        if cell.task == "check":  # compute-sanitizer's log, read when the worker has exited, may explain it
            self.held.setdefault(cell.label, []).append(row)
        else:
            self._emit(row)

    def note(self, text: str) -> None:
        self.progress.note(text)

    def closed(self, cell: Cell, log: str, code: int) -> None:
        """A sanitizer cell's worker has exited: compute-sanitizer's finding, if any, explains whatever happened."""
        path = cell.payload["sanitizer_log"]
        report = first_sanitizer_error(Path(path).read_text(errors="replace")) if os.path.exists(path) else ""
        rows = self.held.pop(cell.label, [])
        if report:
            self.passed.pop(cell.label, None)
            [name] = cell.items
            rows = [error_row(Problem(**cell.payload["problem"]), name, f"check: compute-sanitizer: {report}",
                              self.worker)]  # fmt: skip
        for row in rows:
            self._emit(row)


def first_sanitizer_error(text: str) -> str:
    """'Invalid __global__ read of size 2 bytes at _overread_kernel+0x90 ...' from a memcheck log, or ''."""
    lines = [ln.strip("= ").strip() for ln in text.splitlines()]
    starts = ("Invalid", "Program hit", "Uninitialized", "Misaligned", "Out-of-range")
    for i, ln in enumerate(lines):
        if ln.startswith(starts):
            where = next((x for x in lines[i + 1 : i + 4] if x.startswith("at ")), "")
            return f"{ln} {where}".strip()[:400]
    return ""


def sanitizer_cells(selected: list, seed: int, folder: Path) -> list[Cell]:
    """One cell per (problem, variant), each in a worker of its own under memcheck: its log is complete only when
    its process has exited."""
    out = []
    for i, (p, names) in enumerate(selected):
        for name in names:
            log = folder / f"{i}-{name}.log"
            # --padding: small allocations sit side by side, so an overread would land in a neighbour (valid
            # memory, no report); a guard region after each allocation makes it visible
            prefix = ("compute-sanitizer", "--tool", "memcheck", "--padding", str(SANITIZER_PADDING),
                      "--log-file", str(log), "--print-limit", "20")  # fmt: skip
            payload = {"problem": asdict(p), "seed": cell_seed(seed, p), "sanitizer_log": str(log)}
            out.append(Cell("check", payload, (name,), f"{p.label} {name}", prefix=prefix))
    return out


def sanitizer_worker(worker: WorkerOptions) -> WorkerOptions:
    """The options of a worker that runs checks under compute-sanitizer: every tensor its own allocation, so that an
    overread shows; no ceilings, which its rows do not carry and which memcheck cannot time."""
    env = dict(worker.env, PYTORCH_NO_CUDA_MEMORY_CACHING="1")
    return WorkerOptions(**{**asdict(worker), "env": env, "ceilings": False})


# ---------------------------------------------------------------- the worker's side


def _run_row(ctx, problem: Problem, variant, status: str, reason: str = "", **extra: Any) -> dict:
    return cell_row(problem, variant, status, reason, ctx.args.timing, ctx.args.inputs, ctx.provenance, **extra)


def _error_rows(ctx, problem: Problem, variant, peak: Optional[int]) -> Callable[[str], list]:
    """The `error` row of a variant, with the peak GPU memory its cell reached, for ctx.failed to fill with the reason."""
    return lambda reason: [_run_row(ctx, problem, variant, "error", reason, gpu_mem_peak_bytes=peak)]


def work(ctx, task: dict) -> None:
    """Check every item (a variant name) on fresh inputs, then time the ones that passed, side by side.  Each row
    records the peak GPU memory of its cell (memory.peak_bytes): its check, and its timing's set-up and warm-up."""
    problem, seed = Problem(**task["problem"]), task["seed"]
    passed, peaks = {}, {}
    for name in task["items"]:
        variant = registry.get(name)
        reason = unsupported(ctx, name, variant, problem, _error_rows(ctx, problem, variant, None))
        if reason is FAILED:
            continue
        if reason:
            ctx.result(name, [_run_row(ctx, problem, variant, "skipped", reason)])
            continue
        ctx.begin(name, "check")
        memory.reset_peak(ctx.devname)
        try:
            inputs = make_inputs(problem, seed, ctx.devname)
            # mypy cannot infer a lambda with a default argument (n binds this variant) from the parameter's type
            checked = check_cell(
                problem, variant, inputs, on_phase=cast(Callable[[str], None], lambda ph, n=name: ctx.begin(n, ph))
            )
        except Exception as exc:  # noqa: BLE001 - recorded as the cell's error, the sweep goes on
            inputs = None  # not held through the next variant's draw
            peak = memory.peak_bytes(ctx.devname)
            ctx.failed(name, _error_rows(ctx, problem, variant, peak), "check", exc)
            continue
        res, config = checked.result, checked.launch.config
        del inputs, checked  # freed before the next variant's draw and the timing's copies (a 15 GiB weight each)
        peak = memory.peak_bytes(ctx.devname)
        if not res.ok:
            row = _run_row(ctx, problem, variant, "wrong", res.detail, max_rel_err=res.max_rel_err, config=config,
                           gpu_mem_peak_bytes=peak)  # fmt: skip
            ctx.result(name, [row])
        elif task["task"] == "check":
            ctx.result(name, passed=True)
        else:
            passed[name], peaks[name] = (variant, res.max_rel_err, res.note), peak
    if passed:
        _time(ctx, problem, passed, peaks, seed + 1)


def _time(ctx, problem: Problem, passed: dict, peaks: dict, seed: int) -> None:
    copies: Optional[tuple] = None  # (inputs copies, their timer, the plan's note, L2 state): one set for all variants
    prepared, configs, works, plans, made = {}, {}, {}, {}, {}
    recorders = {}  # telemetry.CellRecorder per variant, where NVML sees the GPU
    probe = telemetry.probe(ctx.provenance.get("gpu_uuid"))
    ctx.timer.persisting_flag()  # what the checks' set-ups left in L2 goes: each variant's own is found after its make
    for name, (variant, *_) in passed.items():
        ctx.begin(name, "time")
        memory.reset_peak(ctx.devname)  # what the copies and earlier variants' launches hold counts: it is in use
        try:
            if copies is None:
                copies = _copies(ctx, problem, seed, len(passed))
            inputs, timer, note, l2 = copies
            plans[name] = (timer, note, l2)
            made[name] = launches = [variant.make(problem, inp) for inp in inputs]
            configs[name] = launches[0]  # its config is read once it has run: the compiler's report comes with it
            # stream mode cycles through copies with different routings: the bytes of a call are the mean
            works[name] = [c.local_work() for c in inputs]
            prepared[name] = timer.prepare([x.fn for x in launches], all(x.graph_safe for x in launches),
                                           cell=cell_name(name, problem))  # fmt: skip
            timer.capture_kernels(prepared[name])  # one profiled launch, before timing (cupti: while timing)
            if probe is not None:
                rec = telemetry.CellRecorder(probe, telemetry.calls_per_sample(timer.mode, len(launches)))
                prepared[name].take, recorders[name] = rec.wrap(prepared[name].take, timer), rec
            peaks[name] = _max(peaks[name], memory.peak_bytes(ctx.devname))
        except TimingError as exc:
            ctx.result(name, [_run_row(ctx, problem, variant, "skipped", str(exc))])
        except Exception as exc:  # noqa: BLE001
            pk = _max(peaks[name], memory.peak_bytes(ctx.devname))
            ctx.failed(name, _error_rows(ctx, problem, variant, pk), "time", exc)
    current = None
    while True:
        try:
            for current in ctx.timer.rounds(prepared):  # the stopping rule is the run's, whatever each one's mode
                ctx.begin(current, "time")
            break
        except Exception as exc:  # noqa: BLE001 - drop the failing variant, keep timing the rest
            v, pk = passed[current][0], peaks[current]
            ctx.failed(current, _error_rows(ctx, problem, v, pk), "time", exc)
            del prepared[current]
    referee = Referee(problem, copies[0], seed, copies[1]) if copies is not None and prepared else None
    for name, p in prepared.items():
        variant, err, checked = passed[name]
        timer, note, l2 = plans[name]
        note = "; ".join(filter(None, [note, checked]))  # the check's word on its tolerance (fast accumulation)
        stats = metrics.summarize(p.samples)
        extra = dict(stats, samples_us=p.samples, max_rel_err=err, config=configs[name].config, timing_mode=timer.mode,
                     l2_state=l2, gpu_mem_peak_bytes=peaks[name], kernels=p.kernel_names)  # fmt: skip
        if variant.gemm:  # a step beside the GEMMs (moe_align) has its time, no FLOPs or roofline
            extra.update(_throughput(ctx, problem, variant, works[name], stats["time_us_median"]))
            if extra["flops"] == 0:  # no roofline to be close to: the time is a launch that finds nothing to do
                note = "; ".join(filter(None, [note, IDLE_RANK]))
        if name in recorders:
            extra.update(recorders[name].columns(extra.get("flops")))
        try:
            status, note = _judged(ctx, referee, name, variant, p, made[name], extra, note)
        except Exception as exc:  # noqa: BLE001 - a call that fails on fresh inputs: this row's error (a fault ends the worker)
            ctx.failed(name, _error_rows(ctx, problem, variant, peaks[name]), "referee", exc)
            continue
        ctx.result(name, [_run_row(ctx, problem, variant, status, note, **extra)])


def _judged(ctx, referee: Optional[Referee], name: str, variant, p, launches: list, extra: dict, note: str
            ) -> tuple[str, str]:  # fmt: skip
    """A timed row's (status, reason): the referee's verdict (gemmbench.measure.referee), else `impossible` where the
    time beats the row's roofline bound (metrics.impossible_reason), else ok with its note."""
    if referee is not None:
        ctx.begin(name, "referee")
        verdict = referee.judge(variant, p, launches, extra["time_us_median"])
        if verdict is not None:
            return verdict.status, verdict.reason
    if extra.get("flops"):
        why = metrics.impossible_reason(extra["time_us_median"], extra["flops"], extra["bytes_min"],
                                        extra.get("ceiling_bw_gbps"), extra.get("ceiling_tflops"), extra["l2_state"])  # fmt: skip
        if why:
            return "impossible", why
    return "ok", note


def _copies(ctx, problem: Problem, seed: int, variants: int) -> tuple:
    """The inputs copies a problem's variants are timed over (in its scaling, of the run's --inputs values), sized
    from free memory (timing.plan_copies: a copy is its inputs and one output per variant), the timer to time them
    with (the run's, or a cold one when stream mode's copies do not fit), the note the rows carry then, and the L2
    state of the rows (Timer.l2_state_over)."""
    values = ctx.args.inputs
    first = make_inputs(problem, seed, ctx.devname, values=values)
    per_copy = first.nbytes() + variants * first.out_nbytes()
    plan = plan_copies(
        ctx.timer.mode, ctx.timer.copies_needed(first.nbytes()), per_copy, memory.free_bytes(ctx.devname)
    )
    timer = ctx.timer if plan.mode == ctx.timer.mode else ctx.timer.in_mode(plan.mode)
    inputs = [first] + [make_inputs(problem, seed + i, ctx.devname, values=values) for i in range(1, plan.copies)]
    return inputs, timer, plan.note, timer.l2_state_over(plan.copies, first.nbytes())


def _max(a: Optional[int], b: Optional[int]) -> Optional[int]:
    return None if a is None and b is None else max(x for x in (a, b) if x is not None)


# Under expert parallelism a few tokens can all land on other ranks' experts (DeepSeek-V3, EP 8, 1 token: 8 of 256
# experts, rank 0 holds 32): the kernel is launched and returns; its row says so and has no roofline %.
IDLE_RANK = "no (token, expert) pair on this rank's experts: the time is a launch with nothing to do"


def _throughput(ctx, problem: Problem, variant, works: list, t: float) -> dict:
    """works: each timed copy's GemmInputs.local_work (its experts hit, and under EP its pairs and tokens)."""
    nbytes = round(sum(metrics.bytes_min(problem, **w) for w in works) / len(works))
    # every row has the FLOPs of a routing-independent problem (cell_columns); under EP they are this rank's pairs
    flops = round(sum(metrics.flops(problem, w.get("pairs")) for w in works) / len(works))
    out: dict[str, Any] = dict(
        flops=flops, bytes_min=nbytes, tflops=metrics.tflops(flops, t), gbps=metrics.gbps(nbytes, t)
    )
    if ctx.ceilings is not None and flops > 0:  # flops 0: no pair on this rank (EP), no bound to be a % of
        bw = metrics.bandwidth_at(ctx.ceilings.bandwidth_ladder, nbytes)
        peak = ctx.ceilings.peak_for(problem.dtype)
        bound = metrics.roofline_bound_us(flops, nbytes, bw, peak)
        pct = metrics.pct_of_roofline(t, bound)
        out.update(ceiling_bw_gbps=bw, ceiling_tflops=peak, roofline_bound_us=bound, pct_of_roofline=pct,
                   roofline_note=metrics.roofline_note(pct, flops, nbytes, bw, peak))  # fmt: skip
    return out
