"""For scripts/bench/referee.sh only: in every gemmbench process started with this folder on PYTHONPATH and
GEMMBENCH_REFEREE_TIMES naming a file, each Referee.judge call appends its seconds to that file (the referee's cost)."""

import importlib.abc
import importlib.machinery
import os
import sys
import time

TIMES = os.environ.get("GEMMBENCH_REFEREE_TIMES")
MODULE = "gemmbench.measure.referee"


class _Timed(importlib.abc.MetaPathFinder):
    """Wraps Referee.judge once gemmbench.measure.referee is imported."""

    def find_spec(self, name, path, target=None):
        if name != MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            judge = module.Referee.judge

            def timed(self, *args, **kwargs):
                t0 = time.perf_counter()
                try:
                    return judge(self, *args, **kwargs)
                finally:
                    with open(TIMES, "a") as f:
                        f.write(f"{time.perf_counter() - t0:.6f}\n")

            module.Referee.judge = timed

        spec.loader.exec_module = exec_module
        return spec


if TIMES:
    sys.meta_path.insert(0, _Timed())
