"""The CI files: the GPU perf workflow's guard against forks, its permissions and concurrency, the stack it pins
(.ci/perf-stack.txt, which must be the committed baseline's), and .ci/run running the README's test command.  The
workflow's schema is checked by .ci/run (check-jsonschema); its `if:` is evaluated here for each kind of event."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from gemmbench.results import store

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "perf.yml"
STACK_FILE = ROOT / ".ci" / "perf-stack.txt"


@pytest.fixture(scope="module")
def workflow() -> dict:
    data = yaml.safe_load(WORKFLOW.read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as true
    return data


def evaluate(expression: str, context: dict) -> bool:
    """A GitHub Actions expression of the forms the workflow uses (contexts, 'strings', ==, !=, &&, ||, !,
    parentheses) on a context dict; a context path that is not there is null, as in Actions."""

    def lookup(path: str):
        value = context
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        return value

    python = re.sub(r"\b(github(?:\.[A-Za-z_][A-Za-z0-9_-]*)+)", lambda m: f"lookup({m[1]!r})", expression)
    python = python.replace("&&", " and ").replace("||", " or ")
    python = re.sub(r"!(?!=)", " not ", python)
    assert not re.search(r"[A-Za-z_]\w*\(", python.replace("lookup(", "")), f"a function call: {expression}"
    return bool(eval(python, {"__builtins__": {}}, {"lookup": lookup}))  # noqa: S307 - the expression is ours


def pull_request(head: str, base: str = "org/gemmbench") -> dict:
    return {
        "event_name": "pull_request",
        "repository": base,
        "event": {"pull_request": {"number": 7, "head": {"repo": {"full_name": head}}}},
    }


def test_fork_pull_requests_never_reach_the_gpu_runner(workflow):
    (job,) = workflow["jobs"].values()
    assert "self-hosted" in job["runs-on"]
    condition = job["if"]
    assert not evaluate(condition, {"github": pull_request(head="someone/gemmbench")})  # a fork's pull request
    assert evaluate(condition, {"github": pull_request(head="org/gemmbench")})  # a branch of this repository
    assert evaluate(condition, {"github": {"event_name": "workflow_dispatch", "repository": "org/gemmbench"}})


def test_triggers_permissions_and_concurrency(workflow):
    # pull_request_target would run with this repository's token and secrets: never, with the PR's code checked out
    assert set(workflow["on"]) == {"pull_request", "workflow_dispatch"}
    assert workflow["permissions"] == {"contents": "read"}
    (job,) = workflow["jobs"].values()
    assert "permissions" not in job  # nothing widens it per job
    concurrency = workflow["concurrency"]
    assert concurrency["cancel-in-progress"] is True
    # one group per pull request (a new push cancels its own run, not another pull request's)
    assert "github.event.pull_request.number" in concurrency["group"]
    checkout = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"]["persist-credentials"] is False


def test_the_workflow_installs_the_pinned_stack(workflow):
    (job,) = workflow["jobs"].values()
    runs = "\n".join(s.get("run", "") for s in job["steps"])
    assert "pip install -r .ci/perf-stack.txt -e ." in runs
    # no BASELINE: the script takes the baseline of the runner's GPU model
    assert "scripts/ci-perf.sh" in runs and "BASELINE=" not in runs


def test_the_pinned_stack_is_the_committed_baselines():
    """.ci/perf-stack.txt pins the torch (with its CUDA build) and triton that every row of every committed baseline
    records: the gate installs what the baselines were measured with."""
    pins = dict(re.findall(r"(?m)^([a-z]+)==(\S+)$", STACK_FILE.read_text()))
    assert set(pins) == {"torch", "triton"}
    files = sorted((ROOT / "gemmbench" / "baselines").glob("*.parquet"))
    assert [f.name for f in files] == ["h100.parquet", "h200.parquet"]
    base = store.load(files)
    assert set(base["torch"]) == {pins["torch"]} and set(base["triton"]) == {pins["triton"]}
    # torch's local version names its CUDA build: +cu130 is CUDA 13.0, from that CUDA's index
    cu = re.fullmatch(r"[\d.]+\+cu(\d+)(\d)", pins["torch"])
    assert cu and set(base["cuda"]) == {f"{cu[1]}.{cu[2]}"}
    assert f"https://download.pytorch.org/whl/cu{cu[1]}{cu[2]}" in STACK_FILE.read_text()


def test_ci_runs_the_readme_test_command_and_checks_the_workflows():
    readme = (ROOT / "README.md").read_text()
    (command,) = re.findall(
        r"(?m)^python3 -m venv \.venv && \. \.venv/bin/activate && (pip install .*pytest .*)$", readme
    )
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert command in ci  # verbatim, a line of its own
    assert "check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml" in ci
    # the checks run before the tests: a schema error fails fast
    assert ci.index("check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml") < ci.index(
        command
    )
