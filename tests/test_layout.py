"""The file tree is the import tree, and the packages keep their layering.  Pure file reads and AST, no heavy import.

- Every `gemmbench.X.Y` the code names (imports at any depth, `importlib.import_module`, `importlib.resources.files`,
  `find_spec`, `python -m` commands, `monkeypatch.setattr` / `mock.patch` targets) is a file or folder of gemmbench/,
  and a name taken `from gemmbench.X import name` is a submodule or is bound at X's top; no `package-dir` remap.
- The layering, low to high: the base (gemmbench/*.py) < models < results < measure < configs < kernels < engine <
  {cli, plot, profile}.  A module imports its own package and lower ones, never a higher one (imports inside
  functions count); the one exception, the registry's plugin loader, is named in ALLOWED with its reason.
- The plugin API keeps its import path (gemmbench.registry) and the documented plugin example still matches it.
- Every package has an __init__.py whose docstring says its job.
- No kernel file (gemmbench/kernels/*.py) is over KERNEL_FILE_LINES lines: a kernel that grows is split (device code
  and host code), not scrolled.
"""

from __future__ import annotations

import ast
import inspect
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "gemmbench"

# the layers, low to high; a top-level module of gemmbench (gemmbench/*.py) is the base
LAYERS = ("base", "models", "results", "measure", "configs", "kernels", "engine", "top")
PACKAGE_LAYER = {
    "baselines": "base",  # data: the shipped named baselines (no code)
    "shapesets": "base",  # data: the built-in shape sets (no code)
    "models": "models",
    "results": "results",
    "measure": "measure",
    "configs": "configs",
    "kernels": "kernels",
    "engine": "engine",
    "cli": "top",
    "plot": "top",
    "profile": "top",
}
# a module whose layer is not its folder's, with the reason
MODULE_LAYER = {
    "gemmbench.__main__": ("top", "`python -m gemmbench`: the CLI's entry point, which nothing imports"),
}
# importer -> imported: the imports that may go up a layer, each with its reason
ALLOWED = {
    ("gemmbench.registry", "gemmbench.kernels"): (
        "the plugin loader: registry._load_builtins() imports the built-in kernels package by name "
        "(importlib.import_module), as it loads plugin files and entry points, so that the kernels import the "
        "registry to register themselves and never the other way round at import time"
    ),
}
SCAN = [PKG, ROOT / "tests", ROOT / "scripts"]


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _source_file(name: str) -> Path | None:
    """gemmbench/X/Y.py or gemmbench/X/Y/__init__.py for the module gemmbench.X.Y, else None."""
    base = ROOT.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _exists(name: str) -> bool:
    """A module, a package, or a data folder (importlib.resources reads one by its dotted name)."""
    return _source_file(name) is not None or ROOT.joinpath(*name.split(".")).is_dir()


@cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


@cache
def _top_level_names(path: Path) -> frozenset[str] | None:
    """The names a module binds at its top (in if/try blocks too); None when any name may be there (a star import,
    a module __getattr__)."""
    names: set[str] = set()

    def visit(body: list[ast.stmt]) -> bool:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    if alias.name == "*":
                        return False
                    names.add(alias.asname or alias.name.split(".")[0])
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
            elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
                blocks = [node.body, getattr(node, "orelse", []), getattr(node, "finalbody", [])]
                blocks += [h.body for h in getattr(node, "handlers", [])]
                if not all(visit(block) for block in blocks):
                    return False
        return True

    if not visit(_tree(path).body) or "__getattr__" in names:
        return None
    return frozenset(names)


def _resolve_relative(importer: str, is_package: bool, level: int, module: str | None) -> str:
    parts = importer.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def _named(path: Path) -> list[tuple[int, str, str]]:
    """(line, name, how) for every gemmbench module the file names.  how: "import" (an import statement or
    importlib.import_module: runs the module), "resource" (importlib.resources.files: imports the package),
    "lookup" (find_spec, a `python -m` command: names it, imports nothing here), "target" (the module part of a
    monkeypatch.setattr / mock.patch string), "from" ("MODULE:NAME" for `from MODULE import NAME` where NAME is not
    a submodule: a name MODULE must bind)."""
    return _named_in(_tree(path), _module_name(path), path.name == "__init__.py")


def _named_in(tree: ast.Module, importer: str, is_package: bool) -> list[tuple[int, str, str]]:
    found: list[tuple[int, str, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, "import") for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                module = _resolve_relative(importer, is_package, node.level, node.module)
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                found.append((node.lineno, sub if _exists(sub) else module, "import"))
                if not _exists(sub) and alias.name != "*":
                    found.append((node.lineno, f"{module}:{alias.name}", "from"))
        elif isinstance(node, ast.Call) and node.args:
            first = node.args[0]
            if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
                continue
            func = ast.unparse(node.func).split(".")[-1]
            how = {"import_module": "import", "files": "resource", "find_spec": "lookup", "_package_dir": "lookup"}
            if func in how:
                found.append((node.lineno, first.value, how[func]))
            elif func in ("setattr", "delattr", "patch") and "." in first.value:
                found.append((node.lineno, first.value.rsplit(".", 1)[0], "target"))
        elif isinstance(node, (ast.List, ast.Tuple)):
            for flag, arg in zip(node.elts, node.elts[1:], strict=False):
                if isinstance(flag, ast.Constant) and flag.value == "-m" and isinstance(arg, ast.Constant):
                    found.append((node.lineno, str(arg.value), "lookup"))
    return [(line, name, how) for line, name, how in found if name.split(".")[0].split(":")[0] == "gemmbench"]


def _python_files() -> list[Path]:
    return sorted(p for folder in SCAN for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


# --- a. the file tree is the import tree ------------------------------------------------------------------------


def test_every_named_module_exists():
    missing = []
    for path in _python_files():
        for line, name, how in _named(path):
            where = f"{_rel(path)}:{line}"
            if how == "from":  # from MODULE import NAME, NAME not a submodule: MODULE must bind it at its top
                module, attr = name.split(":")
                source = _source_file(module)
                bound = _top_level_names(source) if source else frozenset()
                if source is not None and bound is not None and attr not in bound:
                    missing.append(f"{where}: from {module} import {attr} (neither a submodule nor bound there)")
            elif how == "target":  # a patch target: MODULE.attr, or MODULE.Class.attr
                if not (_exists(name) or _exists(name.rsplit(".", 1)[0])):
                    missing.append(f"{where}: patch target in {name} (no such module)")
            elif not _exists(name):
                missing.append(f"{where}: {name}")
    assert not missing, "modules named that are not files of gemmbench/:\n" + "\n".join(missing)


def test_the_scan_sees_every_kind_of_import():
    """The checks read what they should: imports at any depth, relative ones, a name that is a submodule or not,
    import_module, package data, `python -m`, patch targets."""
    source = """
import gemmbench.a
from gemmbench.registry import register
from gemmbench import dtypes
def f(monkeypatch):
    from ..results import store
    importlib.import_module("gemmbench.kernels")
    importlib.resources.files("gemmbench.shapesets")
    subprocess.run([sys.executable, "-m", "gemmbench.engine.worker"])
    monkeypatch.setattr("gemmbench.measure.device.detect", None)
"""
    named = {(name, how) for _, name, how in _named_in(ast.parse(source), "gemmbench.engine.layer", False)}
    assert named == {
        ("gemmbench.a", "import"),
        ("gemmbench.registry", "import"),
        ("gemmbench.registry:register", "from"),
        ("gemmbench.dtypes", "import"),
        ("gemmbench.results.store", "import"),
        ("gemmbench.kernels", "import"),
        ("gemmbench.shapesets", "resource"),
        ("gemmbench.engine.worker", "lookup"),
        ("gemmbench.measure.device", "target"),
    }
    assert ("gemmbench.kernels", "import") in {(name, how) for _, name, how in _named(PKG / "registry.py")}


def test_no_package_dir_remap():
    """No folder is installed under another name: [tool.setuptools] package-dir, setup(package_dir=...)."""
    pyproject = [line.split("#")[0] for line in (ROOT / "pyproject.toml").read_text(encoding="utf-8").splitlines()]
    assert not [line for line in pyproject if re.search(r"package-dir|package_dir", line)], "pyproject.toml remaps"
    for node in ast.walk(_tree(ROOT / "setup.py")):
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("setup"):
            assert "package_dir" not in {k.arg for k in node.keywords}, "setup.py remaps a package folder"
    assert not (ROOT / "setup.cfg").exists() or "package_dir" not in (ROOT / "setup.cfg").read_text(encoding="utf-8")


# --- b. the layering --------------------------------------------------------------------------------------------


def _layer(module: str) -> str:
    if module in MODULE_LAYER:
        return MODULE_LAYER[module][0]
    parts = module.split(".")
    if len(parts) >= 2 and (PKG / parts[1]).is_dir():
        return PACKAGE_LAYER[parts[1]]
    return "base"


def test_every_package_has_a_layer():
    folders = {p.name for p in PKG.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == set(PACKAGE_LAYER), (
        "place each package of gemmbench/ in PACKAGE_LAYER (and in docs/ARCHITECTURE.md)"
    )
    assert set(PACKAGE_LAYER.values()) <= set(LAYERS)


def test_layering():
    violations = []
    for path in sorted(PKG.rglob("*.py")):
        importer = _module_name(path)
        for line, imported, how in _named(path):
            if how not in ("import", "resource") or (importer, imported) in ALLOWED:
                continue
            if LAYERS.index(_layer(importer)) < LAYERS.index(_layer(imported)):
                violations.append(f"{importer} -> {imported}  ({_rel(path)}:{line}: "
                                  f"{_layer(importer)} imports {_layer(imported)})")  # fmt: skip
    assert not violations, "imports of a higher layer:\n" + "\n".join(violations)


def test_allowed_exceptions_are_still_there():
    """An exception that no longer happens is removed from ALLOWED, not kept as a licence."""
    named = {(_module_name(path), name) for path in PKG.rglob("*.py") for _, name, how in _named(path)}
    assert set(ALLOWED) <= named
    assert all(_layer(a) != _layer(b) for a, b in ALLOWED)


# --- c. the plugin API ------------------------------------------------------------------------------------------

PLUGIN_API = ("register", "Variant", "Launch", "Problem")


def test_plugin_api_import_path():
    import gemmbench.shapes
    from gemmbench.registry import Launch, Problem, Variant, register

    assert Problem is gemmbench.shapes.Problem
    assert callable(register) and inspect.isclass(Variant) and inspect.isclass(Launch)


def _doc_pages() -> list[Path]:
    return [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]


def _calls_match(source: str, where: str) -> list[str]:
    """The names a snippet imports from gemmbench.registry exist there, and its Variant(...) and Launch(...) calls
    bind to their signatures."""
    from gemmbench import registry

    wrong = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module == "gemmbench.registry":
            wrong += [
                f"{where}: no {a.name} in gemmbench.registry" for a in node.names if not hasattr(registry, a.name)
            ]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("Variant", "Launch"):
            signature = inspect.signature(getattr(registry, node.func.id))
            try:
                signature.bind(*node.args, **{k.arg: k.value for k in node.keywords if k.arg})
            except TypeError as exc:
                wrong.append(f"{where}: {ast.unparse(node)[:80]}: {exc}")
    return wrong


def test_documented_plugin_example_matches_the_api():
    examples = []
    for page in _doc_pages():
        for block in re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S):
            if "from gemmbench.registry import" in block:
                examples.append((f"{_rel(page)} example", block))
    assert examples, "the plugin example (a ```python block importing gemmbench.registry) is gone from the docs"
    wrong = [w for where, block in examples for w in _calls_match(block, where)]
    for where, block in examples:
        tree = ast.parse(block)
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "gemmbench.registry"
                    for a in n.names}  # fmt: skip
        wrong += [f"{where}: imports {name} from gemmbench.registry, not the plugin API {PLUGIN_API}"
                  for name in sorted(imported - set(PLUGIN_API))]  # fmt: skip
    assert not wrong, "\n".join(wrong)


def test_documented_signatures_match():
    """CONTRIBUTING.md spells out `Variant(name, family, …, supports=None, …)` and `Launch(fn=..., …)`: the
    positional names in their order, the keywords with their defaults."""
    from gemmbench import registry

    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    found = re.findall(r"`((Variant|Launch)\([^`]*\))`", re.sub(r"\s*\n\s*", " ", text))
    assert {kind for _, kind in found} == {"Variant", "Launch"}, (
        "CONTRIBUTING.md no longer spells out Variant and Launch"
    )
    wrong = []
    for spelled, kind in found:
        call = ast.parse(re.sub(r",\s*…", "", spelled), mode="eval").body
        assert isinstance(call, ast.Call)
        params = list(inspect.signature(getattr(registry, kind)).parameters.values())
        for i, arg in enumerate(call.args):
            name = arg.id if isinstance(arg, ast.Name) else ast.unparse(arg)
            if i >= len(params) or params[i].name != name:
                wrong.append(f"{spelled}: positional {i + 1} is {name}, the signature's is "
                             f"{params[i].name if i < len(params) else 'nothing'}")  # fmt: skip
        by_name = {p.name: p for p in params}
        for kw in call.keywords:
            if kw.arg not in by_name:
                wrong.append(f"{spelled}: {kind} takes no {kw.arg}")
            elif not (isinstance(kw.value, ast.Constant) and kw.value.value is Ellipsis):
                if ast.literal_eval(kw.value) != by_name[kw.arg].default:
                    wrong.append(f"{spelled}: {kw.arg}={ast.unparse(kw.value)}, the default is "
                                 f"{by_name[kw.arg].default!r}")  # fmt: skip
    assert not wrong, "\n".join(wrong)


# --- d. packages say their job ----------------------------------------------------------------------------------


def _packages() -> list[Path]:
    """Every folder of gemmbench/ that is a package: the top-level ones (code or data) and any deeper folder that
    holds Python files (gemmbench/kernels/configs, tuned configs only, is data inside a package)."""
    folders = {p for p in PKG.iterdir() if p.is_dir() and p.name != "__pycache__"}
    folders |= {p.parent for p in PKG.rglob("*.py") if "__pycache__" not in p.parts}
    return sorted(folders)


@pytest.mark.parametrize("folder", _packages(), ids=lambda p: _rel(p))
def test_package_says_its_job(folder):
    init = folder / "__init__.py"
    assert init.is_file(), f"{_rel(folder)} has no __init__.py (a namespace package by accident)"
    doc = ast.get_docstring(_tree(init))
    assert doc and doc.strip(), f"{_rel(init)} has no docstring: one to three lines saying the package's job"
    summary = doc.strip().split("\n\n")[0]
    assert len(summary.splitlines()) <= 3, f"{_rel(init)}: its docstring's first paragraph is over three lines"


KERNEL_FILE_LINES = 500


@pytest.mark.parametrize("path", sorted((PKG / "kernels").glob("*.py")), ids=lambda p: p.name)
def test_no_kernel_file_is_over_its_line_limit(path):
    lines = len(path.read_text().splitlines())
    assert lines <= KERNEL_FILE_LINES, f"{_rel(path)}: {lines} lines, over {KERNEL_FILE_LINES}: split it"
