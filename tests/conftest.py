"""Shared fixtures. Real captures are read from ../shared/corpus, never copied."""

from __future__ import annotations

import csv
import itertools
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from analysed import SHARING_MODULES, Analysed
from hypothesis import HealthCheck, settings
from suite import PROFILE, find_corpus

# The suite keeps its compiled modules even where PYTHONDONTWRITEBYTECODE is set (some CI
# images and sandboxes set it): without them each xdist worker compiles the package and
# rewrites the asserts of every test module again, about 7 s of each run on 2 cores. The
# CLI tests' child processes read what this process wrote.
sys.dont_write_bytecode = False
# the ``serve_hostile`` fixture (tests/hostile.py): an HTTP server answering garbage,
# too much, or slowly
pytest_plugins = ["hostile"]

# Hypothesis profiles. "ci" (the default, run by .ci/run): few examples, derandomized so
# that a CI run is reproducible, no deadline (a loaded machine must not fail a test), no
# example database. "fuzz" (HYPOTHESIS_PROFILE=fuzz, by hand): many random examples.
# A test's own max_examples is capped by "ci" and raised by "fuzz" (see below).
CI_EXAMPLES, FUZZ_EXAMPLES = 20, 5000
settings.register_profile("ci", max_examples=CI_EXAMPLES, derandomize=True, deadline=None,
                          database=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("fuzz", max_examples=FUZZ_EXAMPLES, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(PROFILE)


def _examples(own: int) -> int:
    """The profile decides: "ci" caps a test's own count, "fuzz" raises it."""
    if PROFILE == "ci":
        return min(own, CI_EXAMPLES)
    if PROFILE == "fuzz":
        return max(own, FUZZ_EXAMPLES)
    return own


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Apply the profile's example count to property tests that set their own (an
    explicit ``@settings(max_examples=...)`` would otherwise win over any profile)."""
    done: set[int] = set()
    for item in items:
        func: Any = getattr(item, "obj", None)
        if getattr(func, "hypothesis", None) is None or id(func) in done:
            continue
        done.add(id(func))
        own = getattr(func, "_hypothesis_internal_use_settings", None)
        if not isinstance(own, settings):  # hypothesis moved it: fail loudly, not slowly
            raise pytest.UsageError(f"{item.nodeid}: cannot read its hypothesis settings")
        if _examples(own.max_examples) != own.max_examples:
            func._hypothesis_internal_use_settings = settings(
                own, max_examples=_examples(own.max_examples))


@dataclass(frozen=True)
class Sample:
    path: Path
    category: str
    what_it_shows: str
    expected: str

    @property
    def name(self) -> str:
        return self.path.name

    def text(self) -> str:
        return self.path.read_bytes().decode("utf-8", errors="replace")


class Corpus:
    """The real-capture corpus and its MANIFEST.tsv."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.samples: list[Sample] = []
        with (root / "MANIFEST.tsv").open(encoding="utf-8") as fh:
            for row in csv.DictReader(fh, delimiter="\t"):
                self.samples.append(Sample(root / row["file"], row["category"],
                                           row.get("what_it_shows", ""),
                                           row.get("expected_diagnosis", "")))

    def category(self, prefix: str) -> list[Sample]:
        """Samples whose category starts with ``prefix`` (e.g. "1" or "1-nvidia-smi-q")."""
        return [s for s in self.samples if s.category.split("-")[0] == prefix.split("-")[0]]

    def sample(self, name_part: str) -> Sample:
        hits = [s for s in self.samples if name_part in s.path.name]
        if len(hits) != 1:
            raise LookupError(f"{len(hits)} corpus samples match {name_part!r}")
        return hits[0]


@pytest.fixture(scope="session")
def corpus() -> Corpus:
    root = find_corpus()
    if root is None:
        pytest.skip("real-capture corpus not found: expected ../shared/corpus/MANIFEST.tsv "
                    "beside the checkout (or set GPUTRIAGE_CORPUS)")
    return Corpus(root)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``--dist loadfile``, the modules that read the ``analysed`` fixture
    (SHARING_MODULES) are one work unit, run by one worker: each scenario and corpus
    sample is then analysed once per run, not once per worker. Other files as usual."""
    if config.getoption("dist", None) != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedAnalysesScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return "tests/analysed.py" if Path(path).name in SHARING_MODULES else path

    return SharedAnalysesScheduling(config, log)


@pytest.fixture(scope="session")
def analysed(tmp_path_factory) -> Analysed:
    """Scenarios, corpus samples and CLI runs analysed once per test process
    (tests/analysed.py): for the modules that each sweep all of them."""
    return Analysed(tmp_path_factory.mktemp("analysed"))


@pytest.fixture(scope="session")
def _unused_dirs(tmp_path_factory) -> Iterator[Path]:
    """Paths under one temporary folder, each given to one test, none created."""
    base = tmp_path_factory.mktemp("own")
    return (base / str(n) for n in itertools.count())


@pytest.fixture
def _own_dir(request, _unused_dirs) -> Path:
    """The test's own folder for what gputriage writes by default: its ``tmp_path``
    when it asks for one (a test of history finds it in ``tmp_path / "state"``), else a
    path no other test is given, not created (making a ``tmp_path`` for each of the
    thousands of tests that need none took seconds of every run)."""
    if {"tmp_path", "tmpdir"} & set(request.fixturenames):
        return request.getfixturevalue("tmp_path")
    return next(_unused_dirs)


@pytest.fixture(autouse=True)
def _history_in_tmp(monkeypatch, _own_dir):
    """``check`` records history; tests keep it out of the machine's state folder."""
    monkeypatch.setenv("GPUTRIAGE_STATE_DIR", str(_own_dir / "state"))


@pytest.fixture(scope="session")
def _hs_cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("hscache")


@pytest.fixture(autouse=True)
def _hs_cache_in_tmp(monkeypatch, _hs_cache_dir):
    """Compiled search databases are kept in the session's folder (shared by its tests),
    never in the machine's cache."""
    monkeypatch.setenv("GPUTRIAGE_CACHE_DIR", str(_hs_cache_dir))


@pytest.fixture(autouse=True)
def _strict_rules(monkeypatch, _own_dir):
    """A rule that raises fails the test (in production it is reported as skipped and
    the other rules still run); no test reads the machine's expectations file."""
    from gputriage.parsers import expect
    monkeypatch.setenv("GPUTRIAGE_STRICT", "1")
    monkeypatch.delenv("GPUTRIAGE_EXPECT", raising=False)
    monkeypatch.setattr(expect, "DEFAULT_PATH", _own_dir / "no-expect.toml")
