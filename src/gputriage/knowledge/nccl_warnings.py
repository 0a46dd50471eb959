"""The catalog of NCCL WARN messages whose cause is known (``nccl_warnings.csv``): each
row's id is the finding id the rule ``nccl.warn`` gives a WARN it matches, with the row's
meaning, cause, blame, action, severity, next step and source. Loaded once."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from gputriage.knowledge import csv_rows
from gputriage.vocabulary import Action, Blame, Severity

__all__ = ["NcclWarning", "match", "row", "warnings"]


@dataclass(frozen=True)
class NcclWarning:
    """One row: a WARN message family and this project's judgement of it."""

    id: str
    title: str
    pattern: re.Pattern[str]
    meaning: str
    cause: str
    blame: Blame
    action: Action
    severity: Severity
    next: str
    source: str


@functools.cache
def warnings() -> tuple[NcclWarning, ...]:
    """Every row, in file order."""
    return tuple(NcclWarning(r["id"], r["title"], re.compile(r["pattern"], re.IGNORECASE),
                             r["meaning"],
                             r["cause"], Blame(r["blame"]), Action(r["action"]),
                             Severity(r["severity"]), r["next"], r["source"])
                 for r in csv_rows("nccl_warnings.csv"))


def row(fid: str) -> NcclWarning | None:
    """The row of finding id ``fid``, else None."""
    return next((w for w in warnings() if w.id == fid), None)


def match(message: str) -> NcclWarning | None:
    """The row whose pattern a WARN's message matches (the first), else None."""
    return next((w for w in warnings() if w.pattern.search(message[:2000])), None)
