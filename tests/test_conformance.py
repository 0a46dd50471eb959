"""Every source, parser and rule is declared properly and has a test."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest
from hostkit import run

from gputriage import sources
from gputriage.facts import is_fact
from gputriage.rules import all_rules
from gputriage.sources import PARSED, parser_of

TESTS = Path(__file__).parent
ALL_TEST_TEXT = "\n".join(p.read_text() for p in TESTS.glob("test_*.py"))


def _rule_cases() -> dict:
    """RULE_CASES of tests/test_rules.py and of every tests/test_rules_*.py."""
    cases: dict = {}
    for path in sorted(TESTS.glob("test_rules*.py")):
        module = importlib.import_module(path.stem)
        for rule_id, items in getattr(module, "RULE_CASES", {}).items():
            cases.setdefault(rule_id, []).extend(items)
    return cases


RULE_CASES = _rule_cases()
CASES = [(rule_id, sources, expected) for rule_id, items in RULE_CASES.items()
         for sources, expected in items]


@pytest.mark.parametrize(("rule_id", "sources", "expected"), CASES,
                         ids=[f"{r}->{e}" for r, _, e in CASES])
def test_rule_fires(rule_id, sources, expected):
    """Every case of every tests/test_rules*.py: the host makes the rule fire."""
    result = run(**sources)
    assert expected in {f.id for f in result.findings}, [f.id for f in result.findings]


def test_sources_are_unique_and_described():
    names = [s.name for s in sources.SOURCES]
    assert len(names) == len(set(names))
    files = [s.filename for s in sources.SOURCES]
    assert len(files) == len(set(files))
    for s in sources.SOURCES:
        assert s.kind in {"file", "command", "tree", "devnodes", "nvml"}, s.name
        assert s.description, s.name
        assert s.timeout_s > 0 and s.cap_bytes > 0
        if s.kind == "command":
            assert s.argv and all(isinstance(a, str) for a in s.argv), s.name
        if s.kind in ("file", "tree", "devnodes"):
            assert s.path and s.path.startswith("/"), s.name


def test_every_parser_names_a_source_has_a_docstring_and_a_test():
    for source in PARSED:
        module, _, func = (sources.BY_NAME[source].parser or "").partition(":")
        fn, _ = parser_of(source)
        assert inspect.getdoc(fn), f"{module}.{func} has no docstring"
        assert func in ALL_TEST_TEXT, f"no test calls {module}.{func}"


def test_every_rule_is_unique_documented_and_exercised():
    rules = all_rules()
    ids = [r.id for r in rules]
    assert len(ids) == len(set(ids))
    produced = [p for r in rules for p in r.produces]
    assert len(produced) == len(set(produced)), "two rules claim one finding id"
    for r in rules:
        assert r.doc, f"rule {r.id} has no docstring"
        assert r.produces, f"rule {r.id} declares no finding ids"
        assert RULE_CASES.get(r.id), f"rule {r.id} has no case in tests/test_rules.py"
        for _, expected in RULE_CASES[r.id]:
            assert expected in r.produces, f"{r.id} does not declare {expected}"
        for name in r.requires + r.any_of:
            assert is_fact(name), f"rule {r.id} needs an unknown fact {name}"


def test_rules_read_facts_only_through_their_parameters():
    """A rule's parameters name the facts it reads; each is a known fact, and the rule
    neither takes the fact store nor reaches the snapshot (issue 11)."""
    for r in all_rules():
        if r.legacy:
            continue  # transitional: converted module by module
        for name in r.reads + r.any_of:
            assert is_fact(name), f"rule {r.id} reads an unknown fact {name}"
        assert set(r.any_of) <= set(r.optional), f"rule {r.id}: any_of must be optional"


def test_every_rules_module_is_an_area_or_a_helper():
    from gputriage.rules import AREAS

    rules = all_rules()
    for area in AREAS:
        assert any(r.func.__module__ == f"gputriage.rules.{area}" for r in rules), area
