"""The catalog of NCCL WARN messages whose cause is known (``nccl_warnings.csv``): each
row's id is the finding id the rule ``nccl.warn`` gives a WARN it matches, with the row's
meaning, cause, blame, action, severity, next step and source. Loaded once."""

from __future__ import annotations

import functools

from gputriage.knowledge.message_rows import MessageRow, read_catalog

__all__ = ["NcclWarning", "match", "row", "warnings"]


NcclWarning = MessageRow  # a row of nccl_warnings.csv


@functools.cache
def warnings() -> tuple[MessageRow, ...]:
    """Every row, in file order."""
    return read_catalog("nccl_warnings.csv")


def row(fid: str) -> NcclWarning | None:
    """The row of finding id ``fid``, else None."""
    return next((w for w in warnings() if w.id == fid), None)


def match(message: str) -> NcclWarning | None:
    """The row whose pattern a WARN's message matches (the first), else None."""
    return next((w for w in warnings() if w.pattern.search(message[:2000])), None)
