"""InfiniBand verbs work-completion status codes (``ibv_wc_status``).

NCCL prints the status of a failed completion as a number (``status=12``,
``with error 4``) or as ``status=<text>(12)``; :func:`ib_wc_status` turns the
number into the verbs name and this project's wording of what it means.
The table is ``ib_wc_status.csv`` in this package, loaded once.
"""

from __future__ import annotations

import functools

from gputriage.knowledge import csv_rows

__all__ = ["ib_wc_points_at", "ib_wc_status", "ib_wc_statuses"]


@functools.cache
def ib_wc_statuses() -> dict[int, tuple[str, str, str]]:
    """code -> (enum name, verbs text, meaning) for every row of the table."""
    return {int(row["code"]): (row["name"], row["verbs_text"], row["meaning"])
            for row in csv_rows("ib_wc_status.csv")}


def ib_wc_status(code: int) -> tuple[str, str] | None:
    """(enum name, meaning and usual cause) of an ``ibv_wc_status`` code; None if unknown."""
    row = ib_wc_statuses().get(code)
    return (row[0], row[2]) if row else None


@functools.cache
def _points_at() -> dict[int, str]:
    return {int(row["code"]): row.get("points_at") or "" for row in csv_rows("ib_wc_status.csv")}


def ib_wc_points_at(code: int) -> str | None:
    """Where a status points from the side that logged it (``path``, ``peer``,
    ``local-memory``, ``local-hca``, ``software``, ``secondary``, ``none``); None if unknown."""
    return _points_at().get(code) or None
