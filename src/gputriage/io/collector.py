"""How often gputriage's processes run the cyclic garbage collector.

Reading a log allocates a few tuples per line (a match's groups, a line's fields), nearly
all freed at once by reference counting, yet each counts towards the interpreter's
trigger of the youngest generation's collection: 700 new container objects by default.
At 700 the collector ran some 150 times in one 128 MiB worker task of the benchmarks'
1 GB Xid storm, and the task took 6 % longer than with no collection at all (0.511
against 0.479 CPU-s, best of 9 alternating; at 20,000 the same as with none). Collecting
less often keeps what it bounds (cycles are still freed, a generation at a time), and a
cycle seldom forms in a scan.
"""

from __future__ import annotations

import gc

__all__ = ["YOUNG_OBJECTS", "collect_less", "settle_worker"]

YOUNG_OBJECTS = 20_000  # new container objects between two collections of the youngest


def collect_less() -> None:
    """Collect the youngest generation every :data:`YOUNG_OBJECTS` new objects (never
    more often than now)."""
    young, middle, old = gc.get_threshold()
    if 0 < young < YOUNG_OBJECTS:
        gc.set_threshold(YOUNG_OBJECTS, middle, old)


def settle_worker() -> None:
    """In a forked worker: what it inherited is left out of every later collection
    (``gc.freeze``; its pages also stay shared with the parent's, never written by the
    collector), and :func:`collect_less`."""
    gc.freeze()
    collect_less()
