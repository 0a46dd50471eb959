"""InfiniBand port counters: the kernel's and perfquery's names of each, and what kind
of count it is (traffic, physical errors, integrity errors, congestion...). The table
is ``ib_counters.csv`` in this package, loaded once."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from gputriage.knowledge import csv_rows

__all__ = ["IbCounter", "by_perfquery_name", "ib_counter", "ib_counters"]


@dataclass(frozen=True)
class IbCounter:
    """One port counter: its sysfs name, perfquery's name, kind and warning count."""

    name: str  # as /sys/class/infiniband/<hca>/ports/<n>/counters names it
    perfquery: str
    kind: str  # traffic | physical | downed | integrity | congestion | management
    warn_at: int | None
    meaning: str


@functools.cache
def ib_counters() -> tuple[IbCounter, ...]:
    """Every counter of the table, in its order."""
    return tuple(IbCounter(row["counter"], row["perfquery"], row["kind"],
                           int(row["warn_at"]) if row["warn_at"].strip() else None,
                           row["meaning"])
                 for row in csv_rows("ib_counters.csv"))


@functools.cache
def _by_name() -> dict[str, IbCounter]:
    return {c.name: c for c in ib_counters()}


@functools.cache
def _by_perfquery() -> dict[str, IbCounter]:
    return {c.perfquery.lower(): c for c in ib_counters()}


def ib_counter(name: str) -> IbCounter | None:
    """The counter of a sysfs name (``port_rcv_errors``); None if the table lacks it."""
    return _by_name().get(name)


def by_perfquery_name(name: str) -> IbCounter | None:
    """The counter perfquery prints as ``name`` (``PortRcvErrors``, any case)."""
    return _by_perfquery().get(name.lower())
