"""The conformance checks of one source, one rule and one finding id, each returning the
problems it finds (empty: conforms). tests/test_sources.py and tests/test_conformance.py
run them on every declared source and rule; tests/test_guide.py runs them on the
example docs/contributing.md builds, so that the guide's example passes the same checks
as the code."""

from __future__ import annotations

import importlib
import inspect
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gputriage import next_steps, sources
from gputriage.facts.store import is_fact
from gputriage.model import Action
from gputriage.rules.base import Rule
from gputriage.sources import Source
from gputriage.text.prompts import CommandAlias, source_for_command, source_for_section
from gputriage.vocabulary import inconsistency

__all__ = ["KINDS", "alias_problems", "declaration_problems", "detector_problems",
           "finding_problems", "registry_problems", "rule_problems", "rules_problems",
           "sample_problems", "step_problems"]

KINDS = frozenset({"file", "command", "tree", "devnodes", "nvml", "input"})
# the module (``gputriage.ingest.detect`` the attribute is its function): its tables are
# read at call time, so that a temporary source (tests/test_guide.py) is seen
detection = importlib.import_module("gputriage.ingest.detect")


# --- a source --------------------------------------------------------------------------
def declaration_problems(s: Source) -> list[str]:
    """What a source's declaration lacks: kind, description, bounds, what it reads, a
    parser (documented) or the reason it is kept as text, a detector if it can be pasted."""
    found = []
    if s.kind not in KINDS:
        found.append(f"{s.name}: unknown kind {s.kind!r}")
    if not s.description or "\n" in s.description:
        found.append(f"{s.name}: the description is one line")
    if not (s.timeout_s > 0 and s.cap_bytes > 0):
        found.append(f"{s.name}: a timeout and a size cap above 0")
    if s.kind in ("command", "input") and not (s.argv and all(isinstance(a, str)
                                                               for a in s.argv)):
        found.append(f"{s.name}: a command or input says what produces it (argv)")
    if s.kind in ("file", "tree", "devnodes") and not (s.path and s.path.startswith("/")):
        found.append(f"{s.name}: an absolute path")
    if s.collect != (s.kind != "input" and s.opt_in is None):
        found.append(f"{s.name}: collected unless an input or opt-in")
    if s.opt_in and not (s.kind == "command" and "{}" in s.argv):
        found.append(f"{s.name}: an opt-in command takes the option's value as {{}}")
    if bool(s.parser) == bool(s.raw):
        found.append(f"{s.name}: a parser or a raw reason, not both")
    if s.parser and not inspect.getdoc(sources.load(s.parser)):
        found.append(f"{s.parser} has no docstring")
    if s.kind in ("command", "input") and s.parser and not s.detector:
        found.append(f"{s.name} can be pasted but has no detector")
    return found


def detector_problems(s: Source) -> list[str]:
    """A detector documented, run at an order of its own; prompt options only with one;
    the list of ``analyze --formats`` naming every source that has one."""
    found = []
    if s.prompt_step and not callable(sources.load(s.prompt_step)):
        found.append(f"{s.name}: prompt_step {s.prompt_step} is not a function")
    if not s.detector:
        if s.keeps_prompt or s.prompt_step or s.detect_order:
            found.append(f"{s.name}: keeps_prompt, prompt_step and detect_order need a "
                         "detector")
    else:
        if s.detect_order <= 0:
            found.append(f"{s.name}: a detect_order above 0")
        if s.keeps_prompt not in (None, "alone", "named"):
            found.append(f"{s.name}: keeps_prompt is 'alone' or 'named'")
        if not inspect.getdoc(sources.load(s.detector)):
            found.append(f"{s.detector} has no docstring")
    if (f"pasted: {s.description}" in detection.formats()) != bool(s.detector):
        found.append(f"{s.name}: analyze --formats names exactly the sources with a "
                     "detector")
    return found


def alias_problems(s: Source) -> list[str]:
    """Each alias of a source, and its example command, maps back to it."""
    found = []
    for a in s.aliases:
        if a.startswith("*** "):
            got = source_for_section(a[4:])
        elif a.startswith("/"):
            got = source_for_command(f"cat {a}")
        else:
            example = CommandAlias.parse(s.name, a).example()
            got = source_for_command(example)
            a = f"{a} ({example})"
        if got != s.name:
            found.append(f"{s.name}: the alias {a} stands for {got}")
    return found


def registry_problems(declared: Sequence[Source]) -> list[str]:
    """Across the sources: unique names and files; one detect_order per detector and no
    two detectors at one order; every detector loaded."""
    found = []
    names = [s.name for s in declared]
    if len(names) != len(set(names)):
        found.append("two sources share a name")
    files = [s.filename for s in declared]
    if len(files) != len(set(files)):
        found.append("two sources share a file name")
    order: dict[str, int] = {}
    for s in declared:
        if s.detector and order.setdefault(s.detector, s.detect_order) != s.detect_order:
            found.append(f"{s.name}: {s.detector} runs at one detect_order")
    if len(set(order.values())) != len(order):
        twice = sorted({o for o in order.values() if list(order.values()).count(o) > 1})
        found.append(f"two detectors share a detect_order: {twice}")
    if len(sources.detectors()) != len(order):
        found.append("sources.detectors() does not list every detector once")
    return found


def sample_problems(name: str, text: str) -> list[str]:
    """A sample of a source: its detector recognises it and its parser reads what the
    detector took."""
    src = sources.get(name)
    if src.detector:
        found = dict(detection.detect(text))
        if name not in found:
            return [f"{name}: the sample is detected as {sorted(found)}"]
        text = found[name]
    if src.parser:
        parse, as_json = sources.parser_of(name)
        if parse(json.loads(text) if as_json else text) is None:
            return [f"{name}: the parser returned None"]
    return []


# --- a rule ----------------------------------------------------------------------------
def rule_problems(r: Rule, cases: Iterable[tuple[Mapping[str, Any], str]]) -> list[str]:
    """A rule documented, declaring its finding ids, exercised by a case that expects one
    of them, reading only facts that exist (any_of among its optional ones)."""
    found = []
    cases = list(cases)
    if not r.doc:
        found.append(f"rule {r.id} has no docstring")
    if not r.produces:
        found.append(f"rule {r.id} declares no finding ids")
    if not cases:
        found.append(f"rule {r.id} has no case in a RULE_CASES of tests/test_rules*.py")
    found += [f"{r.id} does not declare {expected}" for _, expected in cases
              if expected not in r.produces]
    found += [f"rule {r.id} reads an unknown fact {name}"
              for name in dict.fromkeys(r.requires + r.reads + r.any_of) if not is_fact(name)]
    if not set(r.any_of) <= set(r.optional):
        found.append(f"rule {r.id}: any_of must be optional")
    return found


def rules_problems(rules: Sequence[Rule]) -> list[str]:
    """Across the rules: unique ids; no finding id claimed by two rules."""
    ids = [r.id for r in rules]
    produced = [p for r in rules for p in r.produces]
    return ((["two rules share an id"] if len(ids) != len(set(ids)) else [])
            + (["two rules claim one finding id"] if len(produced) != len(set(produced))
               else []))


def finding_problems(findings: Iterable[Any]) -> list[str]:
    """Findings as the engine gave them: severity, action and blame agree, and each
    current one that asks for an action has its next step."""
    found = []
    for f in findings:
        if why := inconsistency(f.severity, f.action, f.blame):
            found.append(f"{f.id}: {why}")
        if f.current and f.action is not Action.NONE and not f.step:
            found.append(f"{f.id}: no next step")
    return found


# --- a finding id ----------------------------------------------------------------------
def step_problems(fid: str) -> list[str]:
    """A finding id has a next step of its own (a row keyed by it, or its catalog's), or
    reports only, not both."""
    has_step = next_steps.repair_of(fid) is not None
    if not has_step and fid not in next_steps.REPORT_ONLY:
        return [f"{fid} has no next step: add a repair keyed by the id to a REPAIRS table "
                "in src/gputriage/next_steps/ (repairs.py's BY_ID joins them), or the id to "
                "next_steps/informational.py's REPORT_ONLY if it never asks for an action"]
    if has_step and fid in next_steps.REPORT_ONLY:
        return [f"{fid} reports only (REPORT_ONLY), yet has a step"]
    return []
