"""Hostile numbers in real-shaped input (issue 29): every parser of the source registry,
and the engine behind it, reads inputs whose numeric fields are replaced by ``²``,
``١٢``, ``--1``, ``1e400``, ``nan``, 5,000 digits, a line-breaking control character...
and returns a result or raises ParseError / InputError: never anything else.

The inputs are the real samples the source tests name (corpus, fixtures, the bug-report
fixture) and the sources of every rule case (tests/test_rules*.py), cut to a few
kilobytes; a few of them go through the CLI as pasted files, and expectations files get
hostile numbers in every key. Example counts come from the hypothesis profile
(tests/conftest.py): ``ci`` by default, ``HYPOTHESIS_PROFILE=fuzz`` for a long run."""

from __future__ import annotations

import fnmatch
import io
import json
import math
import re
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from declared import rule_cases, source_samples
from hostkit import snap
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from suite import PROFILE, REPO, find_corpus

from gputriage import sources
from gputriage.cli import EXIT_INTERNAL, Environment, main
from gputriage.engine.analysis import analyze
from gputriage.errors import InputError, ParseError
from gputriage.ingest.bugreport import split_bug_report
from gputriage.ingest.detect import detect
from gputriage.parsers import expect
from gputriage.scenarios import list_scenarios
from gputriage.sources import PARSED, parser_of

# what a field that should hold a number may hold instead
HOSTILE_TEXT = ["²", "١٢", "٣.٥", "--1", "+-1", "1e400", "-1e400", "1e-400", "-0", "nan", "NaN",
                "inf", "-inf", "Infinity", "1_000", "0x1C", "1" + "0" * 400, "9" * 5000,
                "18446744073709551616", "-9223372036854775809", "\x1c", "\x1d", "\x85",
                "\u2028", "", " ", "½", "1,5", "1.2.3", "\x00"]
LINE_BREAKS = ["\x1c", "\x1d", "\x1e", "\x1f", "\x85", "\u2028", "\u2029", "\x0b", "\x0c", "\r"]
HOSTILE_JSON: list[Any] = [math.inf, -math.inf, math.nan, -0.0, 10 ** 400, -(10 ** 30), 1e308,
                           True, None, [], {}, *HOSTILE_TEXT]
# sources whose only real samples are in the corpus, or whose real form holds no number
# (the hostile value is then added): the lines as the tools print them
OWN_SEEDS = {
    "cgroup_controllers": "cpuset cpu io memory hugetlb pids rdma misc\n",
    "nv_hostengine_log": (
        "Aug 28 01:36:35 dgx01 nv-hostengine[100107]: Started host engine version 3.3.9 "
        "using port number: 5555\n"
        "2024-08-28 01:36:36.507 ERROR [100107:100107] Cannot initialize the hostengine: "
        "Failed to initialize NVML [/workspaces/dcgm/hostengine/src/main.cpp:263] [main]\n"),
}
FIXTURES = REPO / "tests" / "fixtures"
BUG_REPORT = FIXTURES / "ingest" / "nvidia-bug-report.log"
SEED_BYTES = 6000  # a seed is cut to this many characters (whole lines): the tests stay fast
_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")


def _cut(text: str) -> str:
    return text if len(text) <= SEED_BYTES else text[:text.rfind("\n", 0, SEED_BYTES) + 1]


@cache
def _corpus_files() -> tuple[Path, ...]:
    """The corpus's files, listed once (not once a sample)."""
    root = find_corpus()
    return tuple(p for p in root.rglob("*") if p.is_file()) if root else ()


def _sample(ref: str, name: str) -> str | None:
    kind, _, what = ref.partition(":")
    if kind == "corpus":
        hits = [p for p in _corpus_files() if fnmatch.fnmatchcase(p.name, f"*{what}*")]
        if len(hits) != 1:
            return None
        text = hits[0].read_bytes().decode("utf-8", errors="replace")
    elif kind == "fixture":
        text = (FIXTURES / what).read_text(encoding="utf-8")
    else:
        return split_bug_report(BUG_REPORT.read_text(encoding="utf-8")).get(name)
    if sources.get(name).detector:
        text = dict(detect(text)).get(name, text)
    return text


@cache
def seeds(name: str) -> tuple[Any, ...]:
    """Real-shaped inputs of source ``name``: texts, or decoded JSON for a JSON source."""
    as_json = parser_of(name)[1]
    found: list[Any] = [OWN_SEEDS[name]] if name in OWN_SEEDS else []
    healthy = _healthy_host().get(name)
    if healthy is not None:
        found.append(json.loads(healthy) if as_json else _cut(healthy))
    for ref in source_samples().get(name, ()):
        text = _sample(ref, name)
        if text is not None:
            found.append(json.loads(text) if as_json else _cut(text))
    for cases in rule_cases().values():
        for case_sources, _ in cases:
            value = case_sources.get(name)
            if value is None:
                continue
            if as_json:
                found.append(json.loads(value) if isinstance(value, str) else value)
            elif isinstance(value, str):
                found.append(_cut(value))
    unique = {json.dumps(s, sort_keys=True): s for s in found}
    return tuple(unique.values())[:24]


@cache
def _healthy_host() -> dict[str, str]:
    """Every source of the healthy simulated host, as its snapshot stores it."""
    return {name: data.decode("utf-8", errors="replace")
            for name, data in list_scenarios()[0].build().items()}


def _mutate_text(text: str, data: st.DataObject) -> str:
    if text and data.draw(st.booleans(), label="break a line"):
        # a character str.splitlines() and str.split() take for a line break or a blank
        at = data.draw(st.integers(0, len(text)), label="at")
        text = text[:at] + data.draw(st.sampled_from(LINE_BREAKS)) + text[at:]
    spans = [m.span() for m in _NUMBER.finditer(text)]
    if not spans:
        return text + data.draw(st.sampled_from(HOSTILE_TEXT))
    if data.draw(st.booleans(), label="every number"):
        value = data.draw(st.sampled_from(HOSTILE_TEXT), label="value")
        chosen = {i: value for i in range(len(spans))}
    else:
        picks = data.draw(st.lists(st.integers(0, len(spans) - 1), min_size=1, max_size=6))
        chosen = {i: data.draw(st.sampled_from(HOSTILE_TEXT), label="value") for i in picks}
    out, last = [], 0
    for i, (start, end) in enumerate(spans):
        if i in chosen:
            out += [text[last:start], chosen[i]]
            last = end
    return "".join([*out, text[last:]])


def _numeric_paths(doc: Any, path: tuple = ()) -> list[tuple]:
    """Where a JSON document holds a number, or a string that spells one."""
    if isinstance(doc, dict):
        return [p for k, v in doc.items() for p in _numeric_paths(v, (*path, k))]
    if isinstance(doc, list):
        return [p for i, v in enumerate(doc) for p in _numeric_paths(v, (*path, i))]
    if isinstance(doc, (int, float)) and not isinstance(doc, bool) or \
            isinstance(doc, str) and _NUMBER.search(doc):
        return [path]
    return []


def _mutate_json(doc: Any, data: st.DataObject) -> Any:
    doc = json.loads(json.dumps(doc))
    paths = _numeric_paths(doc)
    if not paths:
        return doc
    for path in data.draw(st.lists(st.sampled_from(paths), min_size=1, max_size=6)):
        value = data.draw(st.sampled_from(HOSTILE_JSON), label="value")
        if isinstance(value, str) and isinstance(_get(doc, path), str):
            value = _mutate_text(_get(doc, path), data)
        parent = _get(doc, path[:-1])
        parent[path[-1]] = value
    return doc


def _get(doc: Any, path: tuple) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def _stored(value: Any) -> str:
    """A source's text as a snapshot stores it (JSON with NaN/Infinity, as json writes)."""
    return value if isinstance(value, str) else json.dumps(value)


FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
NAMES = sorted(PARSED)


def test_every_parsed_source_has_seeds() -> None:
    """The fuzz below reaches every parser of the registry."""
    assert not [n for n in NAMES if not seeds(n)]


@pytest.mark.slow  # a fuzz run over every parser (about 7 s): the second stage of .ci/run
@pytest.mark.parametrize("name", NAMES)
@FUZZ
@given(data=st.data())
def test_hostile_numbers_reach_no_parser_as_a_crash(name: str, data: st.DataObject) -> None:
    parser, as_json = parser_of(name)
    seed = data.draw(st.sampled_from(seeds(name)), label="seed")
    value = _mutate_json(seed, data) if as_json else _mutate_text(seed, data)
    try:
        parser(value)
    except (ParseError, InputError):
        return
    # what the parser read, the facts and the rules built on it take as well
    analyze(snap(**{name: _stored(value)}))


PASTED = [n for n in NAMES if sources.get(n).detector and not parser_of(n)[1]]


@pytest.mark.parametrize("name", PASTED if PROFILE == "fuzz" else PASTED[::4])
@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_hostile_numbers_in_a_paste_are_no_internal_error(name: str,
                                                          data: st.DataObject) -> None:
    """The same inputs as a pasted file, through ``main()``: never exit 70."""
    text = _mutate_text(data.draw(st.sampled_from(seeds(name)), label="seed"), data)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "paste.txt"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        err = io.StringIO()
        code = main(["analyze", "--json", str(path)], Environment(stdout=io.StringIO(),
                                                                 stderr=err))
    assert code != EXIT_INTERNAL and "internal error" not in err.getvalue(), err.getvalue()


TOML_NUMBERS = ["8", "-1", "0x10", "1_000", "inf", "-inf", "nan", "1e400", "8.0", "1.5",
                "9" * 30, '"8"', '"²"', '"١٢"', '"550.54.15"', '"550.²"', "true", "[8]",
                "{a = 1}"]
EXPECT_KEYS = [("gpu", "count"), ("gpu", "driver"), ("gpu", "cuda"), ("nvswitch", "count"),
               ("pcie", "gen"), ("pcie", "width"), ("infiniband", "ports"),
               ("infiniband", "rate_gbps"), ("hugepages", "size_kb"), ("hugepages", "count")]


@FUZZ
@given(pairs=st.lists(st.tuples(st.sampled_from(EXPECT_KEYS), st.sampled_from(TOML_NUMBERS)),
                      min_size=1, max_size=4, unique_by=lambda p: p[0]))
def test_expectations_take_only_numbers_in_range(pairs: list[tuple[tuple[str, str], str]]
                                                 ) -> None:
    tables: dict[str, list[str]] = {}
    for (table, key), value in pairs:
        tables.setdefault(table, []).append(f"{key} = {value}")
    text = "".join(f"[{t}]\n" + "\n".join(lines) + "\n" for t, lines in tables.items())
    try:
        exp = expect.parse(text)
    except InputError:
        return
    for (table, key), _ in pairs:
        value = exp.value(f"{table}.{key}")
        if isinstance(value, (int, float)):
            assert math.isfinite(value) and 0 <= value <= 2 ** 31, (text, value)
        elif isinstance(value, str):
            assert all(p.isascii() and p.isdigit() for p in value.split(".")), value
