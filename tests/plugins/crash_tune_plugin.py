"""Test plugin: `test_crash_tune`, a tunable variant whose every config kills its own process when built, as a
faulting config kills a worker's CUDA context.  For `gemmbench tune` on a GPU: the fault costs its job only."""

import os
import signal

from gemmbench import registry
from gemmbench.configs import tuning
from gemmbench.registry import Variant, register

_base = registry.get("triton_dp_row")  # its search space and its supports(): a GEMM the tuner would take


def _build(problem, inputs, config):
    os.kill(os.getpid(), signal.SIGKILL)


_tunable = tuning.Tunable("test_crash_tune", _base.tunable.space, _build, _base.tunable.config_type)
register(
    Variant(
        "test_crash_tune",
        "test",
        _base.dtypes,
        "kills its worker when a config is built",
        _tunable.make,
        supports=_base.supports,
        tunable=_tunable,
        source=__file__,
    )  # fmt: skip
)
