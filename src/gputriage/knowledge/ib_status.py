"""InfiniBand verbs work-completion status codes (``ibv_wc_status``).

NCCL prints the status of a failed completion as a number (``status=12``,
``with error 4``) or as ``status=<text>(12)``; :func:`ib_wc_status` turns the
number into the verbs name and this project's wording of what it means.
The table is ``ib_wc_status.csv`` in this package, loaded once.
"""

from __future__ import annotations

import csv
import functools
from importlib import resources

__all__ = ["ib_wc_status", "ib_wc_statuses"]


@functools.cache
def ib_wc_statuses() -> dict[int, tuple[str, str, str]]:
    """code -> (enum name, verbs text, meaning) for every row of the table."""
    text = resources.files(__package__).joinpath("ib_wc_status.csv").read_text(encoding="utf-8")
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    return {int(row["code"]): (row["name"], row["verbs_text"], row["meaning"])
            for row in csv.DictReader(lines)}


def ib_wc_status(code: int) -> tuple[str, str] | None:
    """(enum name, meaning and usual cause) of an ``ibv_wc_status`` code; None if unknown."""
    row = ib_wc_statuses().get(code)
    return (row[0], row[2]) if row else None
