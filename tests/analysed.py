"""What several test modules analyse alike, analysed once per test process (each xdist
worker) instead of once per module: every scenario built and analysed, every corpus
sample read and analysed, and the output of the CLI on the built scenarios.

Read through the session fixture ``analysed`` (tests/conftest.py). What it hands out is
the test's own: each call gives a fresh copy of the Result or of the parsed output. A
test that analyses under a changed rule set, clock or environment runs its own analysis.
"""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path
from typing import Any

import pytest

from gputriage.cli import Environment, main
from gputriage.engine.analysis import analyze
from gputriage.fleet.scenario import write_demo
from gputriage.ingest import load_input
from gputriage.model import Result
from gputriage.scenarios import build_scenario, list_scenarios
from gputriage.snapshot.bundle import Snapshot

SCENARIOS = [s.name for s in list_scenarios()]
# the test modules that read the ``analysed`` fixture: one worker runs them all
# (tests/conftest.py), so that what they share is analysed once per run;
# tests/test_suite_layout.py checks the list
SHARING_MODULES = frozenset({
    "test_consistency.py", "test_corpus_golden_hw.py", "test_corpus_golden_kernel.py",
    "test_end_to_end.py", "test_golden_reports.py",
    "test_html_report.py", "test_json_schemas.py", "test_next_steps.py",
    "test_next_steps_by_id.py", "test_redact.py", "test_resultdoc.py", "test_rough_edges.py",
    "test_scenarios_hw.py", "test_severity_words_agree.py", "test_views_agree.py",
})
# what would make the CLI's output depend on the terminal of whoever runs the tests
TERMINAL_VARIABLES = ("COLUMNS", "FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE")


class Analysed:
    """The scenarios as ``root/NAME`` directories, built when first asked for, and what
    the engine and the CLI say of them and of the corpus samples."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._scenarios: dict[str, tuple[Snapshot, Result]] = {}
        self._samples: dict[Path, tuple[Snapshot, Result] | Exception] = {}
        self._outputs: dict[tuple[str, ...], tuple[int, str, str]] = {}

    def scenario_dir(self, name: str) -> Path:
        """Scenario ``name`` built as a directory (never written to by a test)."""
        path = self.root / name
        if not path.exists():
            build_scenario(name, path)
        return path

    def all_built(self) -> Path:
        """The root holding every scenario's directory."""
        for name in SCENARIOS:
            self.scenario_dir(name)
        return self.root

    def fleet_demo(self) -> Path:
        """``root/fleet-demo``: the demo fleet's node results (``fleet --demo``), written
        once (never written to by a test)."""
        path = self.root / "fleet-demo"
        if not path.exists():
            write_demo(path)
        return path

    def scenario(self, name: str) -> tuple[Snapshot, Result]:
        """The snapshot of scenario ``name`` and, a fresh copy, the engine's Result."""
        if name not in self._scenarios:
            snapshot = Snapshot.load(self.scenario_dir(name))
            self._scenarios[name] = (snapshot, analyze(snapshot))
        snapshot, result = self._scenarios[name]
        return snapshot, copy.deepcopy(result)

    def result(self, name: str) -> Result:
        return self.scenario(name)[1]

    def sample(self, path: Path) -> tuple[Snapshot, Result]:
        """``analyze(load_input(path))`` of one input (a corpus sample), its Result a
        fresh copy; raises what reading or analysing it raised (InputError...)."""
        if path not in self._samples:
            try:
                snapshot = load_input(str(path))
                self._samples[path] = (snapshot, analyze(snapshot))
            except Exception as exc:  # kept, and raised to every caller
                self._samples[path] = exc
        done = self._samples[path]
        if isinstance(done, Exception):
            raise done.with_traceback(None)  # not each caller's frames added to the last
        return done[0], copy.deepcopy(done[1])

    def cli(self, *argv: str) -> tuple[int, str, str]:
        """``gputriage ARGV`` run in the scenarios' root (a scenario is named by its
        directory: ``analyze --json healthy-8xh100``), stdout and stderr pipes, none of
        the terminal's variables: its exit status, stdout and stderr."""
        if argv not in self._outputs:
            self.all_built()
            with pytest.MonkeyPatch.context() as mp:
                for var in TERMINAL_VARIABLES:
                    mp.delenv(var, raising=False)
                mp.chdir(self.root)
                out, err = io.StringIO(), io.StringIO()
                code = main(list(argv), Environment(stdout=out, stderr=err))
            self._outputs[argv] = (code, out.getvalue(), err.getvalue())
        return self._outputs[argv]

    def json(self, *argv: str) -> Any:
        """The document a ``--json`` run of :meth:`cli` printed, a fresh copy."""
        return json.loads(self.cli(*argv)[1])
