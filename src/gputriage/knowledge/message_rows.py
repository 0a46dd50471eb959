"""The row of a message catalog (``nccl_warnings.csv``, ``node_messages.csv``): a message
family's pattern and this project's judgement of it -- meaning, cause, blame, action,
severity, next step -- with the source of its facts. One shape, one reader, for every
catalog that ``explain`` and the rules read alike."""

from __future__ import annotations

import re
from dataclasses import dataclass

from gputriage.knowledge import csv_rows
from gputriage.vocabulary import Action, Blame, Severity

__all__ = ["MessageRow", "read_catalog"]


@dataclass(frozen=True)
class MessageRow:
    """One row: a message family and this project's judgement of it."""

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


def read_catalog(name: str) -> tuple[MessageRow, ...]:
    """Every row of the catalog file ``name``, in file order (patterns case-insensitive)."""
    return tuple(MessageRow(r["id"], r["title"], re.compile(r["pattern"], re.IGNORECASE),
                            r["meaning"], r["cause"], Blame(r["blame"]), Action(r["action"]),
                            Severity(r["severity"]), r["next"], r["source"])
                 for r in csv_rows(name))
