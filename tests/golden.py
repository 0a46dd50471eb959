"""What the golden-verdict tests of the corpus share: a table ``{sample part: (must,
must_not[, xfail reason])}`` turned into parametrised cases, the check that every sample
of some categories has a row, and the verdict check.

``must``: finding ids (``id`` or ``id=severity``) that must appear. ``must_not``: ids
that must not appear (``id=severity``: not at that severity), or :data:`CALM`: nothing
at warning or above beyond the ``must`` ids.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest

from gputriage.engine import analyze
from gputriage.ingest import load_input
from gputriage.model import Severity

CALM = "calm"

Row = tuple  # (must, must_not) or (must, must_not, xfail reason)


def cases(golden: dict[str, Row]) -> Iterator:
    """One pytest param per row; a row with a reason is a strict xfail."""
    for part, row in golden.items():
        marks = [pytest.mark.xfail(strict=True, reason=row[2])] if len(row) > 2 else []
        yield pytest.param(part, row[0], row[1], id=part, marks=marks)


def missing_rows(corpus, golden: dict[str, Row], categories: Sequence[str]) -> list[str]:
    """Samples of ``categories`` that no row names (each row names one sample)."""
    names = {corpus.sample(part).name for part in golden}
    assert len(names) == len(golden), "two rows name one sample"
    wanted = {s.name for cat in categories for s in corpus.category(cat)}
    return sorted(wanted - names)


def check_verdict(corpus, part: str, must: Sequence[str], must_not: Sequence[str]) -> None:
    result = analyze(load_input(str(corpus.sample(part).path)))
    found: dict[str, set[str]] = {}
    for f in result.findings:
        found.setdefault(f.id, set()).add(f.severity.value)
    for item in must:
        fid, _, severity = item.partition("=")
        assert fid in found, (fid, sorted(found))
        assert not severity or severity in found[fid], (fid, found[fid])
    for item in must_not:
        if item == CALM:
            wanted = {m.partition("=")[0] for m in must}
            loud = [f.id for f in result.findings if f.id not in wanted
                    and f.severity.rank >= Severity.WARNING.rank]
            assert not loud, loud
            continue
        fid, _, severity = item.partition("=")
        assert fid not in found or (severity and severity not in found[fid]), (item, found)
