"""The JSON Schemas shipped for the `--format json` documents (gemmbench/cli/schemas/, made from the models of
gemmbench/json_schemas.py by scripts/make-json-schemas.py): the files are what the models make, every document kind
the CLI prints validates against its file, no `schema` name in the source lacks a model and a file, and the CLI
never imports the models (the GPU machine has no pydantic).

Documents come from the CLI on the CPU path (one tiny run, its rows copied into a second run to compare), except
where a command needs a GPU: tune's document is built by TuneSink, ceilings' by the command with the measurement
faked, profile's by the command with the profilers faked (tests/test_profile.py's FakeTools), as
tests/test_json_documents.py does."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util
import json
import re
from functools import cache
from pathlib import Path

import pytest

# pydantic and jsonschema come with the `test` extra (CI, the README's test command); the GPU machine's image runs
# only `pytest -m gpu`, without them, and these are CPU tests
pytest.importorskip("pydantic", reason="the test extra's pydantic: pip install -e '.[test]'")
pytest.importorskip("jsonschema", reason="the test extra's jsonschema: pip install -e '.[test]'")

import torch  # noqa: E402
from conftest import PLUGINS  # noqa: E402
from jsonschema import Draft202012Validator  # noqa: E402
from test_cli import invoke  # noqa: E402
from test_profile import FakeTools, fixture_text, ok_outcome  # noqa: E402

from gemmbench import json_schemas  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "gemmbench"
MODELS_FILE = PACKAGE / "json_schemas.py"
# a document's name as the code spells it: "gemmbench.run/1", in quotes or backticks
SCHEMA_NAME = re.compile(r"""["'`](gemmbench\.[a-z][a-z-]*/\d+)["'`]""")


@cache
def generator():
    """scripts/make-json-schemas.py as a module: the test runs its logic, not a copy of it."""
    spec = importlib.util.spec_from_file_location("make_json_schemas", ROOT / "scripts" / "make-json-schemas.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shipped_file(name: str) -> Path:
    gen = generator()
    return gen.FOLDER / gen.file_name(name)


def valid(doc: dict) -> dict:
    """`doc`, after checking it against the shipped schema file its `schema` key names (every error listed), and
    reading it with its pydantic model (the models describe the documents to a reader too)."""
    schema = json.loads(shipped_file(doc["schema"]).read_text(encoding="utf-8"))
    errors = sorted(Draft202012Validator(schema).iter_errors(doc), key=lambda e: [str(k) for k in e.absolute_path])
    assert not errors, f"{doc['schema']}:\n" + "\n".join(
        f"  /{'/'.join(map(str, e.absolute_path))}: {e.message[:300]}" for e in errors[:20]
    )
    json_schemas.MODELS[doc["schema"]].model_validate(doc)
    return doc


def document(res, codes=(0,)) -> dict:
    """The JSON document a CLI call printed (stdout holds it alone), checked against its shipped schema."""
    assert res.exit_code in codes, res.stderr
    return valid(json.loads(res.stdout))


def source_names() -> dict[str, list[str]]:
    """Every document name the source of gemmbench/ spells (the models' own module left out) -> the files."""
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path != MODELS_FILE and "__pycache__" not in path.parts:
            for name in SCHEMA_NAME.findall(path.read_text(encoding="utf-8")):
                found.setdefault(name, []).append(path.relative_to(ROOT).as_posix())
    return found


# ---------------------------------------------------------------- the files and the models


def test_shipped_schemas_are_what_the_models_make():
    """Each shipped file is, byte for byte, what the script writes from its model, is a valid draft 2020-12 schema
    whose $id is its document's name, and no file is left over from a model that is gone."""
    gen = generator()
    made = gen.render()
    assert len(made) == len(json_schemas.MODELS)
    for path, text in made.items():
        rel = path.relative_to(ROOT)
        assert path.is_file(), f"{rel} is missing: run {gen.COMMAND}"
        assert path.read_text(encoding="utf-8") == text, f"{rel} differs from its model: run {gen.COMMAND}"
        schema = json.loads(text)
        Draft202012Validator.check_schema(schema)
        assert gen.file_name(schema["$id"]) == path.name and schema["$schema"] == json_schemas.DIALECT
    assert gen.stale(made) == [] and gen.first_difference(made) is None


def test_every_document_name_in_the_source_has_a_model_and_a_file():
    """A `"gemmbench.<kind>/<n>"` spelled anywhere in gemmbench/ has a model and a shipped file (a new document kind
    cannot ship without its schema), and every model names a document the code still spells."""
    found = source_names()
    assert "gemmbench.run/1" in found  # the scan sees the source
    missing = {n: files for n, files in found.items() if n not in json_schemas.MODELS}
    assert not missing, f"document names with no model in gemmbench/json_schemas.py: {missing}"
    assert [n for n in json_schemas.MODELS if not shipped_file(n).is_file()] == []
    unused = set(json_schemas.MODELS) - set(found)
    assert not unused, f"models of documents no code prints any more: {sorted(unused)}"


def test_the_cli_never_imports_the_models():
    """No module of gemmbench but the models' own imports gemmbench.json_schemas, pydantic or jsonschema: the GPU
    machine's install has none of them."""
    banned = ("gemmbench.json_schemas", "pydantic", "jsonschema")
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == MODELS_FILE or "__pycache__" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            found += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.startswith(banned)]
    assert found == []


def test_the_models_value_sets_and_fields_are_the_codes():
    """The literals the models spell out (statuses, verdicts, parallel kinds) and the fields of the fixed-field
    objects (a run's cells, a comparison's rows, a report's winners) are the code's own tuples, in order."""
    from gemmbench.models.shape_sets import PARALLEL
    from gemmbench.plot.report import WINNER_FIELDS
    from gemmbench.results import compare, tables
    from gemmbench.results.run_schema import STATUSES

    def args(alias) -> tuple:
        return alias.__args__

    def keys(model) -> tuple:
        return tuple(f.alias or name for name, f in model.model_fields.items())

    assert args(json_schemas.Status) == STATUSES
    assert args(json_schemas.Verdict) == compare.VERDICTS
    assert args(json_schemas.Parallel) == PARALLEL
    assert keys(json_schemas.RunCell) == tables.SUMMARY_FIELDS
    assert keys(json_schemas.CompareRow) == tuple(f.name for f in dataclasses.fields(compare.Row))
    assert keys(json_schemas.Winner) == WINNER_FIELDS


# ---------------------------------------------------------------- every document the CLI prints


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One tiny CPU run (fp16: cuBLAS, the MoE reference, and a plugin variant that refuses N 64: error rows) and
    its `run --format json` document, plus a candidate made of its rows (another run id, cuBLAS 1.5x slower, M 5
    gone, another torch) to compare with it."""
    from gemmbench.results import store

    d = tmp_path_factory.mktemp("runs")
    res = invoke("run", "--shapes", "smoke", "--m", "1,5", "--dtype", "fp16", "--budget", "0.01",
                 "--variants", "cublas_fp16,torch_moe_loop,test_refuse", "--plugin", PLUGINS / "refuse_plugin.py",
                 "--format", "json", "--out", d / "a.parquet")  # fmt: skip
    rows = store.records(store.load([d / "a.parquet"]))
    slower = [
        dict(r, run_id="candidate", torch="0.0.0-test",
             samples_us=[x * (1.5 if r["variant"] == "cublas_fp16" else 1.0) for x in r["samples_us"] or []] or None)
        for r in rows if r["M"] == 1
    ]  # fmt: skip
    store.write_rows(d / "b.parquet", slower)
    return res, d


def test_run_document(runs):
    """`run --format json`: ok and error rows, dense and MoE."""
    res, d = runs
    doc = document(res)
    assert doc["counts"] == {"ok": 14, "error": 2} and len(doc["cells"]) == 16


def test_run_document_with_configs_per_gpu(runs, capsys):
    """The run document's `configs` (empty on a CPU, whose rows name no GPU): built by run's own writer from the CPU
    run's rows dressed as a GPU's, with a config of each source."""
    from gemmbench.results import store

    run_cli = importlib.import_module("gemmbench.cli.run")
    _, d = runs
    rows = store.records(store.load([d / "a.parquet"]))
    sources = [{"source": "stored"}, {"source": "borrowed", "borrowed": "NVIDIA_H100_80GB_HBM3"},
               {"source": "searched"}, {"source": "vllm"}, {"source": "only"}]  # fmt: skip
    for i, r in enumerate(rows):
        r.update(gpu="NVIDIA H200", config=json.dumps({"BLOCK_M": 16, **sources[i % len(sources)]}))
    run_cli._print_json("r1", d / "a.parquet", rows, True)
    doc = valid(json.loads(capsys.readouterr().out))
    [gpu] = doc["configs"]
    assert gpu["borrowed"] and gpu["imported"] and gpu["tune"].startswith("gemmbench tune")


@pytest.mark.parametrize(
    "args",
    [
        ["--shapes", "smoke", "--m", "1,64", "--dtype", "fp8,bf16", "--variants", "cublas_*,triton_dp_row,torch_moe_loop"],
        ["--shapes", "llama70b", "--m", "16", "--dtype", "fp8,bf16", "--variants", "triton_dp_grouped,cublas_bf16",
         "--gpu", "NVIDIA H100 NVL", "--borrow"],
    ],
    ids=["smoke-search", "borrowed"],
)  # fmt: skip
def test_dry_run_document(args):
    """`run --dry-run --format json`: MoE cells, variants left to the GPU or skipped, configs to search or borrowed."""
    doc = document(invoke("run", "--dry-run", "--format", "json", *args))
    assert doc["cells"]


@pytest.mark.parametrize(
    "args",
    [
        ["list", "shapes"],
        ["list", "variants", "--plugin", PLUGINS / "refuse_plugin.py"],
        ["list", "configs", "--gpu", "NVIDIA H100 NVL", "--borrow"],
        ["list", "configs", "--gpu", "NVIDIA H200", "--shapes", "llama70b", "--m", "16,4096", "--dtype", "fp8",
         "--variants", "triton_dp_grouped,triton_dp_row"],
    ],
    ids=["shapes", "variants", "configs-files", "configs-problems"],
)  # fmt: skip
def test_list_documents(args):
    """`list shapes|variants|configs --format json` (configs: the stored files, and the config of each problem)."""
    doc = document(invoke(*args, "--format", "json"))
    assert doc[{"shapes": "sets", "variants": "variants", "configs": "configs"}[args[1]]]


def test_compare_document(runs):
    """`compare --format json` of the run and its slower candidate on another torch: slower, missing and failing
    cells, the stack change named."""
    _, d = runs
    res = invoke("compare", d / "a.parquet", d / "b.parquet", "--allow-stack-change", "--format", "json")
    doc = document(res, codes=(0, 1))  # 1: a slower cell hit --fail-on
    assert doc["stack_change"] and "missing" in doc["counts"]


def test_merge_document(runs, tmp_path):
    """`merge --format json` of one part."""
    _, d = runs
    doc = document(invoke("merge", d / "a.parquet", "--out", tmp_path / "m.parquet", "--format", "json"))
    assert doc["rows"] == 16


def test_report_document(runs, tmp_path):
    """`report --format json`: the files written and the winners (a CPU run: no GPU, no roofline)."""
    _, d = runs
    doc = document(invoke("report", d / "a.parquet", "--out", tmp_path / "report", "--no-embed", "--format", "json"))
    assert doc["files"] and doc["winners"]


def test_baselines_document(runs, monkeypatch, tmp_path):
    """`baseline list --format json`: the shipped baselines, a user's that shadows one, and one that cannot be
    read."""
    _, d = runs
    (tmp_path / "h200.parquet").write_bytes((d / "a.parquet").read_bytes())
    (tmp_path / "broken.parquet").write_bytes(b"not parquet")
    monkeypatch.setenv("GEMMBENCH_BASELINE_DIR", str(tmp_path))
    doc = document(invoke("baseline", "list", "--format", "json"))
    shipped = next(b for b in doc["baselines"] if b["name"] == "h200" and b["where"].endswith("shipped"))
    broken = next(b for b in doc["baselines"] if b["name"] == "broken")
    assert shipped["shadowed"] and broken["error"] and broken["where"] == "user"


def test_layer_document(smoke_layer_json):
    """`layer --model smoke --m 1 --format json`: the layer's row and each step's."""
    doc = document(smoke_layer_json[0])
    assert {r["part"] for r in doc["rows"]} == {"layer", "step"} and {r["status"] for r in doc["rows"]} == {"ok"}


def test_profile_document(monkeypatch, tmp_path):
    """`profile --ncu --nsys --format json`, a GPU command: run by the CLI with its profilers faked (no ncu, nsys or
    GPU: the cell profiler of tests/test_profile.py, fed an H100 ncu export), so its rows are the profiler's own."""
    from gemmbench.profile import ncu, ncu_reader, nsys
    from gemmbench.profile import sweep as prof

    monkeypatch.setattr(ncu, "find_ncu", lambda: "/fake/bin/ncu")
    monkeypatch.setattr(nsys, "find_nsys", lambda: "/fake/bin/nsys")
    monkeypatch.setattr(ncu_reader, "load_module", lambda exe: None)
    fake = FakeTools(outcome=ok_outcome(), import_text=fixture_text())

    def profiler(out_path, run_id, use_ncu, use_nsys, *_):
        opts = prof.ProfileOptions(out_dir=out_path, run_id=run_id, use_ncu=use_ncu, use_nsys=use_nsys)
        return prof.CellProfiler(opts, run=fake, start=fake.start)

    monkeypatch.setattr(importlib.import_module("gemmbench.cli.profile"), "_profiler", profiler)
    res = invoke("profile", "--shapes", "smoke", "--m", "16", "--dtype", "bf16", "--variants", "cublas_bf16",
                 "--ncu", "--nsys", "--out", tmp_path, "--format", "json")  # fmt: skip
    doc = document(res)
    assert len(doc["rows"]) == 3 * 3 and {r["status"] for r in doc["rows"]} == {"ok"}  # 3 GEMMs: 2 kernels and a sum
    assert all("ncu_kernel" in r and "nsys_range_us" in r for r in doc["rows"])  # the open rows' profiler columns


def test_tune_document():
    """`tune --format json`, a GPU command: its document built by TuneSink.document from one tuned and one failed
    job, as tests/test_json_documents.py does."""
    from gemmbench import registry
    from gemmbench.engine.tasks.tune_task import TuneSink
    from gemmbench.shapes import Problem

    v = registry.get("triton_dp_row")
    report = TuneSink.of([(Problem("s", "g", m, 256, 512, "fp8"), v) for m in (16, 32)])
    tuned, failed = list(report.jobs)
    wrong = {"config": {"BLOCK_M": 32, "num_warps": 4}, "error": "TuningError: wrong result: max rel err 0.5"}
    trials = [{"config": {"BLOCK_M": 16, "num_warps": 4}, "us": 12.5, "retimed": True, "spread": 0.03, "error": None},
              {**wrong, "us": None, "retimed": False, "spread": None}]  # fmt: skip
    report.result(None, tuned, [{"done": tuned, "us": 12.5, "config": {"BLOCK_M": 16, "num_warps": 4}, "tried": 2,
                                 "file": "/cfg/f.json", "wrong": [wrong], "trials": trials}], True, None)  # fmt: skip
    report.lost(None, failed, "timeout after 5 s (tune)", 1)
    doc = valid(report.document("NVIDIA H200", Path("/cfg/NVIDIA_H200")))
    assert [j["status"] for j in doc["jobs"]] == ["tuned", "failed"] and doc["jobs"][0]["wrong_results"] == [wrong]
    assert doc["jobs"][0]["trials"] == trials


def test_ceilings_document(monkeypatch):
    """`ceilings --format json`, a GPU command: run by the CLI with the measurement faked (a timed and a skipped
    rung, the cache key of a GPU NVML reports clocks for), as tests/test_json_documents.py does."""
    from gemmbench.measure import ceilings

    key = {"gpu": "NVIDIA H200", "uuid": "GPU-0", "sm_max_mhz": 1980, "sm_app_mhz": 1755, "mode": "cold",
           "torch": torch.__version__}  # fmt: skip
    got = ceilings.Ceilings(
        mode="cold", bandwidth_ladder=[[1 << 20, 900.0], [1 << 30, 4200.0]], peak_tflops={"bf16": 700.0},
        compute_ladder=[dict(dtype="bf16", m=8192, n=8192, k=8192, median_us=1600.0, fast_us=1570.0, tflops=700.0),
                        dict(dtype="fp8", m=8192, n=8192, k=8192, skipped="no fp8 path")],
        key=key,
    )  # fmt: skip
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(ceilings, "ceilings", lambda mode, remeasure=False: got)
    doc = document(invoke("ceilings", "--format", "json"))
    assert doc["key"] == key


def test_a_shipped_schema_takes_a_later_key_that_the_model_refuses():
    """Within a version a document only gains keys: a reader's shipped schema takes a key it does not list, and the
    model refuses it, so that a key added to a document without its model fails these tests."""
    import pydantic

    doc = valid({"schema": "gemmbench.shapes/1", "sets": []})  # the smallest document there is: no built-in set listed
    later = dict(doc, added_later=1)
    schema = json.loads(shipped_file("gemmbench.shapes/1").read_text(encoding="utf-8"))
    assert not list(Draft202012Validator(schema).iter_errors(later))
    with pytest.raises(pydantic.ValidationError, match="added_later"):
        json_schemas.MODELS["gemmbench.shapes/1"].model_validate(later)
