"""What the golden-verdict tests of the corpus share: tables ``{sample part: row}`` turned
into parametrised cases, the check that every sample of some categories has a row, and
the verdict checks.

Three kinds of row, each stating what gputriage says of the sample today:

- ``(must, must_not)``: judged as MANIFEST's expected diagnosis says. ``must``: finding
  ids (``id`` or ``id=severity``) that must appear. ``must_not``: ids that must not
  appear (``id=severity``: not at that severity; ``area.``: no id of that area), or
  :data:`CALM`: nothing at warning or above beyond the ``must`` ids.
- :class:`Partial`: read, but what the diagnosis rests on waits for an issue. Today's
  verdict is pinned and nothing at warning or above may appear beyond ``must``, so the
  row fails, naming the issue, when that issue changes the answer.
- :class:`Refused`: not read yet. ``analyze`` must refuse it cleanly (one "input error:
  ... unrecognised content" line, exit status 66, no traceback) until the named issue
  lands; then the row fails, saying so.

A finding folded into its cause (issue 12: one cause, one finding) is still said: every
check reads the findings with their consequences, at any depth, so a ``must`` id met by
a consequence is met, and ``must_not`` and :data:`CALM` see consequences too.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

import pytest
from analysed import Analysed

from gputriage.cli import EXIT_INPUT, Environment, main
from gputriage.model import Finding, Result, Severity

CALM = "calm"

# Findings that put the fault on the GPU hardware: a sample whose diagnosis is a job,
# configuration or software problem (or a healthy node) must raise none of them.
GPU_FAULTS = ("gpu.error-state", "gpu.missing", "gpu.count-unexpected", "gpu.board-short",
              "nvidia-smi.gpu-lost", "driver.gpu-init-failed", "memory.", "pcie.",
              "thermal.", "nvlink.links-down", "xid.", "sxid.")

Row = tuple  # (must, must_not)


class Partial(NamedTuple):
    """Read in part: the diagnosis waits for ``issues``; ``verdict`` is today's."""

    issues: tuple[int, ...]
    verdict: str
    must: tuple[str, ...] = ()
    must_not: tuple[str, ...] = ()


class Refused(NamedTuple):
    """Not read yet: an input error until one of ``issues`` lands."""

    issues: tuple[int, ...]


def partial(*issues: int, verdict: str, must: tuple[str, ...] = (),
            must_not: tuple[str, ...] = GPU_FAULTS) -> Partial:
    return Partial(issues, verdict, must, must_not)


def refused(*issues: int) -> Refused:
    return Refused(issues)


def cases(golden: dict[str, Row]) -> Iterator:
    """One pytest param ``(part, must, must_not)`` per row."""
    for part, (must, must_not) in golden.items():
        yield pytest.param(part, must, must_not, id=part)


def missing_rows(corpus, golden: dict, categories: Sequence[str]) -> list[str]:
    """Samples of ``categories`` that no row names (each row names one sample)."""
    names = {corpus.sample(part).name for part in golden}
    assert len(names) == len(golden), "two rows name one sample"
    wanted = {s.name for cat in categories for s in corpus.category(cat)}
    return sorted(wanted - names)


def _matches(fid: str, pattern: str) -> bool:
    return fid.startswith(pattern) if pattern.endswith(".") else fid == pattern


def _loud(found: Iterable[tuple[str, str]], must: Sequence[str]) -> list[str]:
    """Ids at warning or above that ``must`` does not name."""
    wanted = {m.partition("=")[0] for m in must}
    return sorted({fid for fid, sev in found
                   if fid not in wanted and Severity(sev).rank >= Severity.WARNING.rank})


def check_found(found: list[tuple[str, str]], must: Sequence[str],
                must_not: Sequence[str]) -> None:
    """``found``: (finding id, severity value) pairs of one result."""
    for item in must:
        fid, _, severity = item.partition("=")
        severities = {sev for f, sev in found if f == fid}
        assert severities, (fid, sorted({f for f, _ in found}))
        assert not severity or severity in severities, (fid, severities)
    for item in must_not:
        hits = _loud(found, must) if item == CALM else _hits(found, item)
        assert not hits, (item, hits)


def _hits(found: list[tuple[str, str]], item: str) -> list[tuple[str, str]]:
    """The findings a ``must_not`` item (``id``, ``area.``, with ``=severity``) names."""
    pattern, _, severity = item.partition("=")
    return [(fid, sev) for fid, sev in found
            if _matches(fid, pattern) and (not severity or sev == severity)]


def flat(findings: Iterable[Finding]) -> list[Finding]:
    """``findings`` and their consequences, at any depth, each cause before its own."""
    return [x for f in findings for x in (f, *flat(f.consequences))]


def by_id(result: Result) -> dict[str, Finding]:
    """A result's findings and their consequences, at any depth, by finding id."""
    return {f.id: f for f in flat(result.findings)}


def said(findings: Iterable[Finding]) -> list[tuple[str, str]]:
    """(id, severity value) of ``findings`` and of their consequences, at any depth."""
    return [(f.id, f.severity.value) for f in flat(findings)]


def said_json(findings: Iterable[dict]) -> list[tuple[str, str]]:
    """:func:`said` of the JSON form's findings."""
    return [pair for f in findings
            for pair in ((f["id"], f["severity"]), *said_json(f.get("consequences", ())))]


def check_verdict(analysed: Analysed, corpus, part: str, must: Sequence[str],
                  must_not: Sequence[str]) -> None:
    """The sample's analysis (shared: tests/analysed.py) says ``must`` and not ``must_not``."""
    _, result = analysed.sample(corpus.sample(part).path)
    check_found(said(result.findings), must, must_not)


def run_analyze(path: Path) -> tuple[int, str, str]:
    """``gputriage analyze --json PATH`` in this process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    code = main(["analyze", "--json", str(path)], Environment(stdout=out, stderr=err))
    return code, out.getvalue(), err.getvalue()


def _issues(issues: Sequence[int]) -> str:
    return " or ".join(f"issue {n}" for n in issues)


def check_partial(path: Path, row: Partial) -> None:
    code, out, err = run_analyze(path)
    assert code != EXIT_INPUT and not err, (code, err)
    doc = json.loads(out)
    found = said_json(doc["findings"])
    check_found(found, row.must, row.must_not)
    news = f"has {_issues(row.issues)} landed? Judge the sample as MANIFEST says and update"
    assert doc["verdict"] == row.verdict, \
        f"verdict {row.verdict} -> {doc['verdict']}: {news} its row"
    assert not _loud(found, row.must), f"new findings {_loud(found, row.must)}: {news} its row"


def check_judged(path: Path, must: Sequence[str], must_not: Sequence[str]) -> None:
    code, out, err = run_analyze(path)
    assert code != EXIT_INPUT and not err, (code, err)
    check_found(said_json(json.loads(out)["findings"]), must, must_not)


def check_row(path: Path, row: Row | Partial | Refused) -> None:
    """Check one row of any kind, through ``gputriage analyze --json``."""
    if isinstance(row, Refused):
        check_refused(path, row.issues)
    elif isinstance(row, Partial):
        check_partial(path, row)
    else:
        check_judged(path, *row)


def check_refused(path: Path, issues: Sequence[int]) -> None:
    code, out, err = run_analyze(path)
    if code != EXIT_INPUT:
        pytest.fail(f"{path.name} is read now (exit status {code}): has {_issues(issues)} "
                    "landed? Replace its refused() row with the findings its MANIFEST "
                    "diagnosis calls for")
    lines = err.splitlines()
    assert not out and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"gputriage: input error: {path}: unrecognised content"), err
