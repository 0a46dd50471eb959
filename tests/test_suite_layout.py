"""The suite's own shape. A test module takes its builders from the helper modules under
tests/ (hostkit.py, smi_kit.py, kernel_kit.py, nccl_kit.py, golden.py, ...), never from
another test module or from conftest.py: changing one test module then breaks no other.
The tables that span modules (RULE_CASES, SOURCE_SAMPLES, GOLDEN) are read through
tests/declared.py, the one module that imports test modules (by name, for those tables).

And every test the quick loop leaves out is marked with the registered ``slow`` marker
(pyproject.toml), so that `pytest -m slow`, the second stage of .ci/run, runs it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from analysed import SHARING_MODULES

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the package pyproject asks for there
    import tomli as tomllib

TESTS = Path(__file__).resolve().parent
DECLARED = TESTS / "declared.py"  # reads the declared tables of test modules, by name


def _is_test_module(name: str) -> bool:
    top = name.split(".")[0]
    return top == "conftest" or top.startswith("test_")


def _imported_by_name(call: ast.Call) -> str | None:
    """The module an ``import_module(...)`` / ``__import__(...)`` call imports: its name
    when written out, "?" when computed; None for any other call."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else \
        func.id if isinstance(func, ast.Name) else ""
    if name not in ("import_module", "__import__"):
        return None
    first = call.args[0] if call.args else None
    return first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) \
        else "?"


def offences(source: str, may_import_by_name: bool = False) -> list[str]:
    """Where ``source`` imports a test module or conftest: ``import test_x``, ``from
    test_x import ...``, or (unless ``may_import_by_name``) ``importlib.import_module``
    / ``__import__`` of one, or of a computed name (which may be one)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import {a.name}" for a in node.names
                      if _is_test_module(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and _is_test_module(node.module):
            found.append(f"line {node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.Call) and not may_import_by_name:
            module = _imported_by_name(node)
            if module is not None and (module == "?" or _is_test_module(module)):
                found.append(f"line {node.lineno}: imports {module} by name")
    return found


def _python_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "fixtures" not in p.relative_to(TESTS).parts)


def test_no_test_module_imports_another() -> None:
    bad = {str(p.relative_to(TESTS)): found for p in _python_files()
           if (found := offences(p.read_text(encoding="utf-8"), may_import_by_name=p == DECLARED))}
    assert not bad, ("move what is shared into a helper module under tests/ "
                     f"(hostkit.py, smi_kit.py, ...): {bad}")


@pytest.mark.parametrize("source", [
    "from test_rules import HEALTHY\n",
    "import test_rules_memory as memory\n",
    "def f():\n    from test_rules_pcie import smi_q\n",
    "from conftest import find_corpus\n",
    "import importlib\nmodule = importlib.import_module('test_rules')\n",
    "mod = __import__('test_' + 'rules')\n",
], ids=["from", "import-as", "in-a-function", "conftest", "import_module", "computed"])
def test_the_check_finds_each_way_of_importing_a_test_module(source: str) -> None:
    assert offences(source)


def test_the_check_lets_helpers_and_the_package_through() -> None:
    assert not offences("from hostkit import run\nimport smi_kit\nfrom golden import flat\n"
                        "from gputriage.rules import all_rules\nimport testinfra\n"
                        "json = __import__('json')\n")


def test_slow_is_the_registered_marker_the_quick_loop_leaves_out() -> None:
    ini = tomllib.loads((TESTS.parent / "pyproject.toml").read_text())["tool"]["pytest"][
        "ini_options"]
    assert any(m.startswith("slow:") for m in ini["markers"])
    assert "-m 'not slow'" in ini["addopts"] and "--strict-markers" in ini["addopts"]
    ci = (TESTS.parent / ".ci" / "run").read_text()
    assert "python -m pytest -m slow" in ci


def _reads_the_analysed_fixture(source: str) -> bool:
    return any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
               and any(a.arg == "analysed" for a in node.args.args)
               for node in ast.walk(ast.parse(source)))


def test_the_modules_sharing_analyses_are_the_ones_listed() -> None:
    """One worker runs the modules that read the ``analysed`` fixture (tests/conftest.py),
    so that each analysis they share is made once: a module added to them is listed."""
    reading = {p.name for p in _python_files() if p.name.startswith("test_")
               and _reads_the_analysed_fixture(p.read_text(encoding="utf-8"))}
    assert reading == SHARING_MODULES
