"""docs/contributing.md cannot drift from the code (issue 30). Its worked example (a
pasted ``mlxlink -c`` and the rule ``ib.link-ber``, neither of which the code has) is
built from the guide's own blocks, each marked by a ``<!-- guide: NAME -->`` line above
its fence: the source declaration, the parser and detector, the rule, the next step and
the test module are executed into a temporary registry (the source table and the tables
derived from it, the rule registry, the next steps by id; all restored after), put
through the checks of tests/conformance_kit.py that every real source and rule passes,
and the guide's two pastes are analysed as ``gputriage analyze -`` would: the one gives
the finding and exit status 1, the healthy one none and 0."""

from __future__ import annotations
import __future__

import importlib
import io
import json
import pkgutil
import re
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conformance_kit import (
    alias_problems,
    declaration_problems,
    detector_problems,
    finding_problems,
    registry_problems,
    rule_problems,
    rules_problems,
    sample_problems,
    step_problems,
)
from hostkit import run

from gputriage import sources
from gputriage.cli import main
from gputriage.commands.common import Environment
from gputriage.next_steps import repairs
from gputriage.rules import all_rules, base
from gputriage.text import prompts

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "contributing.md"
_BLOCK = re.compile(r"^<!-- guide: (?P<name>[\w ]+) -->\n```[\w-]*\n(?P<body>.*?)^```\s*$",
                    re.MULTILINE | re.DOTALL)
_FILE = re.compile(r"^#{2,4} .*`(?P<path>(?:src|tests)/[\w/]+\.py)`", re.MULTILINE)
_FUTURE = __future__.annotations.compiler_flag
detection = importlib.import_module("gputriage.ingest.detect")  # the module, not its function
ingest = importlib.import_module("gputriage.ingest")


@dataclass(frozen=True)
class Block:
    """One marked block of the guide and the file its section heading names."""

    body: str
    path: str | None  # src/gputriage/parsers/mlxlink.py, tests/test_rules_mlxlink.py


def guide_blocks(text: str) -> dict[str, Block]:
    """The marked blocks of the guide, by name, each with the file of the heading above."""
    found = {}
    for m in _BLOCK.finditer(text):
        heading = None
        for h in _FILE.finditer(text, 0, m.start()):
            heading = h["path"]
        found[m["name"]] = Block(m["body"], heading)
    return found


def module_name(path: str | None) -> str:
    """``src/gputriage/rules/ib_link.py`` -> ``gputriage.rules.ib_link``."""
    assert path, "a guide block's section heading names its file"
    parts = Path(path).with_suffix("").parts
    return ".".join(parts[1:] if parts[0] == "src" else parts[-1:])


def _run(block: Block, namespace: dict[str, Any]) -> dict[str, Any]:
    exec(compile(block.body, f"<docs/contributing.md: {block.path}>", "exec", flags=_FUTURE,
                 dont_inherit=True), namespace)
    return namespace


def _module(name: str, block: Block) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__file__ = block.path
    sys.modules[name] = module
    _run(block, module.__dict__)
    return module


def _derived_tables() -> None:
    """Rebuild what modules derive from ``sources.SOURCES`` when imported."""
    prompts._ALIASES = prompts.command_aliases()
    prompts._READ_PATHS = prompts._path_patterns(report=False)
    prompts._REPORT_PATHS = prompts._path_patterns(report=True)
    detection.EXPECTED = ingest.EXPECTED = detection.expected()
    detection._KEEPS_PROMPT = {s.name: s.keeps_prompt for s in sources.SOURCES
                               if s.keeps_prompt}
    detection._BARE_CMD = detection._bare_command()
    detection._detectors.cache_clear()
    detection._prompt_steps.cache_clear()


@dataclass
class Example:
    """What the guide's blocks built, installed."""

    source: sources.Source
    rule: base.Rule
    steps: dict[str, Callable[..., Any]]
    tests: dict[str, Any]  # the test module's namespace


@contextmanager
def installed(text: str) -> Iterator[Example]:
    """The guide's example in the registries while the block runs; all restored after."""
    blocks = guide_blocks(text)
    saved_modules = dict(sys.modules)
    saved = {name: getattr(sources, name) for name in ("SOURCES", "BY_NAME", "PARSED")}
    saved_rules, saved_steps = list(base.REGISTRY), dict(repairs.BY_ID)
    try:
        (new,) = _run(blocks["source"], dict(vars(sources)))["SOURCES"]
        if new.name in sources.BY_NAME:  # test_the_example_is_not_in_the_code says so
            pytest.skip(f"the guide's example source {new.name} is in the code now")
        sources.SOURCES = (*sources.SOURCES, new)
        sources.BY_NAME = {s.name: s for s in sources.SOURCES}
        sources.PARSED = tuple(s.name for s in sources.SOURCES if s.parser)
        for ref in {new.parser, new.detector} - {None}:
            assert module_name(blocks["parser"].path) == f"gputriage.{ref.partition(':')[0]}", (
                f"the source names {ref}, the guide's parser section another file")
        _module(module_name(blocks["parser"].path), blocks["parser"])
        _derived_tables()
        before = len(base.REGISTRY)
        _module(module_name(blocks["rule"].path), blocks["rule"])
        (rule,) = base.REGISTRY[before:]
        step_table = pkgutil.resolve_name(module_name(blocks["next step"].path))
        steps = _run(blocks["next step"], dict(vars(step_table)))["REPAIRS"]
        assert not steps.keys() & repairs.BY_ID.keys(), "the next step answers an id again"
        repairs.BY_ID.update(steps)
        tests = _run(blocks["test"], {"__name__": module_name(blocks["test"].path)})
        yield Example(new, rule, steps, tests)
    finally:
        for name, value in saved.items():
            setattr(sources, name, value)
        base.REGISTRY[:] = saved_rules
        repairs.BY_ID.clear()
        repairs.BY_ID.update(saved_steps)
        for name in set(sys.modules) - set(saved_modules):
            del sys.modules[name]
        _derived_tables()


def problems_of(example: Example) -> list[str]:
    """What the conformance checks find wrong with the example, as with any source and
    rule of the code."""
    src, rule = example.source, example.rule
    cases = example.tests.get("RULE_CASES", {})
    found = registry_problems(sources.SOURCES) + declaration_problems(src)
    found += detector_problems(src) + alias_problems(src)
    if src.parser and not (example.tests.get("SOURCE_SAMPLES", {}).get(src.name)
                           or src.name in example.tests.get("NO_SAMPLE_YET", {})):
        found.append(f"{src.name}: a real sample in SOURCE_SAMPLES, or NO_SAMPLE_YET says "
                     "what one would be")
    found += rules_problems(all_rules()) + rule_problems(rule, cases.get(rule.id, ()))
    for fid in rule.produces:
        found += step_problems(fid)
    found += [f"a next step for {fid}, which no rule produces"
              for fid in example.steps if fid not in rule.produces]
    for rule_id, items in cases.items():
        for given, expected in items:
            try:
                result = run(**given)
            except Exception as exc:  # an unknown fact, a parser that raises: say which
                found.append(f"{rule_id}: its case raised {type(exc).__name__}: {exc}")
                continue
            got = [f for f in result.findings if f.id == expected]
            found += [f"{rule_id}: its case gives {sorted(f.id for f in result.findings)}"] \
                if not got else finding_problems(got)
    return found


def analyse(paste: str, monkeypatch: pytest.MonkeyPatch) -> tuple[int, dict[str, Any]]:
    """``gputriage analyze --json -`` of a paste, in this process."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(paste.encode())))
    out, err = io.StringIO(), io.StringIO()
    code = main(["analyze", "--json", "-"], Environment(stdout=out, stderr=err))
    assert out.getvalue(), err.getvalue()
    return code, json.loads(out.getvalue())


TEXT = GUIDE.read_text(encoding="utf-8")


def test_the_guide_marks_every_block_of_its_example() -> None:
    blocks = guide_blocks(TEXT)
    assert {"paste", "healthy paste", "source", "parser", "rule", "next step", "test"} <= \
        set(blocks)
    for name in ("source", "parser", "rule", "next step", "test"):
        assert blocks[name].path, f"the section of the guide's {name} names its file"


def test_the_example_is_not_in_the_code() -> None:
    """The example must stay one the code does not have (typed in, it would collide)."""
    (new,) = _run(guide_blocks(TEXT)["source"], dict(vars(sources)))["SOURCES"]
    assert new.name not in sources.BY_NAME, (
        f"the guide's example source {new.name} is in the code now: give "
        "docs/contributing.md an example the code does not have")
    with installed(TEXT) as example:
        rule_id = example.rule.id
    assert rule_id not in {r.id for r in all_rules()}
    assert not (GUIDE.parent.parent / (guide_blocks(TEXT)["parser"].path or "")).exists()


def test_the_example_passes_the_conformance_checks() -> None:
    with installed(TEXT) as example:
        problems = problems_of(example)
        problems += sample_problems(example.source.name, guide_blocks(TEXT)["paste"].body)
        problems += sample_problems(example.source.name,
                                    guide_blocks(TEXT)["healthy paste"].body)
    assert not problems, "\n".join(problems)


def test_the_example_test_module_passes() -> None:
    with installed(TEXT) as example:
        tests = {n: f for n, f in example.tests.items() if n.startswith("test_")}
        assert tests
        for func in tests.values():
            func()


def test_the_pastes_analysed_end_to_end(monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = guide_blocks(TEXT)
    with installed(TEXT) as example:
        fid = example.rule.produces[0]
        code, doc = analyse(blocks["paste"].body, monkeypatch)
        healthy_code, healthy = analyse(blocks["healthy paste"].body, monkeypatch)
    (found,) = [f for f in doc["findings"] if f["id"] == fid]
    assert code == 1 and found["severity"] == "warning", (code, found)
    assert (found["blame"], found["action"]) == ("node", "plan-repair")
    assert found["scope"]["kind"] == "port" and found["scope"]["name"] == "mlx5_1"
    assert found["step"] and "cable or transceiver" in found["step"]
    assert healthy_code == 0 and not healthy["findings"], healthy["findings"]


def test_everything_is_restored_after() -> None:
    rules, steps = len(all_rules()), dict(repairs.BY_ID)
    with installed(TEXT):
        pass
    assert len(all_rules()) == rules and steps == repairs.BY_ID
    assert "mlxlink" not in sources.BY_NAME and "mlxlink" not in "".join(detection.formats())
    assert "gputriage.parsers.mlxlink" not in sys.modules


@pytest.mark.parametrize("old, new, says", [
    ("detect_order=155", "detect_order=150", "two detectors share a detect_order"),
    ('    "ib.link-ber": ib_link_ber,\n', "", "ib.link-ber has no next step"),
    ('RULE_CASES = {"ib.link-ber"', 'RULE_CASES = {"ib.link-bitrate"', "has no case"),
    ("def link_ber(mlxlink: list[PortCounters])", "def link_ber(mlx_link: list[PortCounters])",
     "reads an unknown fact mlx_link"),
    ('if key == "Effective Physical BER":', 'if key == "Effective BER":',
     "ib.link-ber: its case gives"),
], ids=["detect-order", "next-step", "rule-case", "fact", "parser"])
def test_a_drifted_guide_fails(old: str, new: str, says: str) -> None:
    """The checks find a guide that no longer matches the code."""
    assert old in TEXT
    with installed(TEXT.replace(old, new, 1)) as example:
        problems = problems_of(example)
    assert any(says in p for p in problems), problems
