"""One cycle of ``gputriage watch``: what a check gave, handed to every sink."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gputriage.model import Result

# An absent or not-applicable source (no such file, tool or hardware) was not read and
# need not be: no failure. Any other error kind (timeout, failed, permission) is one.
NOT_FAILURES = ("absent", "not-applicable")


@dataclass(frozen=True)
class SourceStatus:
    """How one source's collection went in a cycle: ``error`` is None when it was read,
    else the manifest's error kind ("timeout", "absent", "not-applicable", ...)."""

    name: str
    error: str | None
    duration_s: float | None


@dataclass(frozen=True)
class CycleOutcome:
    """A finished cycle. ``result`` is None when the check itself failed (``error`` says
    why: an exception, or the check overran and was abandoned); ``exit_status`` is the
    status ``check`` would have exited with (0 OK, 1 warning, 2 critical, 3 unknown)."""

    number: int
    started: datetime
    duration_s: float
    result: Result | None
    exit_status: int
    error: str | None = None
    sources: tuple[SourceStatus, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)


# A sink receives each finished cycle (Prometheus registry, textfile writer, Node
# condition publisher...). A sink that raises is logged and the others still run.
Sink = Callable[[CycleOutcome], None]
