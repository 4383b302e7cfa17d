"""The process a profiler runs (`gemmbench profile`): one cell, launched once inside its NVTX range.

Everything a profiler should not see happens first, outside the range: inputs, make() (which may tune),
the check against the fp32 reference on the first call, and a warm-up.  Then one eager call runs inside
"profile <cell>" (nvtx_ranges), which is the range ncu --nvtx-include selects.  A cell whose check fails
is never profiled.  The outcome goes to --result as one JSON object:
  {"status": "ok"|"wrong"|"skipped", "reason", "max_rel_err", "config", "experts_hit", "range", "domain"}
A crash leaves no result file: the parent records it from the exit code and the log.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

WARMUP_CALLS = 3


def profile_cell(problem, variant_name: str, seed: int) -> dict:
    import torch

    from gemmbench import registry
    from gemmbench.check import compare, poison, reference
    from gemmbench.device import detect
    from gemmbench.inputs import make_inputs
    from gemmbench.nvtx_ranges import annotate, cell_name, domain_in_use, range_name

    variant = registry.get(variant_name)
    name = range_name("profile", cell_name(variant.name, problem))
    result = {"range": name, "domain": domain_in_use(), "config": None, "max_rel_err": None, "experts_hit": None}
    reason = variant.unsupported_reason(problem, detect())
    if reason:
        return dict(result, status="skipped", reason=reason)
    inputs = make_inputs(problem, seed, "cuda", scaling=variant.fp8_scaling)
    launch = variant.make(problem, inputs)
    poison(launch.out)
    out = launch.fn()
    torch.cuda.synchronize()
    check = variant.check(problem, inputs, out) if variant.check else compare(problem, out, reference(problem, inputs))
    result.update(config=launch.config, max_rel_err=check.max_rel_err, experts_hit=inputs.experts_hit())
    if not check.ok:
        return dict(result, status="wrong", reason=check.detail)
    for _ in range(WARMUP_CALLS):
        launch.fn()
    torch.cuda.synchronize()
    with annotate(name):
        launch.fn()
        torch.cuda.synchronize()
    return dict(result, status="ok", reason=None)


def main() -> None:
    parser = argparse.ArgumentParser(description="one cell under a profiler (started by gemmbench profile)")
    parser.add_argument("--problem", required=True, help="a shapes.Problem as JSON")
    parser.add_argument("--variant", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plugin", action="append", default=[])
    parser.add_argument("--result", required=True, help="where to write the JSON outcome")
    args = parser.parse_args()

    from gemmbench import registry
    from gemmbench.shapes import Problem

    for plugin in args.plugin:
        registry.load_plugin(plugin)
    result = profile_cell(Problem(**json.loads(args.problem)), args.variant, args.seed)
    Path(args.result).write_text(json.dumps(result, default=str))
    sys.exit(0)


if __name__ == "__main__":
    main()
