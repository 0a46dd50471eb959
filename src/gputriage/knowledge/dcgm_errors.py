"""DCGM's error codes as health checkers pass them on (``dcgm_errors.csv``): each row's
meaning and this project's judgement of a node a checker marked with it. Loaded once."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from gputriage.knowledge import csv_rows
from gputriage.vocabulary import Action, Blame, Severity

__all__ = ["DcgmError", "by_number", "errors", "lookup"]


@dataclass(frozen=True)
class DcgmError:
    """One DCGM error code and what a checker's mark with it means."""

    code: str
    title: str
    pattern: re.Pattern[str]
    number: int | None
    meaning: str
    blame: Blame
    action: Action
    severity: Severity
    judge: str  # "" | "by-xid" | "mnnvl"
    source: str


@functools.cache
def errors() -> tuple[DcgmError, ...]:
    """Every row, in file order."""
    return tuple(DcgmError(r["code"], r["title"], re.compile(r["pattern"], re.IGNORECASE),
                           int(r["number"]) if r["number"].strip().isdigit() else None,
                           r["meaning"], Blame(r["blame"]), Action(r["action"]),
                           Severity(r["severity"]), r["judge"].strip(), r["source"])
                 for r in csv_rows("dcgm_errors.csv"))


def lookup(code: str) -> DcgmError | None:
    """The row of a DCGM error name (``DCGM_FR_IMEX_UNHEALTHY``), else None."""
    return next((e for e in errors() if e.pattern.search(code.strip()[:80])), None)


def by_number(number: int) -> DcgmError | None:
    """The row of DCGM's numeric error code (the EKS agent's ``DCGMHealthCode122``)."""
    return next((e for e in errors() if e.number == number), None)
