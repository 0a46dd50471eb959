"""The window of kernel-log events to judge: one boot or all, since a time."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gputriage.parsers.kernel_events import DriverEvent

__all__ = ["LogWindow", "parse_boot", "parse_since"]


@dataclass(frozen=True)
class LogWindow:
    """Which kernel-log events to judge: one boot (0 current, -1 the one before...)
    or all (``boot=None``), and only those at or after ``since`` when given.
    Events without a known time are kept (their age cannot be told)."""

    boot: int | None = None
    since: datetime | None = None

    def admits(self, ev: DriverEvent) -> bool:
        """Whether ``ev`` falls inside the window."""
        if self.boot is not None and ev.boot != self.boot:
            return False
        when = getattr(ev, "time", None)
        if self.since is not None and when is not None:
            if when.tzinfo is None:
                when = when.replace(tzinfo=timezone.utc)
            return when >= self.since
        return True


_RELATIVE = re.compile(r"^\s*(\d{1,9}(?:\.\d{1,6})?)\s*(s|sec|m|min|h|hr|d|day|w|week)s?"
                       r"(?:\s+ago)?\s*$", re.IGNORECASE)
_UNITS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hr": 3600, "d": 86400,
          "day": 86400, "w": 604800, "week": 604800}


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """``--since``: an ISO time (``2024-05-14T09:00``, UTC when no offset) or a
    relative age (``90s``, ``30m``, ``2h``, ``1d``, ``2h ago``). ValueError otherwise."""
    m = _RELATIVE.match(text)
    if m:
        now = now or datetime.now(timezone.utc)
        return now - timedelta(seconds=float(m.group(1)) * _UNITS[m.group(2).lower()])
    raw = text.strip()
    if raw.endswith(("Z", "z")):
        raw = raw[:-1] + "+00:00"
    try:
        when = datetime.fromisoformat(raw)
    except ValueError:
        raise ValueError(f"not a time: {text!r} (use ISO 8601 or an age like 2h, 30m, 1d)"
                         ) from None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def parse_boot(text: str) -> int | None:
    """``--boot``: ``all`` (None), ``0`` (the current boot), ``-1`` (the one before)..."""
    if text.strip().lower() == "all":
        return None
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"not a boot: {text!r} (use 0, -1, -2... or all)") from None
    if value > 0:
        raise ValueError(f"boot {value}: boots count back from 0 (current), -1, -2...")
    return value
