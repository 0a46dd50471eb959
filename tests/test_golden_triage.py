"""The six incidents of the mission (Q1-Q6), each as the runbook ``gputriage triage``
prints for its scenario, compared exactly with tests/golden_triage/<incident>.txt (read by
a person before it was recorded), and checked to hold no placeholder an on-call would have
to fill (``<node>``, ``<namespace>``...) and no "unknown host". Regenerate after a
deliberate change of a runbook, then read the diff:

    GPUTRIAGE_UPDATE_GOLDEN=1 python -m pytest tests/test_golden_triage.py
"""

from __future__ import annotations

import io
import os
import re
from pathlib import Path

import pytest

from gputriage.cli import Environment, main
from gputriage.scenarios import build_scenario

GOLDEN = Path(__file__).resolve().parent / "golden_triage"
UPDATE = os.environ.get("GPUTRIAGE_UPDATE_GOLDEN") == "1"
INCIDENTS = {  # incident -> the scenarios that show it
    "Q1-pods-no-gpus-after-driver-update": ("k8s-gpus-gone-after-driver-update",),
    "Q2-cuda-driver-insufficient": ("cuda-driver-too-old",),
    "Q3-allreduce-half-speed": ("nccl-socket-fallback",),
    "Q4-weights-herd": ("k8s-weights-herd",),
    "Q5-research-and-production-share-a-pool": ("k8s-shared-pool",),
    "Q6-xid79-vs-xid31": ("xid79-gpu-lost", "xid31-one-job"),
}
_PLACEHOLDER = re.compile(r"<[A-Za-z][^<>\n]{0,40}>")
# a step that sends the reader back to the finding instead of saying what it says
_POINTER = re.compile(r"the (?:finding|explanation|title) (?:states|names|says|gives)|"
                      r"(?:minimum|build|version) it names", re.IGNORECASE)


def _runbook(root: Path, name: str, monkeypatch) -> str:
    path = root / name
    if not path.exists():
        build_scenario(name, path)
    for var in ("COLUMNS", "FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(root)
    out, err = io.StringIO(), io.StringIO()
    code = main(["triage", name], Environment(stdout=out, stderr=err))
    return f"$ gputriage triage {name}  (exit {code})\n{out.getvalue()}"


@pytest.mark.parametrize("incident", sorted(INCIDENTS))
def test_incident_runbook_matches_its_golden_file(incident, tmp_path_factory,
                                                  monkeypatch) -> None:
    root = tmp_path_factory.getbasetemp() / "golden-triage"
    root.mkdir(exist_ok=True)
    text = "\n".join(_runbook(root, name, monkeypatch) for name in INCIDENTS[incident])
    assert not _PLACEHOLDER.search(text), _PLACEHOLDER.findall(text)
    assert not _POINTER.search(text), _POINTER.findall(text)
    assert "unknown host" not in text
    golden = GOLDEN / f"{incident}.txt"
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        golden.write_text(text, encoding="utf-8")
    assert golden.exists(), f"no {golden.name}: run with GPUTRIAGE_UPDATE_GOLDEN=1"
    assert text == golden.read_text(encoding="utf-8")
