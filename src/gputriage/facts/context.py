"""What a check knows beyond its inputs: the node's expectations, the operator's
acknowledgements, and the time it judges at."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

__all__ = ["CheckContext"]


@dataclass(frozen=True)
class CheckContext:
    """The judging context of one check (all optional: ``analyze`` of a pasted file
    has none of it).

    ``expectations``: what the node should have (``gputriage.parsers.expect``), None when no
    file states it. ``acks``: the operator's acknowledgements in force
    (``gputriage.engine.acks.Ack``). ``now``: the time of the check (acknowledgements expire
    against it). ``job_faults_fail``: the job's own faults may fail the check."""

    expectations: Any = None
    acks: tuple[Any, ...] = ()
    now: datetime | None = None
    job_faults_fail: bool = False
    link_gbits: float | None = None  # the shared link's rate (k8s lint --link), Gb/s
