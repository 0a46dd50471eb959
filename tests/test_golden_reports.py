"""Golden reports: the piped ``gputriage analyze`` output of every scenario, compared
exactly with tests/golden_reports/<scenario>.txt, and checked to read in an 80-column
ticket: whole lines, no trailing blanks, no escape sequences, each finding's header on
one line, evidence quoted verbatim, and no word broken when a terminal wraps it.

What they guard: the report a person reads, as a person reviews it (the verdict line, the
next step, each finding with its words and evidence, the host and GPU tables). Rewording
a finding changes them, on purpose: the diff is that change, as the reader will see it.
What does not change them: a rule that fires on nothing. The count of rules skipped for
missing inputs is recorded as "N" (it changes whenever a rule is added, whatever it
reads), and the list of skipped rules is only printed in verbose mode;
``test_a_rule_that_fires_nowhere_changes_no_recorded_file`` checks it, with the behaviour
record (tools/behaviour.py). Regenerate the files after a deliberate change of the report:

    GPUTRIAGE_UPDATE_GOLDEN=1 python -m pytest tests/test_golden_reports.py
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import re
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest
from analysed import TERMINAL_VARIABLES, Analysed
from rich.console import Console

from gputriage.cli import Environment, main
from gputriage.model import Finding
from gputriage.rules.base import REGISTRY, rule
from gputriage.scenarios import list_scenarios
from gputriage.snapshot.bundle import Snapshot
from gputriage.text.safe import printable
from gputriage.views.terminal import EVIDENCE_CAP, render_terminal

GOLDEN = Path(__file__).resolve().parent / "golden_reports"
BEHAVIOUR_TOOL = Path(__file__).resolve().parent.parent / "tools" / "behaviour.py"
UPDATE = os.environ.get("GPUTRIAGE_UPDATE_GOLDEN") == "1"
NAMES = [s.name for s in list_scenarios()]
WIDTH = 80


@pytest.fixture(scope="module")
def built(analysed: Analysed) -> Path:
    """The root holding every scenario's directory (shared: never written to)."""
    return analysed.all_built()


def _cli(root: Path, monkeypatch, *argv: str) -> tuple[int, str]:
    """``gputriage ARGV`` run in ``root`` (so the input line names the scenario, not a
    temporary path), its stdout a pipe: as ``analysed.cli`` runs it, but now (under the
    rules registered now)."""
    for var in TERMINAL_VARIABLES:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(root)
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), Environment(stdout=out, stderr=err))
    return code, out.getvalue()


# How many rules a report skips for missing inputs grows with every rule added anywhere;
# it is not what an expert reads, so the recorded reports hold it as "N".
_SKIPPED_COUNT = re.compile(r"^\d+ (rules? skipped)", re.MULTILINE)


def _recorded(text: str) -> str:
    return _SKIPPED_COUNT.sub(r"N \1", text)


@pytest.mark.parametrize("name", NAMES)
def test_piped_report_matches_its_golden_file(analysed, name) -> None:
    _, text, _ = analysed.cli("analyze", name)
    text = _recorded(text)
    path = GOLDEN / f"{name}.txt"
    if UPDATE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.is_file(), f"no {path.name}: run with GPUTRIAGE_UPDATE_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8"), (
        f"{name}: the report changed; if on purpose, rerun with GPUTRIAGE_UPDATE_GOLDEN=1")


def test_every_scenario_has_a_golden_file_and_no_other() -> None:
    assert sorted(p.stem for p in GOLDEN.glob("*.txt")) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_golden_report_is_whole_lines_quoting_the_json(analysed, name) -> None:
    """Piped: no trailing blanks, no escapes, the verdict first; each current finding's
    header one line and its evidence lines those of the JSON, verbatim and indented (tabs
    expanded)."""
    text = (GOLDEN / f"{name}.txt").read_text(encoding="utf-8")
    lines = text.splitlines()
    assert text.endswith("\n") and "\x1b" not in text
    assert all(line == line.rstrip() for line in lines)
    assert re.match(r"^(OK|WARNING|CRITICAL|UNKNOWN) gpu-node-\d+: ", lines[0])
    doc = analysed.json("analyze", "--json", name)
    assert lines[0].split()[0] == doc["verdict"].upper()
    for f in doc["findings"]:
        if f.get("status", "current") != "current":
            continue
        head = [line for line in lines if line.endswith(f"]  {f['id']}")
                and f["title"] in line]
        assert head, f["id"]
        if f["severity"] not in ("warning", "critical"):
            continue
        for ev in f["evidence"]:
            quoted = [part for line in ev["lines"] for part in str(line).splitlines() or [""]]
            for line in quoted[:EVIDENCE_CAP]:
                # tabs are shown as spaces to the next multiple of 8 (as a terminal would)
                shown = (" " * 12 + printable(line)).expandtabs(8).rstrip()
                assert shown in lines, (f["id"], line)


@pytest.mark.parametrize("name", NAMES)
def test_no_word_is_broken_on_an_80_column_terminal(analysed, built, name) -> None:
    """Rendered on a pretend 80-column terminal, lines wrap between words: every word of
    the piped report that fits a line is found whole (the GPU table may drop the UUID)."""
    buf = io.StringIO()
    render_terminal(analysed.result(name),
                    Console(file=buf, width=WIDTH, force_terminal=True, color_system=None))
    wrapped = buf.getvalue()
    assert all(len(line) <= WIDTH for line in wrapped.splitlines())
    wrapped = _recorded(wrapped)
    piped = (GOLDEN / f"{name}.txt").read_text(encoding="utf-8")
    piped = piped.replace(f"input: {name} ", f"input: {built / name} ")
    broken = {word for word in piped.split() if len(word) <= WIDTH - 20} - set(wrapped.split())
    assert {w for w in broken if not re.fullmatch(r"GPU-[0-9a-f]{8}", w)} == set()


@cache
def _behaviour_tool() -> ModuleType:
    """tools/behaviour.py, which records what ``check`` says of every scenario."""
    spec = importlib.util.spec_from_file_location("gputriage_behaviour", BEHAVIOUR_TOOL)
    assert spec is not None and spec.loader is not None
    module = sys.modules.get(spec.name) or importlib.util.module_from_spec(spec)
    if spec.name not in sys.modules:
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return module


@pytest.fixture
def silent_rule() -> Iterator[list[str]]:
    """A rule registered for one test that reads an existing source (a job's log, which
    some scenarios hold) and finds nothing; it lists the hosts it ran on."""
    ran: list[str] = []

    def reads_the_job_log_and_finds_nothing(job_log, host_identity) -> list[Finding]:
        """A newcomer's first rule before it knows what to look for."""
        ran.append(str(host_identity.hostname))
        return []

    rule("toy.silent", produces=("toy.nothing",))(reads_the_job_log_and_finds_nothing)
    added = REGISTRY[-1]
    try:
        yield ran
    finally:
        REGISTRY.remove(added)


def test_the_silent_rule_runs_on_some_scenarios_only(built) -> None:
    """So that the next test sees the rule both run and be skipped."""
    with_log = {name for name in NAMES if Snapshot.load(built / name).get("job_log")}
    assert with_log and with_log != set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_a_rule_that_fires_nowhere_changes_no_recorded_file(silent_rule, built, tmp_path,
                                                             monkeypatch, name) -> None:
    """Issue 30: adding a rule that finds nothing changes neither the behaviour record of
    a scenario (tests/fixtures/behaviour_baseline.json) nor its golden report, whether
    the rule ran on it or was skipped."""
    tool = _behaviour_tool()
    recorded = json.loads(tool.BASELINE.read_text(encoding="utf-8"))
    now = tool.measure(tool.scenario_inputs(tmp_path, [name]))
    assert bool(silent_rule) == bool(Snapshot.load(built / name).get("job_log"))
    assert tool.differences({f"scenario:{name}": recorded[f"scenario:{name}"]}, now) == []
    _, text = _cli(built, monkeypatch, "analyze", name)
    assert _recorded(text) == (GOLDEN / f"{name}.txt").read_text(encoding="utf-8")
