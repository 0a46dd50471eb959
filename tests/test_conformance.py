"""Every rule is declared properly and has a test (sources: tests/test_sources.py)."""

from __future__ import annotations

import contextlib

import pytest
from conformance_kit import finding_problems, rule_problems, rules_problems
from declared import rule_case_list, rule_cases
from hostkit import run

from gputriage.facts.store import is_fact
from gputriage.rules import all_rules

RULE_CASES = rule_cases()  # of tests/test_rules.py and every tests/test_rules_*.py
CASES = rule_case_list()


@pytest.mark.parametrize(("rule_id", "sources", "expected"), CASES,
                         ids=[f"{r}->{e}" for r, _, e in CASES])
def test_rule_fires(rule_id, sources, expected):
    """Every case of every tests/test_rules*.py: the host makes the rule fire, with a
    severity, action and blame that agree and its next step."""
    result = run(**sources)
    assert expected in {f.id for f in result.findings}, [f.id for f in result.findings]
    assert not finding_problems(f for f in result.findings if f.id == expected)


def test_every_rule_is_unique_documented_and_exercised():
    rules = all_rules()
    problems = rules_problems(rules)
    problems += [p for r in rules for p in rule_problems(r, RULE_CASES.get(r.id, ()))]
    assert not problems, "\n".join(problems)


def test_rules_read_facts_only_through_their_parameters():
    """A rule's parameters name the facts it reads; each is a known fact, and the rule
    neither takes the fact store nor reaches the snapshot (issue 11)."""
    for r in all_rules():
        for name in r.reads + r.any_of:
            assert is_fact(name), f"rule {r.id} reads an unknown fact {name}"
        assert set(r.any_of) <= set(r.optional), f"rule {r.id}: any_of must be optional"


def test_every_rules_module_is_an_area_or_a_helper():
    from gputriage.rules import AREAS

    rules = all_rules()
    for area in AREAS:
        assert any(r.func.__module__ == f"gputriage.rules.{area}" for r in rules), area


def test_an_explicit_fact_named_after_a_source_does_not_read_itself():
    """A fact that shares its source's name replaces the parsed source; building every
    such fact on a scenario must not recurse."""
    from hostkit import nvml_doc, snap

    from gputriage import sources
    from gputriage.facts.registry import REGISTRY
    from gputriage.facts.store import Facts, Missing

    facts = Facts(snap(nvml=nvml_doc(["0000:01:00.0"]), device_query="Result = PASS\n"))
    for name in REGISTRY:
        if name in sources.BY_NAME:
            with contextlib.suppress(Missing):
                facts.get(name)
