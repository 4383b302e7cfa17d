"""The run table's schema: its columns in order, their Arrow types, which are required, and its version.

One row per measured cell (problem x variant); gemmbench.results.store writes and reads the files (of this run format
only), gemmbench.results.side_tables holds the profile and layer tables' own schemas.
"""

from __future__ import annotations

import pyarrow as pa

# The run file format: bump when a column is added, removed or changes meaning; store.load() refuses any other
# format in one line rather than silently mixing numbers that mean different things (no upgrade chain: an older
# file is read by the gemmbench that wrote it, LAST_READER names the commit).
RUN_FORMAT = 1
# The last commit that reads run files written before RUN_FORMAT (their metadata key was gemmbench.schema_version)
LAST_READER = "a7312ef"
OLD_META_KEY = b"gemmbench.schema_version"
# impossible: faster than the GPU's measured bound allows (metrics.impossible_reason); like wrong and error, never ranked
STATUSES = ("ok", "skipped", "wrong", "error", "impossible")
FAILING = ("wrong", "impossible", "error")  # what `compare` calls failing and `run --strict` exits 1 on
# timing_mode, l2_state: see gemmbench.measure.timing (MODES, L2_STATE); device: "cuda" | "cpu".

_S, _I, _F = pa.string(), pa.int64(), pa.float64()
_COLUMNS = [
    # what was measured
    ("run_id", _S),
    ("timestamp", _S),  # timestamp: ISO 8601 UTC
    ("shape_set", _S),
    ("gemm", _S),
    ("M", _I),
    ("N", _I),
    ("K", _I),
    ("E", _I),
    ("topk", _I),
    ("routing", _S),
    ("tp", _I),
    ("ep", _I),  # expert-parallel degree that divided the GEMM's experts (gemmbench.models.sharding); dense 1
    ("dp", _I),  # data-parallel groups of the deployment; an expert GEMM's M holds all their tokens
    ("layout", _S),  # whose GEMMs: vllm | sglang | hf (gemmbench.models.sharding.LAYOUTS)
    ("dtype", _S),
    ("scaling", _S),  # fp8: a name in dtypes.SCALINGS ("tensor", "row", "block", "block-ue8m0"); 16-bit: "none"
    ("fp8_accum", _S),  # fp8: how the tensor cores' sums reach fp32 (dtypes.FP8_ACCUMS); 16-bit: "none"
    # by which kernel
    ("variant", _S),
    ("family", _S),
    ("variant_source", _S),
    ("config", _S),  # config: JSON text
    # outcome
    ("status", _S),
    ("reason", _S),
    ("max_rel_err", _F),
    ("time_us_median", _F),
    ("time_us_p20", _F),
    ("time_us_p80", _F),
    ("n_samples", _I),
    ("noisy", pa.bool_()),  # p80/p20 above metrics.NOISY_SPREAD: never ranked fastest
    ("samples_us", pa.list_(_F)),
    ("timing_mode", _S),
    ("l2_state", _S),  # cold | streaming | warm: stream copies that fit in L2, wall timing (metrics.WARM)
    ("inputs", _S),  # the values the timed calls ran on (run --inputs: inputs.VALUES); the check's are always randn
    ("kernels", _S),  # the kernels one timed launch ran, in order, joined by ';' (cuBLAS's algorithm); CPU: null
    ("process", _I),  # run --repeat N: which of the N fresh processes (0..N-1) timed the row; one process: 0
    (
        "gpu_mem_peak_bytes",
        _I,
    ),  # the most GPU memory PyTorch allocated while the cell ran (gemmbench.measure.memory); CPU: null
    # derived by gemmbench.results.metrics
    ("flops", _I),
    ("bytes_min", _I),
    ("tflops", _F),
    ("gbps", _F),
    ("roofline_bound_us", _F),
    ("pct_of_roofline", _F),
    ("roofline_note", _S),  # why a row is above 100% of its roofline (metrics.roofline_note); null at or below it
    # where
    ("device", _S),
    ("gpu", _S),
    ("gpu_uuid", _S),
    ("sm_count", _I),
    ("driver", _S),
    ("cuda", _S),
    ("torch", _S),
    ("triton", _S),
    ("gemmbench_version", _S),
    ("git_sha", _S),
    ("host", _S),
    ("cpu", _S),  # the host's processor, "" where unknown: a CPU run is titled "CPU (<cpu>)"
    ("ceiling_bw_gbps", _F),
    ("ceiling_tflops", _F),
    # the GPU while the cell was timed, read through NVML after each timed batch (gemmbench.measure.telemetry); null where
    # NVML is missing (a CPU run) or the GPU does not report the quantity
    ("sm_clock_mhz_min", _F),  # SM clock over the samples (each batch's reading counts once per sample)
    ("sm_clock_mhz_median", _F),
    ("sm_clock_mhz_max", _F),
    ("mem_clock_mhz_median", _F),
    ("power_w", _F),  # median board power
    ("temp_c", _F),  # hottest GPU temperature
    ("energy_j_per_call", _F),  # energy counter over the timed calls (cold, graph: the L2 eviction included)
    ("tflop_per_j", _F),
    ("throttled_samples", _I),  # samples whose batch ended with a throttle reason active
    ("throttle", _S),  # the reasons seen, comma-separated names (telemetry.REASONS); "" none
    ("run_format", _I),
]
REQUIRED = (
    "run_id",
    "shape_set",
    "gemm",
    "M",
    "N",
    "K",
    "E",
    "topk",
    "tp",
    "ep",
    "dp",
    "layout",
    "dtype",
    "scaling",
    "fp8_accum",
    "variant",
    "status",
    "run_format",
)
# Columns every row gets from its producer but an older file may lack (read as ADDED_COLUMNS) or have null (process,
# before --repeat): checked when a row is stored, not declared non-null in the file's schema
COMPLETE = ("process", "inputs", "timing_mode", "timestamp")
# Columns added to RUN_FORMAT after files of it were written, with the value that is true of every such older file
# (they all timed on randn): read as that value, so an additive column needs no new format and no file is refused
ADDED_COLUMNS = {"inputs": "randn"}
META_KEY = b"gemmbench.run_format"  # in the file metadata, so that an empty run has its format too
SCHEMA = pa.schema(
    [pa.field(name, typ, nullable=name not in REQUIRED) for name, typ in _COLUMNS],
    metadata={META_KEY: str(RUN_FORMAT).encode()},
)
COLUMNS = [name for name, _ in _COLUMNS]
TELEMETRY_COLUMNS = COLUMNS[COLUMNS.index("sm_clock_mhz_min") : COLUMNS.index("throttle") + 1]  # CellRecorder.columns
TYPES = dict(_COLUMNS)  # column name -> Arrow type
