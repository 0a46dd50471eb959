"""Issue 32: what a finding's line, the host line, the headline and the exit status say
is computed once (status.counted_severity, status.exit_status): for every scenario and
every corpus sample, the terminal report's headline word is the exit status's, each
finding's severity word is the one it counts with, and the host line counts those."""

from __future__ import annotations

import re

import pytest
from analysed import Analysed
from suite import find_corpus

from gputriage.errors import InputError
from gputriage.model import Result
from gputriage.scenarios import list_scenarios
from gputriage.status import counted_severity, exit_status, severity_counts
from gputriage.views.console import make_console
from gputriage.views.terminal import render_terminal

WORDS = {0: "OK", 1: "WARNING", 2: "CRITICAL", 3: "UNKNOWN"}
SCENARIOS = [s.name for s in list_scenarios()]
_CORPUS = find_corpus()
SAMPLES = sorted(line.split("\t")[0] for line in
                 (_CORPUS / "MANIFEST.tsv").read_text(encoding="utf-8").splitlines()[1:]
                 ) if _CORPUS is not None else []


def _render(result: Result) -> str:
    import io

    out = io.StringIO()
    render_terminal(result, make_console(out), verbose=True)
    return out.getvalue()


def _check(result: Result) -> None:
    text = _render(result)
    lines = text.splitlines()
    status = int(exit_status(result))
    assert lines[0].split()[0] == WORDS[status], lines[0]
    assert status != 2 or any(
        f.current and counted_severity(result, f).value == "critical" for f in result.findings)
    for f in result.findings:  # each finding's line: its title, then its id at the end
        if not f.current:
            continue
        word = counted_severity(result, f).value.upper()
        heads = [ln for ln in lines if ln.rstrip().endswith(f"  {f.id}")
                 and re.match(rf"^(CRITICAL|WARNING|INFO|OK)\s+{re.escape(f.title[:40])}", ln)]
        assert heads and all(ln.split()[0] == word for ln in heads), (f.id, word, heads)
    [host] = [i for i, ln in enumerate(lines) if ln.startswith("host ")]
    counts = dict((w, int(n)) for n, w in re.findall(r"(\d+) (critical|warning|info|ok)\b",
                                                    lines[host + 1]))
    assert counts == {s.value: n for s, n in severity_counts(result).items()}
    # the JSON says the same word beside the finding's own severity
    from gputriage.results.document import to_json

    doc = to_json(result)
    worst = max((f["counted_severity"] for f in doc["findings"] if f["status"] == "current"),
                key=["ok", "info", "warning", "critical"].index, default="ok")
    assert (worst == "critical") == (status == 2), (worst, status)
    for f, g in zip(result.sorted_findings(), doc["findings"], strict=True):
        assert g["counted_severity"] == counted_severity(result, f).value


@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario_words_agree(analysed: Analysed, name: str) -> None:
    _check(analysed.result(name))


@pytest.mark.skipif(_CORPUS is None, reason="real-capture corpus not found")
@pytest.mark.parametrize("sample", SAMPLES)
def test_corpus_words_agree(analysed: Analysed, sample: str) -> None:
    assert _CORPUS is not None
    try:
        _, result = analysed.sample(_CORPUS / sample)
    except InputError:
        pytest.skip("not an input analyze reads")
    _check(result)
