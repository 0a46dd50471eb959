"""What the kernel-log extractor works on and produces: the kinds of event, one
event with the raw line(s) that prove it, and one log line as the reader hands it
over. Shared by :mod:`.kernel_table`, :mod:`.kernel_builders`, :mod:`.kernel_extractor`,
:mod:`.kernel_host` and :mod:`gputriage.logscan`; re-exported by
:mod:`gputriage.logscan.events`."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gputriage.vocabulary import EventKind

__all__ = ["DriverEvent", "LogLine", "Repeats", "make_event"]


@dataclass
class DriverEvent:
    """One NVIDIA-relevant event with the raw line(s) that prove it."""

    kind: str  # an EventKind (tests may build events with the plain name)
    line: str  # raw line(s); continuation lines joined with "\n"
    bus_id: str | None = None
    timestamp: str | None = None  # as printed; None when absent
    details: dict[str, str] = field(default_factory=dict)
    time: datetime | None = None  # absolute, timezone-aware, when derivable
    uptime_s: float | None = None  # seconds since boot when printed
    boot: int = 0  # 0 = the last boot in the input, -1 the one before, ...
    lineno: int | None = None  # 1-based line number in its input
    origin: str | None = None  # the file or input the line came from
    count: int = 1  # events this one stands for: itself and ``repeats`` (a storm folded)
    repeats: Repeats | None = None  # the events folded into this one (``count`` > 1)
    follows: tuple[int, ...] | None = None  # Xid 45: the Xids it follows (None: not judged)

    @property
    def latest(self) -> DriverEvent:
        """The last of the events this one stands for (itself when alone)."""
        return self.repeats.last if self.repeats is not None else self


@dataclass
class Repeats:
    """What a folded event stands for beyond its first occurrence (see
    :mod:`gputriage.parsers.kernel_fold`; :mod:`gputriage.parsers.kernel_repeats` fills it
    in): the last occurrence, who logged them (bounded) and, for Xid 45, what they follow."""

    last: DriverEvent
    processes: dict[str, str] = field(default_factory=dict)  # pid (or name) -> name
    other_processes: int = 0  # occurrences from processes beyond the bound
    patterns: dict[str, set[str]] = field(default_factory=dict)  # process -> fault patterns
    tries: dict[str, int] = field(default_factory=dict)  # process -> patterns worked out
    causes: dict[int, int] = field(default_factory=dict)  # Xid 45: cause code -> how many
    uncaused: int = 0  # Xid 45: occurrences that follow no other Xid
    pending: Any = None  # the last occurrence, parsed but not built yet (kernel_fold)


@dataclass
class LogLine:
    """One physical log line as the extractor sees it, with what the reader knows."""

    text: str  # the raw line (evidence)
    msg: str  # the message, prefixes stripped
    stamps: tuple[str, ...] = ()  # printed timestamps, outermost first
    lineno: int | None = None
    time: datetime | None = None
    uptime_s: float | None = None
    boot: int = 0
    origin: str | None = None
    bus_hint: str | None = None  # e.g. a /dev/kmsg DEVICE=+pci:... record
    escaped: bool = False  # a piece split off at an rsyslog #012 escape


def make_event(kind: EventKind, line: LogLine, bus: str | None,
               details: dict[str, str] | None = None, text: str | None = None) -> DriverEvent:
    """An event of ``kind`` proved by ``line`` (or by ``text``, several joined lines)."""
    return DriverEvent(kind, line.text if text is None else text, bus,
                       line.stamps[0] if line.stamps else None, details or {}, line.time,
                       line.uptime_s, line.boot, line.lineno, line.origin)
