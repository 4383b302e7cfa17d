"""The `--format json` documents of gemmbench as pydantic models: one per `schema` name ("gemmbench.run/1").

The CLI builds its documents as plain dicts and never imports this module (the GPU machine has no pydantic); these
models exist to say, in one place, what each document holds: every key, its type, which keys may be null, and which
may be absent.  scripts/make-json-schemas.py writes the JSON Schemas shipped in gemmbench/cli/schemas/ from them, and
tests/test_json_schemas.py checks that the shipped files are what these models make and that every document the CLI
prints validates against its shipped schema.  A model describes what the code emits today: change a document's
builder, then its model here, then run the script.

The models are closed (no key beside those listed), so that a key added to a document without its model fails the
tests, which read every document with its model too; the shipped schemas are open (any other key may be there), as
a version's documents only ever gain keys (cli/formats.py), and a reader's older schema must take a newer document.
The rows of a Parquet table (layer, profile) are open objects in both, their always-present columns typed.  A field made by
absent() is a key that some documents leave out; `Optional` says a key may be null.
"""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

DIALECT = "https://json-schema.org/draft/2020-12/schema"

# the value sets the documents draw from, spelled out here (this module imports nothing of gemmbench);
# tests/test_json_schemas.py holds each equal to the code's own tuple
Status = Literal["ok", "skipped", "wrong", "error", "impossible"]  # gemmbench.results.run_schema.STATUSES
Verdict = Literal["slower", "now-failing", "noisy", "config-changed", "faster", "fixed", "same", "still-failing",
                  "skipped", "other-gpu", "new", "missing"]  # fmt: skip  # gemmbench.results.compare.VERDICTS
Parallel = Literal["column", "row", "none", "qkv", "vocab"]  # gemmbench.models.shape_sets.PARALLEL
# where a Triton variant's config comes from (gemmbench.configs.config_sources.predict): "search" = none stored yet
ConfigSource = Literal["own", "borrowed", "searched", "search"]


class _Closed(BaseModel):
    """An object of exactly the listed keys."""

    model_config = ConfigDict(extra="forbid")


class _Row(BaseModel):
    """A row of a Parquet table: the columns listed are typed, any other column may be there too."""

    model_config = ConfigDict(extra="allow")


def absent(description: str) -> Any:
    """A key that some documents leave out: not required (None where pydantic reads a document without it)."""
    return Field(default=None, description=description)


class _Generator(GenerateJsonSchema):
    """Pydantic's JSON Schema without a title per field (the key names itself) and without defaults (a default
    here only marks a key that may be absent; no reader should fill it in)."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        return self.generate_inner(schema["schema"])


# ---------------------------------------------------------------- run/1 (gemmbench.cli.run._print_json)


class RunConfigs(_Closed):
    """One GPU's Triton cells of a run by config source (gemmbench.cli.configs_used.summarize)."""

    gpu: str
    own: int
    borrowed: dict[str, int] = Field(description="lender GPU -> cells")
    searched: int
    only: int
    imported: int
    tune: Optional[str] = Field(description="the `gemmbench tune` command for the searched cells")
    tune_estimate_s: Optional[int]


class _Cell(BaseModel):
    """The columns that name a cell (gemmbench.results.cells.cell_columns), in every row of a run or a profile."""

    shape_set: str
    gemm: str
    M: int
    N: int
    K: int
    E: int
    topk: int
    tp: int
    ep: int
    dp: int
    layout: str
    routing: Optional[str]
    dtype: str
    scaling: str
    fp8_accum: str
    variant: str


class RunCell(_Closed, _Cell):
    """One row of a run as its tables show it (gemmbench.results.tables.summary, SUMMARY_FIELDS)."""

    timing_mode: str
    status: Status
    reason: Optional[str]
    max_rel_err: Optional[float]
    time_us_median: Optional[float]
    speedup: Optional[float]
    baseline: Optional[str]
    winner: bool
    tied: bool
    noisy: bool
    spread_pct: Optional[float]
    roofline_note: Optional[str]


class RunDocument(_Closed):
    """`gemmbench run --format json`: the run file's rows as its tables show them."""

    schema_: Literal["gemmbench.run/1"] = Field(alias="schema")
    run_id: str
    file: str
    interrupted: bool
    counts: dict[Status, int] = Field(description="rows per status")
    configs: list[RunConfigs]
    cells: list[RunCell]


# ---------------------------------------------------------------- dry-run/1 (gemmbench.cli.dry_run.print_dry_run)


class Deployment(_Closed):
    """The deployment a dry run plans for: the lists of degrees asked, and whose GEMMs."""

    tp: list[int]
    dp: list[int]
    ep: list[int]
    layout: str


class DryRunConfigs(_Closed):
    """A dry run's Triton cells by the config source a run would take (gemmbench.cli.dry_run._configs_summary)."""

    gpu: str
    own: int
    searched: int
    search: int
    borrowed: dict[str, int] = Field(description="lender GPU -> cells")


class ConfigPrediction(_Closed):
    """The config a run would take for one Triton variant's problem (gemmbench.configs.config_sources.predict)."""

    source: ConfigSource
    from_: Optional[str] = Field(alias="from", description="the lender GPU, for a borrowed config")
    bucket: Optional[int]
    file: Optional[str]


class DryRunCell(_Closed):
    """One problem as rank 0 of the deployment runs it, and which variants run or skip it."""

    gemm: str
    M: int
    tokens: int
    N: int
    K: int
    E: int
    local_experts: int
    topk: int
    shared_experts: int
    routing: Optional[str]
    pairs_routed: Optional[int]
    tp: int
    ep: int
    dp: int
    layout: str
    dtype: str
    scaling: str
    fp8_accum: str
    runs: list[str]
    on_the_gpu: dict[str, str] = Field(description="variant -> the rule only the GPU's machine can settle")
    skips: dict[str, str] = Field(description="variant -> why it does not run")
    configs: dict[str, ConfigPrediction] = Field(description="Triton variant -> the config a run would take")


class DryRunDocument(_Closed):
    """`gemmbench run --dry-run --format json`: what a sweep would run, without running it."""

    schema_: Literal["gemmbench.dry-run/1"] = Field(alias="schema")
    shape_set: str
    source: str
    deployment: Deployment
    gpu: str
    stand_in: bool
    configs: DryRunConfigs
    cells: list[DryRunCell]


# ---------------------------------------------------------------- shapes/1, variants/1, configs/1 (gemmbench.cli.list)


class ShapeGemm(_Closed):
    """One GEMM of a shape set, its sizes as the YAML gives them (before --tp and --ep divide them)."""

    id: str
    N: int
    K: int
    E: int
    topk: int
    parallel: Parallel
    layer: str
    role: str


class ShapeSetEntry(_Closed):
    """One built-in shape set."""

    name: str
    description: str
    m: list[int]
    gemms: list[ShapeGemm]


class ShapesDocument(_Closed):
    """`gemmbench list shapes --format json`: the built-in shape sets."""

    schema_: Literal["gemmbench.shapes/1"] = Field(alias="schema")
    sets: list[ShapeSetEntry]


class VariantEntry(_Closed):
    """One registered kernel variant."""

    name: str
    family: str
    dtypes: list[str]
    scalings: list[str]
    fp8_accums: list[str]
    kind: Literal["dense", "moe"]
    baseline_of: list[str]
    tunable: bool
    source: str = Field(description='"builtin", or the plugin file it came from')
    description: str


class VariantsDocument(_Closed):
    """`gemmbench list variants --format json`: the registered kernel variants."""

    schema_: Literal["gemmbench.variants/1"] = Field(alias="schema")
    variants: list[VariantEntry]


class ConfigFileEntry(_Closed):
    """A stored config file a run on the GPU would read (`list configs` without --shapes)."""

    variant: str
    file: str
    buckets: str = Field(description="the file's M buckets, comma-separated")
    source: Literal["own", "borrowed", "searched"]
    from_: Optional[str] = Field(alias="from", description="the lender GPU's folder, for a borrowed file")


class ConfigProblemEntry(_Closed):
    """The config one Triton variant would take for one problem (`list configs --shapes`)."""

    variant: str
    gemm: str
    M: int
    N: int
    K: int
    E: int = Field(description="the experts rank 0 holds (local experts)")
    dtype: str
    scaling: str
    source: ConfigSource
    from_: Optional[str] = Field(alias="from", description="the lender GPU, for a borrowed config")
    bucket: Optional[int]
    file: Optional[str]


class ConfigsDocument(_Closed):
    """`gemmbench list configs --format json`: the Triton configs a run on a GPU would use."""

    schema_: Literal["gemmbench.configs/1"] = Field(alias="schema")
    gpu: str
    configs: list[Union[ConfigProblemEntry, ConfigFileEntry]]


# ---------------------------------------------------------------- compare/1 (gemmbench.results.compare.to_json)


class CompareRow(_Closed):
    """One cell's verdict (gemmbench.results.compare.Row)."""

    cell: str
    variant: str
    verdict: Verdict
    base_us: Optional[float]
    cand_us: Optional[float]
    ratio: Optional[float]
    p_value: Optional[float]
    p_raw: Optional[float]
    base_status: Optional[Status]
    cand_status: Optional[Status]
    reason: Optional[str]
    stack_changed: bool
    base_processes: int
    cand_processes: int
    within_process: Optional[bool]


class CompareDocument(_Closed):
    """`gemmbench compare --format json`: a verdict per cell of two runs."""

    schema_: Literal["gemmbench.compare/1"] = Field(alias="schema")
    threshold: float
    alpha: float
    p_adjustment: str
    process_test: str
    min_processes: int
    within_process_only: bool
    stack_change: Optional[str]
    counts: dict[Verdict, int] = Field(description="cells per verdict, the verdicts met only")
    rows: list[CompareRow]


# ---------------------------------------------------------------- baselines/1 (gemmbench.cli.compare.baseline_list)


class BaselineEntry(_Closed):
    """One named baseline on the search path (gemmbench.results.named_baselines: Entry and Summary)."""

    name: str
    where: str = Field(description='"cwd", "user" or "shipped", or two joined by " = " (one folder met twice)')
    shadowed: bool
    file: str
    gpu: str
    torch: str
    triton: str
    cuda: str
    driver: str
    date: str
    rows: int
    error: Optional[str]


class BaselinesDocument(_Closed):
    """`gemmbench baseline list --format json`: the named baselines `compare NAME` finds."""

    schema_: Literal["gemmbench.baselines/1"] = Field(alias="schema")
    search_path: str
    baselines: list[BaselineEntry]


# ---------------------------------------------------------------- report/1 (gemmbench.plot.report.winner_records)


class Winner(_Closed):
    """One figure group's winner at one M (gemmbench.plot.report.WINNER_FIELDS)."""

    shape_set: str
    gemm: str
    N: int
    K: int
    E: int
    topk: int
    routing: Optional[str]
    tp: int
    ep: int
    dtype: str
    scaling: str
    fp8_accum: str
    timing_mode: Optional[str]
    gpu: Optional[str]
    run_id: str
    M: int
    variant: Optional[str] = Field(description="null for a tie")
    tied: list[str]
    time_us_median: float
    speedup: Optional[float]
    baseline: Optional[str]
    pct_of_roofline: Optional[float]


class ReportDocument(_Closed):
    """`gemmbench report --format json`: the files written and the report's winners tables."""

    schema_: Literal["gemmbench.report/1"] = Field(alias="schema")
    files: list[str]
    winners: list[Winner]


# ---------------------------------------------------------------- layer/1 (gemmbench.engine.layer.rows_for)


class _ProvenanceRow(_Row):
    """A table row with the machine and build it was measured on (gemmbench.measure.device.provenance)."""

    device: str
    gpu: Optional[str]
    gpu_uuid: Optional[str]
    sm_count: Optional[int]
    driver: Optional[str]
    cuda: Optional[str]
    torch: str
    triton: str
    gemmbench_version: str
    git_sha: Optional[str]
    host: str
    cpu: str


class LayerRow(_ProvenanceRow):
    """One row of a layer table: the layer's own (part "layer") or one step's (part "step")."""

    # the plan (gemmbench.engine.tasks.layer_task.cell's meta)
    run_id: str
    timestamp: str
    model: str
    shape_set: str
    layer_kind: str
    tp: int
    ep: int
    dp: int
    layout: str
    dtype: str
    scaling: str
    fp8_accum: str
    M: int
    layers: int
    l2_state: str
    timing_mode: str
    family: Literal["layer"]
    layer_schema: int
    # the row
    part: Literal["layer", "step"]
    step: Optional[int]
    gemm: str
    variant: str
    status: Status
    max_rel_err: Optional[float]
    # present on some rows only
    reason: Optional[str] = absent('the layer row\'s ("layer" rows only)')
    steps: Optional[int] = absent('"layer" rows only')
    plan: Optional[str] = absent('step -> variant, as JSON text ("layer" rows only)')
    config: Optional[str] = absent('the step\'s config, as JSON text ("step" rows only)')
    fallback: Optional[str] = absent('"step" rows only')
    N: Optional[int] = absent("a GEMM step's only")
    K: Optional[int] = absent("a GEMM step's only")
    E: Optional[int] = absent("a GEMM step's only")
    topk: Optional[int] = absent("a GEMM step's only")


class LayerDocument(_Closed):
    """`gemmbench layer --format json`: the layer table's rows."""

    schema_: Literal["gemmbench.layer/1"] = Field(alias="schema")
    run_id: str
    file: str
    rows: list[LayerRow]


# ---------------------------------------------------------------- merge/1 (gemmbench.cli.merge)


class MergeDocument(_Closed):
    """`gemmbench merge --format json`: the merged file and the parts joined."""

    schema_: Literal["gemmbench.merge/1"] = Field(alias="schema")
    file: str
    rows: int
    parts: list[str]
    problems: list[str]


# ---------------------------------------------------------------- profile/1 (gemmbench.profile.sweep.CellProfiler)


class ProfileRow(_ProvenanceRow, _Cell):
    """One row of a profile table: one kernel's counters, or a cell's sum, or a cell that was not profiled."""

    family: str
    variant_source: str
    flops: Optional[int]
    # the profile
    run_id: str
    profile_schema: int
    timestamp: str
    nvtx_range: str
    status: Status
    reason: Optional[str]


class ProfileDocument(_Closed):
    """`gemmbench profile --format json`: the profile table's rows and where the reports are."""

    schema_: Literal["gemmbench.profile/1"] = Field(alias="schema")
    run_id: str
    file: str
    reports: str
    rows: list[ProfileRow]


# ---------------------------------------------------------------- tune/1 (gemmbench.engine.tasks.tune_task.TuneSink)


class _TuneJob(_Closed):
    """What names a tuning job: a variant, a shape and an M bucket."""

    variant: str
    gemm: str
    N: int
    K: int
    E: int
    topk: int
    dtype: str
    scaling: str
    fp8_accum: str
    bucket: int


class WrongConfig(_Closed):
    """A config that ran and computed a wrong result, and the check's words."""

    config: dict[str, Any]
    error: str


class TuneTrial(_Closed):
    """One config a tune timed."""

    config: dict[str, Any]
    us: Optional[float] = Field(description="its median time (the finalists': re-timed side by side); null: it failed")
    retimed: bool = Field(description="a finalist, re-timed side by side with the others before the winner was picked")
    spread: Optional[float] = Field(
        None,  # a key documents of this version made before it lack
        description="a finalist's re-timed samples, p20-p80 over their median: what decides its ties with the others "
        '(docs/USAGE.md "Tuned configs"); null where not re-timed',
    )
    error: Optional[str] = Field(description="why it did not run, or its wrong result's check; null where it ran")


class TunedJob(_TuneJob):
    """A job that stored its winning config."""

    status: Literal["tuned"]
    us: float
    config: dict[str, Any]
    tried: int
    file: Optional[str]
    before: Optional[dict[str, Any]] = Field(
        description="the config stored for the bucket before the tune (it raced where still in the search space; "
        "equal to `config` where kept), or null"
    )
    wrong_results: list[WrongConfig] = Field(
        description="the configs of the search space whose result failed the check (a kernel bug; none was stored)"
    )
    trials: list[TuneTrial] = Field(
        description="every config the search timed, the winner first, then by time, the failed ones last"
    )


class FailedJob(_TuneJob):
    """A job that stored nothing, and why."""

    status: Literal["failed"]
    reason: str


class TuneDocument(_Closed):
    """`gemmbench tune --format json`: every job, tuned or failed."""

    schema_: Literal["gemmbench.tune/1"] = Field(alias="schema")
    gpu: str
    folder: str
    jobs: list[Union[TunedJob, FailedJob]]


# ---------------------------------------------------------------- ceilings/1 (gemmbench.cli.ceilings)


class CeilingsKey(_Closed):
    """What the ceilings cache is keyed by (gemmbench.measure.ceilings.cache_key_parts)."""

    gpu: str
    uuid: str = absent("absent where torch gives none")
    sm_max_mhz: int = absent("absent without NVML")
    sm_app_mhz: int = absent("absent without NVML")
    mode: str
    torch: str


class ComputeRung(_Closed):
    """One rung of the compute ladder: timed, or skipped and why."""

    dtype: str
    M: int
    N: int
    K: int
    median_us: Optional[float]
    p10_us: Optional[float]
    tflops: Optional[float]
    skipped: Optional[str]


class BandwidthRung(_Closed):
    """One rung of the bandwidth ladder."""

    bytes: int
    gbps: float


class CeilingsDocument(_Closed):
    """`gemmbench ceilings --format json`: this GPU's measured ceilings and both ladders."""

    schema_: Literal["gemmbench.ceilings/1"] = Field(alias="schema")
    mode: Literal["cold", "stream"]
    key: CeilingsKey
    cache: str
    peak_tflops: dict[str, float] = Field(description="dtype -> TFLOP/s")
    compute_ladder: list[ComputeRung]
    bandwidth_ladder: list[BandwidthRung]


DOCUMENTS: tuple[type[BaseModel], ...] = (
    RunDocument,
    DryRunDocument,
    ShapesDocument,
    VariantsDocument,
    ConfigsDocument,
    CompareDocument,
    BaselinesDocument,
    ReportDocument,
    LayerDocument,
    MergeDocument,
    ProfileDocument,
    TuneDocument,
    CeilingsDocument,
)


def schema_name(model: type[BaseModel]) -> str:
    """The `schema` value a document model's Literal allows ("gemmbench.run/1")."""
    [name] = model.model_fields["schema_"].annotation.__args__  # type: ignore[union-attr]
    return name


MODELS: dict[str, type[BaseModel]] = {schema_name(m): m for m in DOCUMENTS}


def _opened(node: Any) -> Any:
    """`node` with every `"additionalProperties": false` dropped: the shipped schemas take keys a later build adds."""
    if isinstance(node, dict):
        return {k: _opened(v) for k, v in node.items() if not (k == "additionalProperties" and v is False)}
    if isinstance(node, list):
        return [_opened(v) for v in node]
    return node


def json_schema(name: str) -> dict:
    """The JSON Schema (draft 2020-12) of the document `name` ("gemmbench.run/1"), its `$id` that name: the model's,
    opened (_opened)."""
    generated = MODELS[name].model_json_schema(schema_generator=_Generator)
    return {"$schema": DIALECT, "$id": name, **_opened(generated)}
