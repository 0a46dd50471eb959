"""The tables test modules declare for the checks that span them, read by name:

- ``RULE_CASES`` of tests/test_rules.py and tests/test_rules_*.py: ``{rule id: [(sources,
  finding id)]}``, the hosts that make each rule fire (tests/test_conformance.py runs them);
- ``SOURCE_SAMPLES`` of any tests/test_*.py: ``{source: (sample ref, ...)}``, the real
  samples of each source (tests/test_sources.py reads them), and ``NO_SAMPLE_YET``:
  ``{source: what a real sample would be}`` for a parsed source that has none yet;
- ``GOLDEN`` of tests/test_corpus_golden_*.py: one verdict row per corpus sample.

This is the one module that imports test modules, and it reads only those tables: a test
module imports its builders from the helper modules (tests/hostkit.py, smi_kit.py,
kernel_kit.py, nccl_kit.py, golden.py, ...), never from another test module
(tests/test_suite_layout.py checks it)."""

from __future__ import annotations

import importlib
from functools import cache
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parent


def _declaring(pattern: str, table: str) -> list[Any]:
    """The test modules matching ``pattern`` whose text names ``table``, in name order."""
    return [importlib.import_module(path.stem) for path in sorted(TESTS.glob(pattern))
            if table in path.read_text(encoding="utf-8")]


@cache
def rule_cases() -> dict[str, list[tuple[dict[str, Any], str]]]:
    """Every module's RULE_CASES, joined by rule id."""
    cases: dict[str, list[tuple[dict[str, Any], str]]] = {}
    for module in _declaring("test_rules*.py", "RULE_CASES"):
        for rule_id, items in getattr(module, "RULE_CASES", {}).items():
            cases.setdefault(rule_id, []).extend(items)
    return cases


def rule_case_list() -> list[tuple[str, dict[str, Any], str]]:
    """``(rule id, sources, finding id)`` for every case, in declaration order."""
    return [(rule_id, sources, expected) for rule_id, items in rule_cases().items()
            for sources, expected in items]


@cache
def source_samples() -> dict[str, tuple[str, ...]]:
    """Every module's SOURCE_SAMPLES, joined by source: tests/test_sources.py's first."""
    modules = _declaring("test_*.py", "SOURCE_SAMPLES")
    modules.sort(key=lambda m: m.__name__ != "test_sources")
    found: dict[str, tuple[str, ...]] = {}
    for module in modules:
        for name, refs in getattr(module, "SOURCE_SAMPLES", {}).items():
            found[name] = found.get(name, ()) + tuple(refs)
    return found


@cache
def no_sample_yet() -> dict[str, str]:
    """Every module's NO_SAMPLE_YET, joined: the parsed sources without a real sample."""
    found: dict[str, str] = {}
    for module in _declaring("test_*.py", "NO_SAMPLE_YET"):
        found.update(getattr(module, "NO_SAMPLE_YET", {}))
    return found


@cache
def golden_tables() -> dict[str, dict[str, Any]]:
    """The GOLDEN table of each tests/test_corpus_golden_*.py, by module name."""
    return {module.__name__: module.GOLDEN
            for module in _declaring("test_corpus_golden_*.py", "GOLDEN")}
